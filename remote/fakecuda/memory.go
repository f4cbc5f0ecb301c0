package fakecuda

import (
	"bytes"
	"sort"

	"github.com/gpumux/gpumux/remote/proto"
)

// The fake address space: where allocations start, their alignment, the
// gap left after each and the size of a backing page; a reservation may
// ask for addresses from hintBase on (a migratable server's windows are
// lower than addrBase).
const (
	hintBase  = 0x1000_0000_0000
	addrBase  = 0x7f00_0000_0000
	addrAlign = 256
	addrGap   = 64 << 10
	addrLimit = 0x7fff_0000_0000
	pageSize  = 64 << 10
)

type allocation struct {
	base, size uint64
	ctx        *context
	module     *module   // set for a module global
	pool       *pool     // set for an allocation from a pool
	phys       *physical // set for a mapping (MemMap); pages are its pages
	// access is a mapping's access by device index (MemSetAccess).
	access map[int32]uint32
	pages  map[uint64][]byte
}

// addressSpace holds the live allocations sorted by address; the caller
// holds the Backend's mutex.
type addressSpace struct {
	next   uint64
	allocs []*allocation
}

func newAddressSpace() addressSpace { return addressSpace{next: addrBase} }

// add places size bytes at the next free address; false when the fake
// address space is exhausted.
func (s *addressSpace) add(size uint64, ctx *context, m *module) (*allocation, bool) {
	base := (s.next + addrAlign - 1) &^ (addrAlign - 1)
	end := base + (size+addrAlign-1)&^(addrAlign-1)
	if size > addrLimit || end < base || end+addrGap > addrLimit {
		return nil, false
	}
	s.next = end + addrGap
	a := &allocation{base: base, size: size, ctx: ctx, module: m, pages: map[uint64][]byte{}}
	s.allocs = append(s.allocs, a) // addresses only grow: stays sorted
	return a, true
}

// reserve takes size bytes of addresses, aligned to align (a power of
// two, at least addrAlign), that no allocation will ever get.
func (s *addressSpace) reserve(size, align uint64) (uint64, bool) {
	align = max(align, addrAlign)
	base := (s.next + align - 1) &^ (align - 1)
	end := base + size
	if size > addrLimit || base < s.next || end < base || end+addrGap > addrLimit {
		return 0, false
	}
	s.next = end + addrGap
	return base, true
}

// claim takes [p, p+size), which the caller found vacant, for a
// reservation at a chosen address: the addresses handed out next start
// past it.
func (s *addressSpace) claim(p, size uint64) {
	s.next = max(s.next, p+size+addrGap)
}

// insert adds an allocation at its own address (a mapping in a
// reservation), keeping the list sorted; false if it overlaps one.
func (s *addressSpace) insert(a *allocation) bool {
	i := sort.Search(len(s.allocs), func(i int) bool { return s.allocs[i].base >= a.base })
	if i > 0 && s.allocs[i-1].base+s.allocs[i-1].size > a.base ||
		i < len(s.allocs) && s.allocs[i].base < a.base+a.size {
		return false
	}
	s.allocs = append(s.allocs, nil)
	copy(s.allocs[i+1:], s.allocs[i:])
	s.allocs[i] = a
	return true
}

func (s *addressSpace) remove(a *allocation) {
	i := sort.Search(len(s.allocs), func(i int) bool { return s.allocs[i].base >= a.base })
	if i < len(s.allocs) && s.allocs[i] == a {
		s.allocs = append(s.allocs[:i], s.allocs[i+1:]...)
	}
}

// find returns the allocation holding [p, p+n) and p's offset in it; n may
// be 0 (p must still lie inside).
func (s *addressSpace) find(p, n uint64) (*allocation, uint64, bool) {
	i := sort.Search(len(s.allocs), func(i int) bool { return s.allocs[i].base > p }) - 1
	if i < 0 {
		return nil, 0, false
	}
	a := s.allocs[i]
	off := p - a.base
	if off >= a.size || n > a.size-off {
		return nil, 0, false
	}
	return a, off, true
}

// exact returns the allocation starting at p.
func (s *addressSpace) exact(p uint64) *allocation {
	a, off, ok := s.find(p, 0)
	if !ok || off != 0 {
		return nil
	}
	return a
}

// piece is the part of a range that lies in one allocation.
type piece struct {
	a      *allocation
	off, n uint64
}

// region is a range of device memory: one allocation's bytes, or bytes of
// mappings that follow each other without a gap.
type region []piece

// region returns the pieces of [p, p+n); n may be 0 (p must still lie
// inside).
func (s *addressSpace) region(p, n uint64) (region, bool) {
	if a, off, ok := s.find(p, n); ok {
		return region{{a, off, n}}, true
	}
	var r region
	for at, end := p, p+n; at < end; {
		a, off, ok := s.find(at, 0)
		if !ok || a.phys == nil || end < p {
			return nil, false
		}
		k := min(end-at, a.size-off)
		r = append(r, piece{a, off, k})
		at += k
	}
	return r, len(r) > 0
}

// allows reports whether every mapping of r grants device d access
// need (accessRead or accessReadWrite).
func (r region) allows(d int32, need uint32) bool {
	for _, pc := range r {
		if pc.a.phys != nil && pc.a.access[d]&need != need {
			return false
		}
	}
	return true
}

// device returns the device whose memory r is (for a mapping, its
// physical allocation's device), or nil when its pieces lie on several.
func (r region) device() *device {
	var d *device
	for _, pc := range r {
		pd := pc.a.ctx.dev
		if pc.a.phys != nil {
			pd = pc.a.phys.dev
		}
		if d != nil && pd != d {
			return nil
		}
		d = pd
	}
	return d
}

// readAt copies len(dst) bytes from offset off of the region.
func (r region) readAt(off uint64, dst []byte) {
	r.each(off, uint64(len(dst)), func(a *allocation, aoff, i, k uint64) { a.read(aoff, dst[i:i+k]) })
}

// writeAt copies src to offset off of the region.
func (r region) writeAt(off uint64, src []byte) {
	r.each(off, uint64(len(src)), func(a *allocation, aoff, i, k uint64) { a.write(aoff, src[i:i+k]) })
}

// fill fills the whole region with pat (see allocation.fill); pieces
// after the first start 4-aligned.
func (r region) fill(pat [4]byte) {
	for _, pc := range r {
		pc.a.fill(pc.off, pc.n, pat)
	}
}

// each calls f for every allocation part of [off, off+n) of the region:
// the allocation, the offset in it, the offset in [off, off+n) and the
// length.
func (r region) each(off, n uint64, f func(a *allocation, aoff, i, k uint64)) {
	var i uint64
	for _, pc := range r {
		if n == 0 {
			return
		}
		if off >= pc.n {
			off -= pc.n
			continue
		}
		k := min(n, pc.n-off)
		f(pc.a, pc.off+off, i, k)
		i, n, off = i+k, n-k, 0
	}
}

func (s *addressSpace) owned(c *context) []*allocation {
	var out []*allocation
	for _, a := range s.allocs {
		if a.ctx == c {
			out = append(out, a)
		}
	}
	return out
}

// read copies len(dst) bytes from offset off; pages never written read as
// zeros.
func (a *allocation) read(off uint64, dst []byte) {
	for len(dst) > 0 {
		pg, in := off/pageSize, off%pageSize
		n := min(uint64(len(dst)), pageSize-in)
		if p := a.pages[pg]; p != nil {
			copy(dst[:n], p[in:])
		} else {
			clear(dst[:n])
		}
		dst, off = dst[n:], off+n
	}
}

func (a *allocation) page(pg uint64) []byte {
	p := a.pages[pg]
	if p == nil {
		p = make([]byte, pageSize)
		a.pages[pg] = p
	}
	return p
}

// zeroPage is what a page never written holds.
var zeroPage [pageSize]byte

// write copies src to offset off; zeros into a page never written leave
// it unwritten (so a migration's copy of a sparse allocation stays sparse).
func (a *allocation) write(off uint64, src []byte) {
	for len(src) > 0 {
		pg, in := off/pageSize, off%pageSize
		n := min(uint64(len(src)), pageSize-in)
		if a.pages[pg] != nil || !bytes.Equal(src[:n], zeroPage[:n]) {
			copy(a.page(pg)[in:], src[:n])
		}
		src, off = src[n:], off+n
	}
}

// fill writes n bytes from offset off, byte i being pat[(off+i)%4]; off
// is 4-aligned for 32-bit patterns.
func (a *allocation) fill(off, n uint64, pat [4]byte) {
	zero := pat == [4]byte{}
	for n > 0 {
		pg, in := off/pageSize, off%pageSize
		k := min(n, pageSize-in)
		if p := a.pages[pg]; p != nil || !zero {
			p = a.page(pg)
			for i := range k {
				p[in+i] = pat[(off+i)%4]
			}
		}
		n, off = n-k, off+k
	}
}

// MemAlloc allocates n bytes on the current context's device.
func (b *Backend) MemAlloc(n uint64) (proto.DevPtr, proto.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c, r := b.cur()
	if r != proto.Success {
		return 0, r
	}
	if n == 0 {
		return 0, proto.ErrInvalidValue
	}
	if b.prohibited() {
		return 0, proto.ErrStreamCaptureUnsupported
	}
	if n > c.dev.total-c.dev.used {
		return 0, proto.ErrOutOfMemory
	}
	a, ok := b.mem.add(n, c, nil)
	if !ok {
		return 0, proto.ErrOutOfMemory
	}
	c.dev.used += n
	return proto.DevPtr(a.base), proto.Success
}

// MemFree frees an allocation of the current context.
func (b *Backend) MemFree(p proto.DevPtr) proto.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	c, r := b.cur()
	if r != proto.Success {
		return r
	}
	a := b.mem.exact(uint64(p))
	if a == nil || a.module != nil || a.phys != nil {
		return proto.ErrInvalidValue
	}
	if a.pool != nil {
		if a.pool.dev != c.dev {
			return proto.ErrInvalidContext
		}
		b.poolFree(a)
		return proto.Success
	}
	if a.ctx != c {
		return proto.ErrInvalidContext
	}
	if b.prohibited() {
		return proto.ErrStreamCaptureUnsupported
	}
	b.mem.remove(a)
	c.dev.used -= a.size
	return proto.Success
}

// MemGetInfo reports the current context's device memory.
func (b *Backend) MemGetInfo() (free, total uint64, r proto.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c, r := b.cur()
	if r != proto.Success {
		return 0, 0, r
	}
	return c.dev.total - c.dev.used, c.dev.total, proto.Success
}

// span checks a current context, stream s and the range [p, p+n), which
// mappings must grant the context's device access need, and returns the
// capture s takes part in (nil: none); the caller holds mu.
func (b *Backend) span(p proto.DevPtr, n uint64, s uintptr, need uint32) (region, *streamCapture, proto.Result) {
	c, r := b.cur()
	if r != proto.Success {
		return nil, nil, r
	}
	if r := b.checkStream(c, s); r != proto.Success {
		return nil, nil, r
	}
	reg, ok := b.mem.region(uint64(p), n)
	if !ok || !reg.allows(c.dev.index, need) {
		return nil, nil, proto.ErrInvalidValue
	}
	sc, r := b.capturing(c, s)
	return reg, sc, r
}

// MemcpyHtoD copies src to dst. In a capture it records a copy of the
// bytes src holds now (what a driver does with a copy from pinned memory,
// which it reads at replay: the server's staging buffer, not the client's
// data; the server refuses these copies).
func (b *Backend) MemcpyHtoD(dst proto.DevPtr, src []byte, stream uintptr, async bool) proto.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	reg, sc, r := b.span(dst, uint64(len(src)), stream, accessReadWrite)
	if r != proto.Success {
		return r
	}
	if sc != nil {
		return b.record(sc, op{kind: opHostCopy, dst: uint64(dst), data: append([]byte(nil), src...)})
	}
	reg.writeAt(0, src)
	return proto.Success
}

// MemcpyDtoH copies len(dst) bytes from src; a capture cannot record it
// (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, which invalidates the capture).
func (b *Backend) MemcpyDtoH(dst []byte, src proto.DevPtr, stream uintptr) proto.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	reg, sc, r := b.span(src, uint64(len(dst)), stream, accessRead)
	if r != proto.Success {
		return r
	}
	if sc != nil {
		return b.refuse(sc, proto.ErrStreamCaptureUnsupported)
	}
	reg.readAt(0, dst)
	return proto.Success
}

// MemcpyDtoD copies n bytes from src to dst.
func (b *Backend) MemcpyDtoD(dst, src proto.DevPtr, n uint64, stream uintptr, async bool) proto.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	dr, _, r := b.span(dst, n, stream, accessReadWrite)
	if r != proto.Success {
		return r
	}
	sr, sc, r := b.span(src, n, stream, accessRead)
	if r != proto.Success {
		return r
	}
	if d := dr.device(); d == nil || d != sr.device() {
		// CUDA's unified addressing would copy between devices here;
		// the server must ask for a peer copy (MemcpyPeer) instead.
		return proto.ErrInvalidValue
	}
	if sc != nil {
		return b.record(sc, op{kind: opCopy, copy: proto.Copy3D{Src: uint64(src), Dst: uint64(dst), Width: n, Height: 1, Depth: 1}})
	}
	copyRegion(dr, sr, n)
	return proto.Success
}

// copyRegion copies n bytes from the start of sr to the start of dr.
func copyRegion(dr, sr region, n uint64) {
	buf := make([]byte, min(n, 1<<20))
	for off := uint64(0); off < n; {
		k := min(n-off, uint64(len(buf)))
		sr.readAt(off, buf[:k])
		dr.writeAt(off, buf[:k])
		off += k
	}
}

// MemsetD8 sets n bytes at dst to v.
func (b *Backend) MemsetD8(dst proto.DevPtr, v uint8, n uint64, stream uintptr, async bool) proto.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	reg, sc, r := b.span(dst, n, stream, accessReadWrite)
	if r != proto.Success {
		return r
	}
	if sc != nil {
		return b.record(sc, op{kind: opMemset, dst: uint64(dst), value: uint32(v), elem: 1, width: n, height: 1})
	}
	reg.fill([4]byte{v, v, v, v})
	return proto.Success
}

// MemsetD32 sets n 32-bit words at dst (4-aligned) to v.
func (b *Backend) MemsetD32(dst proto.DevPtr, v uint32, n uint64, stream uintptr, async bool) proto.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	if dst%4 != 0 || n > (1<<62) {
		return proto.ErrInvalidValue
	}
	reg, sc, r := b.span(dst, 4*n, stream, accessReadWrite)
	if r != proto.Success {
		return r
	}
	if sc != nil {
		return b.record(sc, op{kind: opMemset, dst: uint64(dst), value: v, elem: 4, width: n, height: 1})
	}
	reg.fill([4]byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)})
	return proto.Success
}
