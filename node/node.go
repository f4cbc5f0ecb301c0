package node

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/gpumux/gpumux/exclusive"
	"github.com/gpumux/gpumux/gpu"
	"github.com/gpumux/gpumux/mig"
	"github.com/gpumux/gpumux/mps"
	"github.com/gpumux/gpumux/node/lease"
	"github.com/gpumux/gpumux/nodeconfig"
	"github.com/gpumux/gpumux/remote"
	"github.com/gpumux/gpumux/share"
	"github.com/gpumux/gpumux/timeslice"
)

// Provider is one mechanism: the shares it offers, what a container needs
// to use them, and whether one can be used now.
type Provider interface {
	Mechanism() share.Mechanism
	// Offers returns the shares the mechanism offers on the node under its
	// assignments (those of its mechanism; remote GPUs are not the node's).
	Offers(ctx context.Context, node *gpu.Node, as []share.Assignment) ([]share.Offer, error)
	// Edits adds to e, which holds share.DeviceEdits of every share of the
	// task, what the task's shares of this mechanism (mine, of all) need.
	Edits(mine, all []share.Share, e *share.Edits) error
	// Health reports whether a share of the mechanism can be used now, and
	// why not.
	Health(s share.Share) (ok bool, why string)
}

// Lifecycle is what a Provider with something to run on a node has: a node
// agent calls Start once, Reconcile after each catalog it builds, and Stop
// when it ends. Each is idempotent.
type Lifecycle interface {
	Start(ctx context.Context, node *gpu.Node, as []share.Assignment) error
	Reconcile(ctx context.Context, c *share.Catalog) error
	Stop(ctx context.Context) error
}

// notifier is a Provider whose shares' health changes on its own (an MPS
// daemon dies): a node agent rebuilds the catalog when it ticks.
type notifier interface {
	Changed() <-chan struct{}
}

var (
	_ Provider  = exclusive.Provider{}
	_ Provider  = (*mig.Provider)(nil)
	_ Lifecycle = (*mig.Provider)(nil)
	_ Provider  = (*mps.Provider)(nil)
	_ Lifecycle = (*mps.Provider)(nil)
	_ notifier  = (*mps.Provider)(nil)
	_ Provider  = timeslice.Provider{}
	_ Provider  = (*remote.Provider)(nil)
)

// Host is what the core needs of a node's GPUs; *gpu.Host implements it.
type Host interface {
	mig.Host
	Usage(ctx context.Context) (map[string]gpu.Usage, error)
	WatchXIDs(ctx context.Context) (<-chan gpu.XIDEvent, error)
	DevicePath(name string) string
	// DriverRoot and DriverVersion say where the driver's user-space
	// files are and which version they carry (DriverFiles).
	DriverRoot() string
	DriverVersion() (string, error)
	Close() error
}

var _ Host = (*gpu.Host)(nil)

// OpenFunc opens the GPUs a config names.
type OpenFunc func(cfg *nodeconfig.Config) (Host, error)

// Node is one node opened under its config.
type Node struct {
	cfg       *nodeconfig.Config
	host      Host
	logger    hclog.Logger
	issuer    string
	providers []Provider
	xids      *xidTracker
	leaseCache
	driver     driverCache
	hookBinary string   // gpumux-runtime, which containers' hooks run
	hookEnv    []string // their environment
	// driverAtHostPaths: see WithDriverAtHostPaths.
	driverAtHostPaths bool

	mu      sync.Mutex
	catalog *share.Catalog // the last one built
	lock    *stateLock     // held between Start and Stop
	stop    context.CancelFunc
	changed chan struct{} // ticks when a share's health changes
}

// Option configures Open.
type Option func(*options)

type options struct {
	open       OpenFunc
	logger     hclog.Logger
	issuer     string
	mpsBinary  string
	mpsOpts    []mps.Option
	hookBinary string
	hookEnv    []string
	// driverAtHostPaths: see WithDriverAtHostPaths.
	driverAtHostPaths bool
}

// WithOpen replaces how the node's GPUs are opened (tests).
func WithOpen(f OpenFunc) Option { return func(o *options) { o.open = f } }

// WithLogger sets the logger (default: none).
func WithLogger(l hclog.Logger) Option { return func(o *options) { o.logger = l } }

// WithIssuer names the front door in the remote tokens it mints ("nomad",
// "runtime"; default "gpumux").
func WithIssuer(name string) Option { return func(o *options) { o.issuer = name } }

// WithMPSControl sets the MPS control binary (default: the config's
// mps_control_binary, looked up by ResolveBinary).
func WithMPSControl(path string) Option { return func(o *options) { o.mpsBinary = path } }

// WithHealthInterval sets how often a node agent probes the MPS daemons
// (default 10s).
func WithHealthInterval(d time.Duration) Option {
	return func(o *options) { o.mpsOpts = append(o.mpsOpts, mps.WithCheckInterval(d)) }
}

// ErrDisabled is Open's answer for a config with enabled = false.
var ErrDisabled = errors.New("gpumux is disabled on this node: its config has enabled = false")

// Open opens the node's GPUs under cfg: a simulated node, or real NVML. A
// node without an NVIDIA driver whose config has a remote block has no
// GPUs of its own and offers remote ones only. GPUs in ignored_gpu_ids are
// left out of everything the node reads. A config with enabled = false
// opens nothing: ErrDisabled.
func Open(cfg *nodeconfig.Config, opts ...Option) (*Node, error) {
	if !cfg.IsEnabled() {
		return nil, ErrDisabled
	}
	o := options{open: openHost, logger: hclog.NewNullLogger(), issuer: "gpumux"}
	for _, opt := range opts {
		opt(&o)
	}
	host, err := o.open(cfg)
	if err != nil && cfg.Remote != nil && errors.Is(err, gpu.ErrNoDriver) {
		o.logger.Info("no local GPUs; offering remote GPUs only, whose containers get gpumux's interposer and no driver files", "reason", err)
		host, err = noGPUs{}, nil
	}
	if err != nil {
		return nil, err
	}
	if len(cfg.IgnoredGPUIDs) > 0 {
		host = ignoring{Host: host, cfg: cfg}
	}
	if o.mpsBinary == "" {
		o.mpsBinary = ResolveBinary(cfg.MPSControlBinary)
	}
	if o.hookBinary == "" {
		o.hookBinary = resolveHookBinary()
	}
	n := &Node{cfg: cfg, host: host, logger: o.logger, issuer: o.issuer, xids: newXIDTracker(), hookBinary: o.hookBinary, hookEnv: o.hookEnv, driverAtHostPaths: o.driverAtHostPaths}
	n.providers = n.newProviders(append([]mps.Option{mps.WithControlBinary(o.mpsBinary), mps.WithLogger(o.logger.Named("mps"))}, o.mpsOpts...))
	return n, nil
}

// newProviders is the one list of mechanisms, in share.Mechanisms' order.
// The remote mechanism is there only with a remote block.
func (n *Node) newProviders(mpsOpts []mps.Option) []Provider {
	migProgress := func(format string, args ...any) { n.logger.Info(fmt.Sprintf(format, args...)) }
	list := []Provider{
		exclusive.New(),
		mig.NewProvider(n.host, migProgress, mig.WithHeld(n.leaseHolder), mig.WithCheckpoint(mig.CheckpointDir(n.cfg.StateDir))),
		mps.NewProvider(mps.NewManager(n.cfg.StateDir, mpsOpts...)),
		timeslice.New(n.cfg.StateDir, resolveLimiterDir(n.cfg.LimiterDir)),
	}
	if n.cfg.Remote != nil {
		list = append(list, remote.NewProvider(n.cfg.Remote, n.issuer, n.logger.Named("remote")))
	}
	return list
}

// openHost opens the GPUs the config names: a simulated node, or real NVML.
func openHost(cfg *nodeconfig.Config) (Host, error) { return gpu.Open(cfg.Simulate, cfg.StateDir) }

// Config is the node's config.
func (n *Node) Config() *nodeconfig.Config { return n.cfg }

// Host is the node's GPUs.
func (n *Node) Host() Host { return n.host }

// LeasePath is the node's lease store.
func (n *Node) LeasePath() string { return lease.PathIn(n.cfg.StateDir) }

// provider returns the provider of mechanism m, or an error naming it.
func (n *Node) provider(m share.Mechanism) (Provider, error) {
	for _, p := range n.providers {
		if p.Mechanism() == m {
			return p, nil
		}
	}
	if m == share.Remote {
		return nil, errors.New(`this node's config has no remote block (docs/runtime.md, "Remote GPUs")`)
	}
	return nil, fmt.Errorf("mechanism %q is not available on this node", m)
}

// Close stops the node if it was started (see Stop) and releases its GPUs.
func (n *Node) Close() error {
	err := n.Stop(context.Background())
	return errors.Join(err, n.host.Close())
}

// noGPUs is the Host of a node without an NVIDIA driver that offers remote
// GPUs only: no GPUs, no XIDs, no usage.
type noGPUs struct{}

var errNoGPUs = errors.New("this node has no local GPUs (no NVIDIA driver)")

func (noGPUs) Inventory(context.Context) (*gpu.Node, error) { return &gpu.Node{}, nil }
func (noGPUs) EnableMIG(context.Context, int) error         { return errNoGPUs }
func (noGPUs) DisableMIG(context.Context, int) error        { return errNoGPUs }
func (noGPUs) ResetGPU(context.Context, int) error          { return errNoGPUs }
func (noGPUs) CreateMIGInstance(context.Context, int, gpu.MIGProfile, gpu.Placement) error {
	return errNoGPUs
}
func (noGPUs) DestroyMIGInstance(context.Context, int, int) error  { return errNoGPUs }
func (noGPUs) Processes(context.Context, string) ([]uint32, error) { return nil, errNoGPUs }
func (noGPUs) Usage(context.Context) (map[string]gpu.Usage, error) {
	return map[string]gpu.Usage{}, nil
}
func (noGPUs) DevicePath(name string) string  { return filepath.Join("/dev", name) }
func (noGPUs) DriverRoot() string             { return "" }
func (noGPUs) DriverVersion() (string, error) { return "", errNoGPUs }
func (noGPUs) Close() error                   { return nil }
func (noGPUs) WatchXIDs(ctx context.Context) (<-chan gpu.XIDEvent, error) {
	ch := make(chan gpu.XIDEvent)
	context.AfterFunc(ctx, func() { close(ch) })
	return ch, nil
}
