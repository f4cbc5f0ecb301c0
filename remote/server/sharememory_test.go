package server_test

import (
	"testing"

	"github.com/gpumux/gpumux/remote/proto"
)

// shareMemory is one answer of cuGpumuxShareMemory.
type shareMemory struct {
	total, used, own uint64
	contexts         uint32
}

func askShareMemory(t *testing.T, cl *proto.Client, dev int32) shareMemory {
	t.Helper()
	var m shareMemory
	var r proto.Result
	var err error
	m.total, m.used, m.own, m.contexts, r, err = cl.GpumuxShareMemory(0, dev)
	ok(t, "cuGpumuxShareMemory")(r, err)
	return m
}

// TestGpumuxShareMemory: the share's memory for the NVML library, asked
// without a context: total the quota, used what the token ID's connections
// hold together, own and contexts the asking connection's.
func TestGpumuxShareMemory(t *testing.T) {
	const quota = 4 << 20
	e := start(t, envConfig{})
	tok := e.token(t, "job-nvml", quota)
	c1, c2 := e.dial(t, tok), e.dial(t, tok)

	if got, want := askShareMemory(t, c1, 0), (shareMemory{total: quota}); got != want {
		t.Errorf("before anything: %+v, want %+v", got, want)
	}
	x1 := primary(t, c1)
	alloc(t, c1, x1, 1<<20)
	x2 := primary(t, c2)
	p2 := alloc(t, c2, x2, 512<<10)
	if _, r, err := c2.CtxCreateV2(x2, 0, 0); err != nil || r != proto.Success {
		t.Fatalf("cuCtxCreate: %v %v", r, err)
	}
	for _, tc := range []struct {
		name string
		cl   *proto.Client
		want shareMemory
	}{
		{"the first connection", c1, shareMemory{total: quota, used: 1<<20 + 512<<10, own: 1 << 20, contexts: 1}},
		{"the second connection", c2, shareMemory{total: quota, used: 1<<20 + 512<<10, own: 512 << 10, contexts: 2}},
	} {
		if got := askShareMemory(t, tc.cl, 0); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
	ok(t, "cuMemFree")(c2.MemFreeV2(x2, p2))
	if got, want := askShareMemory(t, c2, 0), (shareMemory{total: quota, used: 1 << 20, contexts: 2}); got != want {
		t.Errorf("after the free: %+v, want %+v", got, want)
	}
	// Another ID's memory is not the share's.
	other := e.dial(t, e.token(t, "job-other", quota))
	alloc(t, other, primary(t, other), 2<<20)
	if got := askShareMemory(t, c1, 0); got.used != 1<<20 {
		t.Errorf("with another ID's allocation: used %d, want %d", got.used, 1<<20)
	}

	// A device the token does not name.
	_, _, _, _, r, err := c1.GpumuxShareMemory(0, 1)
	is(t, "device 1", proto.ErrInvalidDevice)(r, err)
}

// TestGpumuxShareMemoryUnlimited: without a quota the total is the device's
// and used what the ID's connections hold.
func TestGpumuxShareMemoryUnlimited(t *testing.T) {
	e := start(t, envConfig{})
	cl := e.dial(t, e.token(t, "job", 0))
	alloc(t, cl, primary(t, cl), 3<<20)
	if got, want := askShareMemory(t, cl, 0), (shareMemory{total: 16 << 30, used: 3 << 20, own: 3 << 20, contexts: 1}); got != want {
		t.Errorf("%+v, want %+v", got, want)
	}
}
