package plugin

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/gpumux/gpumux/gpu"
	"github.com/gpumux/gpumux/nodeconfig"
	"github.com/gpumux/gpumux/remote/pool"
	"github.com/gpumux/gpumux/share"
)

// scanTimeout bounds one look at the pool (Nomad's answer, then the
// servers' probes, which run concurrently).
const scanTimeout = 15 * time.Second

// remoteGPUs follows the pool of the remote block: which GPUs it has offered
// since the plugin started, and which of them cannot be used now.
//
// A GPU once seen stays in the catalog until the plugin restarts: Nomad
// keeps the IDs of running allocations, and a server that comes back (at
// another address, even) serves the same GPU under the same share IDs. While
// its server is down, not probed, or no longer discovered, the GPU's shares
// are unhealthy, with the reason.
type remoteGPUs struct {
	cfg    *nodeconfig.Remote
	logger hclog.Logger

	mu         sync.Mutex
	pool       *pool.Pool
	secret     []byte
	known      map[string]share.RemoteGPU // by UUID
	down       map[string]string          // UUID → why its shares cannot be used
	interposer string                     // why the interposer cannot be mounted ("": it can)

	logMu  sync.Mutex
	logged map[string]bool // problems already logged, to log each once
}

func newRemoteGPUs(cfg *nodeconfig.Remote, logger hclog.Logger) *remoteGPUs {
	return &remoteGPUs{cfg: cfg, logger: logger, known: map[string]share.RemoteGPU{}, down: map[string]string{}, logged: map[string]bool{}}
}

// load (re)reads the pool secret and the Nomad token, so that a rotated
// secret is used from the next scan on. A failure keeps the files read
// before; it is an error only when there are none.
func (r *remoteGPUs) load() error {
	cfg, err := pool.FromNodeConfig(r.cfg)
	if err == nil {
		var p *pool.Pool
		if p, err = pool.New(cfg); err == nil {
			r.mu.Lock()
			r.pool, r.secret = p, cfg.Secret
			r.mu.Unlock()
			return nil
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pool == nil {
		return err
	}
	r.logOnce(hclog.Error, "remote pool: keeping the secret read before", err)
	return nil
}

// scan looks at the pool and returns every remote GPU to offer: those found
// now and those seen before, which are marked down.
func (r *remoteGPUs) scan(ctx context.Context) ([]share.RemoteGPU, error) {
	if err := r.load(); err != nil {
		return nil, err
	}
	r.mu.Lock()
	p := r.pool
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, scanTimeout)
	defer cancel()
	sc := p.Scan(ctx)

	r.mu.Lock()
	defer r.mu.Unlock()
	listed := map[string]bool{}
	for _, s := range sc.Servers {
		listed[s] = true
	}
	seen := map[string]bool{}
	for _, g := range sc.GPUs {
		seen[g.UUID] = true
		if old, ok := r.known[g.UUID]; ok && old.Addr != g.Addr {
			r.logger.Info("remote GPU moved to another server address", "gpu", g.UUID, "from", old.Addr, "to", g.Addr)
		} else if !ok {
			r.logger.Info("remote GPU found", "server", g.Addr, "index", g.Index, "gpu", g.UUID, "model", g.Name, "memory_mib", g.MemoryMiB)
		}
		r.known[g.UUID] = g.Share()
		if why, was := r.down[g.UUID]; was {
			r.logger.Info("remote GPU usable again", "gpu", g.UUID, "server", g.Addr, "was", why)
			delete(r.down, g.UUID)
		}
	}
	for uuid, g := range r.known {
		if seen[uuid] {
			continue
		}
		var why string
		switch err, isDown := sc.Down[g.Addr]; {
		case isDown:
			why = fmt.Sprintf("remote server %s: %v", g.Addr, err)
		case !listed[g.Addr]:
			why = fmt.Sprintf("remote server %s is no longer in the pool (not in servers, not discovered as Nomad service %q)", g.Addr, r.cfg.Service)
		default:
			why = fmt.Sprintf("remote server %s no longer serves GPU %s", g.Addr, uuid)
		}
		if r.down[uuid] != why {
			r.logger.Warn("remote GPU unusable; its shares are unhealthy", "gpu", uuid, "reason", why)
		}
		r.down[uuid] = why
	}
	for _, addr := range sortedKeys(sc.Down) {
		r.logOnce(hclog.Warn, "remote server not probed; its GPUs are not offered", fmt.Errorf("%s: %w", addr, sc.Down[addr]))
	}
	for _, err := range sc.Problems {
		r.logOnce(hclog.Warn, "remote pool", err)
	}
	r.interposer = ""
	if err := pool.CheckInterposer(r.cfg.InterposerDir); err != nil {
		r.interposer = err.Error()
		r.logOnce(hclog.Error, "remote shares are unhealthy", err)
	}

	out := make([]share.RemoteGPU, 0, len(r.known))
	for _, uuid := range sortedKeys(r.known) {
		out = append(out, r.known[uuid])
	}
	return out, nil
}

// logOnce logs a problem the first time it is seen (each period would
// repeat it otherwise), and at debug level after that.
func (r *remoteGPUs) logOnce(level hclog.Level, msg string, err error) {
	r.logMu.Lock()
	defer r.logMu.Unlock()
	key := msg + ": " + err.Error()
	if r.logged[key] {
		r.logger.Debug(msg, "error", err)
		return
	}
	if len(r.logged) >= 256 { // errors that name ephemeral ports differ each time
		clear(r.logged)
	}
	r.logged[key] = true
	r.logger.Log(level, msg, "error", err)
}

// health reports whether the remote GPU's shares can be used, and why not.
func (r *remoteGPUs) health(uuid string) (bool, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.interposer != "" {
		return false, r.interposer
	}
	if why, bad := r.down[uuid]; bad {
		return false, why
	}
	return true, ""
}

// InterposerDir is the host directory mounted into tasks at share.RemoteMount.
func (r *remoteGPUs) InterposerDir() string { return r.cfg.InterposerDir }

// RemoteToken mints a reservation's token, valid for token_ttl: a Nomad
// task gets it once, when it starts (Nomad reserves devices once per
// allocation, also across task restarts).
func (r *remoteGPUs) RemoteToken(g share.RemoteGPU, quotaMiB uint64) (string, error) {
	r.mu.Lock()
	secret := r.secret
	r.mu.Unlock()
	return pool.Grant(secret, "nomad", g, quotaMiB, r.cfg.TTL())
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// noGPUs is the Host of a node without an NVIDIA driver that offers remote
// GPUs only: no GPUs, no XIDs, no usage. The embedded Host is nil; every
// method of today's Host is defined here, so a method added to Host later
// compiles and panics only if a GPU-less node ever calls it.
type noGPUs struct{ Host }

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
func (noGPUs) DevicePath(name string) string { return filepath.Join("/dev", name) }
func (noGPUs) Close() error                  { return nil }
func (noGPUs) WatchXIDs(ctx context.Context) (<-chan gpu.XIDEvent, error) {
	ch := make(chan gpu.XIDEvent)
	context.AfterFunc(ctx, func() { close(ch) })
	return ch, nil
}

// isNoDriver reports whether opening the GPUs failed for want of a driver.
func isNoDriver(err error) bool { return errors.Is(err, gpu.ErrNoDriver) }
