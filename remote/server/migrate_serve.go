package server

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/gpumux/gpumux/remote/control"
	"github.com/gpumux/gpumux/remote/proto"
	"github.com/gpumux/gpumux/remote/token"
)

// serveMigrate moves the sessions a request names to its target, one at
// a time, and answers with those moved, or the first failure.
func (s *Server) serveMigrate(ctx context.Context, conn net.Conn, req proto.Control, log *slog.Logger) {
	var ids []uint64
	s.mu.Lock()
	for id, ls := range s.live {
		if id == req.Session || req.Session == 0 && ls.tenant == req.Tenant {
			ids = append(ids, id)
		}
	}
	s.mu.Unlock()
	slices.Sort(ids)
	if len(ids) == 0 {
		refuseControl(conn, proto.ErrNotFound, fmt.Errorf("no session %d or of tenant %q here", req.Session, req.Tenant))
		return
	}
	log.Info("migration requested", "sessions", ids, "target", req.Target)
	var rep proto.ControlReply
	for _, id := range ids {
		if err := s.Move(ctx, id, req.Target); err != nil {
			// A front asking its worker (moveInWorker) tells these apart.
			switch rep.Result = proto.ErrNotPermitted; {
			case errors.Is(err, ErrNotMigratable):
				rep.Result = proto.ErrNotSupported
			case errors.Is(err, errNoSession):
				rep.Result = proto.ErrNotFound
			}
			rep.Message = fmt.Sprintf("session %d: %v", id, err)
			break
		}
		rep.Moved = append(rep.Moved, id)
	}
	conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	answer(conn, rep)
}

// Sessions returns the numbers of the sessions served in this process, or
// by its tenants' worker processes, by tenant (token ID; "" without one).
func (s *Server) Sessions() map[string][]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string][]uint64{}
	for id, ls := range s.live {
		out[ls.tenant] = append(out[ls.tenant], id)
	}
	// A front's sessions are its workers' connections.
	for _, t := range s.tenants {
		for id, tenant := range t.live {
			out[tenant] = append(out[tenant], id)
		}
	}
	for _, ids := range out {
		slices.Sort(ids)
	}
	return out
}

// errNoSession: the session to move is not (or no longer) served here.
var errNoSession = errors.New("no such session here")

// Move moves session id to the server at target at the client's next
// synchronous call, and returns once it has moved or the migration failed
// (the session then stays here), or ctx ends.
func (s *Server) Move(ctx context.Context, id uint64, target string) error {
	if s.tenantCmd != nil {
		return s.moveInWorker(ctx, id, target)
	}
	s.mu.Lock()
	ls := s.live[id]
	s.mu.Unlock()
	if ls == nil {
		return fmt.Errorf("%w: session %d: %w", ErrMigration, id, errNoSession)
	}
	ctx, cancel := context.WithTimeout(ctx, moveTimeout)
	defer cancel()
	m := &moveReq{ctx: ctx, target: target, done: make(chan error, 1)}
	select {
	case ls.moves <- m:
	case <-ctx.Done():
		return fmt.Errorf("%w: session %d is busy: %w", ErrMigration, id, ctx.Err())
	}
	select {
	case err := <-m.done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("%w: waiting for the client's next call: %w", ErrMigration, ctx.Err())
	}
}

// moveInWorker is Move on a front: it asks the worker that serves session
// id to move it, with a control request over a socket pair handed to the
// worker as a CLI's connection would be.
func (s *Server) moveInWorker(ctx context.Context, id uint64, target string) error {
	for {
		err := s.askWorkerToMove(ctx, id, target)
		if !errors.Is(err, errNoSession) || s.workerOf(id) == "" {
			return err
		}
		// The worker does not serve it yet: a session being restored
		// there, or waiting for its client, is the front's already.
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: session %d is not served yet: %w", ErrMigration, id, context.Cause(ctx))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// askWorkerToMove sends the worker of session id one request to move it.
func (s *Server) askWorkerToMove(ctx context.Context, id uint64, target string) error {
	key := s.workerOf(id)
	if key == "" {
		return fmt.Errorf("%w: session %d: %w", ErrMigration, id, errNoSession)
	}
	tok, err := token.MintControl(s.secret, s.now().Add(time.Minute))
	if err != nil {
		return fmt.Errorf("%w: %w", ErrMigration, err)
	}
	here, there, err := connPair()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrMigration, err)
	}
	defer here.Close()
	s.mu.Lock()
	s.nextID++
	cid := s.nextID
	s.mu.Unlock()
	req := proto.Control{Version: proto.Version, Token: tok, Kind: proto.ControlMigrate, Session: id, Target: target}
	err = s.handOffTo(ctx, there, key, handoff{Conn: cid, Peer: "front", Claims: token.Claims{ID: key}, Control: req.Encode()}, false, true, nil)
	there.Close() // the worker has its own
	if err != nil {
		return fmt.Errorf("%w: session %d: %w", ErrMigration, id, err)
	}
	stop := context.AfterFunc(ctx, func() { here.Close() })
	defer stop()
	rep, err := control.ReadReply(bufio.NewReader(here))
	switch {
	case err != nil && ctx.Err() != nil:
		return fmt.Errorf("%w: session %d: %w", ErrMigration, id, context.Cause(ctx))
	case err != nil:
		return fmt.Errorf("%w: session %d: the worker's answer: %w", ErrMigration, id, err)
	case rep.Result == proto.Success:
		return nil
	case rep.Result == proto.ErrNotFound:
		return fmt.Errorf("%w: %s: %w", ErrMigration, rep.Message, errNoSession)
	case rep.Result == proto.ErrNotSupported:
		return fmt.Errorf("%w: %s", ErrNotMigratable, rep.Message)
	}
	return fmt.Errorf("%w: %s", ErrMigration, rep.Message)
}

// connPair is a connected pair of unix stream sockets.
func connPair() (net.Conn, net.Conn, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	var conns [2]net.Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "control")
		conns[i], err = net.FileConn(f) // a dup of f
		f.Close()
		if err != nil {
			if i == 1 {
				conns[0].Close()
			} else {
				syscall.Close(fds[1])
			}
			return nil, nil, fmt.Errorf("socketpair: %w", err)
		}
	}
	return conns[0], conns[1], nil
}

// Drain moves every session served here to one of targets and returns
// when each has moved or failed (and stays here), or ctx ends. A tenant's
// sessions go to one server, since their quota is one pool there: the
// first of its sessions tries the targets in turn until one takes it (a
// target without room for the quota refuses it), the others then follow
// it there all at once. Tenants move concurrently, each starting at
// another target, so that a drain spreads them over the pool. A session
// that cannot move at all (ErrNotMigratable) is not offered to the next
// target.
func (s *Server) Drain(ctx context.Context, targets []string) error {
	if len(targets) == 0 {
		return fmt.Errorf("%w: no server to move the sessions to", ErrMigration)
	}
	tenants := s.Sessions()
	names := slices.Sorted(maps.Keys(tenants))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, tenant := range names {
		order := append(slices.Clone(targets[i%len(targets):]), targets[:i%len(targets)]...)
		wg.Go(func() { errs[i] = s.drainTenant(ctx, tenants[tenant], order) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// drainTenant moves a tenant's sessions to the first of targets that takes
// one of them.
func (s *Server) drainTenant(ctx context.Context, ids []uint64, targets []string) error {
	var errs []error
	for i, id := range ids {
		to, err := s.moveToOne(ctx, id, targets)
		if err != nil {
			errs = append(errs, fmt.Errorf("session %d: %w", id, err))
		}
		if to == "" {
			continue
		}
		rest := ids[i+1:]
		more := make([]error, len(rest))
		var wg sync.WaitGroup
		for j, id := range rest {
			wg.Go(func() {
				if err := s.Move(ctx, id, to); err != nil && !errors.Is(err, errNoSession) {
					more[j] = fmt.Errorf("session %d: %w", id, err)
				}
			})
		}
		wg.Wait()
		return errors.Join(append(errs, more...)...)
	}
	return errors.Join(errs...)
}

// moveToOne moves session id to the first of targets that takes it.
func (s *Server) moveToOne(ctx context.Context, id uint64, targets []string) (string, error) {
	var errs []error
	for _, to := range targets {
		err := s.Move(ctx, id, to)
		if err == nil {
			return to, nil
		}
		if errors.Is(err, errNoSession) {
			return "", nil // its client left meanwhile
		}
		errs = append(errs, fmt.Errorf("to %s: %w", to, err))
		if errors.Is(err, ErrNotMigratable) || ctx.Err() != nil {
			break
		}
	}
	return "", errors.Join(errs...)
}

// receive rebuilds a session from a snapshot on a control connection,
// parks it for its client, and serves the client when it resumes. It runs
// on a thread of its own for good: the session's backend state is the
// thread's.
//
// The request named the session's client (client): the snapshot's must be
// that one. A worker serves what its front hands it for tenant (its key),
// which has checked, counted and admitted the client already; a server
// that runs every tenant itself (tenant "") does that here.
func (s *Server) receive(ctx context.Context, conn net.Conn, id uint64, peer, tenant string, client proto.Hello) {
	runtime.LockOSThread()
	conn.SetDeadline(time.Now().Add(moveTimeout))
	check := s.checkClient // the front logged it in and admitted it
	if tenant == "" {
		check = s.checkIn
	}
	claims, why, err := check(client)
	if err != nil {
		s.counts.refused[why].Add(1)
		s.log.Warn("migration refused", "conn", id, "peer", peer, "err", err)
		refuseControl(conn, proto.ErrNotPermitted, fmt.Errorf("the session's client: %w", err))
		return
	}
	if tenant == "" {
		defer s.logout(claims.ID)
	}
	r := &chunkReader{br: bufio.NewReaderSize(conn, 64<<10)}
	sn, err := readSnapshot(r)
	switch {
	case err != nil:
	case sn.token != client.Token || sn.version != client.Version:
		err = errors.New("the snapshot's client is not the one the request named")
	case tenant != "" && claims.ID != tenant:
		err = fmt.Errorf("a session of token ID %q sent to the worker of %q", claims.ID, tenant)
	}
	if err != nil {
		s.log.Warn("migration refused", "conn", id, "peer", peer, "err", err)
		refuseControl(conn, proto.ErrInvalidValue, err)
		return
	}
	q := s.joinQuota(claims)
	defer s.leaveQuota(q)
	log := s.log.With("conn", id, "peer", peer, "identity", clean(sn.identity), "token", claims.ID)
	sess := newSession(s, q, s.devices(claims), log)
	sess.expires = claims.Expires
	sess.id, sess.token, sess.identity, sess.clientVersion = id, sn.token, sn.identity, sn.version
	start := time.Now()
	ticket, err := s.restoreParked(ctx, sess, sn, r, conn)
	if err != nil {
		sess.cleanup()
		log.Warn("migration in refused; freed what was rebuilt", "err", err)
		refuseControl(conn, proto.ErrInvalidValue, err)
		drain(conn)
		return
	}
	log.Info("migrated session waiting for its client", "restore", time.Since(start).Round(time.Millisecond))
	p := &parked{tenant: claims.ID, conns: make(chan resumed, 1)}
	key := string(ticket)
	s.mu.Lock()
	s.parked[key] = p
	s.mu.Unlock()
	conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if err := answer(conn, proto.ControlReply{Result: proto.Success}); err != nil && s.unpark(key) {
		sess.cleanup()
		return
	}
	conn.Close()
	timer := time.NewTimer(resumeTimeout)
	defer timer.Stop()
	var rc resumed
	select {
	case rc = <-p.conns:
	case <-timer.C:
	case <-ctx.Done():
	}
	if rc.conn == nil && s.unpark(key) {
		freed := sess.cleanup()
		log.Warn("migrated session freed: its client did not resume", "freed_bytes", freed.bytes)
		return
	}
	if rc.conn == nil {
		rc = <-p.conns // the client came just now
	}
	if rc.conn == nil { // it came, and its resume failed
		freed := sess.cleanup()
		log.Warn("migrated session freed: its client's resume failed", "freed_bytes", freed.bytes)
		return
	}
	stop := context.AfterFunc(ctx, func() { rc.conn.Close() })
	defer stop()
	// The session keeps the number of the restore's connection, which a
	// front that runs its tenants in workers counts for it.
	unregister := s.register(sess, claims.ID)
	defer unregister()
	sess.log = s.log.With("conn", id, "peer", rc.peer, "identity", clean(sn.identity), "token", claims.ID, "resumed_conn", rc.id)
	sess.serve(rc.conn, rc.br)
}

// readSnapshot reads a snapshot's state (its client is checked against the
// request's, which receive checked as a handshake).
func readSnapshot(r io.Reader) (snapshot, error) {
	var n [8]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return snapshot{}, fmt.Errorf("reading the snapshot: %w", err)
	}
	size := proto.NewDecoder(n[:]).U64()
	if size > maxState {
		return snapshot{}, fmt.Errorf("%w: a snapshot state of %d bytes", proto.ErrMalformed, size)
	}
	st := make([]byte, size)
	if _, err := io.ReadFull(r, st); err != nil {
		return snapshot{}, fmt.Errorf("reading the snapshot: %w", err)
	}
	return decodeSnapshot(st)
}

// restoreParked restores a session, answers the source with a ticket and
// waits for its commit.
func (s *Server) restoreParked(ctx context.Context, sess *session, sn snapshot, r *chunkReader, conn net.Conn) ([]byte, error) {
	if err := s.hook(StepRestore); err != nil {
		return nil, err
	}
	if s.migration {
		// The session's windows must be at their bases here; it may have
		// left this server a moment ago and still be letting go of them.
		ctx, cancel := context.WithTimeout(ctx, moveTimeout)
		defer cancel()
		start := time.Now()
		waited, err := s.windows.await(ctx, sess, sn.windowBases())
		if err != nil {
			return nil, err
		}
		if waited {
			sess.log.Info("waited for the session that left here to let go of its windows", "wait", time.Since(start).Round(time.Millisecond))
		}
	}
	if err := sess.restore(sn, r); err != nil {
		return nil, err
	}
	if len(r.left) != 0 {
		return nil, fmt.Errorf("%w: %d bytes past the snapshot", proto.ErrMalformed, len(r.left))
	}
	ticket := make([]byte, proto.TicketSize)
	if _, err := rand.Read(ticket); err != nil {
		return nil, err
	}
	if err := answer(conn, proto.ControlReply{Result: proto.Success, Ticket: ticket}); err != nil {
		return nil, fmt.Errorf("answering the source: %w", err)
	}
	h, p, err := proto.ReadFrame(r.br, nil)
	if err != nil {
		return nil, fmt.Errorf("waiting for the source's commit: %w", err)
	}
	if h.Op != proto.OpControl || h.Flags != proto.FlagData || len(p) != 1 || p[0] != 1 {
		return nil, fmt.Errorf("%w: op %d flags %#x where the commit was expected", proto.ErrMalformed, h.Op, h.Flags)
	}
	return ticket, nil
}

// unpark forgets a parked session, and reports whether it was still
// parked (no client has taken it).
func (s *Server) unpark(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.parked[key]
	delete(s.parked, key)
	return ok
}

// resume checks a moved client's Resume and hands its connection to the
// session parked for it; a ticket is good once.
func (s *Server) resume(ctx context.Context, conn net.Conn, p []byte, id uint64, peer string) {
	res, err := proto.DecodeResume(p)
	var claims token.Claims
	why := refusedMalformed
	if err == nil {
		claims, why, err = s.checkClient(res.Hello)
	}
	if err == nil && s.tenantCmd != nil {
		// The session is parked in its tenant's worker: the Resume goes
		// there. It was logged in and admitted with the restore, whose
		// connection counts for it until the session ends.
		if claims.ID == "" {
			why, err = refusedNoToken, errors.New("a server that runs its tenants in worker processes resumes sessions of tokens with an ID")
		} else {
			err = s.handOffTo(ctx, conn, claims.ID, handoff{Conn: id, Peer: peer, Identity: res.Hello.Identity, Claims: claims, Ticket: res.Ticket}, false, true, nil)
			switch {
			case errors.Is(err, errNoSession):
				s.log.Warn("resume refused", "conn", id, "peer", peer, "err", err)
				s.refuse(conn, refusedBadToken, "no migrated session for this ticket and token")
			case err != nil:
				s.log.Error("handing a resume to its tenant's worker", "conn", id, "peer", peer, "err", err)
				s.refuse(conn, refusedWorker, err.Error())
			}
			return
		}
	}
	if err != nil {
		s.log.Warn("resume refused", "conn", id, "peer", peer, "err", err)
		s.refuse(conn, why, err.Error())
		return
	}
	s.claimParked(conn, claims, res.Ticket, id, peer)
}

// claimParked hands a moved client's connection to the session parked for
// its ticket and token ID; a ticket is good once.
func (s *Server) claimParked(conn net.Conn, claims token.Claims, ticket []byte, id uint64, peer string) {
	var pk *parked
	s.mu.Lock()
	for key, q := range s.parked {
		if subtle.ConstantTimeCompare([]byte(key), ticket) == 1 && q.tenant == claims.ID {
			pk = q
			delete(s.parked, key)
			break
		}
	}
	s.mu.Unlock()
	if pk == nil {
		err := errors.New("no migrated session for this ticket and token")
		s.log.Warn("resume refused", "conn", id, "peer", peer, "err", err)
		s.refuse(conn, refusedBadToken, err.Error())
		return
	}
	if err := s.welcome(conn, claims); err != nil {
		s.log.Warn("resume failed", "conn", id, "peer", peer, "err", err)
		pk.conns <- resumed{} // the parked session frees itself (its channel has room for one)
		return
	}
	done := make(chan struct{})
	var once sync.Once
	rc := resumed{conn: &closeNotify{Conn: conn, done: done, once: &once}, peer: peer, id: id,
		br: bufio.NewReaderSize(newPollingReader(conn, s.busyPoll), 64<<10)}
	pk.conns <- rc
	<-done // serveConn closes conn when this returns
}

// closeNotify is a connection that says when it is closed.
type closeNotify struct {
	net.Conn
	done chan struct{}
	once *sync.Once
}

func (c *closeNotify) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { close(c.done) })
	return err
}
