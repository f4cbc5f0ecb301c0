package fakecuda

import (
	"time"

	"github.com/gpumux/gpumux/remote/proto"
)

// The default streams: CU_STREAM_LEGACY and CU_STREAM_PER_THREAD (and 0).
const (
	streamLegacy    = 1
	streamPerThread = 2
)

// eventDisableTiming is CU_EVENT_DISABLE_TIMING.
const eventDisableTiming = 0x2

type stream struct {
	ctx      *context
	flags    uint32
	priority int32
}

// The stream priority range the fake reports, an H200's: 0 is the lowest
// priority (and the default), -5 the highest.
const (
	LeastStreamPriority    = 0
	GreatestStreamPriority = -5
)

type event struct {
	ctx      *context
	flags    uint32
	recorded time.Time
}

// checkStream accepts a default stream or a stream of context c; the
// caller holds mu.
func (b *Backend) checkStream(c *context, s uintptr) proto.Result {
	if s == 0 || s == streamLegacy || s == streamPerThread {
		return proto.Success
	}
	st := b.streams[s]
	if st == nil || st.ctx != c {
		return proto.ErrInvalidHandle
	}
	return proto.Success
}

// StreamCreate makes a stream in the current context; flags 0 or
// CU_STREAM_NON_BLOCKING.
func (b *Backend) StreamCreate(flags uint32) (uintptr, proto.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c, r := b.cur()
	if r != proto.Success {
		return 0, r
	}
	if flags > 1 {
		return 0, proto.ErrInvalidValue
	}
	id := b.newID()
	b.streams[id] = &stream{ctx: c, flags: flags}
	return id, proto.Success
}

// StreamCreateWithPriority is StreamCreate with a priority, clamped to the
// range as CUDA does.
func (b *Backend) StreamCreateWithPriority(flags uint32, priority int32) (uintptr, proto.Result) {
	id, r := b.StreamCreate(flags)
	if r != proto.Success {
		return 0, r
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.streams[id].priority = min(max(priority, GreatestStreamPriority), LeastStreamPriority)
	return id, proto.Success
}

// CtxStreamPriorityRange needs a current context, as CUDA's does.
func (b *Backend) CtxStreamPriorityRange() (least, greatest int32, r proto.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, r := b.cur(); r != proto.Success {
		return 0, 0, r
	}
	return LeastStreamPriority, GreatestStreamPriority, proto.Success
}

// streamOf returns a stream of the current context, nil for a default
// stream; the caller holds mu.
func (b *Backend) streamOf(s uintptr) (*stream, proto.Result) {
	c, r := b.cur()
	if r != proto.Success {
		return nil, r
	}
	if r := b.checkStream(c, s); r != proto.Success {
		return nil, r
	}
	return b.streams[s], proto.Success
}

// StreamPriority reports a stream's priority (0 for a default stream).
func (b *Backend) StreamPriority(s uintptr) (int32, proto.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	st, r := b.streamOf(s)
	if st == nil {
		return 0, r
	}
	return st.priority, r
}

// StreamFlags reports a stream's flags (0 for a default stream).
func (b *Backend) StreamFlags(s uintptr) (uint32, proto.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	st, r := b.streamOf(s)
	if st == nil {
		return 0, r
	}
	return st.flags, r
}

// StreamIsCapturing reports CU_STREAM_CAPTURE_STATUS_NONE: the fake has no
// graphs.
func (b *Backend) StreamIsCapturing(s uintptr) (int32, proto.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, r := b.streamOf(s)
	return 0, r
}

// ownStream checks a created stream of the current context.
func (b *Backend) ownStream(s uintptr) proto.Result {
	c, r := b.cur()
	if r != proto.Success {
		return r
	}
	st := b.streams[s]
	if st == nil {
		return proto.ErrInvalidHandle
	}
	if st.ctx != c {
		return proto.ErrInvalidContext
	}
	return proto.Success
}

// StreamDestroy destroys a stream of the current context.
func (b *Backend) StreamDestroy(s uintptr) proto.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	if r := b.ownStream(s); r != proto.Success {
		return r
	}
	delete(b.streams, s)
	return proto.Success
}

// StreamSynchronize returns at once: the fake's work is synchronous.
func (b *Backend) StreamSynchronize(s uintptr) proto.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	c, r := b.cur()
	if r != proto.Success {
		return r
	}
	return b.checkStream(c, s)
}

// StreamQuery reports every stream idle.
func (b *Backend) StreamQuery(s uintptr) proto.Result { return b.StreamSynchronize(s) }

// StreamWaitEvent checks its arguments; the event may be another
// context's, as in CUDA.
func (b *Backend) StreamWaitEvent(s, ev uintptr, flags uint32) proto.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	c, r := b.cur()
	if r != proto.Success {
		return r
	}
	if r := b.checkStream(c, s); r != proto.Success {
		return r
	}
	if b.events[ev] == nil {
		return proto.ErrInvalidHandle
	}
	if flags > 1 {
		return proto.ErrInvalidValue
	}
	return proto.Success
}

// EventCreate makes an event in the current context.
func (b *Backend) EventCreate(flags uint32) (uintptr, proto.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c, r := b.cur()
	if r != proto.Success {
		return 0, r
	}
	if flags > 0x7 {
		return 0, proto.ErrInvalidValue
	}
	id := b.newID()
	b.events[id] = &event{ctx: c, flags: flags}
	return id, proto.Success
}

// ownEvent returns an event of the current context; the caller holds mu.
func (b *Backend) ownEvent(ev uintptr) (*event, *context, proto.Result) {
	c, r := b.cur()
	if r != proto.Success {
		return nil, nil, r
	}
	e := b.events[ev]
	if e == nil {
		return nil, nil, proto.ErrInvalidHandle
	}
	if e.ctx != c {
		return nil, nil, proto.ErrInvalidContext
	}
	return e, c, proto.Success
}

// EventDestroy destroys an event of the current context.
func (b *Backend) EventDestroy(ev uintptr) proto.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, _, r := b.ownEvent(ev); r != proto.Success {
		return r
	}
	delete(b.events, ev)
	return proto.Success
}

// EventRecord stamps the event with the real clock.
func (b *Backend) EventRecord(ev, s uintptr) proto.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, c, r := b.ownEvent(ev)
	if r != proto.Success {
		return r
	}
	if r := b.checkStream(c, s); r != proto.Success {
		return r
	}
	e.recorded = time.Now()
	return proto.Success
}

// EventRecordWithFlags is EventRecord; flags 0 or CU_EVENT_RECORD_EXTERNAL.
func (b *Backend) EventRecordWithFlags(ev, s uintptr, flags uint32) proto.Result {
	if flags > 1 {
		return proto.ErrInvalidValue
	}
	return b.EventRecord(ev, s)
}

// EventSynchronize returns at once.
func (b *Backend) EventSynchronize(ev uintptr) proto.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, _, r := b.ownEvent(ev)
	return r
}

// EventQuery reports every event complete.
func (b *Backend) EventQuery(ev uintptr) proto.Result { return b.EventSynchronize(ev) }

// EventElapsedTime is the real time between two recorded events of the
// current context, in milliseconds.
func (b *Backend) EventElapsedTime(start, end uintptr) (float32, proto.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, _, r := b.ownEvent(start)
	if r != proto.Success {
		return 0, r
	}
	e, _, r := b.ownEvent(end)
	if r != proto.Success {
		return 0, r
	}
	if s.recorded.IsZero() || e.recorded.IsZero() || (s.flags|e.flags)&eventDisableTiming != 0 {
		return 0, proto.ErrInvalidHandle
	}
	return float32(e.recorded.Sub(s.recorded).Seconds() * 1000), proto.Success
}
