package fakecuda

import (
	"sort"

	"github.com/gpumux/gpumux/remote/proto"
)

// The fake address space: where allocations start, their alignment, the
// gap left after each and the size of a backing page.
const (
	addrBase  = 0x7f00_0000_0000
	addrAlign = 256
	addrGap   = 64 << 10
	addrLimit = 0x7fff_0000_0000
	pageSize  = 64 << 10
)

type allocation struct {
	base, size uint64
	ctx        *context
	module     *module // set for a module global
	pages      map[uint64][]byte
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

// write copies src to offset off.
func (a *allocation) write(off uint64, src []byte) {
	for len(src) > 0 {
		pg, in := off/pageSize, off%pageSize
		n := copy(a.page(pg)[in:], src)
		src, off = src[n:], off+uint64(n)
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
	if a == nil || a.module != nil {
		return proto.ErrInvalidValue
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

// span checks a current context, stream s and the range [p, p+n), and
// returns the capture s takes part in (nil: none); the caller holds mu.
func (b *Backend) span(p proto.DevPtr, n uint64, s uintptr) (*allocation, uint64, *streamCapture, proto.Result) {
	c, r := b.cur()
	if r != proto.Success {
		return nil, 0, nil, r
	}
	if r := b.checkStream(c, s); r != proto.Success {
		return nil, 0, nil, r
	}
	a, off, ok := b.mem.find(uint64(p), n)
	if !ok {
		return nil, 0, nil, proto.ErrInvalidValue
	}
	sc, r := b.capturing(c, s)
	return a, off, sc, r
}

// MemcpyHtoD copies src to dst. In a capture it records a copy of the
// bytes src holds now (what a driver does with a copy from pinned memory,
// which it reads at replay: the server's staging buffer, not the client's
// data; the server refuses these copies).
func (b *Backend) MemcpyHtoD(dst proto.DevPtr, src []byte, stream uintptr, async bool) proto.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	a, off, sc, r := b.span(dst, uint64(len(src)), stream)
	if r != proto.Success {
		return r
	}
	if sc != nil {
		return b.record(sc, op{kind: opHostCopy, dst: uint64(dst), data: append([]byte(nil), src...)})
	}
	a.write(off, src)
	return proto.Success
}

// MemcpyDtoH copies len(dst) bytes from src; a capture cannot record it
// (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, which invalidates the capture).
func (b *Backend) MemcpyDtoH(dst []byte, src proto.DevPtr, stream uintptr) proto.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	a, off, sc, r := b.span(src, uint64(len(dst)), stream)
	if r != proto.Success {
		return r
	}
	if sc != nil {
		return b.refuse(sc, proto.ErrStreamCaptureUnsupported)
	}
	a.read(off, dst)
	return proto.Success
}

// MemcpyDtoD copies n bytes from src to dst.
func (b *Backend) MemcpyDtoD(dst, src proto.DevPtr, n uint64, stream uintptr, async bool) proto.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	da, doff, _, r := b.span(dst, n, stream)
	if r != proto.Success {
		return r
	}
	sa, soff, sc, r := b.span(src, n, stream)
	if r != proto.Success {
		return r
	}
	if da.ctx.dev != sa.ctx.dev {
		// CUDA's unified addressing would copy between devices here;
		// the server must ask for a peer copy (MemcpyPeer) instead.
		return proto.ErrInvalidValue
	}
	if sc != nil {
		return b.record(sc, op{kind: opCopy, copy: proto.Copy3D{Src: uint64(src), Dst: uint64(dst), Width: n, Height: 1, Depth: 1}})
	}
	copyAlloc(da, doff, sa, soff, n)
	return proto.Success
}

// copyAlloc copies n bytes from offset soff of sa to offset doff of da.
func copyAlloc(da *allocation, doff uint64, sa *allocation, soff uint64, n uint64) {
	buf := make([]byte, min(n, 1<<20))
	for n > 0 {
		k := min(n, uint64(len(buf)))
		sa.read(soff, buf[:k])
		da.write(doff, buf[:k])
		n, soff, doff = n-k, soff+k, doff+k
	}
}

// MemsetD8 sets n bytes at dst to v.
func (b *Backend) MemsetD8(dst proto.DevPtr, v uint8, n uint64, stream uintptr, async bool) proto.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	a, off, sc, r := b.span(dst, n, stream)
	if r != proto.Success {
		return r
	}
	if sc != nil {
		return b.record(sc, op{kind: opMemset, dst: uint64(dst), value: uint32(v), elem: 1, width: n, height: 1})
	}
	a.fill(off, n, [4]byte{v, v, v, v})
	return proto.Success
}

// MemsetD32 sets n 32-bit words at dst (4-aligned) to v.
func (b *Backend) MemsetD32(dst proto.DevPtr, v uint32, n uint64, stream uintptr, async bool) proto.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	if dst%4 != 0 || n > (1<<62) {
		return proto.ErrInvalidValue
	}
	a, off, sc, r := b.span(dst, 4*n, stream)
	if r != proto.Success {
		return r
	}
	if sc != nil {
		return b.record(sc, op{kind: opMemset, dst: uint64(dst), value: v, elem: 4, width: n, height: 1})
	}
	a.fill(off, 4*n, [4]byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)})
	return proto.Success
}
