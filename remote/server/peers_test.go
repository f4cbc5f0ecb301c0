package server_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpumux/gpumux/remote/fakecuda"
	"github.com/gpumux/gpumux/remote/proto"
	"github.com/gpumux/gpumux/remote/server"
	"github.com/gpumux/gpumux/remote/token"
)

// twoGPUs is a token of GPUs devs (in the client's order) with a quota.
func twoGPUs(t *testing.T, id string, quota uint64, devs ...int) string {
	t.Helper()
	return mint(t, testSecret, token.Claims{ID: id, Quota: quota, Device: devs[0], MoreDevices: devs[1:],
		Expires: time.Now().Add(time.Hour)})
}

// pattern is n bytes that differ from one seed to another.
func pattern(seed byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

// TestTokenOfSeveralGPUs: a token of GPUs 2 and 0 shows the client two
// devices, its device 0 being GPU 2 and its device 1 GPU 0, in process and
// with tenant processes (the claims travel with the handoff).
func TestTokenOfSeveralGPUs(t *testing.T) {
	for _, mode := range []struct {
		name string
		srv  []server.Option
	}{
		{"in-process", []server.Option{server.WithSecret(testSecret)}},
		{"tenant processes", tenantOptsDevices(3)},
	} {
		t.Run(mode.name, func(t *testing.T) {
			e := start(t, envConfig{fake: fakeDevices(3), srv: mode.srv})
			e.fake.Init()
			cl := e.dial(t, twoGPUs(t, "job", 0, 2, 0))
			n, r, err := cl.DeviceGetCount(0)
			ok(t, "cuDeviceGetCount")(r, err)
			if n != 2 {
				t.Fatalf("%d devices, want 2", n)
			}
			for client, backend := range []int32{2, 0} {
				want, _ := e.fake.DeviceUUID(backend)
				got, r, err := cl.DeviceGetUuidV2(0, int32(client))
				ok(t, "cuDeviceGetUuid_v2")(r, err)
				if got != want {
					t.Errorf("device %d has UUID %x, want GPU %d's %x", client, got, backend, want)
				}
				name, r, err := cl.DeviceGetName(0, 64, int32(client))
				ok(t, "cuDeviceGetName")(r, err)
				if name != fakecuda.DefaultName {
					t.Errorf("device %d is named %q, want %q", client, name, fakecuda.DefaultName)
				}
			}
			_, r, err = cl.DeviceGet(0, 2)
			is(t, "cuDeviceGet(2)", proto.ErrInvalidDevice)(r, err)
		})
	}
}

// TestTokenOfSeveralGPUsRefused: a token naming a GPU the server lacks is
// refused at the handshake; admission counts a quota of several GPUs on
// each of them, and an ID admitted on some GPUs is refused on others.
func TestTokenOfSeveralGPUsRefused(t *testing.T) {
	e := start(t, envConfig{fake: []fakecuda.Option{fakecuda.WithDevices(2), fakecuda.WithMemory(16 << 30)}})
	refused := func(tok, want string) {
		t.Helper()
		_, err := proto.Dial(t.Context(), e.network, e.addr, proto.Hello{Token: tok}, 0)
		if !errors.Is(err, proto.ErrRefused) || !strings.Contains(err.Error(), want) {
			t.Errorf("dial: %v, want refused with %q", err, want)
		}
	}
	refused(twoGPUs(t, "far", 0, 0, 2), "the token names GPU 2, this server has 2")
	e.dial(t, twoGPUs(t, "both", 10<<30, 0, 1))
	refused(mint(t, testSecret, token.Claims{ID: "one", Quota: 8 << 30, Device: 1, Expires: time.Now().Add(time.Hour)}),
		"GPU 1 cannot take a quota of 8192 MiB: the tenants it serves hold quotas of 10240 MiB of its 16384 MiB")
	refused(twoGPUs(t, "both", 1<<30, 1, 0), "token ID both is admitted on GPUs [0 1]; a token of it for GPUs [1 0] is refused")
	e.dial(t, mint(t, testSecret, token.Claims{ID: "one", Quota: 6 << 30, Device: 1, Expires: time.Now().Add(time.Hour)}))
	if got := e.srv.Admitted(); got["both"] != 10<<30 || got["one"] != 6<<30 {
		t.Errorf("admitted %v", got)
	}

	// A pool's probe finds where the GPUs end with a token without a quota
	// for the one past the last: refused as any other, logged at debug.
	probeEnd := mint(t, testSecret, token.Claims{ID: "probe-x", Device: 2, Expires: time.Now().Add(time.Hour)})
	refused(probeEnd, "the token names GPU 2, this server has 2")
	// The server logs a refusal after sending it.
	var debug, warn int
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		logs := e.logs.String()
		debug = strings.Count(logs, "level=DEBUG msg=\"handshake refused\"")
		warn = strings.Count(logs, "level=WARN msg=\"handshake refused\"")
		if debug >= 1 && warn >= 3 || time.Now().After(deadline) {
			break
		}
	}
	if debug != 1 {
		t.Errorf("%d refusals at debug level, want the probe's one:\n%s", debug, e.logs.String())
	}
	if warn != 3 {
		t.Errorf("%d refusals as warnings, want the 3 others:\n%s", warn, e.logs.String())
	}
}

// peers is a client of two devices with a primary context on each.
type peers struct {
	cl         *proto.Client
	ctx0, ctx1 proto.Handle
}

func twoDevices(t *testing.T, e *env, tok string) peers {
	t.Helper()
	cl := e.dial(t, tok)
	p := peers{cl: cl, ctx0: primary(t, cl)}
	h, r, err := cl.DevicePrimaryCtxRetain(0, 1)
	ok(t, "cuDevicePrimaryCtxRetain(1)")(r, err)
	p.ctx1 = h
	for want, ctx := range []proto.Handle{p.ctx0, p.ctx1} {
		dev, r, err := cl.CtxGetDevice(ctx)
		ok(t, "cuCtxGetDevice")(r, err)
		if dev != int32(want) {
			t.Fatalf("context %#x is on device %d, want %d", ctx, dev, want)
		}
	}
	return p
}

// TestPeerCopies: memory on both devices, copies between them both ways by
// cuMemcpyPeer, cuMemcpyPeerAsync and a plain device-to-device copy
// (unified addressing: the server makes it a peer copy; the fake refuses
// any other), the data checked; a copy naming the other device's context
// for its memory is refused.
func TestPeerCopies(t *testing.T) {
	e := start(t, envConfig{fake: fakeDevices(2), srv: insecure()})
	p := twoDevices(t, e, "")
	cl := p.cl
	const n = 3<<20 + 123 // several chunks
	a0, a1 := alloc(t, cl, p.ctx0, n), alloc(t, cl, p.ctx1, n)
	data := pattern(1, n)
	upload(t, cl, p.ctx0, a0, data)

	ok(t, "cuMemcpyPeer 0→1")(cl.MemcpyPeer(p.ctx0, a1, p.ctx1, a0, p.ctx0, n))
	if got := download(t, cl, p.ctx1, a1, n); !bytes.Equal(got, data) {
		t.Fatal("device 1 after cuMemcpyPeer from device 0 differs")
	}

	back := pattern(9, n)
	upload(t, cl, p.ctx1, a1, back)
	st, r, err := cl.StreamCreate(p.ctx1, 0)
	ok(t, "cuStreamCreate")(r, err)
	ok(t, "cuMemcpyPeerAsync 1→0")(cl.MemcpyPeerAsync(p.ctx1, a0, p.ctx0, a1, p.ctx1, n, st))
	ok(t, "cuStreamSynchronize")(cl.StreamSynchronize(p.ctx1, st))
	if got := download(t, cl, p.ctx0, a0, n); !bytes.Equal(got, back) {
		t.Fatal("device 0 after cuMemcpyPeerAsync from device 1 differs")
	}

	third := pattern(42, 4096)
	upload(t, cl, p.ctx0, a0+100, third)
	ok(t, "cuMemcpyDtoD 0→1 (unified)")(cl.MemcpyDtoDV2(p.ctx1, a1+5, a0+100, 4096))
	ok(t, "cuMemcpyDtoDAsync 1→0 (unified)")(cl.MemcpyDtoDAsyncV2(p.ctx0, a0+n-4096, a1+5, 4096, 0))
	if got := download(t, cl, p.ctx0, a0+n-4096, 4096); !bytes.Equal(got, third) {
		t.Fatal("a device-to-device copy there and back between devices differs")
	}

	for _, tc := range []struct {
		name string
		got  outcome
		want proto.Result
	}{
		{"dst named with device 0's context", result(cl.MemcpyPeer(p.ctx0, a1, p.ctx0, a0, p.ctx0, 64)), proto.ErrInvalidValue},
		{"src named with device 1's context", result(cl.MemcpyPeer(p.ctx0, a1, p.ctx1, a0, p.ctx1, 64)), proto.ErrInvalidValue},
		{"past the end", result(cl.MemcpyPeer(p.ctx0, a1+n-10, p.ctx1, a0, p.ctx0, 64)), proto.ErrInvalidValue},
		{"a context that is not one", result(cl.MemcpyPeer(p.ctx0, a1, 0x7777, a0, p.ctx0, 64)), proto.ErrInvalidContext},
		{"no current context", result(cl.MemcpyPeer(0, a1, p.ctx1, a0, p.ctx0, 64)), proto.ErrInvalidContext},
		{"a stream of the other context", result(cl.MemcpyPeerAsync(p.ctx0, a1, p.ctx1, a0, p.ctx0, 64, st)), proto.ErrInvalidHandle},
	} {
		// The failure of the async one comes with the next call that waits.
		r, err := tc.got.r, tc.got.err
		if r == proto.Success && err == nil {
			r, err = cl.CtxSynchronize(p.ctx0)
		}
		if err != nil || r != tc.want {
			t.Errorf("%s: %v, %v; want %v", tc.name, r, err, tc.want)
		}
	}
}

// fillSync runs the fill_u32 kernel f on ctx's default stream and waits
// for it: the launch's failure, or the synchronization's.
func fillSync(cl *proto.Client, ctx, f proto.Handle, dst proto.DevPtr, v uint32, n uint64) (proto.Result, error) {
	if r, err := launch1(cl, ctx, f, 0, fillParams(dst, v, n)); err != nil || r != proto.Success {
		return r, err
	}
	return cl.CtxSynchronize(ctx)
}

// outcome is a call's result and error, for tables of calls.
type outcome struct {
	r   proto.Result
	err error
}

func result(r proto.Result, err error) outcome { return outcome{r, err} }

// TestPeerAccessAndPointers: peer access from device 0's context to device
// 1's lets a kernel on device 0 write device 1's memory (before, the fake
// faults it, as a GPU would); the driver's checks come through; a pointer
// on device 1 answers its own context and device whatever is current.
func TestPeerAccessAndPointers(t *testing.T) {
	e := start(t, envConfig{fake: fakeDevices(2), srv: insecure()})
	p := twoDevices(t, e, "")
	cl := p.cl
	can, r, err := cl.DeviceCanAccessPeer(0, 0, 1)
	ok(t, "cuDeviceCanAccessPeer(0, 1)")(r, err)
	self, r, err := cl.DeviceCanAccessPeer(0, 1, 1)
	ok(t, "cuDeviceCanAccessPeer(1, 1)")(r, err)
	if can != 1 || self != 0 {
		t.Errorf("cuDeviceCanAccessPeer: 0→1 %d, 1→1 %d; want 1 and 0", can, self)
	}
	_, r, err = cl.DeviceCanAccessPeer(0, 0, 2)
	is(t, "cuDeviceCanAccessPeer of a device not there", proto.ErrInvalidDevice)(r, err)
	v, r, err := cl.DeviceGetP2PAttribute(0, 2, 1, 0) // ACCESS_SUPPORTED
	ok(t, "cuDeviceGetP2PAttribute")(r, err)
	if v != 1 {
		t.Errorf("access supported: %d, want 1", v)
	}
	_, r, err = cl.DeviceGetP2PAttribute(0, 2, 1, 1)
	is(t, "cuDeviceGetP2PAttribute of one device", proto.ErrInvalidDevice)(r, err)

	a1 := alloc(t, cl, p.ctx1, 64)
	_, fns := module(t, cl, p.ctx0)
	fill := func() (proto.Result, error) { return fillSync(cl, p.ctx0, fns["fill_u32"], a1, 0xabcd, 16) }
	is(t, "a kernel on device 0 writing device 1's memory", proto.ErrIllegalAddress)(fill())
	is(t, "cuCtxDisablePeerAccess before enabling", proto.ErrPeerAccessNotEnabled)(cl.CtxDisablePeerAccess(p.ctx0, p.ctx1))
	is(t, "cuCtxEnablePeerAccess of its own context", proto.ErrInvalidContext)(cl.CtxEnablePeerAccess(p.ctx0, p.ctx0, 0))
	is(t, "cuCtxEnablePeerAccess of no context", proto.ErrInvalidContext)(cl.CtxEnablePeerAccess(p.ctx0, 0x7777, 0))
	is(t, "cuCtxEnablePeerAccess without a current context", proto.ErrInvalidContext)(cl.CtxEnablePeerAccess(0, p.ctx1, 0))
	ok(t, "cuCtxEnablePeerAccess")(cl.CtxEnablePeerAccess(p.ctx0, p.ctx1, 0))
	is(t, "cuCtxEnablePeerAccess again", proto.ErrPeerAccessAlreadyEnabled)(cl.CtxEnablePeerAccess(p.ctx0, p.ctx1, 0))
	ok(t, "the kernel after cuCtxEnablePeerAccess")(fill())
	got := download(t, cl, p.ctx1, a1, 64)
	if !bytes.Equal(got[:4], []byte{0xcd, 0xab, 0, 0}) || !bytes.Equal(got[60:], []byte{0xcd, 0xab, 0, 0}) {
		t.Errorf("device 1's memory after the kernel on device 0: % x", got)
	}
	ok(t, "cuCtxDisablePeerAccess")(cl.CtxDisablePeerAccess(p.ctx0, p.ctx1))

	base, size, ctx, dev, r, err := cl.PointerGetAttributes(p.ctx0, a1+10)
	ok(t, "cuPointerGetAttributes")(r, err)
	if base != a1 || size != 64 || ctx != p.ctx1 || dev != 1 {
		t.Errorf("pointer record of device 1's memory, asked in device 0's context: base %#x size %d ctx %#x device %d; want %#x 64 %#x 1",
			base, size, ctx, dev, a1, p.ctx1)
	}
	_, _, _, _, r, err = cl.PointerGetAttributes(0, a1+64)
	is(t, "cuPointerGetAttributes past the allocation", proto.ErrInvalidValue)(r, err)
}

// TestPeersOfAnotherClient: a client cannot name another client's memory
// or contexts in peer calls, and its allocations on both devices count
// against its one quota.
func TestPeersOfAnotherClient(t *testing.T) {
	e := start(t, envConfig{fake: fakeDevices(2)})
	a := twoDevices(t, e, twoGPUs(t, "a", 3<<20, 0, 1))
	b := twoDevices(t, e, twoGPUs(t, "b", 0, 0, 1))
	a0 := alloc(t, a.cl, a.ctx0, 2<<20)
	_, r, err := a.cl.MemAllocV2(a.ctx1, 2<<20)
	is(t, "2 MiB on device 1 beside 2 MiB on device 0, in a quota of 3 MiB", proto.ErrOutOfMemory)(r, err)
	a1 := alloc(t, a.cl, a.ctx1, 1<<20)
	if got := e.srv.QuotaUsed("a"); got != 3<<20 {
		t.Errorf("QuotaUsed: %d, want 3 MiB over both devices", got)
	}
	free, total, r, err := a.cl.MemGetInfoV2(a.ctx1)
	ok(t, "cuMemGetInfo on device 1")(r, err)
	if free != 0 || total != 3<<20 {
		t.Errorf("cuMemGetInfo on device 1: %d free of %d; want 0 of the 3 MiB quota", free, total)
	}

	b1 := alloc(t, b.cl, b.ctx1, 1<<20)
	// Handles count up per client: a's third context has a handle b has
	// not had.
	aCtx, r, err := a.cl.CtxCreateV2(a.ctx0, 0, 1)
	ok(t, "cuCtxCreate")(r, err)
	for _, tc := range []struct {
		name string
		got  outcome
		want proto.Result
	}{
		{"a's memory as the source", result(b.cl.MemcpyPeer(b.ctx0, b1, b.ctx1, a0, b.ctx0, 64)), proto.ErrInvalidValue},
		{"a's memory as the destination", result(b.cl.MemcpyPeer(b.ctx0, a1, b.ctx1, b1, b.ctx1, 64)), proto.ErrInvalidValue},
		{"a's context", result(b.cl.MemcpyPeer(b.ctx0, b1, aCtx, b1, b.ctx1, 64)), proto.ErrInvalidContext},
		{"a's memory device to device", result(b.cl.MemcpyDtoDV2(b.ctx0, b1, a0, 64)), proto.ErrInvalidValue},
		{"peer access to a's context", result(b.cl.CtxEnablePeerAccess(b.ctx0, aCtx, 0)), proto.ErrInvalidContext},
	} {
		if tc.got.err != nil || tc.got.r != tc.want {
			t.Errorf("%s: %v, %v; want %v", tc.name, tc.got.r, tc.got.err, tc.want)
		}
	}
	if _, _, _, _, r, err := b.cl.PointerGetAttributes(b.ctx0, a0); err != nil || r != proto.ErrInvalidValue {
		t.Errorf("b asking about a's memory: %v, %v; want CUDA_ERROR_INVALID_VALUE", r, err)
	}
	a.cl.Close()
	b.cl.Close()
	e.waitClean(t)
}
