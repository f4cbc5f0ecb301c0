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
	ctx := &ctxState{h: s.handle(), raw: raw, dev: dev, primary: primary}
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
	s.destroyGraphs(ctx, &f, warn)
	if r == proto.Success {
		warn("cuCtxSynchronize", s.be.CtxSynchronize())
	}
	for _, a := range append([]*allocation(nil), s.allocs...) {
		if a.ctx != ctx || !a.charged() {
			continue
		}
		if s.curOK && s.cur == ctx.raw {
			warn("cuMemFree", s.be.MemFree(a.base))
		}
		s.forget(a)
		f.allocs++
		f.bytes += a.size
	}
	f.bytes += s.releaseLimits(ctx)
	for _, h := range sortedHandles(s.mods) {
		if m := s.mods[h]; m.ctx == ctx {
			if s.curOK && s.cur == ctx.raw {
				warn("cuModuleUnload", s.be.ModuleUnload(m.raw))
			}
			s.forgetModule(m)
			f.modules++
		}
	}
	for _, h := range sortedHandles(s.events) {
		if e := s.events[h]; e.ctx == ctx {
			if s.curOK && s.cur == ctx.raw {
				warn("cuEventDestroy", s.be.EventDestroy(e.raw))
			}
			delete(s.events, h)
			f.events++
		}
	}
	for _, h := range sortedHandles(s.streams) {
		if st := s.streams[h]; st.ctx == ctx {
			if s.curOK && s.cur == ctx.raw {
				warn("cuStreamDestroy", s.be.StreamDestroy(st.raw))
			}
			delete(s.streams, h)
			f.streams++
		}
	}
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
