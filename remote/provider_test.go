package remote_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/gpumux/gpumux/gpu"
	"github.com/gpumux/gpumux/internal/tlstest"
	"github.com/gpumux/gpumux/nodeconfig"
	"github.com/gpumux/gpumux/remote"
	"github.com/gpumux/gpumux/remote/fakecuda"
	remotepool "github.com/gpumux/gpumux/remote/pool"
	"github.com/gpumux/gpumux/remote/pool/pooltest"
	"github.com/gpumux/gpumux/remote/server"
	"github.com/gpumux/gpumux/remote/token"
	"github.com/gpumux/gpumux/share"
)

// remoteGPUs are two servers' GPUs: two H200 on a, one on b, and an H100 on
// b whose UUID collides with nothing.
var remoteGPUs = []share.RemoteGPU{
	{Addr: "10.0.0.6:7070", Index: 0, UUID: "GPU-r6-0", Model: "NVIDIA H200", MemoryMiB: 143771, SMCount: 132, ComputeCapability: "9.0", CUDAVersion: "13.0"},
	{Addr: "10.0.0.5:7070", Index: 1, UUID: "GPU-r5-1", Model: "NVIDIA H200", MemoryMiB: 143771, SMCount: 132, ComputeCapability: "9.0", CUDAVersion: "13.0"},
	{Addr: "10.0.0.5:7070", Index: 0, UUID: "GPU-r5-0", Model: "NVIDIA H200", MemoryMiB: 143771, SMCount: 132, ComputeCapability: "9.0", CUDAVersion: "13.0"},
	{Addr: "10.0.0.6:7070", Index: 1, UUID: "GPU-r6-1", Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, SMCount: 132, ComputeCapability: "9.0", CUDAVersion: "13.0"},
}

// localNode is a node whose own GPU 3 is also served to the pool.
var localNode = &gpu.Node{GPUs: []gpu.GPU{
	{Index: 0, UUID: "GPU-local-0", Model: "NVIDIA H200", MemoryMiB: 143771, SMCount: 132},
	{Index: 3, UUID: "GPU-local-3", Model: "NVIDIA H200", MemoryMiB: 143771, SMCount: 132},
}}

// catalogOf groups offers, failing the test on an error.
func catalogOf(t *testing.T, offers []share.Offer) *share.Catalog {
	t.Helper()
	c, err := share.NewCatalog(offers)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func groupNames(c *share.Catalog) []string {
	var out []string
	for _, g := range c.Groups {
		out = append(out, g.Name)
	}
	return out
}

func TestOffersOf(t *testing.T) {
	gpus := append(slices.Clone(remoteGPUs),
		// GPU 3 of this node, served back to it by a server on the node.
		share.RemoteGPU{Addr: "127.0.0.1:7070", Index: 0, UUID: "GPU-local-3", Model: "NVIDIA H200", MemoryMiB: 143771, SMCount: 132},
		share.RemoteGPU{Addr: "10.0.0.7:7070", Index: 0, UUID: "GPU-r5-0", Model: "NVIDIA H200", MemoryMiB: 143771, SMCount: 132}, // seen twice
		share.RemoteGPU{Addr: "10.0.0.8:7070", Index: 0, UUID: "GPU-r8-0", Model: "NVIDIA H200", MemoryMiB: 97871, SMCount: 132, ComputeCapability: "9.0", CUDAVersion: "13.0"},
		share.RemoteGPU{Addr: "10.0.0.9:7070", Index: 0, Model: "NVIDIA H200", MemoryMiB: 97871, SMCount: 132}, // no UUID
	)
	offers, skipped, err := remote.OffersOf(gpus, localNode, 4)
	if err != nil {
		t.Fatal(err)
	}
	var sk []string
	for _, g := range skipped {
		sk = append(sk, g.Addr+"="+g.UUID)
	}
	if want := []string{"10.0.0.7:7070=GPU-r5-0", "10.0.0.9:7070=", "127.0.0.1:7070=GPU-local-3"}; !slices.Equal(sk, want) {
		t.Errorf("skipped %v, want %v", sk, want)
	}
	c := catalogOf(t, offers)
	if c.Len() != 4*5 {
		t.Errorf("%d shares, want 4 of each of 5 GPUs", c.Len())
	}
	got := map[string]string{}
	for _, g := range c.Groups {
		if g.Mechanism != share.Remote || g.Spread != share.SpreadOneDevice || g.Profile != "4x" {
			t.Errorf("group %s: %s, spread %d, profile %q", g.Name, g.Mechanism, g.Spread, g.Profile)
		}
		a := g.Attrs
		got[g.Name] = fmt.Sprintf("%d× %d MiB %d%% %d SMs %s fault=%v cc=%s cuda=%s parent=%s addr=%s",
			len(g.Shares), a.MemoryMiB, a.ComputePercent, a.SMCount, a.MemoryIsolation, a.FaultIsolation, a.CUDAComputeCapability, a.CUDAVersion, a.ParentUUID, a.RemoteAddr)
	}
	want := map[string]string{
		// The smaller H200 variant sorts first and gets the plain name.
		"H200-remote-4x":           "4× 24467 MiB 25% 132 SMs hard fault=false cc=9.0 cuda=13.0 parent=GPU-r8-0 addr=10.0.0.8:7070",
		"H200-remote-4x-2":         "12× 35942 MiB 25% 132 SMs hard fault=false cc=9.0 cuda=13.0 parent= addr=",
		"H100-80GB-HBM3-remote-4x": "4× 20389 MiB 25% 132 SMs hard fault=false cc=9.0 cuda=13.0 parent=GPU-r6-1 addr=10.0.0.6:7070",
	}
	if len(got) != len(want) {
		t.Errorf("remote groups %v", got)
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: %s, want %s", name, got[name], w)
		}
	}
	s, err := c.Lookup("GPU-r5-1/remote/3")
	if err != nil {
		t.Fatal(err)
	}
	r := s[0]
	if r.Mechanism != share.Remote || r.Parent() != "GPU-r5-1" || r.Remote == nil || r.Remote.Addr != "10.0.0.5:7070" || r.Remote.Index != 1 ||
		r.GPU.Index != 1 || r.GPU.Minor != -1 || r.MemoryMiB != 35942 || r.Replica != 3 || r.Replicas != 4 {
		t.Errorf("share %+v (remote %+v)", r, r.Remote)
	}
	if !share.IsRemoteID(r.ID) || share.IsRemoteID("GPU-local-0/mps/0") {
		t.Error("IsRemoteID")
	}
	// The seen-twice GPU is its first server's (by address).
	if s, _ := c.Lookup("GPU-r5-0/remote/0"); len(s) != 1 || s[0].Remote.Addr != "10.0.0.5:7070" {
		t.Errorf("GPU-r5-0 offered as %+v", s)
	}
	// Shares of one GPU do not share their RemoteGPU with another GPU's.
	a, _ := c.Lookup("GPU-r5-0/remote/0", "GPU-r5-1/remote/0")
	if a[0].Remote == a[1].Remote || a[0].Remote.UUID != "GPU-r5-0" {
		t.Errorf("remote GPUs %+v and %+v", a[0].Remote, a[1].Remote)
	}

	// The order of discovery does not change IDs, groups or names.
	rev := slices.Clone(gpus)
	slices.Reverse(rev)
	offers2, _, err := remote.OffersOf(rev, localNode, 4)
	if err != nil {
		t.Fatal(err)
	}
	c2 := catalogOf(t, offers2)
	for _, g := range c.Groups {
		ids := share.SortedIDs(g.Shares)
		g2 := groupOf(c2, g.Name)
		if g2 == nil || !slices.Equal(share.SortedIDs(g2.Shares), ids) {
			t.Errorf("group %s: %v, in reverse discovery order %v", g.Name, ids, g2)
		}
	}
	if n1, n2 := groupNames(c), groupNames(c2); !slices.Equal(n1, n2) {
		t.Errorf("group names depend on discovery order: %v vs %v", n1, n2)
	}

	for _, bad := range []int{0, -1, 49} {
		if _, _, err := remote.OffersOf(gpus, localNode, bad); err == nil || !strings.Contains(err.Error(), "1 to 48") {
			t.Errorf("shares %d: %v", bad, err)
		}
	}
	// A node without GPUs of its own.
	only, _, err := remote.OffersOf(remoteGPUs[:1], &gpu.Node{}, 2)
	if c := catalogOf(t, only); err != nil || c.Len() != 2 || len(c.Groups) != 1 || c.Groups[0].Name != "H200-remote-2x" || c.Groups[0].Attrs.MemoryMiB != 143771/2 {
		t.Errorf("remote only: %v %+v", err, c)
	}
	// No remote GPUs.
	if none, _, err := remote.OffersOf(nil, localNode, 4); err != nil || len(none) != 0 {
		t.Errorf("no remote GPUs: %v, %v", none, err)
	}
}

func groupOf(c *share.Catalog, name string) *share.Group {
	for i := range c.Groups {
		if c.Groups[i].Name == name {
			return &c.Groups[i]
		}
	}
	return nil
}

// pool is a remote block naming one real server with two 16 GiB fake
// H200s, split in 4 shares each.
type pool struct {
	srv        *pooltest.Server
	cfg        *nodeconfig.Remote
	interposer string
}

func startPool(t *testing.T) *pool {
	t.Helper()
	srv := pooltest.Start(t, pooltest.Options{Fake: []fakecuda.Option{fakecuda.WithDevices(2), fakecuda.WithMemory(16 << 30), fakecuda.WithName("NVIDIA H200")}})
	dir := t.TempDir()
	interposer := pooltest.WriteInterposer(t, dir)
	cfg, err := nodeconfig.ParseConfig([]byte(fmt.Sprintf("remote {\n servers = [%q]\n token_file = %q\n interposer_dir = %q\n}\n",
		srv.Addr, pooltest.WriteSecret(t, dir), interposer)))
	if err != nil {
		t.Fatal(err)
	}
	return &pool{srv: srv, cfg: cfg.Remote, interposer: interposer}
}

// scan is the provider's offers on a node without GPUs, as a catalog.
func scan(t *testing.T, p *remote.Provider, node *gpu.Node) *share.Catalog {
	t.Helper()
	offers, err := p.Offers(context.Background(), node, nil)
	if err != nil {
		t.Fatal(err)
	}
	return catalogOf(t, offers)
}

func TestProvider(t *testing.T) {
	pl := startPool(t)
	p := remote.NewProvider(pl.cfg, "runtime", hclog.NewNullLogger())
	if p.Mechanism() != share.Remote {
		t.Errorf("Mechanism %s", p.Mechanism())
	}
	c := scan(t, p, &gpu.Node{})
	if got := groupNames(c); !slices.Equal(got, []string{"H200-remote-4x"}) || c.Len() != 8 {
		t.Fatalf("groups %v, %d shares; want 8 shares of H200-remote-4x", got, c.Len())
	}
	if a := c.Groups[0].Attrs; a.MemoryMiB != 4096 || a.RemoteAddr != pl.srv.Addr || a.ComputePercent != 25 || a.MemoryIsolation != remote.Properties.MemoryIsolation {
		t.Errorf("attributes %+v", a)
	}
	shares := c.Shares()
	for _, s := range shares {
		if ok, why := p.Health(s); !ok {
			t.Errorf("%s unhealthy: %s", s.ID, why)
		}
	}
	gpu1 := shares[len(shares)-1].GPU.UUID
	two, err := c.Lookup(gpu1+"/remote/1", gpu1+"/remote/3")
	if err != nil {
		t.Fatal(err)
	}

	// Edits: added to the device edits (only GPUMUX_SHARES for remote shares).
	e, err := share.DeviceEdits(two, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Edits(two, two, &e); err != nil {
		t.Fatal(err)
	}
	tok := e.Env[remote.EnvToken]
	want := map[string]string{
		share.EnvShares:      gpu1 + "/remote/1," + gpu1 + "/remote/3",
		remote.EnvAddr:       pl.srv.Addr,
		remote.EnvToken:      tok,
		share.EnvLibraryPath: remote.Mount,
	}
	if fmt.Sprint(e.Env) != fmt.Sprint(want) {
		t.Errorf("env\n got %v\nwant %v", e.Env, want)
	}
	claims, err := token.Check(pooltest.Secret, tok, time.Now())
	if err != nil {
		t.Fatalf("token %q: %v", tok, err)
	}
	if claims.Quota != 8<<30 || claims.Device != two[0].Remote.Index || claims.Device != 1 || !strings.HasPrefix(claims.ID, "runtime-") || claims.Expires.Before(time.Now().Add(719*time.Hour)) {
		t.Errorf("token claims %+v: want the two shares' 8 GiB on GPU 1, from runtime, for 720h", claims)
	}
	if len(e.DeviceNodes) != 0 || !slices.Equal(e.Mounts, interposerMounts(pl.interposer)) {
		t.Errorf("device nodes %v, mounts %+v", e.DeviceNodes, e.Mounts)
	}

	// Refused: shares of two GPUs, remote with local shares.
	other, _ := c.Lookup(shares[0].ID)
	if err := p.Edits(append(other, two[0]), append(other, two[0]), &share.Edits{Env: map[string]string{}}); err == nil || !strings.Contains(err.Error(), "must come from one GPU") {
		t.Errorf("shares of two GPUs: %v", err)
	}
	local := share.Share{ID: "GPU-local", Mechanism: share.Exclusive, GPU: share.GPURef{UUID: "GPU-local"}}
	if err := p.Edits(two, append(slices.Clone(two), local), &share.Edits{Env: map[string]string{}}); err == nil || !strings.Contains(err.Error(), "remote shares cannot be combined with exclusive shares") {
		t.Errorf("remote with a local share: %v", err)
	}

	// The interposer or its NVML library gone: every share is unhealthy,
	// with the reason.
	for _, tc := range []struct{ lib, why string }{
		{"libcuda.so.1", "interposer " + pl.interposer + "/libcuda.so.1"},
		{"libnvidia-ml.so.1", "NVML library of remote shares " + pl.interposer + "/libnvidia-ml.so.1"},
	} {
		lib := filepath.Join(pl.interposer, tc.lib)
		if err := os.Rename(lib, lib+".off"); err != nil {
			t.Fatal(err)
		}
		scan(t, p, &gpu.Node{})
		if ok, why := p.Health(two[0]); ok || !strings.Contains(why, tc.why) {
			t.Errorf("without %s: %v %q", tc.lib, ok, why)
		}
		if err := os.Rename(lib+".off", lib); err != nil {
			t.Fatal(err)
		}
		scan(t, p, &gpu.Node{})
		if ok, why := p.Health(two[0]); !ok {
			t.Errorf("%s back: unhealthy: %s", tc.lib, why)
		}
	}

	// The server down: its GPUs stay offered, under the same IDs, unhealthy.
	addr := pl.srv.Addr
	pl.srv.Stop()
	down := scan(t, p, &gpu.Node{})
	if !slices.Equal(share.SortedIDs(down.Shares()), share.SortedIDs(shares)) {
		t.Errorf("with the server down: %v, want %v", share.SortedIDs(down.Shares()), share.SortedIDs(shares))
	}
	if ok, why := p.Health(two[0]); ok || !strings.Contains(why, "remote server "+addr) {
		t.Errorf("server down: %v %q", ok, why)
	}
	// Back at the same address: healthy again.
	pooltest.Start(t, pooltest.Options{Addr: addr, Fake: []fakecuda.Option{fakecuda.WithDevices(2), fakecuda.WithMemory(16 << 30), fakecuda.WithName("NVIDIA H200")}})
	scan(t, p, &gpu.Node{})
	if ok, why := p.Health(two[0]); !ok {
		t.Errorf("server back: unhealthy: %s", why)
	}
}

// TestProviderSkipsTheNodesOwnGPU: a GPU the node has itself is not
// offered again as a remote one.
func TestProviderSkipsTheNodesOwnGPU(t *testing.T) {
	pl := startPool(t)
	p := remote.NewProvider(pl.cfg, "gpumux", hclog.NewNullLogger())
	all := scan(t, p, &gpu.Node{})
	mine := all.Shares()[0].GPU.UUID
	c := scan(t, p, &gpu.Node{GPUs: []gpu.GPU{{Index: 0, UUID: mine, Model: "NVIDIA H200"}}})
	if c.Len() != 4 {
		t.Errorf("%d shares, want the other GPU's 4", c.Len())
	}
	for _, s := range c.Shares() {
		if s.GPU.UUID == mine {
			t.Errorf("the node's own GPU offered as %s", s.ID)
		}
	}
}

func TestProviderWithoutSecret(t *testing.T) {
	pl := startPool(t)
	p := remote.NewProvider(pl.cfg, "gpumux", hclog.NewNullLogger())
	s := share.Share{ID: "GPU-r/remote/0", Mechanism: share.Remote, GPU: share.GPURef{UUID: "GPU-r", Minor: -1},
		Remote: &share.RemoteGPU{Addr: pl.srv.Addr, UUID: "GPU-r"}, MemoryMiB: 4096}
	// Not scanned yet: nothing to mint with.
	if err := p.Edits([]share.Share{s}, []share.Share{s}, &share.Edits{Env: map[string]string{}}); err == nil || !strings.Contains(err.Error(), "pool secret was not read") {
		t.Errorf("Edits before a scan: %v", err)
	}
	// A token file that cannot be read: Offers says so.
	bad := *pl.cfg
	bad.TokenFile = filepath.Join(t.TempDir(), "missing.key")
	q := remote.NewProvider(&bad, "gpumux", hclog.NewNullLogger())
	if _, err := q.Offers(context.Background(), &gpu.Node{}, nil); err == nil || !strings.Contains(err.Error(), "token_file") {
		t.Errorf("Offers without a secret: %v", err)
	}
	// A secret read once is kept when the file goes bad later.
	good := *pl.cfg
	r := remote.NewProvider(&good, "gpumux", hclog.NewNullLogger())
	scan(t, r, &gpu.Node{})
	good.TokenFile = bad.TokenFile
	if c := scan(t, r, &gpu.Node{}); c.Len() != 8 {
		t.Errorf("with the secret file gone: %d shares", c.Len())
	}
}

// TestProviderTLS: with the remote block's tls_* settings the pool probes
// a mutual TLS server, and a task's edits carry the CA, the client
// certificate and key (mounted read-only) and the name to check; without
// them the server is down, with its refusal as the reason.
func TestProviderTLS(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "ca")
	clients := tlstest.NewCA(t, dir, "clients")
	pair := ca.Server(t, "server", []string{"gpu.example.com"}, tlstest.Options{})
	files, err := server.LoadTLS(server.TLSPaths{Cert: pair.CertFile, Key: pair.KeyFile, ClientCA: clients.CertFile}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := pooltest.Start(t, pooltest.Options{TLS: files.Config(), Fake: []fakecuda.Option{fakecuda.WithDevices(1), fakecuda.WithName("NVIDIA H200")}})
	client := clients.Client(t, "node", tlstest.Options{})
	block := fmt.Sprintf("servers = [%q]\ntoken_file = %q\ninterposer_dir = %q\n", srv.Addr, pooltest.WriteSecret(t, dir), pooltest.WriteInterposer(t, dir))
	parse := func(more string) *nodeconfig.Remote {
		cfg, err := nodeconfig.ParseConfig([]byte("remote {\n" + block + more + "}\n"))
		if err != nil {
			t.Fatal(err)
		}
		return cfg.Remote
	}

	plain := remote.NewProvider(parse(""), "runtime", hclog.NewNullLogger())
	if _, err := plain.Offers(context.Background(), &gpu.Node{}, nil); err != nil {
		t.Fatal(err)
	}
	mtls := parse(fmt.Sprintf("tls_ca_file = %q\ntls_cert_file = %q\ntls_key_file = %q\ntls_server_name = \"gpu.example.com\"\n",
		ca.CertFile, client.CertFile, client.KeyFile))
	p := remote.NewProvider(mtls, "runtime", hclog.NewNullLogger())
	c := scan(t, p, &gpu.Node{})
	if c.Len() != 4 {
		t.Fatalf("%d shares over mutual TLS, want 4", c.Len())
	}
	s := c.Shares()[:1]
	e := share.Edits{Env: map[string]string{}}
	if err := p.Edits(s, s, &e); err != nil {
		t.Fatal(err)
	}
	for env, want := range map[string]string{
		remote.EnvTLSCA: remote.TLSMount + "/ca.pem", remote.EnvTLSCert: remote.TLSMount + "/client.pem",
		remote.EnvTLSKey: remote.TLSMount + "/client-key.pem", remote.EnvTLSServerName: "gpu.example.com",
	} {
		if e.Env[env] != want {
			t.Errorf("%s=%q, want %q", env, e.Env[env], want)
		}
	}
	wantMounts := append(interposerMounts(mtls.InterposerDir), []share.Mount{
		{HostPath: ca.CertFile, ContainerPath: remote.TLSMount + "/ca.pem", ReadOnly: true},
		{HostPath: client.CertFile, ContainerPath: remote.TLSMount + "/client.pem", ReadOnly: true},
		{HostPath: client.KeyFile, ContainerPath: remote.TLSMount + "/client-key.pem", ReadOnly: true},
	}...)
	if !slices.Equal(e.Mounts, wantMounts) {
		t.Errorf("mounts\n got %+v\nwant %+v", e.Mounts, wantMounts)
	}

	// A unix server's shares get none of it.
	unix := *s[0].Remote
	unix.Addr = "unix:/run/gpumux/remoted.sock"
	u := slices.Clone(s)
	u[0].Remote = &unix
	e = share.Edits{Env: map[string]string{}}
	if err := p.Edits(u, u, &e); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.Env[remote.EnvTLSCA]; ok || !slices.Equal(e.Mounts, interposerMounts(mtls.InterposerDir)) {
		t.Errorf("a unix server's edits: env %v, mounts %+v", e.Env, e.Mounts)
	}

	// Without TLS, or without the client certificate, the server is down,
	// and the pool says why.
	for _, tc := range []struct{ name, block, why string }{
		{"plain", "", "speaks TLS"},
		{"no client certificate", fmt.Sprintf("tls_ca_file = %q\ntls_server_name = \"gpu.example.com\"\n", ca.CertFile), "certificate"},
		{"another name", fmt.Sprintf("tls_ca_file = %q\n", ca.CertFile), "TLS with " + srv.Addr + ": tls: failed to verify certificate"},
	} {
		cfg, err := remote.PoolConfig(parse(tc.block))
		if err != nil {
			t.Fatal(err)
		}
		pl, err := remotepool.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		sc := pl.Scan(context.Background())
		if err := sc.Down[srv.Addr]; len(sc.GPUs) != 0 || err == nil || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("%s: %d GPUs, down: %v; want none, and %q", tc.name, len(sc.GPUs), err, tc.why)
		}
	}
}

// interposerMounts are the mounts every remote share's container gets from
// the interposer directory dir: the directory, and its nvidia-smi.
func interposerMounts(dir string) []share.Mount {
	return []share.Mount{
		{HostPath: dir, ContainerPath: remote.Mount, ReadOnly: true},
		{HostPath: filepath.Join(dir, "nvidia-smi"), ContainerPath: remote.SMIPath, ReadOnly: true},
	}
}
