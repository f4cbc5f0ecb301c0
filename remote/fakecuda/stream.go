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
	id       uintptr
	ctx      *context
	flags    uint32
	recorded time.Time
	// capture is set when the event was last recorded in a capture, with
	// the nodes it stands for there.
	capture *capture
	deps    []*node
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

// StreamDestroy destroys a stream of the current context. A capture it
// began is abandoned (its graph destroyed, counted in
// Stats.ImplicitFrees); one it joined goes on without it.
func (b *Backend) StreamDestroy(s uintptr) proto.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	if r := b.ownStream(s); r != proto.Success {
		return r
	}
	key := streamKey{b.streams[s].ctx, s}
	if sc := b.captures[key]; sc != nil {
		delete(b.captures, key)
		if sc.cap.origin == key {
			b.endCapture(sc.cap)
			b.dropGraph(sc.cap.g)
			b.implicit++
		}
	}
	delete(b.streams, s)
	return proto.Success
}

// StreamSynchronize returns at once: the fake's work is synchronous. A
// capturing stream cannot be waited for
// (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, which invalidates the capture).
func (b *Backend) StreamSynchronize(s uintptr) proto.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	c, r := b.cur()
	if r != proto.Success {
		return r
	}
	if r := b.checkStream(c, s); r != proto.Success {
		return r
	}
	if sc := b.captures[streamKey{c, s}]; sc != nil {
		return b.refuse(sc, proto.ErrStreamCaptureUnsupported)
	}
	return proto.Success
}

// StreamQuery reports every stream idle.
func (b *Backend) StreamQuery(s uintptr) proto.Result { return b.StreamSynchronize(s) }

// StreamWaitEvent checks its arguments; the event may be another
// context's, as in CUDA. Waiting for an event recorded in a capture joins
// the stream to the capture (after the event's nodes); a capturing stream
// may wait only for those (else CUDA_ERROR_STREAM_CAPTURE_ISOLATION), or,
// with CU_EVENT_WAIT_EXTERNAL, record an event wait node.
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
	e := b.events[ev]
	if e == nil {
		return proto.ErrInvalidHandle
	}
	if flags > eventExternal {
		return proto.ErrInvalidValue
	}
	sc, r := b.capturing(c, s)
	if r != proto.Success {
		return r
	}
	joined := e.capture != nil && !e.capture.ended
	switch {
	case sc != nil && flags == eventExternal:
		return b.record(sc, op{kind: opEventWait, ev: e})
	case joined && sc == nil:
		if s == 0 || s == streamLegacy {
			return b.refuse(&streamCapture{cap: e.capture}, proto.ErrStreamCaptureImplicit)
		}
		b.captures[streamKey{c, s}] = &streamCapture{cap: e.capture, deps: append([]*node(nil), e.deps...)}
	case joined && sc.cap == e.capture:
		sc.deps = union(sc.deps, e.deps)
	case joined:
		return proto.ErrStreamCaptureMerge
	case sc != nil:
		return b.refuse(sc, proto.ErrStreamCaptureIsolation)
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
	b.events[id] = &event{id: id, ctx: c, flags: flags}
	return id, proto.Success
}

// own returns object id of m, which must be of the current context
// (ctxOf says an object's); the caller holds mu.
func own[T any](b *Backend, m map[uintptr]*T, id uintptr, ctxOf func(*T) *context) (*T, *context, proto.Result) {
	c, r := b.cur()
	if r != proto.Success {
		return nil, nil, r
	}
	o := m[id]
	if o == nil {
		return nil, nil, proto.ErrInvalidHandle
	}
	if ctxOf(o) != c {
		return nil, nil, proto.ErrInvalidContext
	}
	return o, c, proto.Success
}

// ownEvent returns an event of the current context; the caller holds mu.
func (b *Backend) ownEvent(ev uintptr) (*event, *context, proto.Result) {
	return own(b, b.events, ev, func(e *event) *context { return e.ctx })
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

// EventRecord stamps the event with the real clock; on a capturing
// stream it marks the event as the stream's place in the capture instead.
func (b *Backend) EventRecord(ev, s uintptr) proto.Result { return b.EventRecordWithFlags(ev, s, 0) }

// EventRecordWithFlags is EventRecord; flags 0 or CU_EVENT_RECORD_EXTERNAL,
// which in a capture records an event record node.
func (b *Backend) EventRecordWithFlags(ev, s uintptr, flags uint32) proto.Result {
	if flags > eventExternal {
		return proto.ErrInvalidValue
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	e, c, r := b.ownEvent(ev)
	if r != proto.Success {
		return r
	}
	if r := b.checkStream(c, s); r != proto.Success {
		return r
	}
	sc, r := b.capturing(c, s)
	if r != proto.Success {
		return r
	}
	if sc == nil {
		e.recorded, e.capture, e.deps = time.Now(), nil, nil
		return proto.Success
	}
	if flags == eventExternal {
		return b.record(sc, op{kind: opEventRecord, ev: e})
	}
	e.capture, e.deps = sc.cap, append([]*node(nil), sc.deps...)
	return proto.Success
}

// EventSynchronize returns at once; an event last recorded in a capture
// under way cannot be waited for (CUDA_ERROR_CAPTURED_EVENT).
func (b *Backend) EventSynchronize(ev uintptr) proto.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, _, r := b.ownEvent(ev)
	if r == proto.Success && e.capture != nil && !e.capture.ended {
		return proto.ErrCapturedEvent
	}
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
