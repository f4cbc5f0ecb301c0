package dockerd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpumux/gpumux/e2e/ctrd"
	"github.com/gpumux/gpumux/e2e/internal/hostcheck"
)

const (
	// Namespace is the containerd namespace of the engine's containers.
	Namespace = "gpumux-e2e-docker"

	// markerEnv is set in dockerd's environment to find its processes
	// later.
	markerEnv = "GPUMUX_E2E_DOCKERD"
)

// hostPaths are what dockerd creates outside its dirs whatever its flags:
// they are removed on Stop when they were not there before Start, and are
// no error. (Its trust key, /etc/docker/key.json by default, is moved into
// Dir through daemon.json's "deprecated-key-path".)
var hostPaths = []string{"/run/docker/plugins", "/run/docker"}

// leakPaths are what dockerd or the docker CLI would create outside the
// harness's dirs if the harness failed to redirect them: found after Stop
// (and not there before Start), they are an error.
var leakPaths = []string{"/etc/docker/key.json", "/var/lib/docker", "/var/run/docker.sock", "/var/run/docker.pid"}

// shimSocketDir is where containerd's runc shim puts its sockets (see
// e2e/ctrd).
const shimSocketDir = "/run/containerd/s"

// DefaultDockerdBin returns $DOCKERD_BIN, else "dockerd" (on PATH; Debian's
// docker.io puts it in /usr/sbin).
func DefaultDockerdBin() string {
	if b := os.Getenv("DOCKERD_BIN"); b != "" {
		return b
	}
	return "dockerd"
}

// CDIVersion is the Docker release whose engine applies CDI specs that the
// tests run (scripts/fetch-docker.sh fetches Debian 13's packages of it):
// Debian 12's is 20.10, from before CDI.
const CDIVersion = "26.1.5"

// CDIBinDir is the directory of CDIVersion's dockerd and docker:
// $DOCKER_CDI_DIR, else where scripts/fetch-docker.sh caches them,
// $GPUMUX_CACHE/docker-v<CDIVersion>/bin.
func CDIBinDir() string {
	if d := os.Getenv("DOCKER_CDI_DIR"); d != "" {
		return d
	}
	return filepath.Join(hostcheck.CacheDir(), "docker-v"+CDIVersion, "bin")
}

// DefaultDockerBin returns $DOCKER_BIN, else "docker" (the CLI, on PATH).
func DefaultDockerBin() string {
	if b := os.Getenv("DOCKER_BIN"); b != "" {
		return b
	}
	return "docker"
}

type config struct {
	dockerd, docker string
	configure       []func(daemonJSON string) error
	ctrdOpts        []ctrd.Option
	readyTimeout    time.Duration
	stopTimeout     time.Duration
}

// Option configures Start.
type Option func(*config)

// WithConfigure runs f on daemon.json after the harness wrote its own
// settings there (data and key paths) and before dockerd starts.
func WithConfigure(f func(daemonJSON string) error) Option {
	return func(c *config) { c.configure = append(c.configure, f) }
}

// WithContainerdOptions passes options to the private containerd, e.g.
// ctrd.WithEnv: its environment is what the runc shim and the OCI runtime
// (gpumux-runtime) of every container get, not dockerd's.
func WithContainerdOptions(opts ...ctrd.Option) Option {
	return func(c *config) { c.ctrdOpts = append(c.ctrdOpts, opts...) }
}

// WithBinaries runs the engine dockerd and the CLI docker (paths, or names
// on PATH) instead of DefaultDockerdBin and DefaultDockerBin: CDIBinDir's
// Docker 26, for CDI.
func WithBinaries(dockerd, docker string) Option {
	return func(c *config) { c.dockerd, c.docker = dockerd, docker }
}

// WithStopTimeout bounds how long Stop waits after SIGTERM before it
// SIGKILLs dockerd (default 30s).
func WithStopTimeout(d time.Duration) Option { return func(c *config) { c.stopTimeout = d } }

// Daemon is a running private dockerd.
type Daemon struct {
	// Dir is the engine's short temp dir; everything below is inside it.
	// It is removed by Stop.
	Dir string
	// ConfigPath is Dir/daemon.json, LogPath dockerd's output.
	ConfigPath, LogPath string
	// DataRoot, ExecRoot and PidFile are dockerd's --data-root,
	// --exec-root and --pidfile.
	DataRoot, ExecRoot, PidFile string
	// Socket is the API socket; Host is it as a URL (unix://…), for
	// `docker -H` and Nomad's docker driver `endpoint`.
	Socket, Host string
	// CgroupParent is dockerd's --cgroup-parent: each container's cgroup
	// is CgroupParent/<container ID> in every hierarchy.
	CgroupParent string
	// Containerd is the private containerd the engine runs its containers
	// on.
	Containerd *ctrd.Daemon

	t       testing.TB
	cfg     config
	proc    *hostcheck.Process
	logFile *os.File
	// before records which of hostPaths and leakPaths existed, and the
	// shim sockets, before Start.
	before map[string]bool

	imageOnce sync.Once
	image     string
	imageErr  error

	stopOnce sync.Once
	stopErr  error
	finalLog []byte
}

// Start starts a private containerd (e2e/ctrd), writes daemon.json, runs the
// WithConfigure functions on it, starts dockerd and waits until it answers
// /_ping. It registers a t.Cleanup that removes the containers, stops the
// engine, prints its log if the test failed, and fails the test if
// anything is left behind. Start calls t.Fatal on error. Needs root.
func Start(ctx context.Context, t testing.TB, opts ...Option) *Daemon {
	t.Helper()
	cfg := config{dockerd: DefaultDockerdBin(), docker: DefaultDockerBin(), readyTimeout: 60 * time.Second, stopTimeout: 30 * time.Second}
	for _, o := range opts {
		o(&cfg)
	}
	for _, b := range []*string{&cfg.dockerd, &cfg.docker} {
		p, err := exec.LookPath(*b)
		if err != nil {
			t.Fatalf("%s: %v (Debian package `docker.io`: scripts/install-deps.sh; or set DOCKERD_BIN, DOCKER_BIN)", *b, err)
		}
		*b = p
	}
	if os.Geteuid() != 0 {
		t.Fatalf("the Docker e2e harness must run as root; euid is %d", os.Geteuid())
	}
	d := &Daemon{t: t, cfg: cfg, before: map[string]bool{}}
	for _, p := range append(append([]string(nil), hostPaths...), leakPaths...) {
		_, err := os.Lstat(p)
		d.before[p] = err == nil
	}
	for _, s := range shimSockets() {
		d.before[s] = true
	}
	// Stopped after dockerd: cleanups run last registered first.
	d.Containerd = ctrd.Start(ctx, t, cfg.ctrdOpts...)

	dir, err := os.MkdirTemp("", "gmx-dkr")
	if err != nil {
		t.Fatal(err)
	}
	d.Dir = dir
	d.ConfigPath = filepath.Join(dir, "daemon.json")
	d.LogPath = filepath.Join(dir, "dockerd.log")
	d.DataRoot = filepath.Join(dir, "data")
	d.ExecRoot = filepath.Join(dir, "exec")
	d.PidFile = filepath.Join(dir, "dockerd.pid")
	d.Socket = filepath.Join(dir, "docker.sock")
	d.Host = "unix://" + d.Socket
	d.CgroupParent = "/" + filepath.Base(dir)
	if err := d.writeConfig(); err != nil {
		os.RemoveAll(dir)
		t.Fatal(err)
	}
	if d.logFile, err = os.Create(d.LogPath); err != nil {
		os.RemoveAll(dir)
		t.Fatal(err)
	}
	cmd := exec.Command(cfg.dockerd,
		"--config-file", d.ConfigPath,
		"--data-root", d.DataRoot,
		"--exec-root", d.ExecRoot,
		"--pidfile", d.PidFile,
		"-H", d.Host,
		"--containerd", d.Containerd.Address,
		"--containerd-namespace", Namespace,
		"--containerd-plugins-namespace", Namespace+"-plugins",
		"--cgroup-parent", d.CgroupParent,
		"--iptables=false", "--ip-masq=false", "--bridge=none",
		"--storage-driver", "vfs",
		"--debug")
	cmd.Dir = dir
	cmd.Stdout = d.logFile
	cmd.Stderr = d.logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Env = append(hostcheck.FilterEnv(os.Environ(), "DOCKER_HOST", "DOCKER_CONFIG", "NOTIFY_SOCKET"), markerEnv+"="+dir)
	proc, err := hostcheck.StartProcess("dockerd", cmd)
	if err != nil {
		d.logFile.Close()
		os.RemoveAll(dir)
		t.Fatalf("starting %s: %v", cfg.dockerd, err)
	}
	d.proc = proc
	t.Logf("dockerd pid %d, dir %s, containerd %s", proc.Pid(), dir, d.Containerd.Address)
	d.proc.StopAtEnd(t, d.Stop, d.dumpLog)
	wctx, cancel := context.WithTimeout(ctx, cfg.readyTimeout)
	defer cancel()
	if err := d.waitReady(wctx); err != nil {
		t.Fatalf("dockerd not ready: %v", err)
	}
	return d
}

// writeConfig writes the harness's daemon.json, then lets the WithConfigure
// functions edit it.
func (d *Daemon) writeConfig() error {
	b, err := json.MarshalIndent(map[string]any{
		// dockerd 20.10 keeps its ID key in /etc/docker/key.json unless
		// told otherwise (there is no flag for it).
		"deprecated-key-path": filepath.Join(d.Dir, "key.json"),
		"log-driver":          "json-file",
	}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(d.ConfigPath, append(b, '\n'), 0o644); err != nil {
		return err
	}
	for _, f := range d.cfg.configure {
		if err := f(d.ConfigPath); err != nil {
			return fmt.Errorf("configuring %s: %w", d.ConfigPath, err)
		}
	}
	return nil
}

// waitReady waits until dockerd answers GET /_ping on its socket.
func (d *Daemon) waitReady(ctx context.Context) error {
	client := d.HTTPClient()
	var last string
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://docker/_ping", nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				d.t.Logf("dockerd answering on %s (API %s)", d.Socket, resp.Header.Get("Api-Version"))
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w; last: %s", ctx.Err(), last)
		case <-d.proc.Exited():
			return fmt.Errorf("dockerd exited early (%v); last: %s", d.proc.WaitErr(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// HTTPClient returns a client of the engine's API socket (URLs name any
// host: http://docker/…).
func (d *Daemon) HTTPClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", d.Socket)
		},
	}}
}

// Log returns dockerd's log so far (after Stop: the whole log).
func (d *Daemon) Log() string {
	if b, err := os.ReadFile(d.LogPath); err == nil {
		return string(b)
	}
	return string(d.finalLog)
}

// Stop removes every container of the engine (`docker rm -f`, so that
// their runtime's hooks run), stops dockerd (SIGTERM, up to the stop
// timeout, then SIGKILL to its process group), and checks that nothing of
// it is left: processes (dockerd, its process group, anything with its
// marker environment or naming Dir), mounts under Dir, container cgroups
// under CgroupParent, new shim sockets, and files outside Dir (leakPaths).
// It returns an error describing anything left (and removes what it can),
// removes the cgroup parent dirs and hostPaths dockerd made, and Dir. The
// private containerd is stopped afterwards by its own cleanup. Stop is
// idempotent; Start's cleanup calls it.
func (d *Daemon) Stop() error {
	d.stopOnce.Do(func() { d.stopErr = d.stop() })
	return d.stopErr
}

func (d *Daemon) stop() error {
	pid := d.proc.Pid()
	errs := d.proc.Stop(syscall.SIGTERM, d.cfg.stopTimeout, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		return d.removeAll(ctx)
	}, d.t.Logf)
	d.logFile.Close()

	var procs []hostcheck.Proc
	var mounts, cgroups, sockets []string
	if err := hostcheck.Settle(10*time.Second, func() (bool, error) {
		var err error
		if procs, err = hostcheck.Procs[hostcheck.Proc](hostcheck.Owner{
			PID: pid, Name: "dockerd", Dir: d.Dir, DirName: d.Dir,
			Marker: markerEnv + "=" + d.Dir, Descendants: true,
		}); err != nil {
			return false, err
		}
		if mounts, err = hostcheck.MountsUnder(d.Dir); err != nil {
			return false, err
		}
		if cgroups, err = d.containerCgroups(); err != nil {
			return false, err
		}
		sockets = sockets[:0]
		for _, s := range shimSockets() {
			if !d.before[s] {
				sockets = append(sockets, s)
			}
		}
		return len(procs) == 0 && len(mounts) == 0 && len(cgroups) == 0 && len(sockets) == 0, nil
	}); err != nil {
		errs = append(errs, err)
	}
	if err := hostcheck.KillProcs(procs, 5*time.Second); err != nil {
		errs = append(errs, err)
	}
	if err := hostcheck.DetachMounts(mounts, d.Dir); err != nil {
		errs = append(errs, err)
	}
	if len(cgroups) > 0 {
		errs = append(errs, fmt.Errorf("%d container cgroup(s) left under %s: %s", len(cgroups), d.CgroupParent, strings.Join(cgroups, ", ")))
	}
	if err := d.removeCgroupParent(); err != nil {
		errs = append(errs, err)
	}
	var leaked []string
	for _, p := range leakPaths {
		if _, err := os.Lstat(p); err == nil && !d.before[p] {
			leaked = append(leaked, p)
			_ = os.RemoveAll(p)
		}
	}
	for _, s := range sockets {
		leaked = append(leaked, s)
		_ = os.Remove(s)
	}
	if len(leaked) > 0 {
		errs = append(errs, fmt.Errorf("%d file(s) left outside %s (now removed):\n  %s", len(leaked), d.Dir, strings.Join(leaked, "\n  ")))
	}
	for _, p := range hostPaths {
		if !d.before[p] {
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("removing %s, which dockerd made: %w", p, err))
			}
		}
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

// removeAll removes every container of the engine, running or not.
func (d *Daemon) removeAll(ctx context.Context) error {
	out, _, err := d.Docker(ctx, "ps", "-aq", "--no-trunc")
	if err != nil {
		return fmt.Errorf("cleanup: listing containers: %w", err)
	}
	ids := strings.Fields(out)
	if len(ids) == 0 {
		return nil
	}
	d.t.Logf("cleanup: removing %d container(s)", len(ids))
	if _, _, err := d.Docker(ctx, append([]string{"rm", "-f"}, ids...)...); err != nil {
		return fmt.Errorf("cleanup: removing containers: %w", err)
	}
	return nil
}

// containerCgroups lists the cgroup dirs of containers under CgroupParent,
// in every hierarchy.
func (d *Daemon) containerCgroups() ([]string, error) {
	hier, err := hostcheck.CgroupMounts()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, h := range hier {
		ents, err := os.ReadDir(filepath.Join(h, d.CgroupParent))
		if err != nil {
			continue
		}
		for _, e := range ents {
			if e.IsDir() {
				out = append(out, filepath.Join(h, d.CgroupParent, e.Name()))
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

// removeCgroupParent removes CgroupParent (and the container cgroups left
// in it, killing their processes) from every hierarchy: dockerd makes the
// parent for its first container and never removes it.
func (d *Daemon) removeCgroupParent() error {
	hier, err := hostcheck.CgroupMounts()
	if err != nil {
		return err
	}
	var errs []error
	for _, h := range hier {
		parent := filepath.Join(h, d.CgroupParent)
		ents, err := os.ReadDir(parent)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if e.IsDir() {
				errs = append(errs, removeCgroup(filepath.Join(parent, e.Name())))
			}
		}
		errs = append(errs, removeCgroup(parent))
	}
	return errors.Join(errs...)
}

// removeCgroup kills the processes in a cgroup dir and removes it.
func removeCgroup(dir string) error {
	b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		var pid int
		if _, err := fmt.Sscan(f, &pid); err == nil && pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			pids = append(pids, pid)
		}
	}
	hostcheck.WaitGone(pids, 5*time.Second)
	var err error
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if err = os.Remove(dir); err == nil || errors.Is(err, os.ErrNotExist) || time.Now().After(end) {
			break
		}
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing cgroup %s: %w", dir, err)
	}
	if len(pids) > 0 {
		return fmt.Errorf("cgroup %s held %d process(es) (now killed): %v", dir, len(pids), pids)
	}
	return nil
}

// shimSockets lists the runc shims' sockets.
func shimSockets() []string {
	ents, _ := os.ReadDir(shimSocketDir)
	var out []string
	for _, e := range ents {
		out = append(out, filepath.Join(shimSocketDir, e.Name()))
	}
	return out
}

// dumpLog prints the tail of dockerd's log to the test log (and copies it
// to $GPUMUX_E2E_LOGDIR when set).
func (d *Daemon) dumpLog() {
	hostcheck.ReportLog(d.t.Logf, d.t.Name(), "dockerd", d.LogPath, []byte(d.Log()), 128<<10)
}
