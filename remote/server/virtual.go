package server

import (
	"slices"

	"github.com/gpumux/gpumux/remote/proto"
)

// Virtual memory management: cuMemAddressReserve, cuMemCreate, cuMemMap,
// cuMemSetAccess and the rest (PyTorch's expandable segments).
//
// Every byte of physical memory is charged to the quota when cuMemCreate
// makes it and given back when it is freed: when the client has released
// every reference to it (its handle, and each cuMemRetainAllocationHandle)
// and no mapping of it is left. The server holds the backend's one handle
// of each physical allocation until then. Reserved addresses are not
// memory, but the driver's address space is shared by every tenant of a
// process, so a session may reserve at most vaPerQuota times its quota (or,
// without a quota, times the memory of its devices). Ranges and handles are
// the client's own: it maps only into its reservations, only its handles,
// and unmaps, sets access and frees only there. Mappings are allocations
// (objects.go) without a context: copies, memsets and launches may use
// them, across adjacent mappings too. What the client leaves is unmapped,
// freed and released when it goes.

// vaPerQuota bounds a session's reserved virtual addresses as a multiple of
// its quota. PyTorch's expandable segments reserve 1.125 times the device's
// memory (the quota, as the client sees it) per stream and pool, small and
// large: 16 leaves room for seven streams.
const vaPerQuota = 16

// maxVirtualObjects bounds a session's reservations, physical allocations
// and mappings, each.
const maxVirtualObjects = 1 << 16

// reservation is a range of virtual addresses the client reserved.
type reservation struct {
	base proto.DevPtr
	size uint64
	maps int // mappings inside it
	// win is the session's window it lies in, on a server WithMigration
	// (backing.go); nil: reserved from the backend.
	win *window
}

// physical is a physical allocation (cuMemCreate).
type physical struct {
	h    proto.Handle
	raw  uint64 // the backend's handle, held until the memory is freed
	size uint64
	prop proto.MemProp // as the client asked for it
	refs int           // the client's references: its handle and each retain
	maps int           // its mappings
}

// virtualMemory is a session's reservations and physical allocations; its
// mappings are in objects.allocs.
type virtualMemory struct {
	reserved     []*reservation
	reservedSize uint64
	phys         map[proto.Handle]*physical
	mappings     int
	vaLimit      uint64 // vaPerQuota × the quota; 0 until first asked
	refusedTypes bool   // a refused handle type was logged
}

func (v *virtualMemory) init() { v.phys = map[proto.Handle]*physical{} }

// reservationOf returns the reservation holding [p, p+n).
func (v *virtualMemory) reservationOf(p proto.DevPtr, n uint64) *reservation {
	for _, r := range v.reserved {
		if p >= r.base && n <= r.size && uint64(p-r.base) <= r.size-n {
			return r
		}
	}
	return nil
}

// maybeCurrent makes the call's context current if it names one: the
// virtual memory calls need none, as CUDA's do not.
func (s *session) maybeCurrent(c *proto.Call) proto.Result {
	if r := s.refusal(); r != ok {
		return r
	}
	if c.Ctx == 0 {
		return ok
	}
	_, r := s.current(c)
	return r
}

// location maps a client's device location to the backend's; other
// location types are CUDA_ERROR_NOT_SUPPORTED (host memory is the server's,
// not the client's), unknown ones CUDA_ERROR_INVALID_VALUE.
func (s *session) location(locType uint32, id int32) (int32, proto.Result) {
	switch locType {
	case proto.MemLocationTypeDevice:
		return s.device(id)
	case proto.MemLocationTypeHost, proto.MemLocationTypeHost + 1, proto.MemLocationTypeHost + 2:
		return 0, proto.ErrNotSupported
	}
	return 0, proto.ErrInvalidValue
}

// handleTypes checks requested shareable-handle types. None is what every
// allocation gets: a POSIX file descriptor is accepted (PyTorch asks for
// one for every expandable segment) but never made, since exporting a
// handle (cuMemExportToShareableHandle) is not forwarded; the others
// (fabric, Windows) are CUDA_ERROR_NOT_SUPPORTED.
func (s *session) handleTypes(call string, t uint32) proto.Result {
	if t&^proto.MemHandleTypePosixFD == 0 {
		return ok
	}
	if !s.virtual.refusedTypes {
		s.virtual.refusedTypes = true
		s.log.Info(call+": shareable handles other than none or a POSIX file descriptor are not supported",
			"requested_handle_types", t)
	}
	if t&^proto.MemHandleTypeKnownMask != 0 {
		return proto.ErrInvalidValue
	}
	return proto.ErrNotSupported
}

// memProp checks a CUmemAllocationProp and returns the backend's: pinned
// device memory on one of the client's devices, no shareable handle, no
// compression, no special usage.
func (s *session) memProp(call string, p proto.MemProp) (proto.MemProp, proto.Result) {
	switch p.Type {
	case proto.MemAllocationTypePinned:
	case proto.MemAllocationTypeManaged:
		return p, proto.ErrNotSupported
	default:
		return p, proto.ErrInvalidValue
	}
	dev, r := s.location(p.LocType, p.LocID)
	if r != ok {
		return p, r
	}
	if r := s.handleTypes(call, p.HandleTypes); r != ok {
		return p, r
	}
	if p.Compression > 1 || p.GPUDirectRDMA > 1 || p.Usage > 0xffff {
		return p, proto.ErrInvalidValue
	}
	if p.Compression != 0 || p.Usage != 0 {
		return p, proto.ErrNotSupported
	}
	p.LocID, p.HandleTypes = dev, proto.MemHandleTypeNone
	return p, ok
}

// accessDescs checks access descriptors and returns the backend's (be):
// each names one of the client's devices, with no access, read or
// read-write; asked are the same as the client gave them, its devices'
// numbers (what a migration sets again on the target).
func (s *session) accessDescs(blob []byte) (be, asked []proto.MemAccessDesc, _ proto.Result) {
	asked, good := proto.DecodeMemAccessDescs(blob)
	if !good {
		return nil, nil, proto.ErrInvalidValue
	}
	be = slices.Clone(asked)
	for i, d := range asked {
		dev, r := s.location(d.LocType, d.LocID)
		if r != ok {
			return nil, nil, r
		}
		switch d.Flags {
		case proto.MemAccessNone, proto.MemAccessRead, proto.MemAccessReadWrite:
		default:
			return nil, nil, proto.ErrInvalidValue
		}
		be[i].LocID = dev
	}
	return be, asked, ok
}

func (s *session) MemGetAllocationGranularity(c *proto.Call, prop proto.MemProp, option uint32) (uint64, proto.Result) {
	if r := s.maybeCurrent(c); r != ok {
		return 0, r
	}
	p, r := s.memProp("cuMemGetAllocationGranularity", prop)
	if r != ok {
		return 0, r
	}
	if option != proto.MemGranularityMinimum && option != proto.MemGranularityRecommended {
		return 0, proto.ErrInvalidValue
	}
	return s.be.MemGetAllocationGranularity(p, option)
}

// reservable returns the addresses the session may reserve in all.
func (s *session) reservable() uint64 {
	if s.virtual.vaLimit != 0 {
		return s.virtual.vaLimit
	}
	base, _ := s.quota.left()
	if base == 0 {
		for _, d := range s.devs {
			if n, r := s.be.DeviceTotalMem(d); r == ok {
				base += n
			}
		}
	}
	limit := base * vaPerQuota
	if base == 0 || limit/vaPerQuota != base {
		limit = ^uint64(0)
	}
	s.virtual.vaLimit = limit
	return limit
}

// MemAddressReserve reserves addresses within the session's bound.
func (s *session) MemAddressReserve(c *proto.Call, size, alignment uint64, addr proto.DevPtr, flags uint64) (proto.DevPtr, proto.Result) {
	if r := s.maybeCurrent(c); r != ok {
		return 0, r
	}
	v := &s.virtual
	if size == 0 || flags != 0 {
		return 0, proto.ErrInvalidValue
	}
	if limit := s.reservable(); size > limit || v.reservedSize > limit-size || len(v.reserved) >= maxVirtualObjects {
		s.log.Warn("cuMemAddressReserve refused: past the session's bound on reserved addresses",
			"size", size, "reserved", v.reservedSize, "bound", limit, "reservations", len(v.reserved))
		return 0, proto.ErrOutOfMemory
	}
	if s.migration {
		res, r := s.reserveWindowed(size, alignment, addr)
		if r != ok {
			return 0, r
		}
		v.reserved = append(v.reserved, res)
		v.reservedSize += size
		return res.base, ok
	}
	p, r := s.be.MemAddressReserve(size, alignment, addr, flags)
	if r != ok {
		return 0, r
	}
	if uint64(p)+size < uint64(p) || v.reservationOf(p, 1) != nil || v.reservationOf(p+proto.DevPtr(size-1), 1) != nil || !s.vacant(p, size) {
		s.log.Error("the backend reserved addresses the client already holds", "addr", p, "size", size)
		s.be.MemAddressFree(p, size)
		return 0, proto.ErrUnknown
	}
	v.reserved = append(v.reserved, &reservation{base: p, size: size})
	v.reservedSize += size
	return p, ok
}

// MemAddressFree frees one of the client's reservations, whole and with
// nothing mapped in it.
func (s *session) MemAddressFree(c *proto.Call, p proto.DevPtr, size uint64) proto.Result {
	if r := s.maybeCurrent(c); r != ok {
		return r
	}
	v := &s.virtual
	for i, res := range v.reserved {
		if res.base != p {
			continue
		}
		if res.size != size || res.maps != 0 {
			return proto.ErrInvalidValue
		}
		if r := s.unreserve(res); r != ok {
			return r
		}
		v.reserved = append(v.reserved[:i], v.reserved[i+1:]...)
		v.reservedSize -= size
		return ok
	}
	return proto.ErrInvalidValue
}

// MemCreate makes physical memory, charged to the quota before the
// backend is asked.
func (s *session) MemCreate(c *proto.Call, size uint64, prop proto.MemProp, flags uint64) (proto.Handle, proto.Result) {
	if r := s.maybeCurrent(c); r != ok {
		return 0, r
	}
	bp, r := s.memProp("cuMemCreate", prop)
	if r != ok {
		return 0, r
	}
	if size == 0 || flags != 0 {
		return 0, proto.ErrInvalidValue
	}
	if len(s.virtual.phys) >= maxVirtualObjects {
		return 0, proto.ErrOutOfMemory
	}
	if !s.charge(size) {
		return 0, proto.ErrOutOfMemory
	}
	raw, r := s.be.MemCreate(size, bp, flags)
	if r != ok {
		s.uncharge(size)
		return 0, r
	}
	ph := &physical{h: s.handle(), raw: raw, size: size, prop: prop, refs: 1}
	s.virtual.phys[ph.h] = ph
	return ph.h, ok
}

// physOf returns a physical allocation the client holds a reference to.
func (s *session) physOf(h proto.Handle) *physical {
	if ph := s.virtual.phys[h]; ph != nil && ph.refs > 0 {
		return ph
	}
	return nil
}

// MemRelease drops a reference; the memory is freed (and given back to the
// quota) once no reference and no mapping is left.
func (s *session) MemRelease(c *proto.Call, h proto.Handle) proto.Result {
	if r := s.maybeCurrent(c); r != ok {
		return r
	}
	ph := s.physOf(h)
	if ph == nil {
		return proto.ErrInvalidValue
	}
	ph.refs--
	if ph.refs == 0 && ph.maps == 0 {
		if r := s.be.MemRelease(ph.raw); r != ok {
			ph.refs++
			return r
		}
		s.dropPhys(ph)
	}
	return ok
}

// dropPhys forgets a physical allocation the backend has released.
func (s *session) dropPhys(ph *physical) {
	delete(s.virtual.phys, ph.h)
	s.uncharge(ph.size)
}

// MemMap maps one of the client's physical allocations into one of its
// reservations, where nothing is mapped yet.
func (s *session) MemMap(c *proto.Call, p proto.DevPtr, size, offset uint64, h proto.Handle, flags uint64) proto.Result {
	if r := s.maybeCurrent(c); r != ok {
		return r
	}
	ph := s.physOf(h)
	if ph == nil {
		return proto.ErrInvalidValue
	}
	// CUDA: offset and flags must be zero.
	if size == 0 || offset != 0 || flags != 0 || size > ph.size {
		return proto.ErrInvalidValue
	}
	res := s.virtual.reservationOf(p, size)
	if res == nil || !s.vacant(p, size) || s.virtual.mappings >= maxVirtualObjects {
		return proto.ErrInvalidValue
	}
	if r := s.be.MemMap(p, size, offset, ph.raw, flags); r != ok {
		return r
	}
	if !s.addAlloc(&allocation{base: p, size: size, phys: ph, res: res}) {
		s.log.Error("a mapping overlaps the client's memory", "addr", p, "size", size)
		s.be.MemUnmap(p, size)
		return proto.ErrUnknown
	}
	ph.maps++
	res.maps++
	s.virtual.mappings++
	return ok
}

// MemUnmap unmaps whole mappings of the client that cover [p, p+size)
// exactly; physical memory that loses its last mapping after its last
// release is freed.
func (s *session) MemUnmap(c *proto.Call, p proto.DevPtr, size uint64) proto.Result {
	if r := s.maybeCurrent(c); r != ok {
		return r
	}
	ms := s.mapped(p, size)
	if ms == nil || ms[0].base != p || uint64(ms[len(ms)-1].base)+ms[len(ms)-1].size != uint64(p)+size {
		return proto.ErrInvalidValue
	}
	if r := s.be.MemUnmap(p, size); r != ok {
		return r
	}
	for _, m := range ms {
		s.unmapped(m)
	}
	return ok
}

// unmapped forgets a mapping the backend has unmapped, and releases its
// physical memory if nothing else holds it.
func (s *session) unmapped(m *allocation) {
	s.removeAlloc(m)
	m.res.maps--
	s.virtual.mappings--
	ph := m.phys
	if ph.maps--; ph.maps == 0 && ph.refs == 0 {
		if r := s.be.MemRelease(ph.raw); r != ok {
			s.log.Warn("cuMemRelease after the last unmap failed", "result", r.String())
		}
		s.dropPhys(ph)
	}
}

// MemSetAccess sets access to the client's mapped memory for its devices.
func (s *session) MemSetAccess(c *proto.Call, p proto.DevPtr, size uint64, blob []byte) proto.Result {
	if r := s.maybeCurrent(c); r != ok {
		return r
	}
	ds, asked, r := s.accessDescs(blob)
	if r != ok {
		return r
	}
	ms := s.mapped(p, size)
	if ms == nil {
		return proto.ErrInvalidValue
	}
	if r := s.be.MemSetAccess(p, size, ds); r != ok {
		return r
	}
	for _, m := range ms {
		m.access = asked
		m.accessPartial = m.accessPartial || m.base < p || uint64(m.base)+m.size > uint64(p)+size
	}
	return ok
}

// MemGetAccess is the driver's answer for the client's mapped memory.
func (s *session) MemGetAccess(c *proto.Call, locType uint32, locID int32, p proto.DevPtr) (uint64, proto.Result) {
	if r := s.maybeCurrent(c); r != ok {
		return 0, r
	}
	dev, r := s.location(locType, locID)
	if r != ok {
		return 0, r
	}
	if s.mapped(p, 1) == nil {
		return 0, proto.ErrInvalidValue
	}
	return s.be.MemGetAccess(locType, dev, p)
}

// MemRetainAllocationHandle answers from the client's mappings: the handle
// of the physical memory mapped at addr, with one more reference.
func (s *session) MemRetainAllocationHandle(c *proto.Call, addr proto.DevPtr) (proto.Handle, proto.Result) {
	if r := s.maybeCurrent(c); r != ok {
		return 0, r
	}
	ms := s.mapped(addr, 1)
	if ms == nil {
		return 0, proto.ErrInvalidValue
	}
	ph := ms[0].phys
	ph.refs++
	return ph.h, ok
}

// MemGetAllocationPropertiesFromHandle answers with what the client asked
// cuMemCreate for.
func (s *session) MemGetAllocationPropertiesFromHandle(c *proto.Call, h proto.Handle) (proto.MemProp, proto.Result) {
	if r := s.maybeCurrent(c); r != ok {
		return proto.MemProp{}, r
	}
	ph := s.physOf(h)
	if ph == nil {
		return proto.MemProp{}, proto.ErrInvalidValue
	}
	return ph.prop, ok
}

// freeVirtual unmaps, frees and releases everything of the session's
// virtual memory (cleanup), and returns the physical bytes it freed.
func (s *session) freeVirtual() (bytes uint64) {
	before := s.inUse
	defer func() { bytes = before - s.inUse }()
	for _, a := range append([]*allocation(nil), s.allocs...) {
		if a.phys != nil {
			s.warn("cuMemUnmap", s.be.MemUnmap(a.base, a.size))
			s.unmapped(a)
		}
	}
	for _, h := range sortedHandles(s.virtual.phys) {
		ph := s.virtual.phys[h]
		s.warn("cuMemRelease", s.be.MemRelease(ph.raw))
		s.dropPhys(ph)
	}
	for _, res := range s.virtual.reserved {
		s.warn("cuMemAddressFree", s.unreserve(res))
	}
	s.virtual.reserved, s.virtual.reservedSize = nil, 0
	return bytes
}
