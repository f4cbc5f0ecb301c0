package server

import (
	"github.com/gpumux/gpumux/remote/proto"
)

// cuCtxSetLimit within the quota. Raising a context's stack size, printf
// FIFO, malloc heap or pending device launches makes the driver reserve
// device memory for it, outside any allocation: the server charges the
// rise over the context's value before the first change to the quota as
// a reservation (given back when the limit is lowered again or the
// context goes) and refuses, with CUDA_ERROR_OUT_OF_MEMORY and a log line,
// a value whose cost does not fit. The costs:
//
//   - CU_LIMIT_STACK_SIZE: the value for every thread the device can hold
//     at once: value × max threads per multiprocessor × multiprocessors.
//   - CU_LIMIT_PRINTF_FIFO_SIZE, CU_LIMIT_MALLOC_HEAP_SIZE: the value.
//   - CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT: pendingLaunchBytes per
//     launch (an estimate; the driver does not say).
//   - CU_LIMIT_MAX_L2_FETCH_GRANULARITY: nothing (a hint).
//
// CU_LIMIT_PERSISTING_L2_CACHE_SIZE sets aside L2 cache of the whole
// device, every tenant's: only 0 (none) is accepted, any other value is
// CUDA_ERROR_NOT_SUPPORTED. Every other limit (the device runtime's sync
// depth, which CUDA 12's device runtime no longer supports, and the
// query-only ones) is CUDA_ERROR_UNSUPPORTED_LIMIT.

// The CUlimit values (cuda.h).
const (
	limitStackSize            uint32 = 0
	limitPrintfFIFOSize       uint32 = 1
	limitMallocHeapSize       uint32 = 2
	limitPendingLaunchCount   uint32 = 4
	limitMaxL2FetchGranule    uint32 = 5
	limitPersistingL2Cache    uint32 = 6
	attrMultiprocessorCount          = 16 // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
	attrMaxThreadsPerMultiprc        = 39 // CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR
)

// pendingLaunchBytes is the device memory charged per pending device
// runtime launch.
const pendingLaunchBytes = 2 << 10

// limitNames names the limits cuCtxSetLimit accepts, for logs.
var limitNames = map[uint32]string{
	limitStackSize:          "CU_LIMIT_STACK_SIZE",
	limitPrintfFIFOSize:     "CU_LIMIT_PRINTF_FIFO_SIZE",
	limitMallocHeapSize:     "CU_LIMIT_MALLOC_HEAP_SIZE",
	limitPendingLaunchCount: "CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT",
	limitMaxL2FetchGranule:  "CU_LIMIT_MAX_L2_FETCH_GRANULARITY",
	limitPersistingL2Cache:  "CU_LIMIT_PERSISTING_L2_CACHE_SIZE",
}

// limitCharge is what one limit of a context has charged to the quota.
type limitCharge struct {
	base    uint64 // the limit's cost before the client first changed it
	charged uint64
	value   uint64 // what the client set (a migration sets it again)
}

// limitCost is the device memory a limit of value costs in a context on
// client device dev.
func (s *session) limitCost(dev int32, limit uint32, value uint64) (uint64, proto.Result) {
	mul := uint64(1)
	switch limit {
	case limitStackSize:
		real, r := s.device(dev)
		if r != ok {
			return 0, r
		}
		sms, r := s.be.DeviceAttribute(attrMultiprocessorCount, real)
		if r != ok {
			return 0, r
		}
		threads, r := s.be.DeviceAttribute(attrMaxThreadsPerMultiprc, real)
		if r != ok {
			return 0, r
		}
		if sms <= 0 || threads <= 0 {
			return 0, proto.ErrUnknown
		}
		mul = uint64(sms) * uint64(threads)
	case limitPendingLaunchCount:
		mul = pendingLaunchBytes
	case limitMaxL2FetchGranule, limitPersistingL2Cache:
		return 0, ok
	}
	if value > ^uint64(0)/mul {
		return ^uint64(0), ok
	}
	return value * mul, ok
}

// CtxSetLimit sets a limit of the current context within the quota.
func (s *session) CtxSetLimit(c *proto.Call, limit uint32, value uint64) proto.Result {
	ctx, r := s.current(c)
	if r != ok {
		return r
	}
	name, known := limitNames[limit]
	if !known {
		return proto.ErrUnsupportedLimit
	}
	if limit == limitPersistingL2Cache && value != 0 {
		s.log.Info("cuCtxSetLimit refused: the persisting L2 cache is the whole device's", "limit", name, "value", value)
		return proto.ErrNotSupported
	}
	lc := ctx.limits[limit]
	if lc == nil {
		cur, r := s.be.CtxGetLimit(limit)
		if r != ok {
			return r
		}
		base, r := s.limitCost(ctx.dev, limit, cur)
		if r != ok {
			return r
		}
		lc = &limitCharge{base: base}
	}
	cost, r := s.limitCost(ctx.dev, limit, value)
	if r != ok {
		return r
	}
	want := cost - min(cost, lc.base)
	if want > lc.charged && !s.charge(want-lc.charged) {
		quota, left := s.quota.left()
		s.log.Warn("cuCtxSetLimit refused: the limit's device memory is beyond the quota", "limit", name,
			"value", value, "bytes", want, "quota", quota, "left", left+lc.charged)
		return proto.ErrOutOfMemory
	}
	if r := s.be.CtxSetLimit(limit, value); r != ok {
		if want > lc.charged {
			s.uncharge(want - lc.charged)
		}
		return r
	}
	if want < lc.charged {
		s.uncharge(lc.charged - want)
	}
	lc.charged, lc.value = want, value
	if ctx.limits == nil {
		ctx.limits = map[uint32]*limitCharge{}
	}
	ctx.limits[limit] = lc
	return ok
}

// releaseLimits gives back what a context's limits charged (the context
// is going) and returns it.
func (s *session) releaseLimits(ctx *ctxState) uint64 {
	var n uint64
	for _, lc := range ctx.limits {
		s.uncharge(lc.charged)
		n += lc.charged
	}
	ctx.limits = nil
	return n
}
