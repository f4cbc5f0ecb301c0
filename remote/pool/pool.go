package pool

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpumux/gpumux/remote/proto"
	"github.com/gpumux/gpumux/remote/token"
)

// DefaultTimeout bounds the Nomad query and the probe of each server.
const DefaultTimeout = 5 * time.Second

// Defaults of discovery through Nomad, for the node config's remote block
// and gpumux-remoted's --drain-to pool alike.
const (
	// DefaultService is the Nomad service the pool's servers register.
	DefaultService = "gpumux-remote"
	// DefaultNomadAddr is the Nomad agent's HTTP API on the local host.
	DefaultNomadAddr = "http://127.0.0.1:4646"
	// DefaultNomadNamespace is the namespace of the service.
	DefaultNomadNamespace = "default"
)

// ProbeTTL is the lifetime of a probe's token: long enough for one probe,
// too short to be worth stealing. A probe token has no memory quota (the
// server then reports each GPU's whole memory) and allocates nothing.
const ProbeTTL = time.Minute

// maxDevices bounds the GPUs probed on one server.
const maxDevices = 256

// maxParallel bounds the servers probed at once.
const maxParallel = 8

// CUdevice_attribute numbers (cuda.h) the probe reads.
const (
	attrMultiprocessorCount = 16
	attrComputeCapMajor     = 75
	attrComputeCapMinor     = 76
)

// GPU is one GPU of a server.
type GPU struct {
	// Addr is the server as clients dial it: "host:port" or "unix:/path".
	Addr string
	// Index is the GPU's device ordinal on the server (token.Claims.Device).
	Index     int
	UUID      string // GPU-…, as NVML and nvidia-smi write it
	Name      string // cuDeviceGetName, e.g. "NVIDIA H200"
	MemoryMiB uint64
	SMs       int
	CC        string // compute capability, e.g. "9.0"
	// CUDA is the server's CUDA driver API version, e.g. "13.0".
	CUDA string
}

// Config says where the pool's servers are and how to talk to them.
type Config struct {
	// Servers are static addresses: "host:port" or "unix:/path".
	Servers []string
	// Discover asks Nomad for the services named Service in Namespace.
	Discover  bool
	Service   string
	Namespace string
	// NomadAddr is the Nomad agent's HTTP API, e.g. http://127.0.0.1:4646.
	NomadAddr string
	// NomadToken is a Nomad ACL token ("": none).
	NomadToken string
	// ExcludeAlloc leaves out the service instances of this Nomad
	// allocation: a server looking for the others of its pool.
	ExcludeAlloc string
	// Secret is the pool's token secret.
	Secret []byte
	// Timeout bounds the Nomad query and each server's probe (0: DefaultTimeout).
	Timeout time.Duration
	// HTTP is the client for the Nomad API (nil: a plain one).
	HTTP *http.Client
	// Identity names this client to servers, for their logs (default
	// "<hostname>/<pid>/gpumux-pool").
	Identity string
	// TLS, if set, is how TCP servers are reached: over TLS, trusting its
	// RootCAs, checking its ServerName or else the host of each address,
	// with its Certificates for mutual TLS. Unix sockets stay plain.
	TLS *tls.Config
}

// ErrNoCerts: a CA file holds no PEM certificate.
var ErrNoCerts = errors.New("no PEM certificate in it")

// ReadCAs reads the PEM certificates of file into a pool of CAs to trust.
func ReadCAs(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: %w", file, ErrNoCerts)
	}
	return roots, nil
}

// ClientTLS is how a client node or a server of the pool reaches servers
// that serve TLS: trusting the CAs of caFile, checking serverName in every
// certificate, or else the host of each address.
func ClientTLS(caFile, serverName string) (*tls.Config, error) {
	roots, err := ReadCAs(caFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{RootCAs: roots, ServerName: serverName, MinVersion: tls.VersionTLS12}, nil
}

// Pool finds servers and probes them.
type Pool struct {
	cfg Config
}

// New returns a pool. The secret must be a usable one (token.MinSecret).
func New(cfg Config) (*Pool, error) {
	if len(cfg.Secret) < token.MinSecret {
		return nil, fmt.Errorf("pool secret of %d bytes, want at least %d", len(cfg.Secret), token.MinSecret)
	}
	for _, s := range cfg.Servers {
		if err := CheckServerAddr(s); err != nil {
			return nil, fmt.Errorf("server %q: %w", s, err)
		}
	}
	if cfg.Discover {
		if cfg.Service == "" || cfg.NomadAddr == "" {
			return nil, errors.New("discovery needs a service name and a Nomad address")
		}
		if cfg.Namespace == "" {
			cfg.Namespace = DefaultNomadNamespace
		}
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.HTTP == nil {
		cfg.HTTP = &http.Client{}
	}
	if cfg.Identity == "" {
		host, _ := os.Hostname()
		exe, _ := os.Executable()
		cfg.Identity = fmt.Sprintf("%s/%d/%s", host, os.Getpid(), cmp.Or(filepath.Base(exe), "gpumux-pool"))
	}
	cfg.Secret = slices.Clone(cfg.Secret)
	return &Pool{cfg: cfg}, nil
}

// Scan is what one look at the pool found.
type Scan struct {
	// Servers are the addresses looked at, static ones first, then the
	// discovered ones, sorted.
	Servers []string
	// GPUs are the GPUs of the servers that answered, sorted by server and
	// index. A GPU seen through two servers is listed once (the first).
	GPUs []GPU
	// Down says why each server that was looked at could not be probed.
	Down map[string]error
	// Problems are everything else worth a log line: discovery failures,
	// GPUs seen twice.
	Problems []error
}

// Scan discovers the servers and probes them, concurrently, each within
// the pool's timeout. Failures are in the result, never fatal: a Scan with
// no GPUs and problems is what an unreachable pool looks like.
func (p *Pool) Scan(ctx context.Context) Scan {
	var sc Scan
	sc.Down = map[string]error{}
	seen := map[string]bool{}
	for _, s := range p.cfg.Servers {
		if !seen[s] {
			seen[s] = true
			sc.Servers = append(sc.Servers, s)
		}
	}
	if p.cfg.Discover {
		found, err := p.Discover(ctx)
		if err != nil {
			sc.Problems = append(sc.Problems, err)
		}
		slices.Sort(found)
		for _, s := range found {
			if !seen[s] {
				seen[s] = true
				sc.Servers = append(sc.Servers, s)
			}
		}
	}

	results := make([][]GPU, len(sc.Servers))
	errs := make([]error, len(sc.Servers))
	var wg sync.WaitGroup
	sem := make(chan struct{}, maxParallel)
	for i, addr := range sc.Servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			results[i], errs[i] = probe(ctx, addr, p.cfg.Secret, p.cfg.Timeout, p.cfg.Identity, p.cfg.TLS)
		}()
	}
	wg.Wait()

	byUUID := map[string]GPU{}
	for i, addr := range sc.Servers {
		if errs[i] != nil {
			sc.Down[addr] = errs[i]
			continue
		}
		for _, g := range results[i] {
			if first, dup := byUUID[g.UUID]; dup {
				sc.Problems = append(sc.Problems, fmt.Errorf("GPU %s is served by %s (GPU %d) and by %s (GPU %d): offered through %s only",
					g.UUID, first.Addr, first.Index, g.Addr, g.Index, first.Addr))
				continue
			}
			byUUID[g.UUID] = g
			sc.GPUs = append(sc.GPUs, g)
		}
	}
	return sc
}

// service is the part of Nomad's ServiceRegistration the pool reads.
type service struct {
	Address string
	Port    int
	AllocID string
	NodeID  string
}

// Discover asks the Nomad agent for the service's instances and returns
// their addresses ("host:port").
func (p *Pool) Discover(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	u := strings.TrimSuffix(p.cfg.NomadAddr, "/") + "/v1/service/" + url.PathEscape(p.cfg.Service) + "?namespace=" + url.QueryEscape(p.cfg.Namespace)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("discovering service %q: %w", p.cfg.Service, err)
	}
	if p.cfg.NomadToken != "" {
		req.Header.Set("X-Nomad-Token", p.cfg.NomadToken)
	}
	resp, err := p.cfg.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("discovering service %q through Nomad at %s: %w", p.cfg.Service, p.cfg.NomadAddr, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, fmt.Errorf("discovering service %q through Nomad at %s: reading the answer: %w", p.cfg.Service, p.cfg.NomadAddr, err)
	}
	if resp.StatusCode != http.StatusOK {
		msg := strings.TrimSpace(string(body))
		if len(msg) > 200 {
			msg = msg[:200] + "…"
		}
		hint := ""
		if resp.StatusCode == http.StatusForbidden {
			hint = " (with ACLs on, give the remote block a nomad_token_file whose token may read services in namespace " + strconv.Quote(p.cfg.Namespace) + ")"
		}
		return nil, fmt.Errorf("discovering service %q through Nomad at %s: %s: %s%s", p.cfg.Service, p.cfg.NomadAddr, resp.Status, msg, hint)
	}
	var regs []service
	if err := json.Unmarshal(body, &regs); err != nil {
		return nil, fmt.Errorf("discovering service %q through Nomad at %s: decoding the answer: %w", p.cfg.Service, p.cfg.NomadAddr, err)
	}
	var out []string
	var bad []string
	for _, r := range regs {
		if p.cfg.ExcludeAlloc != "" && r.AllocID == p.cfg.ExcludeAlloc {
			continue
		}
		if r.Address == "" || r.Port < 1 || r.Port > 65535 {
			bad = append(bad, fmt.Sprintf("allocation %s: address %q port %d", r.AllocID, r.Address, r.Port))
			continue
		}
		out = append(out, net.JoinHostPort(r.Address, strconv.Itoa(r.Port)))
	}
	if len(bad) > 0 {
		return out, fmt.Errorf("service %q: instances without a usable address left out (give the service a port): %s", p.cfg.Service, strings.Join(bad, "; "))
	}
	return out, nil
}

// CheckServerAddr checks a gpumux-remoted address: "host:port" (a port from
// 1 to 65535) or "unix:/absolute/path".
func CheckServerAddr(s string) error {
	if p, ok := strings.CutPrefix(s, "unix:"); ok {
		if !filepath.IsAbs(p) {
			return fmt.Errorf("want unix:/absolute/path")
		}
		return nil
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil || host == "" {
		return fmt.Errorf(`want host:port (e.g. "10.0.0.5:7070") or unix:/path`)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q: want 1 to 65535", port)
	}
	return nil
}

// Probe reads the GPUs of the server at addr. The server shows a client
// only the GPU its token names, so each GPU takes a connection of its own,
// with a token for GPU 0, 1, … until the server refuses one. A server that
// shows more than one GPU to one token does not honour tokens, so it cannot
// give a share of one GPU: it is refused.
func Probe(ctx context.Context, addr string, secret []byte, timeout time.Duration, identity string) ([]GPU, error) {
	return probe(ctx, addr, secret, timeout, identity, nil)
}

// probe is Probe, over TLS to a TCP server with tlsConfig.
func probe(ctx context.Context, addr string, secret []byte, timeout time.Duration, identity string, tlsConfig *tls.Config) ([]GPU, error) {
	id, err := randomID("probe")
	if err != nil {
		return nil, err
	}
	var out []GPU
	for dev := 0; dev < maxDevices; dev++ {
		g, err := probeOne(ctx, addr, secret, timeout, identity, id, dev, tlsConfig)
		if err != nil {
			if dev > 0 && errors.Is(err, proto.ErrRefused) && ctx.Err() == nil {
				break // past the server's last GPU
			}
			if dev > 0 {
				return nil, fmt.Errorf("server %s: GPU %d: %w", addr, dev, err)
			}
			return nil, fmt.Errorf("server %s: %w", addr, err)
		}
		out = append(out, g)
	}
	return out, nil
}

// probeOne reads GPU dev of the server at addr over a connection of its own.
func probeOne(ctx context.Context, addr string, secret []byte, timeout time.Duration, identity, id string, dev int, tlsConfig *tls.Config) (GPU, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tok, err := token.Mint(secret, token.Claims{ID: id, Quota: 0, Device: dev, Expires: time.Now().Add(ProbeTTL)})
	if err != nil {
		return GPU{}, err
	}
	// proto.NewClient bounds each wait by timeout only; closing the
	// connection when ctx ends bounds the handshake and the calls by ctx
	// as well.
	conn, err := proto.DialAddr(ctx, addr, tlsConfig)
	if err != nil {
		return GPU{}, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	cl, err := proto.NewClient(conn, proto.Hello{Token: tok, Identity: identity}, timeout)
	if err != nil {
		if ctx.Err() != nil {
			return GPU{}, fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		return GPU{}, err
	}

	var firstErr error
	call := func(what string, r proto.Result, err error) bool {
		if firstErr != nil {
			return false
		}
		switch {
		case err != nil && ctx.Err() != nil:
			firstErr = fmt.Errorf("%s: %w", what, ctx.Err())
		case err != nil:
			firstErr = fmt.Errorf("%s: %w", what, err)
		case r != proto.Success:
			firstErr = fmt.Errorf("%s: %v", what, r)
		}
		return firstErr == nil
	}
	g := GPU{Addr: addr, Index: dev}
	r, err := cl.Init(0, 0)
	call("cuInit", r, err)
	version, r, err := cl.DriverGetVersion(0)
	call("cuDriverGetVersion", r, err)
	count, r, err := cl.DeviceGetCount(0)
	if call("cuDeviceGetCount", r, err) && count != 1 {
		return GPU{}, fmt.Errorf("a token for GPU %d shows %d GPUs: the server does not honour tokens (is it running without a token secret?), so it cannot serve shares", dev, count)
	}
	d, r, err := cl.DeviceGet(0, 0)
	call("cuDeviceGet", r, err)
	name, r, err := cl.DeviceGetName(0, 256, d)
	call("cuDeviceGetName", r, err)
	mem, r, err := cl.DeviceTotalMemV2(0, d)
	call("cuDeviceTotalMem", r, err)
	sms, r, err := cl.DeviceGetAttribute(0, attrMultiprocessorCount, d)
	call("cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)", r, err)
	major, r, err := cl.DeviceGetAttribute(0, attrComputeCapMajor, d)
	call("cuDeviceGetAttribute(COMPUTE_CAPABILITY_MAJOR)", r, err)
	minor, r, err := cl.DeviceGetAttribute(0, attrComputeCapMinor, d)
	call("cuDeviceGetAttribute(COMPUTE_CAPABILITY_MINOR)", r, err)
	uuid, r, err := cl.DeviceGetUuidV2(0, d)
	call("cuDeviceGetUuid_v2", r, err)
	if firstErr != nil {
		return GPU{}, firstErr
	}
	g.Name = strings.TrimRight(name, "\x00")
	g.MemoryMiB = mem >> 20
	g.SMs = int(sms)
	g.CC = fmt.Sprintf("%d.%d", major, minor)
	g.CUDA = fmt.Sprintf("%d.%d", version/1000, version%1000/10)
	g.UUID = FormatUUID(uuid)
	if g.Name == "" || g.MemoryMiB == 0 {
		return GPU{}, fmt.Errorf("GPU %d reports name %q and %d bytes of memory", dev, g.Name, mem)
	}
	return g, nil
}

// FormatUUID writes a CUDA device UUID as NVML does: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx.
func FormatUUID(u [16]byte) string {
	h := hex.EncodeToString(u[:])
	return "GPU-" + h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// randomID returns "<prefix>-<32 hex digits>": a token ID no one else has.
func randomID(prefix string) (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return prefix + "-" + hex.EncodeToString(b), nil
}

// Grant mints the token of one reservation of quotaMiB of device memory on
// the GPU whose index on its server is device (GPU.Index), valid for ttl: a
// new random ID (so that the server counts the reservation's connections,
// and only them, against its quota) prefixed with who granted it ("nomad",
// "runtime"), the quota in bytes and the device index.
func Grant(secret []byte, by string, device int, quotaMiB uint64, ttl time.Duration) (string, error) {
	if quotaMiB == 0 {
		return "", errors.New("a reservation's token needs a memory quota (0 would mean none)")
	}
	id, err := randomID(by)
	if err != nil {
		return "", err
	}
	return token.Mint(secret, token.Claims{ID: id, Quota: quotaMiB << 20, Device: device, Expires: time.Now().Add(ttl)})
}

// InterposerLib is the interposer's file name in a node's interposer_dir:
// the libcuda.so.1 that forwards a program's CUDA calls to its server.
const InterposerLib = "libcuda.so.1"

// NVMLLib is the file name of the NVML library of remote shares in a node's
// interposer_dir (remote/nvml): the libnvidia-ml.so.1 that answers NVML's
// queries (nvidia-smi's, PyTorch's) for the share through the interposer.
const NVMLLib = "libnvidia-ml.so.1"

// SMI is the file name of the nvidia-smi of remote shares in a node's
// interposer_dir (remote/nvml/smi): it answers from NVMLLib, and containers
// get it as /usr/bin/nvidia-smi.
const SMI = "nvidia-smi"

// CheckInterposer says why the interposer directory dir cannot be given to
// a container, or returns nil: it must hold the interposer, the NVML
// library of remote shares and its nvidia-smi, as regular files.
func CheckInterposer(dir string) error {
	for _, f := range []struct{ name, what, hint string }{
		{InterposerLib, "interposer", "make interposer"},
		{NVMLLib, "NVML library of remote shares", "make remote-nvml"},
		{SMI, "nvidia-smi of remote shares", "make remote-nvml"},
	} {
		lib := filepath.Join(dir, f.name)
		fi, err := os.Stat(lib)
		switch {
		case err != nil:
			return fmt.Errorf("%s %s: %w (install gpumux's %s there (%s), or set the remote block's interposer_dir)",
				f.what, lib, err, f.name, f.hint)
		case !fi.Mode().IsRegular():
			return fmt.Errorf("%s %s is not a regular file", f.what, lib)
		}
	}
	return nil
}
