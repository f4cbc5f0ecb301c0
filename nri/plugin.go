package nri

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"github.com/hashicorp/go-hclog"
	"github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/gpumux/gpumux/node"
	"github.com/gpumux/gpumux/node/lease"
	"github.com/gpumux/gpumux/nodeconfig"
	"github.com/gpumux/gpumux/share"
)

// PluginName is the plugin's name in the runtime (after its index:
// "50-gpumux").
const PluginName = "gpumux"

// lessor is what the plugin needs of the node core.
type lessor interface {
	Lease(ctx context.Context, c node.Claim, alive func(lease.Record) (bool, error), warn io.Writer, record ...lease.AcquireOption) (node.Grant, error)
}

var _ lessor = (*node.Node)(nil)

// Plugin serves the NRI requests of one node.
type Plugin struct {
	node   lessor
	leases node.Leases
	cfg    nodeconfig.NRI
	alive  func(lease.Record) (bool, error)
	limits node.Limits
	logger hclog.Logger
}

// Option configures a Plugin.
type Option func(*Plugin)

// WithLimits bounds what one container may ask for (default
// node.DefaultLimits).
func WithLimits(l node.Limits) Option { return func(p *Plugin) { p.limits = l } }

// WithLogger sets the logger (default: none).
func WithLogger(l hclog.Logger) Option { return func(p *Plugin) { p.logger = l } }

// New returns the plugin of node n, whose lease store is in stateDir, with
// its nri block cfg. alive tells whether a lease's container still exists
// (node.RuncAlive), for the stale leases reclaimed before each lease.
func New(n lessor, stateDir string, cfg nodeconfig.NRI, alive func(lease.Record) (bool, error), opts ...Option) *Plugin {
	p := &Plugin{node: n, leases: node.LeasesIn(stateDir), cfg: cfg, alive: alive, limits: node.DefaultLimits, logger: hclog.NewNullLogger()}
	for _, o := range opts {
		o(p)
	}
	return p
}

// Run connects to the runtime's NRI socket and serves it until ctx ends,
// connecting again (every retry, at most) when the runtime is not there
// yet or goes away: containerd restarts without the agent.
func (p *Plugin) Run(ctx context.Context, retry time.Duration) error {
	for {
		err := p.serve(ctx)
		if ctx.Err() != nil {
			return nil
		}
		p.logger.Warn("NRI connection ended; connecting again", "socket", p.cfg.Socket, "error", err, "in", retry)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(retry):
		}
	}
}

// serve is one connection: registered, then served until it closes.
func (p *Plugin) serve(ctx context.Context) error {
	closed := make(chan struct{})
	s, err := stub.New(p,
		stub.WithPluginName(PluginName),
		stub.WithPluginIdx(p.cfg.PluginIndex),
		stub.WithSocketPath(p.cfg.Socket),
		stub.WithOnClose(func() { close(closed) }))
	if err != nil {
		return fmt.Errorf("NRI plugin: %w", err)
	}
	if err := s.Start(ctx); err != nil {
		return fmt.Errorf("connecting to %s: %w", p.cfg.Socket, err)
	}
	p.logger.Info("serving NRI", "socket", p.cfg.Socket, "plugin", p.cfg.PluginIndex+"-"+PluginName)
	select {
	case <-ctx.Done():
		s.Stop()
		return nil
	case <-closed:
		s.Stop()
		return errors.New("the runtime closed the connection")
	}
}

// CreateContainer leases the shares the container asks for and returns
// their edits as its adjustment. A container that asks for nothing gets
// none, and so does one of a runtime handler the config skips; a bad
// request, or one that no share fits, fails its create.
func (p *Plugin) CreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	if slices.Contains(p.cfg.SkipRuntimeHandlers, pod.GetRuntimeHandler()) {
		return nil, nil, nil // gpumux-runtime's
	}
	env := withoutShares(ctr.GetEnv())
	req, _, asked, err := node.ParseRequest(requestAnnotations(pod, ctr), env, p.limits)
	if err != nil {
		return nil, nil, fmt.Errorf("gpumux: container %s: %w", ctr.GetName(), err)
	}
	if !asked {
		return nil, nil, nil
	}
	claim := node.Claim{Container: ctr.GetId(), Request: req, Env: env}
	var warn strings.Builder
	g, err := p.node.Lease(ctx, claim, p.alive, &warn, lease.WithRuncRoot(p.cfg.RuncRoot))
	if s := strings.TrimSpace(warn.String()); s != "" {
		p.logger.Warn(s)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("gpumux: container %s: %w", ctr.GetName(), err)
	}
	adjust, err := adjustment(g.Edits)
	if err != nil {
		p.release(ctx, ctr)
		return nil, nil, fmt.Errorf("gpumux: container %s: %w", ctr.GetName(), err)
	}
	p.logger.Info("leased", "container", ctr.GetId(), "name", ctr.GetName(), "pod", pod.GetName(), "shares", strings.Join(share.IDs(g.Shares), ","))
	return adjust, nil, nil
}

// StopContainer gives the container's shares back.
func (p *Plugin) StopContainer(ctx context.Context, _ *api.PodSandbox, ctr *api.Container) ([]*api.ContainerUpdate, error) {
	p.release(ctx, ctr)
	return nil, nil
}

// RemoveContainer gives the container's shares back, if StopContainer did
// not (a container whose create failed after the plugin's adjustment).
func (p *Plugin) RemoveContainer(ctx context.Context, _ *api.PodSandbox, ctr *api.Container) error {
	p.release(ctx, ctr)
	return nil
}

func (p *Plugin) release(ctx context.Context, ctr *api.Container) {
	ids, err := p.leases.Release(ctx, ctr.GetId())
	switch {
	case err != nil:
		p.logger.Error("releasing a container's shares", "container", ctr.GetId(), "error", err)
	case len(ids) > 0:
		p.logger.Info("released", "container", ctr.GetId(), "name", ctr.GetName(), "shares", strings.Join(ids, ","))
	}
}

// withoutShares drops GPUMUX_SHARES from env. Nomad's reservations, which
// it names, do not come through CRI; a container has it from a CDI device
// of gpumux cdi generate's spec, which containerd applied before asking
// the plugin: that container has its share.
func withoutShares(env []string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool { return strings.HasPrefix(kv, share.EnvShares+"=") })
}

// requestAnnotations are the container's gpumux.io/* annotations, or its
// pod's when it has none: a Kubernetes user annotates the pod.
func requestAnnotations(pod *api.PodSandbox, ctr *api.Container) map[string]string {
	if hasRequest(ctr.GetAnnotations()) {
		return ctr.GetAnnotations()
	}
	ann := map[string]string{}
	for k, v := range pod.GetAnnotations() {
		if strings.HasPrefix(k, node.AnnotationPrefix) {
			ann[k] = v
		}
	}
	return ann
}

func hasRequest(ann map[string]string) bool {
	for k := range ann {
		if strings.HasPrefix(k, node.AnnotationPrefix) {
			return true
		}
	}
	return false
}

// adjustment turns edits into an NRI adjustment: the CDI library applies
// them to an empty spec, as gpumux-runtime applies them to config.json
// (device nodes get their host major and minor and a device cgroup rule),
// and what it added is handed over.
func adjustment(e share.Edits) (*api.ContainerAdjustment, error) {
	spec := &specs.Spec{Process: &specs.Process{}, Linux: &specs.Linux{}}
	if err := (&cdi.ContainerEdits{ContainerEdits: node.CDIEdits(e)}).Apply(spec); err != nil {
		return nil, fmt.Errorf("applying the container edits: %w", err)
	}
	a := &api.ContainerAdjustment{}
	for _, kv := range api.FromOCIEnv(spec.Process.Env) {
		a.AddEnv(kv.Key, kv.Value)
	}
	for _, m := range api.FromOCIMounts(spec.Mounts) {
		a.AddMount(m)
	}
	for _, d := range api.FromOCILinuxDevices(spec.Linux.Devices) {
		a.AddDevice(d)
	}
	if h := api.FromOCIHooks(spec.Hooks); h != nil {
		a.AddHooks(h)
	}
	return a, nil
}
