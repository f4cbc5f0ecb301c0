package runtimehook

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gpumux/gpumux/gpu"
	"github.com/gpumux/gpumux/remote/pool"
	"github.com/gpumux/gpumux/share"
)

// remoteScanTimeout bounds one look at the pool during a create: Nomad's
// answer, then the servers' probes, which run concurrently.
const remoteScanTimeout = 10 * time.Second

// errNoRemoteBlock is why a node without a remote block has no remote shares.
var errNoRemoteBlock = errors.New(`this node's config has no remote block (docs/runtime.md, "Remote GPUs")`)

// remoteAccess mints the tokens of the runtime's remote leases and names
// the interposer (share.RemoteAccess).
type remoteAccess struct {
	secret []byte
	dir    string
	ttl    time.Duration
}

func (a *remoteAccess) InterposerDir() string { return a.dir }

// RemoteToken mints a lease's token. It is valid for token_ttl: a container
// keeps the environment it was created with, also across restarts.
func (a *remoteAccess) RemoteToken(g share.RemoteGPU, quotaMiB uint64) (string, error) {
	return pool.Grant(a.secret, "runtime", g, quotaMiB, a.ttl)
}

// withRemote scans the pool of the config's remote block and returns the
// catalog with its GPUs' shares, and what the edits of those shares need.
// Servers that cannot be probed are reported to stderr and left out.
func (r *Runtime) withRemote(ctx context.Context, catalog *share.Catalog) (*share.Catalog, *remoteAccess, error) {
	rc := r.cfg.Remote
	if rc == nil {
		return nil, nil, errNoRemoteBlock
	}
	if err := pool.CheckInterposer(rc.InterposerDir); err != nil {
		return nil, nil, fmt.Errorf("remote shares: %w", err)
	}
	cfg, err := pool.FromNodeConfig(rc)
	if err != nil {
		return nil, nil, err
	}
	p, err := pool.New(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("remote block: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, remoteScanTimeout)
	defer cancel()
	sc := p.Scan(ctx)
	for _, addr := range slices.Sorted(maps.Keys(sc.Down)) {
		fmt.Fprintf(r.stderr, "gpumux-runtime: remote server not probed, its GPUs are not offered: %v\n", sc.Down[addr])
	}
	for _, err := range sc.Problems {
		fmt.Fprintf(r.stderr, "gpumux-runtime: remote pool: %v\n", err)
	}
	gpus := make([]share.RemoteGPU, len(sc.GPUs))
	for i, g := range sc.GPUs {
		gpus[i] = g.Share()
	}
	out, skipped, err := catalog.WithRemote(gpus, rc.Shares)
	if err != nil {
		return nil, nil, err
	}
	for _, g := range skipped {
		fmt.Fprintf(r.stderr, "gpumux-runtime: remote server %s serves GPU %s, which this node has: not offered\n", g.Addr, g.UUID)
	}
	return out, &remoteAccess{secret: cfg.Secret, dir: rc.InterposerDir, ttl: rc.TTL()}, nil
}

// needsRemote reports whether a request must see the pool before its
// shares are chosen: it asks for remote shares, or Nomad reserved some.
func needsRemote(req share.Request, reserved []string) bool {
	if req.Mechanism == share.Remote {
		return true
	}
	for _, id := range reserved {
		if share.IsRemoteID(id) {
			return true
		}
	}
	return false
}

// mayFallBack reports whether a request that no local share fits may be
// served by a remote share: auto, at a level remote satisfies, on a node
// with a remote block.
func (r *Runtime) mayFallBack(req share.Request) bool {
	return req.Mechanism == "" && r.cfg.Remote != nil && len(share.AutoFallback(req.Isolation)) > 0
}

// prependLibraryPath puts the interposer before the container's own
// LD_LIBRARY_PATH, if it has one: CDI's env edits replace a variable.
func prependLibraryPath(edits share.Edits, env []string) {
	v, ok := edits.Env[share.EnvLibraryPath]
	if !ok {
		return
	}
	if old := envValue(env, share.EnvLibraryPath); old != "" && !strings.HasPrefix(old, v+":") && old != v {
		edits.Env[share.EnvLibraryPath] = v + ":" + old
	}
}

// noGPUs is the Host of a node without an NVIDIA driver: it has no GPUs of
// its own, only remote ones.
type noGPUs struct{}

func (noGPUs) Inventory(context.Context) (*gpu.Node, error) { return &gpu.Node{}, nil }
func (noGPUs) DevicePath(name string) string                { return "/dev/" + name }
func (noGPUs) Close() error                                 { return nil }

// openHost opens the node's GPUs; a node without a driver whose config has
// a remote block has none of its own.
func (r *Runtime) openHost() (Host, error) {
	host, err := r.open(r.cfg)
	if err != nil && r.cfg.Remote != nil && errors.Is(err, gpu.ErrNoDriver) {
		return noGPUs{}, nil
	}
	return host, err
}
