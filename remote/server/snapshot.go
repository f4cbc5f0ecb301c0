package server

import (
	"errors"
	"fmt"
	"io"

	"github.com/gpumux/gpumux/remote/proto"
)

// A session's snapshot, what a migration carries from the source to the
// target (migrate.go): the client's objects by handle, then the bytes
// behind them. The state comes first, length-prefixed and bounded; then
// each module's image, each allocation's contents, each module global's
// contents and each physical allocation's contents (cuMemCreate), in the
// state's order, their lengths as the state gives them. Handles and device addresses travel as they are: the target
// rebuilds the same handle table and finds its memory at the same
// addresses (module globals, which the driver places, at the client's
// addresses through a translation: relocate.go), or the migration fails
// before the switch.

// snapshotVersion is the snapshot format; a target refuses another.
// Version 2 added the client's own virtual memory.
const snapshotVersion = 3

// maxState bounds a snapshot's encoded state.
const maxState = 64 << 20

// maxSnapObjects bounds each list of a snapshot.
const maxSnapObjects = 1 << 20

// ErrNotMigratable means a session holds something a migration does not
// carry; the message says what.
var ErrNotMigratable = errors.New("session cannot be migrated")

type snapshot struct {
	token, identity string
	version         uint16 // the client's protocol
	next            proto.Handle
	captureMode     int32 // the worker thread's, if modeSet
	modeSet         bool
	primary         []snapPrimary
	ctxs            []snapCtx
	mods            []snapModule
	streams         []snapStream
	events          []snapEvent
	allocs          []snapAlloc
	// The client's own virtual memory (virtual.go): reservations,
	// physical allocations, mappings.
	reserved []snapReservation
	phys     []snapPhys
	mappings []snapMapping
	// The session's memory pools (poolmigrate.go).
	pools []snapPool
}

type snapReservation struct {
	base proto.DevPtr
	size uint64
}

type snapPhys struct {
	h    proto.Handle
	size uint64
	prop proto.MemProp // as the client asked for it
	refs uint32
}

type snapMapping struct {
	base   proto.DevPtr
	size   uint64
	phys   proto.Handle
	access []proto.MemAccessDesc // as the client set it; none: never set
}

type snapPrimary struct {
	dev   int32
	flags uint32
	ctx   proto.Handle // 0: inactive
	refs  uint32
}

type snapCtx struct {
	h       proto.Handle
	dev     int32
	flags   uint32
	primary bool
	limits  []snapLimit
}

type snapLimit struct {
	limit uint32
	value uint64
}

type snapModule struct {
	h, ctx  proto.Handle
	image   uint64 // its length
	funcs   []snapFunc
	globals []snapGlobal
}

type snapFunc struct {
	name  string
	h     proto.Handle
	attrs [][2]int32
}

type snapGlobal struct {
	name string
	base proto.DevPtr
	size uint64
}

type snapStream struct {
	h, ctx       proto.Handle
	flags        uint32
	priority     int32
	withPriority bool
}

type snapEvent struct {
	h, ctx proto.Handle
	flags  uint32
}

type snapAlloc struct {
	ctx  proto.Handle
	base proto.DevPtr
	size uint64
	pool proto.Handle // a stream-ordered allocation's pool, or 0
}

// migratable says why the session cannot be migrated, or nil.
func (s *session) migratable() error {
	why := ""
	switch {
	case !s.migration:
		why = "the server was started without migration (gpumux-remoted --migratable)"
	case s.clientVersion < proto.MovesVersion:
		why = fmt.Sprintf("its client speaks protocol %d, which cannot follow a move (%d or later can)", s.clientVersion, proto.MovesVersion)
	case s.expired:
		why = "its token has expired"
	case len(s.graphs) > 0 || len(s.execs) > 0 || len(s.captures) > 0:
		why = "it holds CUDA graphs or stream captures"
	default:
		why = s.poolsMigratable()
	}
	for _, res := range s.virtual.reserved {
		if why == "" && res.win == nil {
			why = fmt.Sprintf("its reservation at %#x is not in its window", res.base)
		}
	}
	for _, ph := range s.virtual.phys {
		if why == "" && s.ctxOn(ph.prop.LocID) == nil {
			why = fmt.Sprintf("it holds physical memory (cuMemCreate) on GPU %d without a context there to copy it through", ph.prop.LocID)
		}
	}
	devs := map[int32]bool{}
	for _, c := range s.ctxs {
		devs[c.dev] = true
	}
	if why == "" && len(devs) > 1 {
		why = "it has contexts on several GPUs"
	}
	for _, a := range s.allocs {
		switch {
		case why != "" || a.mod != nil:
		case a.phys != nil && a.accessPartial:
			why = fmt.Sprintf("cuMemSetAccess set access on part of its mapping at %#x only", a.base)
		case a.phys == nil && a.backed == nil && a.pool == nil:
			why = fmt.Sprintf("its allocation at %#x is not backed by virtual memory", a.base)
		}
	}
	if why != "" {
		return fmt.Errorf("%w: %s", ErrNotMigratable, why)
	}
	return nil
}

// snapshot describes the session's objects; the client's work is done
// (quiesce).
func (s *session) snapshot() snapshot {
	sn := snapshot{token: s.token, identity: s.identity, version: s.clientVersion, next: s.objects.next}
	if s.modeSet {
		mode, r := s.be.ThreadExchangeStreamCaptureMode(proto.CaptureModeGlobal)
		if r == ok {
			s.be.ThreadExchangeStreamCaptureMode(mode)
			sn.captureMode, sn.modeSet = mode, true
		}
	}
	for dev, p := range s.primary {
		sp := snapPrimary{dev: dev, flags: p.flags, refs: uint32(p.refs)}
		if p.ctx != nil {
			sp.ctx = p.ctx.h
		}
		sn.primary = append(sn.primary, sp)
	}
	for _, h := range sortedHandles(s.ctxs) {
		c := s.ctxs[h]
		sc := snapCtx{h: h, dev: c.dev, flags: c.flags, primary: c.primary}
		for l, lc := range c.limits {
			sc.limits = append(sc.limits, snapLimit{limit: l, value: lc.value})
		}
		sn.ctxs = append(sn.ctxs, sc)
	}
	for _, h := range sortedHandles(s.mods) {
		m := s.mods[h]
		sm := snapModule{h: h, ctx: m.ctx.h, image: uint64(len(m.image))}
		for name, fh := range m.funcs {
			sf := snapFunc{name: name, h: fh}
			for a, v := range s.funcs[fh].attrs {
				sf.attrs = append(sf.attrs, [2]int32{a, v})
			}
			sm.funcs = append(sm.funcs, sf)
		}
		for name, a := range m.globals {
			sm.globals = append(sm.globals, snapGlobal{name: name, base: a.base, size: a.size})
		}
		sn.mods = append(sn.mods, sm)
	}
	for _, h := range sortedHandles(s.streams) {
		st := s.streams[h]
		sn.streams = append(sn.streams, snapStream{h: h, ctx: st.ctx.h, flags: st.flags, priority: st.priority, withPriority: st.withPriority})
	}
	for _, h := range sortedHandles(s.events) {
		e := s.events[h]
		sn.events = append(sn.events, snapEvent{h: h, ctx: e.ctx.h, flags: e.flags})
	}
	for _, a := range s.allocs {
		switch {
		case a.phys != nil:
			sn.mappings = append(sn.mappings, snapMapping{base: a.base, size: a.size, phys: a.phys.h, access: a.access})
		case a.mod == nil:
			sa := snapAlloc{ctx: a.ctx.h, base: a.base, size: a.size}
			if a.pool != nil {
				sa.pool = a.pool.h
			}
			sn.allocs = append(sn.allocs, sa)
		}
	}
	sn.pools = s.snapPools()
	for _, res := range s.virtual.reserved {
		sn.reserved = append(sn.reserved, snapReservation{base: res.base, size: res.size})
	}
	for _, h := range sortedHandles(s.virtual.phys) {
		ph := s.virtual.phys[h]
		sn.phys = append(sn.phys, snapPhys{h: h, size: ph.size, prop: ph.prop, refs: uint32(ph.refs)})
	}
	return sn
}

func (sn snapshot) encode() []byte {
	var e proto.Encoder
	e.U32(snapshotVersion)
	e.Str(sn.token)
	e.Str(sn.identity)
	e.U32(uint32(sn.version))
	e.U64(uint64(sn.next))
	e.U32(b2u(sn.modeSet))
	e.I32(sn.captureMode)
	e.U32(uint32(len(sn.primary)))
	for _, p := range sn.primary {
		e.I32(p.dev)
		e.U32(p.flags)
		e.U64(uint64(p.ctx))
		e.U32(p.refs)
	}
	e.U32(uint32(len(sn.ctxs)))
	for _, c := range sn.ctxs {
		e.U64(uint64(c.h))
		e.I32(c.dev)
		e.U32(c.flags)
		e.U32(b2u(c.primary))
		e.U32(uint32(len(c.limits)))
		for _, l := range c.limits {
			e.U32(l.limit)
			e.U64(l.value)
		}
	}
	e.U32(uint32(len(sn.mods)))
	for _, m := range sn.mods {
		e.U64(uint64(m.h))
		e.U64(uint64(m.ctx))
		e.U64(m.image)
		e.U32(uint32(len(m.funcs)))
		for _, f := range m.funcs {
			e.Str(f.name)
			e.U64(uint64(f.h))
			e.U32(uint32(len(f.attrs)))
			for _, a := range f.attrs {
				e.I32(a[0])
				e.I32(a[1])
			}
		}
		e.U32(uint32(len(m.globals)))
		for _, g := range m.globals {
			e.Str(g.name)
			e.U64(uint64(g.base))
			e.U64(g.size)
		}
	}
	e.U32(uint32(len(sn.streams)))
	for _, st := range sn.streams {
		e.U64(uint64(st.h))
		e.U64(uint64(st.ctx))
		e.U32(st.flags)
		e.I32(st.priority)
		e.U32(b2u(st.withPriority))
	}
	e.U32(uint32(len(sn.events)))
	for _, ev := range sn.events {
		e.U64(uint64(ev.h))
		e.U64(uint64(ev.ctx))
		e.U32(ev.flags)
	}
	e.U32(uint32(len(sn.allocs)))
	for _, a := range sn.allocs {
		e.U64(uint64(a.ctx))
		e.U64(uint64(a.base))
		e.U64(a.size)
		e.U64(uint64(a.pool))
	}
	e.U32(uint32(len(sn.reserved)))
	for _, r := range sn.reserved {
		e.U64(uint64(r.base))
		e.U64(r.size)
	}
	e.U32(uint32(len(sn.phys)))
	for _, ph := range sn.phys {
		e.U64(uint64(ph.h))
		e.U64(ph.size)
		e.MemProp(ph.prop)
		e.U32(ph.refs)
	}
	e.U32(uint32(len(sn.mappings)))
	for _, m := range sn.mappings {
		e.U64(uint64(m.base))
		e.U64(m.size)
		e.U64(uint64(m.phys))
		e.U32(uint32(len(m.access)))
		for _, a := range m.access {
			e.U32(a.LocType)
			e.I32(a.LocID)
			e.U32(a.Flags)
		}
	}
	e.U32(uint32(len(sn.pools)))
	for _, p := range sn.pools {
		e.U64(uint64(p.h))
		e.I32(p.dev)
		e.U32(b2u(p.dflt))
		e.U32(b2u(p.current))
		e.U64(p.threshold)
		for _, v := range p.reuse {
			e.U64(v)
		}
		e.U64(p.maxSize)
		e.U32(uint32(len(p.chunks)))
		for _, c := range p.chunks {
			e.U64(uint64(c.base))
			e.U64(c.size)
			e.U64(c.slot)
		}
	}
	return e.Payload()
}

func b2u(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

// count reads a list's length, bounded by maxSnapObjects and by the bytes
// left (each item takes at least min).
func count(d *proto.Decoder, min int) int {
	n := int(d.U32())
	if n > maxSnapObjects || n*min > d.Len() {
		d.Fail(fmt.Sprintf("a list of %d items in %d bytes", n, d.Len()))
		return 0
	}
	return n
}

// decodeSnapshot reads an encoded state. It checks the encoding only:
// restore checks the objects against each other and the backend.
func decodeSnapshot(p []byte) (snapshot, error) {
	d := proto.NewDecoder(p)
	var sn snapshot
	if v := d.U32(); v != snapshotVersion {
		return sn, fmt.Errorf("%w: snapshot version %d, want %d", proto.ErrMalformed, v, snapshotVersion)
	}
	sn.token, sn.identity = d.Str(proto.MaxString), d.Str(proto.MaxString)
	sn.version = uint16(d.U32())
	sn.next = proto.Handle(d.U64())
	sn.modeSet, sn.captureMode = d.U32() != 0, d.I32()
	for range count(d, 20) {
		sn.primary = append(sn.primary, snapPrimary{dev: d.I32(), flags: d.U32(), ctx: proto.Handle(d.U64()), refs: d.U32()})
	}
	for range count(d, 24) {
		c := snapCtx{h: proto.Handle(d.U64()), dev: d.I32(), flags: d.U32(), primary: d.U32() != 0}
		for range count(d, 12) {
			c.limits = append(c.limits, snapLimit{limit: d.U32(), value: d.U64()})
		}
		sn.ctxs = append(sn.ctxs, c)
	}
	for range count(d, 32) {
		m := snapModule{h: proto.Handle(d.U64()), ctx: proto.Handle(d.U64()), image: d.U64()}
		for range count(d, 16) {
			f := snapFunc{name: d.Str(proto.MaxString), h: proto.Handle(d.U64())}
			for range count(d, 8) {
				f.attrs = append(f.attrs, [2]int32{d.I32(), d.I32()})
			}
			m.funcs = append(m.funcs, f)
		}
		for range count(d, 20) {
			m.globals = append(m.globals, snapGlobal{name: d.Str(proto.MaxString), base: proto.DevPtr(d.U64()), size: d.U64()})
		}
		sn.mods = append(sn.mods, m)
	}
	for range count(d, 28) {
		sn.streams = append(sn.streams, snapStream{h: proto.Handle(d.U64()), ctx: proto.Handle(d.U64()), flags: d.U32(), priority: d.I32(), withPriority: d.U32() != 0})
	}
	for range count(d, 20) {
		sn.events = append(sn.events, snapEvent{h: proto.Handle(d.U64()), ctx: proto.Handle(d.U64()), flags: d.U32()})
	}
	for range count(d, 32) {
		sn.allocs = append(sn.allocs, snapAlloc{ctx: proto.Handle(d.U64()), base: proto.DevPtr(d.U64()), size: d.U64(), pool: proto.Handle(d.U64())})
	}
	for range count(d, 16) {
		sn.reserved = append(sn.reserved, snapReservation{base: proto.DevPtr(d.U64()), size: d.U64()})
	}
	for range count(d, 48) {
		sn.phys = append(sn.phys, snapPhys{h: proto.Handle(d.U64()), size: d.U64(), prop: d.MemProp(), refs: d.U32()})
	}
	for range count(d, 28) {
		m := snapMapping{base: proto.DevPtr(d.U64()), size: d.U64(), phys: proto.Handle(d.U64())}
		for range count(d, 12) {
			m.access = append(m.access, proto.MemAccessDesc{LocType: d.U32(), LocID: d.I32(), Flags: d.U32()})
		}
		sn.mappings = append(sn.mappings, m)
	}
	for range count(d, 64) {
		p := snapPool{h: proto.Handle(d.U64()), dev: d.I32(), dflt: d.U32() != 0, current: d.U32() != 0, threshold: d.U64()}
		for i := range p.reuse {
			p.reuse[i] = d.U64()
		}
		p.maxSize = d.U64()
		for range count(d, 24) {
			p.chunks = append(p.chunks, snapChunk{base: proto.DevPtr(d.U64()), size: d.U64(), slot: d.U64()})
		}
		sn.pools = append(sn.pools, p)
	}
	if err := d.Finish(); err != nil {
		return snapshot{}, fmt.Errorf("snapshot: %w", err)
	}
	return sn, nil
}

// writeSnapshot writes the session's snapshot to w: the state, then the
// module images, the allocations', the globals' and the physical
// allocations' contents.
func (s *session) writeSnapshot(w io.Writer) error {
	sn := s.snapshot()
	st := sn.encode()
	var e proto.Encoder
	e.U64(uint64(len(st)))
	if _, err := w.Write(e.Payload()); err != nil {
		return err
	}
	if _, err := w.Write(st); err != nil {
		return err
	}
	for _, h := range sortedHandles(s.mods) {
		if _, err := w.Write(s.mods[h].image); err != nil {
			return err
		}
	}
	for _, a := range sn.allocs {
		if err := s.dumpMemory(w, a.ctx, a.base, a.size); err != nil {
			return err
		}
	}
	for _, m := range sn.mods {
		for _, g := range m.globals {
			if err := s.dumpMemory(w, m.ctx, s.mods[m.h].globals[g.name].real(g.base), g.size); err != nil {
				return err
			}
		}
	}
	for _, sp := range sn.phys {
		ph := s.virtual.phys[sp.h]
		err := s.withScratch(ph, func(p proto.DevPtr) error {
			return s.dumpMemory(w, s.ctxOn(ph.prop.LocID).h, p, ph.size)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// ctxOn returns the session's context (its first) on client device dev,
// or nil.
func (s *session) ctxOn(dev int32) *ctxState {
	var first *ctxState
	for _, c := range s.ctxs {
		if c.dev == dev && (first == nil || c.h < first.h) {
			first = c
		}
	}
	return first
}

// dumpMemory writes n bytes of device memory at p, of context h, to w.
func (s *session) dumpMemory(w io.Writer, h proto.Handle, p proto.DevPtr, n uint64) error {
	if r := s.use(s.ctxs[h]); r != ok {
		return fmt.Errorf("cuCtxSetCurrent: %v", r)
	}
	buf := s.chunk(0)
	for off := uint64(0); off < n; {
		k := min(n-off, uint64(len(buf)))
		if r := s.be.MemcpyDtoH(buf[:k], p+proto.DevPtr(off), 0); r != ok {
			return fmt.Errorf("cuMemcpyDtoH of %d bytes at %#x: %v", k, p+proto.DevPtr(off), r)
		}
		if _, err := w.Write(buf[:k]); err != nil {
			return err
		}
		off += k
	}
	return nil
}
