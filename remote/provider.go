package remote

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/gpumux/gpumux/gpu"
	"github.com/gpumux/gpumux/nodeconfig"
	"github.com/gpumux/gpumux/remote/pool"
	"github.com/gpumux/gpumux/share"
)

// Properties are a remote share's guarantees: a hard quota the server
// enforces, and one server whose fault fails every client.
var Properties = share.Properties{MemoryIsolation: share.Hard, FaultIsolation: false}

// Mount is where a remote share's interposer directory (the libcuda.so.1
// that forwards CUDA calls) appears in the container.
const Mount = "/run/gpumux/remote"

// Environment of a remote share (the interposer reads them).
const (
	EnvAddr  = "GPUMUX_REMOTE_ADDR"
	EnvToken = "GPUMUX_REMOTE_TOKEN"
	// With the remote block's tls_* settings, for a TCP server: the CA
	// certificate, the client certificate and key (mutual TLS), as paths
	// under TLSMount, and the name to check.
	EnvTLSCA         = "GPUMUX_REMOTE_TLS_CA"
	EnvTLSCert       = "GPUMUX_REMOTE_TLS_CERT"
	EnvTLSKey        = "GPUMUX_REMOTE_TLS_KEY"
	EnvTLSServerName = "GPUMUX_REMOTE_TLS_SERVER_NAME"
)

// SMIPath is where a remote share's container finds nvidia-smi: gpumux's,
// which answers for the share from the NVML library beside the
// interposer (NVIDIA's needs the driver's own NVML, which is not there).
const SMIPath = "/usr/bin/nvidia-smi"

// TLSMount is the directory of the TLS files mounted into a container
// (each file on its own, read-only): ca.pem, client.pem, client-key.pem.
const TLSMount = "/run/gpumux/tls"

// ScanTimeout bounds one look at the pool (Nomad's answer, then the
// servers' probes, which run concurrently).
const ScanTimeout = 15 * time.Second

// Provider is the remote mechanism: the GPUs of the gpumux-remoted servers
// of the node config's remote block, each split into equal shares.
//
// A GPU once seen stays offered for the provider's life (a node agent's:
// Nomad keeps the IDs of running allocations, and a server that comes back,
// at another address even, serves the same GPU under the same share IDs).
// While its server is down, not probed, or no longer discovered, the GPU's
// shares are unhealthy, with the reason.
type Provider struct {
	cfg    *nodeconfig.Remote
	issuer string
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

// NewProvider returns the provider of a remote block. issuer names the
// front door in the tokens it mints ("nomad", "runtime"); logger receives
// what the pool's scans find.
func NewProvider(cfg *nodeconfig.Remote, issuer string, logger hclog.Logger) *Provider {
	return &Provider{cfg: cfg, issuer: issuer, logger: logger,
		known: map[string]share.RemoteGPU{}, down: map[string]string{}, logged: map[string]bool{}}
}

// Mechanism is share.Remote.
func (p *Provider) Mechanism() share.Mechanism { return share.Remote }

// Networked is true: the offers are found by looking at the pool.
func (p *Provider) Networked() bool { return true }

// Load (re)reads the pool secret and the Nomad token, so that a rotated
// secret is used from the next scan on. A failure keeps the files read
// before; it is an error only when there are none.
func (p *Provider) Load() error {
	cfg, err := poolConfig(p.cfg)
	if err == nil {
		var pl *pool.Pool
		if pl, err = pool.New(cfg); err == nil {
			p.mu.Lock()
			p.pool, p.secret = pl, cfg.Secret
			p.mu.Unlock()
			return nil
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pool == nil {
		return fmt.Errorf("remote block: %w", err)
	}
	p.logOnce(hclog.Error, "remote pool: keeping the secret read before", err)
	return nil
}

// Offers scans the pool and offers every remote GPU found now or seen
// before (see OffersOf).
func (p *Provider) Offers(ctx context.Context, node *gpu.Node, _ []share.Assignment) ([]share.Offer, error) {
	gpus, err := p.scan(ctx)
	if err != nil {
		return nil, err
	}
	offers, skipped, err := OffersOf(gpus, node, p.cfg.Shares)
	for _, g := range skipped {
		p.logOnce(hclog.Warn, "remote GPU not offered", fmt.Errorf("server %s serves GPU %s, which this node offers already", g.Addr, g.UUID))
	}
	return offers, err
}

// OffersOf splits each remote GPU into shares ("<GPU UUID>/remote/<n>"),
// each with the GPU's memory divided by shares as a hard quota the server
// enforces, and 100/shares percent of its compute as a fair share (the
// server does not partition SMs, so sm_count is the whole GPU's).
//
// Remote GPUs are grouped by model and size: "<model>-remote-<shares>x"
// (e.g. "H200-remote-4x"). GPUs of one model whose attributes differ
// (memory, SMs, compute capability, CUDA version) get groups of their own,
// named with a suffix -2, -3, … in the order of (memory, SMs, capability,
// CUDA version). A GPU the node has itself (a node that serves its own GPU
// to the pool), or seen through two servers (the first address is kept),
// is offered once; the others are returned in skipped.
func OffersOf(gpus []share.RemoteGPU, node *gpu.Node, shares int) (offers []share.Offer, skipped []share.RemoteGPU, err error) {
	if shares < 1 || shares > share.MaxRemoteShares {
		return nil, nil, fmt.Errorf("remote shares = %d: want 1 to %d per GPU", shares, share.MaxRemoteShares)
	}
	taken := map[string]bool{}
	for _, g := range node.GPUs {
		taken[g.UUID] = true
	}
	var fresh []share.RemoteGPU
	for _, g := range slices.SortedStableFunc(slices.Values(gpus), func(a, b share.RemoteGPU) int {
		return cmp.Or(cmp.Compare(a.Addr, b.Addr), cmp.Compare(a.Index, b.Index))
	}) {
		if g.UUID == "" || taken[g.UUID] {
			skipped = append(skipped, g)
			continue
		}
		taken[g.UUID] = true
		fresh = append(fresh, g)
	}
	slices.SortStableFunc(fresh, func(a, b share.RemoteGPU) int {
		return cmp.Or(cmp.Compare(a.Model, b.Model), cmp.Compare(a.MemoryMiB, b.MemoryMiB), cmp.Compare(a.SMCount, b.SMCount),
			cmp.Compare(a.ComputeCapability, b.ComputeCapability), cmp.Compare(a.CUDAVersion, b.CUDAVersion),
			cmp.Compare(a.Addr, b.Addr), cmp.Compare(a.Index, b.Index))
	})
	type key struct {
		model, cc, cuda string
		mem             uint64
		sms             int
	}
	names := map[key]string{}
	used := map[string]bool{}
	profile := fmt.Sprintf("%dx", shares)
	for _, g := range fresh {
		k := key{g.Model, g.ComputeCapability, g.CUDAVersion, g.MemoryMiB / uint64(shares), g.SMCount}
		name, ok := names[k]
		if !ok {
			base := share.GroupName(g.Model, string(share.Remote), profile)
			name = base
			for n := 2; used[name]; n++ {
				name = fmt.Sprintf("%s-%d", base, n)
			}
			used[name] = true
			names[k] = name
		}
		attrs := share.Attributes{
			Mechanism: share.Remote, MemoryMiB: k.mem, ComputePercent: 100 / shares, SMCount: g.SMCount,
			MemoryIsolation: Properties.MemoryIsolation, FaultIsolation: Properties.FaultIsolation,
			CUDAComputeCapability: g.ComputeCapability, CUDAVersion: g.CUDAVersion,
		}
		remote := g
		for n := 0; n < shares; n++ {
			offers = append(offers, share.Offer{
				Group: name, Profile: profile, Attrs: attrs, Spread: share.SpreadOneDevice,
				Share: share.Share{
					ID: share.SubID(g.UUID, share.Remote, n), Mechanism: share.Remote,
					GPU:     share.GPURef{Index: g.Index, UUID: g.UUID, Minor: -1, Model: g.Model},
					Replica: n, Replicas: shares, Remote: &remote,
					MemoryMiB: k.mem, ComputePercent: 100 / shares, SMCount: g.SMCount,
				},
			})
		}
	}
	return offers, skipped, nil
}

// scan looks at the pool and returns every remote GPU to offer: those found
// now and those seen before, which are marked down.
func (p *Provider) scan(ctx context.Context) ([]share.RemoteGPU, error) {
	if err := p.Load(); err != nil {
		return nil, err
	}
	p.mu.Lock()
	pl := p.pool
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, ScanTimeout)
	defer cancel()
	sc := pl.Scan(ctx)

	p.mu.Lock()
	defer p.mu.Unlock()
	listed := map[string]bool{}
	for _, s := range sc.Servers {
		listed[s] = true
	}
	seen := map[string]bool{}
	for _, g := range sc.GPUs {
		seen[g.UUID] = true
		if old, ok := p.known[g.UUID]; ok && old.Addr != g.Addr {
			p.logger.Info("remote GPU moved to another server address", "gpu", g.UUID, "from", old.Addr, "to", g.Addr)
		} else if !ok {
			p.logger.Info("remote GPU found", "server", g.Addr, "index", g.Index, "gpu", g.UUID, "model", g.Name, "memory_mib", g.MemoryMiB)
		}
		p.known[g.UUID] = remoteGPU(g)
		if why, was := p.down[g.UUID]; was {
			p.logger.Info("remote GPU usable again", "gpu", g.UUID, "server", g.Addr, "was", why)
			delete(p.down, g.UUID)
		}
	}
	for uuid, g := range p.known {
		if seen[uuid] {
			continue
		}
		var why string
		switch err, isDown := sc.Down[g.Addr]; {
		case isDown:
			why = fmt.Sprintf("remote server %s: %v", g.Addr, err)
		case !listed[g.Addr]:
			why = fmt.Sprintf("remote server %s is no longer in the pool (not in servers, not discovered as Nomad service %q)", g.Addr, p.cfg.Service)
		default:
			why = fmt.Sprintf("remote server %s no longer serves GPU %s", g.Addr, uuid)
		}
		if p.down[uuid] != why {
			p.logger.Warn("remote GPU unusable; its shares are unhealthy", "gpu", uuid, "reason", why)
		}
		p.down[uuid] = why
	}
	for _, addr := range slices.Sorted(maps.Keys(sc.Down)) {
		p.logOnce(hclog.Warn, "remote server not probed; its GPUs are not offered", fmt.Errorf("%s: %w", addr, sc.Down[addr]))
	}
	for _, err := range sc.Problems {
		p.logOnce(hclog.Warn, "remote pool", err)
	}
	p.interposer = ""
	if err := pool.CheckInterposer(p.cfg.InterposerDir); err != nil {
		p.interposer = err.Error()
		p.logOnce(hclog.Error, "remote shares are unhealthy", err)
	}
	out := make([]share.RemoteGPU, 0, len(p.known))
	for _, uuid := range slices.Sorted(maps.Keys(p.known)) {
		out = append(out, p.known[uuid])
	}
	return out, nil
}

// logOnce logs a problem the first time it is seen (each period would
// repeat it otherwise), and at debug level after that.
func (p *Provider) logOnce(level hclog.Level, msg string, err error) {
	p.logMu.Lock()
	defer p.logMu.Unlock()
	key := msg + ": " + err.Error()
	if p.logged[key] {
		p.logger.Debug(msg, "error", err)
		return
	}
	if len(p.logged) >= 256 { // errors that name ephemeral ports differ each time
		clear(p.logged)
	}
	p.logged[key] = true
	p.logger.Log(level, msg, "error", err)
}

// Health reports whether the remote GPU's shares can be used, and why not.
func (p *Provider) Health(s share.Share) (bool, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.interposer != "" {
		return false, p.interposer
	}
	if why, bad := p.down[s.GPU.UUID]; bad {
		return false, why
	}
	return true, ""
}

// Edits are what remote shares need: no device node at all (see
// share.DeviceEdits), the interposer directory mounted read-only at Mount
// and first on LD_LIBRARY_PATH, its nvidia-smi at SMIPath, the server's address and a token for the
// shares' memory (together) in GPUMUX_REMOTE_ADDR and GPUMUX_REMOTE_TOKEN.
// The interposer talks to one server about one GPU, so a task's remote
// shares must all be of one GPU, and cannot be mixed with local ones (the
// interposer replaces libcuda.so.1, which would hide local GPUs).
func (p *Provider) Edits(mine, all []share.Share, e *share.Edits) error {
	if err := share.Alone(share.Remote, all, "the interposer replaces libcuda.so.1"); err != nil {
		return err
	}
	if _, err := share.OneDevice(mine, "GPU", "the interposer talks to one GPU"); err != nil {
		return err
	}
	var mem uint64
	for _, s := range mine {
		if s.Remote == nil {
			return fmt.Errorf("share %s: a remote share without its server's GPU", s.ID)
		}
		mem += s.MemoryMiB
	}
	g := mine[0].Remote
	p.mu.Lock()
	secret := p.secret
	p.mu.Unlock()
	if secret == nil {
		return errors.New("remote shares: the pool secret was not read (the pool was not scanned)")
	}
	tok, err := pool.Grant(secret, p.issuer, g.Index, mem, p.cfg.TTL())
	if err != nil {
		return fmt.Errorf("shares %v: %w", share.SortedIDs(mine), err)
	}
	e.Env[EnvAddr] = g.Addr
	e.Env[EnvToken] = tok
	e.Env[share.EnvLibraryPath] = Mount
	e.Mounts = append(e.Mounts,
		share.Mount{HostPath: p.cfg.InterposerDir, ContainerPath: Mount, ReadOnly: true},
		share.Mount{HostPath: filepath.Join(p.cfg.InterposerDir, pool.SMI), ContainerPath: SMIPath, ReadOnly: true})
	tlsEdits(p.cfg, g.Addr, e)
	return nil
}

// tlsEdits gives a container what its interposer needs to reach a TCP
// server over TLS: the remote block's CA (and client certificate and key)
// mounted read-only under TLSMount, and their paths there (and the name to
// check) in its environment. A unix socket needs none of it.
func tlsEdits(cfg *nodeconfig.Remote, addr string, e *share.Edits) {
	if cfg.TLSCAFile == "" || strings.HasPrefix(addr, "unix:") {
		return
	}
	for _, f := range []struct{ env, host, name string }{
		{EnvTLSCA, cfg.TLSCAFile, "ca.pem"},
		{EnvTLSCert, cfg.TLSCertFile, "client.pem"},
		{EnvTLSKey, cfg.TLSKeyFile, "client-key.pem"},
	} {
		if f.host == "" {
			continue
		}
		in := path.Join(TLSMount, f.name)
		e.Env[f.env] = in
		e.Mounts = append(e.Mounts, share.Mount{HostPath: f.host, ContainerPath: in, ReadOnly: true})
	}
	if cfg.TLSServerName != "" {
		e.Env[EnvTLSServerName] = cfg.TLSServerName
	}
}
