package server_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/gpumux/gpumux/remote/proto"
	"github.com/gpumux/gpumux/remote/server"
)

// poolAttr reads a pool attribute or fails the test.
func poolAttr(t *testing.T, cl *proto.Client, ctx, pool proto.Handle, attr uint32) uint64 {
	t.Helper()
	v, r, err := cl.MemPoolGetAttribute(ctx, pool, attr)
	ok(t, "cuMemPoolGetAttribute")(r, err)
	return v
}

// TestStreamOrderedAllocation: cuMemAllocAsync from the session's own
// default pool, within the quota, checked before the driver is asked; the
// driver's pools, and a migrating server's own (poolwindow.go).
func TestStreamOrderedAllocation(t *testing.T) {
	for _, migration := range []bool{false, true} {
		t.Run(fmt.Sprint("migration ", migration), func(t *testing.T) { streamOrderedAllocation(t, migration) })
	}
}

func streamOrderedAllocation(t *testing.T, migration bool) {
	cfg := envConfig{}
	if migration {
		cfg.srv = []server.Option{server.WithSecret(testSecret), server.WithMigration()}
	}
	e := start(t, cfg)
	const quota = 16 * mib
	cl := e.dial(t, e.token(t, "job", quota))
	ctx := primary(t, cl)
	st, r, err := cl.StreamCreate(ctx, 0)
	ok(t, "cuStreamCreate")(r, err)

	dflt, r, err := cl.DeviceGetDefaultMemPool(ctx, 0)
	ok(t, "cuDeviceGetDefaultMemPool")(r, err)
	cur, r, err := cl.DeviceGetMemPool(ctx, 0)
	ok(t, "cuDeviceGetMemPool")(r, err)
	if cur != dflt || dflt < 0x1000 {
		t.Errorf("current pool %#x, default %#x: want the session's default handle", cur, dflt)
	}

	p, r, err := cl.MemAllocAsync(ctx, 4*mib, st)
	ok(t, "cuMemAllocAsync")(r, err)
	data := random(4096, 2)
	ok(t, "cuMemcpyHtoDAsync")(cl.MemcpyHtoDAsyncV2(ctx, p+mib, data, 4096, st))
	got := make([]byte, 4096)
	ok(t, "cuMemcpyDtoHAsync")(cl.MemcpyDtoHAsyncV2(ctx, got, p+mib, 4096, st))
	if !bytes.Equal(got, data) {
		t.Error("a round trip through a pool allocation changed the data")
	}
	if used := e.srv.QuotaUsed("job"); used != 4*mib {
		t.Errorf("QuotaUsed %d, want %d", used, 4*mib)
	}
	if used := poolAttr(t, cl, ctx, dflt, proto.MemPoolUsedMemCurrent); used != 4*mib {
		t.Errorf("the default pool's used memory %d, want %d", used, 4*mib)
	}
	_, r, err = cl.MemAllocAsync(ctx, quota-4*mib+1, st)
	is(t, "cuMemAllocAsync past the quota", proto.ErrOutOfMemory)(r, err)
	if _, used := e.fake.PoolUsage(); !migration && used != 4*mib {
		t.Errorf("the backend's pools hold %d bytes, want %d: the driver was asked past the quota", used, 4*mib)
	}
	if st := e.fake.Stats(); migration && st.Physical != 1 {
		t.Errorf("the backend holds %d physical allocations, want the one chunk: the driver was asked past the quota", st.Physical)
	}
	ok(t, "cuMemFreeAsync (sent)")(cl.MemFreeAsync(ctx, p, st))
	ok(t, "cuMemFreeAsync")(cl.StreamSynchronize(ctx, st))
	if used := e.srv.QuotaUsed("job"); used != 0 {
		t.Errorf("QuotaUsed %d after the free, want 0", used)
	}
	ok(t, "cuMemFreeAsync twice (sent)")(cl.MemFreeAsync(ctx, p, st))
	is(t, "cuMemFreeAsync twice", proto.ErrInvalidValue)(cl.CtxSynchronize(ctx))

	// The whole quota, from the pool; cuMemFree frees it as well.
	p, r, err = cl.MemAllocFromPoolAsync(ctx, quota, dflt, 0)
	ok(t, "cuMemAllocFromPoolAsync of the whole quota")(r, err)
	_, r, err = cl.MemAllocV2(ctx, 1)
	is(t, "cuMemAlloc beside it", proto.ErrOutOfMemory)(r, err)
	ok(t, "cuMemFree of a pool allocation")(cl.MemFreeV2(ctx, p))

	// A pool of the client's own, made current.
	pool, r, err := cl.MemPoolCreate(ctx, proto.MemAllocationTypePinned, 0, proto.MemLocationTypeDevice, 0, 0, 0)
	ok(t, "cuMemPoolCreate")(r, err)
	ok(t, "cuDeviceSetMemPool")(cl.DeviceSetMemPool(ctx, 0, pool))
	p, r, err = cl.MemAllocAsync(ctx, mib, st)
	ok(t, "cuMemAllocAsync from the current pool")(r, err)
	if used := poolAttr(t, cl, ctx, pool, proto.MemPoolUsedMemCurrent); used != mib {
		t.Errorf("the current pool's used memory %d, want %d", used, mib)
	}
	// Destroyed with an allocation live: the allocation stays usable
	// until freed, the device's current pool is the default again.
	ok(t, "cuMemPoolDestroy")(cl.MemPoolDestroy(ctx, pool))
	cur, r, err = cl.DeviceGetMemPool(ctx, 0)
	ok(t, "cuDeviceGetMemPool")(r, err)
	if cur != dflt {
		t.Errorf("current pool %#x after destroying it, want the default %#x", cur, dflt)
	}
	ok(t, "a copy to a destroyed pool's allocation")(cl.MemcpyHtoDV2(ctx, p, data, 4096))
	ok(t, "cuMemFreeAsync (sent)")(cl.MemFreeAsync(ctx, p, st))
	ok(t, "cuMemFreeAsync of a destroyed pool's allocation")(cl.CtxSynchronize(ctx))
	is(t, "cuMemPoolDestroy twice", proto.ErrInvalidHandle)(cl.MemPoolDestroy(ctx, pool))
	is(t, "cuMemPoolDestroy of the default pool", proto.ErrInvalidValue)(cl.MemPoolDestroy(ctx, dflt))
	if used := e.srv.QuotaUsed("job"); used != 0 {
		t.Errorf("QuotaUsed %d, want 0", used)
	}
}

// TestPoolRefusals: what the server checks of pools and their calls.
func TestPoolRefusals(t *testing.T) {
	e := start(t, envConfig{fake: fakeDevices(2), srv: insecure()})
	cl := e.dial(t, "")
	ctx := primary(t, cl)
	dflt, r, err := cl.DeviceGetDefaultMemPool(ctx, 0)
	ok(t, "cuDeviceGetDefaultMemPool")(r, err)
	dflt1, r, err := cl.DeviceGetDefaultMemPool(ctx, 1)
	ok(t, "cuDeviceGetDefaultMemPool of device 1")(r, err)
	if dflt1 == dflt {
		t.Error("devices 0 and 1 share a default pool")
	}
	_, r, err = cl.DeviceGetDefaultMemPool(ctx, 2)
	is(t, "the default pool of a device the client does not have", proto.ErrInvalidDevice)(r, err)
	is(t, "cuDeviceSetMemPool of another device's pool", proto.ErrInvalidValue)(cl.DeviceSetMemPool(ctx, 0, dflt1))
	is(t, "cuDeviceSetMemPool of an unknown pool", proto.ErrInvalidHandle)(cl.DeviceSetMemPool(ctx, 0, 0x7777))

	creates := []struct {
		name                        string
		allocType, handles, locType uint32
		locID                       int32
		usage                       uint32
		want                        proto.Result
	}{
		{"managed memory", proto.MemAllocationTypeManaged, 0, 1, 0, 0, proto.ErrNotSupported},
		{"an invalid type", 0, 0, 1, 0, 0, proto.ErrInvalidValue},
		{"host memory", 1, 0, proto.MemLocationTypeHost, 0, 0, proto.ErrNotSupported},
		{"a device the client does not have", 1, 0, 1, 5, 0, proto.ErrInvalidDevice},
		{"fabric handles", 1, proto.MemHandleTypeFabric, 1, 0, 0, proto.ErrNotSupported},
		{"a usage", 1, 0, 1, 0, 1, proto.ErrNotSupported},
		{"POSIX file descriptors (made without)", 1, proto.MemHandleTypePosixFD, 1, 1, 0, proto.Success},
	}
	for _, tt := range creates {
		_, r, err := cl.MemPoolCreate(ctx, tt.allocType, tt.handles, tt.locType, tt.locID, 0, tt.usage)
		is(t, "cuMemPoolCreate of "+tt.name, tt.want)(r, err)
	}

	attrs := []struct {
		name  string
		attr  uint32
		value uint64
		want  proto.Result
	}{
		{"reuse opportunistic off", proto.MemPoolReuseAllowOpportunistic, 0, proto.Success},
		{"a reuse flag of 2", proto.MemPoolReuseAllowOpportunistic, 2, proto.ErrInvalidValue},
		{"the release threshold", proto.MemPoolReleaseThreshold, ^uint64(0), proto.Success},
		{"a reset of the used high-water mark", proto.MemPoolUsedMemHigh, 0, proto.Success},
		{"a used high-water mark of 5", proto.MemPoolUsedMemHigh, 5, proto.ErrInvalidValue},
		{"the reserved memory (read-only)", proto.MemPoolReservedMemCurrent, 0, proto.ErrInvalidValue},
		{"an unknown attribute", 99, 0, proto.ErrInvalidValue},
	}
	for _, tt := range attrs {
		is(t, "cuMemPoolSetAttribute of "+tt.name, tt.want)(cl.MemPoolSetAttribute(ctx, dflt, tt.attr, tt.value))
	}
	if v := poolAttr(t, cl, ctx, dflt, proto.MemPoolReleaseThreshold); v != ^uint64(0) {
		t.Errorf("release threshold %#x, want what the client set", v)
	}
	if v := poolAttr(t, cl, ctx, dflt, proto.MemPoolReuseAllowOpportunistic); v != 0 {
		t.Errorf("reuse opportunistic %d, want 0", v)
	}
	_, r, err = cl.MemPoolGetAttribute(ctx, dflt, 9)
	is(t, "an attribute gpumux does not forward", proto.ErrInvalidValue)(r, err)

	ok(t, "cuMemPoolSetAccess for device 1")(cl.MemPoolSetAccess(ctx, dflt, rw(1)))
	f, r, err := cl.MemPoolGetAccess(ctx, dflt, proto.MemLocationTypeDevice, 1)
	ok(t, "cuMemPoolGetAccess")(r, err)
	if f != proto.MemAccessReadWrite {
		t.Errorf("device 1's access %d, want read-write", f)
	}
	is(t, "cuMemPoolSetAccess for a device the client does not have", proto.ErrInvalidDevice)(cl.MemPoolSetAccess(ctx, dflt, rw(7)))
	_, r, err = cl.MemPoolGetAccess(ctx, dflt, proto.MemLocationTypeDevice, 7)
	is(t, "cuMemPoolGetAccess for a device the client does not have", proto.ErrInvalidDevice)(r, err)
	_, r, err = cl.MemAllocAsync(ctx, 0, 0)
	is(t, "cuMemAllocAsync of nothing", proto.ErrInvalidValue)(r, err)
	_, r, err = cl.MemAllocAsync(ctx, mib, 0x7777)
	is(t, "cuMemAllocAsync on an unknown stream", proto.ErrInvalidHandle)(r, err)
	_, r, err = cl.MemAllocAsync(0, mib, 0)
	is(t, "cuMemAllocAsync without a context", proto.ErrInvalidContext)(r, err)
	plain := alloc(t, cl, ctx, 4096)
	ok(t, "cuMemFreeAsync of cuMemAlloc's memory (sent)")(cl.MemFreeAsync(ctx, plain, 0))
	is(t, "cuMemFreeAsync of cuMemAlloc's memory", proto.ErrInvalidValue)(cl.CtxSynchronize(ctx))
}

// TestPoolsAreOwn: each client allocates from pools of its own, frees only
// its own allocations, and its pools and their memory go with it.
func TestPoolsAreOwn(t *testing.T) {
	e := start(t, envConfig{})
	a := e.dial(t, e.token(t, "job-a", 0))
	b := e.dial(t, e.token(t, "job-b", 0))
	actx, bctx := primary(t, a), primary(t, b)
	ap, r, err := a.MemAllocAsync(actx, mib, 0)
	ok(t, "A cuMemAllocAsync")(r, err)
	apool, r, err := a.MemPoolCreate(actx, 1, 0, 1, 0, 0, 0)
	ok(t, "A cuMemPoolCreate")(r, err)
	bp, r, err := b.MemAllocAsync(bctx, mib, 0)
	ok(t, "B cuMemAllocAsync")(r, err)
	if st := e.fake.Stats(); st.Pools != 3 {
		t.Errorf("the backend has %d pools, want A's two and B's own default", st.Pools)
	}
	ok(t, "B frees A's allocation (sent)")(b.MemFreeAsync(bctx, ap, 0))
	is(t, "B frees A's allocation", proto.ErrInvalidValue)(b.CtxSynchronize(bctx))
	is(t, "B destroys A's pool", proto.ErrInvalidHandle)(b.MemPoolDestroy(bctx, apool))
	_, r, err = b.MemAllocFromPoolAsync(bctx, mib, apool, 0)
	is(t, "B allocates from A's pool", proto.ErrInvalidHandle)(r, err)
	is(t, "B reads A's allocation", proto.ErrInvalidValue)(b.MemcpyDtoHV2(bctx, make([]byte, 8), ap, 8))
	_ = bp

	a.Close()
	b.Close()
	e.waitClean(t)
	if reserved, used := e.fake.PoolUsage(); reserved != 0 || used != 0 {
		t.Errorf("pools hold %d bytes reserved, %d used after the clients went", reserved, used)
	}
}

// TestPoolsHeldNearTheQuota: memory a session's pools keep past what is
// allocated from them is trimmed once it passes the quota.
func TestPoolsHeldNearTheQuota(t *testing.T) {
	e := start(t, envConfig{})
	const quota = 8 * mib
	cl := e.dial(t, e.token(t, "job", quota))
	ctx := primary(t, cl)
	dflt, r, err := cl.DeviceGetDefaultMemPool(ctx, 0)
	ok(t, "cuDeviceGetDefaultMemPool")(r, err)
	other, r, err := cl.MemPoolCreate(ctx, 1, 0, 1, 0, 0, 0)
	ok(t, "cuMemPoolCreate")(r, err)
	for _, p := range []proto.Handle{dflt, other} {
		ok(t, "keep everything")(cl.MemPoolSetAttribute(ctx, p, proto.MemPoolReleaseThreshold, ^uint64(0)))
	}
	p, r, err := cl.MemAllocFromPoolAsync(ctx, 6*mib, dflt, 0)
	ok(t, "an allocation from the default pool")(r, err)
	ok(t, "cuMemFreeAsync")(cl.MemFreeAsync(ctx, p, 0))
	if reserved, _ := e.fake.PoolUsage(); reserved != 6*mib {
		t.Fatalf("the pools reserve %d after the free, want the 6 MiB kept", reserved)
	}
	_, r, err = cl.MemAllocFromPoolAsync(ctx, 6*mib, other, 0)
	ok(t, "an allocation from the other pool")(r, err)
	if reserved, _ := e.fake.PoolUsage(); reserved != 6*mib {
		t.Errorf("the pools reserve %d, want the default pool trimmed to leave the 6 MiB in use", reserved)
	}
	// In all, no more than the quota.
	_, r, err = cl.MemAllocFromPoolAsync(ctx, 4*mib, other, 0)
	is(t, "past the quota", proto.ErrOutOfMemory)(r, err)
}
