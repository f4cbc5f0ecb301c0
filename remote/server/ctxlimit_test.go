package server_test

import (
	"strings"
	"testing"

	"github.com/gpumux/gpumux/remote/fakecuda"
	"github.com/gpumux/gpumux/remote/proto"
)

// The fake device's threads at once: 132 multiprocessors of 2048 threads.
const fakeThreads = 132 * 2048

// TestCtxSetLimit: raising a limit charges its device memory to the
// quota, beyond which it is refused (and logged); lowering it or
// destroying the context gives it back.
func TestCtxSetLimit(t *testing.T) {
	e := start(t, envConfig{})
	const quota = 64 * mib
	cl := e.dial(t, e.token(t, "job", quota))
	ctx := primary(t, cl)
	used := func(want uint64) {
		t.Helper()
		if got := e.srv.QuotaUsed("job"); got != want {
			t.Errorf("QuotaUsed %d, want %d", got, want)
		}
	}
	stack := fakecuda.Limits[0]
	ok(t, "a stack 16 bytes larger")(cl.CtxSetLimit(ctx, 0, stack+16))
	used(16 * fakeThreads)
	v, r, err := cl.CtxGetLimit(ctx, 0)
	ok(t, "cuCtxGetLimit")(r, err)
	if v != stack+16 {
		t.Errorf("stack size %d, want %d", v, stack+16)
	}
	is(t, "a stack of 2 KiB (512 MiB of device memory)", proto.ErrOutOfMemory)(cl.CtxSetLimit(ctx, 0, 2048))
	if !strings.Contains(e.logs.String(), "limit=CU_LIMIT_STACK_SIZE value=2048") {
		t.Errorf("the refusal is not logged with the limit and value:\n%s", e.logs.String())
	}
	if v, _, _ := cl.CtxGetLimit(ctx, 0); v != stack+16 {
		t.Errorf("a refused stack size reached the driver: %d", v)
	}
	heap := fakecuda.Limits[2]
	ok(t, "a heap 32 MiB larger")(cl.CtxSetLimit(ctx, 2, heap+32*mib))
	used(16*fakeThreads + 32*mib)
	is(t, "a heap past the quota", proto.ErrOutOfMemory)(cl.CtxSetLimit(ctx, 2, heap+60*mib))
	ok(t, "the heap back to its default")(cl.CtxSetLimit(ctx, 2, heap))
	used(16 * fakeThreads)
	ok(t, "a smaller FIFO costs nothing")(cl.CtxSetLimit(ctx, 1, fakecuda.Limits[1]/2))
	ok(t, "a larger FIFO")(cl.CtxSetLimit(ctx, 1, fakecuda.Limits[1]+mib))
	used(16*fakeThreads + mib) // over the value before the first change
	ok(t, "more pending launches")(cl.CtxSetLimit(ctx, 4, fakecuda.Limits[4]+16))
	ok(t, "the L2 fetch granularity (a hint)")(cl.CtxSetLimit(ctx, 5, 32))
	ok(t, "no persisting L2 cache")(cl.CtxSetLimit(ctx, 6, 0))
	is(t, "a persisting L2 cache (the whole device's)", proto.ErrNotSupported)(cl.CtxSetLimit(ctx, 6, mib))
	is(t, "the device runtime's sync depth", proto.ErrUnsupportedLimit)(cl.CtxSetLimit(ctx, 3, 4))
	is(t, "an unknown limit", proto.ErrUnsupportedLimit)(cl.CtxSetLimit(ctx, 99, 1))
	is(t, "without a context", proto.ErrInvalidContext)(cl.CtxSetLimit(0, 0, stack))
	charged := 16*fakeThreads + mib + 16*2048
	used(uint64(charged))
	_, r, err = cl.MemAllocV2(ctx, quota-uint64(charged)+1)
	is(t, "cuMemAlloc beside the limits' memory", proto.ErrOutOfMemory)(r, err)

	// Another context's limits are its own; its destruction gives them
	// back, and so does the primary context's release.
	other, r, err := cl.CtxCreateV2(ctx, 0, 0)
	ok(t, "cuCtxCreate")(r, err)
	ok(t, "the other context's heap")(cl.CtxSetLimit(other, 2, heap+8*mib))
	used(uint64(charged) + 8*mib)
	ok(t, "cuCtxDestroy")(cl.CtxDestroyV2(other, other))
	used(uint64(charged))
	ok(t, "cuDevicePrimaryCtxRelease")(cl.DevicePrimaryCtxReleaseV2(0, 0))
	used(0)
}
