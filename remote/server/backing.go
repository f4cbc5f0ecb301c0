package server

import (
	"fmt"
	"math/rand/v2"
	"sort"

	"github.com/gpumux/gpumux/remote/proto"
)

// Migratable memory. A session's device pointers live on in kernel
// parameters and in data structures on the device, so a migrated session
// must find its memory at the same addresses on the target (migrate.go).
// cuMemAlloc's addresses are the driver's choice; a reservation's
// (cuMemAddressReserve) can be asked for. So with WithMigration the server
// backs every cuMemAlloc with virtual memory of its own (create, map, set
// access) in a window of addresses the session reserves per device: the
// target reserves the same window, and refuses the migration before the
// switch if the driver places it elsewhere. The client sees a cuMemAlloc
// allocation as before: its size is the one it asked for, and the quota
// counts that; the backing rounds it up to the allocation granularity.
//
// The window is what makes the addresses free on the target. The driver
// places its own allocations (and a reservation without a wish) at the
// lowest free addresses of the process, alike in every server, so the
// addresses a session got on one server are taken on another by that
// server's own sessions and contexts (seen on an H200: 0x306000000 was).
// A window is windowSize bytes at one of windowSlots bases far above what
// the driver and the kernel's mmap hand out, picked at random per session;
// on the source a base the driver does not honour (taken) is skipped for
// another, on the target the migrated window's base must be honoured.
const (
	windowSize  = 1 << 40          // larger than any GPU's memory
	windowFirst = 0x2000_0000_0000 // 32 TiB: the first window's base
	windowSlots = 48               // up to 80 TiB, below PIE programs' 0x55…
	windowTries = 8                // bases tried on the source
	windowEnd   = windowFirst + windowSlots*windowSize
)

// window is a session's reserved addresses on one device (or, keyed by a
// negative number, for the client's own reservations: virtual.go), what of
// them is free (offsets, sorted, coalesced), and the device's allocation
// granularity, asked for once.
type window struct {
	base proto.DevPtr
	gran uint64
	free []span
}

type span struct{ off, size uint64 }

// take finds size bytes aligned to align, first fit.
func (w *window) take(size, align uint64) (uint64, bool) {
	for i, f := range w.free {
		off := (f.off + align - 1) &^ (align - 1)
		if off+size <= f.off+f.size && off+size > off {
			w.cut(i, off, size)
			return off, true
		}
	}
	return 0, false
}

// takeAt takes [off, off+size) if it is free.
func (w *window) takeAt(off, size uint64) bool {
	for i, f := range w.free {
		if f.off <= off && off+size <= f.off+f.size && off+size > off {
			w.cut(i, off, size)
			return true
		}
	}
	return false
}

// cut removes [off, off+size) from free span i, which holds it.
func (w *window) cut(i int, off, size uint64) {
	f := w.free[i]
	var rest []span
	if off > f.off {
		rest = append(rest, span{f.off, off - f.off})
	}
	if end := off + size; end < f.off+f.size {
		rest = append(rest, span{end, f.off + f.size - end})
	}
	w.free = append(w.free[:i], append(rest, w.free[i+1:]...)...)
}

// give returns [off, off+size) to the free spans.
func (w *window) give(off, size uint64) {
	i := sort.Search(len(w.free), func(i int) bool { return w.free[i].off > off })
	w.free = append(w.free[:i], append([]span{{off, size}}, w.free[i:]...)...)
	// Coalesce with the neighbours.
	if i+1 < len(w.free) && w.free[i].off+w.free[i].size == w.free[i+1].off {
		w.free[i].size += w.free[i+1].size
		w.free = append(w.free[:i+1], w.free[i+2:]...)
	}
	if i > 0 && w.free[i-1].off+w.free[i-1].size == w.free[i].off {
		w.free[i-1].size += w.free[i].size
		w.free = append(w.free[:i], w.free[i+1:]...)
	}
}

// windowFor returns the session's window on backend device dev. On first
// use it asks for the device's allocation granularity and reserves the
// window: holding want when want is not 0 (a migrated allocation's
// address: its window's base must be honoured), else at one of the bases
// the driver honours.
func (s *session) windowFor(dev int32, want proto.DevPtr) (*window, proto.Result) {
	if w := s.windows[dev]; w != nil {
		return w, ok
	}
	var gran uint64 // a window of reservations (dev < 0) maps nothing itself
	if dev >= 0 {
		var r proto.Result
		if gran, r = s.be.MemGetAllocationGranularity(devProp(dev), proto.MemGranularityMinimum); r != ok {
			return nil, r
		}
		if gran == 0 || gran&(gran-1) != 0 {
			return nil, proto.ErrUnknown
		}
	}
	var bases []proto.DevPtr
	if want != 0 {
		bases = []proto.DevPtr{want &^ (windowSize - 1)}
	} else {
		for _, slot := range rand.Perm(windowSlots)[:windowTries] {
			bases = append(bases, proto.DevPtr(windowFirst+uint64(slot)*windowSize))
		}
	}
	failed := proto.ErrAlreadyMapped
	for _, base := range bases {
		held, made := s.held.try(s, base)
		if !held || !made && want == 0 {
			continue // another session's here, or another window of this one
		}
		unclaim := func() {
			if made {
				s.held.release(s, base)
			}
		}
		p, r := s.be.MemAddressReserve(windowSize, 0, base, 0)
		if r != ok {
			// Out of addresses where the driver would have put it
			// instead: another base may still be free.
			unclaim()
			failed = r
			continue
		}
		if p != base {
			unclaim()
			s.warn("cuMemAddressFree", s.be.MemAddressFree(p, windowSize))
			if want != 0 {
				s.log.Warn("a migrated window's base is taken in this process", "base", fmt.Sprintf("%#x", base),
					"driver_gave", fmt.Sprintf("%#x", p), "mapped_there", addressUsers(uint64(base), uint64(base)+windowSize))
			}
			continue
		}
		w := &window{base: p, gran: gran, free: []span{{0, windowSize}}}
		if s.windows == nil {
			s.windows = map[int32]*window{}
		}
		s.windows[dev] = w
		return w, ok
	}
	return nil, failed
}

// freeWindows gives the session's windows back, and its claims of bases
// (windowClaims); what was mapped in them is unmapped already.
func (s *session) freeWindows() {
	for dev, w := range s.windows {
		s.warn("cuMemAddressFree", s.be.MemAddressFree(w.base, windowSize))
		delete(s.windows, dev)
	}
	s.held.releaseAll(s)
}

// backing is the virtual memory behind one cuMemAlloc allocation.
type backing struct {
	size uint64  // mapped: the request rounded up
	phys uint64  // the backend's handle of the physical allocation
	win  *window // where it is mapped
}

// WithMigration makes the server's sessions migratable: every cuMemAlloc
// is backed by virtual memory (backing.go) and sessions may be moved to
// another server of the pool, and received from one (migrate.go).
func WithMigration() Option { return func(s *Server) { s.migration = true } }

// devProp is the allocation property of pinned memory on backend device
// dev.
func devProp(dev int32) proto.MemProp {
	return proto.MemProp{Type: proto.MemAllocationTypePinned, LocType: proto.MemLocationTypeDevice, LocID: dev}
}

// allocBacked makes n bytes of device memory on backend device dev, with
// the calling thread's context current, in the session's window of dev, at
// want (0: anywhere in it). Addresses the window cannot give are
// CUDA_ERROR_ALREADY_MAPPED.
func (s *session) allocBacked(dev int32, n uint64, want proto.DevPtr) (proto.DevPtr, *backing, proto.Result) {
	prop := devProp(dev)
	w, r := s.windowFor(dev, want)
	if r != ok {
		return 0, nil, r
	}
	gran := w.gran
	size := (n + gran - 1) &^ (gran - 1)
	if size < n || size > windowSize {
		return 0, nil, proto.ErrOutOfMemory
	}
	var off uint64
	if want == 0 {
		var found bool
		if off, found = w.take(size, gran); !found {
			return 0, nil, proto.ErrOutOfMemory
		}
	} else {
		off = uint64(want - w.base)
		if want < w.base || uint64(want)%gran != 0 || !w.takeAt(off, size) {
			return 0, nil, proto.ErrAlreadyMapped
		}
	}
	p := w.base + proto.DevPtr(off)
	h, r := s.be.MemCreate(size, prop, 0)
	if r != ok {
		w.give(off, size)
		return 0, nil, r
	}
	b := &backing{size: size, phys: h, win: w}
	if r := s.be.MemMap(p, size, 0, h, 0); r != ok {
		s.warn("cuMemRelease", s.be.MemRelease(h))
		w.give(off, size)
		return 0, nil, r
	}
	rw := []proto.MemAccessDesc{{LocType: proto.MemLocationTypeDevice, LocID: dev, Flags: proto.MemAccessReadWrite}}
	if r := s.be.MemSetAccess(p, size, rw); r != ok {
		s.freeBacked(p, b)
		return 0, nil, r
	}
	return p, b, ok
}

// freeBacked unmaps and releases a backing, gives its addresses back to
// its window, and returns the first failure.
func (s *session) freeBacked(p proto.DevPtr, b *backing) proto.Result {
	r := s.be.MemUnmap(p, b.size)
	if r2 := s.be.MemRelease(b.phys); r == ok {
		r = r2
	}
	b.win.give(uint64(p-b.win.base), b.size)
	return r
}

// memAlloc is cuMemAlloc in ctx, which is current: backed by virtual memory
// on a server WithMigration.
func (s *session) memAlloc(ctx *ctxState, a *allocation) (proto.DevPtr, proto.Result) {
	if !s.migration {
		return s.be.MemAlloc(a.size)
	}
	p, b, r := s.allocBacked(s.devs[ctx.dev], a.size, 0)
	a.backed = b
	return p, r
}

// memFree frees a cuMemAlloc or pool allocation; its context is current,
// and its work done if waited (a context's end: freed whatever that said).
func (s *session) memFree(a *allocation, waited bool) proto.Result {
	windowed := false
	if a.pool != nil {
		_, windowed = a.pool.mem.(*windowPool)
	}
	if !waited && (a.backed != nil || windowed) {
		// cuMemFree waits for the context's work; unmapping would not.
		if r := s.be.CtxSynchronize(); r != ok {
			return r
		}
	}
	switch {
	case a.pool != nil:
		return a.pool.mem.freeNow(a.base)
	case a.backed != nil:
		return s.freeBacked(a.base, a.backed)
	}
	return s.be.MemFree(a.base)
}

// The client's own reservations (cuMemAddressReserve) on a server
// WithMigration lie in windows of the session too, keyed -1, -2, … in
// s.windows, up to vaWindows of them: the server hands out a range of a
// window without asking the driver, and cuMemMap maps into it as into any
// reserved range. The target reserves the same windows, so the client's
// mappings come back at their addresses.
const (
	vaWindows = 4       // windows of reservations: 4 TiB of addresses
	vaAlign   = 2 << 20 // at least the largest allocation granularity seen
)

// reserveWindowed reserves size bytes for the client in a window of
// reservations, at want if that is free and aligned (the driver too
// honours an address asked for when it can), else first fit.
func (s *session) reserveWindowed(size, align uint64, want proto.DevPtr) (*reservation, proto.Result) {
	align = max(align, vaAlign)
	if align&(align-1) != 0 || size > windowSize {
		return nil, proto.ErrInvalidValue
	}
	for k := int32(1); k <= vaWindows; k++ {
		w, r := s.windowFor(-k, 0)
		if r != ok {
			return nil, r
		}
		off := uint64(want - w.base)
		if want != 0 && want >= w.base && off%align == 0 && w.takeAt(off, size) {
			return &reservation{base: want, size: size, win: w}, ok
		}
		if off, found := w.take(size, align); found {
			return &reservation{base: w.base + proto.DevPtr(off), size: size, win: w}, ok
		}
	}
	return nil, proto.ErrOutOfMemory
}

// reserveAt takes [p, p+size) for a migrated reservation, in the window of
// reservations that holds p (reserved at p's base if none does yet).
func (s *session) reserveAt(p proto.DevPtr, size uint64) (*reservation, proto.Result) {
	base := p &^ (windowSize - 1)
	key := int32(0) // the window at base, else the first key free
	for k := int32(1); k <= vaWindows; k++ {
		w := s.windows[-k]
		if w != nil && w.base == base {
			key = -k
			break
		}
		if w == nil && key == 0 {
			key = -k
		}
	}
	if key == 0 {
		return nil, proto.ErrAlreadyMapped
	}
	w, r := s.windowFor(key, p)
	if r != ok {
		return nil, r
	}
	if w.base != base || !w.takeAt(uint64(p-base), size) {
		return nil, proto.ErrAlreadyMapped
	}
	return &reservation{base: p, size: size, win: w}, ok
}

// unreserve gives a client's reservation back: to its window, or to the
// backend.
func (s *session) unreserve(res *reservation) proto.Result {
	if res.win != nil {
		res.win.give(uint64(res.base-res.win.base), res.size)
		return ok
	}
	return s.be.MemAddressFree(res.base, res.size)
}

// withScratch maps physical memory ph whole at a free range of a window of
// reservations, readable and writable from its device, runs f with the
// address, and unmaps it: how a migration reads and writes physical memory
// the client may have mapped in part, or not at all.
func (s *session) withScratch(ph *physical, f func(p proto.DevPtr) error) error {
	dev, r := s.device(ph.prop.LocID)
	if r != ok {
		return fmt.Errorf("physical memory %#x: device %d: %v", ph.h, ph.prop.LocID, r)
	}
	res, r := s.reserveWindowed(ph.size, 0, 0)
	if r != ok {
		return fmt.Errorf("addresses to copy physical memory %#x through: %v", ph.h, r)
	}
	defer s.unreserve(res)
	if r := s.be.MemMap(res.base, ph.size, 0, ph.raw, 0); r != ok {
		return fmt.Errorf("cuMemMap of physical memory %#x: %v", ph.h, r)
	}
	defer func() { s.warn("cuMemUnmap", s.be.MemUnmap(res.base, ph.size)) }()
	rw := []proto.MemAccessDesc{{LocType: proto.MemLocationTypeDevice, LocID: dev, Flags: proto.MemAccessReadWrite}}
	if r := s.be.MemSetAccess(res.base, ph.size, rw); r != ok {
		return fmt.Errorf("cuMemSetAccess of physical memory %#x: %v", ph.h, r)
	}
	return f(res.base)
}
