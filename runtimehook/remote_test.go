package runtimehook

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpumux/gpumux/gpu"
	"github.com/gpumux/gpumux/node"
	"github.com/gpumux/gpumux/node/lease"
	"github.com/gpumux/gpumux/nodeconfig"
	"github.com/gpumux/gpumux/remote/fakecuda"
	"github.com/gpumux/gpumux/remote/pool"
	"github.com/gpumux/gpumux/remote/pool/pooltest"
	"github.com/gpumux/gpumux/remote/proto"
	"github.com/gpumux/gpumux/remote/token"
)

// remoteFixture is a fixture whose node config has a remote block naming a
// real server with two 16 GiB fake GPUs, split in 4 shares each. gpuLess
// makes the node one without a driver.
func remoteFixture(t *testing.T, gpuLess bool, extra string) (*fixture, *pooltest.Server, string) {
	t.Helper()
	srv := pooltest.Start(t, pooltest.Options{Fake: []fakecuda.Option{fakecuda.WithDevices(2), fakecuda.WithMemory(16 << 30), fakecuda.WithName("NVIDIA H200")}})
	dir := t.TempDir()
	interposer := pooltest.WriteInterposer(t, dir)
	block := fmt.Sprintf("remote {\n servers = [%q]\n token_file = %q\n interposer_dir = %q\n}\n%s", srv.Addr, pooltest.WriteSecret(t, dir), interposer, extra)
	f := newFixture(t, block, 0)
	if gpuLess {
		f.rt.open = func(*nodeconfig.Config) (node.Host, error) {
			return nil, fmt.Errorf("%w: NVML init: ERROR_LIBRARY_NOT_FOUND", gpu.ErrNoDriver)
		}
	}
	return f, srv, interposer
}

// remoteEnv returns the spec's env as a map.
func specEnv(spec specs.Spec) map[string]string {
	m := map[string]string{}
	for _, kv := range spec.Process.Env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

func TestCreateRemoteShare(t *testing.T) {
	for _, gpuLess := range []bool{false, true} {
		t.Run(map[bool]string{false: "GPU node", true: "node without GPUs"}[gpuLess], func(t *testing.T) {
			f, srv, interposer := remoteFixture(t, gpuLess, "")
			f.writeSpec(t, map[string]string{"gpumux.io/mechanism": "remote", "gpumux.io/memory": "4Gi"}, "LD_LIBRARY_PATH=/usr/local/cuda/lib64")
			if code := f.create("c1"); code != 0 {
				t.Fatalf("exit %d: %s", code, f.stderr.String())
			}
			spec := f.readSpec(t)
			env := specEnv(spec)
			if env["GPUMUX_REMOTE_ADDR"] != srv.Addr || env["LD_LIBRARY_PATH"] != "/run/gpumux/remote:/usr/local/cuda/lib64" || !strings.HasSuffix(env["GPUMUX_SHARES"], "/remote/0") {
				t.Errorf("env %v", spec.Process.Env)
			}
			if _, ok := env["NVIDIA_VISIBLE_DEVICES"]; ok {
				t.Errorf("NVIDIA_VISIBLE_DEVICES set for a remote share")
			}
			if n := strings.Count(strings.Join(spec.Process.Env, "\n")+"\n", "LD_LIBRARY_PATH="); n != 1 {
				t.Errorf("%d LD_LIBRARY_PATH entries: %v", n, spec.Process.Env)
			}
			c, err := token.Check(pooltest.Secret, env["GPUMUX_REMOTE_TOKEN"], time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if c.Quota != 4<<30 || c.Device != 0 || !strings.HasPrefix(c.ID, "runtime-") || c.Expires.Before(time.Now().Add(719*time.Hour)) {
				t.Errorf("token claims %+v: want 4 GiB on GPU 0 for 720h", c)
			}
			if len(spec.Linux.Devices) != 0 {
				t.Errorf("a remote share got device nodes %+v", spec.Linux.Devices)
			}
			found := false
			for _, m := range spec.Mounts {
				switch {
				case m.Destination == "/run/gpumux/remote":
					found = true
					if m.Source != interposer || !strings.Contains(strings.Join(m.Options, ","), "ro") {
						t.Errorf("interposer mount %+v", m)
					}
				case strings.HasPrefix(m.Source, filepath.Join(f.stateDir, "sim")+"/"):
					t.Errorf("a remote share got the real driver's %s", m.Destination)
				}
			}
			if spec.Hooks != nil && len(spec.Hooks.CreateContainer) != 0 {
				t.Errorf("a remote share got the driver's linker cache hook: %+v", spec.Hooks.CreateContainer)
			}
			if !found {
				t.Errorf("no interposer mount in %+v", spec.Mounts)
			}
			held, _ := f.rt.store().Held(context.Background(), "c1")
			if len(held) != 1 || held[0] != env["GPUMUX_SHARES"] {
				t.Errorf("leases of c1: %v, env %s", held, env["GPUMUX_SHARES"])
			}
			// The server admits the token.
			cl, err := proto.Dial(context.Background(), "tcp", srv.Addr, proto.Hello{Token: env["GPUMUX_REMOTE_TOKEN"]}, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			cl.Close()
		})
	}
}

func TestRemoteLeasesAndPolicy(t *testing.T) {
	f, _, _ := remoteFixture(t, true, "")
	create := func(id string, ann map[string]string, env ...string) (map[string]string, error) {
		t.Helper()
		f.stderr.Reset()
		f.writeSpec(t, ann, env...)
		if code := f.create(id); code != 0 {
			return nil, fmt.Errorf("exit %d: %s", code, f.stderr.String())
		}
		return specEnv(f.readSpec(t)), nil
	}
	// Two shares of one GPU in one container: one token for both.
	env, err := create("two", map[string]string{"gpumux.io/mechanism": "remote", "gpumux.io/gpus": "2"})
	if err != nil {
		t.Fatal(err)
	}
	ids := strings.Split(env["GPUMUX_SHARES"], ",")
	if c, _ := token.Check(pooltest.Secret, env["GPUMUX_REMOTE_TOKEN"], time.Now()); len(ids) != 2 || strings.Split(ids[0], "/")[0] != strings.Split(ids[1], "/")[0] || c.Quota != 8<<30 {
		t.Errorf("two shares: %v, quota %d", ids, c.Quota)
	}
	// auto standard on a node without GPUs: remote.
	if env, err := create("auto", map[string]string{"gpumux.io/isolation": "standard"}); err != nil || !strings.Contains(env["GPUMUX_SHARES"], "/remote/") {
		t.Errorf("auto standard: %v %v", env, err)
	}
	// auto strict: never remote (the pool is not even looked at).
	if _, err := create("strict", map[string]string{"gpumux.io/isolation": "strict"}); err == nil || !strings.Contains(err.Error(), "no free share for isolation strict (tried mig, exclusive); free: none") {
		t.Errorf("auto strict: %v", err)
	}
	// Five more: 8 shares in all, 3 taken, then none.
	for i := range 5 {
		if _, err := create(fmt.Sprint("r", i), map[string]string{"gpumux.io/mechanism": "remote"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := create("r5", map[string]string{"gpumux.io/mechanism": "remote"}); err == nil || !strings.Contains(err.Error(), "no free remote share; free: none") {
		t.Errorf("a ninth share of 8: %v", err)
	}
	leases, _ := lease.Open(lease.PathIn(f.stateDir))
	all, _ := leases.Leases(context.Background())
	leases.Close()
	if len(all) != 8 {
		t.Errorf("%d leases, want 8: %v", len(all), all)
	}
}

func TestRemoteOnAGPUNodeIsAFallback(t *testing.T) {
	f, _, _ := remoteFixture(t, false, "")
	f.writeSpec(t, map[string]string{"gpumux.io/isolation": "standard"})
	if code := f.create("local"); code != 0 {
		t.Fatal(f.stderr.String())
	}
	if env := specEnv(f.readSpec(t)); strings.Contains(env["GPUMUX_SHARES"], "/remote/") || env["NVIDIA_VISIBLE_DEVICES"] == "" {
		t.Errorf("auto standard on a GPU node went remote: %v", env)
	}
	// 200 GiB: nothing local fits, and after the pool was looked at nothing
	// remote either (4 GiB shares): the error names both.
	f.writeSpec(t, map[string]string{"gpumux.io/isolation": "standard", "gpumux.io/memory": "200Gi"})
	if code := f.create("big"); code == 0 || !strings.Contains(f.stderr.String(), "tried mps, mig, exclusive, remote") {
		t.Errorf("exit %d: %s", code, f.stderr.String())
	}
}

func TestRemoteErrors(t *testing.T) {
	f := newFixture(t, "", 0)
	f.writeSpec(t, map[string]string{"gpumux.io/mechanism": "remote"})
	if code := f.create("c1"); code == 0 || !strings.Contains(f.stderr.String(), `mechanism "remote": this node's config has no remote block`) {
		t.Errorf("remote without a remote block: exit %d: %s", code, f.stderr.String())
	}

	f, srv, interposer := remoteFixture(t, true, "")
	f.writeSpec(t, map[string]string{"gpumux.io/mechanism": "remote"})
	for _, tc := range []struct{ lib, why string }{
		{"libcuda.so.1", "interposer " + interposer + "/libcuda.so.1"},
		{"libnvidia-ml.so.1", "NVML library of remote shares " + interposer + "/libnvidia-ml.so.1"},
	} {
		os.Remove(interposer + "/" + tc.lib)
		f.stderr.Reset()
		if code := f.create("c2"); code == 0 || !strings.Contains(f.stderr.String(), tc.why) {
			t.Errorf("without %s: exit %d: %s", tc.lib, code, f.stderr.String())
		}
		pooltest.WriteInterposer(t, strings.TrimSuffix(interposer, "/interposer"))
	}

	srv.Stop()
	f.stderr.Reset()
	if code := f.create("c3"); code == 0 || !strings.Contains(f.stderr.String(), "remote server not probed") || !strings.Contains(f.stderr.String(), "no free remote share; free: none") {
		t.Errorf("server down: exit %d: %s", code, f.stderr.String())
	}
}

func TestReservedRemoteShare(t *testing.T) {
	f, srv, _ := remoteFixture(t, true, "")
	gpus, err := pool.Probe(context.Background(), srv.Addr, pooltest.Secret, 5*time.Second, "test")
	if err != nil {
		t.Fatal(err)
	}
	id := gpus[1].UUID + "/remote/2"
	st, err := lease.Open(lease.PathIn(f.stateDir))
	if err != nil {
		t.Fatal(err)
	}
	tok := "0123456789abcdef0123456789abcdef"
	if err := st.Reserve(context.Background(), tok, []string{id}, time.Minute); err != nil {
		t.Fatal(err)
	}
	st.Close()
	f.writeSpec(t, nil, "GPUMUX_SHARES="+id, "GPUMUX_RESERVATION="+tok, "GPUMUX_REMOTE_TOKEN=the plugin's")
	if code := f.create("c1"); code != 0 {
		t.Fatalf("exit %d: %s", code, f.stderr.String())
	}
	env := specEnv(f.readSpec(t))
	c, err := token.Check(pooltest.Secret, env["GPUMUX_REMOTE_TOKEN"], time.Now())
	if err != nil || c.Device != 1 || c.Quota != 4<<30 || env["GPUMUX_SHARES"] != id {
		t.Errorf("env %v, claims %+v, %v", env, c, err)
	}
	if held, _ := f.rt.store().Held(context.Background(), "c1"); len(held) != 1 || held[0] != id {
		t.Errorf("held %v", held)
	}
}
