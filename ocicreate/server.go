package ocicreate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpumux/gpumux/internal/ldcache"
	"github.com/gpumux/gpumux/internal/ociruntime"
	"github.com/gpumux/gpumux/internal/procstat"
	"github.com/gpumux/gpumux/node"
	"github.com/gpumux/gpumux/node/lease"
	"github.com/gpumux/gpumux/nodeconfig"
)

// Where gpumux agent serves gpumux-runtime, and the variable that tells
// gpumux-runtime another place.
const (
	DefaultSocket = nodeconfig.DefaultRuntimeSocket
	EnvSocket     = "GPUMUX_RUNTIME_SOCKET"
)

// The protocol (doc.go).
const (
	protocol       = "gpumux-create/1"
	protocolHook   = "gpumux-hook/1"
	answerRunc     = "runc"
	answerCore     = "core"
	answerOK       = "ok"
	answerFallback = "fallback"
	answerError    = "error "
	// maxRequest bounds a request: runc's arguments and three paths.
	maxRequest = 1 << 20
	// readTimeout bounds how long a connection may take to send it.
	readTimeout = 10 * time.Second
)

// Server answers gpumux-runtime's creates with the node an agent runs.
type Server struct {
	node       Node
	configFile string
	stateDir   string
	alive      func(lease.Record) (bool, error)
	limits     node.Limits
	logger     hclog.Logger
	hookEnv    []string
	// match, when set, answers for any node config file that decodes to
	// its config (MatchConfig) instead of configFile alone.
	match *configMatch
	// after holds the work done after an answer (the release after a
	// delete); Serve waits for it.
	after sync.WaitGroup
	// releasing are the releases after a delete (runc's, seen by
	// deletes, or a poststop hook's) not yet done, by container ID: a
	// create of the same ID (docker restart reuses it) waits for them,
	// which would otherwise give back the new lease.
	relMu     sync.Mutex
	releasing map[string]*pending
	// deletes tells of the deletes of the containers prepared here (nil
	// where the kernel cannot: their poststop hooks give them back).
	deletes *deletes
	// beforeRelease, when set, runs before each release after a delete;
	// holdDeletes, when set, holds the watching of deletes back until it
	// is closed, leaving them to the creates' sync (tests).
	beforeRelease func()
	holdDeletes   chan struct{}
}

// ServerOption configures a Server.
type ServerOption func(*Server)

// WithLimits bounds what one container may ask for (default
// node.DefaultLimits).
func WithLimits(l node.Limits) ServerOption { return func(s *Server) { s.limits = l } }

// WithLogger sets the logger (default: none).
func WithLogger(l hclog.Logger) ServerOption { return func(s *Server) { s.logger = l } }

// WithHookEnv adds env to the poststop hook of the creates the server
// prepares: where gpumux-runtime, which runs it, finds this server's
// socket when it is not at DefaultSocket (a hook inherits no environment).
func WithHookEnv(env ...string) ServerOption { return func(s *Server) { s.hookEnv = env } }

// HookEnv is what the containers' hooks need to find a server on socket
// (a hook inherits no environment): nothing at DefaultSocket.
func HookEnv(socket string) []string {
	if socket == "" || socket == DefaultSocket {
		return nil
	}
	return []string{EnvSocket + "=" + socket}
}

// NewServer returns the server of node n, opened from configFile with
// stateDir as its state directory. It answers only creates for that config
// and state directory; alive tells whether a lease's container still
// exists (node.RuncAlive). A server whose node's config is not a file (the
// Nomad plugin's) has configFile "" and MatchConfig.
func NewServer(n Node, configFile, stateDir string, alive func(lease.Record) (bool, error), opts ...ServerOption) *Server {
	s := &Server{node: n, configFile: configFile, stateDir: stateDir, alive: alive, limits: node.DefaultLimits, logger: hclog.NewNullLogger()}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Listen opens a unix socket at path that only root can reach: its
// directory is made (0700) where missing, and the socket is 0600. A socket
// there that no one answers on is replaced; one that answers is another
// agent's, refused, and so is anything there that is not a socket.
func Listen(path string) (*net.UnixListener, error) {
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("runtime socket %q: want an absolute path", path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("runtime socket: %w", err)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("runtime socket %s: another agent answers on it", path)
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode().Type() != os.ModeSocket {
		return nil, fmt.Errorf("runtime socket %s: a %v is there, not a socket: not replaced", path, fi.Mode().Type())
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("runtime socket: %w", err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("runtime socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("runtime socket: %w", err)
	}
	return ln, nil
}

// Serve answers each connection on ln until ctx ends, then closes ln and
// waits for the connections it is answering and the releases it started.
func (s *Server) Serve(ctx context.Context, ln *net.UnixListener) error {
	defer s.after.Wait()
	s.watchDeletes(ctx)
	defer s.deletes.close()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer ln.Close()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	pause := time.Duration(0)
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if !errors.Is(err, syscall.EMFILE) && !errors.Is(err, syscall.ENFILE) && !errors.Is(err, syscall.ENOBUFS) && !errors.Is(err, syscall.ENOMEM) {
				return fmt.Errorf("runtime socket: %w", err)
			}
			// Out of descriptors or memory for now: wait, as net/http does.
			pause = min(max(2*pause, 5*time.Millisecond), time.Second)
			s.logger.Warn("accepting on the runtime socket", "error", err, "retry in", pause)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(pause):
			}
			continue
		}
		pause = 0
		wg.Go(func() {
			defer c.Close()
			answer := s.answerSafely(ctx, c)
			c.SetWriteDeadline(time.Now().Add(readTimeout))
			io.WriteString(c, answer+"\n")
		})
	}
}

// answerSafely is answer, a panic in it (the agent reads files of the
// image: the cache, libraries) reported as an error, which gpumux-runtime
// takes as a refused create or a hook to do itself.
func (s *Server) answerSafely(ctx context.Context, c *net.UnixConn) (answer string) {
	defer func() {
		if r := recover(); r != nil {
			s.logger.Error("gpumux-runtime's request failed", "panic", r)
			answer = answerError + fmt.Sprintf("gpumux agent: internal error: %v", r)
		}
	}()
	return s.answer(ctx, c)
}

// answer reads one request from c and does it. A peer that is neither
// root nor this process's user is told to do it itself: the agent does
// nothing for it.
func (s *Server) answer(ctx context.Context, c *net.UnixConn) string {
	cred, err := peer(c)
	if err != nil {
		return answerError + "gpumux agent: " + err.Error()
	}
	c.SetReadDeadline(time.Now().Add(readTimeout))
	raw, err := io.ReadAll(io.LimitReader(c, maxRequest+1))
	if err != nil || len(raw) > maxRequest {
		return answerError + fmt.Sprintf("gpumux agent: reading the request: %v (at most %d bytes)", err, maxRequest)
	}
	req, ok := parseRequest(raw)
	trusted := cred.Uid == 0 || int(cred.Uid) == os.Geteuid()
	switch {
	case ok && req.hook:
		if !trusted {
			return answerFallback
		}
		return s.hook(ctx, req, int(cred.Pid))
	case !ok || !trusted || !s.ours(req):
		return answerCore // another version of gpumux-runtime, user or node: its core decides
	}
	inv := ociruntime.ParseInvocation(req.args)
	if inv.Subcommand != "create" || inv.ID == "" {
		return answerError + fmt.Sprintf("gpumux agent: not the create of a container: %q", req.args)
	}
	if !filepath.IsAbs(inv.Bundle) || (inv.Root != "" && !filepath.IsAbs(inv.Root)) {
		return answerCore // relative to gpumux-runtime's working directory
	}
	err = s.prepare(ctx, inv, req, int(cred.Pid))
	if err != nil {
		msg := "gpumux-runtime: " + err.Error()
		LogError(inv.Flag("--log"), msg)
		s.logger.Info("refused a container's create", "container", inv.ID, "error", err)
		return answerError + strings.ReplaceAll(msg, "\n", " ")
	}
	return answerRunc
}

// hook does one of the hooks gpumux-runtime runs for a container, asked by
// gpumux-runtime as the hook (process pid): update-ldcache in the root of
// the container, seen through the hook's own mount namespace, and
// poststop, the container's leases given back, when they are in this
// agent's store. Anything else, and an update-ldcache that fails, is
// gpumux-runtime-hook's to do (answerFallback), which reports its own
// errors.
//
// Poststop is answered at once and the leases given back after (runc
// waits for its hooks; the release's commit to disk is not the deleted
// container's business). The creates the server prepares have no poststop
// hook where it watches runc's deletes (deletes); those of
// gpumux-runtime-core and of an agent that could not watch do.
func (s *Server) hook(ctx context.Context, req request, pid int) string {
	if len(req.args) < 2 || req.args[0] != "hook" {
		return answerFallback
	}
	var st specs.State
	stated := json.Unmarshal(req.state, &st) == nil && st.ID != ""
	switch name := req.args[1]; {
	case name == ociruntime.HookUpdateLdcache && (stated && st.Bundle != "" || len(req.state) == 0):
		root := "the state's bundle"
		if st.Bundle == "" {
			root = "the hook's working directory"
		}
		if err := updateLdcache(st.Bundle, req.args[2:], pid); err != nil {
			s.logger.Debug("left a hook to gpumux-runtime-hook", "hook", name, "container", st.ID, "pid", pid, "root", root, "reason", err)
			return answerFallback
		}
		s.logger.Debug("did a container's hook", "hook", name, "container", st.ID, "pid", pid, "root", root)
	case name == ociruntime.HookPoststop && stated && len(req.args) == 2 && filepath.Clean(req.stateDir) == filepath.Clean(s.stateDir):
		s.releaseAfter(ctx, st.ID, "poststop-hook", func(ctx context.Context, l node.Leases) ([]string, error) { return l.Release(ctx, st.ID) })
	default:
		return answerFallback
	}
	return answerOK
}

// releaseAfter gives container id's leases back after the answer, told
// of its delete by why (logged), by release. A release that fails is
// logged; the leases of a container runc no longer knows are reclaimed
// anyway, at the next create (and at gpumux agent's every period).
func (s *Server) releaseAfter(ctx context.Context, id, why string, release func(context.Context, node.Leases) ([]string, error)) {
	done := s.releaseStarts(id)
	s.after.Go(func() {
		defer done()
		if s.beforeRelease != nil {
			s.beforeRelease()
		}
		ids, err := release(context.WithoutCancel(ctx), node.LeasesIn(s.stateDir))
		switch {
		case err != nil:
			s.logger.Warn("giving a deleted container's shares back; they are reclaimed later", "container", id, "error", err)
		case len(ids) == 0:
			s.logger.Debug("a deleted container held no shares", "container", id, "by", why)
		default:
			s.logger.Debug("gave a deleted container's shares back", "container", id, "by", why, "shares", strings.Join(ids, ","))
		}
	})
}

// pending are the releases of one container ID under way; done is
// closed when the last ends.
type pending struct {
	n    int
	done chan struct{}
}

// releaseStarts records a release of container id's leases as pending,
// and returns what marks it done.
func (s *Server) releaseStarts(id string) (done func()) {
	s.relMu.Lock()
	defer s.relMu.Unlock()
	if s.releasing == nil {
		s.releasing = map[string]*pending{}
	}
	p := s.releasing[id]
	if p == nil {
		p = &pending{done: make(chan struct{})}
		s.releasing[id] = p
	}
	p.n++
	return func() {
		s.relMu.Lock()
		defer s.relMu.Unlock()
		if p.n--; p.n == 0 {
			delete(s.releasing, id)
			close(p.done)
		}
	}
}

// awaitRelease waits for the pending releases of container id's leases,
// or for ctx to end.
func (s *Server) awaitRelease(ctx context.Context, id string) {
	s.relMu.Lock()
	p := s.releasing[id]
	s.relMu.Unlock()
	if p != nil {
		select {
		case <-p.done:
		case <-ctx.Done():
		}
	}
}

// updateLdcache is the update-ldcache hook (ldcache.UpdateRoot) in the
// container's root as the hook process pid sees it: the root of bundle
// within the process's root, or, where gpumux-runtime sent no state
// (bundle empty), the process's working directory. The entry sends none
// when runc's init runs it, which runs createContainer hooks in the
// container's mount namespace with the container's root as their working
// directory (doc.go); the agent checks that parent itself.
func updateLdcache(bundle string, args []string, pid int) error {
	links, dirs, err := ldcache.ParseArgs(args)
	if err != nil {
		return err
	}
	// Everything through the hook's root or its working directory, both
	// resolved by the kernel in the hook's mount namespace: an absolute
	// link on the way from there would lead into this process's mount
	// namespace (os.Root refuses it).
	ns, err := os.OpenRoot(fmt.Sprintf("/proc/%d/root", pid))
	if err != nil {
		return err
	}
	defer ns.Close()
	top, err := ns.Stat(".")
	if err != nil {
		return err
	}
	r, err := containerRoot(ns, top, bundle, pid)
	if err != nil {
		return err
	}
	defer r.Close()
	in, err := r.Stat(".")
	if err != nil {
		return err
	}
	switch {
	case os.SameFile(in, top) && bundle == "":
		// Not a container's root: the host's, or a hook's that is not
		// runc's createContainer hook.
		return errors.New("the hook's working directory is its root")
	case os.SameFile(in, top):
		return nil // the host's own root: its cache is the host's
	}
	for _, d := range dirs {
		// The driver's directories are mounts of the hook's namespace: one
		// not there is a namespace this is not (gpumux-runtime-hook will do
		// it where it runs).
		if _, err := r.Stat(strings.TrimPrefix(d, "/")); err != nil {
			return err
		}
	}
	return ldcache.UpdateIn(r, links, dirs)
}

// containerRoot opens the container's root for updateLdcache: the root of
// bundle within ns, the hook process's root (top: its "."), or without a
// bundle the working directory of the process, which runc's init must
// have started before its switch to the container's root (beforeSwitch).
func containerRoot(ns *os.Root, top fs.FileInfo, bundle string, pid int) (*os.Root, error) {
	if bundle == "" {
		if err := runByRuncInit(pid); err != nil {
			return nil, err
		}
		if err := beforeSwitch(top); err != nil {
			return nil, err
		}
		return os.OpenRoot(fmt.Sprintf("/proc/%d/cwd", pid))
	}
	root, err := ociruntime.ContainerRoot(bundle)
	if err != nil {
		return nil, err
	}
	return ns.OpenRoot(strings.TrimPrefix(root, "/"))
}

// runcInit is the name runc's init process gives itself (runc's nsexec).
const runcInit = "runc:[2:INIT]"

// runByRuncInit checks that process pid's parent is runc's init: a hook
// that sends no state is taken at its word only then.
func runByRuncInit(pid int) error {
	st, err := procstat.Read(pid)
	if err != nil {
		return err
	}
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", st.PPID))
	if err != nil {
		return err
	}
	if name := strings.TrimSuffix(string(comm), "\n"); name != runcInit {
		return fmt.Errorf("the hook sent no state and its parent, %q (PID %d), is not runc's init", name, st.PPID)
	}
	return nil
}

// beforeSwitch checks that a hook's root (hook: its "/") is this
// process's: runc's init runs createContainer hooks in the container's
// root before it switches to that root, and its startContainer hooks
// after, in the container process's working directory.
func beforeSwitch(hook fs.FileInfo) error {
	own, err := os.Stat("/")
	if err != nil {
		return err
	}
	if !os.SameFile(hook, own) {
		return errors.New("the hook's root is not this agent's: runc's init has switched to the container's root (a startContainer hook), or the agent runs in a root of its own")
	}
	return nil
}

// hookConfig is the node config file the poststop hook names: the one
// gpumux-runtime read, where the server has no file of its own.
func (s *Server) hookConfig(req request) string {
	if s.configFile == "" {
		return req.config
	}
	return s.configFile
}

// prepare reads the bundle and, when it asks for shares, prepares it.
func (s *Server) prepare(ctx context.Context, inv ociruntime.Invocation, req request, pid int) error {
	b, err := ReadBundle(inv.Bundle, s.limits)
	if err != nil || !b.Asks() {
		return err
	}
	// A delete of the same ID just before (Docker's restart) has its
	// release started by now, and waited for.
	s.deletes.sync()
	s.awaitRelease(ctx, inv.ID)
	wd, watchErr := s.watchRoot(inv.Root, pid)
	if watchErr != nil {
		s.logger.Debug("a poststop hook gives the container's shares back", "container", inv.ID, "reason", watchErr)
	}
	err = b.Prepare(ctx, s.node, Create{
		ID: inv.ID, RuncRoot: inv.Root, StateDir: s.stateDir, NoPoststop: watchErr == nil,
		// gpumux-runtime itself, which asks this agent to give the
		// shares back (gpumux-runtime-hook where none answers).
		HookBinary: strings.TrimSuffix(req.entry, " (deleted)"), // replaced since it started
		HookEnv:    append([]string{"GPUMUX_CONFIG=" + s.hookConfig(req)}, s.hookEnv...),
		Alive:      s.aliveOrWatched,
		Warn:       s.logger.StandardWriter(&hclog.StandardLoggerOptions{ForceLevel: hclog.Warn}),
		Record:     []lease.AcquireOption{lease.WithOwner(pid)},
		Logger:     s.logger,
		Peer:       pid,
	})
	if err == nil {
		if watchErr == nil {
			s.deletes.expect(wd, inv.ID, false)
		}
		s.logger.Debug("prepared a container's create", "container", inv.ID)
	}
	return err
}

// watchDeletes starts telling the server of runc's deletes (deletes):
// the runc roots of the node's leases whose containers still exist are
// watched at once, so that the containers an agent before this one
// prepared go back as they are deleted too. Where the kernel cannot
// watch, the creates keep their poststop hooks.
func (s *Server) watchDeletes(ctx context.Context) {
	d, err := newDeletes(func(id string) {
		s.releaseAfter(ctx, id, "runc-delete", func(ctx context.Context, l node.Leases) ([]string, error) { return l.Reclaim(ctx, deletedByRunc(id)) })
	})
	if err != nil {
		s.logger.Warn("runc's deletes cannot be watched: containers' poststop hooks give their shares back", "error", err)
		return
	}
	s.deletes = d
	recs, err := node.LeasesIn(s.stateDir).Records(ctx)
	if err != nil {
		s.logger.Warn("reading the leases to watch their containers' deletes; the reclaim gives them back", "error", err)
	}
	for _, r := range recs {
		// Only those the agent prepared without a poststop hook (which
		// would release them too, later maybe than a create of the same
		// ID), whose containers runc still has.
		if r.Root == "" || r.Bundle == "" || !node.LeasedBy(r.Bundle, s.stateDir) {
			continue
		}
		// Watched first: a delete from here on is queued, and no event is
		// read before the containers are expected (run starts below).
		wd, err := d.watch(r.Root)
		if err != nil {
			continue
		}
		if node.RuncStateFile(r.Root, r.Container) {
			d.expect(wd, r.Container, true)
		}
	}
	go func() {
		if s.holdDeletes != nil {
			<-s.holdDeletes
		}
		d.run()
	}()
}

// aliveOrWatched is the reclaim's check of a lease's container before a
// create: a container the server watches runc's deletes of, and whose
// state directory runc made, is alive without a look at runc's state (on
// a node of many containers, each create checks every other one's lease).
func (s *Server) aliveOrWatched(r lease.Record) (bool, error) {
	if s.deletes.present(r.Root, r.Container) {
		return true, nil
	}
	return s.alive(r)
}

// deletedByRunc is the reclaim's check of container id, which runc
// deleted: its lease goes only while its state directory is gone (a
// container of the same ID made since keeps it) and, the reclaim's own
// rule, no process that took it still runs (a create of the same ID under
// way). Any other container's lease is not this release's to judge: were
// a delete seen twice (two servers, a restart), the second finds the
// lease of the ID's next container and leaves it.
func deletedByRunc(id string) func(lease.Record) (bool, error) {
	return func(r lease.Record) (bool, error) {
		if r.Container != id || r.Root == "" {
			return true, nil
		}
		_, err := os.Lstat(filepath.Join(r.Root, r.Container))
		return !errors.Is(err, os.ErrNotExist), nil
	}
}

// watchRoot watches runc's root for a create's container, asked by
// process pid: not runc's default root (which runc it is, the agent cannot
// tell), nor one the asking runtime sees otherwise (another mount
// namespace). A root that does not exist yet is made as runc makes it at
// its first container (0700).
func (s *Server) watchRoot(root string, pid int) (int32, error) {
	switch {
	case root == "":
		return 0, errors.New("runc's default root")
	case pid <= 0:
		return 0, errors.New("the asking process is not in this PID namespace")
	}
	err := sameAsPeer(pid, root)
	if errors.Is(err, os.ErrNotExist) {
		// The nearest directory there must be the peer's too.
		there := filepath.Dir(root)
		for _, err := os.Lstat(there); errors.Is(err, os.ErrNotExist) && there != "/"; _, err = os.Lstat(there) {
			there = filepath.Dir(there)
		}
		if err := sameAsPeer(pid, there); err != nil {
			return 0, err
		}
		if err := os.MkdirAll(root, 0o700); err != nil {
			return 0, err
		}
		err = sameAsPeer(pid, root)
	}
	if err != nil {
		return 0, err
	}
	return s.deletes.watch(root)
}

// ours says whether gpumux-runtime would have read this agent's config and
// state directory.
func (s *Server) ours(req request) bool {
	if req.stateDir != "" && filepath.Clean(req.stateDir) != filepath.Clean(s.stateDir) || !filepath.IsAbs(req.entry) {
		return false
	}
	if s.match != nil {
		return s.match.matches(req.config)
	}
	a, err := os.Stat(req.config)
	if err != nil {
		return false
	}
	b, err := os.Stat(s.configFile)
	return err == nil && os.SameFile(a, b)
}

// request is what gpumux-runtime sends (doc.go): a create, or a hook with
// the container's state.
type request struct {
	hook                    bool
	config, stateDir, entry string
	state                   []byte
	args                    []string
}

// parseRequest splits a request into its fields; ok is false for another
// protocol or a request that is not whole.
func parseRequest(raw []byte) (r request, ok bool) {
	if len(raw) == 0 || raw[len(raw)-1] != 0 {
		return r, false
	}
	f := strings.Split(string(raw[:len(raw)-1]), "\x00")
	switch {
	case len(f) >= 5 && f[0] == protocol:
		return request{config: f[1], stateDir: f[2], entry: f[3], args: f[4:]}, true
	case len(f) >= 6 && f[0] == protocolHook:
		return request{hook: true, config: f[1], stateDir: f[2], entry: f[3], state: []byte(f[4]), args: f[5:]}, true
	}
	return r, false
}

// peer is the credentials of the process at c's other end.
func peer(c *net.UnixConn) (*syscall.Ucred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *syscall.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	return cred, credErr
}
