package server

import (
	"github.com/gpumux/gpumux/remote/proto"
)

// Stream-ordered allocation and memory pools: cuMemAllocAsync,
// cuMemFreeAsync, cuMemPool* (PyTorch's cudaMallocAsync backend).
//
// A device's default pool belongs to the process, and with shared tenant
// processes the process is every tenant's: memory one tenant frees could
// be handed to another without being cleared. So the server never uses
// it. Each session gets its own pool per device, made on first use, which
// the client sees as the device's default pool (cuDeviceGetDefaultMemPool)
// and, until it sets another (cuDeviceSetMemPool, answered here), as the
// device's current pool that cuMemAllocAsync allocates from.
//
// Each allocation is charged to the quota when the call is made (beyond
// the quota it is CUDA_ERROR_OUT_OF_MEMORY, and the driver is not asked)
// and given back when it is freed (cuMemFreeAsync, cuMemFree, or with its
// context). What a pool keeps reserved beyond what is allocated from it
// (freed memory kept for reuse, rounding) is not charged; the server holds
// it near the quota instead: every pool of a session with a quota is made
// with a maximum size of the quota (rounded up to poolSizeAlign), the
// release threshold the driver sees is at most the quota (the client reads
// back what it set), and when a session's pools together reserve more than
// its quota after an allocation, the server trims them to what is in use
// (cuMemPoolTrimTo). Pools are destroyed when the client goes.
//
// On a server WithMigration the pools are the session's own memory, which
// a migration carries (windowPool, poolwindow.go); else the driver's
// (driverPool).

// maxPools bounds the pools a session may create (its default pools
// besides).
const maxPools = 64

// poolSizeAlign is the granularity pool sizes are rounded up to (the
// driver's large page).
const poolSizeAlign = 2 << 20

// memPool is what a session's pool allocates from.
type memPool interface {
	// alloc allocates n bytes in stream order on st, a stream of ctx,
	// which is current; free frees p so, freeNow at once, with its
	// context current (cuMemFree).
	alloc(ctx *ctxState, n uint64, st uintptr) (proto.DevPtr, proto.Result)
	free(ctx *ctxState, p proto.DevPtr, st uintptr) proto.Result
	freeNow(p proto.DevPtr) proto.Result
	// synced is told of the client's synchronizing calls; forgetCtx that
	// ctx is going, its work done.
	synced()
	forgetCtx(ctx *ctxState)
	attribute(attr uint32) (uint64, proto.Result)
	setAttribute(attr uint32, v uint64) proto.Result
	trimTo(keep uint64) proto.Result
	// setAccess takes descriptors of backend devices; access answers for
	// one.
	setAccess(ds []proto.MemAccessDesc) proto.Result
	access(locType uint32, dev int32) (uint32, proto.Result)
	destroy() proto.Result
}

// driverPool is a pool of the driver.
type driverPool struct {
	be  Backend
	raw uintptr
}

func (d driverPool) alloc(_ *ctxState, n uint64, st uintptr) (proto.DevPtr, proto.Result) {
	return d.be.MemAllocFromPoolAsync(n, d.raw, st)
}
func (d driverPool) free(_ *ctxState, p proto.DevPtr, st uintptr) proto.Result {
	return d.be.MemFreeAsync(p, st)
}
func (d driverPool) freeNow(p proto.DevPtr) proto.Result { return d.be.MemFree(p) }
func (d driverPool) synced()                             {}
func (d driverPool) forgetCtx(*ctxState)                 {}
func (d driverPool) attribute(attr uint32) (uint64, proto.Result) {
	return d.be.MemPoolGetAttribute(d.raw, attr)
}
func (d driverPool) setAttribute(attr uint32, v uint64) proto.Result {
	return d.be.MemPoolSetAttribute(d.raw, attr, v)
}
func (d driverPool) trimTo(keep uint64) proto.Result { return d.be.MemPoolTrimTo(d.raw, keep) }
func (d driverPool) setAccess(ds []proto.MemAccessDesc) proto.Result {
	return d.be.MemPoolSetAccess(d.raw, ds)
}
func (d driverPool) access(locType uint32, dev int32) (uint32, proto.Result) {
	return d.be.MemPoolGetAccess(d.raw, locType, dev)
}
func (d driverPool) destroy() proto.Result { return d.be.MemPoolDestroy(d.raw) }

// poolState is one of the session's pools.
type poolState struct {
	h         proto.Handle
	mem       memPool
	dev       int32  // the client's device
	dflt      bool   // the session's default pool of dev
	threshold uint64 // the release threshold as the client set it
	allocs    int    // live allocations from it
	destroyed bool   // destroyed while allocations were live
}

// poolTable is a session's pools.
type poolTable struct {
	byHandle map[proto.Handle]*poolState
	dflt     map[int32]*poolState // by client device
	current  map[int32]*poolState // cuDeviceSetMemPool, by client device
	created  int
}

func (t *poolTable) init() {
	t.byHandle = map[proto.Handle]*poolState{}
	t.dflt = map[int32]*poolState{}
	t.current = map[int32]*poolState{}
}

// poolCap is the most a pool of the session may hold: the quota rounded up
// to poolSizeAlign, or 0 without a quota.
func (s *session) poolCap() uint64 {
	limit, _ := s.quota.left()
	if limit == 0 || limit > ^uint64(0)-poolSizeAlign {
		return limit
	}
	return (limit + poolSizeAlign - 1) &^ (poolSizeAlign - 1)
}

// newPool makes a pool on client device dev for the session.
func (s *session) newPool(dev int32, props proto.MemPoolProps, dflt bool) (*poolState, proto.Result) {
	return s.newPoolAt(s.handle(), dev, props, dflt, s.migration)
}

// newPoolAt is newPool with the pool's handle h (a restore's is the
// snapshot's): its maximum size is capped by the session's quota, and
// its memory is the session's own (windowPool) where window says (a
// migratable server's, a restored one's), else a driver pool.
func (s *session) newPoolAt(h proto.Handle, dev int32, props proto.MemPoolProps, dflt, window bool) (*poolState, proto.Result) {
	real, r := s.device(dev)
	if r != ok {
		return nil, r
	}
	props.LocType, props.LocID = proto.MemLocationTypeDevice, real
	if limit := s.poolCap(); limit > 0 && (props.MaxSize == 0 || props.MaxSize > limit) {
		props.MaxSize = limit
	}
	var mem memPool
	if window {
		w, r := newWindowPool(s, real, props)
		if r != ok {
			return nil, r
		}
		mem = w
	} else {
		raw, r := s.be.MemPoolCreate(props)
		if r != ok {
			return nil, r
		}
		mem = driverPool{be: s.be, raw: raw}
	}
	p := &poolState{h: h, mem: mem, dev: dev, dflt: dflt}
	s.pools.byHandle[p.h] = p
	return p, ok
}

// defaultPool returns the session's default pool of client device dev,
// made on first use.
func (s *session) defaultPool(dev int32) (*poolState, proto.Result) {
	if p := s.pools.dflt[dev]; p != nil {
		return p, ok
	}
	p, r := s.newPool(dev, proto.MemPoolProps{AllocType: proto.MemAllocationTypePinned}, true)
	if r != ok {
		return nil, r
	}
	s.pools.dflt[dev] = p
	return p, ok
}

// currentPool is the pool cuMemAllocAsync uses on client device dev.
func (s *session) currentPool(dev int32) (*poolState, proto.Result) {
	if p := s.pools.current[dev]; p != nil {
		return p, ok
	}
	return s.defaultPool(dev)
}

// pool resolves a pool handle of the session.
func (s *session) pool(h proto.Handle) (*poolState, proto.Result) {
	p := s.pools.byHandle[h]
	if p == nil {
		return nil, proto.ErrInvalidHandle
	}
	return p, ok
}

func (s *session) DeviceGetDefaultMemPool(c *proto.Call, dev int32) (proto.Handle, proto.Result) {
	if r := s.maybeCurrent(c); r != ok {
		return 0, r
	}
	p, r := s.defaultPool(dev)
	if r != ok {
		return 0, r
	}
	return p.h, ok
}

func (s *session) DeviceGetMemPool(c *proto.Call, dev int32) (proto.Handle, proto.Result) {
	if r := s.maybeCurrent(c); r != ok {
		return 0, r
	}
	p, r := s.currentPool(dev)
	if r != ok {
		return 0, r
	}
	return p.h, ok
}

// DeviceSetMemPool is answered here: the driver's current pool is the
// process's, every tenant's.
func (s *session) DeviceSetMemPool(c *proto.Call, dev int32, h proto.Handle) proto.Result {
	if r := s.maybeCurrent(c); r != ok {
		return r
	}
	if _, r := s.device(dev); r != ok {
		return r
	}
	p, r := s.pool(h)
	if r != ok {
		return r
	}
	if p.dev != dev {
		return proto.ErrInvalidValue
	}
	s.pools.current[dev] = p
	return ok
}

// MemPoolCreate makes a pool of pinned memory on one of the client's
// devices (shareable handles as for cuMemCreate, virtual.go).
func (s *session) MemPoolCreate(c *proto.Call, allocType, handleTypes, locType uint32, locID int32, maxSize uint64, usage uint32) (proto.Handle, proto.Result) {
	if r := s.maybeCurrent(c); r != ok {
		return 0, r
	}
	switch allocType {
	case proto.MemAllocationTypePinned:
	case proto.MemAllocationTypeManaged:
		return 0, proto.ErrNotSupported
	default:
		return 0, proto.ErrInvalidValue
	}
	if _, r := s.location(locType, locID); r != ok {
		return 0, r
	}
	if r := s.handleTypes("cuMemPoolCreate", handleTypes); r != ok {
		return 0, r
	}
	if usage > 0xffff {
		return 0, proto.ErrInvalidValue
	}
	if usage != 0 {
		return 0, proto.ErrNotSupported
	}
	if s.pools.created >= maxPools {
		return 0, proto.ErrOutOfMemory
	}
	p, r := s.newPool(locID, proto.MemPoolProps{AllocType: allocType, MaxSize: maxSize}, false)
	if r != ok {
		return 0, r
	}
	s.pools.created++
	return p.h, ok
}

// MemPoolDestroy destroys a pool the client created; its live allocations
// stay valid until freed, as in CUDA. A device whose current pool it was
// goes back to its default.
func (s *session) MemPoolDestroy(c *proto.Call, h proto.Handle) proto.Result {
	if r := s.maybeCurrent(c); r != ok {
		return r
	}
	p, r := s.pool(h)
	if r != ok {
		return r
	}
	if p.dflt {
		return proto.ErrInvalidValue
	}
	if r := p.mem.destroy(); r != ok {
		return r
	}
	s.forgetPool(p)
	return ok
}

// forgetPool drops a pool the backend has destroyed.
func (s *session) forgetPool(p *poolState) {
	delete(s.pools.byHandle, p.h)
	if s.pools.current[p.dev] == p {
		delete(s.pools.current, p.dev)
	}
	if s.pools.dflt[p.dev] == p {
		delete(s.pools.dflt, p.dev)
	}
	if !p.dflt {
		s.pools.created--
	}
	p.destroyed = true
}

// MemAllocAsync allocates from the current pool of the stream's device
// (the current context's).
func (s *session) MemAllocAsync(c *proto.Call, n uint64, hs proto.Handle) (proto.DevPtr, proto.Result) {
	ctx, r := s.current(c)
	if r != ok {
		return 0, r
	}
	p, r := s.currentPool(ctx.dev)
	if r != ok {
		return 0, r
	}
	return s.poolAlloc(ctx, p, n, hs)
}

func (s *session) MemAllocFromPoolAsync(c *proto.Call, n uint64, h, hs proto.Handle) (proto.DevPtr, proto.Result) {
	ctx, r := s.current(c)
	if r != ok {
		return 0, r
	}
	p, r := s.pool(h)
	if r != ok {
		return 0, r
	}
	return s.poolAlloc(ctx, p, n, hs)
}

// poolAlloc allocates n bytes from pool on a stream of ctx, within the
// quota.
func (s *session) poolAlloc(ctx *ctxState, p *poolState, n uint64, hs proto.Handle) (proto.DevPtr, proto.Result) {
	st, r := s.stream(ctx, hs)
	if r != ok {
		return 0, r
	}
	if r := s.use(ctx); r != ok {
		return 0, r
	}
	ptr, r := s.allocate(&allocation{size: n, ctx: ctx, pool: p},
		func() (proto.DevPtr, proto.Result) { return p.mem.alloc(ctx, n, st) },
		func(ptr proto.DevPtr) proto.Result { return p.mem.free(ctx, ptr, st) })
	if r != ok {
		return 0, r
	}
	p.allocs++
	s.trimPools()
	return ptr, ok
}

// trimPools trims the session's pools to what is in use when together
// they reserve more than its quota.
func (s *session) trimPools() {
	limit, _ := s.quota.left()
	if limit == 0 {
		return
	}
	var reserved uint64
	for _, h := range sortedHandles(s.pools.byHandle) {
		n, r := s.pools.byHandle[h].mem.attribute(proto.MemPoolReservedMemCurrent)
		if r != ok {
			return
		}
		reserved += n
	}
	if reserved <= limit {
		return
	}
	s.log.Debug("trimming memory pools reserved past the quota", "reserved", reserved, "quota", limit)
	for _, h := range sortedHandles(s.pools.byHandle) {
		s.warn("cuMemPoolTrimTo", s.pools.byHandle[h].mem.trimTo(0))
	}
}

// MemFreeAsync frees an allocation from a pool in stream order; its bytes
// go back to the quota now.
func (s *session) MemFreeAsync(c *proto.Call, ptr proto.DevPtr, hs proto.Handle) proto.Result {
	ctx, r := s.current(c)
	if r != ok {
		return r
	}
	st, r := s.stream(ctx, hs)
	if r != ok {
		return r
	}
	a := s.find(ptr, 0)
	if a == nil || a.base != ptr || a.pool == nil {
		return proto.ErrInvalidValue
	}
	if r := a.pool.mem.free(ctx, ptr, st); r != ok {
		return r
	}
	s.forget(a)
	return ok
}

// MemPoolSetAttribute sets the reuse policies, the release threshold (at
// most the quota for the driver) and resets the high-water marks.
func (s *session) MemPoolSetAttribute(c *proto.Call, h proto.Handle, attr uint32, value uint64) proto.Result {
	if r := s.maybeCurrent(c); r != ok {
		return r
	}
	p, r := s.pool(h)
	if r != ok {
		return r
	}
	switch attr {
	case proto.MemPoolReuseFollowEventDependencies, proto.MemPoolReuseAllowOpportunistic,
		proto.MemPoolReuseAllowInternalDependencies:
		if value > 1 {
			return proto.ErrInvalidValue
		}
		return p.mem.setAttribute(attr, value)
	case proto.MemPoolReleaseThreshold:
		return s.setThreshold(p, value)
	case proto.MemPoolReservedMemHigh, proto.MemPoolUsedMemHigh:
		if value != 0 { // only a reset
			return proto.ErrInvalidValue
		}
		return p.mem.setAttribute(attr, value)
	}
	return proto.ErrInvalidValue
}

// setThreshold sets p's release threshold to v as the client sees it, at
// most the quota left as the pool honours it.
func (s *session) setThreshold(p *poolState, v uint64) proto.Result {
	honoured := v
	if limit, _ := s.quota.left(); limit > 0 {
		honoured = min(v, limit)
	}
	if r := p.mem.setAttribute(proto.MemPoolReleaseThreshold, honoured); r != ok {
		return r
	}
	p.threshold = v
	return ok
}

// MemPoolGetAttribute answers the release threshold as the client set it,
// the rest from the driver.
func (s *session) MemPoolGetAttribute(c *proto.Call, h proto.Handle, attr uint32) (uint64, proto.Result) {
	if r := s.maybeCurrent(c); r != ok {
		return 0, r
	}
	p, r := s.pool(h)
	if r != ok {
		return 0, r
	}
	switch {
	case attr == proto.MemPoolReleaseThreshold:
		return p.threshold, ok
	case attr >= proto.MemPoolReuseFollowEventDependencies && attr <= proto.MemPoolUsedMemHigh:
		return p.mem.attribute(attr)
	}
	return 0, proto.ErrInvalidValue
}

func (s *session) MemPoolTrimTo(c *proto.Call, h proto.Handle, keep uint64) proto.Result {
	if r := s.maybeCurrent(c); r != ok {
		return r
	}
	p, r := s.pool(h)
	if r != ok {
		return r
	}
	return p.mem.trimTo(keep)
}

// MemPoolSetAccess sets access to a pool's memory for the client's
// devices.
func (s *session) MemPoolSetAccess(c *proto.Call, h proto.Handle, blob []byte) proto.Result {
	if r := s.maybeCurrent(c); r != ok {
		return r
	}
	p, r := s.pool(h)
	if r != ok {
		return r
	}
	ds, _, r := s.accessDescs(blob)
	if r != ok {
		return r
	}
	return p.mem.setAccess(ds)
}

func (s *session) MemPoolGetAccess(c *proto.Call, h proto.Handle, locType uint32, locID int32) (uint32, proto.Result) {
	if r := s.maybeCurrent(c); r != ok {
		return 0, r
	}
	p, r := s.pool(h)
	if r != ok {
		return 0, r
	}
	dev, r := s.location(locType, locID)
	if r != ok {
		return 0, r
	}
	return p.mem.access(locType, dev)
}

// capturing reports whether stream st (of the current context) is being
// captured; only a session with a capture under way has such a stream.
func (s *session) capturing(st uintptr) bool {
	if len(s.captures) == 0 {
		return false
	}
	status, r := s.be.StreamIsCapturing(st)
	return r == ok && status != proto.CaptureNone
}

// synced tells the session's pools of a synchronizing call that returned
// r, and returns r.
func (s *session) synced(r proto.Result) proto.Result {
	if r == ok {
		for _, p := range s.pools.byHandle { // in any order: each its own
			p.mem.synced()
		}
	}
	return r
}

// poolsForget vacates what was freed in stream order on ctx's streams: it
// is going, its work done.
func (s *session) poolsForget(ctx *ctxState) {
	for _, p := range s.pools.byHandle { // in any order: each its own
		p.mem.forgetCtx(ctx)
	}
}

// destroyPools destroys the session's pools (cleanup); allocations still
// live in them are freed with their contexts.
func (s *session) destroyPools() int {
	n := 0
	for _, h := range sortedHandles(s.pools.byHandle) {
		p := s.pools.byHandle[h]
		s.warn("cuMemPoolDestroy", p.mem.destroy())
		s.forgetPool(p)
		n++
	}
	return n
}
