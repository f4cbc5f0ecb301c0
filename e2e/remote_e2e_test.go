//go:build e2e

package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/gpumux/gpumux/e2e/nomadagent"
	"github.com/gpumux/gpumux/internal/scrape"
	"github.com/gpumux/gpumux/remote"
)

// mustReplace replaces old by new in s once, and fails the test when s
// does not contain old: the example files the tests rewrite must keep the
// lines the tests rely on.
func mustReplace(t *testing.T, what, s, old, new string) string {
	t.Helper()
	if !strings.Contains(s, old) {
		t.Fatalf("%s no longer contains %q, which the test rewrites", what, old)
	}
	return strings.Replace(s, old, new, 1)
}

// remoteClientConfig is examples/gpumux-remote-client.hcl with its state,
// secret and interposer in the test's places, this agent's HTTP address and
// a short fingerprint period.
func remoteClientConfig(t *testing.T, keyFile string) string {
	t.Helper()
	const name = "examples/gpumux-remote-client.hcl"
	src, err := os.ReadFile("../" + name)
	if err != nil {
		t.Fatal(err)
	}
	cfg := string(src)
	cfg = mustReplace(t, name, cfg, `state_dir          = "/var/lib/gpumux"`, `state_dir          = "`+t.TempDir()+`"`)
	cfg = mustReplace(t, name, cfg, `fingerprint_period = "1m"`, `fingerprint_period = "2s"`)
	cfg = mustReplace(t, name, cfg, `nomad_addr      = "http://127.0.0.1:4646"`, `nomad_addr      = "`+nomadagent.HTTPAddrPlaceholder+`"`)
	cfg = mustReplace(t, name, cfg, `token_file     = "/etc/gpumux/remote.key"`, `token_file     = "`+keyFile+`"`)
	cfg = mustReplace(t, name, cfg, `interposer_dir = "/usr/lib/gpumux/remote"`, `interposer_dir = "`+filepath.Join(repoRoot(t), "bin", "remote")+`"`)
	return cfg
}

// remotedJob is examples/jobs/remote-server.nomad.hcl running the built
// gpumux-remoted on the fake backend with these flags (backendFlags, HCL
// list items ending in a comma) with raw_exec as root (exec's chroot would
// not hold bin/).
func remotedJob(t *testing.T, backendFlags string) string {
	t.Helper()
	const name = "examples/jobs/remote-server.nomad.hcl"
	job := readJob(t, "remote-server")
	job = mustReplace(t, name, job, "driver = \"exec\"\n      user   = \"nobody\"", `driver = "raw_exec"`)
	job = mustReplace(t, name, job, `command = "/usr/bin/gpumux-remoted"`, `command = "`+filepath.Join(repoRoot(t), "bin", "gpumux-remoted")+`"`)
	return mustReplace(t, name, job, `"--backend", "cuda",`, `"--backend", "fake", `+backendFlags)
}

// remoteServerJob is remotedJob with two fake 16 GiB GPUs and without the
// GPU reservation (this node has none to give).
func remoteServerJob(t *testing.T) string {
	t.Helper()
	job := remotedJob(t, `"--fake-devices", "2", "--fake-memory", "16GiB",`)
	start := strings.Index(job, "        # The GPU to serve")
	end := strings.Index(job, "\n      }\n    }\n  }\n}")
	if start < 0 || end < start {
		t.Fatalf("examples/jobs/remote-server.nomad.hcl: no GPU reservation where the test removes it")
	}
	return job[:start] + job[end+1:]
}

// remoteJob is examples/jobs/remote.nomad.hcl that also runs remote-probe,
// fetched as an artifact from url.
func remoteJob(t *testing.T, url string) string {
	t.Helper()
	const name = "examples/jobs/remote.nomad.hcl"
	job := readJob(t, "remote")
	job = mustReplace(t, name, job, `--format=csv,noheader"]`, `--format=csv,noheader; local/remote-probe"]`)
	return mustReplace(t, name, job, "      resources {", fmt.Sprintf("      artifact {\n        source      = %q\n        destination = \"local/\"\n      }\n      resources {", url))
}

// serveRemoteProbe builds e2e/remoteprobe with the system C compiler and
// serves it as a .tar.gz (go-getter keeps its mode) for a task's artifact,
// on an ephemeral port of host (an address of this network namespace).
func serveRemoteProbe(t *testing.T, host string) string {
	t.Helper()
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	bin := filepath.Join(t.TempDir(), "remote-probe")
	if out, err := exec.Command(cc, "-std=gnu11", "-O2", "-Wall", "-Werror", "-o", bin, "remoteprobe/remote-probe.c", "-ldl").CombinedOutput(); err != nil {
		t.Fatalf("building remote-probe: %v\n%s", err, out)
	}
	exe, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	tw.WriteHeader(&tar.Header{Name: "remote-probe", Mode: 0o755, Size: int64(len(exe)), Typeflag: tar.TypeReg, ModTime: time.Now()})
	tw.Write(exe)
	tw.Close()
	gz.Close()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/gzip")
		w.Write(buf.Bytes())
	})}}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL + "/remote-probe.tar.gz"
}

// requireRemoteBuild fails the test when `make build` has not built what
// the remote tests run: the server, the interposer, its NVML and the plugin.
func requireRemoteBuild(t *testing.T) {
	t.Helper()
	root := repoRoot(t)
	for _, f := range []string{"bin/gpumux-remoted", "bin/remote/libcuda.so.1", "bin/remote/libnvidia-ml.so.1", "bin/plugins/nomad-device-gpumux"} {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			t.Fatalf("%v (run make build)", err)
		}
	}
}

// poolSecret makes a remote pool's secret and writes it to a file (mode
// 0600) for the plugin's token_file.
func poolSecret(t *testing.T) (secret, keyFile string) {
	t.Helper()
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	secret = hex.EncodeToString(b)
	keyFile = filepath.Join(t.TempDir(), "remote.key")
	if err := os.WriteFile(keyFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return secret, keyFile
}

// remoteGroup returns the node's device group of remote shares, or nil.
func remoteGroup(devs []*api.NodeDeviceResource) *api.NodeDeviceResource {
	for _, d := range devs {
		if a := d.Attributes["mechanism"]; a != nil && a.StringVal != nil && *a.StringVal == "remote" {
			return d
		}
	}
	return nil
}

func attr(d *api.NodeDeviceResource, name string) string {
	a := d.Attributes[name]
	switch {
	case a == nil:
		return "<missing>"
	case a.StringVal != nil:
		return *a.StringVal
	case a.IntVal != nil && a.Unit != "":
		return fmt.Sprintf("%d %s", *a.IntVal, a.Unit)
	case a.IntVal != nil:
		return strconv.FormatInt(*a.IntVal, 10)
	case a.BoolVal != nil:
		return strconv.FormatBool(*a.BoolVal)
	}
	return a.String()
}

// TestRemoteShares runs gpumux-remoted (fake GPUs) as a Nomad job that
// registers the gpumux-remote service; the plugin on the same node, which
// has no GPU of its own, discovers it through Nomad, offers its GPUs as
// remote shares, and a task that asks for one gets the interposer, the
// server's address and a token, and uses the GPU through the interposer
// (remote-probe). When the server job stops, the shares turn unhealthy.
func TestRemoteShares(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	requireRemoteBuild(t)
	secret, keyFile := poolSecret(t)
	probeURL := serveRemoteProbe(t, "127.0.0.1")

	a := nomadagent.Start(ctx, t,
		nomadagent.WithPluginDir(nomadagent.DefaultPluginDir()),
		nomadagent.WithAgentConfig(remoteClientConfig(t, keyFile)),
		nomadagent.WithAgentConfig(`plugin "raw_exec" {
  config {
    enabled = true
  }
}`),
		nomadagent.WithDrivers("exec", "raw_exec"))

	// The pool secret, where the server job's template reads it.
	if err := a.PutVariable(ctx, &api.Variable{Path: "nomad/jobs/gpumux-remote", Items: api.VariableItems{"secret": secret}}); err != nil {
		t.Fatal(err)
	}
	if devs, err := a.NodeDevices(ctx); err != nil || remoteGroup(devs) != nil {
		t.Fatalf("remote shares before any server runs: %v %v", devs, err)
	}

	// The example as it is, for a GPU node, is a valid job: to the API's
	// parser and to `nomad job validate`.
	if _, err := a.ParseJob(ctx, readJob(t, "remote-server")); err != nil {
		t.Fatalf("examples/jobs/remote-server.nomad.hcl: %v", err)
	}
	if out, err := a.ValidateJobFile(ctx, filepath.Join(repoRoot(t), "examples", "jobs", "remote-server.nomad.hcl")); err != nil {
		t.Fatal(err)
	} else if !strings.Contains(out, "Job validation successful") {
		t.Fatalf("nomad job validate examples/jobs/remote-server.nomad.hcl:\n%s", out)
	}
	serverID, err := a.RunJob(ctx, remoteServerJob(t))
	if err != nil {
		t.Fatal(err)
	}
	serverAllocs, err := a.WaitAllocs(ctx, serverID, "running")
	if err != nil {
		t.Fatal(err)
	}
	var addr string
	for addr == "" {
		regs, _, err := a.Client.Services().Get("gpumux-remote", nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(regs) == 1 {
			addr = net.JoinHostPort(regs[0].Address, strconv.Itoa(regs[0].Port))
		} else if ctx.Err() != nil {
			t.Fatalf("service gpumux-remote: %d registrations", len(regs))
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("gpumux-remoted serves at %s", addr)
	// The job's health check reaches the server's /healthz.
	if c, err := a.WaitCheck(ctx, serverAllocs[0].ID, "healthz", "success"); err != nil {
		t.Fatal(err)
	} else if c.StatusCode != http.StatusOK || !strings.Contains(c.Output, "ok") {
		t.Fatalf("check healthz: %+v, want HTTP 200 with ok", c)
	}

	// Two fake GPUs, four shares each.
	devs, err := a.WaitNodeDevices(ctx, "nvidia", "gpu", 8)
	if err != nil {
		t.Fatal(err)
	}
	g := remoteGroup(devs)
	if g == nil || g.Name != "gpumux-fake-GPU-remote-4x" || len(g.Instances) != 8 {
		t.Fatalf("remote group %+v", g)
	}
	for k, want := range map[string]string{
		"mechanism": "remote", "memory": "4096 MiB", "compute_percent": "25", "sm_count": "132", "memory_isolation": "hard",
		"fault_isolation": "false", "cuda_compute_capability": "9.0", "cuda_version": "12.8", "remote_addr": addr, "model": "gpumux fake GPU",
	} {
		if got := attr(g, k); got != want {
			t.Errorf("attribute %s = %s, want %s", k, got, want)
		}
	}
	shares := map[string]bool{}
	for _, d := range g.Instances {
		shares[d.ID] = true
		if !d.Healthy || !strings.Contains(d.ID, "/remote/") {
			t.Errorf("instance %+v", d)
		}
	}

	// A task asking for a remote share.
	jobID, err := a.RunJob(ctx, withMountinfo(t, remoteJob(t, probeURL)))
	if err != nil {
		t.Fatal(err)
	}
	allocs, err := a.WaitAllocs(ctx, jobID, "complete")
	if err != nil {
		t.Fatal(err)
	}
	got, err := a.AllocDevices(ctx, allocs[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	ids := got["probe"]
	if len(ids) != 1 || !shares[ids[0]] {
		t.Fatalf("allocated %v, want one of the remote shares", ids)
	}
	out, err := a.TaskLogs(ctx, allocs[0].ID, "probe", "stdout")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the task printed:\n%s", out)
	for _, want := range []string{
		"GPUMUX_REMOTE_ADDR=" + addr + "\n",
		"GPUMUX_SHARES=" + ids[0] + "\n",
		"LD_LIBRARY_PATH=/run/gpumux/remote\n",
		"GPUMUX_REMOTE_TOKEN=gmx1.",
		"libcuda.so.1\n",
		// gpumux's nvidia-smi, answering for the share:
		"gpumux fake GPU, 4096 MiB\n",
		// remote-probe, through the interposer mounted from the reservation:
		"LIB /run/gpumux/remote/libcuda.so.1\n",
		"DEVICES 1\n",
		"NAME gpumux fake GPU\n",
		"MEMORY 4294967296\n", // the share's quota: 16 GiB / 4
		"ALLOC 3221225472 CUDA_SUCCESS\n",
		"ALLOC 2147483648 CUDA_ERROR_OUT_OF_MEMORY\n", // past the quota
		"DEVNODE /dev/nvidiactl 0\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the task's output lacks %q", want)
		}
	}
	// gpumux's interposer only, never a driver's library or program: the
	// task's nvidia-smi is the interposer directory's.
	for point := range parseProbe(out).mounts {
		if base := filepath.Base(point); !strings.HasPrefix(point, "/run/gpumux/remote") && point != remote.SMIPath &&
			(strings.HasPrefix(base, "libcuda.so") || strings.HasPrefix(base, "libnvidia-ml.so") || base == "nvidia-smi") {
			t.Errorf("the remote task got a driver file mounted at %s", point)
		}
	}
	if smi := filepath.Join(repoRoot(t), "bin", "remote", "nvidia-smi") + " " + remote.SMIPath + " "; !strings.Contains(out, smi) {
		t.Errorf("the task's %s is not the interposer directory's (no mount %q)", remote.SMIPath, smi)
	}
	if errOut, _ := a.TaskLogs(ctx, allocs[0].ID, "probe", "stderr"); strings.TrimSpace(errOut) != "" {
		t.Logf("the task's stderr:\n%s", errOut)
	}
	// The server saw the task's token: a Nomad reservation's.
	serverLog, err := a.TaskLogs(ctx, serverAllocs[0].ID, "remoted", "stderr")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(serverLog, `msg="client connected"`) || !strings.Contains(serverLog, "token=nomad-") || !strings.Contains(serverLog, "quota=4294967296") {
		t.Errorf("the server did not log the task's connection:\n%s", serverLog)
	}
	if err := a.StopJob(ctx, jobID, true); err != nil {
		t.Fatal(err)
	}

	// The server's metrics, found as Nomad service gpumux-remote-metrics:
	// the task's calls, the worker process of its tenant.
	regs, _, err := a.Client.Services().Get("gpumux-remote-metrics", nil)
	if err != nil || len(regs) != 1 {
		t.Fatalf("service gpumux-remote-metrics: %v %v", regs, err)
	}
	metricsURL := "http://" + net.JoinHostPort(regs[0].Address, strconv.Itoa(regs[0].Port)) + "/metrics"
	var calls, starts float64
	for {
		f, err := scrape.Get(ctx, metricsURL)
		if err != nil {
			t.Fatal(err)
		}
		calls, starts = 0, 0
		for _, m := range f.Samples("gpumux_remote_calls_total", map[string]string{"result": "ok"}) {
			calls += m.GetCounter().GetValue()
		}
		starts, _ = f.Value("gpumux_remote_worker_starts_total", nil)
		allocOK, _ := f.Value("gpumux_remote_calls_total", map[string]string{"call": "cuMemAlloc_v2", "result": "ok"})
		if calls > 0 && starts >= 1 && allocOK >= 1 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the server's metrics never showed the task's calls: %v calls, %v worker starts, %v cuMemAlloc_v2", calls, starts, allocOK)
		case <-time.After(300 * time.Millisecond):
		}
	}
	t.Logf("the server's metrics: %v calls served, %v worker processes started", calls, starts)

	// The server goes away: its shares stay, unhealthy, with the reason.
	if err := a.StopJob(ctx, serverID, true); err != nil {
		t.Fatal(err)
	}
	var state string
	for {
		devs, err := a.NodeDevices(ctx)
		if err != nil {
			t.Fatal(err)
		}
		g := remoteGroup(devs)
		sick := 0
		if g != nil {
			for _, d := range g.Instances {
				if !d.Healthy && strings.Contains(d.HealthDescription, "remote server "+addr) {
					sick++
				}
			}
			state = fmt.Sprintf("%d of %d remote shares unhealthy: %+v", sick, len(g.Instances), g.Instances[0])
		}
		if g != nil && sick == len(g.Instances) && len(g.Instances) == 8 {
			t.Logf("after the server stopped: %s", state)
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the shares of a stopped server stayed healthy: %s", state)
		case <-time.After(500 * time.Millisecond):
		}
	}
}
