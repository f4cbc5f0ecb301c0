package ctrd

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	containerd "github.com/containerd/containerd"
	"github.com/containerd/containerd/namespaces"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/gpumux/gpumux/e2e/internal/hostcheck"
)

const (
	// Namespace is the containerd namespace of every container the harness
	// creates.
	Namespace = "gpumux-e2e"

	// DefaultRuntime is the runtime (shim) containers run with.
	DefaultRuntime = "io.containerd.runc.v2"

	// markerEnv is set in the daemon's environment (and so inherited by the
	// shims it starts and the runc processes they run) to find its
	// processes later.
	markerEnv = "GPUMUX_E2E_CTRD"

	// shimSocketDir is where containerd's runc shim (v2) puts its sockets,
	// whatever the daemon's state dir: /run/containerd/s/<sha256 of
	// address/namespace/id>.
	shimSocketDir = "/run/containerd/s"
)

// DefaultContainerdBin returns the containerd binary to use: $CONTAINERD_BIN,
// else "containerd" (looked up on PATH; Debian's package puts it in
// /usr/bin).
func DefaultContainerdBin() string {
	if b := os.Getenv("CONTAINERD_BIN"); b != "" {
		return b
	}
	return "containerd"
}

type config struct {
	bin          string
	v2           bool // containerd 2.x: config version 3, its CRI tables
	cri          bool
	nri          bool
	runtimes     map[string]string // CRI runtime class → BinaryName
	extraConfig  []string
	disable      []string
	env          []string
	logLevel     string
	readyTimeout time.Duration
	stopTimeout  time.Duration
}

// Option configures Start.
type Option func(*config)

// WithContainerdBin overrides the containerd binary (default
// DefaultContainerdBin()).
func WithContainerdBin(path string) Option { return func(c *config) { c.bin = path } }

// WithConfig appends raw TOML (version 2 schema) to the daemon's
// config.toml, e.g. `[plugins."io.containerd.runtime.v1.linux"] ...`. Do
// not repeat the top-level keys or the [grpc], [ttrpc] and [debug] tables
// the harness writes. A table for the CRI plugin only has an effect with
// WithCRI.
func WithConfig(toml string) Option {
	return func(c *config) { c.extraConfig = append(c.extraConfig, toml) }
}

// WithCRI keeps the CRI plugin (io.containerd.grpc.v1.cri) enabled; by
// default it is disabled to keep the daemon light. On containerd 2.x
// (WithContainerd2) the harness also configures it (cri.go): the native
// snapshotter, the probe image as the sandbox image, host-network pods
// only, runc with the harness's root, CDI specs from CDISpecDir.
func WithCRI() Option {
	return func(c *config) {
		c.cri = true
		out := c.disable[:0:0]
		for _, p := range c.disable {
			if p != criPlugin {
				out = append(out, p)
			}
		}
		c.disable = out
	}
}

// WithContainerd2 runs containerd 2.x (Containerd2Bin, with its own runc
// shim) with a version 3 config.
func WithContainerd2() Option {
	return func(c *config) {
		c.bin = Containerd2Bin()
		c.v2 = true
		c.env = append(c.env, "PATH="+filepath.Dir(c.bin)+":"+os.Getenv("PATH"))
	}
}

// WithNRI enables containerd 2.x's NRI with its socket at NRISocket, for
// external plugins such as gpumux agent's.
func WithNRI() Option { return func(c *config) { c.nri = true } }

// WithRuntimeClass adds a CRI runtime class whose runc shim runs binary
// instead of runc (containerd 2.x with WithCRI).
func WithRuntimeClass(name, binary string) Option {
	return func(c *config) {
		if c.runtimes == nil {
			c.runtimes = map[string]string{}
		}
		c.runtimes[name] = binary
	}
}

// WithEnv adds KEY=VALUE entries to the daemon's environment (inherited by
// the shims it starts and the runtime they run, e.g. gpumux-runtime).
func WithEnv(kv ...string) Option { return func(c *config) { c.env = append(c.env, kv...) } }

// WithLogLevel sets the daemon's log level (default "debug").
func WithLogLevel(level string) Option { return func(c *config) { c.logLevel = level } }

// WithReadyTimeout bounds how long Start waits for the daemon to answer
// (default 30s; ctx may end it earlier).
func WithReadyTimeout(d time.Duration) Option { return func(c *config) { c.readyTimeout = d } }

// WithStopTimeout bounds how long Stop waits after SIGTERM before it
// SIGKILLs the daemon's process group (default 20s).
func WithStopTimeout(d time.Duration) Option { return func(c *config) { c.stopTimeout = d } }

const criPlugin = "io.containerd.grpc.v1.cri"

// defaultDisabled are plugins the harness does not need: CRI, and the
// snapshotters that only log errors on a machine without their backing
// filesystem (no snapshotter is used: containers run from a rootfs path).
var defaultDisabled = []string{
	criPlugin,
	"io.containerd.snapshotter.v1.aufs",
	"io.containerd.snapshotter.v1.btrfs",
	"io.containerd.snapshotter.v1.devmapper",
	"io.containerd.snapshotter.v1.zfs",
}

// Daemon is a running private containerd.
type Daemon struct {
	// Dir is the daemon's short temp dir (os.MkdirTemp("", "gmx-ctrd"));
	// everything below is inside it. It is removed by Stop.
	Dir string
	// ConfigPath is Dir/config.toml; LogPath the daemon's stdout and stderr.
	ConfigPath, LogPath string
	// Root and State are the daemon's root and state dirs.
	Root, State string
	// Address is the gRPC socket; TTRPCAddress and DebugAddress the
	// others.
	Address, TTRPCAddress, DebugAddress string
	// NRISocket is containerd 2.x's NRI socket (WithNRI); CDISpecDir the
	// directory its CRI reads CDI specs from (WithCRI).
	NRISocket, CDISpecDir string
	// RuncRoot is the runc --root the shim is given (runc option Root), so
	// that runc state stays inside Dir too: runc keeps a container's
	// state in RuncRoot/<namespace>/<id>.
	RuncRoot string
	// FIFODir holds the stdio FIFOs of the containers.
	FIFODir string
	// Client is a client of the daemon, with Namespace as its default
	// namespace.
	Client *containerd.Client
	// CRI is a client of its CRI runtime service (containerd 2.x started
	// WithCRI), nil otherwise.
	CRI cri.RuntimeServiceClient

	t       testing.TB
	cfg     config
	proc    *hostcheck.Process
	logFile *os.File

	rootfsOnce sync.Once
	rootfs     string
	rootfsErr  error

	mu         sync.Mutex
	containers map[string]*container // live, by ID
	ids        map[string]bool       // every ID ever created, for leftovers

	stopOnce sync.Once
	stopErr  error
	finalLog []byte
}

// Start writes a configuration, starts `containerd --config` and waits
// until the daemon answers a Version request. It registers a t.Cleanup
// that deletes the containers left in the harness's namespace, stops the
// daemon, prints its log if the test failed, and fails the test if
// anything is left behind. Start calls t.Fatal on error. Needs root.
func Start(ctx context.Context, t testing.TB, opts ...Option) *Daemon {
	t.Helper()
	cfg := config{
		bin:          DefaultContainerdBin(),
		disable:      append([]string(nil), defaultDisabled...),
		logLevel:     "debug",
		readyTimeout: 30 * time.Second,
		stopTimeout:  20 * time.Second,
	}
	for _, o := range opts {
		o(&cfg)
	}
	bin, err := exec.LookPath(cfg.bin)
	if err != nil {
		t.Fatalf("containerd binary %s: %v (Debian package `containerd`: scripts/install-deps.sh; or set CONTAINERD_BIN)", cfg.bin, err)
	}
	cfg.bin = bin
	for _, b := range []string{"containerd-shim-runc-v2", "runc"} {
		if _, err := exec.LookPath(b); err != nil {
			t.Fatalf("%s: %v (Debian packages `containerd` and `runc`: scripts/install-deps.sh)", b, err)
		}
	}
	if os.Geteuid() != 0 {
		t.Fatalf("the containerd e2e harness must run as root (runc, cgroups, mounts); euid is %d", os.Geteuid())
	}

	// Register t.TempDir's removal before the daemon's cleanup, so that
	// rootfs dirs a test makes later with Rootfs(t) outlive the containers
	// that cleanup deletes (cleanups run last registered first).
	_ = t.TempDir()
	dir, err := os.MkdirTemp("", "gmx-ctrd")
	if err != nil {
		t.Fatalf("creating temp dir: %v", err)
	}
	d := &Daemon{
		t:            t,
		cfg:          cfg,
		Dir:          dir,
		ConfigPath:   filepath.Join(dir, "config.toml"),
		LogPath:      filepath.Join(dir, "containerd.log"),
		Root:         filepath.Join(dir, "root"),
		State:        filepath.Join(dir, "state"),
		Address:      filepath.Join(dir, "c.sock"),
		NRISocket:    filepath.Join(dir, "nri.sock"),
		CDISpecDir:   filepath.Join(dir, "cdi"),
		TTRPCAddress: filepath.Join(dir, "t.sock"),
		DebugAddress: filepath.Join(dir, "d.sock"),
		RuncRoot:     filepath.Join(dir, "runc"),
		FIFODir:      filepath.Join(dir, "fifo"),
		containers:   map[string]*container{},
		ids:          map[string]bool{},
	}
	if err := os.WriteFile(d.ConfigPath, []byte(d.renderConfig()), 0o644); err != nil {
		os.RemoveAll(dir)
		t.Fatal(err)
	}
	d.logFile, err = os.Create(d.LogPath)
	if err != nil {
		os.RemoveAll(dir)
		t.Fatal(err)
	}
	cmd := exec.Command(cfg.bin, "--config", d.ConfigPath)
	cmd.Dir = dir
	cmd.Stdout = d.logFile
	cmd.Stderr = d.logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Env = append(hostcheck.FilterEnv(os.Environ(), "CONTAINERD_ADDRESS", "CONTAINERD_NAMESPACE", "NOTIFY_SOCKET"),
		markerEnv+"="+dir)
	cmd.Env = append(cmd.Env, cfg.env...)
	proc, err := hostcheck.StartProcess("containerd", cmd)
	if err != nil {
		d.logFile.Close()
		os.RemoveAll(dir)
		t.Fatalf("starting %s: %v", cfg.bin, err)
	}
	d.proc = proc
	t.Logf("containerd pid %d, dir %s", proc.Pid(), dir)

	d.proc.StopAtEnd(t, d.Stop, d.dumpLog)

	wctx, cancel := context.WithTimeout(ctx, cfg.readyTimeout)
	defer cancel()
	if err := d.waitReady(wctx); err != nil {
		t.Fatalf("containerd not ready: %v", err)
	}
	if cfg.v2 && cfg.cri {
		if err := d.startCRI(wctx); err != nil {
			t.Fatalf("containerd's CRI: %v", err)
		}
	}
	return d
}

func (d *Daemon) renderConfig() string {
	var b strings.Builder
	version := 2
	if d.cfg.v2 {
		version = 3
	}
	fmt.Fprintf(&b, "version = %d\n", version)
	fmt.Fprintf(&b, "root  = %q\n", d.Root)
	fmt.Fprintf(&b, "state = %q\n", d.State)
	var dis []string
	for _, p := range d.cfg.disable {
		dis = append(dis, strconv.Quote(p))
	}
	fmt.Fprintf(&b, "disabled_plugins = [%s]\n\n", strings.Join(dis, ", "))
	fmt.Fprintf(&b, "[grpc]\n  address = %q\n\n", d.Address)
	fmt.Fprintf(&b, "[ttrpc]\n  address = %q\n\n", d.TTRPCAddress)
	fmt.Fprintf(&b, "[debug]\n  address = %q\n  level = %q\n\n", d.DebugAddress, d.cfg.logLevel)
	// The opt plugin would otherwise create /opt/containerd on the host.
	fmt.Fprintf(&b, "[plugins.\"io.containerd.internal.v1.opt\"]\n  path = %q\n", filepath.Join(d.Dir, "opt"))
	if d.cfg.v2 {
		d.renderV3(&b)
	}
	for _, x := range d.cfg.extraConfig {
		fmt.Fprintf(&b, "\n%s\n", x)
	}
	return b.String()
}

// waitReady waits until the socket exists and the daemon answers Version,
// then keeps the client in d.Client.
func (d *Daemon) waitReady(ctx context.Context) error {
	var last string
	for {
		select {
		case <-d.proc.Exited():
			return fmt.Errorf("containerd exited early (%v)", d.proc.WaitErr())
		default:
		}
		if _, err := os.Stat(d.Address); err != nil {
			last = err.Error()
		} else {
			c, err := containerd.New(d.Address,
				containerd.WithDefaultNamespace(Namespace),
				containerd.WithTimeout(2*time.Second))
			if err == nil {
				v, err := c.Version(ctx)
				if err == nil {
					d.Client = c
					d.t.Logf("containerd %s (%s) answering on %s", v.Version, v.Revision, d.Address)
					return nil
				}
				c.Close()
				last = "version: " + err.Error()
			} else {
				last = "dial: " + err.Error()
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w; last: %s", ctx.Err(), last)
		case <-d.proc.Exited():
			return fmt.Errorf("containerd exited early (%v); last: %s", d.proc.WaitErr(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Context returns ctx with the harness's namespace, for calls made
// directly on d.Client.
func (d *Daemon) Context(ctx context.Context) context.Context {
	return namespaces.WithNamespace(ctx, Namespace)
}

// Exited is closed when the daemon process has exited.
func (d *Daemon) Exited() <-chan struct{} { return d.proc.Exited() }

// Log returns the daemon log so far (after Stop: the whole log).
func (d *Daemon) Log() string {
	if b, err := os.ReadFile(d.LogPath); err == nil {
		return string(b)
	}
	return string(d.finalLog)
}

// ConfigDump runs `containerd --config <ConfigPath> config dump`: the
// daemon's whole configuration, defaults included, as it would load it.
// Disabled plugins have no tables in it: a CRI runtime class
// ([plugins."io.containerd.grpc.v1.cri".containerd.runtimes.X]) shows only
// when the daemon was started WithCRI.
func (d *Daemon) ConfigDump(ctx context.Context) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, d.cfg.bin, "--config", d.ConfigPath, "config", "dump")
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("containerd config dump: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// Stop deletes the containers left in the namespace (killing their tasks),
// stops the daemon (SIGTERM, wait up to the stop timeout, then SIGKILL to
// its process group), then checks that nothing of this daemon is left:
// processes (the daemon, shims, runc, container processes), mounts under
// Dir, the cgroups of the containers it ran and their shim sockets in
// /run/containerd/s. It returns an error describing anything left behind
// (and then kills/unmounts those so later tests are not affected), and
// removes Dir when nothing is mounted under it. Stop is idempotent; Start's
// cleanup calls it.
func (d *Daemon) Stop() error {
	d.stopOnce.Do(func() { d.stopErr = d.stop() })
	return d.stopErr
}

func (d *Daemon) stop() error {
	// Shims outlive the daemon by design: delete the tasks first.
	var deleteAll func() error
	if d.Client != nil {
		deleteAll = func() error { return errors.Join(d.removePods(), d.deleteAll()) }
	}
	errs := d.proc.Stop(syscall.SIGTERM, d.cfg.stopTimeout, deleteAll, d.t.Logf)
	if d.Client != nil {
		d.Client.Close()
	}
	d.logFile.Close()

	var lo Leftovers
	if err := hostcheck.Settle(10*time.Second, func() (bool, error) {
		var err error
		lo, err = d.Leftovers()
		return lo.Empty(), err
	}); err != nil {
		errs = append(errs, err)
	}
	if err := hostcheck.KillProcs(lo.Procs, 5*time.Second); err != nil {
		errs = append(errs, err)
	}
	if err := hostcheck.DetachMounts(lo.Mounts, d.Dir); err != nil {
		errs = append(errs, err)
	}
	if len(lo.Cgroups) > 0 {
		// Processes whose shim is gone are found only through their cgroup.
		inCgroups := map[int]bool{}
		for _, c := range lo.Cgroups {
			b, _ := os.ReadFile(filepath.Join(c, "cgroup.procs"))
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
					inCgroups[pid] = true
				}
			}
		}
		if len(inCgroups) > 0 {
			var lines []string
			var pids []int
			for pid := range inCgroups {
				lines = append(lines, fmt.Sprintf("pid %d: %s", pid, hostcheck.Cmdline(pid)))
				pids = append(pids, pid)
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			sort.Strings(lines)
			errs = append(errs, fmt.Errorf("%d process(es) left in the containers' cgroups (now killed):\n  %s", len(pids), strings.Join(lines, "\n  ")))
			hostcheck.WaitGone(pids, 5*time.Second)
		}
		var stuck []string
		for _, c := range lo.Cgroups {
			var err error
			for end := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				if err = os.Remove(c); err == nil || os.IsNotExist(err) || time.Now().After(end) {
					break
				}
			}
			if err != nil && !os.IsNotExist(err) {
				stuck = append(stuck, err.Error())
			}
		}
		msg := fmt.Sprintf("%d cgroup(s) left (now removed):\n  %s", len(lo.Cgroups), strings.Join(lo.Cgroups, "\n  "))
		if len(stuck) > 0 {
			msg += "\n  could not remove:\n  " + strings.Join(stuck, "\n  ")
		}
		errs = append(errs, errors.New(msg))
	}
	if len(lo.Files) > 0 {
		for _, f := range lo.Files {
			_ = os.Remove(f)
		}
		errs = append(errs, fmt.Errorf("%d file(s) left outside %s (now removed):\n  %s", len(lo.Files), d.Dir, strings.Join(lo.Files, "\n  ")))
	}

	d.finalLog, _ = os.ReadFile(d.LogPath)
	if rest, err := hostcheck.MountsUnder(d.Dir); err == nil && len(rest) == 0 {
		if err := os.RemoveAll(d.Dir); err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", d.Dir, err))
		}
	} else {
		errs = append(errs, fmt.Errorf("not removing %s: mounts remain: %v (%v)", d.Dir, rest, err))
	}
	return errors.Join(errs...)
}

// deleteAll deletes every container in the namespace (those the harness
// knows and any a test made through d.Client), killing running tasks. A
// container still there is not an error: tests may leave them to cleanup.
func (d *Daemon) deleteAll() error {
	ctx, cancel := context.WithTimeout(d.Context(context.Background()), 60*time.Second)
	defer cancel()
	var errs []error
	d.mu.Lock()
	var known []string
	for id := range d.containers {
		known = append(known, id)
	}
	d.mu.Unlock()
	sort.Strings(known)
	for _, id := range known {
		d.t.Logf("cleanup: deleting container %s", id)
		if _, err := d.Delete(ctx, id); err != nil {
			errs = append(errs, fmt.Errorf("cleanup: deleting container %s: %w", id, err))
		}
	}
	cs, err := d.Client.Containers(ctx)
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("cleanup: listing containers: %w", err))...)
	}
	for _, c := range cs {
		d.t.Logf("cleanup: deleting container %s (not created through the harness)", c.ID())
		d.noteID(c.ID())
		if task, err := c.Task(ctx, nil); err == nil {
			if _, err := task.Delete(ctx, containerd.WithProcessKill); err != nil {
				errs = append(errs, fmt.Errorf("cleanup: deleting task %s: %w", c.ID(), err))
			}
		}
		if err := c.Delete(ctx); err != nil {
			errs = append(errs, fmt.Errorf("cleanup: deleting container %s: %w", c.ID(), err))
		}
	}
	return errors.Join(errs...)
}

func (d *Daemon) noteID(id string) {
	d.mu.Lock()
	d.ids[id] = true
	d.mu.Unlock()
}

// Proc is a process found by Leftovers.
type Proc struct {
	PID     int
	Cmdline string
	// Why says how it was attributed to the daemon.
	Why string
}

func (p Proc) String() string { return hostcheck.Proc(p).String() }

// Leftovers is what Daemon.Leftovers finds.
type Leftovers struct {
	// Procs: live processes of this daemon.
	Procs []Proc
	// Mounts: mount points at or under Dir.
	Mounts []string
	// Cgroups: cgroup dirs of containers this daemon ran
	// (<hierarchy>/gpumux-e2e/<id>, containerd's default cgroups path).
	Cgroups []string
	// Files: shim sockets of containers this daemon ran, in
	// /run/containerd/s.
	Files []string
}

// Empty says nothing is left.
func (l Leftovers) Empty() bool {
	return len(l.Procs) == 0 && len(l.Mounts) == 0 && len(l.Cgroups) == 0 && len(l.Files) == 0
}

// Leftovers lists what belongs to this daemon and is still there: live
// processes (the daemon, its process group, anything with the daemon's
// marker environment variable such as containerd-shim-runc-v2 and the runc
// it runs, anything whose command line names Dir, such as a shim's
// -address or runc's --root, anything whose root or cwd is under Dir, such
// as container processes); mount points under Dir; the cgroups and shim
// sockets of the container IDs it created.
func (d *Daemon) Leftovers() (Leftovers, error) {
	var l Leftovers
	var err error
	l.Procs, err = hostcheck.Procs[Proc](hostcheck.Owner{
		PID:         d.proc.Pid(),
		Name:        "containerd",
		Dir:         d.Dir,
		DirName:     d.Dir,
		Marker:      markerEnv + "=" + d.Dir,
		Descendants: true, // container processes, under their shim (a subreaper)
	})
	if err != nil {
		return l, err
	}
	if l.Mounts, err = hostcheck.MountsUnder(d.Dir); err != nil {
		return l, err
	}
	d.mu.Lock()
	var ids []string
	for id := range d.ids {
		ids = append(ids, id)
	}
	d.mu.Unlock()
	sort.Strings(ids)
	hier, err := hostcheck.CgroupMounts()
	if err != nil {
		return l, err
	}
	for _, id := range ids {
		for _, h := range hier {
			p := filepath.Join(h, Namespace, id)
			if _, err := os.Stat(p); err == nil {
				l.Cgroups = append(l.Cgroups, p)
			}
		}
		if s := shimSocket(d.Address, id); s != "" {
			if _, err := os.Lstat(s); err == nil {
				l.Files = append(l.Files, s)
			}
		}
	}
	return l, nil
}

// shimSocket is the socket path the runc shim v2 uses for a container of
// this daemon (runtime/v2/shim.SocketAddress).
func shimSocket(address, id string) string {
	sum := sha256.Sum256([]byte(filepath.Join(address, Namespace, id)))
	return fmt.Sprintf("%s/%x", shimSocketDir, sum)
}

// dumpLog prints the tail of the daemon log to the test log (and copies
// the whole log to $GPUMUX_E2E_LOGDIR when set).
func (d *Daemon) dumpLog() {
	hostcheck.ReportLog(d.t.Logf, d.t.Name(), "containerd", d.LogPath, []byte(d.Log()), 256<<10)
}
