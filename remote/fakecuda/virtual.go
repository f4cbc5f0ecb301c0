package fakecuda

import (
	"sort"

	"github.com/gpumux/gpumux/remote/proto"
)

// Granularity is the fake's allocation granularity for virtual memory
// management, minimum and recommended (a GPU's large page): sizes of
// reservations, physical allocations and mappings must be multiples of it.
const Granularity = 2 << 20

// CUmemAccess_flags bits the fake checks.
const (
	accessRead      = 1
	accessReadWrite = 3
)

// physical is a physical allocation (MemCreate): pages every mapping of it
// shares.
type physical struct {
	dev      *device
	size     uint64
	prop     proto.MemProp
	pages    map[uint64][]byte
	maps     int
	released bool // its handle was released: it goes with its last mapping
}

// reservation is a reserved range of addresses.
type reservation struct {
	base, size uint64
	maps       int
}

// MemGetAllocationGranularity answers Granularity for pinned device memory.
func (b *Backend) MemGetAllocationGranularity(prop proto.MemProp, option uint32) (uint64, proto.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, r := b.memProp(prop); r != proto.Success {
		return 0, r
	}
	if option > proto.MemGranularityRecommended {
		return 0, proto.ErrInvalidValue
	}
	return Granularity, proto.Success
}

// memProp checks a CUmemAllocationProp the fake supports: pinned memory on
// one of its devices, no shareable handle; the caller holds mu.
func (b *Backend) memProp(prop proto.MemProp) (*device, proto.Result) {
	if prop.Type != proto.MemAllocationTypePinned || prop.LocType != proto.MemLocationTypeDevice ||
		prop.HandleTypes != proto.MemHandleTypeNone || prop.Compression != 0 || prop.Usage != 0 || prop.GPUDirectRDMA > 1 {
		return nil, proto.ErrInvalidValue
	}
	return b.dev(prop.LocID)
}

// granular reports whether n is a positive multiple of Granularity.
func granular(n uint64) bool { return n > 0 && n%Granularity == 0 }

// MemAddressReserve reserves addresses no allocation will get. As CUDA
// does, it takes addr as a hint: the range there if it is free (aligned,
// inside the fake address space, overlapping no allocation or
// reservation), else one of its own choice. A caller that needs the exact
// range (a migrated session's memory) checks the address it got.
func (b *Backend) MemAddressReserve(size, alignment uint64, addr proto.DevPtr, flags uint64) (proto.DevPtr, proto.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.initialized {
		return 0, proto.ErrNotInitialized
	}
	if !granular(size) || flags != 0 || alignment&(alignment-1) != 0 {
		return 0, proto.ErrInvalidValue
	}
	align := max(alignment, Granularity)
	p, ok := uint64(addr), addr != 0 && b.vacantLocked(uint64(addr), size, align)
	if ok {
		b.mem.claim(p, size)
	} else if p, ok = b.mem.reserve(size, align); !ok {
		return 0, proto.ErrOutOfMemory
	}
	b.reserved[p] = &reservation{base: p, size: size}
	return proto.DevPtr(p), proto.Success
}

// vacantLocked reports whether [p, p+size) can be reserved: aligned to
// align, inside the fake address space, and overlapping no allocation or
// reservation. The caller holds mu.
func (b *Backend) vacantLocked(p, size, align uint64) bool {
	end := p + size
	if p%align != 0 || p < hintBase || end < p || end+addrGap > addrLimit {
		return false
	}
	for _, r := range b.reserved {
		if p < r.base+r.size && r.base < end {
			return false
		}
	}
	i := sort.Search(len(b.mem.allocs), func(i int) bool { return b.mem.allocs[i].base+b.mem.allocs[i].size > p })
	return i == len(b.mem.allocs) || b.mem.allocs[i].base >= end
}

// MemAddressFree frees a whole reservation with nothing mapped in it.
func (b *Backend) MemAddressFree(p proto.DevPtr, size uint64) proto.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	res := b.reserved[uint64(p)]
	if res == nil || res.size != size || res.maps != 0 {
		return proto.ErrInvalidValue
	}
	delete(b.reserved, uint64(p))
	return proto.Success
}

// MemCreate makes physical memory on a device.
func (b *Backend) MemCreate(size uint64, prop proto.MemProp, flags uint64) (uint64, proto.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	dev, r := b.memProp(prop)
	if r != proto.Success {
		return 0, r
	}
	if !granular(size) || flags != 0 {
		return 0, proto.ErrInvalidValue
	}
	if size > dev.total-dev.used {
		return 0, proto.ErrOutOfMemory
	}
	dev.used += size
	id := uint64(b.newID())
	b.phys[id] = &physical{dev: dev, size: size, prop: prop, pages: map[uint64][]byte{}}
	return id, proto.Success
}

// MemRelease releases a physical allocation's handle; its memory goes
// with its last mapping.
func (b *Backend) MemRelease(h uint64) proto.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	ph := b.phys[h]
	if ph == nil || ph.released {
		return proto.ErrInvalidValue
	}
	ph.released = true
	b.settlePhys(h, ph)
	return proto.Success
}

// settlePhys frees a released physical allocation without mappings.
func (b *Backend) settlePhys(h uint64, ph *physical) {
	if ph.released && ph.maps == 0 {
		ph.dev.used -= ph.size
		delete(b.phys, h)
	}
}

// reservationOf returns the reservation holding [p, p+n); the caller holds
// mu.
func (b *Backend) reservationOf(p, n uint64) *reservation {
	for _, r := range b.reserved {
		if p >= r.base && n <= r.size && p-r.base <= r.size-n {
			return r
		}
	}
	return nil
}

// MemMap maps a whole physical allocation at p, inside a reservation. The
// mapping belongs to the calling thread's current context, if any: only
// that context's kernels see it (the fake's rule for kernels, doc.go).
func (b *Backend) MemMap(p proto.DevPtr, size, offset, h, flags uint64) proto.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	ph := b.phys[h]
	if ph == nil || ph.released || offset != 0 || flags != 0 || size != ph.size || uint64(p)%Granularity != 0 {
		return proto.ErrInvalidValue
	}
	res := b.reservationOf(uint64(p), size)
	if res == nil {
		return proto.ErrInvalidValue
	}
	a := &allocation{base: uint64(p), size: size, ctx: b.ctxs[b.current[gettid()]], phys: ph,
		access: map[int32]uint32{}, pages: ph.pages}
	if !b.mem.insert(a) {
		return proto.ErrInvalidValue
	}
	ph.maps++
	res.maps++
	return proto.Success
}

// MemUnmap unmaps whole mappings that cover [p, p+size) exactly.
func (b *Backend) MemUnmap(p proto.DevPtr, size uint64) proto.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	reg, ok := b.mem.region(uint64(p), size)
	if !ok {
		return proto.ErrInvalidValue
	}
	for _, pc := range reg {
		if pc.a.phys == nil || pc.off != 0 || pc.n != pc.a.size {
			return proto.ErrInvalidValue
		}
	}
	for _, pc := range reg {
		b.unmapLocked(pc.a)
	}
	return proto.Success
}

func (b *Backend) unmapLocked(a *allocation) {
	b.mem.remove(a)
	if res := b.reservationOf(a.base, a.size); res != nil {
		res.maps--
	}
	a.phys.maps--
	for h, ph := range b.phys {
		if ph == a.phys {
			b.settlePhys(h, ph)
		}
	}
}

// MemSetAccess sets the access of devices to mapped memory.
func (b *Backend) MemSetAccess(p proto.DevPtr, size uint64, descs []proto.MemAccessDesc) proto.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	reg, ok := b.mem.region(uint64(p), size)
	if !ok || len(descs) == 0 {
		return proto.ErrInvalidValue
	}
	for _, pc := range reg {
		if pc.a.phys == nil {
			return proto.ErrInvalidValue
		}
	}
	if r := b.checkAccess(descs); r != proto.Success {
		return r
	}
	for _, pc := range reg {
		for _, d := range descs {
			pc.a.access[d.LocID] = d.Flags
		}
	}
	return proto.Success
}

// checkAccess checks access descriptors: devices of the fake, no access,
// read or read-write; the caller holds mu.
func (b *Backend) checkAccess(descs []proto.MemAccessDesc) proto.Result {
	for _, d := range descs {
		if d.LocType != proto.MemLocationTypeDevice || d.Flags&^accessReadWrite != 0 || d.Flags == 2 {
			return proto.ErrInvalidValue
		}
		if _, r := b.dev(d.LocID); r != proto.Success {
			return r
		}
	}
	return proto.Success
}

// MemGetAccess reports a device's access to the mapping at p.
func (b *Backend) MemGetAccess(locType uint32, locID int32, p proto.DevPtr) (uint64, proto.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, r := b.dev(locID); r != proto.Success || locType != proto.MemLocationTypeDevice {
		return 0, proto.ErrInvalidValue
	}
	a, _, ok := b.mem.find(uint64(p), 0)
	if !ok || a.phys == nil {
		return 0, proto.ErrInvalidValue
	}
	return uint64(a.access[locID]), proto.Success
}
