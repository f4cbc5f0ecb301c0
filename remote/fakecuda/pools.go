package fakecuda

import (
	"github.com/gpumux/gpumux/remote/proto"
)

// PoolChunk is what a fake pool reserves device memory in: it grows by
// whole chunks and keeps freed memory reserved up to its release
// threshold.
const PoolChunk = 2 << 20

// pool is a memory pool (MemPoolCreate). Its reserved memory counts as
// used on its device.
type pool struct {
	dev                    *device
	maxSize                uint64 // 0: the device's memory
	reserved, used         uint64
	reservedHigh, usedHigh uint64
	threshold              uint64
	reuse                  [3]uint64 // the reuse attributes 1..3
	access                 map[int32]uint32
	allocs                 int
	destroyed              bool // destroyed with allocations live: goes with the last
}

func roundChunk(n uint64) uint64 { return (n + PoolChunk - 1) &^ (PoolChunk - 1) }

// MemPoolCreate makes a pool of pinned memory on a device.
func (b *Backend) MemPoolCreate(props proto.MemPoolProps) (uintptr, proto.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if props.AllocType != proto.MemAllocationTypePinned || props.LocType != proto.MemLocationTypeDevice ||
		props.HandleTypes != proto.MemHandleTypeNone || props.Usage != 0 {
		return 0, proto.ErrInvalidValue
	}
	dev, r := b.dev(props.LocID)
	if r != proto.Success {
		return 0, r
	}
	id := b.newID()
	b.pools[id] = &pool{dev: dev, maxSize: props.MaxSize, reuse: [3]uint64{1, 1, 1},
		access: map[int32]uint32{dev.index: accessReadWrite}}
	return id, proto.Success
}

// MemPoolDestroy destroys a pool; allocations still live in it stay valid
// until freed, as in CUDA.
func (b *Backend) MemPoolDestroy(id uintptr) proto.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.pools[id]
	if p == nil {
		return proto.ErrInvalidValue
	}
	delete(b.pools, id)
	p.destroyed = true
	p.settle()
	return proto.Success
}

// settle gives a pool's reserved memory back to its device down to what
// it may keep: what is in use (in whole chunks) and, unless destroyed, its
// release threshold. The fake does at each free what CUDA does at
// synchronization points.
func (p *pool) settle() {
	keep := roundChunk(p.used)
	if !p.destroyed && p.threshold > 0 {
		keep = max(keep, min(p.reserved, roundChunk(p.used+p.threshold)))
	}
	p.trim(keep)
}

// trim releases reserved memory down to keep (not below what is used).
func (p *pool) trim(keep uint64) {
	keep = max(roundChunk(p.used), keep)
	if p.reserved > keep {
		p.dev.used -= p.reserved - keep
		p.reserved = keep
	}
}

// MemAllocFromPoolAsync allocates from a pool on a stream of the current
// context (synchronously, as everything the fake does).
func (b *Backend) MemAllocFromPoolAsync(n uint64, id, s uintptr) (proto.DevPtr, proto.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c, r := b.cur()
	if r != proto.Success {
		return 0, r
	}
	if r := b.checkStream(c, s); r != proto.Success {
		return 0, r
	}
	p := b.pools[id]
	if p == nil || n == 0 {
		return 0, proto.ErrInvalidValue
	}
	if need := roundChunk(p.used + n); need > p.reserved {
		grow := need - p.reserved
		if p.maxSize > 0 && need > p.maxSize || grow > p.dev.total-p.dev.used {
			return 0, proto.ErrOutOfMemory
		}
		p.dev.used += grow
		p.reserved = need
	}
	a, ok := b.mem.add(n, c, nil)
	if !ok {
		return 0, proto.ErrOutOfMemory
	}
	a.pool = p
	p.used += n
	p.allocs++
	p.usedHigh = max(p.usedHigh, p.used)
	p.reservedHigh = max(p.reservedHigh, p.reserved)
	return proto.DevPtr(a.base), proto.Success
}

// poolFree frees an allocation from a pool; the caller holds mu.
func (b *Backend) poolFree(a *allocation) {
	b.mem.remove(a)
	p := a.pool
	p.used -= a.size
	p.allocs--
	p.settle()
}

// MemFreeAsync frees an allocation from a pool on a stream of the current
// context.
func (b *Backend) MemFreeAsync(ptr proto.DevPtr, s uintptr) proto.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	c, r := b.cur()
	if r != proto.Success {
		return r
	}
	if r := b.checkStream(c, s); r != proto.Success {
		return r
	}
	a := b.mem.exact(uint64(ptr))
	if a == nil || a.pool == nil {
		return proto.ErrInvalidValue
	}
	b.poolFree(a)
	return proto.Success
}

// MemPoolSetAttribute sets the reuse flags and the release threshold, and
// resets the high-water marks (to the current values, value 0 only).
func (b *Backend) MemPoolSetAttribute(id uintptr, attr uint32, value uint64) proto.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.pools[id]
	if p == nil {
		return proto.ErrInvalidValue
	}
	switch attr {
	case proto.MemPoolReuseFollowEventDependencies, proto.MemPoolReuseAllowOpportunistic,
		proto.MemPoolReuseAllowInternalDependencies:
		p.reuse[attr-1] = value
	case proto.MemPoolReleaseThreshold:
		p.threshold = value
		p.settle()
	case proto.MemPoolReservedMemHigh, proto.MemPoolUsedMemHigh:
		if value != 0 {
			return proto.ErrInvalidValue
		}
		if attr == proto.MemPoolReservedMemHigh {
			p.reservedHigh = p.reserved
		} else {
			p.usedHigh = p.used
		}
	default:
		return proto.ErrInvalidValue
	}
	return proto.Success
}

// MemPoolGetAttribute reads an attribute.
func (b *Backend) MemPoolGetAttribute(id uintptr, attr uint32) (uint64, proto.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.pools[id]
	if p == nil {
		return 0, proto.ErrInvalidValue
	}
	switch attr {
	case proto.MemPoolReuseFollowEventDependencies, proto.MemPoolReuseAllowOpportunistic,
		proto.MemPoolReuseAllowInternalDependencies:
		return p.reuse[attr-1], proto.Success
	case proto.MemPoolReleaseThreshold:
		return p.threshold, proto.Success
	case proto.MemPoolReservedMemCurrent:
		return p.reserved, proto.Success
	case proto.MemPoolReservedMemHigh:
		return p.reservedHigh, proto.Success
	case proto.MemPoolUsedMemCurrent:
		return p.used, proto.Success
	case proto.MemPoolUsedMemHigh:
		return p.usedHigh, proto.Success
	}
	return 0, proto.ErrInvalidValue
}

// MemPoolTrimTo releases reserved memory down to keep bytes (never below
// what is in use).
func (b *Backend) MemPoolTrimTo(id uintptr, keep uint64) proto.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.pools[id]
	if p == nil {
		return proto.ErrInvalidValue
	}
	p.trim(keep)
	return proto.Success
}

// MemPoolSetAccess sets devices' access to a pool's memory; the pool's own
// device keeps read-write access.
func (b *Backend) MemPoolSetAccess(id uintptr, descs []proto.MemAccessDesc) proto.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.pools[id]
	if p == nil || len(descs) == 0 {
		return proto.ErrInvalidValue
	}
	if r := b.checkAccess(descs); r != proto.Success {
		return r
	}
	for _, d := range descs {
		if d.LocID == p.dev.index && d.Flags != accessReadWrite {
			return proto.ErrInvalidDevice
		}
	}
	for _, d := range descs {
		p.access[d.LocID] = d.Flags
	}
	return proto.Success
}

// MemPoolGetAccess reports a device's access to a pool's memory.
func (b *Backend) MemPoolGetAccess(id uintptr, locType uint32, locID int32) (uint32, proto.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.pools[id]
	if p == nil || locType != proto.MemLocationTypeDevice {
		return 0, proto.ErrInvalidValue
	}
	if _, r := b.dev(locID); r != proto.Success {
		return 0, r
	}
	return p.access[locID], proto.Success
}

// PoolUsage reports what pools of the fake reserve and what is allocated
// from them, in bytes, summed over all pools (destroyed ones with live
// allocations included).
func (b *Backend) PoolUsage() (reserved, used uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	seen := map[*pool]bool{}
	for _, p := range b.pools {
		seen[p] = true
	}
	for _, a := range b.mem.allocs {
		if a.pool != nil {
			seen[a.pool] = true
		}
	}
	for p := range seen {
		reserved += p.reserved
		used += p.used
	}
	return reserved, used
}
