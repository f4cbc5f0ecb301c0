package plugin

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/plugins/base"
	"github.com/hashicorp/nomad/plugins/device"
	"github.com/hashicorp/nomad/plugins/shared/hclspec"

	"github.com/gpumux/gpumux/internal/ociruntime"
	"github.com/gpumux/gpumux/internal/version"
	"github.com/gpumux/gpumux/node"
	"github.com/gpumux/gpumux/node/lease"
	"github.com/gpumux/gpumux/nodeconfig"
	"github.com/gpumux/gpumux/ocicreate"
	"github.com/gpumux/gpumux/share"
)

// Name is the plugin's name: the label of its plugin block and its file name.
const Name = nodeconfig.PluginName

// agentName is how the plugin names itself in the state directory's lock.
const agentName = "the gpumux Nomad plugin (" + Name + ")"

// Device vendor and type of every group.
const (
	Vendor     = "nvidia"
	DeviceType = "gpu"
)

// Host is what the plugin needs of the node's GPUs (the node core's).
type Host = node.Host

// OpenFunc opens the node's GPUs for a config.
type OpenFunc = node.OpenFunc

// Plugin is the gpumux Nomad device plugin: Nomad's types over the node
// core, which the plugin runs as the node's agent.
type Plugin struct {
	logger hclog.Logger
	open   OpenFunc
	runc   string

	mu   sync.Mutex
	cfg  *nodeconfig.Config
	node *node.Node // opened by the first fingerprint
}

var _ device.DevicePlugin = (*Plugin)(nil)

// Option configures a Plugin.
type Option func(*Plugin)

// WithOpen replaces how the plugin opens GPUs (tests).
func WithOpen(f OpenFunc) Option { return func(p *Plugin) { p.open = f } }

// WithRunc sets the runc the plugin asks whether a lease's container still
// exists (default $GPUMUX_RUNC, as gpumux-runtime runs it, else "runc" on
// PATH).
func WithRunc(path string) Option { return func(p *Plugin) { p.runc = path } }

// New returns a plugin that logs to logger.
func New(logger hclog.Logger, opts ...Option) *Plugin {
	p := &Plugin{logger: logger.Named(Name), runc: cmp.Or(os.Getenv(ociruntime.EnvRunc), "runc")}
	for _, o := range opts {
		o(p)
	}
	return p
}

// PluginInfo describes the plugin to Nomad.
func (p *Plugin) PluginInfo() (*base.PluginInfoResponse, error) {
	return &base.PluginInfoResponse{
		Type:              base.PluginTypeDevice,
		PluginApiVersions: []string{device.ApiVersion010},
		PluginVersion:     version.Get().Version,
		Name:              Name,
	}, nil
}

// ConfigSchema returns the plugin block's schema.
func (p *Plugin) ConfigSchema() (*hclspec.Spec, error) { return nodeconfig.Spec, nil }

// SetConfig decodes and validates the plugin config. GPUs are opened by the
// first fingerprint, so that a node without a driver reports it there.
func (p *Plugin) SetConfig(c *base.Config) error {
	cfg, err := nodeconfig.Decode(c.PluginConfig)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cfg = cfg
	return nil
}

// Fingerprint opens the node and runs it (see node.Node.Start: MIG layouts,
// MPS daemons, XIDs), then sends the complete device list at once, every
// fingerprint_period, and whenever a share's health changes. It serves the
// node's metrics at metrics_addr while it runs, and after each fingerprint
// gives back the leases of containers runc no longer knows.
func (p *Plugin) Fingerprint(ctx context.Context) (<-chan *device.FingerprintResponse, error) {
	p.mu.Lock()
	cfg := p.cfg
	p.mu.Unlock()
	if cfg == nil {
		return nil, errors.New("Fingerprint called before SetConfig")
	}
	if !cfg.IsEnabled() {
		// As nomad-device-nvidia: Nomad logs that the plugin is not enabled
		// and stops asking it; the node is never opened.
		return nil, device.ErrPluginDisabled
	}
	out := make(chan *device.FingerprintResponse)
	go p.fingerprintLoop(ctx, cfg, out)
	return out, nil
}

func (p *Plugin) fingerprintLoop(ctx context.Context, cfg *nodeconfig.Config, out chan<- *device.FingerprintResponse) {
	defer close(out)
	send := func(r *device.FingerprintResponse) bool {
		select {
		case out <- r:
			return r.Error == nil
		case <-ctx.Done():
			return false
		}
	}
	n, err := p.start(ctx, cfg)
	if err != nil {
		p.logger.Error("cannot use the node's GPUs", "error", err)
		send(&device.FingerprintResponse{Error: err})
		return
	}
	alive := node.RuncAlive(ctx, p.runc, "")
	var last []*device.DeviceGroup // the last good fingerprint
	for u := range n.Watch(ctx, cfg.Period()) {
		var groups []*device.DeviceGroup
		switch {
		case u.Err == nil:
			groups = deviceGroups(u.Catalog, n.Health)
			last = groups
		case last == nil:
			p.logger.Error("fingerprint failed", "error", u.Err)
			send(&device.FingerprintResponse{Error: u.Err})
			return
		default:
			// A fingerprint error makes Nomad stop the plugin for good; after a
			// good fingerprint, keep the devices known but unusable until the
			// GPUs can be read again.
			p.logger.Error("fingerprint failed; marking every share unhealthy until the next one succeeds", "error", u.Err)
			groups = allUnhealthy(last, fmt.Sprintf("fingerprint failed: %v", u.Err))
		}
		if !send(&device.FingerprintResponse{Devices: groups}) {
			return
		}
		// As gpumux agent does: a container gone while nothing watched its
		// delete (the runtime socket's agent was not running, a runc
		// killed) gives its shares back now, not at the next create.
		n.ReclaimLogged(ctx, alive)
	}
}

// start opens the node once and runs it as the node's agent.
func (p *Plugin) start(ctx context.Context, cfg *nodeconfig.Config) (*node.Node, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.node != nil {
		return p.node, nil
	}
	// A reservation carries no hooks: its tasks get the driver's files
	// where the host has them (see reservation).
	opts := []node.Option{node.WithLogger(p.logger), node.WithIssuer("nomad"), node.WithDriverAtHostPaths()}
	if p.open != nil {
		opts = append(opts, node.WithOpen(p.open))
	}
	n, err := node.Open(cfg, opts...)
	if err != nil {
		return nil, err
	}
	if err := n.Start(ctx, agentName); err != nil {
		n.Close()
		return nil, err
	}
	if cfg.MetricsAddr != "" {
		addr, err := node.ServeMetrics(ctx, cfg.MetricsAddr, n.Collectors(node.AskNomad("", false))...)
		if err != nil {
			n.Close()
			return nil, err
		}
		p.logger.Info("serving metrics", "url", fmt.Sprintf("http://%s/metrics", addr))
	}
	if cfg.RuntimeSocket != "" {
		p.serveRuntime(ctx, cfg)
	}
	// When Nomad ends the fingerprint, the node stops: MPS daemons and MIG
	// instances stay for the next start.
	context.AfterFunc(ctx, func() {
		p.mu.Lock()
		if p.node == n {
			p.node = nil
		}
		p.mu.Unlock()
		n.Close()
	})
	p.node = n
	return n, nil
}

// serveRuntime serves gpumux-runtime's creates and hooks on the config's
// runtime_socket until ctx ends, as gpumux agent does: a docker task
// started through gpumux-runtime (nvidia_runtime = "gpumux") then has its
// create decided here, in the process that has the GPUs open, rather than
// in a gpumux-runtime-core that opens them for each container. It decides
// with a node of its own, opened as gpumux-runtime's core opens it (the
// driver's staged tree and hooks, not the reservations' files at their
// host paths), and answers only a gpumux-runtime whose node config file
// decodes to this plugin's config. Where it cannot listen it says so and
// gpumux-runtime-core decides, as before.
func (p *Plugin) serveRuntime(ctx context.Context, cfg *nodeconfig.Config) {
	log := p.logger.Named("runtime")
	env := ocicreate.HookEnv(cfg.RuntimeSocket)
	opts := []node.Option{node.WithLogger(log), node.WithIssuer("nomad"), node.WithHookEnv(env...)}
	if p.open != nil {
		opts = append(opts, node.WithOpen(p.open))
	}
	rn, err := node.Open(cfg, opts...)
	if err != nil {
		log.Warn("not serving gpumux-runtime: its creates start gpumux-runtime-core", "error", err)
		return
	}
	srv := ocicreate.NewServer(rn, "", cfg.StateDir, node.RuncAlive(ctx, p.runc, ""),
		ocicreate.MatchConfig(cfg), ocicreate.WithLogger(log), ocicreate.WithHookEnv(env...))
	go func() {
		defer rn.Close()
		ln, err := listenRetrying(ctx, cfg.RuntimeSocket)
		if err != nil {
			log.Warn("not serving gpumux-runtime: its creates start gpumux-runtime-core", "error", err)
			return
		}
		log.Info("serving gpumux-runtime", "socket", cfg.RuntimeSocket)
		if err := srv.Serve(ctx, ln); err != nil {
			log.Error("serving gpumux-runtime stopped", "error", err)
		}
	}()
}

// listenRetrying listens on the runtime socket, trying again for a while:
// when Nomad restarts the fingerprint, the last one's server may still
// hold the socket for a moment.
func listenRetrying(ctx context.Context, path string) (*net.UnixListener, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		ln, err := ocicreate.Listen(path)
		if err == nil || time.Now().After(deadline) {
			return ln, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// allUnhealthy returns a copy of groups whose devices are all unhealthy.
func allUnhealthy(groups []*device.DeviceGroup, why string) []*device.DeviceGroup {
	out := make([]*device.DeviceGroup, len(groups))
	for i, g := range groups {
		c := *g
		c.Devices = make([]*device.Device, len(g.Devices))
		for j, d := range g.Devices {
			dc := *d
			dc.Healthy, dc.HealthDesc = false, why
			c.Devices[j] = &dc
		}
		out[i] = &c
	}
	return out
}

// enabled reports whether the config (once set) leaves the plugin enabled.
func (p *Plugin) enabled() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cfg == nil || p.cfg.IsEnabled()
}

// current returns the node and its last catalog, or an error before the
// first fingerprint.
func (p *Plugin) current() (*node.Node, *share.Catalog, error) {
	p.mu.Lock()
	n := p.node
	p.mu.Unlock()
	if n == nil || n.Current() == nil {
		return nil, nil, errors.New("no devices fingerprinted yet")
	}
	return n, n.Current(), nil
}

// Reserve returns the container edits of the given shares. IDs that are
// unknown, stale or unhealthy are named in the error.
func (p *Plugin) Reserve(ids []string) (*device.ContainerReservation, error) {
	if !p.enabled() {
		return nil, device.ErrPluginDisabled
	}
	n, catalog, err := p.current()
	if err != nil {
		return nil, err
	}
	shares, err := catalog.Lookup(ids...)
	if err != nil {
		return nil, err
	}
	var sick []string
	for _, s := range shares {
		if ok, why := n.Health(s); !ok {
			sick = append(sick, fmt.Sprintf("%s (%s)", s.ID, why))
		}
	}
	if len(sick) > 0 {
		return nil, fmt.Errorf("unhealthy shares: %v", sick)
	}
	edits, err := n.Edits(shares)
	if err != nil {
		return nil, err
	}
	// Record the reservation for gpumux-runtime (Nomad's docker driver with
	// nvidia_runtime = "gpumux"): it honours GPUMUX_SHARES only with this
	// single-use token.
	token, err := reserve(n.LeasePath(), ids)
	if err != nil {
		return nil, err
	}
	edits.Env[share.EnvReservation] = token
	return reservation(edits), nil
}

// reservationTTL bounds how long an unclaimed reservation is kept (tasks of
// the exec driver never claim theirs).
const reservationTTL = time.Hour

// reserve records ids in the node's lease store under a new random token.
func reserve(store string, ids []string) (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	token := hex.EncodeToString(b)
	st, err := lease.Open(store)
	if err != nil {
		return "", fmt.Errorf("recording the reservation: %w", err)
	}
	defer st.Close()
	if err := st.Reserve(context.Background(), token, ids, reservationTTL); err != nil {
		return "", fmt.Errorf("recording the reservation: %w", err)
	}
	return token, nil
}

// reservation turns edits into what Nomad's drivers apply: env, device
// nodes and mounts. A reservation carries no hooks: a task gets the driver's
// libraries at their host paths, where images of the host's family of
// distributions find them without a linker cache; docker tasks started
// through gpumux-runtime (nvidia_runtime = "gpumux") get the hooks too.
func reservation(e share.Edits) *device.ContainerReservation {
	r := &device.ContainerReservation{Envs: e.Env}
	for _, d := range e.DeviceNodes {
		r.Devices = append(r.Devices, &device.DeviceSpec{TaskPath: d.ContainerPath, HostPath: d.HostPath, CgroupPerms: d.Permissions})
	}
	for _, m := range e.Mounts {
		if m.Scratch {
			continue // Nomad's reservations bind host paths only; the mounts below it go to the root
		}
		r.Mounts = append(r.Mounts, &device.Mount{TaskPath: m.ContainerPath, HostPath: m.HostPath, ReadOnly: m.ReadOnly})
	}
	return r
}
