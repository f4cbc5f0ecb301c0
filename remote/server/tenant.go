package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/gpumux/gpumux/remote/proto"
	"github.com/gpumux/gpumux/remote/token"
)

// Tenant processes. Contexts of one process share one GPU address space
// (measured on an H200, docs/validation.md), so a kernel of one client
// could reach another client's memory through a pointer the server never
// sees. With WithTenantProcesses the server is only a front: it checks each
// handshake, then hands the connection's file descriptor to the worker
// process of the client's tenant (its token ID), started on first use and
// told to exit when its last connection has ended. The worker serves the
// connection as usual (ServeTenant). Workers never share a process, so the
// driver keeps tenants apart, a worker's crash ends only its tenant's
// connections, and a worker's exit frees whatever its clients held.
//
// The front and a worker talk over a SOCK_SEQPACKET socket pair, the
// worker's file descriptor 3: the worker sends {"ready":true} once its
// backend is up, {"closed":C} when connection C has ended (with "idle":N
// when that was its last, after N handoffs), and its statistics
// ({"stats":…}, see stats.go) with any message and every statsInterval
// while they change; the front sends one handoff message per connection
// with the descriptor attached (SCM_RIGHTS), and closes the pair to make
// it exit.

// TenantFD is the worker's control socket descriptor.
const TenantFD = 3

// tenantStartTimeout bounds a worker's start (backend initialisation).
const tenantStartTimeout = time.Minute

// maxWorkerMsg bounds a worker's message (its statistics take a few KiB).
const maxWorkerMsg = 64 << 10

// WithTenantProcesses runs every tenant in a process of its own, started
// with newCmd (typically this program with a flag that makes it call
// ServeTenant). The server adds the control socket as descriptor 3.
func WithTenantProcesses(newCmd func() *exec.Cmd) Option {
	return func(s *Server) { s.tenantCmd = newCmd }
}

// handoff is the front's message with one connection: a client's after
// its handshake, a moved client's Resume (Ticket), or a control
// connection (Control: its first frame's payload, the token checked) that
// migrates the tenant's sessions or restores one of them here.
type handoff struct {
	Conn     uint64       `json:"conn"`
	Peer     string       `json:"peer"`
	Identity string       `json:"identity"`
	Claims   token.Claims `json:"claims"`
	// Version and Token are the client's Hello's: a migration's snapshot
	// carries them (the target checks the token as a handshake would).
	Version uint16 `json:"version,omitempty"`
	Token   string `json:"token,omitempty"`
	Ticket  []byte `json:"ticket,omitempty"`
	Control []byte `json:"control,omitempty"`
}

// workerMsg is a worker's message to the front.
type workerMsg struct {
	Ready  bool   `json:"ready,omitempty"`
	Closed uint64 `json:"closed,omitempty"` // a handoff's Conn
	Idle   uint64 `json:"idle,omitempty"`
	Stats  *Stats `json:"stats,omitempty"`
}

// tenant is the front's view of one worker process.
type tenant struct {
	id   string
	cmd  *exec.Cmd
	ctrl *net.UnixConn
	// handed counts the handoffs reserved for the worker (Server.tenant),
	// idle the handoffs it had got when it last said it was idle: it is
	// retired only when the two agree, so that a connection on its way to
	// it is never cut off by its going. Guarded by Server.mu.
	handed, idle uint64
	// live are the connections handed over that the worker has not said
	// are closed, with their token IDs: they stay logged in (limits.go).
	// Guarded by Server.mu.
	live map[uint64]string
	last Stats // what the worker reported last; guarded by Server.mu
	done chan struct{}
}

// Tenants reports the live workers' process IDs by tenant, for tests and
// metrics.
func (s *Server) Tenants() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.tenants))
	for id, t := range s.tenants {
		out[id] = t.cmd.Process.Pid
	}
	return out
}

// handOff gives a logged-in connection to its tenant's worker, starting
// the worker first if needed, and answers the handshake. The login goes
// with the connection: it ends when the worker says the connection has,
// or exits; or here, if the handoff fails.
func (s *Server) handOff(ctx context.Context, conn net.Conn, hello proto.Hello, claims token.Claims, id uint64, peer string) error {
	key := claims.ID
	if key == "" { // insecure mode: every connection is a tenant
		key = fmt.Sprintf("conn-%d", id)
	}
	// The login keeps the ID admitted, also if the worker found goes idle
	// and a new one starts. The front read the handshake and nothing past
	// it (Server.handshake): the worker reads the rest from the
	// connection.
	err := s.handOffTo(ctx, conn, key, handoff{Conn: id, Peer: peer, Identity: hello.Identity, Claims: claims, Version: hello.Version, Token: hello.Token}, true, false,
		func() error { return s.welcome(conn, claims) })
	if errors.Is(err, errWorkerStart) {
		s.refuse(conn, refusedWorker, err.Error())
	}
	return err
}

// errWorkerStart: the tenant's worker did not start.
var errWorkerStart = errors.New("starting the tenant's worker")

// deliver sends connection conn (its descriptor f, or the relay's end)
// to worker t with h; a logged-in connection (login) counts as t's until
// the worker says it is closed. With a relay it pipes conn to the worker
// until either ends.
func (s *Server) deliver(t *tenant, conn net.Conn, f *os.File, relay net.Conn, h handoff, login bool) error {
	msg, err := json.Marshal(h)
	if err != nil {
		if relay != nil {
			relay.Close()
		}
		s.unreserve(t)
		if login {
			s.logout(h.Claims.ID)
		}
		return err
	}
	if login {
		s.mu.Lock()
		t.live[h.Conn] = h.Claims.ID
		s.mu.Unlock()
	}
	if _, _, err := t.ctrl.WriteMsgUnix(msg, syscall.UnixRights(int(f.Fd())), nil); err != nil {
		if relay != nil {
			relay.Close()
		}
		s.closed(t, h.Conn)
		return fmt.Errorf("handing the connection to worker %d: %w", t.cmd.Process.Pid, err)
	}
	if relay != nil {
		f.Close() // the worker has its copy: its close ends the relay
		pipe(conn, relay)
	}
	return nil
}

// handOffTo gives a connection to the worker of tenant key, starting it
// if needed (existing: only if it runs, else errNoSession), after before
// (nil: nothing; the handshake's welcome). A logged-in connection (login)
// is logged out if it does not get there.
func (s *Server) handOffTo(ctx context.Context, conn net.Conn, key string, h handoff, login, existing bool, before func() error) error {
	fail := func(err error) error {
		if login {
			s.logout(h.Claims.ID)
		}
		return err
	}
	t, err := s.tenant(ctx, key, existing)
	if errors.Is(err, errNoSession) {
		return fail(err)
	}
	if err != nil {
		return fail(fmt.Errorf("%w: %w", errWorkerStart, err))
	}
	// t holds a handoff reserved for this connection: until it is sent or
	// given back, the worker is not retired.
	f, relay, err := handOffFile(conn)
	if err == nil && before != nil {
		err = before()
	}
	if err != nil {
		if f != nil {
			f.Close()
		}
		if relay != nil {
			relay.Close()
		}
		s.unreserve(t)
		return fail(fmt.Errorf("passing the connection: %w", err))
	}
	defer f.Close()
	return s.deliver(t, conn, f, relay, h, login)
}

// workerOf is the tenant whose worker serves session id, or "".
func (s *Server) workerOf(id uint64) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, t := range s.tenants {
		if _, ok := t.live[id]; ok {
			return key
		}
	}
	return ""
}

// unreserve gives back a handoff that Server.tenant reserved and that was
// not sent, retiring the worker if it is idle with everything else it was
// handed.
func (s *Server) unreserve(t *tenant) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t.handed--
	s.retireIdleLocked(t)
}

// retireIdleLocked retires t if it said it was idle after every handoff
// reserved for it: the next connection of its tenant starts a new worker.
// s.mu is held.
func (s *Server) retireIdleLocked(t *tenant) {
	if t.idle == 0 || t.idle != t.handed || s.tenants[t.id] != t {
		return
	}
	delete(s.tenants, t.id)
	s.releaseLocked(t.id)
	t.ctrl.Close()
}

// closed logs out connection id of t's, unless that was done already.
func (s *Server) closed(t *tenant, id uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closedLocked(t, id)
}

func (s *Server) closedLocked(t *tenant, id uint64) {
	if claimsID, ok := t.live[id]; ok {
		delete(t.live, id)
		s.logoutLocked(claimsID)
	}
}

// tenant returns the worker of tenant key, starting it if there is none
// (existing: errNoSession instead), with a handoff reserved: the caller
// sends it, or gives it back (unreserve).
func (s *Server) tenant(ctx context.Context, key string, existing bool) (*tenant, error) {
	s.tenantMu.Lock() // one start at a time; handoffs to running workers do not wait
	defer s.tenantMu.Unlock()
	s.mu.Lock()
	t := s.tenants[key]
	if t != nil {
		t.handed++
	}
	s.mu.Unlock()
	if t != nil {
		return t, nil
	}
	if existing {
		return nil, errNoSession
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socketpair: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "tenant-ctrl"), os.NewFile(uintptr(fds[1]), "tenant-ctrl-child")
	defer theirs.Close()
	c, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		theirs.Close()
		return nil, err
	}
	ctrl := c.(*net.UnixConn)
	cmd := s.tenantCmd()
	cmd.ExtraFiles = []*os.File{theirs}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		ctrl.Close()
		return nil, fmt.Errorf("%s: %w", cmd.Path, err)
	}
	t = &tenant{id: key, cmd: cmd, ctrl: ctrl, live: map[uint64]string{}, done: make(chan struct{})}
	go func() { cmd.Wait(); close(t.done) }()

	ctrl.SetReadDeadline(time.Now().Add(tenantStartTimeout))
	var m workerMsg
	buf := make([]byte, maxWorkerMsg)
	n, err := ctrl.Read(buf)
	if err == nil {
		err = json.Unmarshal(buf[:n], &m)
	}
	if err != nil || !m.Ready {
		cmd.Process.Kill()
		<-t.done
		ctrl.Close()
		if err == nil {
			err = errors.New("no ready message")
		}
		return nil, fmt.Errorf("worker %d did not start (%v): %w", cmd.Process.Pid, cmd.ProcessState, err)
	}
	ctrl.SetReadDeadline(time.Time{})
	s.mu.Lock()
	t.handed = 1
	s.tenants[key] = t
	s.workers[t] = struct{}{}
	s.mu.Unlock()
	s.counts.workerStarts.Add(1)
	s.log.Info("tenant worker started", "tenant", key, "pid", cmd.Process.Pid)
	go s.watchTenant(ctx, t)
	return t, nil
}

// watchTenant follows a worker until it exits: it keeps the statistics
// the worker reports and logs out the connections it says are closed; an
// idle worker that got every handoff is told to go; a worker that dies is
// reported. Once the worker has exited, its connections are logged out
// and its counters join those of the workers gone before.
func (s *Server) watchTenant(ctx context.Context, t *tenant) {
	stop := context.AfterFunc(ctx, func() { t.ctrl.Close() })
	defer stop()
	read := make(chan struct{})
	go func() {
		defer close(read)
		s.readWorker(t)
	}()
	<-t.done
	// The worker's end is closed: the reader gets what it sent last, then
	// EOF. The wait is bounded in case a descriptor leaked elsewhere.
	select {
	case <-read:
	case <-time.After(time.Second):
	}
	t.ctrl.Close()
	s.mu.Lock()
	for id := range t.live {
		s.closedLocked(t, id)
	}
	crashed := s.tenants[t.id] == t
	if crashed {
		delete(s.tenants, t.id)
		s.releaseLocked(t.id)
	}
	delete(s.workers, t)
	gone := t.last
	gone.Tenants = nil // gauges of a process that is no more
	s.retired.add(gone)
	s.mu.Unlock()
	if crashed && ctx.Err() == nil {
		s.counts.workerDeaths.Add(1)
		s.log.Error("tenant worker died; its connections are closed, the next one starts a new worker",
			"tenant", t.id, "pid", t.cmd.Process.Pid, "status", t.cmd.ProcessState.String())
		return
	}
	s.log.Info("tenant worker exited", "tenant", t.id, "pid", t.cmd.Process.Pid, "status", t.cmd.ProcessState.String())
}

// readWorker reads a worker's messages until its control socket ends.
func (s *Server) readWorker(t *tenant) {
	buf := make([]byte, maxWorkerMsg)
	for {
		n, err := t.ctrl.Read(buf)
		if err != nil {
			return
		}
		var m workerMsg
		if err := json.Unmarshal(buf[:n], &m); err != nil {
			s.log.Warn("bad message from a tenant worker", "tenant", t.id, "pid", t.cmd.Process.Pid, "err", err)
			continue
		}
		s.mu.Lock()
		if m.Stats != nil {
			t.last = *m.Stats
		}
		if m.Closed != 0 {
			s.closedLocked(t, m.Closed)
		}
		if m.Idle != 0 {
			t.idle = m.Idle
			s.retireIdleLocked(t)
		}
		s.mu.Unlock()
	}
}

// waitTenants waits for every worker to exit after the front stops,
// killing those that take longer than grace.
func (s *Server) waitTenants(grace time.Duration) {
	s.mu.Lock()
	ts := make([]*tenant, 0, len(s.tenants))
	for _, t := range s.tenants {
		ts = append(ts, t)
		t.ctrl.Close()
	}
	s.mu.Unlock()
	for _, t := range ts {
		select {
		case <-t.done:
		case <-time.After(grace):
			t.cmd.Process.Kill()
			<-t.done
		}
	}
}

// ServeTenant is a worker's main loop: it serves the connections the
// front hands over ctrl until the front closes it or ctx ends, then closes
// its connections, waits for their cleanup and returns.
func (s *Server) ServeTenant(ctx context.Context, ctrl *net.UnixConn) error {
	if err := s.ready(); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	context.AfterFunc(ctx, func() { ctrl.Close() })
	front := &reporter{ctrl: ctrl, stats: s.Stats}
	if err := front.tell(workerMsg{Ready: true}); err != nil {
		return err
	}
	go front.every(ctx, statsInterval)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		active   int
		received uint64
	)
	defer wg.Wait()
	buf, oob := make([]byte, 128<<10), make([]byte, syscall.CmsgSpace(4))
	for {
		n, oobn, _, _, err := ctrl.ReadMsgUnix(buf, oob)
		if err != nil || n == 0 {
			cancel() // the front is gone or wants us gone: close our connections
			return nil
		}
		conn, h, err := receive(buf[:n], oob[:oobn])
		if err != nil {
			s.log.Error("bad handoff from the front", "err", err)
			continue
		}
		mu.Lock()
		active++
		received++
		mu.Unlock()
		wg.Go(func() {
			stop := context.AfterFunc(ctx, func() { conn.Close() })
			defer stop()
			switch {
			case h.Control != nil:
				// The front checked the token; the request is checked
				// again here, and a session restored here must be this
				// worker's tenant's.
				s.serveControl(ctx, conn, h.Control, h.Conn, h.Peer, h.Claims.ID)
				conn.Close()
			case h.Ticket != nil:
				s.claimParked(conn, h.Claims, h.Ticket, h.Conn, h.Peer)
				conn.Close()
			default:
				q := s.joinQuota(h.Claims)
				s.runSession(conn, q, h.Claims, h.Conn, h.Peer, proto.Hello{Identity: h.Identity, Version: h.Version, Token: h.Token})
				s.leaveQuota(q)
			}
			mu.Lock()
			active--
			m := workerMsg{Closed: h.Conn}
			if active == 0 {
				m.Idle = received
			}
			mu.Unlock()
			front.tell(m)
		})
	}
}

// reporter sends a worker's messages to the front, with the worker's
// statistics when they changed since it sent them last. One message at a
// time, so the front never gets older statistics after newer ones.
type reporter struct {
	ctrl  *net.UnixConn
	stats func() Stats

	mu   sync.Mutex
	sent []byte // the statistics sent last, encoded
}

// tell sends m, with the statistics if they changed; an empty m only if
// they did.
func (r *reporter) tell(m workerMsg) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.stats()
	enc, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("encoding the statistics: %w", err)
	}
	if !bytes.Equal(enc, r.sent) {
		m.Stats, r.sent = &st, enc
	}
	if m == (workerMsg{}) {
		return nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("encoding a message to the front: %w", err)
	}
	if _, err := r.ctrl.Write(b); err != nil {
		return fmt.Errorf("telling the front: %w", err)
	}
	return nil
}

// every reports changed statistics every interval until ctx ends.
func (r *reporter) every(ctx context.Context, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if r.tell(workerMsg{}) != nil {
				return // the front is gone
			}
		}
	}
}

// receive turns a handoff message into the connection it carries.
func receive(msg, oob []byte) (net.Conn, handoff, error) {
	var h handoff
	cmsgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil || len(cmsgs) != 1 {
		return nil, h, fmt.Errorf("no descriptor in the handoff (%v)", err)
	}
	fds, err := syscall.ParseUnixRights(&cmsgs[0])
	if err != nil || len(fds) != 1 {
		return nil, h, fmt.Errorf("want one descriptor in the handoff (%v)", err)
	}
	f := os.NewFile(uintptr(fds[0]), "client")
	defer f.Close()
	if err := json.Unmarshal(msg, &h); err != nil {
		return nil, h, fmt.Errorf("handoff: %w", err)
	}
	conn, err := net.FileConn(f)
	return conn, h, err
}
