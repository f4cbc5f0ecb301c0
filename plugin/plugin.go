package plugin

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gpumux/gpumux/nodeconfig"
	"github.com/gpumux/gpumux/runtimehook/lease"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/plugins/base"
	"github.com/hashicorp/nomad/plugins/device"
	"github.com/hashicorp/nomad/plugins/shared/hclspec"

	"github.com/gpumux/gpumux/gpu"
	"github.com/gpumux/gpumux/mig"
	"github.com/gpumux/gpumux/share"
)

// Name is the plugin's name: the label of its plugin block and its file name.
const Name = nodeconfig.PluginName

// Version is the plugin's version.
const Version = "0.1.0"

// Device vendor and type of every group.
const (
	Vendor     = "nvidia"
	DeviceType = "gpu"
)

// Host is what the plugin needs of the node's GPUs; *gpu.Host implements it.
type Host interface {
	mig.Host
	Usage(ctx context.Context) (map[string]gpu.Usage, error)
	WatchXIDs(ctx context.Context) (<-chan gpu.XIDEvent, error)
	DevicePath(name string) string
	Close() error
}

var _ Host = (*gpu.Host)(nil)

// OpenFunc opens the node's GPUs for a config.
type OpenFunc func(cfg *nodeconfig.Config) (Host, error)

// Plugin is the gpumux Nomad device plugin.
type Plugin struct {
	logger hclog.Logger
	open   OpenFunc

	mu      sync.Mutex
	cfg     *nodeconfig.Config
	host    Host
	mps     MPS
	remote  *remoteGPUs // nil without a remote block
	catalog *share.Catalog
	health  *healthTracker
}

var _ device.DevicePlugin = (*Plugin)(nil)

// Option configures a Plugin.
type Option func(*Plugin)

// WithOpen replaces how the plugin opens GPUs (tests).
func WithOpen(f OpenFunc) Option { return func(p *Plugin) { p.open = f } }

// New returns a plugin that logs to logger.
func New(logger hclog.Logger, opts ...Option) *Plugin {
	p := &Plugin{logger: logger.Named(Name), open: openHost, health: newHealthTracker()}
	for _, o := range opts {
		o(p)
	}
	return p
}

// openHost opens the GPUs the config names: a simulated node, or real NVML.
func openHost(cfg *nodeconfig.Config) (Host, error) { return gpu.Open(cfg.Simulate, cfg.StateDir) }

// PluginInfo describes the plugin to Nomad.
func (p *Plugin) PluginInfo() (*base.PluginInfoResponse, error) {
	return &base.PluginInfoResponse{
		Type:              base.PluginTypeDevice,
		PluginApiVersions: []string{device.ApiVersion010},
		PluginVersion:     Version,
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

// Fingerprint opens the GPUs, applies declared MIG layouts, then sends the
// complete device list at once, every fingerprint_period, and whenever a
// GPU's health changes.
func (p *Plugin) Fingerprint(ctx context.Context) (<-chan *device.FingerprintResponse, error) {
	p.mu.Lock()
	cfg := p.cfg
	p.mu.Unlock()
	if cfg == nil {
		return nil, errors.New("Fingerprint called before SetConfig")
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
	if err := p.start(ctx, cfg); err != nil {
		p.logger.Error("cannot use the node's GPUs", "error", err)
		send(&device.FingerprintResponse{Error: err})
		return
	}
	changed := p.health.watch(ctx, p.host, p.logger)
	go p.mps.Run(ctx)              // restarts dead MPS daemons; leaves them running when ctx ends
	var last []*device.DeviceGroup // the last good fingerprint
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
			timer.Reset(cfg.Period())
		case <-changed:
		case <-p.mps.Changed():
		}
		groups, err := p.refresh(ctx, cfg)
		switch {
		case err == nil:
			last = groups
		case last == nil:
			p.logger.Error("fingerprint failed", "error", err)
			send(&device.FingerprintResponse{Error: err})
			return
		default:
			// A fingerprint error makes Nomad stop the plugin for good; after a
			// good fingerprint, keep the devices known but unusable until the
			// GPUs can be read again.
			p.logger.Error("fingerprint failed; marking every share unhealthy until the next one succeeds", "error", err)
			groups = allUnhealthy(last, fmt.Sprintf("fingerprint failed: %v", err))
		}
		if !send(&device.FingerprintResponse{Devices: groups}) {
			return
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

// start opens the GPUs once and applies the MIG layouts the config declares.
// A node without an NVIDIA driver whose config has a remote block offers
// remote GPUs only.
func (p *Plugin) start(ctx context.Context, cfg *nodeconfig.Config) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.host != nil {
		return nil
	}
	var remote *remoteGPUs
	if cfg.Remote != nil {
		remote = newRemoteGPUs(cfg.Remote, p.logger.Named("remote"))
		if err := remote.load(); err != nil {
			return err
		}
	}
	host, err := p.open(cfg)
	if err != nil && remote != nil && isNoDriver(err) {
		p.logger.Info("no local GPUs; offering remote GPUs only", "reason", err)
		host, err = noGPUs{}, nil
	}
	if err != nil {
		return err
	}
	node, err := host.Inventory(ctx)
	if err != nil {
		host.Close()
		return err
	}
	assignments, err := cfg.Layout().Assign(node)
	if err != nil {
		host.Close()
		return err
	}
	// Instances that gpumux-runtime containers hold stay, like those with
	// processes (Nomad's own allocations cannot be asked for while the
	// agent is starting the plugin).
	leases, err := lease.ReadIn(ctx, cfg.StateDir)
	if err != nil {
		host.Close()
		return fmt.Errorf("reading the lease store: %w", err)
	}
	held := func(uuid string) string {
		for id, container := range leases {
			if lease.Parent(id) == uuid {
				return "container " + container
			}
		}
		return ""
	}
	for _, a := range assignments {
		if len(a.MIGDevices) == 0 { // mig GPUs, and mps on MIG instances
			continue
		}
		progress := func(format string, args ...any) { p.logger.Info(fmt.Sprintf(format, args...)) }
		if _, err := mig.Apply(ctx, host, a.GPUIndex, a.MIGDevices, progress, mig.WithHeld(held), mig.WithCheckpoint(mig.CheckpointDir(cfg.StateDir))); err != nil {
			// Refusing keeps the GPU's current instances in service.
			p.logger.Error("MIG layout not applied; the GPU keeps its current instances", "gpu", a.GPUIndex, "error", err)
		}
	}
	p.host = host
	p.mps = p.newMPS(cfg)
	p.remote = remote
	return nil
}

// refresh re-reads the GPUs (MIG changes made by others show up here) and
// rebuilds the catalog.
func (p *Plugin) refresh(ctx context.Context, cfg *nodeconfig.Config) ([]*device.DeviceGroup, error) {
	node, err := p.host.Inventory(ctx)
	if err != nil {
		return nil, err
	}
	assignments, err := cfg.Layout().Assign(node)
	if err != nil {
		return nil, err
	}
	catalog, err := share.Build(node, assignments)
	if err != nil {
		return nil, err
	}
	if p.remote != nil {
		gpus, err := p.remote.scan(ctx)
		if err != nil {
			return nil, err
		}
		var skipped []share.RemoteGPU
		if catalog, skipped, err = catalog.WithRemote(gpus, cfg.Remote.Shares); err != nil {
			return nil, err
		}
		for _, g := range skipped {
			p.remote.logOnce(hclog.Warn, "remote GPU not offered", fmt.Errorf("server %s serves GPU %s, which this node offers already", g.Addr, g.UUID))
		}
	}
	if err := p.reconcileMPS(ctx, catalog); err != nil {
		// The affected shares report the daemon's state as their health.
		p.logger.Error("MPS daemons not fully reconciled", "error", err)
	}
	p.mu.Lock()
	p.catalog = catalog
	p.mu.Unlock()
	return deviceGroups(catalog, p.healthy), nil
}

// healthy reports whether a share may be used, and why not: no critical XID
// on its GPU or MIG instance, and for MPS shares a daemon that answers.
func (p *Plugin) healthy(s share.Share) (bool, string) {
	if ok, why := p.health.healthy(s); !ok {
		return false, why
	}
	switch s.Mechanism {
	case share.MPS:
		return p.mps.Health(s.Parent())
	case share.Remote:
		return p.remote.health(s.GPU.UUID)
	}
	return true, ""
}

// Reserve returns the container edits of the given shares. IDs that are
// unknown, stale or unhealthy are named in the error.
func (p *Plugin) Reserve(ids []string) (*device.ContainerReservation, error) {
	p.mu.Lock()
	catalog, host, mpsd, remote := p.catalog, p.host, p.mps, p.remote
	p.mu.Unlock()
	if catalog == nil {
		return nil, errors.New("no devices fingerprinted yet")
	}
	shares, err := catalog.Lookup(ids...)
	if err != nil {
		return nil, err
	}
	var sick []string
	for _, s := range shares {
		if ok, why := p.healthy(s); !ok {
			sick = append(sick, fmt.Sprintf("%s (%s)", s.ID, why))
		}
	}
	if len(sick) > 0 {
		return nil, fmt.Errorf("unhealthy shares: %v", sick)
	}
	edits, err := share.EditsFor(shares, nodePaths{host, mpsd, remote})
	if err != nil {
		return nil, err
	}
	// Record the reservation for gpumux-runtime (Nomad's docker driver with
	// nvidia_runtime = "gpumux"): it honours GPUMUX_SHARES only with this
	// single-use token.
	token, err := p.reserve(ids)
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
func (p *Plugin) reserve(ids []string) (string, error) {
	p.mu.Lock()
	stateDir := p.cfg.StateDir
	p.mu.Unlock()
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	token := hex.EncodeToString(b)
	st, err := lease.Open(lease.PathIn(stateDir))
	if err != nil {
		return "", fmt.Errorf("recording the reservation: %w", err)
	}
	defer st.Close()
	if err := st.Reserve(context.Background(), token, ids, reservationTTL); err != nil {
		return "", fmt.Errorf("recording the reservation: %w", err)
	}
	return token, nil
}

func reservation(e share.Edits) *device.ContainerReservation {
	r := &device.ContainerReservation{Envs: e.Env}
	for _, d := range e.DeviceNodes {
		r.Devices = append(r.Devices, &device.DeviceSpec{TaskPath: d.ContainerPath, HostPath: d.HostPath, CgroupPerms: d.Permissions})
	}
	for _, m := range e.Mounts {
		r.Mounts = append(r.Mounts, &device.Mount{TaskPath: m.ContainerPath, HostPath: m.HostPath, ReadOnly: m.ReadOnly})
	}
	return r
}
