package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/gpumux/gpumux/remote/control"
	"github.com/gpumux/gpumux/remote/proto"
	"github.com/gpumux/gpumux/remote/token"
)

// Live migration of sessions between servers of one pool (docs/design.md).
//
// A migration request (ControlMigrate, from gpumux remote migrate or a
// draining server) reaches the source over a control connection, and is
// handed to each session's worker, which holds it until the client's next
// synchronous call, with no asynchronous failure pending: every call
// before it has run, and the client waits. There the worker quiesces
// (synchronizes each context), checks that the session is migratable,
// connects to the target (ControlRestore) and streams the snapshot
// (snapshot.go). The target rebuilds the session on a worker thread of
// its own (restore.go) and answers with a ticket; the source commits, the
// target acknowledges and parks the session for the client; only then
// does the source answer the held call proto.Moved, without running it,
// tell the client where to go (proto.MovedTo) and free its copy. The
// client connects to the target with proto.Resume and sends the call
// again. Up to the commit, any failure (injected or not) leaves the
// session on the source, which runs the held call as if nothing had
// happened; a target that loses its source before the commit, or whose
// client does not come within resumeTimeout, frees what it rebuilt.

// resumeTimeout is how long a target keeps a migrated session for its
// client.
const resumeTimeout = time.Minute

// moveTimeout bounds a migration request: the wait for the client's next
// synchronous call and the transfer.
const moveTimeout = 10 * time.Minute

// Steps of a migration, where WithMigrationHook may fail it.
const (
	StepQuiesce  = "quiesce"
	StepSnapshot = "snapshot"
	StepTransfer = "transfer"
	StepRestore  = "restore" // on the target
	StepSwitch   = "switch"
	StepLeft     = "left" // on the source, after the switch: told only, it cannot fail
)

// WithMigrationHook calls hook at each step of a migration (Step*); an
// error fails the migration there (but at StepLeft). For tests.
func WithMigrationHook(hook func(step string) error) Option {
	return func(s *Server) { s.migrationHook = hook }
}

// ErrMigration means a migration failed; the session stays where it was.
var ErrMigration = errors.New("migration failed")

// errMoved ends a session that moved.
var errMoved = errors.New("moved to another server")

// moveReq asks a session's worker to move it to target.
type moveReq struct {
	ctx    context.Context
	target string
	done   chan error // buffered: the worker never waits on it
}

// liveSession is a session served in this process, as control requests
// find it.
type liveSession struct {
	id     uint64
	tenant string
	moves  chan *moveReq
}

// parked is a restored session waiting for its client.
type parked struct {
	tenant string
	conns  chan resumed
}

// resumed is a moved client's connection, past its handshake.
type resumed struct {
	conn net.Conn
	br   *bufio.Reader
	peer string
	id   uint64 // the Resume connection's number
}

func (s *Server) hook(step string) error {
	if s.migrationHook == nil {
		return nil
	}
	if err := s.migrationHook(step); err != nil {
		return fmt.Errorf("%w at %s: %w", ErrMigration, step, err)
	}
	return nil
}

// register makes a session findable by control requests.
func (s *Server) register(sess *session, tenant string) func() {
	ls := &liveSession{id: sess.id, tenant: tenant, moves: make(chan *moveReq, 1)}
	sess.moves, sess.srv = ls.moves, s
	s.mu.Lock()
	s.live[ls.id] = ls
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.live, ls.id)
		s.mu.Unlock()
	}
}

// hold takes a migration request into the session: it waits there for
// the next synchronous call.
func (sess *session) hold(m *moveReq) {
	if sess.pending != nil {
		m.done <- fmt.Errorf("%w: a migration of the session is under way", ErrMigration)
		return
	}
	if err := sess.migratable(); err != nil {
		m.done <- err
		return
	}
	sess.pending = m
}

// moveNow reports whether the held migration runs before this call: a
// synchronous call with no asynchronous failure pending. A request whose
// requester gave up is dropped.
func (sess *session) moveNow(async bool) *moveReq {
	m := sess.pending
	if m == nil {
		return nil
	}
	if err := m.ctx.Err(); err != nil {
		sess.pending = nil
		m.done <- err
		return nil
	}
	if async || sess.deferred != proto.Success {
		return nil
	}
	sess.pending = nil
	return m
}

// move runs a migration before the call f: on success it answers f
// proto.Moved, says where the session went, and returns errMoved; on
// failure it reports the failure to the requester and returns nil, and f
// runs here.
func (sess *session) move(m *moveReq, f frame) error {
	start := time.Now()
	to, commit, err := sess.migrate(m)
	if err != nil {
		sess.log.Warn("migration failed; the session stays here", "target", m.target, "err", err)
		m.done <- err
		return nil
	}
	sess.held.leave(sess) // committed: a move back waits for this session's cleanup

	sess.deferred = proto.Moved
	sess.wire.op, sess.wire.seq = f.h.Op, f.h.Seq
	c := &proto.Call{Op: f.h.Op, Seq: f.h.Seq, Ctx: f.h.Ctx, T: &sess.wire, Deferred: &sess.deferred}
	err = proto.Dispatch(sess, c, f.p) // answers Moved without running
	if err == nil {
		err = sess.wire.write(proto.Header{Op: proto.OpMoved, Flags: proto.FlagReply, Seq: f.h.Seq}, to.Encode(), true)
	}
	commit.Close()
	if err != nil {
		// The target has the session and waits for the client, which will
		// not come: it gives up after resumeTimeout.
		m.done <- fmt.Errorf("the session moved to %s, but telling its client failed: %w", m.target, err)
		return err
	}
	sess.log.Info("session moved", "target", m.target, "pause", time.Since(start).Round(time.Millisecond))
	m.done <- nil
	return errMoved
}

// migrate quiesces the session, sends its snapshot to the target and
// commits. It returns where the client goes and the control connection,
// to close once the client has been told.
func (sess *session) migrate(m *moveReq) (proto.MovedTo, io.Closer, error) {
	s := sess.srv
	if err := s.hook(StepQuiesce); err != nil {
		return proto.MovedTo{}, nil, err
	}
	for _, h := range sortedHandles(sess.ctxs) {
		if r := sess.use(sess.ctxs[h]); r != ok {
			return proto.MovedTo{}, nil, fmt.Errorf("%w: quiescing: cuCtxSetCurrent: %v", ErrMigration, r)
		}
		if r := sess.be.CtxSynchronize(); r != ok {
			return proto.MovedTo{}, nil, fmt.Errorf("%w: quiescing: cuCtxSynchronize: %v", ErrMigration, r)
		}
	}
	if err := sess.migratable(); err != nil {
		return proto.MovedTo{}, nil, err
	}
	ctx, cancel := context.WithTimeout(m.ctx, moveTimeout)
	defer cancel()
	// The client's handshake goes first: the target checks, counts and
	// admits it as the client's own before it takes the snapshot (and a
	// target that runs its tenants in worker processes knows the worker
	// that rebuilds the session).
	client := proto.Hello{Version: sess.clientVersion, Token: sess.token, Identity: sess.identity}
	cc, err := s.dialControl(ctx, m.target, proto.Control{Kind: proto.ControlRestore, Client: client})
	if err != nil {
		return proto.MovedTo{}, nil, fmt.Errorf("%w: %w", ErrMigration, err)
	}
	to, err := sess.transfer(cc, m.target)
	if err != nil {
		cc.Close()
		return proto.MovedTo{}, nil, err
	}
	return to, cc, nil
}

// transfer streams the snapshot over a control connection to the target,
// and commits once the target has restored it.
func (sess *session) transfer(cc *control.Conn, target string) (proto.MovedTo, error) {
	s := sess.srv
	if err := s.hook(StepSnapshot); err != nil {
		return proto.MovedTo{}, err
	}
	// The target may refuse before it has read everything: its answer is
	// read while the snapshot goes, so that it is not lost when the
	// target closes the connection.
	type answer struct {
		rep proto.ControlReply
		err error
	}
	answers := make(chan answer, 1)
	go func() {
		rep, err := cc.Reply()
		answers <- answer{rep, err}
	}()
	refused := func(err error) error {
		select {
		case a := <-answers:
			if a.err == nil && a.rep.Result != proto.Success {
				return fmt.Errorf("%w: the target refused the session: %s", ErrMigration, a.rep.Message)
			}
		case <-time.After(time.Second):
		}
		return fmt.Errorf("%w: sending the snapshot: %w", ErrMigration, err)
	}
	w := &chunkWriter{cc: cc}
	if err := sess.writeSnapshot(w); err != nil {
		return proto.MovedTo{}, refused(err)
	}
	if err := s.hook(StepTransfer); err != nil {
		return proto.MovedTo{}, err
	}
	if err := w.flush(); err != nil {
		return proto.MovedTo{}, refused(err)
	}
	a := <-answers
	rep, err := a.rep, a.err
	if err != nil {
		return proto.MovedTo{}, fmt.Errorf("%w: the target's answer: %w", ErrMigration, err)
	}
	if rep.Result != proto.Success || len(rep.Ticket) != proto.TicketSize {
		return proto.MovedTo{}, fmt.Errorf("%w: the target refused the session: %s", ErrMigration, rep.Message)
	}
	if err := s.hook(StepSwitch); err != nil {
		return proto.MovedTo{}, err
	}
	if err := cc.SendData([]byte{1}); err != nil {
		return proto.MovedTo{}, fmt.Errorf("%w: committing: %w", ErrMigration, err)
	}
	if rep, err := cc.Reply(); err != nil || rep.Result != proto.Success {
		return proto.MovedTo{}, fmt.Errorf("%w: the target did not acknowledge the commit (%v)", ErrMigration, err)
	}
	return proto.MovedTo{Addr: target, Ticket: rep.Ticket}, nil
}

func (s *Server) dialControl(ctx context.Context, addr string, req proto.Control) (*control.Conn, error) {
	if len(s.secret) == 0 {
		return nil, errors.New("no pool secret to sign a control token (WithSecret)")
	}
	return control.Dial(ctx, addr, s.secret, req, control.WithTLS(s.poolTLS))
}

// WithPoolTLS makes the server reach the other servers of its pool (a
// migration's target) over TLS with config, as a pool whose servers serve
// TLS needs; without it those connections are in clear.
func WithPoolTLS(config *tls.Config) Option { return func(s *Server) { s.poolTLS = config } }

// chunkWriter sends what is written to it as control data frames of up to
// proto.ChunkSize bytes.
type chunkWriter struct {
	cc  *control.Conn
	buf []byte
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		k := min(len(p), proto.ChunkSize-len(w.buf))
		w.buf = append(w.buf, p[:k]...)
		p = p[k:]
		if len(w.buf) == proto.ChunkSize {
			if err := w.flush(); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

func (w *chunkWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	err := w.cc.SendData(w.buf)
	w.buf = w.buf[:0]
	return err
}

// chunkReader reads control data frames as a stream.
type chunkReader struct {
	br   *bufio.Reader
	buf  []byte
	left []byte
}

func (r *chunkReader) Read(p []byte) (int, error) {
	for len(r.left) == 0 {
		h, b, err := proto.ReadFrame(r.br, r.buf)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return 0, err
		}
		r.buf = b[:0]
		if h.Op != proto.OpControl || h.Flags != proto.FlagData || len(b) == 0 {
			return 0, fmt.Errorf("%w: op %d flags %#x in a snapshot", proto.ErrMalformed, h.Op, h.Flags)
		}
		r.left = b
	}
	n := copy(p, r.left)
	r.left = r.left[n:]
	return n, nil
}

// answer writes a control reply.
func answer(conn net.Conn, rep proto.ControlReply) error {
	_, err := conn.Write(proto.AppendFrame(nil, proto.Header{Op: proto.OpControl, Flags: proto.FlagReply}, rep.Encode()))
	return err
}

// admitRestore checks the handshake of a session's client that a source
// offers to restore here, logs it in and admits it, as a handshake
// (Server.handshake); the caller logs it out when the session ends.
func (s *Server) admitRestore(client proto.Hello) (token.Claims, error) {
	claims, why, err := s.checkIn(client)
	if err == nil && claims.ID == "" {
		s.logout(claims.ID)
		why, err = refusedNoToken, errors.New("a server that runs its tenants in worker processes takes sessions of tokens with an ID")
	}
	if err != nil {
		s.counts.refused[why].Add(1)
		return token.Claims{}, fmt.Errorf("the session's client: %w", err)
	}
	return claims, nil
}

// refusal answers a control request with a failure.
func refuseControl(conn net.Conn, r proto.Result, err error) {
	conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	answer(conn, proto.ControlReply{Result: r, Message: err.Error()})
}

// serveControl serves a control connection: its token is checked first.
// A worker serves what its front hands it for tenant (its key): a session
// restored there must be that tenant's; the front passes "" (any).
func (s *Server) serveControl(ctx context.Context, conn net.Conn, p []byte, id uint64, peer, tenant string) {
	log := s.log.With("conn", id, "peer", peer)
	req, err := proto.DecodeControl(p)
	if err == nil && len(s.secret) == 0 {
		err = errors.New("this server has no pool secret: it takes no control requests")
	}
	if err == nil {
		err = token.CheckControl(s.secret, req.Token, s.now())
	}
	if err != nil {
		s.counts.refused[refusedBadToken].Add(1)
		log.Warn("control connection refused", "err", err)
		refuseControl(conn, proto.ErrNotPermitted, err)
		return
	}
	if s.tenantCmd != nil {
		s.routeControl(ctx, conn, req, p, id, peer, log)
		return
	}
	switch req.Kind {
	case proto.ControlMigrate:
		s.serveMigrate(ctx, conn, req, log)
	case proto.ControlRestore:
		s.receive(ctx, conn, id, peer, tenant, req.Client)
	}
}

// routeControl hands a control connection to the worker it concerns: a
// migration to the worker of the session or tenant it names (one that
// runs), a restore to the worker of the session's tenant (started if
// needed), once its client's handshake has been checked, counted and
// admitted here as the client's own would be: a target that is full
// refuses the session before the source lets go of it. The connection
// then counts as the session's until the worker says it has ended. The
// worker checks the request again and serves it.
func (s *Server) routeControl(ctx context.Context, conn net.Conn, req proto.Control, p []byte, id uint64, peer string, log *slog.Logger) {
	if req.Kind == proto.ControlRestore {
		claims, err := s.admitRestore(req.Client)
		if err != nil {
			log.Warn("migration refused", "err", err)
			refuseControl(conn, proto.ErrNotPermitted, err)
			return
		}
		err = s.handOffTo(ctx, conn, claims.ID, handoff{Conn: id, Peer: peer, Identity: req.Client.Identity, Claims: claims, Control: p}, true, false, nil)
		if err != nil {
			log.Error("handing a restore to its tenant's worker", "tenant", claims.ID, "err", err)
			refuseControl(conn, proto.ErrNotPermitted, err)
		}
		return
	}
	key := req.Tenant
	if req.Session != 0 {
		key = s.workerOf(req.Session)
	}
	if key == "" {
		refuseControl(conn, proto.ErrNotFound, fmt.Errorf("no session %d or of tenant %q here (a server that runs its tenants in worker processes moves sessions of tokens with an ID)", req.Session, req.Tenant))
		return
	}
	err := s.handOffTo(ctx, conn, key, handoff{Conn: id, Peer: peer, Claims: token.Claims{ID: key}, Control: p}, false, true, nil)
	switch {
	case errors.Is(err, errNoSession):
		refuseControl(conn, proto.ErrNotFound, fmt.Errorf("no session %d or of tenant %q here", req.Session, req.Tenant))
	case err != nil:
		log.Error("handing a control connection to its tenant's worker", "tenant", key, "err", err)
		refuseControl(conn, proto.ErrNotPermitted, err)
	}
}
