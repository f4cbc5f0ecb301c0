package nomadagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpumux/gpumux/e2e/internal/hostcheck"
)

const (
	// NomadVersion is the Nomad version the harness is written against
	// (built by scripts/build-nomad.sh).
	NomadVersion = "1.10.5"

	// PluginName is the name of the gpumux device plugin binary in
	// plugin_dir and of its `plugin` block in the agent configuration.
	PluginName = "nomad-device-gpumux"

	// FingerprintDenylist keeps the agent from probing cloud metadata
	// endpoints (which would stall fingerprinting without network).
	FingerprintDenylist = "env_aws,env_gce,env_azure,env_digitalocean"

	// markerEnv is set in the agent's environment (and so inherited by the
	// executor and logmon processes it spawns) to find its processes later.
	markerEnv = "GPUMUX_E2E_AGENT"
)

// DefaultNomadBin returns the Nomad binary to use: $NOMAD_BIN, else the
// cache path scripts/build-nomad.sh builds into
// (${GPUMUX_CACHE:-$HOME/.cache/gpumux}/nomad-v1.10.5/nomad).
func DefaultNomadBin() string {
	if b := os.Getenv("NOMAD_BIN"); b != "" {
		return b
	}
	return filepath.Join(hostcheck.CacheDir(), "nomad-v"+NomadVersion, "nomad")
}

// DefaultPluginDir returns the plugin dir holding the built gpumux plugin:
// $GPUMUX_PLUGIN_DIR (set by the Makefile), else bin/plugins at the module
// root (found by walking up from the working directory to go.mod), where
// `make build` puts it.
func DefaultPluginDir() string {
	if d := os.Getenv("GPUMUX_PLUGIN_DIR"); d != "" {
		return d
	}
	dir, err := os.Getwd()
	if err != nil {
		return filepath.Join("bin", "plugins")
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return filepath.Join(d, "bin", "plugins")
		}
		if filepath.Dir(d) == d {
			return filepath.Join(dir, "bin", "plugins")
		}
	}
}

// role is what an agent runs: a dev agent, a server only or a client only.
type role int

const (
	roleDev role = iota
	roleServer
	roleClient
)

type config struct {
	role         role
	servers      []string // roleClient: the servers' RPC addresses
	netns        *NetNS
	bin          string
	pluginDir    string
	pluginConfig *string
	extraConfig  []string
	env          []string
	logLevel     string
	drivers      []string
	devices      [][2]string
	readyTimeout time.Duration
	stopTimeout  time.Duration
	afterStop    []func()
}

// Option configures Start.
type Option func(*config)

// AsServer makes the agent a server only (`server { enabled = true }`,
// no client), the single server of its cluster (bootstrap_expect = 1).
// Start then waits for it to be the leader. Use it with InNetNS; its RPC
// address for AsClient is ServerAddr.
func AsServer() Option { return func(c *config) { c.role = roleServer } }

// AsClient makes the agent a client only that joins the servers at these
// RPC addresses (host:port, `client { servers = [...] }`). Start then
// waits for its own node to be ready. Use it with InNetNS.
func AsClient(servers ...string) Option {
	return func(c *config) { c.role, c.servers = roleClient, servers }
}

// NetNS is a network namespace an agent runs in (a netns.Node's fields).
type NetNS struct {
	// Path is the namespace's binding, e.g. /run/netns/NAME.
	Path string
	// Interface is the namespace's link to the other agents: a client's
	// network_interface, whose address it advertises for its tasks.
	Interface string
	// Addr is the address on Interface.
	Addr string
}

// InNetNS runs the agent in a network namespace (`nsenter --net=PATH --
// nomad agent ...`: the network namespace only, so that its mounts stay
// visible to the leftover checks), where every executor, logmon and task
// it starts runs too. The agent binds Nomad's default ports on all the
// namespace's addresses and advertises ns.Addr. Without it the agent runs
// in the caller's namespace on free ports of 127.0.0.1.
func InNetNS(ns NetNS) Option { return func(c *config) { c.netns = &ns } }

// WithNomadBin overrides the Nomad binary (default DefaultNomadBin()).
func WithNomadBin(path string) Option { return func(c *config) { c.bin = path } }

// WithPluginDir sets the agent's plugin_dir (default: an empty temp dir).
// Nomad loads every file in it as a plugin; the gpumux plugin must be named
// PluginName.
func WithPluginDir(dir string) Option { return func(c *config) { c.pluginDir = dir } }

// HTTPAddrPlaceholder, in WithPluginConfig's body or WithAgentConfig's
// text, is replaced by the agent's HTTP address (HTTPAddr), which is chosen
// when the agent starts: for a plugin that talks to its own agent.
const HTTPAddrPlaceholder = "@NOMAD_HTTP_ADDR@"

// WithPluginConfig adds
//
//	plugin "nomad-device-gpumux" { config { <body> } }
//
// to the agent configuration; body is HCL text. A body without
// runtime_socket gets runtime_socket = "": a test serves gpumux-runtime
// only where it names a socket, never at the node's default path. Without
// this option no plugin block is written.
func WithPluginConfig(body string) Option {
	return func(c *config) { c.pluginConfig = &body }
}

// WithAgentConfig appends raw top-level HCL to the agent configuration
// (e.g. `plugin "exec" { config { ... } }`). Do not add a second `client`
// block; use separate options for client settings.
func WithAgentConfig(hcl string) Option {
	return func(c *config) { c.extraConfig = append(c.extraConfig, hcl) }
}

// WithEnv adds KEY=VALUE entries to the agent's environment (inherited by
// the plugins it launches).
func WithEnv(kv ...string) Option { return func(c *config) { c.env = append(c.env, kv...) } }

// WithAfterStop runs f once the agent has exited and before Stop looks for
// leftovers: for what a plugin deliberately leaves running (MPS daemons keep
// serving their clients across plugin restarts) and a test must end itself.
func WithAfterStop(f func()) Option { return func(c *config) { c.afterStop = append(c.afterStop, f) } }

// WithLogLevel sets the agent log_level (default DEBUG).
func WithLogLevel(level string) Option { return func(c *config) { c.logLevel = level } }

// WithDrivers sets the task drivers that must be detected and healthy
// before Start returns (default: "exec"). WithDrivers() waits for none.
func WithDrivers(names ...string) Option { return func(c *config) { c.drivers = names } }

// WaitForDevice makes Start also wait until the node fingerprints a device
// group with this vendor and type and at least one instance. May be given
// several times.
func WaitForDevice(vendor, typ string) Option {
	return func(c *config) { c.devices = append(c.devices, [2]string{vendor, typ}) }
}

// WithReadyTimeout bounds how long Start waits for the node to be ready
// (default 90s; ctx may end it earlier).
func WithReadyTimeout(d time.Duration) Option { return func(c *config) { c.readyTimeout = d } }

// WithStopTimeout bounds how long Stop waits after SIGINT before it SIGKILLs
// the process group (default 60s).
func WithStopTimeout(d time.Duration) Option { return func(c *config) { c.stopTimeout = d } }

// Agent is a running Nomad agent.
type Agent struct {
	// Dir is the test's temp dir holding the config and the log.
	Dir string
	// DataDir is the agent's data_dir (short path outside Dir, because
	// unix socket paths inside alloc dirs are limited to 108 bytes).
	DataDir    string
	PluginDir  string
	ConfigPath string
	LogPath    string
	// HTTPAddr is the base URL of the HTTP API, e.g. http://127.0.0.1:4646.
	HTTPAddr string
	// Client is an API client for the agent.
	Client *api.Client
	// NodeID is the ID of the agent's client node ("" for a server-only
	// agent).
	NodeID string

	t       testing.TB
	cfg     config
	rpcAddr string
	proc    *hostcheck.Process
	logFile *os.File

	stopOnce sync.Once
	stopErr  error
}

// Start writes an agent configuration, starts `nomad agent -dev` (or a
// server or client agent: AsServer, AsClient) and waits until its client
// node is ready (and the requested drivers/devices are fingerprinted) or,
// for a server, until it leads. It registers a t.Cleanup that stops the
// agent, prints the agent log if the test failed, and fails the test if
// anything is left behind. Start calls t.Fatal on error.
func Start(ctx context.Context, t testing.TB, opts ...Option) *Agent {
	t.Helper()
	cfg := config{
		bin:          DefaultNomadBin(),
		logLevel:     "DEBUG",
		drivers:      []string{"exec"},
		readyTimeout: 90 * time.Second,
		stopTimeout:  60 * time.Second,
	}
	for _, o := range opts {
		o(&cfg)
	}
	if _, err := os.Stat(cfg.bin); err != nil {
		t.Fatalf("nomad binary %s: %v (build it with `make nomad` or set NOMAD_BIN)", cfg.bin, err)
	}
	if os.Geteuid() != 0 {
		t.Fatalf("the Nomad e2e harness must run as root (exec driver, cgroups, mounts); euid is %d", os.Geteuid())
	}
	switch {
	case cfg.role == roleClient && len(cfg.servers) == 0:
		t.Fatalf("AsClient needs the servers' RPC addresses")
	case cfg.role != roleDev && cfg.netns == nil:
		t.Fatalf("AsServer and AsClient need InNetNS: agents of one cluster use Nomad's default ports, each in a namespace of its own")
	}
	if cfg.pluginConfig != nil {
		p := filepath.Join(cfg.pluginDir, PluginName)
		if cfg.pluginDir == "" {
			t.Fatalf("WithPluginConfig needs WithPluginDir (e.g. nomadagent.DefaultPluginDir())")
		}
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("gpumux plugin %s: %v (build it with `make build`)", p, err)
		}
	}

	a := &Agent{t: t, cfg: cfg, Dir: t.TempDir()}
	dataDir, err := os.MkdirTemp("", "gmx-nomad-")
	if err != nil {
		t.Fatalf("creating data dir: %v", err)
	}
	a.DataDir = dataDir
	a.PluginDir = cfg.pluginDir
	if a.PluginDir == "" {
		a.PluginDir = filepath.Join(a.Dir, "plugins")
		if err := os.MkdirAll(a.PluginDir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	a.ConfigPath = filepath.Join(a.Dir, "agent.hcl")
	a.LogPath = filepath.Join(a.Dir, "agent.log")

	ports := defaultPorts
	host := "127.0.0.1"
	if cfg.netns != nil {
		host = cfg.netns.Addr
	} else if ports, err = freePorts(3); err != nil {
		t.Fatalf("choosing ports: %v", err)
	}
	a.HTTPAddr = "http://" + net.JoinHostPort(host, strconv.Itoa(ports[0]))
	a.rpcAddr = net.JoinHostPort(host, strconv.Itoa(ports[1]))
	hcl := a.renderConfig(ports)
	if err := os.WriteFile(a.ConfigPath, []byte(hcl), 0o644); err != nil {
		t.Fatal(err)
	}

	a.logFile, err = os.Create(a.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"agent", "-config=" + a.ConfigPath}
	if cfg.role == roleDev {
		args = []string{"agent", "-dev", "-config=" + a.ConfigPath}
	}
	cmd := exec.Command(cfg.bin, args...)
	if cfg.netns != nil {
		cmd = exec.Command("nsenter", append([]string{"--net=" + cfg.netns.Path, "--", cfg.bin}, args...)...)
	}
	cmd.Dir = a.Dir
	cmd.Stdout = a.logFile
	cmd.Stderr = a.logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Env = append(hostcheck.FilterEnv(os.Environ(), "NOMAD_ADDR", "NOMAD_TOKEN", "NOMAD_REGION", "NOMAD_NAMESPACE"),
		markerEnv+"="+a.DataDir)
	cmd.Env = append(cmd.Env, cfg.env...)
	proc, err := hostcheck.StartProcess("agent", cmd)
	if err != nil {
		a.logFile.Close()
		os.RemoveAll(a.DataDir)
		t.Fatalf("starting %s: %v", cfg.bin, err)
	}
	a.proc = proc
	t.Logf("nomad agent pid %d, http %s, config %s, log %s, data %s",
		proc.Pid(), a.HTTPAddr, a.ConfigPath, a.LogPath, a.DataDir)

	a.proc.StopAtEnd(t, a.Stop, a.dumpLog)

	apiCfg := api.DefaultConfig()
	apiCfg.Address = a.HTTPAddr
	a.Client, err = api.NewClient(apiCfg)
	if err != nil {
		t.Fatalf("api client: %v", err)
	}

	wctx, cancel := context.WithTimeout(ctx, cfg.readyTimeout)
	defer cancel()
	if err := a.waitReady(wctx); err != nil {
		t.Fatalf("nomad agent not ready: %v", err)
	}
	return a
}

// defaultPorts are Nomad's HTTP, RPC and Serf ports, which agents in
// network namespaces of their own use.
var defaultPorts = []int{4646, 4647, 4648}

// ServerAddr is the RPC address (host:port) of the agent's server, for
// AsClient.
func (a *Agent) ServerAddr() string { return a.rpcAddr }

// renderConfig writes the agent configuration. A client's alloc_dir and
// state_dir are Nomad's defaults under its own data_dir, so no two agents
// share them. All agents of a host share Nomad's cgroups (v1: /nomad under
// each controller; client `cgroup_parent` only names it to tasks in Nomad
// 1.10, NOMAD_PARENT_CGROUP): each task's cgroup is named for its
// allocation and task, which no two clients share, and each client writes
// the same cpuset (all cores) to the shared partition, as long as no task
// reserves cores (`resources { cores = N }`).
func (a *Agent) renderConfig(ports []int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "data_dir   = %q\n", a.DataDir)
	fmt.Fprintf(&b, "plugin_dir = %q\n", a.PluginDir)
	fmt.Fprintf(&b, "log_level  = %q\n", a.cfg.logLevel)
	fmt.Fprintf(&b, "disable_update_check = true\n\n")
	if ns := a.cfg.netns; ns != nil {
		fmt.Fprintf(&b, "bind_addr = \"0.0.0.0\"\n")
		fmt.Fprintf(&b, "advertise {\n  http = %q\n  rpc  = %q\n  serf = %q\n}\n\n", ns.Addr, ns.Addr, ns.Addr)
	} else {
		fmt.Fprintf(&b, "bind_addr = \"127.0.0.1\"\n")
		fmt.Fprintf(&b, "ports {\n  http = %d\n  rpc  = %d\n  serf = %d\n}\n\n", ports[0], ports[1], ports[2])
	}
	if a.cfg.role == roleServer {
		fmt.Fprintf(&b, "server {\n  enabled          = true\n  bootstrap_expect = 1\n}\n")
	} else {
		fmt.Fprintf(&b, "client {\n")
		if a.cfg.role == roleClient {
			fmt.Fprintf(&b, "  enabled = true\n  servers = [%s]\n", quoteList(a.cfg.servers))
		}
		if a.cfg.netns != nil {
			fmt.Fprintf(&b, "  network_interface = %q\n", a.cfg.netns.Interface)
		}
		fmt.Fprintf(&b, "  options = {\n    \"fingerprint.denylist\" = %q\n  }\n}\n", FingerprintDenylist)
	}
	if a.cfg.pluginConfig != nil {
		body := *a.cfg.pluginConfig
		if !strings.Contains(body, "runtime_socket") {
			// Not the node's default socket: a test serves gpumux-runtime
			// only where it says (runtime_socket = "<its path>").
			body += "\n    runtime_socket = \"\"\n"
		}
		fmt.Fprintf(&b, "\nplugin %q {\n  config {\n%s\n  }\n}\n", PluginName, body)
	}
	for _, x := range a.cfg.extraConfig {
		fmt.Fprintf(&b, "\n%s\n", x)
	}
	return strings.ReplaceAll(b.String(), HTTPAddrPlaceholder, a.HTTPAddr)
}

// quoteList writes strings as the items of an HCL list.
func quoteList(items []string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, ", ")
}

// waitReady waits for the node to be ready, with the requested drivers
// healthy and devices fingerprinted.
func (a *Agent) waitReady(ctx context.Context) error {
	var last string
	for {
		select {
		case <-a.proc.Exited():
			return fmt.Errorf("agent exited early (%v)", a.proc.WaitErr())
		default:
		}
		ok, why := a.checkReady(ctx)
		if ok {
			return nil
		}
		last = why
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w; last state: %s", ctx.Err(), last)
		case <-a.proc.Exited():
			return fmt.Errorf("agent exited early (%v); last state: %s", a.proc.WaitErr(), last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func (a *Agent) checkReady(ctx context.Context) (bool, string) {
	q := (&api.QueryOptions{}).WithContext(ctx)
	switch a.cfg.role {
	case roleServer:
		leader, err := a.Client.Status().Leader()
		if err != nil || leader == "" {
			return false, fmt.Sprintf("no leader yet (%v)", err)
		}
		if leader != a.rpcAddr {
			return false, fmt.Sprintf("the leader is %s, not this server (%s)", leader, a.rpcAddr)
		}
		return true, ""
	case roleClient:
		self, err := a.Client.Agent().Self()
		if err != nil {
			return false, "agent self: " + err.Error()
		}
		a.NodeID = self.Stats["client"]["node_id"]
		if a.NodeID == "" {
			return false, "the agent has no client node ID yet"
		}
	default:
		nodes, _, err := a.Client.Nodes().List(q)
		if err != nil {
			return false, "listing nodes: " + err.Error()
		}
		if len(nodes) == 0 {
			return false, "no client node registered yet"
		}
		if len(nodes) > 1 {
			return false, fmt.Sprintf("%d nodes registered, want 1", len(nodes))
		}
		a.NodeID = nodes[0].ID
	}
	node, _, err := a.Client.Nodes().Info(a.NodeID, q)
	if err != nil {
		return false, "node info: " + err.Error()
	}
	if node.Status != api.NodeStatusReady {
		return false, fmt.Sprintf("node %s status %q", node.ID, node.Status)
	}
	for _, d := range a.cfg.drivers {
		di := node.Drivers[d]
		if di == nil || !di.Detected || !di.Healthy {
			desc := "not fingerprinted"
			if di != nil {
				desc = fmt.Sprintf("detected=%v healthy=%v: %s", di.Detected, di.Healthy, di.HealthDescription)
			}
			return false, fmt.Sprintf("driver %q %s", d, desc)
		}
	}
	for _, want := range a.cfg.devices {
		found := false
		if node.NodeResources != nil {
			for _, g := range node.NodeResources.Devices {
				if g.Vendor == want[0] && g.Type == want[1] && len(g.Instances) > 0 {
					found = true
				}
			}
		}
		if !found {
			return false, fmt.Sprintf("no device %s/%s fingerprinted yet", want[0], want[1])
		}
	}
	return true, ""
}

// Exited is closed when the agent process has exited.
func (a *Agent) Exited() <-chan struct{} { return a.proc.Exited() }

// Stop stops the agent (SIGINT, wait up to the stop timeout, then SIGKILL
// to its process group), then checks that no process and no mount of this
// agent is left. It returns an error describing anything left behind (and
// then kills/unmounts those so later tests are not affected). The data dir
// is removed when nothing is mounted under it. Stop is idempotent; Start's
// cleanup calls it.
func (a *Agent) Stop() error {
	a.stopOnce.Do(func() { a.stopErr = a.stop() })
	return a.stopErr
}

func (a *Agent) stop() error {
	// Whatever is still in the agent's process group goes too.
	errs := a.proc.Stop(syscall.SIGINT, a.cfg.stopTimeout, nil, a.t.Logf)
	a.logFile.Close()
	for _, f := range a.cfg.afterStop {
		f()
	}

	// Executors/logmon may need a moment to notice the agent is gone.
	var procs []Proc
	var mounts []string
	if err := hostcheck.Settle(10*time.Second, func() (bool, error) {
		var err error
		procs, mounts, err = a.Leftovers()
		return len(procs) == 0 && len(mounts) == 0, err
	}); err != nil {
		errs = append(errs, err)
	}
	if err := hostcheck.KillProcs(procs, 0); err != nil {
		errs = append(errs, err)
	}
	if err := hostcheck.DetachMounts(mounts, a.DataDir); err != nil {
		errs = append(errs, err)
	}
	if _, rest, err := a.Leftovers(); err == nil && len(rest) == 0 {
		if err := os.RemoveAll(a.DataDir); err != nil {
			errs = append(errs, fmt.Errorf("removing data dir: %w", err))
		}
	} else {
		errs = append(errs, fmt.Errorf("not removing data dir %s: mounts remain: %v", a.DataDir, rest))
	}
	return errors.Join(errs...)
}

// Proc is a process found by Leftovers.
type Proc struct {
	PID     int
	Cmdline string
	// Why says how it was attributed to the agent.
	Why string
}

func (p Proc) String() string { return hostcheck.Proc(p).String() }

// Leftovers lists live processes that belong to this agent (the agent
// itself, its process group, anything with the agent's marker environment
// variable such as `nomad executor` and `nomad logmon`, anything whose
// command line, root or cwd is under the data dir, such as chrooted exec
// tasks, and anything in its network namespace) and the mount points under
// the data dir, from /proc/self/mountinfo.
func (a *Agent) Leftovers() ([]Proc, []string, error) {
	owner := hostcheck.Owner{
		PID:     a.proc.Pid(),
		Name:    "agent",
		Dir:     a.DataDir,
		DirName: "data dir",
		Marker:  markerEnv + "=" + a.DataDir,
	}
	if a.cfg.netns != nil {
		owner.NetNS = a.cfg.netns.Path
	}
	procs, err := hostcheck.Procs[Proc](owner)
	if err != nil {
		return nil, nil, err
	}
	mounts, err := hostcheck.MountsUnder(a.DataDir)
	if err != nil {
		return nil, nil, err
	}
	return procs, mounts, nil
}

// dumpLog prints the tail of the agent log to the test log.
func (a *Agent) dumpLog() {
	const max = 256 << 10
	f, err := os.Open(a.LogPath)
	if err != nil {
		a.t.Logf("agent log %s: %v", a.LogPath, err)
		return
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > max {
		_, _ = f.Seek(fi.Size()-max, io.SeekStart)
		a.t.Logf("agent log %s is %d bytes; last %d bytes follow", a.LogPath, fi.Size(), max)
	}
	b, _ := io.ReadAll(f)
	a.t.Logf("----- nomad agent log (%s) -----\n%s\n----- end of nomad agent log -----", a.LogPath, b)
	if dir := os.Getenv("GPUMUX_E2E_LOGDIR"); dir != "" {
		name := strings.NewReplacer("/", "_", " ", "_").Replace(a.t.Name()) + ".nomad.log"
		if err := os.MkdirAll(dir, 0o755); err == nil {
			if full, err := os.ReadFile(a.LogPath); err == nil {
				_ = os.WriteFile(filepath.Join(dir, name), full, 0o644)
			}
		}
	}
}

// Log returns the agent log so far.
func (a *Agent) Log() string {
	b, _ := os.ReadFile(a.LogPath)
	return string(b)
}

func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
