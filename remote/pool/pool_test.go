package pool_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpumux/gpumux/remote/fakecuda"
	"github.com/gpumux/gpumux/remote/pool"
	"github.com/gpumux/gpumux/remote/pool/pooltest"
	"github.com/gpumux/gpumux/remote/proto"
	"github.com/gpumux/gpumux/remote/server"
	"github.com/gpumux/gpumux/remote/token"
)

var secret = pooltest.Secret

type serverOpts = pooltest.Options

// startServer runs a real gpumux-remoted server on a fake backend and
// returns its address as the pool names it.
func startServer(t *testing.T, o serverOpts) string {
	t.Helper()
	return pooltest.Start(t, o).Addr
}

func newPool(t *testing.T, cfg pool.Config) *pool.Pool {
	t.Helper()
	if cfg.Secret == nil {
		cfg.Secret = secret
	}
	p, err := pool.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var uuidPattern = regexp.MustCompile(`^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

func TestProbe(t *testing.T) {
	for _, unix := range []bool{false, true} {
		t.Run(map[bool]string{false: "tcp", true: "unix"}[unix], func(t *testing.T) {
			addr := startServer(t, serverOpts{Unix: unix, Fake: []fakecuda.Option{fakecuda.WithDevices(3), fakecuda.WithMemory(80 << 30), fakecuda.WithName("NVIDIA H100 80GB HBM3")}})
			gpus, err := pool.Probe(context.Background(), addr, secret, 5*time.Second, "test")
			if err != nil {
				t.Fatal(err)
			}
			if len(gpus) != 3 {
				t.Fatalf("got %d GPUs, want 3: %+v", len(gpus), gpus)
			}
			uuids := map[string]bool{}
			for i, g := range gpus {
				if g.Addr != addr || g.Index != i || g.Name != "NVIDIA H100 80GB HBM3" || g.MemoryMiB != 80<<10 || g.SMs != 132 || g.CC != "9.0" || g.CUDA != "12.8" || !uuidPattern.MatchString(g.UUID) {
					t.Errorf("GPU %d: %+v", i, g)
				}
				uuids[g.UUID] = true
			}
			if len(uuids) != 3 {
				t.Errorf("UUIDs not distinct: %v", uuids)
			}
		})
	}
}

func TestScanStaticServers(t *testing.T) {
	a := startServer(t, serverOpts{Seed: 1, Fake: []fakecuda.Option{fakecuda.WithDevices(2)}})
	b := startServer(t, serverOpts{Seed: 2, Unix: true})
	dead := deadAddr(t)
	wrong := startServer(t, serverOpts{Seed: 3, Server: []server.Option{server.WithSecret([]byte("another pool's secret, 32 bytes!"))}})
	sc := newPool(t, pool.Config{Servers: []string{b, a, dead, wrong, a}, Timeout: 2 * time.Second}).Scan(context.Background())
	if strings.Join(sc.Servers, " ") != strings.Join([]string{b, a, dead, wrong}, " ") {
		t.Errorf("servers %v", sc.Servers)
	}
	var got []string
	for _, g := range sc.GPUs {
		got = append(got, g.Addr+"#"+strconv.Itoa(g.Index))
	}
	if want := b + "#0 " + a + "#0 " + a + "#1"; strings.Join(got, " ") != want {
		t.Errorf("GPUs %v, want %s", got, want)
	}
	if len(sc.Down) != 2 || sc.Down[dead] == nil || sc.Down[wrong] == nil {
		t.Fatalf("down %v", sc.Down)
	}
	if err := sc.Down[dead]; !strings.Contains(err.Error(), dead) || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("dead server: %v", err)
	}
	if err := sc.Down[wrong]; !errors.Is(err, proto.ErrRefused) || !strings.Contains(err.Error(), "invalid token") {
		t.Errorf("server of another pool: %v", err)
	}
	if len(sc.Problems) != 0 {
		t.Errorf("problems %v", sc.Problems)
	}
}

// deadAddr is a TCP address nothing listens on.
func deadAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestScanDuplicateGPUs(t *testing.T) {
	// Two fakes with the same UUIDs: the GPU is offered once, through the
	// first server, and the other is reported.
	a := startServer(t, serverOpts{})
	b := startServer(t, serverOpts{})
	sc := newPool(t, pool.Config{Servers: []string{a, b}}).Scan(context.Background())
	if len(sc.GPUs) != 1 || sc.GPUs[0].Addr != a || len(sc.Problems) != 1 || !strings.Contains(sc.Problems[0].Error(), "served by "+a+" (GPU 0) and by "+b+" (GPU 0)") {
		t.Errorf("GPUs %+v, problems %v", sc.GPUs, sc.Problems)
	}
}

func TestProbeRefusesServersThatIgnoreTokens(t *testing.T) {
	addr := startServer(t, serverOpts{Fake: []fakecuda.Option{fakecuda.WithDevices(2)}, Server: []server.Option{server.WithInsecureNoAuth()}})
	_, err := pool.Probe(context.Background(), addr, secret, 5*time.Second, "test")
	if err == nil || !strings.Contains(err.Error(), "shows 2 GPUs: the server does not honour tokens") {
		t.Fatalf("probe of a server without a secret: %v", err)
	}
}

func TestProbeTimesOut(t *testing.T) {
	// A listener that accepts and never answers the handshake.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	start := time.Now()
	_, err = pool.Probe(context.Background(), ln.Addr().String(), secret, 300*time.Millisecond, "test")
	if err == nil || time.Since(start) > 3*time.Second {
		t.Fatalf("probe of a silent server: %v after %v", err, time.Since(start))
	}
	// The caller's context ends a probe too.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start = time.Now()
	if _, err := pool.Probe(ctx, ln.Addr().String(), secret, time.Minute, "test"); err == nil || time.Since(start) > 3*time.Second {
		t.Fatalf("probe past its context: %v after %v", err, time.Since(start))
	}
}

// nomadStub answers GET /v1/service/<name> as a Nomad agent does, with the
// registrations of the named service.
type nomadStub struct {
	services map[string][]map[string]any
	token    string // required X-Nomad-Token, if set
	status   int    // forced status, if set
	requests []string
}

func (n *nomadStub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n.requests = append(n.requests, r.Method+" "+r.URL.RequestURI())
	if n.status != 0 {
		http.Error(w, "Permission denied", n.status)
		return
	}
	if n.token != "" && r.Header.Get("X-Nomad-Token") != n.token {
		http.Error(w, "Permission denied", http.StatusForbidden)
		return
	}
	name, ok := strings.CutPrefix(r.URL.Path, "/v1/service/")
	if !ok || r.Method != http.MethodGet {
		http.NotFound(w, r)
		return
	}
	regs := n.services[name+"@"+r.URL.Query().Get("namespace")]
	if regs == nil {
		regs = []map[string]any{}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(regs)
}

// registration is a ServiceRegistration as Nomad's API returns it.
func registration(addr string) map[string]any {
	host, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	return map[string]any{
		"ID": "_nomad-task-1234-gpumux-remote-remoted-remote", "ServiceName": "gpumux-remote", "Namespace": "default",
		"NodeID": "node-1", "Datacenter": "dc1", "JobID": "gpumux-remote", "AllocID": "1234", "Tags": []string{},
		"Address": host, "Port": p, "CreateIndex": 10, "ModifyIndex": 10,
	}
}

func TestScanDiscoversThroughNomad(t *testing.T) {
	static := startServer(t, serverOpts{Seed: 1})
	discovered := startServer(t, serverOpts{Seed: 2, Fake: []fakecuda.Option{fakecuda.WithDevices(2)}})
	stub := &nomadStub{token: "acl-secret", services: map[string][]map[string]any{
		"gpumux-remote@gpu": {registration(discovered), registration(static), {"AllocID": "portless", "Address": "10.0.0.9", "Port": 0}},
	}}
	api := httptest.NewServer(stub)
	defer api.Close()
	p := newPool(t, pool.Config{Servers: []string{static}, Discover: true, Service: "gpumux-remote", Namespace: "gpu", NomadAddr: api.URL + "/", NomadToken: "acl-secret"})
	sc := p.Scan(context.Background())
	if strings.Join(sc.Servers, " ") != static+" "+discovered {
		t.Errorf("servers %v: want the static one, then the discovered ones, each once", sc.Servers)
	}
	if len(sc.GPUs) != 3 || len(sc.Down) != 0 {
		t.Errorf("GPUs %+v, down %v", sc.GPUs, sc.Down)
	}
	if len(sc.Problems) != 1 || !strings.Contains(sc.Problems[0].Error(), `allocation portless: address "10.0.0.9" port 0`) {
		t.Errorf("problems %v", sc.Problems)
	}
	if len(stub.requests) != 1 || stub.requests[0] != "GET /v1/service/gpumux-remote?namespace=gpu" {
		t.Errorf("requests %v", stub.requests)
	}

	// A server looking for the rest of its pool leaves its own allocation out.
	mine := registration(discovered)
	mine["AllocID"] = "mine"
	other := startServer(t, serverOpts{Seed: 3})
	stub.services["gpumux-remote@gpu"] = []map[string]any{mine, registration(other)}
	sc = newPool(t, pool.Config{Discover: true, Service: "gpumux-remote", Namespace: "gpu", NomadAddr: api.URL, NomadToken: "acl-secret", ExcludeAlloc: "mine"}).Scan(context.Background())
	if strings.Join(sc.Servers, " ") != other || len(sc.Problems) != 0 {
		t.Errorf("excluding allocation mine: servers %v, problems %v; want %s alone", sc.Servers, sc.Problems, other)
	}

	// Nomad errors are reported; the static servers are still probed.
	for _, tc := range []struct {
		name string
		stub *nomadStub
		want string
	}{
		{"ACL", &nomadStub{token: "other"}, "403 Forbidden: Permission denied (with ACLs on, give the remote block a nomad_token_file"},
		{"server error", &nomadStub{status: http.StatusInternalServerError}, "500 Internal Server Error"},
	} {
		api := httptest.NewServer(tc.stub)
		sc := newPool(t, pool.Config{Servers: []string{static}, Discover: true, Service: "gpumux-remote", NomadAddr: api.URL, NomadToken: "acl-secret"}).Scan(context.Background())
		api.Close()
		if len(sc.GPUs) != 1 || len(sc.Problems) != 1 || !strings.Contains(sc.Problems[0].Error(), tc.want) || !strings.Contains(sc.Problems[0].Error(), `discovering service "gpumux-remote" through Nomad at `+api.URL) {
			t.Errorf("%s: GPUs %d, problems %v", tc.name, len(sc.GPUs), sc.Problems)
		}
	}
	// Nomad down.
	sc = newPool(t, pool.Config{Discover: true, Service: "gpumux-remote", NomadAddr: "http://" + deadAddr(t), Timeout: time.Second}).Scan(context.Background())
	if len(sc.GPUs) != 0 || len(sc.Problems) != 1 || !strings.Contains(sc.Problems[0].Error(), "connection refused") {
		t.Errorf("Nomad down: %+v", sc)
	}
}

func TestGrantIsEnforcedByTheServer(t *testing.T) {
	addr := startServer(t, serverOpts{Fake: []fakecuda.Option{fakecuda.WithDevices(2), fakecuda.WithMemory(8 << 30)}})
	gpus, err := pool.Probe(context.Background(), addr, secret, 5*time.Second, "test")
	if err != nil {
		t.Fatal(err)
	}
	g := gpus[1]
	tok, err := pool.Grant(secret, "nomad", g.Index, 1024, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c, err := token.Check(secret, tok, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if c.Quota != 1<<30 || c.Device != 1 || !regexp.MustCompile(`^nomad-[0-9a-f]{32}$`).MatchString(c.ID) || c.Expires.Before(time.Now().Add(59*time.Minute)) {
		t.Errorf("claims %+v", c)
	}
	if again, _ := pool.Grant(secret, "nomad", g.Index, 1024, time.Hour); again == tok {
		t.Error("two grants made the same token")
	}
	if _, err := pool.Grant(secret, "nomad", g.Index, 0, time.Hour); err == nil {
		t.Error("a grant without a quota")
	}

	// A client with the grant sees its GPU, the quota as its memory, and
	// cannot allocate past it.
	cl, err := proto.Dial(context.Background(), "tcp", addr, proto.Hello{Token: tok, Identity: "test"}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if cl.Welcome.Quota != 1<<30 {
		t.Errorf("welcome quota %d", cl.Welcome.Quota)
	}
	must := func(what string, r proto.Result, err error) {
		t.Helper()
		if err != nil || r != proto.Success {
			t.Fatalf("%s: %v %v", what, r, err)
		}
	}
	r, err := cl.Init(0, 0)
	must("init", r, err)
	uuid, r, err := cl.DeviceGetUuidV2(0, 0)
	must("uuid", r, err)
	if pool.FormatUUID(uuid) != g.UUID {
		t.Errorf("the token's client sees %s, want GPU 1 (%s)", pool.FormatUUID(uuid), g.UUID)
	}
	ctx, r, err := cl.CtxCreateV2(0, 0, 0)
	must("ctx", r, err)
	_, r, err = cl.MemAllocV2(ctx, 768<<20)
	must("alloc within the quota", r, err)
	if _, r, err := cl.MemAllocV2(ctx, 512<<20); err != nil || r != proto.ErrOutOfMemory {
		t.Errorf("allocation past the quota: %v %v, want CUDA_ERROR_OUT_OF_MEMORY", r, err)
	}
}

// TestNewChecksConfig: New refuses a short secret and a malformed server
// address.
func TestNewChecksConfig(t *testing.T) {
	if _, err := pool.New(pool.Config{Secret: []byte("short")}); err == nil {
		t.Error("a short secret was accepted")
	}
	if _, err := pool.New(pool.Config{Secret: secret, Servers: []string{"nowhere"}}); err == nil {
		t.Error("a malformed server address was accepted")
	}
}

// TestCheckInterposer: an interposer directory must hold the interposer
// and the NVML library of remote shares, as regular files.
func TestCheckInterposer(t *testing.T) {
	for _, tc := range []struct {
		name    string
		breakIt func(dir string) error
		want    string // "" : usable
	}{
		{"both", func(string) error { return nil }, ""},
		{"no interposer", func(d string) error { return os.Remove(filepath.Join(d, pool.InterposerLib)) },
			"interposer " + "DIR/libcuda.so.1: stat"},
		{"no NVML library", func(d string) error { return os.Remove(filepath.Join(d, pool.NVMLLib)) },
			"NVML library of remote shares DIR/libnvidia-ml.so.1: stat"},
		{"an NVML directory", func(d string) error {
			lib := filepath.Join(d, pool.NVMLLib)
			return errors.Join(os.Remove(lib), os.Mkdir(lib, 0o755))
		}, "NVML library of remote shares DIR/libnvidia-ml.so.1 is not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := pooltest.WriteInterposer(t, t.TempDir())
			if err := tc.breakIt(dir); err != nil {
				t.Fatal(err)
			}
			err := pool.CheckInterposer(dir)
			want := strings.ReplaceAll(tc.want, "DIR", dir)
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
				t.Errorf("CheckInterposer: %v, want %q", err, want)
			}
		})
	}
}
