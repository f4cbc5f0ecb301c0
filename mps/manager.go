package mps

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// DefaultControlBinary is the control program the Manager runs unless told
// otherwise; it is looked up in PATH.
const DefaultControlBinary = "nvidia-cuda-mps-control"

// Device is one GPU or MIG instance configured for MPS: it gets one control
// daemon of its own.
type Device struct {
	// UUID is the GPU's ("GPU-…") or MIG instance's ("MIG-…") UUID. The
	// daemon sees this device alone, as device 0.
	UUID string
	// ThreadPercent is the daemon's default active thread percentage
	// (1-100), the largest of its shares'; 0 means 100. A client's
	// CUDA_MPS_ACTIVE_THREAD_PERCENTAGE can only lower it.
	ThreadPercent int
	// PinnedMemLimitMiB is the daemon's default pinned device memory limit,
	// the largest of its shares'; 0 means none. A client's
	// CUDA_MPS_PINNED_DEVICE_MEM_LIMIT can only lower it.
	PinnedMemLimitMiB uint64
}

// Status is what the Manager knows of one daemon.
type Status struct {
	Device Device
	// PID is the control daemon's pid, from its pid file; 0 if unknown.
	PID int
	// Healthy is true while the daemon answers and has its defaults.
	Healthy bool
	// Draining is true for a daemon whose device is no longer wanted: it is
	// quit once no client is connected. A draining daemon is never healthy.
	Draining bool
	// Reason says why the daemon is not healthy, or why it is draining.
	Reason string
	// Clients are the client pids seen by the last check of a draining daemon.
	Clients []int
	// Restarts counts the times this Manager restarted the daemon after it
	// stopped answering.
	Restarts int
	// LastFailure is the reason of the last failure that led to a restart.
	LastFailure   string
	LastFailureAt time.Time
}

// Manager runs one MPS control daemon per Device, each with private pipe and
// log directories under its state directory. Its methods are safe for
// concurrent use.
type Manager struct {
	stateDir     string
	binary       string
	log          hclog.Logger
	interval     time.Duration
	cmdTimeout   time.Duration
	startTimeout time.Duration
	hangTimeout  time.Duration
	backoffFirst time.Duration
	backoffMax   time.Duration
	cmd          commander
	environ      func() []string
	now          func() time.Time

	// ops serialises Reconcile and health passes, so that one at a time
	// starts, restarts or quits daemons; a channel, so waiting honours ctx.
	ops          chan struct{}
	warnedClosed bool // under ops

	mu      sync.Mutex // guards daemons and their fields
	daemons map[string]*daemon
	changed chan struct{}
}

// daemon is the Manager's record of one control daemon.
type daemon struct {
	dev      Device
	draining bool
	pid      int
	healthy  bool
	reason   string
	clients  []int
	restarts int
	lastFail string
	lastAt   time.Time

	// Touched only under ops, by one goroutine at a time.
	known        bool      // it answered this Manager at least once
	defaultsOK   bool      // dev's defaults are in force in the running daemon
	failingSince time.Time // first failed probe of the current failure
	attempts     int       // failed restart attempts in the current failure
	nextRestart  time.Time // no restart attempt before this
	pinnedSet    uint64    // the limit (MiB) this Manager set in the running daemon
}

// Option configures a Manager.
type Option func(*Manager)

// WithControlBinary sets the control program (default
// "nvidia-cuda-mps-control", looked up in PATH). Tests and demos give the
// stand-in gpumux-fake-mps-control.
func WithControlBinary(path string) Option { return func(m *Manager) { m.binary = path } }

// WithLogger sets the logger (default: none).
func WithLogger(l hclog.Logger) Option { return func(m *Manager) { m.log = l } }

// WithCheckInterval sets how often Run probes each daemon (default 10s).
func WithCheckInterval(d time.Duration) Option { return func(m *Manager) { m.interval = d } }

// WithCommandTimeout bounds each run of the control binary (default 10s; a
// command takes about 10 ms on an H200 host).
func WithCommandTimeout(d time.Duration) Option { return func(m *Manager) { m.cmdTimeout = d } }

// WithStartTimeout bounds how long a started daemon may take to answer
// (default 30s).
func WithStartTimeout(d time.Duration) Option { return func(m *Manager) { m.startTimeout = d } }

// WithHangTimeout sets how long a daemon whose process lives but does not
// answer is left alone before it is killed and restarted (default 2m).
// Killing a control daemon ends its server, and with it the GPU work of every
// client, so a short stall must not do it; but a daemon that does not answer
// admits no new client either.
func WithHangTimeout(d time.Duration) Option { return func(m *Manager) { m.hangTimeout = d } }

// WithRestartBackoff sets the wait before the first restart of a daemon found
// dead by Run, doubled after each failed attempt up to max (default 1s, 1m).
// Reconcile starts missing daemons at once.
func WithRestartBackoff(first, max time.Duration) Option {
	return func(m *Manager) { m.backoffFirst, m.backoffMax = first, max }
}

// NewManager returns a Manager that keeps its daemons' directories under
// stateDir/mps. It starts nothing: Reconcile does, and Run watches.
func NewManager(stateDir string, opts ...Option) *Manager {
	if abs, err := filepath.Abs(stateDir); err == nil {
		stateDir = abs
	}
	m := &Manager{
		stateDir:     stateDir,
		binary:       DefaultControlBinary,
		log:          hclog.NewNullLogger(),
		interval:     10 * time.Second,
		cmdTimeout:   10 * time.Second,
		startTimeout: 30 * time.Second,
		hangTimeout:  2 * time.Minute,
		backoffFirst: time.Second,
		backoffMax:   time.Minute,
		environ:      os.Environ,
		now:          time.Now,
		daemons:      map[string]*daemon{},
		changed:      make(chan struct{}, 1),
		ops:          make(chan struct{}, 1),
	}
	defaults := []time.Duration{m.interval, m.cmdTimeout, m.startTimeout, m.hangTimeout, m.backoffFirst, m.backoffMax}
	for _, o := range opts {
		o(m)
	}
	if m.log == nil {
		m.log = hclog.NewNullLogger()
	}
	for i, d := range []*time.Duration{&m.interval, &m.cmdTimeout, &m.startTimeout, &m.hangTimeout, &m.backoffFirst, &m.backoffMax} {
		if *d <= 0 {
			*d = defaults[i] // a zero or negative duration keeps the default
		}
	}
	m.backoffMax = max(m.backoffMax, m.backoffFirst)
	m.cmd = execCommander{path: m.binary}
	return m
}

// lockOps waits for the right to start, restart or quit daemons.
func (m *Manager) lockOps(ctx context.Context) error {
	select {
	case m.ops <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (m *Manager) unlockOps() { <-m.ops }

// root is the directory that holds one directory per device.
func (m *Manager) root() string { return filepath.Join(m.stateDir, "mps") }

// PipeDirIn is the pipe directory of the daemon serving device uuid on a
// node whose state directory is stateDir (what Manager.PipeDir returns).
func PipeDirIn(stateDir, uuid string) string { return filepath.Join(stateDir, "mps", uuid, "pipe") }

// MaxPipeDir is the longest pipe directory nvidia-cuda-mps-control accepts
// (measured with driver 580 on an H200: 89 bytes and more make `-d` exit 1
// without a message, as its sockets no longer fit in a socket address).
const MaxPipeDir = 88

// PipeDir is the device's CUDA_MPS_PIPE_DIRECTORY: <stateDir>/mps/<uuid>/pipe.
// Clients of the device need it (mounted at the same path, or with the
// variable pointing at it) and nothing else of MPS.
func (m *Manager) PipeDir(uuid string) string { return PipeDirIn(m.stateDir, uuid) }

// LogDir is the device's CUDA_MPS_LOG_DIRECTORY: <stateDir>/mps/<uuid>/log,
// where the daemon writes control.log and server.log.
func (m *Manager) LogDir(uuid string) string { return filepath.Join(m.root(), uuid, "log") }

// Health reports whether the device's daemon may take clients, and why not.
func (m *Manager) Health(uuid string) (ok bool, reason string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, found := m.daemons[uuid]
	switch {
	case !found:
		return false, fmt.Sprintf("no MPS control daemon is managed for %s", uuid)
	case d.draining:
		return false, d.reason
	}
	return d.healthy, d.reason
}

// Status returns every daemon's status, ordered by UUID.
func (m *Manager) Status() []Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Status, 0, len(m.daemons))
	for _, d := range m.daemons {
		out = append(out, Status{
			Device: d.dev, PID: d.pid, Healthy: d.healthy && !d.draining, Draining: d.draining,
			Reason: d.reason, Clients: slices.Clone(d.clients), Restarts: d.restarts,
			LastFailure: d.lastFail, LastFailureAt: d.lastAt,
		})
	}
	slices.SortFunc(out, func(a, b Status) int { return strings.Compare(a.Device.UUID, b.Device.UUID) })
	return out
}

// Changed ticks after any daemon's health or reason changes; a plugin
// re-fingerprints on it. Ticks coalesce: read Health or Status after one.
func (m *Manager) Changed() <-chan struct{} { return m.changed }

func (m *Manager) notify() {
	select {
	case m.changed <- struct{}{}:
	default:
	}
}

// setHealth records a daemon's health and ticks Changed if it changed.
func (m *Manager) setHealth(d *daemon, healthy bool, reason string) {
	m.mu.Lock()
	changed := d.healthy != healthy || d.reason != reason
	wasHealthy, draining := d.healthy, d.draining
	d.healthy, d.reason = healthy, reason
	uuid, pid := d.dev.UUID, d.pid
	m.mu.Unlock()
	if !changed {
		return
	}
	switch {
	case !healthy && !draining:
		m.log.Warn("MPS control daemon unhealthy", "device", uuid, "reason", reason)
	case healthy && !wasHealthy:
		m.log.Info("MPS control daemon healthy", "device", uuid, "pid", pid)
	}
	m.notify()
}

// tracked returns the daemon record for uuid, or nil.
func (m *Manager) tracked(uuid string) *daemon {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.daemons[uuid]
}

// list returns the daemons, ordered by UUID.
func (m *Manager) list() []*daemon {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*daemon, 0, len(m.daemons))
	for _, d := range m.daemons {
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b *daemon) int { return strings.Compare(a.dev.UUID, b.dev.UUID) })
	return out
}

func (m *Manager) forget(d *daemon) {
	m.mu.Lock()
	delete(m.daemons, d.dev.UUID)
	m.mu.Unlock()
	m.notify()
}

// env is the control binary's environment for one device.
func (m *Manager) env(uuid string) []string {
	return daemonEnv(m.environ(), uuid, m.PipeDir(uuid), m.LogDir(uuid))
}

// send runs one command for a device, within the command timeout.
func (m *Manager) send(ctx context.Context, uuid, command string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, m.cmdTimeout)
	defer cancel()
	out, err := m.cmd.send(ctx, m.env(uuid), command)
	if err != nil {
		if ctx.Err() != nil {
			return "", fmt.Errorf("%q: no reply within %s: %w", command, m.cmdTimeout, ctx.Err())
		}
		return "", fmt.Errorf("%q: %w", command, err)
	}
	return out, nil
}

// servers runs get_server_list: the probe that a daemon answers.
func (m *Manager) servers(ctx context.Context, uuid string) ([]int, error) {
	out, err := m.send(ctx, uuid, "get_server_list")
	if err != nil {
		return nil, err
	}
	pids, err := parsePIDs(out)
	if err != nil {
		return nil, fmt.Errorf("%q: %w", "get_server_list", err)
	}
	return pids, nil
}

// clients returns the pids of the clients of every server of a device.
func (m *Manager) clients(ctx context.Context, uuid string) ([]int, error) {
	servers, err := m.servers(ctx, uuid)
	if err != nil {
		return nil, err
	}
	var all []int
	for _, s := range servers {
		cmd := fmt.Sprintf("get_client_list %d", s)
		out, err := m.send(ctx, uuid, cmd)
		if err != nil {
			return nil, err
		}
		if strings.Contains(out, "not found") { // the server exited meanwhile
			continue
		}
		pids, err := parsePIDs(out)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", cmd, err)
		}
		all = append(all, pids...)
	}
	slices.Sort(all)
	return all, nil
}

// backoff is the wait before restart attempt n (1-based).
func (m *Manager) backoff(n int) time.Duration {
	d := m.backoffFirst
	for i := 1; i < n && d < m.backoffMax; i++ {
		d *= 2
	}
	return min(d, m.backoffMax)
}
