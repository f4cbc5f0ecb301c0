package server

import "github.com/gpumux/gpumux/remote/proto"

// Migratable memory. A session's device pointers live on in kernel
// parameters and in data structures on the device, so a migrated session
// must find its memory at the same addresses on the target (migrate.go).
// cuMemAlloc's addresses are the driver's choice; a reservation's
// (cuMemAddressReserve) can be asked for. So with WithMigration the server
// backs every cuMemAlloc with virtual memory of its own (reserve, create,
// map, set access): the target reserves the same range, and refuses the
// migration before the switch if the driver places it elsewhere. The
// client sees a cuMemAlloc allocation as before: its size is the one it
// asked for, and the quota counts that; the backing rounds it up to the
// allocation granularity.

// backing is the virtual memory behind one cuMemAlloc allocation.
type backing struct {
	size uint64 // reserved and mapped: the request rounded up
	phys uint64 // the backend's handle of the physical allocation
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
// the calling thread's context current, reserved at want (0: anywhere).
// A range the driver places elsewhere than want is
// CUDA_ERROR_ALREADY_MAPPED.
func (s *session) allocBacked(dev int32, n uint64, want proto.DevPtr) (proto.DevPtr, *backing, proto.Result) {
	prop := devProp(dev)
	gran, r := s.be.MemGetAllocationGranularity(prop, proto.MemGranularityMinimum)
	if r != ok {
		return 0, nil, r
	}
	if gran == 0 || gran&(gran-1) != 0 {
		return 0, nil, proto.ErrUnknown
	}
	size := (n + gran - 1) &^ (gran - 1)
	if size < n {
		return 0, nil, proto.ErrOutOfMemory
	}
	p, r := s.be.MemAddressReserve(size, gran, want, 0)
	if r != ok {
		return 0, nil, r
	}
	if want != 0 && p != want {
		s.warn("cuMemAddressFree", s.be.MemAddressFree(p, size))
		return 0, nil, proto.ErrAlreadyMapped
	}
	h, r := s.be.MemCreate(size, prop, 0)
	if r != ok {
		s.warn("cuMemAddressFree", s.be.MemAddressFree(p, size))
		return 0, nil, r
	}
	b := &backing{size: size, phys: h}
	if r := s.be.MemMap(p, size, 0, h, 0); r != ok {
		s.warn("cuMemRelease", s.be.MemRelease(h))
		s.warn("cuMemAddressFree", s.be.MemAddressFree(p, size))
		return 0, nil, r
	}
	rw := []proto.MemAccessDesc{{LocType: proto.MemLocationTypeDevice, LocID: dev, Flags: proto.MemAccessReadWrite}}
	if r := s.be.MemSetAccess(p, size, rw); r != ok {
		s.freeBacked(p, b)
		return 0, nil, r
	}
	return p, b, ok
}

// freeBacked unmaps, releases and unreserves a backing, and returns the
// first failure.
func (s *session) freeBacked(p proto.DevPtr, b *backing) proto.Result {
	r := s.be.MemUnmap(p, b.size)
	if r2 := s.be.MemRelease(b.phys); r == ok {
		r = r2
	}
	if r2 := s.be.MemAddressFree(p, b.size); r == ok {
		r = r2
	}
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

// memFree frees a cuMemAlloc allocation; its context is current.
func (s *session) memFree(a *allocation) proto.Result {
	if a.backed != nil {
		return s.freeBacked(a.base, a.backed)
	}
	return s.be.MemFree(a.base)
}
