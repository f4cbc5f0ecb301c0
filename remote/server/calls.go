package server

import (
	"io"

	"github.com/gpumux/gpumux/remote/proto"
)

// The session runs the forwarded calls.
var _ proto.Handler = (*session)(nil)

const ok = proto.Success

// Init: the server initialised the backend before admitting anyone.
func (s *session) Init(c *proto.Call, flags uint32) proto.Result {
	if flags != 0 {
		return proto.ErrInvalidValue
	}
	return ok
}

func (s *session) DriverGetVersion(c *proto.Call) (int32, proto.Result) {
	return s.be.DriverVersion()
}

func (s *session) DeviceGetCount(c *proto.Call) (int32, proto.Result) {
	return int32(len(s.devs)), ok
}

func (s *session) DeviceGet(c *proto.Call, ordinal int32) (int32, proto.Result) {
	if _, r := s.device(ordinal); r != ok {
		return 0, r
	}
	return ordinal, ok
}

// DeviceGetName truncates the name to length-1 bytes, as CUDA does.
func (s *session) DeviceGetName(c *proto.Call, length int32, dev int32) (string, proto.Result) {
	real, r := s.device(dev)
	if r != ok {
		return "", r
	}
	if length <= 0 {
		return "", proto.ErrInvalidValue
	}
	name, r := s.be.DeviceName(real)
	if r != ok {
		return "", r
	}
	if n := min(int(length)-1, proto.MaxString); len(name) > n {
		name = name[:n]
	}
	return name, ok
}

// DeviceTotalMemV2 reports the quota when it is smaller than the device.
func (s *session) DeviceTotalMemV2(c *proto.Call, dev int32) (uint64, proto.Result) {
	real, r := s.device(dev)
	if r != ok {
		return 0, r
	}
	total, r := s.be.DeviceTotalMem(real)
	if r != ok {
		return 0, r
	}
	if limit, _ := s.quota.left(); limit > 0 {
		total = min(total, limit)
	}
	return total, ok
}

func (s *session) DeviceGetAttribute(c *proto.Call, attrib int32, dev int32) (int32, proto.Result) {
	real, r := s.device(dev)
	if r != ok {
		return 0, r
	}
	return s.be.DeviceAttribute(attrib, real)
}

func (s *session) DeviceGetUuid(c *proto.Call, dev int32) ([16]byte, proto.Result) {
	real, r := s.device(dev)
	if r != ok {
		return [16]byte{}, r
	}
	return s.be.DeviceUUID(real)
}

func (s *session) DeviceGetUuidV2(c *proto.Call, dev int32) ([16]byte, proto.Result) {
	return s.DeviceGetUuid(c, dev)
}

func (s *session) primaryOf(dev int32) (*primaryState, proto.Result) {
	if _, r := s.device(dev); r != ok {
		return nil, r
	}
	p := s.primary[dev]
	if p == nil {
		p = &primaryState{}
		s.primary[dev] = p
	}
	return p, ok
}

// DevicePrimaryCtxRetain gives the client its own "primary" context of
// dev, made on first use and counted.
func (s *session) DevicePrimaryCtxRetain(c *proto.Call, dev int32) (proto.Handle, proto.Result) {
	p, r := s.primaryOf(dev)
	if r != ok {
		return 0, r
	}
	if p.ctx == nil {
		ctx, r := s.createCtx(dev, p.flags, true)
		if r != ok {
			return 0, r
		}
		p.ctx, p.refs = ctx, 0
	}
	p.refs++
	return p.ctx.h, ok
}

// DevicePrimaryCtxReleaseV2 drops a reference; the last one destroys the
// context and everything in it.
func (s *session) DevicePrimaryCtxReleaseV2(c *proto.Call, dev int32) proto.Result {
	p, r := s.primaryOf(dev)
	if r != ok {
		return r
	}
	if p.ctx == nil || p.refs == 0 {
		return proto.ErrInvalidContext
	}
	p.refs--
	if p.refs == 0 {
		s.destroyCtx(p.ctx)
	}
	return ok
}

func (s *session) DevicePrimaryCtxGetState(c *proto.Call, dev int32) (uint32, int32, proto.Result) {
	p, r := s.primaryOf(dev)
	if r != ok {
		return 0, 0, r
	}
	active := int32(0)
	if p.ctx != nil {
		active = 1
	}
	return p.flags, active, ok
}

// DevicePrimaryCtxSetFlagsV2 sets the flags the client's primary context
// of dev is made with next.
func (s *session) DevicePrimaryCtxSetFlagsV2(c *proto.Call, dev int32, flags uint32) proto.Result {
	p, r := s.primaryOf(dev)
	if r != ok {
		return r
	}
	if flags > 0xff {
		return proto.ErrInvalidValue
	}
	p.flags = flags
	return ok
}

// DevicePrimaryCtxResetV2 destroys the client's primary context of dev
// and everything in it at once, and forgets its flags.
func (s *session) DevicePrimaryCtxResetV2(c *proto.Call, dev int32) proto.Result {
	p, r := s.primaryOf(dev)
	if r != ok {
		return r
	}
	if p.ctx != nil {
		s.destroyCtx(p.ctx)
	}
	p.ctx, p.refs, p.flags = nil, 0, 0
	return ok
}

func (s *session) CtxCreateV2(c *proto.Call, flags uint32, dev int32) (proto.Handle, proto.Result) {
	ctx, r := s.createCtx(dev, flags, false)
	if r != ok {
		return 0, r
	}
	return ctx.h, ok
}

// CtxDestroyV2 destroys a context the client created (not a primary one)
// and everything in it.
func (s *session) CtxDestroyV2(c *proto.Call, h proto.Handle) proto.Result {
	ctx := s.ctxs[h]
	if ctx == nil || ctx.primary {
		return proto.ErrInvalidContext
	}
	s.destroyCtx(ctx)
	return ok
}

func (s *session) CtxSynchronize(c *proto.Call) proto.Result {
	if _, r := s.current(c); r != ok {
		return r
	}
	return s.synced(s.be.CtxSynchronize())
}

func (s *session) CtxGetDevice(c *proto.Call) (int32, proto.Result) {
	ctx := s.ctxs[c.Ctx]
	if ctx == nil {
		return 0, proto.ErrInvalidContext
	}
	return ctx.dev, ok
}

// MemAllocV2 allocates within the client's quota.
func (s *session) MemAllocV2(c *proto.Call, n uint64) (proto.DevPtr, proto.Result) {
	ctx, r := s.current(c)
	if r != ok {
		return 0, r
	}
	a := &allocation{size: n, ctx: ctx}
	return s.allocate(a, func() (proto.DevPtr, proto.Result) { return s.memAlloc(ctx, a) },
		func(proto.DevPtr) proto.Result { return s.memFree(a, true) })
}

// allocate charges a's size to the quota, has the backend allocate it
// (alloc) and records it at the address it got; the charge goes back if
// either fails (free undoes an allocation the session cannot record).
func (s *session) allocate(a *allocation, alloc func() (proto.DevPtr, proto.Result), free func(proto.DevPtr) proto.Result) (proto.DevPtr, proto.Result) {
	if a.size == 0 {
		return 0, proto.ErrInvalidValue
	}
	if !s.charge(a.size) {
		return 0, proto.ErrOutOfMemory
	}
	p, r := alloc()
	if r != ok {
		s.uncharge(a.size)
		return 0, r
	}
	a.base = p
	if !s.addAlloc(a) {
		s.log.Error("the backend returned an address the client already holds", "addr", p, "size", a.size)
		free(p)
		s.uncharge(a.size)
		return 0, proto.ErrUnknown
	}
	return p, ok
}

// MemFreeV2 frees one of the client's allocations (its base address).
// Freeing 0 does nothing, as with CUDA (cudaFree(NULL), which libraries
// such as cuBLAS call to make sure a context exists, reaches it).
func (s *session) MemFreeV2(c *proto.Call, p proto.DevPtr) proto.Result {
	if _, r := s.current(c); r != ok {
		return r
	}
	if p == 0 {
		return ok
	}
	a := s.find(p, 0)
	if a == nil || a.base != p || !a.charged() {
		return proto.ErrInvalidValue
	}
	if r := s.use(a.ctx); r != ok {
		return r
	}
	if r := s.memFree(a, false); r != ok {
		return r
	}
	s.forget(a)
	return ok
}

// forget drops an allocation the backend has freed and gives its bytes
// back to the quota.
func (s *session) forget(a *allocation) {
	s.removeAlloc(a)
	s.inUse -= a.size
	s.quota.release(a.size)
	if a.pool != nil {
		a.pool.allocs--
	}
}

// charge takes n bytes from the quota for the session, or reports false.
func (s *session) charge(n uint64) bool {
	if !s.quota.reserve(n) {
		return false
	}
	s.inUse += n
	s.stats.peakMemory = max(s.stats.peakMemory, s.inUse)
	return true
}

// uncharge gives n bytes back.
func (s *session) uncharge(n uint64) {
	s.inUse -= min(n, s.inUse)
	s.quota.release(n)
}

// MemGetInfoV2 reports the device's memory, capped by the quota.
func (s *session) MemGetInfoV2(c *proto.Call) (uint64, uint64, proto.Result) {
	if _, r := s.current(c); r != ok {
		return 0, 0, r
	}
	free, total, r := s.be.MemGetInfo()
	if r != ok {
		return 0, 0, r
	}
	if limit, left := s.quota.left(); limit > 0 {
		free, total = min(free, left), limit
	}
	return free, total, ok
}

// span checks that [p, p+n) lies within one of the client's allocations,
// or within its mappings of physical memory (cuMemMap), which may follow
// each other without a gap, and returns the address the backend has p at
// (p itself unless p is in a relocated global: relocate.go).
func (s *session) span(p proto.DevPtr, n uint64) (proto.DevPtr, proto.Result) {
	if a := s.find(p, n); a != nil {
		return a.real(p), ok
	}
	if s.mapped(p, n) == nil {
		return 0, proto.ErrInvalidValue
	}
	return p, ok
}

// stream resolves a stream argument for work in the current context ctx:
// a default stream, or a stream of ctx.
func (s *session) stream(ctx *ctxState, h proto.Handle) (uintptr, proto.Result) {
	if h <= 2 {
		return uintptr(h), ok
	}
	st := s.streams[h]
	if st == nil || st.ctx != ctx {
		return 0, proto.ErrInvalidHandle
	}
	return st.raw, ok
}

// currentStream validates the call's current context and a stream of it
// (stream), and makes the context current.
func (s *session) currentStream(c *proto.Call, hs proto.Handle) (*ctxState, uintptr, proto.Result) {
	ctx, r := s.current(c)
	if r != ok {
		return nil, 0, r
	}
	st, r := s.stream(ctx, hs)
	return ctx, st, r
}

// copyIn streams host data to dst chunk by chunk.
func (s *session) copyIn(c *proto.Call, dst proto.DevPtr, in *proto.HostIn, n uint64, hs proto.Handle, async bool) proto.Result {
	ctx, st, r := s.currentStream(c, hs)
	if r != ok {
		return r
	}
	if r := s.refuseHostCopy(streamKey{ctx, st}); r != ok {
		return r
	}
	if n == 0 {
		return ok
	}
	if dst, r = s.span(dst, n); r != ok {
		return r
	}
	// Every chunk is queued on the stream (staged by the backend), so the
	// GPU copies one chunk while the next arrives; a synchronous copy
	// waits for its stream once, at the end.
	for off := uint64(0); ; {
		p, err := in.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return proto.ErrUnknown // Dispatch reports the broken stream
		}
		s.stats.bytesIn += uint64(len(p))
		s.counts.bytesToDevice.Add(uint64(len(p)))
		if r := s.be.MemcpyHtoD(dst+proto.DevPtr(off), p, st, true); r != ok {
			return r // Dispatch drains the rest
		}
		off += uint64(len(p))
	}
	if async {
		return ok
	}
	return s.be.StreamSynchronize(st)
}

// copyOut streams device memory at src back chunk by chunk.
func (s *session) copyOut(c *proto.Call, out *proto.HostOut, src proto.DevPtr, n uint64, hs proto.Handle) proto.Result {
	ctx, st, r := s.currentStream(c, hs)
	if r != ok {
		return r
	}
	if r := s.refuseHostCopy(streamKey{ctx, st}); r != ok {
		return r
	}
	if n == 0 {
		return ok
	}
	if src, r = s.span(src, n); r != ok {
		return r
	}
	if n <= proto.ChunkSize {
		// One chunk: nothing to overlap, so no sender goroutine.
		buf := s.chunk(0)[:n]
		if r := s.be.MemcpyDtoH(buf, src, st); r != ok {
			return r
		}
		if _, err := out.Write(buf); err != nil {
			return proto.ErrUnknown // Dispatch reports the transport error
		}
		s.stats.bytesOut += n
		s.counts.bytesToHost.Add(n)
		return ok
	}
	// The GPU fills one buffer while the others go to the client.
	free := make(chan []byte, copyBuffers)
	for i := range copyBuffers {
		free <- s.chunk(i)
	}
	full := make(chan []byte, copyBuffers)
	sent := make(chan error, 1)
	go func() {
		var err error
		for b := range full {
			if err == nil {
				_, err = out.Write(b)
			}
			free <- b[:cap(b)]
		}
		sent <- err
	}()
	r = ok
	for off := uint64(0); off < n; {
		buf, _ := recv(free, s.busyPoll)
		k := min(n-off, uint64(len(buf)))
		if r = s.be.MemcpyDtoH(buf[:k], src+proto.DevPtr(off), st); r != ok {
			break
		}
		full <- buf[:k]
		s.stats.bytesOut += k
		s.counts.bytesToHost.Add(k)
		off += k
	}
	close(full)
	if err := <-sent; err != nil {
		return proto.ErrUnknown // Dispatch reports the transport error
	}
	return r
}

// copyBuffers is the number of chunk buffers a device-to-host copy
// cycles through.
const copyBuffers = 4

// chunk returns the session's copy buffer i (below copyBuffers).
func (s *session) chunk(i int) []byte {
	if s.bufs[i] == nil {
		s.bufs[i] = make([]byte, proto.ChunkSize)
	}
	return s.bufs[i]
}

func (s *session) copyDD(c *proto.Call, dst, src proto.DevPtr, n uint64, hs proto.Handle, async bool) proto.Result {
	cur, st, r := s.currentStream(c, hs)
	if r != ok {
		return r
	}
	if n == 0 {
		return ok
	}
	d, sp, r := s.copyEnds(dst, src, n, cur)
	if r != ok {
		return r
	}
	if d.dev == sp.dev {
		return s.be.MemcpyDtoD(d.p, sp.p, n, st, async)
	}
	// Memory of two devices (unified addressing): a peer copy, between
	// contexts of the two devices.
	if d.ctx == nil || sp.ctx == nil {
		return proto.ErrInvalidContext
	}
	return s.be.MemcpyPeer(d.p, d.ctx.raw, sp.p, sp.ctx.raw, n, st, async)
}

func (s *session) MemcpyHtoDV2(c *proto.Call, dst proto.DevPtr, in *proto.HostIn, n uint64) proto.Result {
	return s.copyIn(c, dst, in, n, 0, false)
}

func (s *session) MemcpyDtoHV2(c *proto.Call, out *proto.HostOut, src proto.DevPtr, n uint64) proto.Result {
	return s.copyOut(c, out, src, n, 0)
}

func (s *session) MemcpyDtoDV2(c *proto.Call, dst, src proto.DevPtr, n uint64) proto.Result {
	return s.copyDD(c, dst, src, n, 0, false)
}

func (s *session) MemcpyHtoDAsyncV2(c *proto.Call, dst proto.DevPtr, in *proto.HostIn, n uint64, hs proto.Handle) proto.Result {
	return s.copyIn(c, dst, in, n, hs, true)
}

func (s *session) MemcpyDtoHAsyncV2(c *proto.Call, out *proto.HostOut, src proto.DevPtr, n uint64, hs proto.Handle) proto.Result {
	return s.copyOut(c, out, src, n, hs)
}

func (s *session) MemcpyDtoDAsyncV2(c *proto.Call, dst, src proto.DevPtr, n uint64, hs proto.Handle) proto.Result {
	return s.copyDD(c, dst, src, n, hs, true)
}

// memset checks and runs cuMemsetD8/D32 (width 1 or 4 bytes).
func (s *session) memset(c *proto.Call, dst proto.DevPtr, v uint32, n uint64, width uint64, hs proto.Handle, async bool) proto.Result {
	_, st, r := s.currentStream(c, hs)
	if r != ok {
		return r
	}
	if width == 1 && v > 0xff {
		return proto.ErrInvalidValue
	}
	if n == 0 {
		return ok
	}
	if n > ^uint64(0)/width || uint64(dst)%width != 0 {
		return proto.ErrInvalidValue
	}
	if dst, r = s.span(dst, n*width); r != ok {
		return r
	}
	if width == 1 {
		return s.be.MemsetD8(dst, uint8(v), n, st, async)
	}
	return s.be.MemsetD32(dst, v, n, st, async)
}

func (s *session) MemsetD8V2(c *proto.Call, dst proto.DevPtr, uc uint32, n uint64) proto.Result {
	return s.memset(c, dst, uc, n, 1, 0, false)
}

func (s *session) MemsetD32V2(c *proto.Call, dst proto.DevPtr, ui uint32, n uint64) proto.Result {
	return s.memset(c, dst, ui, n, 4, 0, false)
}

func (s *session) MemsetD8Async(c *proto.Call, dst proto.DevPtr, uc uint32, n uint64, hs proto.Handle) proto.Result {
	return s.memset(c, dst, uc, n, 1, hs, true)
}

func (s *session) MemsetD32Async(c *proto.Call, dst proto.DevPtr, ui uint32, n uint64, hs proto.Handle) proto.Result {
	return s.memset(c, dst, ui, n, 4, hs, true)
}

// MemGetAddressRangeV2 answers from the client's own allocations.
func (s *session) MemGetAddressRangeV2(c *proto.Call, p proto.DevPtr) (proto.DevPtr, uint64, proto.Result) {
	if _, r := s.current(c); r != ok {
		return 0, 0, r
	}
	a := s.find(p, 0)
	if a == nil {
		return 0, 0, proto.ErrInvalidValue
	}
	return a.base, a.size, ok
}

func (s *session) ModuleLoadData(c *proto.Call, image []byte) (proto.Handle, proto.Result) {
	ctx, r := s.current(c)
	if r != ok {
		return 0, r
	}
	raw, r := s.be.ModuleLoadData(image)
	if r != ok {
		return 0, r
	}
	m := &moduleState{h: s.handle(), raw: raw, ctx: ctx,
		funcs: map[string]proto.Handle{}, globals: map[string]*allocation{}}
	if s.migration {
		m.image = image
	}
	s.mods[m.h] = m
	return m.h, ok
}

func (s *session) ModuleUnload(c *proto.Call, h proto.Handle) proto.Result {
	m := s.mods[h]
	if m == nil {
		return proto.ErrInvalidHandle
	}
	if s.holdsGraphs(m.ctx) {
		return proto.ErrIllegalState // a graph may run its kernels (calls_graph.go)
	}
	if r := s.use(m.ctx); r != ok {
		return r
	}
	if r := s.be.ModuleUnload(m.raw); r != ok {
		return r
	}
	s.forgetModule(m)
	return ok
}

// ModuleGetFunction returns one handle per kernel name.
func (s *session) ModuleGetFunction(c *proto.Call, h proto.Handle, name string) (proto.Handle, proto.Result) {
	m := s.mods[h]
	if m == nil {
		return 0, proto.ErrInvalidHandle
	}
	if name == "" {
		return 0, proto.ErrInvalidValue
	}
	if fh, found := m.funcs[name]; found {
		return fh, ok
	}
	if r := s.use(m.ctx); r != ok {
		return 0, r
	}
	raw, r := s.be.ModuleGetFunction(m.raw, name)
	if r != ok {
		return 0, r
	}
	f := &funcState{h: s.handle(), raw: raw, mod: m}
	s.funcs[f.h] = f
	m.funcs[name] = f.h
	return f.h, ok
}

// ModuleGetGlobalV2 makes the global one of the client's allocations.
func (s *session) ModuleGetGlobalV2(c *proto.Call, h proto.Handle, name string) (proto.DevPtr, uint64, proto.Result) {
	m := s.mods[h]
	if m == nil {
		return 0, 0, proto.ErrInvalidHandle
	}
	if name == "" {
		return 0, 0, proto.ErrInvalidValue
	}
	if a, found := m.globals[name]; found {
		return a.base, a.size, ok
	}
	if r := s.use(m.ctx); r != ok {
		return 0, 0, r
	}
	p, n, r := s.be.ModuleGetGlobal(m.raw, name)
	if r != ok {
		return 0, 0, r
	}
	a := &allocation{base: p, size: n, ctx: m.ctx, mod: m}
	if !s.addAlloc(a) {
		s.log.Error("the backend returned a global overlapping the client's memory", "addr", p, "size", n)
		return 0, 0, proto.ErrUnknown
	}
	m.globals[name] = a
	return p, n, ok
}

// params returns a function's parameter layout, asking the backend once.
func (s *session) params(f *funcState) ([]param, proto.Result) {
	if f.params != nil {
		return f.params, ok
	}
	if r := s.use(f.mod.ctx); r != ok {
		return nil, r
	}
	ps := []param{}
	for i := range uint64(maxParams) {
		off, size, r := s.be.FuncParamInfo(f.raw, i)
		if r == proto.ErrInvalidValue {
			break
		}
		if r != ok {
			return nil, r
		}
		ps = append(ps, param{off, size})
	}
	f.params = ps
	return ps, ok
}

func (s *session) FuncGetParamInfo(c *proto.Call, h proto.Handle, index uint64) (uint64, uint64, proto.Result) {
	f := s.funcs[h]
	if f == nil {
		return 0, 0, proto.ErrInvalidHandle
	}
	ps, r := s.params(f)
	if r != ok {
		return 0, 0, r
	}
	if index >= uint64(len(ps)) {
		return 0, 0, proto.ErrInvalidValue
	}
	return ps[index].offset, ps[index].size, ok
}

func (s *session) FuncGetAttribute(c *proto.Call, attrib int32, h proto.Handle) (int32, proto.Result) {
	f := s.funcs[h]
	if f == nil {
		return 0, proto.ErrInvalidHandle
	}
	if r := s.use(f.mod.ctx); r != ok {
		return 0, r
	}
	return s.be.FuncGetAttribute(attrib, f.raw)
}

// LaunchKernel launches a function of the current context on one of its
// streams, with a parameter buffer of exactly the kernel's packed size.
func (s *session) LaunchKernel(c *proto.Call, h proto.Handle, gx, gy, gz, bx, by, bz, shared uint32, hs proto.Handle, params []byte) proto.Result {
	f, _, st, r := s.launchArgs(c, h, [3]uint32{gx, gy, gz}, [3]uint32{bx, by, bz}, hs, params)
	if r != ok {
		return r
	}
	return s.be.LaunchKernel(f.raw, [3]uint32{gx, gy, gz}, [3]uint32{bx, by, bz}, shared, st, params)
}

// launchArgs checks a launch: a function and a stream of the current
// context, no empty dimension, and a parameter buffer of exactly the
// kernel's packed size. It leaves the context current in the backend.
func (s *session) launchArgs(c *proto.Call, h proto.Handle, grid, block [3]uint32, hs proto.Handle, params []byte) (*funcState, *ctxState, uintptr, proto.Result) {
	ctx, r := s.current(c)
	if r != ok {
		return nil, nil, 0, r
	}
	st, r := s.stream(ctx, hs)
	if r != ok {
		return nil, nil, 0, r
	}
	f, r := s.kernelArgs(ctx, h, grid, block, params)
	if r != ok {
		return nil, nil, 0, r
	}
	return f, ctx, st, ok
}

// kernelArgs checks a kernel's launch in ctx (a launch, a kernel node): a
// function of ctx, no empty dimension, and a parameter buffer of exactly
// the kernel's packed size. It leaves ctx current in the backend.
func (s *session) kernelArgs(ctx *ctxState, h proto.Handle, grid, block [3]uint32, params []byte) (*funcState, proto.Result) {
	f := s.funcs[h]
	if f == nil || f.mod.ctx != ctx {
		return nil, proto.ErrInvalidHandle
	}
	for i := range 3 {
		if grid[i] == 0 || block[i] == 0 {
			return nil, proto.ErrInvalidValue
		}
	}
	ps, r := s.params(f)
	if r != ok {
		return nil, r
	}
	if r := s.use(ctx); r != ok {
		return nil, r
	}
	size := uint64(0)
	if len(ps) > 0 {
		last := ps[len(ps)-1]
		size = last.offset + last.size
	}
	if uint64(len(params)) != size {
		return nil, proto.ErrInvalidValue
	}
	s.moved.translateParams(params, ps)
	return f, ok
}

func (s *session) StreamCreate(c *proto.Call, flags uint32) (proto.Handle, proto.Result) {
	ctx, r := s.current(c)
	if r != ok {
		return 0, r
	}
	raw, r := s.be.StreamCreate(flags)
	if r != ok {
		return 0, r
	}
	st := &streamState{h: s.handle(), raw: raw, ctx: ctx, flags: flags}
	s.streams[st.h] = st
	return st.h, ok
}

func (s *session) StreamDestroyV2(c *proto.Call, h proto.Handle) proto.Result {
	st := s.streams[h]
	if st == nil {
		return proto.ErrInvalidHandle
	}
	if r := s.use(st.ctx); r != ok {
		return r
	}
	if cp := s.captureOrigins[streamKey{st.ctx, st.raw}]; cp != nil {
		s.abandonCapture(cp) // the driver would end it with the stream
	}
	if r := s.be.StreamDestroy(st.raw); r != ok {
		return r
	}
	delete(s.streams, h)
	return ok
}

// ownStream resolves a stream for a call about the stream itself: a
// default stream of the current context, or a stream in its own context.
func (s *session) ownStream(c *proto.Call, h proto.Handle) (uintptr, proto.Result) {
	if h <= 2 {
		_, r := s.current(c)
		return uintptr(h), r
	}
	st := s.streams[h]
	if st == nil {
		return 0, proto.ErrInvalidHandle
	}
	return st.raw, s.use(st.ctx)
}

func (s *session) StreamSynchronize(c *proto.Call, h proto.Handle) proto.Result {
	raw, r := s.ownStream(c, h)
	if r != ok {
		return r
	}
	return s.synced(s.be.StreamSynchronize(raw))
}

func (s *session) StreamQuery(c *proto.Call, h proto.Handle) proto.Result {
	raw, r := s.ownStream(c, h)
	if r != ok {
		return r
	}
	return s.be.StreamQuery(raw)
}

// StreamWaitEvent: the event may be in another of the client's contexts.
func (s *session) StreamWaitEvent(c *proto.Call, hs, he proto.Handle, flags uint32) proto.Result {
	e := s.events[he]
	if e == nil {
		return proto.ErrInvalidHandle
	}
	raw, r := s.ownStream(c, hs)
	if r != ok {
		return r
	}
	return s.be.StreamWaitEvent(raw, e.raw, flags)
}

func (s *session) EventCreate(c *proto.Call, flags uint32) (proto.Handle, proto.Result) {
	ctx, r := s.current(c)
	if r != ok {
		return 0, r
	}
	raw, r := s.be.EventCreate(flags)
	if r != ok {
		return 0, r
	}
	e := &eventState{h: s.handle(), raw: raw, ctx: ctx, flags: flags}
	s.events[e.h] = e
	return e.h, ok
}

// event resolves an event and makes its context current.
func (s *session) event(h proto.Handle) (*eventState, proto.Result) {
	e := s.events[h]
	if e == nil {
		return nil, proto.ErrInvalidHandle
	}
	return e, s.use(e.ctx)
}

func (s *session) EventDestroyV2(c *proto.Call, h proto.Handle) proto.Result {
	e, r := s.event(h)
	if r != ok {
		return r
	}
	if s.eventInGraph(e) {
		return proto.ErrIllegalState // an event node names it (calls_graph.go)
	}
	if r := s.be.EventDestroy(e.raw); r != ok {
		return r
	}
	delete(s.events, h)
	return ok
}

// EventRecord records an event on a stream of its own context (a default
// stream: the current context, which must be the event's).
func (s *session) EventRecord(c *proto.Call, he, hs proto.Handle) proto.Result {
	e, st, r := s.recordArgs(c, he, hs)
	if r != ok {
		return r
	}
	return s.be.EventRecord(e.raw, st)
}

// recordArgs resolves an event and a stream to record it on, and makes
// the event's context current.
func (s *session) recordArgs(c *proto.Call, he, hs proto.Handle) (*eventState, uintptr, proto.Result) {
	e := s.events[he]
	if e == nil {
		return nil, 0, proto.ErrInvalidHandle
	}
	ctx := e.ctx
	if hs <= 2 {
		cur, r := s.current(c)
		if r != ok {
			return nil, 0, r
		}
		if cur != ctx {
			return nil, 0, proto.ErrInvalidHandle
		}
	}
	st, r := s.stream(ctx, hs)
	if r != ok {
		return nil, 0, r
	}
	return e, st, s.use(ctx)
}

func (s *session) EventSynchronize(c *proto.Call, h proto.Handle) proto.Result {
	e, r := s.event(h)
	if r != ok {
		return r
	}
	return s.synced(s.be.EventSynchronize(e.raw))
}

func (s *session) EventQuery(c *proto.Call, h proto.Handle) proto.Result {
	e, r := s.event(h)
	if r != ok {
		return r
	}
	return s.be.EventQuery(e.raw)
}

func (s *session) EventElapsedTime(c *proto.Call, hStart, hEnd proto.Handle) (float32, proto.Result) {
	start, end := s.events[hStart], s.events[hEnd]
	if start == nil || end == nil {
		return 0, proto.ErrInvalidHandle
	}
	if r := s.use(start.ctx); r != ok {
		return 0, r
	}
	return s.be.EventElapsedTime(start.raw, end.raw)
}
