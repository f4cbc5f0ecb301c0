package server

import (
	"encoding/binary"
	"slices"
	"sort"

	"github.com/gpumux/gpumux/remote/proto"
)

// Relocated module globals. A migration rebuilds every allocation at the
// address the client holds (backing.go), but the driver places a module's
// globals itself, in a heap of the context whose base differs from one
// process to the next (the kernel's address space layout randomisation),
// and no public call chooses it. So a global the target's driver puts
// elsewhere keeps the address the client knows, its base, and the server
// keeps where it really is, at: every address the client passes for it is
// translated before it reaches the driver.
//
// Copies, memsets, graph memset and copy nodes and peer copies translate
// through span and memOf, which already find the allocation of every
// address a call takes. Kernel parameters are opaque bytes: every 8-byte
// aligned word of them (a pointer argument, or a pointer in a structure
// passed by value) that falls within a relocated global's range is
// translated, so a program that passes a global's address to a kernel (as
// cuBLAS does with its constants) keeps working. What the server cannot
// see is not translated: a global's address the program stored in device
// memory itself, or computed on the device, still names the old place.
// The relocated globals' ranges lie in the source process's heap, so an
// integer argument falls in one only by a coincidence of 47-bit values.
//
// The client's view never changes: cuModuleGetGlobal, cuPointerGetAttribute
// and cuMemGetAddressRange answer with the old address, a snapshot carries
// it (with the contents read from where the global is), and a later
// migration relocates it again, or not at all when a target happens to
// place it where the client saw it.

// real returns where the backend has the client's address p of a.
func (a *allocation) real(p proto.DevPtr) proto.DevPtr {
	if a.at == 0 {
		return p
	}
	return a.at + (p - a.base)
}

// relocations are the session's relocated globals, sorted by base, and
// the bounds of their ranges (a quick test for most kernel words).
type relocations struct {
	list   []*allocation
	lo, hi proto.DevPtr
}

func (rs *relocations) add(a *allocation) {
	i := sort.Search(len(rs.list), func(i int) bool { return rs.list[i].base >= a.base })
	rs.list = slices.Insert(rs.list, i, a)
	rs.bounds()
}

func (rs *relocations) remove(a *allocation) {
	rs.list = slices.DeleteFunc(rs.list, func(b *allocation) bool { return b == a })
	rs.bounds()
}

func (rs *relocations) bounds() {
	if len(rs.list) == 0 {
		rs.lo, rs.hi = 0, 0
		return
	}
	last := rs.list[len(rs.list)-1]
	rs.lo, rs.hi = rs.list[0].base, last.base+proto.DevPtr(last.size)
}

// of returns the relocated global holding v, or nil.
func (rs *relocations) of(v proto.DevPtr) *allocation {
	if v < rs.lo || v >= rs.hi {
		return nil
	}
	i := sort.Search(len(rs.list), func(i int) bool { return rs.list[i].base > v }) - 1
	if i < 0 || uint64(v-rs.list[i].base) >= rs.list[i].size {
		return nil
	}
	return rs.list[i]
}

// translateParams rewrites, in place, every 8-byte aligned word of a
// kernel's parameters (laid out as ps) that is an address within a
// relocated global.
func (rs *relocations) translateParams(params []byte, ps []param) {
	if len(rs.list) == 0 {
		return
	}
	for _, p := range ps {
		for off := (p.offset + 7) &^ 7; off+8 <= p.offset+p.size && off+8 <= uint64(len(params)); off += 8 {
			w := params[off : off+8]
			v := proto.DevPtr(binary.LittleEndian.Uint64(w))
			if a := rs.of(v); a != nil {
				binary.LittleEndian.PutUint64(w, uint64(a.real(v)))
			}
		}
	}
}
