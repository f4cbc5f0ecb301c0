package server

import (
	"fmt"
	"slices"

	"github.com/gpumux/gpumux/remote/proto"
)

// A migration carries a session's window pools (poolwindow.go): each
// pool's settings and the chunks that hold live allocations, which the
// target backs again at their addresses before it puts the allocations
// back in their slots. Chunks with nothing in them, kept for reuse, stay
// behind.

type snapPool struct {
	h             proto.Handle
	dev           int32 // the client's device
	dflt, current bool
	threshold     uint64 // as the client set it
	reuse         [3]uint64
	maxSize       uint64
	chunks        []snapChunk
}

type snapChunk struct {
	base       proto.DevPtr
	size, slot uint64
}

// poolsMigratable says why the session's pools cannot move, or "". Asked
// when a move is requested and again once the session is quiesced, it
// looks at what lasts: frees in stream order under way are done by then.
func (s *session) poolsMigratable() string {
	for _, h := range sortedHandles(s.pools.byHandle) {
		p := s.pools.byHandle[h]
		w, ok := p.mem.(*windowPool)
		switch {
		case !ok:
			return "it holds memory pools of the driver"
		case len(w.fromDriver) > 0:
			return "it holds memory allocated while a stream capture was under way"
		case len(w.blocks) > 0 && s.ctxOn(p.dev) == nil:
			return fmt.Sprintf("its memory pool on GPU %d has allocations but the session no context there to copy them through", p.dev)
		}
	}
	for _, a := range s.allocs {
		switch {
		case a.pool == nil:
		case a.pool.destroyed:
			return fmt.Sprintf("its allocation at %#x is from a memory pool it destroyed", a.base)
		case a.pool.dev != a.ctx.dev:
			return fmt.Sprintf("its allocation at %#x is from a pool of GPU %d on a context of GPU %d", a.base, a.pool.dev, a.ctx.dev)
		}
	}
	return ""
}

// snapPools describes the session's pools (poolsMigratable said yes); the
// session is quiesced, so what was freed in stream order is done.
func (s *session) snapPools() []snapPool {
	var out []snapPool
	for _, h := range sortedHandles(s.pools.byHandle) {
		p := s.pools.byHandle[h]
		w := p.mem.(*windowPool)
		w.wait()
		sp := snapPool{h: h, dev: p.dev, dflt: p.dflt, current: s.pools.current[p.dev] == p,
			threshold: p.threshold, reuse: w.reuse, maxSize: w.maxSize}
		for _, c := range w.chunks {
			if !c.empty() {
				sp.chunks = append(sp.chunks, snapChunk{base: c.base, size: c.size(), slot: c.slot})
			}
		}
		out = append(out, sp)
	}
	return out
}

// restorePools makes a snapshot's pools and backs their chunks at their
// addresses.
func (s *session) restorePools(sn snapshot, handle func(proto.Handle) error) error {
	for _, sp := range sn.pools {
		if err := handle(sp.h); err != nil {
			return err
		}
		_, r := s.device(sp.dev)
		why := ""
		switch {
		case r != ok:
			why = fmt.Sprintf("device %d: %v", sp.dev, r)
		case sp.dflt && s.pools.dflt[sp.dev] != nil:
			why = fmt.Sprintf("a second default pool of device %d", sp.dev)
		case !sp.dflt && s.pools.created >= maxPools:
			why = fmt.Sprintf("more than %d pools", maxPools)
		case sp.current && s.pools.current[sp.dev] != nil:
			why = fmt.Sprintf("a second current pool of device %d", sp.dev)
		case slices.ContainsFunc(sp.reuse[:], func(v uint64) bool { return v > 1 }):
			why = fmt.Sprintf("reuse policies %v, not 0 or 1", sp.reuse)
		}
		if why != "" {
			return fmt.Errorf("%w: pool %#x: %s", proto.ErrMalformed, sp.h, why)
		}
		p, r := s.newPoolAt(sp.h, sp.dev, proto.MemPoolProps{AllocType: proto.MemAllocationTypePinned, MaxSize: sp.maxSize}, sp.dflt, true)
		if r != ok {
			return fmt.Errorf("cuMemPoolCreate: %v", r)
		}
		w := p.mem.(*windowPool)
		w.reuse = sp.reuse
		if r := s.setThreshold(p, sp.threshold); r != ok {
			return fmt.Errorf("cuMemPoolSetAttribute: %v", r)
		}
		if sp.dflt {
			s.pools.dflt[sp.dev] = p
		} else {
			s.pools.created++
		}
		if sp.current {
			s.pools.current[sp.dev] = p
		}
		for _, sc := range sp.chunks {
			if err := s.restoreChunk(w, sp, sc); err != nil {
				return err
			}
		}
	}
	return nil
}

// restoreChunk backs a pool's chunk at its address.
func (s *session) restoreChunk(w *windowPool, sp snapPool, sc snapChunk) error {
	bad := func(why string) error {
		return fmt.Errorf("%w: pool %#x: chunk of %d bytes at %#x in slots of %d: %s", proto.ErrMalformed, sp.h, sc.size, sc.base, sc.slot, why)
	}
	gran, r := s.be.MemGetAllocationGranularity(devProp(w.dev), proto.MemGranularityMinimum)
	if r != ok {
		return fmt.Errorf("cuMemGetAllocationGranularity: %v", r)
	}
	slot, isSlab := slotFor(sc.slot, gran) // a slab's slot is one slotFor gives
	slab := isSlab && slot == sc.slot && sc.size == max(slabSize, gran)
	switch {
	case sc.size == 0 || sc.size > windowSize || sc.slot == 0 || sc.slot != sc.size && !slab:
		return bad("not a chunk a pool makes")
	case sc.size%gran != 0:
		return bad("not a multiple of the device's granularity")
	case w.maxSize != 0 && w.reserved+sc.size > w.maxSize:
		return bad("beyond the pool's maximum size")
	case len(w.chunks) >= maxSnapObjects:
		return bad("too many chunks")
	}
	c := s.ctxOn(sp.dev)
	if c == nil {
		return bad("no context of the session on its device")
	}
	if err := s.enterCtx(c); err != nil {
		return err
	}
	for _, o := range w.chunks {
		if sc.base < o.base+proto.DevPtr(o.size()) && o.base < sc.base+proto.DevPtr(sc.size) {
			return bad("overlapping another")
		}
	}
	p, b, r := s.allocBacked(w.dev, sc.size, sc.base)
	if r != ok {
		return fmt.Errorf("backing pool %#x's %d bytes at %#x: %v", sp.h, sc.size, sc.base, r)
	}
	w.add(p, b, sc.slot)
	return nil
}

// restorePoolAlloc puts a stream-ordered allocation back in its pool's
// slot and charges it to the quota.
func (s *session) restorePoolAlloc(ctx *ctxState, sa snapAlloc) (*allocation, error) {
	bad := fmt.Errorf("%w: allocation of %d bytes at %#x from pool %#x", proto.ErrMalformed, sa.size, sa.base, sa.pool)
	p := s.pools.byHandle[sa.pool]
	if p == nil || p.dev != ctx.dev || sa.size == 0 || !s.vacant(sa.base, sa.size) {
		return nil, bad
	}
	w := p.mem.(*windowPool) // restorePools made it
	i := slices.IndexFunc(w.chunks, func(c *poolChunk) bool {
		return sa.base >= c.base && sa.base < c.base+proto.DevPtr(c.size())
	})
	if i < 0 {
		return nil, bad
	}
	c := w.chunks[i]
	off := uint64(sa.base - c.base)
	slot := slices.Index(c.free, off)
	if off%c.slot != 0 || sa.size > c.slot || slot < 0 {
		return nil, bad
	}
	if !s.charge(sa.size) {
		limit, left := s.quota.left()
		return nil, fmt.Errorf("allocation of %d bytes at %#x: beyond the quota (%d, %d left)", sa.size, sa.base, limit, left)
	}
	w.placeAt(c, slot)
	a := &allocation{base: sa.base, size: sa.size, ctx: ctx, pool: p}
	s.addAlloc(a) // vacant above
	p.allocs++
	return a, nil
}
