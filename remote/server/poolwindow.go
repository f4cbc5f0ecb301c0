package server

import (
	"math/bits"
	"slices"

	"github.com/gpumux/gpumux/remote/proto"
)

// Window pools. The driver's memory pools place their allocations where
// they like, so a migration could not rebuild them at the addresses the
// client holds. On a server WithMigration a session's pools are its own
// instead: chunks of virtual memory in its windows (backing.go), which a
// target backs again at the same addresses, carved into allocations.
//
// An allocation of up to maxSlot bytes takes a slot of a slab, a chunk of
// slabSize bytes cut into slots of one power of two (at least minSlot); a
// larger one a chunk of its own, rounded up to the device's granularity.
// A freed allocation's slot is free for another only once the work its
// stream had queued is done (an event recorded at the free), but at once
// for an allocation on the same stream, whose work follows in stream
// order. A chunk with nothing in it is kept for reuse while the pool's
// reserved memory is within its release threshold, and released beyond
// it at the client's next synchronizing call, as the driver's pools do.
// The reuse policies are recorded and reported; every reuse here is one
// the driver would also make.
//
// In a stream capture an allocation is a node of the graph, whose memory
// the driver gives when the graph runs, and the calls that back a window
// allocation are not permitted while the thread captures: while a capture
// of the session is under way its allocations come from a pool of the
// driver's made with the window pool (a session holding graphs or such
// allocations does not migrate anyway), and a window allocation cannot be
// freed on a capturing stream.
const (
	minSlot  = 512
	maxSlot  = 1 << 20
	slabSize = 2 << 20
)

// windowPool is a pool of a session on a server WithMigration.
type windowPool struct {
	s         *session
	dev       int32  // the backend's device
	maxSize   uint64 // the most it reserves (0: no bound)
	threshold uint64 // the release threshold the pool honours
	reuse     [3]uint64
	chunks    []*poolChunk
	blocks    map[proto.DevPtr]*poolBlock // live or freed in stream order
	pending   []*poolBlock                // freed, their stream's work not known done

	reserved, reservedHigh uint64
	used, usedHigh         uint64
	destroyed              bool

	driver     driverPool            // for allocations while a capture is under way
	fromDriver map[proto.DevPtr]bool // those allocations, not freed yet
}

// poolChunk is a pool's piece of virtual memory.
type poolChunk struct {
	base proto.DevPtr
	b    *backing
	slot uint64   // the size of its slots (a chunk of one allocation: its size)
	free []uint64 // offsets of its free slots (not taken, not pending)
}

func (c *poolChunk) size() uint64 { return c.b.size }

// empty reports whether every slot of c is free.
func (c *poolChunk) empty() bool { return uint64(len(c.free))*c.slot == c.size() }

// poolBlock is one allocation from a pool.
type poolBlock struct {
	chunk *poolChunk
	off   uint64
	// Set while freed in stream order: the event recorded on the stream
	// at the free, the stream and its context.
	ev  uintptr
	st  uintptr
	ctx *ctxState
}

// newWindowPool makes a window pool on backend device dev, and its
// driver's pool (props).
func newWindowPool(s *session, dev int32, props proto.MemPoolProps) (*windowPool, proto.Result) {
	raw, r := s.be.MemPoolCreate(props)
	if r != ok {
		return nil, r
	}
	return &windowPool{s: s, dev: dev, maxSize: props.MaxSize, reuse: [3]uint64{1, 1, 1}, blocks: map[proto.DevPtr]*poolBlock{},
		driver: driverPool{be: s.be, raw: raw}, fromDriver: map[proto.DevPtr]bool{}}, ok
}

// slotFor is the slot an allocation of n bytes takes, and whether it is a
// slab's.
func slotFor(n, gran uint64) (uint64, bool) {
	if n <= maxSlot {
		return max(minSlot, uint64(1)<<bits.Len64(n-1)), true
	}
	return (n + gran - 1) &^ (gran - 1), false
}

func (w *windowPool) gran() (uint64, proto.Result) {
	win, r := w.s.windowFor(w.dev, 0)
	if r != ok {
		return 0, r
	}
	return win.gran, ok
}

func (w *windowPool) alloc(ctx *ctxState, n uint64, st uintptr) (proto.DevPtr, proto.Result) {
	if len(w.s.captures) > 0 {
		p, r := w.driver.alloc(ctx, n, st)
		if r == ok {
			w.fromDriver[p] = true
		}
		return p, r
	}
	gran, r := w.gran()
	if r != ok {
		return 0, r
	}
	slot, slab := slotFor(n, gran)
	if slot < n {
		return 0, proto.ErrOutOfMemory
	}
	w.poll()
	// A slot freed on this stream: what used it comes first in stream
	// order.
	for i, b := range w.pending {
		if b.ctx == ctx && b.st == st && b.chunk.slot == slot {
			w.s.warn("cuEventDestroy", w.s.be.EventDestroy(b.ev))
			b.ev, b.st, b.ctx = 0, 0, nil
			w.pending = slices.Delete(w.pending, i, i+1)
			w.take(slot)
			return b.chunk.base + proto.DevPtr(b.off), ok
		}
	}
	for _, c := range w.chunks {
		if c.slot == slot && len(c.free) > 0 {
			return w.place(c), ok
		}
	}
	size := slot
	if slab {
		size = max(slabSize, gran)
	}
	c, r := w.grow(size, slot)
	if r != ok {
		return 0, r
	}
	return w.place(c), ok
}

// grow adds a chunk of size bytes cut into slots of slot bytes, releasing
// unused chunks or waiting for freed ones first if the pool's bound or the
// GPU would not have it.
func (w *windowPool) grow(size, slot uint64) (*poolChunk, proto.Result) {
	for attempt := 0; ; attempt++ {
		if w.maxSize == 0 || w.reserved+size <= w.maxSize {
			p, b, r := w.s.allocBacked(w.dev, size, 0)
			if r == ok {
				return w.add(p, b, slot), ok
			}
			if r != proto.ErrOutOfMemory || attempt == 2 {
				return nil, r
			}
		} else if attempt == 2 {
			return nil, proto.ErrOutOfMemory
		}
		if attempt == 1 {
			w.wait() // what was freed in stream order, once done
		}
		w.release(0)
	}
}

// add makes backing b at p a chunk of the pool, cut into slots of slot
// bytes, all free.
func (w *windowPool) add(p proto.DevPtr, b *backing, slot uint64) *poolChunk {
	c := &poolChunk{base: p, b: b, slot: slot}
	for off := b.size - slot; ; off -= slot {
		c.free = append(c.free, off) // the lowest offset last: taken first
		if off == 0 {
			break
		}
	}
	w.chunks = append(w.chunks, c)
	w.reserved += b.size
	w.reservedHigh = max(w.reservedHigh, w.reserved)
	return c
}

// place takes the free slot of c at the lowest offset.
func (w *windowPool) place(c *poolChunk) proto.DevPtr {
	return w.placeAt(c, len(c.free)-1)
}

// placeAt takes chunk c's free slot c.free[i] (a restore names the one its
// allocation was in) and returns its address.
func (w *windowPool) placeAt(c *poolChunk, i int) proto.DevPtr {
	off := c.free[i]
	c.free = slices.Delete(c.free, i, i+1)
	p := c.base + proto.DevPtr(off)
	w.blocks[p] = &poolBlock{chunk: c, off: off}
	w.take(c.slot)
	return p
}

func (w *windowPool) take(slot uint64) {
	w.used += slot
	w.usedHigh = max(w.usedHigh, w.used)
}

// free frees p in stream order on st, a stream of the current context ctx.
func (w *windowPool) free(ctx *ctxState, p proto.DevPtr, st uintptr) proto.Result {
	if w.fromDriver[p] {
		return w.freeDriver(p, func() proto.Result { return w.driver.free(ctx, p, st) })
	}
	b := w.live(p)
	if b == nil {
		return proto.ErrInvalidValue
	}
	if w.s.capturing(st) {
		return proto.ErrStreamCaptureUnsupported
	}
	ev, r := w.afterWork(st)
	if r != ok {
		return r
	}
	w.used -= b.chunk.slot
	if ev == 0 {
		w.vacate(p, b)
		return ok
	}
	b.ev, b.st, b.ctx = ev, st, ctx
	w.pending = append(w.pending, b)
	return ok
}

// afterWork returns an event recorded on stream st, which says when the
// work queued there so far is done; or 0 once that work is done, waited
// for where no event could be recorded or the pool is destroyed (it is
// polled no more).
func (w *windowPool) afterWork(st uintptr) (uintptr, proto.Result) {
	if !w.destroyed {
		ev, r := w.s.be.EventCreate(eventDisableTiming)
		if r == ok {
			if r = w.s.be.EventRecord(ev, st); r == ok {
				return ev, ok
			}
			w.s.warn("cuEventDestroy", w.s.be.EventDestroy(ev))
		}
	}
	return 0, w.s.be.StreamSynchronize(st)
}

// freeNow frees p, whose work is done (memFree waited for its context).
func (w *windowPool) freeNow(p proto.DevPtr) proto.Result {
	if w.fromDriver[p] {
		return w.freeDriver(p, func() proto.Result { return w.driver.freeNow(p) })
	}
	b := w.live(p)
	if b == nil {
		return proto.ErrInvalidValue
	}
	w.used -= b.chunk.slot
	w.vacate(p, b)
	return ok
}

// live is the block of allocation p, not freed; or nil.
func (w *windowPool) live(p proto.DevPtr) *poolBlock {
	if b := w.blocks[p]; b != nil && b.ev == 0 {
		return b
	}
	return nil
}

// freeDriver frees p, an allocation of the driver's pool, with free.
func (w *windowPool) freeDriver(p proto.DevPtr, free func() proto.Result) proto.Result {
	r := free()
	if r == ok {
		delete(w.fromDriver, p)
	}
	return r
}

// vacate gives a block's slot back to its chunk; a destroyed pool
// releases a chunk as soon as nothing is in it.
func (w *windowPool) vacate(p proto.DevPtr, b *poolBlock) {
	delete(w.blocks, p)
	c := b.chunk
	c.free = append(c.free, b.off)
	if w.destroyed && c.empty() {
		w.drop(c)
	}
}

// poll vacates the slots whose stream's work is done.
//
// A stream's work completes in order, and its frees are pending in the
// order they were made: once one is not done, none after it on that
// stream is asked about (a driver call each; a program that frees many
// tensors between synchronizations has many pending).
func (w *windowPool) poll() {
	var busy []streamKey // few streams: a slice
	w.vacatePending(func(b *poolBlock) bool {
		k := streamKey{b.ctx, b.st}
		if slices.Contains(busy, k) {
			return false
		}
		if w.s.be.EventQuery(b.ev) == ok {
			return true
		}
		busy = append(busy, k)
		return false
	})
}

// wait vacates every slot freed in stream order once its stream's work is
// done (or failed).
func (w *windowPool) wait() {
	w.vacatePending(func(b *poolBlock) bool {
		w.s.warn("cuEventSynchronize", w.s.be.EventSynchronize(b.ev))
		return true
	})
}

// forgetCtx vacates the slots freed in stream order on streams of ctx,
// whose work is done: the context is going, and its events with it.
func (w *windowPool) forgetCtx(ctx *ctxState) {
	w.vacatePending(func(b *poolBlock) bool { return b.ctx == ctx })
}

// vacatePending vacates the pending slots done says are, destroying their
// events.
func (w *windowPool) vacatePending(done func(*poolBlock) bool) {
	w.pending = slices.DeleteFunc(w.pending, func(b *poolBlock) bool {
		if !done(b) {
			return false
		}
		w.s.warn("cuEventDestroy", w.s.be.EventDestroy(b.ev))
		b.ev, b.st, b.ctx = 0, 0, nil
		w.vacate(b.chunk.base+proto.DevPtr(b.off), b)
		return true
	})
}

// release releases chunks with nothing in them, the last made first,
// until the pool reserves at most keep bytes.
func (w *windowPool) release(keep uint64) {
	for i := len(w.chunks) - 1; i >= 0 && w.reserved > keep; i-- {
		if c := w.chunks[i]; c.empty() {
			w.drop(c)
		}
	}
}

// drop releases chunk c.
func (w *windowPool) drop(c *poolChunk) {
	w.s.warn("cuMemUnmap", w.s.freeBacked(c.base, c.b))
	w.reserved -= c.size()
	w.chunks = slices.DeleteFunc(w.chunks, func(x *poolChunk) bool { return x == c })
}

// synced is the client's synchronizing call: the pool gives back what it
// holds beyond its release threshold.
func (w *windowPool) synced() {
	w.poll()
	w.release(w.threshold)
}

func (w *windowPool) attribute(attr uint32) (uint64, proto.Result) {
	switch attr {
	case proto.MemPoolReuseFollowEventDependencies, proto.MemPoolReuseAllowOpportunistic, proto.MemPoolReuseAllowInternalDependencies:
		return w.reuse[attr-proto.MemPoolReuseFollowEventDependencies], ok
	case proto.MemPoolReservedMemCurrent:
		return w.reserved, ok
	case proto.MemPoolReservedMemHigh:
		return w.reservedHigh, ok
	case proto.MemPoolUsedMemCurrent:
		return w.used, ok
	case proto.MemPoolUsedMemHigh:
		return w.usedHigh, ok
	}
	return 0, proto.ErrInvalidValue
}

func (w *windowPool) setAttribute(attr uint32, v uint64) proto.Result {
	switch attr {
	case proto.MemPoolReuseFollowEventDependencies, proto.MemPoolReuseAllowOpportunistic, proto.MemPoolReuseAllowInternalDependencies:
		w.reuse[attr-proto.MemPoolReuseFollowEventDependencies] = v
	case proto.MemPoolReleaseThreshold:
		w.threshold = v
	case proto.MemPoolReservedMemHigh:
		w.reservedHigh = w.reserved
	case proto.MemPoolUsedMemHigh:
		w.usedHigh = w.used
	default:
		return proto.ErrInvalidValue
	}
	return ok
}

func (w *windowPool) trimTo(keep uint64) proto.Result {
	if len(w.s.captures) > 0 {
		return ok // no event queries or unmapping on a capturing thread; the next trim
	}
	w.poll()
	w.release(keep)
	return ok
}

// setAccess: a window pool's memory is its device's, read and write; a
// migrating session has contexts on one device only.
func (w *windowPool) setAccess(ds []proto.MemAccessDesc) proto.Result {
	for _, d := range ds {
		if d.LocID != w.dev || d.Flags != proto.MemAccessReadWrite {
			return proto.ErrNotSupported
		}
	}
	return ok
}

func (w *windowPool) access(_ uint32, dev int32) (uint32, proto.Result) {
	if dev == w.dev {
		return proto.MemAccessReadWrite, ok
	}
	return proto.MemAccessNone, ok
}

// destroy releases what the pool holds unused; its live allocations stay
// until freed, and their chunks go with the last of them.
func (w *windowPool) destroy() proto.Result {
	w.wait()
	w.destroyed = true
	w.release(0)
	return w.driver.destroy() // its live allocations stay, as in CUDA
}

// eventDisableTiming is CU_EVENT_DISABLE_TIMING: the pool's events only
// order.
const eventDisableTiming = 2
