package server

import (
	"fmt"
	"io"

	"github.com/gpumux/gpumux/remote/proto"
)

// restore rebuilds a snapshot's objects in a new session, on its worker
// thread, reading the bytes behind them from r (snapshot.go gives the
// order). Each object keeps its handle; memory is reserved at its own
// addresses before any module is loaded, so the driver's placement of
// modules cannot take them; a module global the driver places elsewhere
// than on the source keeps the source's address for the client and is
// translated (relocate.go). On failure the caller cleans the session up.
func (s *session) restore(sn snapshot, r io.Reader) error {
	seen := map[proto.Handle]bool{}
	handle := func(h proto.Handle) error {
		if h < firstHandle || h >= sn.next || seen[h] {
			return fmt.Errorf("%w: snapshot handle %#x reused or out of range", proto.ErrMalformed, h)
		}
		seen[h] = true
		return nil
	}
	s.objects.next = sn.next
	for _, c := range sn.ctxs {
		if err := handle(c.h); err != nil {
			return err
		}
		real, res := s.device(c.dev)
		if res != ok {
			return fmt.Errorf("context %#x: device %d: %v", c.h, c.dev, res)
		}
		raw, res := s.be.CtxCreate(real, c.flags)
		s.curOK = false
		if res != ok {
			return fmt.Errorf("cuCtxCreate: %v", res)
		}
		s.ctxs[c.h] = &ctxState{h: c.h, raw: raw, dev: c.dev, flags: c.flags, primary: c.primary}
	}
	ctxOf := func(h proto.Handle) (*ctxState, error) {
		if c := s.ctxs[h]; c != nil {
			return c, nil
		}
		return nil, fmt.Errorf("%w: snapshot names context %#x it does not hold", proto.ErrMalformed, h)
	}
	// enter takes handle h for an object of context ctx, which it makes
	// current.
	enter := func(ctx, h proto.Handle) (*ctxState, error) {
		c, err := ctxOf(ctx)
		if err == nil {
			err = handle(h)
		}
		if err == nil {
			err = s.enterCtx(c)
		}
		return c, err
	}
	for _, p := range sn.primary {
		if _, res := s.device(p.dev); res != ok || s.primary[p.dev] != nil {
			return fmt.Errorf("%w: primary context of device %d", proto.ErrMalformed, p.dev)
		}
		ps := &primaryState{flags: p.flags, refs: int(p.refs)}
		if p.ctx != 0 {
			c, err := ctxOf(p.ctx)
			if err != nil || !c.primary || c.dev != p.dev || p.refs == 0 {
				return fmt.Errorf("%w: primary context %#x of device %d", proto.ErrMalformed, p.ctx, p.dev)
			}
			ps.ctx = c
		}
		s.primary[p.dev] = ps
	}
	for _, c := range sn.ctxs {
		for _, l := range c.limits {
			if res := s.CtxSetLimit(&proto.Call{Ctx: c.h}, l.limit, l.value); res != ok {
				return fmt.Errorf("cuCtxSetLimit(%d, %d): %v", l.limit, l.value, res)
			}
		}
	}
	if err := s.restorePools(sn, handle); err != nil {
		return err
	}
	allocs := make([]*allocation, len(sn.allocs))
	for i, sa := range sn.allocs {
		c, err := ctxOf(sa.ctx)
		if err != nil {
			return err
		}
		restore := s.restoreAlloc
		if sa.pool != 0 {
			restore = s.restorePoolAlloc
		}
		a, err := restore(c, sa)
		if err != nil {
			return err
		}
		allocs[i] = a
	}
	if err := s.restoreVirtual(sn, handle); err != nil {
		return err
	}
	for _, sm := range sn.mods {
		if err := s.restoreModule(sm, r, handle, enter); err != nil {
			return err
		}
	}
	for _, st := range sn.streams {
		if err := s.restoreStream(st, enter); err != nil {
			return err
		}
	}
	for _, se := range sn.events {
		c, err := enter(se.ctx, se.h)
		if err != nil {
			return err
		}
		raw, res := s.be.EventCreate(se.flags)
		if res != ok {
			return fmt.Errorf("cuEventCreate: %v", res)
		}
		s.events[se.h] = &eventState{h: se.h, raw: raw, ctx: c, flags: se.flags}
	}
	for _, a := range allocs {
		if err := s.loadMemory(r, a.ctx, a.base, a.size); err != nil {
			return err
		}
	}
	for _, sm := range sn.mods {
		m := s.mods[sm.h]
		for _, g := range sm.globals {
			if err := s.loadMemory(r, m.ctx, m.globals[g.name].real(g.base), g.size); err != nil {
				return err
			}
		}
	}
	for _, sp := range sn.phys {
		ph := s.virtual.phys[sp.h]
		err := s.withScratch(ph, func(p proto.DevPtr) error {
			return s.loadMemory(r, s.ctxOn(ph.prop.LocID), p, ph.size)
		})
		if err != nil {
			return err
		}
	}
	if sn.modeSet {
		if _, res := s.be.ThreadExchangeStreamCaptureMode(sn.captureMode); res != ok {
			return fmt.Errorf("cuThreadExchangeStreamCaptureMode: %v", res)
		}
		s.modeSet = true
	}
	return nil
}

// restoreAlloc charges a cuMemAlloc allocation to the quota and backs it
// at its own address.
func (s *session) restoreAlloc(c *ctxState, sa snapAlloc) (*allocation, error) {
	if sa.size == 0 || !s.vacant(sa.base, sa.size) {
		return nil, fmt.Errorf("%w: allocation of %d bytes at %#x", proto.ErrMalformed, sa.size, sa.base)
	}
	if !s.charge(sa.size) {
		limit, left := s.quota.left()
		return nil, fmt.Errorf("allocation of %d bytes at %#x: beyond the quota (%d, %d left)", sa.size, sa.base, limit, left)
	}
	if err := s.enterCtx(c); err != nil {
		s.uncharge(sa.size)
		return nil, err
	}
	p, b, res := s.allocBacked(s.devs[c.dev], sa.size, sa.base)
	if res != ok {
		s.uncharge(sa.size)
		return nil, fmt.Errorf("backing %d bytes at %#x: %v", sa.size, sa.base, res)
	}
	a := &allocation{base: p, size: sa.size, ctx: c, backed: b}
	s.addAlloc(a) // vacant above
	return a, nil
}

// restoreVirtual rebuilds the client's own virtual memory: its
// reservations at their addresses in windows of reservations, its physical
// allocations (charged to the quota) with their references, and its
// mappings with the access the client set. Their contents come later.
func (s *session) restoreVirtual(sn snapshot, handle func(proto.Handle) error) error {
	v := &s.virtual
	for _, sr := range sn.reserved {
		end := sr.base + proto.DevPtr(sr.size)
		if sr.size == 0 || end < sr.base || v.reservationOf(sr.base, 1) != nil || v.reservationOf(end-1, 1) != nil ||
			!s.vacant(sr.base, sr.size) || len(v.reserved) >= maxVirtualObjects {
			return fmt.Errorf("%w: reservation of %d bytes at %#x", proto.ErrMalformed, sr.size, sr.base)
		}
		res, r := s.reserveAt(sr.base, sr.size)
		if r != ok {
			return fmt.Errorf("reserving %d bytes at %#x: %v", sr.size, sr.base, r)
		}
		v.reserved = append(v.reserved, res)
		v.reservedSize += sr.size
	}
	for _, sp := range sn.phys {
		if err := handle(sp.h); err != nil {
			return err
		}
		bp, r := s.memProp("cuMemCreate", sp.prop)
		if r != ok || sp.size == 0 || len(v.phys) >= maxVirtualObjects {
			return fmt.Errorf("%w: physical memory %#x of %d bytes: %v", proto.ErrMalformed, sp.h, sp.size, r)
		}
		if s.ctxOn(sp.prop.LocID) == nil {
			return fmt.Errorf("%w: physical memory %#x on GPU %d, where the session has no context", proto.ErrMalformed, sp.h, sp.prop.LocID)
		}
		if !s.charge(sp.size) {
			limit, left := s.quota.left()
			return fmt.Errorf("physical memory of %d bytes: beyond the quota (%d, %d left)", sp.size, limit, left)
		}
		raw, r := s.be.MemCreate(sp.size, bp, 0)
		if r != ok {
			s.uncharge(sp.size)
			return fmt.Errorf("cuMemCreate of %d bytes: %v", sp.size, r)
		}
		v.phys[sp.h] = &physical{h: sp.h, raw: raw, size: sp.size, prop: sp.prop, refs: int(sp.refs)}
	}
	for _, sm := range sn.mappings {
		ph, res := v.phys[sm.phys], v.reservationOf(sm.base, sm.size)
		if ph == nil || res == nil || sm.size == 0 || sm.size > ph.size || !s.vacant(sm.base, sm.size) || v.mappings >= maxVirtualObjects {
			return fmt.Errorf("%w: mapping of %d bytes at %#x", proto.ErrMalformed, sm.size, sm.base)
		}
		if r := s.be.MemMap(sm.base, sm.size, 0, ph.raw, 0); r != ok {
			return fmt.Errorf("cuMemMap of %d bytes at %#x: %v", sm.size, sm.base, r)
		}
		s.addAlloc(&allocation{base: sm.base, size: sm.size, phys: ph, res: res, access: sm.access}) // vacant above
		ph.maps++
		res.maps++
		v.mappings++
		if len(sm.access) == 0 {
			continue
		}
		ds, _, r := s.accessDescs(proto.EncodeMemAccessDescs(sm.access))
		if r != ok {
			return fmt.Errorf("%w: access to the mapping at %#x: %v", proto.ErrMalformed, sm.base, r)
		}
		if r := s.be.MemSetAccess(sm.base, sm.size, ds); r != ok {
			return fmt.Errorf("cuMemSetAccess of %d bytes at %#x: %v", sm.size, sm.base, r)
		}
	}
	for _, ph := range v.phys {
		if ph.refs == 0 && ph.maps == 0 {
			return fmt.Errorf("%w: physical memory %#x neither held nor mapped", proto.ErrMalformed, ph.h)
		}
	}
	return nil
}

// restoreModule loads a module from its image (read from r) and looks up
// its functions and globals again.
func (s *session) restoreModule(sm snapModule, r io.Reader, handle func(proto.Handle) error, enter func(ctx, h proto.Handle) (*ctxState, error)) error {
	c, err := enter(sm.ctx, sm.h)
	if err != nil {
		return err
	}
	if sm.image > proto.MaxImage {
		return fmt.Errorf("%w: module image of %d bytes", proto.ErrMalformed, sm.image)
	}
	image := make([]byte, sm.image)
	if _, err := io.ReadFull(r, image); err != nil {
		return fmt.Errorf("reading a module image: %w", err)
	}
	raw, res := s.be.ModuleLoadData(image)
	if res != ok {
		return fmt.Errorf("cuModuleLoadData: %v", res)
	}
	m := &moduleState{h: sm.h, raw: raw, ctx: c, image: image,
		funcs: map[string]proto.Handle{}, globals: map[string]*allocation{}}
	s.mods[m.h] = m
	for _, sf := range sm.funcs {
		if err := handle(sf.h); err != nil {
			return err
		}
		fraw, res := s.be.ModuleGetFunction(raw, sf.name)
		if res != ok {
			return fmt.Errorf("cuModuleGetFunction(%q): %v", sf.name, res)
		}
		f := &funcState{h: sf.h, raw: fraw, mod: m}
		s.funcs[f.h] = f
		m.funcs[sf.name] = f.h
		for _, a := range sf.attrs {
			if res := s.FuncSetAttribute(nil, f.h, a[0], a[1]); res != ok {
				return fmt.Errorf("cuFuncSetAttribute(%q, %d, %d): %v", sf.name, a[0], a[1], res)
			}
		}
	}
	for _, g := range sm.globals {
		p, n, res := s.be.ModuleGetGlobal(raw, g.name)
		if res != ok {
			return fmt.Errorf("cuModuleGetGlobal(%q): %v", g.name, res)
		}
		if n != g.size {
			return fmt.Errorf("%w: module global %q has %d bytes here, %d on the source",
				ErrNotMigratable, g.name, n, g.size)
		}
		// The client keeps the source's address; the driver may have
		// put the global elsewhere (relocate.go).
		a := &allocation{base: g.base, size: n, ctx: c, mod: m}
		if p != g.base {
			a.at = p
		}
		if !s.addAlloc(a) {
			return fmt.Errorf("%w: module global %q at %#x overlaps the session's memory", proto.ErrMalformed, g.name, g.base)
		}
		m.globals[g.name] = a
	}
	return nil
}

func (s *session) restoreStream(st snapStream, enter func(ctx, h proto.Handle) (*ctxState, error)) error {
	c, err := enter(st.ctx, st.h)
	if err != nil {
		return err
	}
	var raw uintptr
	var res proto.Result
	if st.withPriority {
		raw, res = s.be.StreamCreateWithPriority(st.flags, st.priority)
	} else {
		raw, res = s.be.StreamCreate(st.flags)
	}
	if res != ok {
		return fmt.Errorf("cuStreamCreate: %v", res)
	}
	s.streams[st.h] = &streamState{h: st.h, raw: raw, ctx: c, flags: st.flags, priority: st.priority, withPriority: st.withPriority}
	return nil
}

// loadMemory copies n bytes from r to device memory at p, of ctx.
func (s *session) loadMemory(r io.Reader, ctx *ctxState, p proto.DevPtr, n uint64) error {
	if err := s.enterCtx(ctx); err != nil {
		return err
	}
	buf := s.chunk(0)
	for off := uint64(0); off < n; {
		k := min(n-off, uint64(len(buf)))
		if _, err := io.ReadFull(r, buf[:k]); err != nil {
			return fmt.Errorf("reading memory contents: %w", err)
		}
		if res := s.be.MemcpyHtoD(p+proto.DevPtr(off), buf[:k], 0, false); res != ok {
			return fmt.Errorf("cuMemcpyHtoD of %d bytes at %#x: %v", k, p+proto.DevPtr(off), res)
		}
		off += k
	}
	return nil
}

// enterCtx makes c the worker thread's context, for a step of a restore.
func (s *session) enterCtx(c *ctxState) error {
	if res := s.use(c); res != ok {
		return fmt.Errorf("cuCtxSetCurrent: %v", res)
	}
	return nil
}
