package server

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"time"

	"github.com/gpumux/gpumux/remote/proto"
)

// queueFrames bounds the frames read ahead of the worker (at most
// proto.MaxPayload bytes each).
const queueFrames = 8

// smallFrame is the largest payload copied out of the reader's buffer;
// larger ones keep their pooled buffer.
const smallFrame = 4 << 10

// pooledFrames is the number of frame buffers kept for reuse between
// copies, in the whole process.
const pooledFrames = 32

// bufPool keeps up to pooledFrames buffers of proto.MaxPayload bytes. Not
// a sync.Pool: that one is emptied by every collection, and each new
// buffer is a megabyte to clear, on the reader's path of every chunk.
var bufPool = framePool{free: make(chan *[]byte, pooledFrames)}

type framePool struct{ free chan *[]byte }

// Get returns a kept buffer or a new one.
func (p framePool) Get() *[]byte {
	select {
	case b := <-p.free:
		return b
	default:
		b := make([]byte, proto.MaxPayload)
		return &b
	}
}

// Put keeps b for reuse if fewer than pooledFrames are kept.
func (p framePool) Put(b *[]byte) {
	select {
	case p.free <- b:
	default:
	}
}

// frame is one frame read from the client.
type frame struct {
	h   proto.Header
	p   []byte
	buf *[]byte // the pooled buffer p lies in, or nil
}

func (f *frame) release() {
	if f.buf != nil {
		bufPool.Put(f.buf)
		f.buf = nil
	}
	f.p = nil
}

// readFrames reads frames from r into in until an error (kept in *errp,
// then in is closed) or done.
func readFrames(r io.Reader, in chan<- frame, errp *error, done <-chan struct{}) {
	defer close(in)
	buf := bufPool.Get()
	defer func() { bufPool.Put(buf) }()
	for {
		h, p, err := proto.ReadFrame(r, *buf)
		if err != nil {
			*errp = err
			return
		}
		f := frame{h: h}
		if len(p) <= smallFrame {
			f.p = append([]byte(nil), p...)
		} else {
			f.p, f.buf = p, buf
			buf = bufPool.Get()
		}
		select {
		case in <- f:
		case <-done:
			f.release()
			return
		}
	}
}

// wire is the worker's proto.Transport: data frames come from the reader's
// queue, replies and data go out through a buffered writer flushed with
// each reply.
type wire struct {
	in      <-chan frame
	readErr *error
	bw      *bufio.Writer
	conn    net.Conn // for large data frames, written around bw
	scratch []byte
	// op and seq name the call being run.
	op   proto.Op
	seq  uint32
	held frame // the data frame ReadData returned last
	err  error // the first transport error; sticky
	// result is what the last reply said.
	result proto.Result
	// busyPoll is how long ReadData polls for a data frame (pollRecv).
	busyPoll time.Duration
}

var _ proto.Transport = (*wire)(nil)

// ReadData returns the next frame's payload, which must be a data frame
// of the current call.
func (w *wire) ReadData() ([]byte, error) {
	if w.err != nil {
		return nil, w.err
	}
	w.held.release()
	f, ok := recv(w.in, w.busyPoll)
	if !ok {
		err := *w.readErr
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		w.err = fmt.Errorf("reading host data: %w", err)
		return nil, w.err
	}
	if f.h.Flags != proto.FlagData || f.h.Seq != w.seq || f.h.Op != w.op {
		f.release()
		w.err = fmt.Errorf("%w: frame op %d flags %#x seq %d where data of seq %d was expected",
			proto.ErrMalformed, f.h.Op, f.h.Flags, f.h.Seq, w.seq)
		return nil, w.err
	}
	w.held = f
	return f.p, nil
}

// WriteData sends a data frame of the current call.
func (w *wire) WriteData(seq uint32, p []byte) error {
	return w.write(proto.Header{Op: w.op, Flags: proto.FlagData, Seq: seq}, p, false)
}

// WriteReply sends a reply and flushes.
func (w *wire) WriteReply(op proto.Op, seq uint32, payload []byte) error {
	w.result = proto.ErrUnknown
	if len(payload) >= 4 { // a reply starts with the call's CUresult
		w.result = proto.Result(int32(binary.LittleEndian.Uint32(payload)))
	}
	return w.write(proto.Header{Op: op, Flags: proto.FlagReply, Seq: seq}, payload, true)
}

func (w *wire) write(h proto.Header, p []byte, flush bool) error {
	if w.err != nil {
		return w.err
	}
	var err error
	if len(p) > smallFrame && w.conn != nil {
		// A chunk of host data: header and payload in one writev, without
		// copying the payload.
		w.scratch = proto.AppendHeader(w.scratch[:0], h, len(p))
		if err = w.bw.Flush(); err == nil {
			bufs := net.Buffers{w.scratch, p}
			_, err = bufs.WriteTo(w.conn)
		}
	} else {
		w.scratch = proto.AppendFrame(w.scratch[:0], h, p)
		_, err = w.bw.Write(w.scratch)
	}
	if err == nil && flush {
		err = w.bw.Flush()
	}
	if err != nil {
		w.err = fmt.Errorf("writing to the client: %w", err)
	}
	return w.err
}

// session is one client connection's state, used only by its worker.
type session struct {
	be    Backend
	log   *slog.Logger
	quota *share
	// devs maps the client's device ordinals to the backend's.
	devs []int32

	wire     wire
	deferred proto.Result
	// id is the connection's number, token and identity what its
	// handshake presented, clientVersion its protocol version: a
	// migration carries them (migrate.go).
	id              uint64
	token, identity string
	clientVersion   uint16
	// moves brings migration requests (nil: none come), pending holds one
	// until the next synchronous call; srv is the server (migrate.go).
	moves   <-chan *moveReq
	pending *moveReq
	srv     *Server
	// migration: cuMemAlloc is backed by virtual memory (backing.go), in
	// windows, one per backend device.
	migration bool
	windows   map[int32]*window
	held      *windowClaims // the server's sessions' window bases
	// modeSet: the client set the worker thread's capture interaction
	// mode (cleanup puts the default back).
	modeSet bool

	objects
	stats  sessionStats
	counts *counters // the server's
	// busyPoll is how long run polls for the next call before it sleeps.
	busyPoll time.Duration
	bufs     [copyBuffers][]byte // the copy buffers (chunk)

	// expires is when the client's token expires (zero: never); once it
	// has, expired is set (expiry.go).
	expires    time.Time
	now        func() time.Time // the server's clock
	linger     time.Duration    // from the expiry to the close
	expired    bool
	freedEarly freed // what expiring freed
}

type sessionStats struct {
	calls      uint64
	bytesIn    uint64
	bytesOut   uint64
	peakMemory uint64
}

func newSession(srv *Server, q *share, devs []int32, log *slog.Logger) *session {
	s := &session{be: srv.backend, log: log, quota: q, devs: devs, counts: srv.counts, now: srv.now, linger: srv.expiredLinger, busyPoll: srv.busyPoll, migration: srv.migration, held: srv.windows}
	s.objects.init()
	return s
}

// serve runs the session over conn until the client goes or conn is
// closed, then cleans up. It locks the calling goroutine to its OS thread
// for good: the thread, and whatever the backend keeps per thread, ends
// with the session.
func (s *session) serve(conn net.Conn, br *bufio.Reader) {
	runtime.LockOSThread()
	start := time.Now()
	in := make(chan frame, queueFrames)
	done := make(chan struct{})
	var readErr error
	if tc, ok := conn.(*net.TCPConn); ok {
		// Room for a few chunks in flight each way.
		tc.SetWriteBuffer(4 * proto.ChunkSize)
		tc.SetReadBuffer(4 * proto.ChunkSize)
	}
	s.wire = wire{in: in, readErr: &readErr, bw: bufio.NewWriterSize(conn, 64<<10), conn: conn, busyPoll: s.busyPoll}
	go readFrames(br, in, &readErr, done)
	limit, _ := s.quota.left()
	s.log.Info("client connected", "quota", limit)

	err := s.run(in, &readErr)
	conn.Close()
	close(done)
	if s.pending != nil {
		s.pending.done <- fmt.Errorf("%w: the client went before its next call", ErrMigration)
	}
	s.held.leave(s) // a move back waits for the cleanup to let go of the windows
	if errors.Is(err, errMoved) {
		_ = s.srv.hook(StepLeft)
	}
	freed := s.cleanup()
	freed.add(s.freedEarly)

	reason := "disconnected"
	if err != nil {
		reason = err.Error()
		if !errors.Is(err, errMoved) {
			s.log.Warn("closing the connection", "err", err)
		}
	}
	s.log.Info("client gone", "reason", reason, "duration", time.Since(start).Round(time.Millisecond),
		"calls", s.stats.calls, "bytes_in", s.stats.bytesIn, "bytes_out", s.stats.bytesOut,
		"peak_memory", s.stats.peakMemory, "freed_allocations", freed.allocs, "freed_bytes", freed.bytes,
		"unloaded_modules", freed.modules, "destroyed_streams", freed.streams,
		"destroyed_events", freed.events, "destroyed_contexts", freed.contexts, "destroyed_pools", freed.pools,
		"ended_captures", freed.captures, "destroyed_graphs", freed.graphs, "destroyed_graph_execs", freed.execs)
}

// run executes the calls in order until the queue ends (the reader's
// error, nil at EOF), a call breaks the protocol, or the close after the
// token's expiry is due.
func (s *session) run(in <-chan frame, readErr *error) error {
	var expiry <-chan time.Time
	timer := s.expiryTimer()
	if timer != nil {
		defer timer.Stop()
		expiry = timer.C
	}
	for {
		if f, ok, polled := pollRecv(in, s.busyPoll); polled {
			if err := s.next(f, ok, readErr, timer); err != nil || !ok {
				return err
			}
			// A client that calls without pause never lets the worker
			// sleep: see to the timer and migrations between calls.
			select {
			case <-expiry:
				if err := s.expiryDue(timer); err != nil {
					return err
				}
			case m := <-s.moves:
				s.hold(m)
			default:
			}
			continue
		}
		select {
		case f, ok := <-in:
			if err := s.next(f, ok, readErr, timer); err != nil || !ok {
				return err
			}
		case <-expiry:
			if err := s.expiryDue(timer); err != nil {
				return err
			}
		case m := <-s.moves:
			s.hold(m)
		}
	}
}

// pollRecv receives from ch like `v, ok := <-ch`, but only if a value
// comes within d, polling without sleeping; got is false if none came. A
// locked worker that sleeps on a channel is woken through the scheduler
// and the OS, several microseconds more on each waiting call, and on each
// chunk of a copy, than a socket round trip (docs/benchmarks.md).
func pollRecv[T any](ch <-chan T, d time.Duration) (v T, ok, got bool) {
	if d <= 0 {
		return v, false, false
	}
	var start time.Time
	for i := 0; ; i++ {
		select {
		case v, ok = <-ch:
			return v, ok, true
		default:
		}
		// Reading the clock every few polls keeps the loop cheap.
		if i%16 == 0 {
			if i == 0 {
				start = time.Now()
			} else if time.Since(start) > d {
				return v, false, false
			}
		}
	}
}

// recv receives from ch, polling for up to d first (pollRecv).
func recv[T any](ch <-chan T, d time.Duration) (T, bool) {
	if v, ok, got := pollRecv(ch, d); got {
		return v, ok
	}
	v, ok := <-ch
	return v, ok
}

// next runs the frame the reader queued; ok false means the queue ended
// (the reader's error, nil at EOF).
func (s *session) next(f frame, ok bool, readErr *error, timer *time.Timer) error {
	if !ok {
		if err := *readErr; err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
			return err
		}
		return nil
	}
	if !s.expired && s.pastExpiry() {
		s.expire(timer)
	}
	return s.call(f)
}

// call runs one call frame.
func (s *session) call(f frame) error {
	defer f.release()
	if f.h.Flags&^proto.FlagAsync != 0 {
		return fmt.Errorf("%w: op %d seq %d: flags %#x where a call was expected", proto.ErrMalformed, f.h.Op, f.h.Seq, f.h.Flags)
	}
	info, ok := proto.Calls[f.h.Op]
	if !ok {
		return fmt.Errorf("%w: op %d", proto.ErrUnknownOp, f.h.Op)
	}
	if async := f.h.Flags&proto.FlagAsync != 0; async != info.Async {
		return fmt.Errorf("%w: %s sent with async=%v", proto.ErrMalformed, info.Name, async)
	}
	if m := s.moveNow(info.Async); m != nil {
		if err := s.move(m, f); err != nil {
			return err
		}
	}
	s.stats.calls++
	if r := s.refusal(); r != proto.Success {
		s.deferred = r // answered instead of running; see expiry.go
	}
	s.wire.op, s.wire.seq = f.h.Op, f.h.Seq
	c := &proto.Call{Op: f.h.Op, Seq: f.h.Seq, Ctx: f.h.Ctx, T: &s.wire, Deferred: &s.deferred}
	start := time.Now()
	failed, err := s.dispatch(c, f.p, info.Async)
	s.counts.call(f.h.Op, time.Since(start), failed)
	s.wire.held.release()
	return err
}

// dispatch runs a call and reports whether it failed: whether it broke
// the protocol or the client gets a failure for it. That is a synchronous
// call's reply; an asynchronous call's own result, which Dispatch defers.
func (s *session) dispatch(c *proto.Call, payload []byte, async bool) (failed bool, err error) {
	if !async {
		s.wire.result = proto.ErrUnknown // until a reply says otherwise
		err = proto.Dispatch(s, c, payload)
		return err != nil || s.wire.result != proto.Success, err
	}
	// An async call's failure is deferred only if none is pending: run it
	// with none pending to see it, then put back the older one.
	pending := s.deferred
	s.deferred = proto.Success
	err = proto.Dispatch(s, c, payload)
	failed = err != nil || s.deferred != proto.Success
	if pending != proto.Success {
		s.deferred = pending
	}
	return failed, err
}
