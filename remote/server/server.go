package server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpumux/gpumux/remote/proto"
	"github.com/gpumux/gpumux/remote/token"
)

// Server serves the remote protocol on a Backend. Create it with New; one
// Server may Serve several listeners at once (a TCP port and a unix
// socket), which share its limits and quotas.
type Server struct {
	backend              Backend
	secret               []byte
	insecure             bool
	log                  *slog.Logger
	maxClients           int
	maxTenantConns       int
	maxHandshakes        int
	maxHandshakesPerPeer int
	handshakeTimeout     time.Duration
	busyPoll             time.Duration
	expiredLinger        time.Duration
	now                  func() time.Time
	migration            bool        // WithMigration
	poolTLS              *tls.Config // WithPoolTLS
	migrationHook        func(step string) error

	initOnce sync.Once
	initErr  error
	initDone atomic.Bool // initErr is set
	nDevices int32       // the backend's, counted once at start

	mu sync.Mutex
	// accepting counts the listeners in their accept loop (health.go).
	accepting int
	// conns counts the logged-in connections, tenantConns those with a
	// token ID by ID (limits.go).
	conns       int
	tenantConns map[string]int
	// handshakes are the connections waiting for their Hello, oldest
	// first, and handshakesByPeer counts them by peer (limits.go).
	handshakes       []*handshaking
	handshakesByPeer map[string]int
	quotas           map[string]*quota
	anonQuotas       map[*quota]struct{} // the quotas of connections without a token ID
	nextID           uint64
	tenants          map[string]*tenant
	// admitted and devMemory: see admission.go.
	admitted  map[string]admitted
	devMemory []uint64
	// workers are the tenant worker processes running, tenants' or not
	// (any more); retired adds up the counters of those that exited.
	workers map[*tenant]struct{}
	retired Stats
	// live are the sessions served in this process by connection number,
	// parked the migrated sessions waiting for their clients by ticket
	// (migrate.go).
	live   map[uint64]*liveSession
	parked map[string]*parked
	// windows are the window bases its sessions hold (WithMigration).
	windows *windowClaims

	counts *counters // stats.go

	tenantCmd func() *exec.Cmd // WithTenantProcesses
	tenantMu  sync.Mutex       // serialises worker starts
}

// New returns a server for backend.
func New(backend Backend, opts ...Option) *Server {
	s := &Server{
		backend:              backend,
		log:                  slog.Default(),
		maxClients:           DefaultMaxClients,
		maxTenantConns:       DefaultMaxTenantConnections,
		maxHandshakes:        DefaultMaxHandshakes,
		maxHandshakesPerPeer: DefaultMaxHandshakesPerPeer,
		handshakeTimeout:     DefaultHandshakeTimeout,
		busyPoll:             DefaultBusyPoll,
		expiredLinger:        expiredLinger,
		now:                  time.Now,
		handshakesByPeer:     map[string]int{},
		tenantConns:          map[string]int{},
		quotas:               map[string]*quota{},
		anonQuotas:           map[*quota]struct{}{},
		tenants:              map[string]*tenant{},
		admitted:             map[string]admitted{},
		workers:              map[*tenant]struct{}{},
		live:                 map[uint64]*liveSession{},
		parked:               map[string]*parked{},
		windows:              newWindowClaims(),
		counts:               newCounters(),
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// ErrConfig means the server's options are unusable.
var ErrConfig = errors.New("server configuration")

// ready checks the configuration and initialises the backend, once.
func (s *Server) ready() error {
	s.initOnce.Do(func() {
		switch {
		case s.backend == nil:
			s.initErr = fmt.Errorf("%w: no backend", ErrConfig)
		case !s.insecure && len(s.secret) == 0:
			s.initErr = fmt.Errorf("%w: no token secret (WithSecret) and not WithInsecureNoAuth", ErrConfig)
		case !s.insecure && len(s.secret) < token.MinSecret:
			s.initErr = fmt.Errorf("%w: token secret of %d bytes, want at least %d", ErrConfig, len(s.secret), token.MinSecret)
		case s.maxClients < 1:
			s.initErr = fmt.Errorf("%w: max clients %d, want at least 1", ErrConfig, s.maxClients)
		case s.maxTenantConns < 1:
			s.initErr = fmt.Errorf("%w: max tenant connections %d, want at least 1", ErrConfig, s.maxTenantConns)
		case s.maxHandshakes < 1:
			s.initErr = fmt.Errorf("%w: max handshakes %d, want at least 1", ErrConfig, s.maxHandshakes)
		case s.maxHandshakesPerPeer < 1:
			s.initErr = fmt.Errorf("%w: max handshakes per peer %d, want at least 1", ErrConfig, s.maxHandshakesPerPeer)
		case s.handshakeTimeout <= 0:
			s.initErr = fmt.Errorf("%w: handshake timeout %v, want more than 0", ErrConfig, s.handshakeTimeout)
		case s.busyPoll < 0 || s.busyPoll > MaxBusyPoll:
			s.initErr = fmt.Errorf("%w: busy poll %v, want 0 to %v", ErrConfig, s.busyPoll, MaxBusyPoll)
		default:
			if r := s.backend.Init(); r != proto.Success {
				s.initErr = fmt.Errorf("backend: cuInit: %v", r)
				return
			}
			n, r := s.backend.DeviceCount()
			if r != proto.Success {
				s.initErr = fmt.Errorf("backend: cuDeviceGetCount: %v", r)
				return
			}
			s.nDevices = n
			s.devMemory = make([]uint64, n)
			s.mu.Lock() // Stats may read the counters before Serve is ready
			s.counts.admissions = make([]atomic.Uint64, n)
			s.mu.Unlock()
			for i := range s.devMemory {
				if s.devMemory[i], r = s.backend.DeviceTotalMem(int32(i)); r != proto.Success {
					s.initErr = fmt.Errorf("backend: cuDeviceTotalMem(%d): %v", i, r)
					return
				}
			}
		}
	})
	s.initDone.Store(true)
	return s.initErr
}

// Serve accepts connections on ln and serves them until ctx is done, then
// closes ln and every connection it accepted, waits for their sessions to
// clean up and returns nil. It returns an error at once if the server's
// options are unusable or the backend does not initialise, and if
// accepting fails for good (ln closed by someone else).
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	return s.serve(ctx, ln, nil)
}

// ServeTLS is Serve with TLS: every connection accepted on ln starts with
// a TLS handshake by config (TLSFiles.Config), within the bounds of the
// handshake that follows it (tls.go).
func (s *Server) ServeTLS(ctx context.Context, ln net.Listener, config *tls.Config) error {
	if config == nil {
		ln.Close()
		return fmt.Errorf("%w: ServeTLS without a TLS config", ErrConfig)
	}
	return s.serve(ctx, ln, config)
}

func (s *Server) serve(ctx context.Context, ln net.Listener, config *tls.Config) error {
	if err := s.ready(); err != nil {
		ln.Close()
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()

	var wg sync.WaitGroup
	defer wg.Wait()
	if s.tenantCmd != nil {
		defer s.waitTenants(10 * time.Second)
	}
	defer s.accept()()
	s.log.Info("serving", "addr", ln.Addr().String(), "tls", config != nil)
	backoff := time.Duration(0)
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("accept on %s: %w", ln.Addr(), err)
			}
			// EMFILE and the like: wait and retry, as net/http does.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.log.Warn("accept failed; retrying", "addr", ln.Addr().String(), "err", err, "in", backoff)
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return nil
			}
			continue
		}
		backoff = 0
		hs := s.startHandshake(conn) // here, so that the oldest is the first accepted
		if config != nil {
			conn = tls.Server(conn, config) // its handshake is run by Server.handshake
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.serveConn(ctx, conn, hs)
		}()
	}
}

// serveConn runs one connection: handshake, then a session.
func (s *Server) serveConn(ctx context.Context, conn net.Conn, hs *handshaking) {
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()

	s.mu.Lock()
	s.nextID++
	id := s.nextID
	s.mu.Unlock()

	first, err := s.readFirst(conn, hs)
	peer := conn.RemoteAddr().String()
	if peer == "" || peer == "@" {
		peer = "unix"
	}
	switch {
	case err == nil && first.h.Op == proto.OpControl && first.h.Flags == 0:
		s.serveControl(ctx, conn, first.p, id, peer, "")
		return
	case err == nil && first.h.Op == proto.OpResume && first.h.Flags == 0:
		s.resume(ctx, conn, first.p, id, peer)
		return
	}
	var hello proto.Hello
	var claims token.Claims
	if err == nil {
		hello, claims, err = s.checkHello(conn, first)
	}
	if err != nil {
		level := slog.LevelWarn
		if ng := (noSuchGPU{}); errors.As(err, &ng) && ng.probe {
			level = slog.LevelDebug
		}
		s.log.Log(ctx, level, "handshake refused", "conn", id, "peer", peer, "identity", clean(hello.Identity), "err", err)
		return
	}
	if s.tenantCmd != nil {
		// The worker serves the connection, and handOff passes it the
		// login too (it ends when the worker says so).
		if err := s.handOff(ctx, conn, hello, claims, id, peer); err != nil {
			s.log.Error("handing the connection to its tenant's worker", "conn", id, "peer", peer, "token", claims.ID, "err", err)
		}
		return
	}
	defer s.logout(claims.ID)
	q := s.joinQuota(claims)
	defer s.leaveQuota(q)
	if err := s.welcome(conn, claims); err != nil {
		s.log.Warn("handshake failed", "conn", id, "peer", peer, "err", err)
		return
	}
	s.runSession(conn, q, claims, id, peer, hello)
}

// runSession serves one admitted connection in this process; nothing of
// it has been read past the handshake.
func (s *Server) runSession(conn net.Conn, q *share, claims token.Claims, id uint64, peer string, hello proto.Hello) {
	sess := newSession(s, q, s.devices(claims), s.log.With(
		"conn", id, "peer", peer, "identity", clean(hello.Identity), "token", claims.ID))
	sess.expires = claims.Expires
	sess.id, sess.token, sess.identity, sess.clientVersion = id, hello.Token, hello.Identity, hello.Version
	defer s.register(sess, claims.ID)()
	sess.serve(conn, bufio.NewReaderSize(newPollingReader(conn, s.busyPoll), 64<<10))
}

// errRefused means a connection's handshake was refused.
var errRefused = errors.New("handshake refused")

// errEvicted means a handshake was closed to make room for a newer one.
var errEvicted = errors.New("closed to make room for newer handshakes")

// firstFrame is a connection's first frame: a client's Hello, a moved
// client's Resume, or a Control request (migrate.go).
type firstFrame struct {
	h proto.Header
	p []byte
}

// readFirst reads a connection's first frame straight from conn, nothing
// past it, and refuses a frame larger than its kind's bound (a Hello's
// proto.MaxHello, the others' proto.MaxFirst) when its header arrives,
// before reading its payload: nothing larger is read or buffered before a
// token is checked.
func (s *Server) readFirst(conn net.Conn, hs *handshaking) (firstFrame, error) {
	conn.SetDeadline(time.Now().Add(s.handshakeTimeout))
	defer conn.SetDeadline(time.Time{})
	if tc, ok := conn.(*tls.Conn); ok {
		if err := s.tlsHandshake(tc, hs); err != nil {
			return firstFrame{}, err
		}
	}
	var hb [proto.HeaderSize]byte
	_, err := io.ReadFull(conn, hb[:])
	var h proto.Header
	var p []byte
	if err == nil {
		bound := proto.MaxHello
		if op := proto.Op(binary.LittleEndian.Uint16(hb[4:])); op == proto.OpResume || op == proto.OpControl {
			bound = proto.MaxFirst
		}
		h, p, err = proto.ReadFrameMax(io.MultiReader(bytes.NewReader(hb[:]), conn), nil, bound)
	}
	if s.endHandshake(hs) {
		s.counts.refused[refusedEvicted].Add(1)
		return firstFrame{}, fmt.Errorf("reading the handshake: %w", errEvicted)
	}
	if err != nil {
		s.counts.refused[readRefusal(err)].Add(1)
		return firstFrame{}, fmt.Errorf("reading the handshake: %w", err)
	}
	return firstFrame{h, p}, nil
}

// checkHello checks a client's Hello and logs the client in (then the
// caller must logout).
func (s *Server) checkHello(conn net.Conn, first firstFrame) (proto.Hello, token.Claims, error) {
	h, p := first.h, first.p
	conn.SetDeadline(time.Now().Add(s.handshakeTimeout))
	defer conn.SetDeadline(time.Time{})
	refuse := func(hello proto.Hello, why refusal, err error) (proto.Hello, token.Claims, error) {
		s.refuse(conn, why, err.Error())
		return hello, token.Claims{}, fmt.Errorf("%w: %w", errRefused, err)
	}
	if h.Op != proto.OpHello || h.Flags != 0 {
		return refuse(proto.Hello{}, refusedMalformed, fmt.Errorf("the first frame must be the handshake, got op %d flags %#x", h.Op, h.Flags))
	}
	hello, err := proto.DecodeHello(p)
	if err != nil {
		return refuse(proto.Hello{}, refusedMalformed, err)
	}
	claims, why, err := s.checkIn(hello)
	if err != nil {
		return refuse(hello, why, err)
	}
	return hello, claims, nil
}

// checkIn checks a client's handshake, logs it in and admits its quota,
// or says why not; the caller logs it out when its connection ends.
func (s *Server) checkIn(hello proto.Hello) (token.Claims, refusal, error) {
	claims, why, err := s.checkClient(hello)
	if err != nil {
		return token.Claims{}, why, err
	}
	if why, err := s.login(claims); err != nil {
		return token.Claims{}, why, err
	}
	if dev, err := s.admit(claims); err != nil {
		s.logout(claims.ID)
		s.counts.admissions[dev].Add(1)
		return token.Claims{}, refusedAdmission, err
	}
	return claims, 0, nil
}

// checkClient checks a client's protocol version and token, and returns
// its claims.
func (s *Server) checkClient(hello proto.Hello) (token.Claims, refusal, error) {
	if hello.Version < proto.MinVersion || hello.Version > proto.Version {
		return token.Claims{}, refusedVersion, fmt.Errorf("protocol version %d, this server speaks %d to %d", hello.Version, proto.MinVersion, proto.Version)
	}
	if s.insecure {
		return token.Claims{}, 0, nil
	}
	if hello.Token == "" {
		return token.Claims{}, refusedNoToken, errors.New("no token")
	}
	claims, err := token.Check(s.secret, hello.Token, s.now())
	if err != nil {
		why := refusedBadToken
		if errors.Is(err, token.ErrExpired) {
			why = refusedExpired
		}
		return token.Claims{}, why, fmt.Errorf("token: %w", err)
	}
	devs := claims.Devices()
	for _, dev := range devs {
		if dev < int(s.nDevices) {
			continue
		}
		probe := dev == int(s.nDevices) && len(devs) == 1 && claims.Quota == 0
		return token.Claims{}, refusedNoSuchGPU, noSuchGPU{dev: dev, have: int(s.nDevices), probe: probe}
	}
	return claims, 0, nil
}

// noSuchGPU refuses a token naming a GPU the server does not have. probe:
// a token without a quota for the GPU one past the last, which is how a
// pool's probe (package pool) finds where a server's GPUs end at every
// fingerprint period; its refusal is logged at debug level, not as a
// warning.
type noSuchGPU struct {
	dev, have int
	probe     bool
}

func (e noSuchGPU) Error() string {
	return fmt.Sprintf("the token names GPU %d, this server has %d", e.dev, e.have)
}

// readRefusal classifies a failure to read the handshake.
func readRefusal(err error) refusal {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return refusedTimeout
	case errors.Is(err, proto.ErrMalformed) || errors.Is(err, proto.ErrTooLarge):
		return refusedMalformed
	default:
		return refusedClosed
	}
}

// refuse answers a handshake with a refusal naming why, and counts it.
func (s *Server) refuse(conn net.Conn, why refusal, msg string) {
	s.counts.refused[why].Add(1)
	w := proto.Welcome{Result: proto.ErrNotPermitted, Message: msg}
	conn.SetWriteDeadline(time.Now().Add(s.handshakeTimeout))
	conn.Write(proto.AppendFrame(nil, proto.Header{Op: proto.OpHello, Flags: proto.FlagReply}, w.Encode()))
}

// welcome admits a client.
func (s *Server) welcome(conn net.Conn, claims token.Claims) error {
	w := proto.Welcome{Result: proto.Success, Quota: claims.Quota}
	conn.SetWriteDeadline(time.Now().Add(s.handshakeTimeout))
	defer conn.SetWriteDeadline(time.Time{})
	if _, err := conn.Write(proto.AppendFrame(nil, proto.Header{Op: proto.OpHello, Flags: proto.FlagReply}, w.Encode())); err != nil {
		return fmt.Errorf("answering the handshake: %w", err)
	}
	return nil
}

// devices returns the backend devices a client sees, by client ordinal:
// the GPUs its token grants, in the token's order, or every device
// without authentication.
func (s *Server) devices(c token.Claims) []int32 {
	if !s.insecure {
		var devs []int32
		for _, d := range c.Devices() {
			devs = append(devs, int32(d))
		}
		return devs
	}
	devs := make([]int32, s.nDevices)
	for i := range devs {
		devs[i] = int32(i)
	}
	return devs
}

// clean makes a client-chosen string safe for one log line.
func clean(s string) string {
	if len(s) > 200 {
		s = s[:200]
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, s)
}

// ListenUnix listens on a unix socket at path with file mode perm. A
// stale socket (nothing accepting) is replaced; a live one or another file
// is an error. Closing the listener removes the socket.
func ListenUnix(path string, perm os.FileMode) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != os.ModeSocket {
			return nil, fmt.Errorf("unix socket %s: exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("unix socket %s: in use by a running server", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("unix socket %s: removing the stale socket: %w", path, err)
		}
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, perm); err != nil {
		ln.Close()
		return nil, fmt.Errorf("unix socket %s: %w", path, err)
	}
	return ln, nil
}
