package server

import (
	"github.com/gpumux/gpumux/remote/proto"
)

// use makes ctx current on the worker thread, calling the backend only
// when another context is current.
func (s *session) use(ctx *ctxState) proto.Result {
	if r := s.refusal(); r != proto.Success {
		return r // after the token's expiry nothing runs (expiry.go)
	}
	if s.curOK && s.cur == ctx.raw {
		return proto.Success
	}
	if r := s.be.CtxSetCurrent(ctx.raw); r != proto.Success {
		s.curOK = false
		return r
	}
	s.cur, s.curOK = ctx.raw, true
	return proto.Success
}

// current validates the call's current context (the calling thread's on
// the client) and makes it current here.
func (s *session) current(c *proto.Call) (*ctxState, proto.Result) {
	ctx := s.ctxs[c.Ctx]
	if ctx == nil {
		return nil, proto.ErrInvalidContext
	}
	return ctx, s.use(ctx)
}

// device maps a client device ordinal to the backend's.
func (s *session) device(dev int32) (int32, proto.Result) {
	if dev < 0 || int(dev) >= len(s.devs) {
		return 0, proto.ErrInvalidDevice
	}
	return s.devs[dev], proto.Success
}

// createCtx makes a backend context for client device dev.
func (s *session) createCtx(dev int32, flags uint32, primary bool) (*ctxState, proto.Result) {
	real, r := s.device(dev)
	if r != proto.Success {
		return nil, r
	}
	raw, r := s.be.CtxCreate(real, flags)
	// cuCtxCreate makes the new context current: whatever was is no more.
	s.curOK = false
	if r != proto.Success {
		return nil, r
	}
	ctx := &ctxState{h: s.handle(), raw: raw, dev: dev, flags: flags, primary: primary}
	s.ctxs[ctx.h] = ctx
	return ctx, proto.Success
}

// freed counts what a cleanup released.
type freed struct {
	allocs, modules, streams, events, contexts, pools int
	captures, graphs, execs                           int
	bytes                                             uint64
}

func (f *freed) add(g freed) {
	f.allocs += g.allocs
	f.pools += g.pools
	f.bytes += g.bytes
	f.modules += g.modules
	f.streams += g.streams
	f.events += g.events
	f.contexts += g.contexts
	f.captures += g.captures
	f.graphs += g.graphs
	f.execs += g.execs
}

// destroyCtx ends ctx's captures, waits for its work, frees everything in
// it (graphs first: they may name its functions and events) and destroys
// it.
// Backend failures are logged; the objects are forgotten either way
// (destroying a context frees what is left in it).
func (s *session) destroyCtx(ctx *ctxState) freed {
	var f freed
	warn := s.warn
	r := s.use(ctx)
	warn("cuCtxSetCurrent", r)
	s.destroyGraphs(ctx, &f)
	if r == proto.Success {
		warn("cuCtxSynchronize", s.be.CtxSynchronize())
	}
	s.poolsForget(ctx)
	for _, a := range append([]*allocation(nil), s.allocs...) {
		if a.ctx != ctx || !a.charged() {
			continue
		}
		if s.curOK && s.cur == ctx.raw {
			warn("cuMemFree", s.memFree(a, true))
		}
		s.forget(a)
		f.allocs++
		f.bytes += a.size
	}
	f.bytes += s.releaseLimits(ctx)
	f.modules += destroyOwned(s, ctx, s.mods, "cuModuleUnload",
		func(m *moduleState) (*ctxState, uintptr) { return m.ctx, m.raw }, s.be.ModuleUnload,
		func(_ proto.Handle, m *moduleState) { s.forgetModule(m) })
	f.events += destroyOwned(s, ctx, s.events, "cuEventDestroy",
		func(e *eventState) (*ctxState, uintptr) { return e.ctx, e.raw }, s.be.EventDestroy,
		func(h proto.Handle, _ *eventState) { delete(s.events, h) })
	f.streams += destroyOwned(s, ctx, s.streams, "cuStreamDestroy",
		func(st *streamState) (*ctxState, uintptr) { return st.ctx, st.raw }, s.be.StreamDestroy,
		func(h proto.Handle, _ *streamState) { delete(s.streams, h) })
	warn("cuCtxDestroy", s.be.CtxDestroy(ctx.raw))
	s.curOK = false
	delete(s.ctxs, ctx.h)
	if ctx.primary {
		if p := s.primary[ctx.dev]; p != nil && p.ctx == ctx {
			p.ctx, p.refs = nil, 0
		}
	}
	f.contexts++
	return f
}

// destroyOwned destroys each object of objs that belongs to ctx, in handle
// order: through the backend (destroy, named what in a failure's warning)
// while ctx is current, and from the session (forget) either way. It
// returns how many it destroyed. of says an object's context and raw
// handle.
func destroyOwned[V any](s *session, ctx *ctxState, objs map[proto.Handle]V, what string,
	of func(V) (*ctxState, uintptr), destroy func(uintptr) proto.Result, forget func(proto.Handle, V)) int {
	n := 0
	for _, h := range sortedHandles(objs) {
		o := objs[h]
		owner, raw := of(o)
		if owner != ctx {
			continue
		}
		if s.curOK && s.cur == ctx.raw {
			s.warn(what, destroy(raw))
		}
		forget(h, o)
		n++
	}
	return n
}

// warn logs a backend call of a cleanup that failed.
func (s *session) warn(what string, r proto.Result) {
	if r != proto.Success {
		s.log.Warn("cleanup: "+what+" failed", "result", r.String())
	}
}

// forgetModule drops a module, its functions and its globals.
func (s *session) forgetModule(m *moduleState) {
	for _, h := range m.funcs {
		delete(s.funcs, h)
	}
	for _, a := range m.globals {
		s.removeAlloc(a)
	}
	delete(s.mods, m.h)
}

// cleanup frees everything the client left, context by context, and
// leaves the worker thread without a current context.
func (s *session) cleanup() freed {
	var f freed
	// Nothing may still run on memory about to go: wait for every
	// context first. Pools are destroyed while their contexts live (their
	// allocations are then freed with the contexts: CUDA lets a destroyed
	// pool's allocations live until freed).
	for _, h := range sortedHandles(s.ctxs) {
		if r := s.use(s.ctxs[h]); r == proto.Success {
			s.warn("cuCtxSynchronize", s.be.CtxSynchronize())
		}
	}
	f.bytes += s.freeVirtual()
	f.pools += s.destroyPools()
	defer s.freeWindows() // once the contexts' allocations are unmapped
	for _, h := range sortedHandles(s.ctxs) {
		f.add(s.destroyCtx(s.ctxs[h]))
	}
	if r := s.be.CtxSetCurrent(0); r != proto.Success {
		s.log.Warn("cleanup: cuCtxSetCurrent(NULL) failed", "result", r.String())
	}
	if s.modeSet {
		if _, r := s.be.ThreadExchangeStreamCaptureMode(proto.CaptureModeGlobal); r != proto.Success {
			s.log.Warn("cleanup: cuThreadExchangeStreamCaptureMode failed", "result", r.String())
		}
		s.modeSet = false
	}
	s.curOK = false
	return f
}
