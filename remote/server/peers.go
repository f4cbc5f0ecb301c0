package server

import "github.com/gpumux/gpumux/remote/proto"

// Several devices. A client sees the devices it is granted (its token's,
// every device of the server with WithInsecureNoAuth) as ordinals 0, 1, …
// in order; session.devs maps them to the backend's. Each of its contexts
// is on one of them and each of its allocations in one context, so the
// server knows the device of every address the client holds: a copy
// between memory of two devices reaches the backend as a peer copy naming
// the two contexts (the fake refuses anything else, and cuMemcpyPeer is
// what CUDA documents for it), and a peer copy must name contexts of the
// devices its memory is on. Every allocation, on whichever device, counts
// against the client's one quota.

// DeviceCanAccessPeer is the driver's answer for two of the client's
// devices.
func (s *session) DeviceCanAccessPeer(c *proto.Call, dev, peerDev int32) (int32, proto.Result) {
	d, p, r := s.devicePair(dev, peerDev)
	if r != ok {
		return 0, r
	}
	return s.be.DeviceCanAccessPeer(d, p)
}

// DeviceGetP2PAttribute is the driver's answer for the link between two of
// the client's devices; the attribute is a plain number the driver checks.
func (s *session) DeviceGetP2PAttribute(c *proto.Call, attrib uint32, src, dst int32) (int32, proto.Result) {
	d, p, r := s.devicePair(src, dst)
	if r != ok {
		return 0, r
	}
	return s.be.DeviceP2PAttribute(attrib, d, p)
}

// devicePair maps two client device ordinals to the backend's.
func (s *session) devicePair(a, b int32) (int32, int32, proto.Result) {
	ra, r := s.device(a)
	if r != ok {
		return 0, 0, r
	}
	rb, r := s.device(b)
	return ra, rb, r
}

// peerCtx resolves the peer context of cuCtxEnablePeerAccess and
// cuCtxDisablePeerAccess, one of the client's, and makes the current
// context current.
func (s *session) peerCtx(c *proto.Call, h proto.Handle) (*ctxState, proto.Result) {
	if _, r := s.current(c); r != ok {
		return nil, r
	}
	peer := s.ctxs[h]
	if peer == nil {
		return nil, proto.ErrInvalidContext
	}
	return peer, ok
}

// CtxEnablePeerAccess lets the current context reach the memory of
// another of the client's contexts; the driver checks the pair.
func (s *session) CtxEnablePeerAccess(c *proto.Call, h proto.Handle, flags uint32) proto.Result {
	peer, r := s.peerCtx(c, h)
	if r != ok {
		return r
	}
	return s.be.CtxEnablePeerAccess(peer.raw, flags)
}

// CtxDisablePeerAccess takes that access away.
func (s *session) CtxDisablePeerAccess(c *proto.Call, h proto.Handle) proto.Result {
	peer, r := s.peerCtx(c, h)
	if r != ok {
		return r
	}
	return s.be.CtxDisablePeerAccess(peer.raw)
}

func (s *session) MemcpyPeer(c *proto.Call, dst proto.DevPtr, dstCtx proto.Handle, src proto.DevPtr, srcCtx proto.Handle, n uint64) proto.Result {
	return s.copyPeer(c, dst, dstCtx, src, srcCtx, n, 0, false)
}

func (s *session) MemcpyPeerAsync(c *proto.Call, dst proto.DevPtr, dstCtx proto.Handle, src proto.DevPtr, srcCtx proto.Handle, n uint64, hs proto.Handle) proto.Result {
	return s.copyPeer(c, dst, dstCtx, src, srcCtx, n, hs, true)
}

// copyPeer checks and runs cuMemcpyPeer[Async]: a current context and a
// stream of it, two of the client's contexts, and n bytes of the client's
// memory at each address, on the device of the context named with it.
func (s *session) copyPeer(c *proto.Call, dst proto.DevPtr, hdst proto.Handle, src proto.DevPtr, hsrc proto.Handle, n uint64, hs proto.Handle, async bool) proto.Result {
	_, st, r := s.currentStream(c, hs)
	if r != ok {
		return r
	}
	dctx, sctx := s.ctxs[hdst], s.ctxs[hsrc]
	if dctx == nil || sctx == nil {
		return proto.ErrInvalidContext
	}
	if n == 0 {
		return ok
	}
	d, sp, r := s.copyEnds(dst, src, n, nil)
	if r != ok {
		return r
	}
	if d.dev != dctx.dev || sp.dev != sctx.dev {
		return proto.ErrInvalidValue
	}
	return s.be.MemcpyPeer(d.p, dctx.raw, sp.p, sctx.raw, n, st, async)
}

// memPlace is where memory of the client is: its device, the context it
// belongs to (see memOf) and the address the backend has it at (relocate.go).
type memPlace struct {
	dev int32
	ctx *ctxState
	p   proto.DevPtr
}

// copyEnds resolves both addresses of a copy of n bytes (memOf).
func (s *session) copyEnds(dst, src proto.DevPtr, n uint64, cur *ctxState) (d, sp memPlace, r proto.Result) {
	if d, r = s.memOf(dst, n, cur); r != ok {
		return d, sp, r
	}
	sp, r = s.memOf(src, n, cur)
	return d, sp, r
}

// memOf returns where [p, p+n) is: the client's device whose memory it
// is, and the context that memory belongs to: one allocation's, or for
// mappings (cuMemMap), which belong to no context, a context of the client
// on their physical memory's device (cur if it is there), nil when the
// client has none there. Memory that is not the client's is
// CUDA_ERROR_INVALID_VALUE; a range over mappings of two devices' memory
// CUDA_ERROR_NOT_SUPPORTED.
func (s *session) memOf(p proto.DevPtr, n uint64, cur *ctxState) (memPlace, proto.Result) {
	if a := s.find(p, n); a != nil && a.phys == nil {
		return memPlace{a.ctx.dev, a.ctx, a.real(p)}, ok
	}
	ms := s.mapped(p, max(n, 1))
	if ms == nil {
		return memPlace{}, proto.ErrInvalidValue
	}
	at := memPlace{dev: ms[0].phys.prop.LocID, p: p}
	for _, m := range ms[1:] {
		if m.phys.prop.LocID != at.dev {
			return memPlace{}, proto.ErrNotSupported
		}
	}
	if cur != nil && cur.dev == at.dev {
		at.ctx = cur
		return at, ok
	}
	at.ctx = s.ctxOn(at.dev)
	return at, ok
}

// PointerGetAttributes answers what the interposer's cuPointerGetAttribute
// asks of an address: the client's allocation holding it, and that
// allocation's context and device; for a mapping (cuMemMap), the mapping,
// no context and the device of its physical memory.
func (s *session) PointerGetAttributes(c *proto.Call, p proto.DevPtr) (proto.DevPtr, uint64, proto.Handle, int32, proto.Result) {
	a := s.find(p, 0)
	if a == nil {
		return 0, 0, 0, 0, proto.ErrInvalidValue
	}
	if a.phys != nil {
		// A mapping: memory of cuMemCreate belongs to no context.
		return a.base, a.size, 0, a.phys.prop.LocID, ok
	}
	return a.base, a.size, a.ctx.h, a.ctx.dev, ok
}
