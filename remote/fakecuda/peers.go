package fakecuda

import "github.com/gpumux/gpumux/remote/proto"

// Several devices. Every two distinct fake devices can access each other's
// memory, as GPUs on one NVLink switch can; a device cannot be its own
// peer (cuDeviceCanAccessPeer answers 0, cuDeviceGetP2PAttribute
// CUDA_ERROR_INVALID_DEVICE). A kernel reaches another context's memory
// only once its own context has enabled access to that one
// (cuCtxEnablePeerAccess), which needs a context on another device. Peer
// copies (MemcpyPeer) need no such access, as with CUDA.

// The CUdevice_P2PAttribute values the fake answers.
const (
	p2pPerformanceRank = 1
	p2pAccessSupported = 2
	p2pNativeAtomics   = 3
	p2pArrayAccess     = 4
)

// DeviceCanAccessPeer reports 1 for two distinct devices, 0 for one.
func (b *Backend) DeviceCanAccessPeer(dev, peer int32) (int32, proto.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if r := b.devPair(dev, peer); r != proto.Success {
		return 0, r
	}
	if dev == peer {
		return 0, proto.Success
	}
	return 1, proto.Success
}

// DeviceP2PAttribute answers for the link from src to dst: performance
// rank 0, access, native atomics and array access supported.
func (b *Backend) DeviceP2PAttribute(attr uint32, src, dst int32) (int32, proto.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if r := b.devPair(src, dst); r != proto.Success {
		return 0, r
	}
	if src == dst {
		return 0, proto.ErrInvalidDevice
	}
	switch attr {
	case p2pPerformanceRank:
		return 0, proto.Success
	case p2pAccessSupported, p2pNativeAtomics, p2pArrayAccess:
		return 1, proto.Success
	}
	return 0, proto.ErrInvalidValue
}

// devPair checks two device ordinals; the caller holds mu.
func (b *Backend) devPair(a, c int32) proto.Result {
	if _, r := b.dev(a); r != proto.Success {
		return r
	}
	_, r := b.dev(c)
	return r
}

// peerArgs checks a current context and a peer context for
// cuCtxEnablePeerAccess/cuCtxDisablePeerAccess; the caller holds mu.
func (b *Backend) peerArgs(peer uintptr) (cur, p *context, r proto.Result) {
	cur, r = b.cur()
	if r != proto.Success {
		return nil, nil, r
	}
	p = b.ctxs[peer]
	if p == nil || p == cur {
		return nil, nil, proto.ErrInvalidContext
	}
	return cur, p, proto.Success
}

// CtxEnablePeerAccess lets the current context's kernels access peer's
// memory.
func (b *Backend) CtxEnablePeerAccess(peer uintptr, flags uint32) proto.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	cur, p, r := b.peerArgs(peer)
	switch {
	case r != proto.Success:
		return r
	case flags != 0:
		return proto.ErrInvalidValue
	case p.dev == cur.dev:
		return proto.ErrPeerAccessUnsupported
	case cur.peers[p]:
		return proto.ErrPeerAccessAlreadyEnabled
	}
	if cur.peers == nil {
		cur.peers = map[*context]bool{}
	}
	cur.peers[p] = true
	return proto.Success
}

// CtxDisablePeerAccess takes that access away again.
func (b *Backend) CtxDisablePeerAccess(peer uintptr) proto.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	cur, p, r := b.peerArgs(peer)
	if r != proto.Success {
		return r
	}
	if !cur.peers[p] {
		return proto.ErrPeerAccessNotEnabled
	}
	delete(cur.peers, p)
	return proto.Success
}

// MemcpyPeer copies n bytes from src, memory on srcCtx's device, to dst,
// memory on dstCtx's device, on a stream of the current context. Memory of
// another device than the context named, or a mapping that does not grant
// that device access, is CUDA_ERROR_INVALID_VALUE.
func (b *Backend) MemcpyPeer(dst proto.DevPtr, dstCtx uintptr, src proto.DevPtr, srcCtx uintptr, n uint64, stream uintptr, async bool) proto.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	cur, r := b.cur()
	if r != proto.Success {
		return r
	}
	if r := b.checkStream(cur, stream); r != proto.Success {
		return r
	}
	dc, sc := b.ctxs[dstCtx], b.ctxs[srcCtx]
	if dc == nil || sc == nil {
		return proto.ErrInvalidContext
	}
	dr, ok1 := b.mem.region(uint64(dst), n)
	sr, ok2 := b.mem.region(uint64(src), n)
	if !ok1 || !ok2 || dr.device() != dc.dev || sr.device() != sc.dev ||
		!dr.allows(dc.dev.index, accessReadWrite) || !sr.allows(sc.dev.index, accessRead) {
		return proto.ErrInvalidValue
	}
	copyRegion(dr, sr, n)
	return proto.Success
}

// canReach reports whether kernels of c may access memory of owner: their
// own context's, or a peer's they enabled access to.
func (c *context) canReach(owner *context) bool {
	return owner == c || c.peers[owner]
}
