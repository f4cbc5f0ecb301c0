package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpumux/gpumux/cli"
	"github.com/gpumux/gpumux/gpu/driverfiles"
	"github.com/gpumux/gpumux/gpu/sim"
	"github.com/gpumux/gpumux/node/lease"
)

func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := cli.Run(context.Background(), args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestStatusTable(t *testing.T) {
	code, out, errOut := run(t, "status", "--simulate", "dgxh200", "--state-dir", t.TempDir())
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"Driver 580.159.04, CUDA 13.0, 8 GPUs", "NVIDIA H200", "143771 MiB", "nvidia/gpu/H200  exclusive  8"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestStatusJSONWithConfig(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "node.hcl")
	os.WriteFile(cfg, []byte(`simulate = "dgxa100"
state_dir = "`+dir+`"
limiter_dir = "`+stubLimiter(t)+`"
gpu {
  match     = "0-1"
  mechanism = "timeslice"
  replicas  = 2
}`), 0o644)
	code, out, errOut := run(t, "status", "--config", cfg, "--output", "json")
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var st cli.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if len(st.GPUs) != 8 || st.GPUs[0].Model != "NVIDIA A100-SXM4-40GB" {
		t.Errorf("GPUs %+v", st.GPUs)
	}
	got := map[string]int{}
	for _, g := range st.Groups {
		got[g.Name] = len(g.Shares)
	}
	if got["A100-SXM4-40GB-timeslice-2x"] != 4 || got["A100-SXM4-40GB"] != 6 {
		t.Errorf("groups %v", got)
	}
	// The simulated node persisted where the config said.
	if _, err := os.Stat(filepath.Join(dir, "sim", "dgxa100", "state.json")); err != nil {
		t.Errorf("state not under the config's state_dir: %v", err)
	}
}

func TestExitCodes(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.hcl")
	os.WriteFile(bad, []byte("gpu {\n match = \"0\"\n mechanism = \"timeslice\"\n replicas = 1\n}"), 0o644)
	tests := []struct {
		args   []string
		code   int
		stderr string
	}{
		{nil, cli.ExitUsage, "Usage:"},
		{[]string{"frobnicate"}, cli.ExitUsage, `unknown command "frobnicate"`},
		{[]string{"status", "--output", "xml"}, cli.ExitUsage, `--output "xml": want table, json, yaml, wide`},
		{[]string{"status", "--bogus"}, cli.ExitUsage, "unknown flag: --bogus"},
		{[]string{"status", "extra"}, cli.ExitUsage, `unexpected arguments ["extra"]`},
		{[]string{"--bogus"}, cli.ExitUsage, "unknown flag: --bogus"},
		{[]string{"status", "--simulate", "dgx1"}, cli.ExitError, `"dgx1"`},
		{[]string{"status", "--config", bad, "--simulate", "dgxh200", "--state-dir", dir}, cli.ExitError, "replicas = 1"},
		{[]string{"status", "--config", filepath.Join(dir, "missing.hcl")}, cli.ExitError, "no such file"},
	}
	for _, tc := range tests {
		code, _, errOut := run(t, tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.stderr) {
			t.Errorf("gpumux %v: exit %d, stderr %q; want exit %d and %q", tc.args, code, errOut, tc.code, tc.stderr)
		}
	}
}

func TestHelp(t *testing.T) {
	code, out, _ := run(t, "--help")
	for _, verb := range []string{"agent", "status", "cdi", "mig", "remote", "runtime", "repair", "version", "completion"} {
		if code != cli.ExitOK || !strings.Contains(out, "\n  "+verb+" ") {
			t.Errorf("--help: exit %d, lacks %s\n%s", code, verb, out)
		}
	}
	code, out, _ = run(t, "status", "-h")
	if code != cli.ExitOK || !strings.Contains(out, "--simulate NAME") || !strings.Contains(out, "-o, --output FORMAT") {
		t.Errorf("status -h: exit %d\n%s", code, out)
	}
}

func TestCDIGenerate(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "node.hcl")
	limiter := stubLimiter(t)
	os.WriteFile(cfg, []byte(`simulate = "dgxh200"
state_dir = "`+dir+`"
limiter_dir = "`+limiter+`"
gpu {
  match     = "0"
  mechanism = "timeslice"
  replicas  = 2
}`), 0o644)
	out := filepath.Join(dir, "gpumux.json")
	code, _, errOut := run(t, "cdi", "generate", "--config", cfg, "-f", out)
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	spec, err := cdi.ReadSpec(out, 0) // what a CDI-native engine does
	if err != nil {
		t.Fatal(err)
	}
	if spec.GetVendor() != "gpumux.io" || spec.GetClass() != "share" || len(spec.Devices) != 9 {
		t.Fatalf("kind %s/%s with %d devices, want gpumux.io/share with 9 (2 replicas + 7 whole GPUs)", spec.GetVendor(), spec.GetClass(), len(spec.Devices))
	}
	var replica *cdispec.Device
	for i := range spec.Devices {
		if strings.Contains(spec.Devices[i].Name, "_timeslice_1") {
			replica = &spec.Devices[i]
		}
	}
	if replica == nil {
		t.Fatalf("no device for replica 1: %+v", spec.Devices)
	}
	id := replica.Annotations["gpumux.io/share"]
	env := strings.Join(replica.ContainerEdits.Env, " ")
	if !strings.Contains(env, "GPUMUX_SHARES="+id) || !strings.Contains(env, "NVIDIA_VISIBLE_DEVICES=GPU-") || len(replica.ContainerEdits.DeviceNodes) != 4 {
		t.Errorf("replica edits: env %v, %d device nodes", replica.ContainerEdits.Env, len(replica.ContainerEdits.DeviceNodes))
	}
	// A limited replica (limit = "cap", the default): the limiter, and its
	// limits written for the engine to mount.
	if !strings.Contains(env, "LD_LIBRARY_PATH=/run/gpumux/limiter/lib") || !strings.Contains(env, "GPUMUX_LIMITER_LIMITS=/run/gpumux/limiter/limits") {
		t.Errorf("replica env %v lacks the limiter's", replica.ContainerEdits.Env)
	}
	mounts := map[string]string{}
	for _, m := range replica.ContainerEdits.Mounts {
		mounts[m.ContainerPath] = m.HostPath + " " + strings.Join(m.Options, ",")
	}
	uuid, _, _ := strings.Cut(id, "/")
	limits := filepath.Join(dir, "timeslice", uuid, "1", "limits")
	for path, want := range map[string]string{
		"/run/gpumux/limiter/lib":    limiter + " rbind,nosuid,nodev,ro",
		"/run/gpumux/limiter/limits": limits + " rbind,nosuid,nodev,ro",
		"/run/gpumux/limiter/state":  filepath.Join(dir, "timeslice", uuid, "1", "state") + " rbind,nosuid,nodev",
	} {
		if mounts[path] != want {
			t.Errorf("replica mount %s: %q, want %q", path, mounts[path], want)
		}
	}
	if b, err := os.ReadFile(limits); err != nil || !strings.Contains(string(b), "share="+id+"\n") {
		t.Errorf("limits file %q: %v", b, err)
	}
	if code, _, errOut := run(t, "cdi", "generate", "--config", cfg, "--file", filepath.Join(dir, "x.txt")); code != cli.ExitError || !strings.Contains(errOut, "*.json") {
		t.Errorf("a non-.json output: exit %d, %q", code, errOut)
	}

	// Every device carries the driver's files and the hook that adds them
	// to the container's linker cache, which runs --hook-binary (--runtime-binary, its older name); one
	// that is not installed is said once.
	lib := "/" + sim.LibDir()
	installed := filepath.Join(t.TempDir(), "gpumux-runtime-hook")
	if err := os.WriteFile(installed, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		flag, binary string
		warn         bool
	}{{"--hook-binary", installed, false}, {"--hook-binary", filepath.Join(dir, "no", "gpumux-runtime-hook"), true}, {"--runtime-binary", installed, false}} {
		code, stdout, errOut := run(t, "cdi", "generate", "--config", cfg, tc.flag, tc.binary)
		if code != cli.ExitOK {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		if n := strings.Count(errOut, "warning: hook program "+tc.binary); n != map[bool]int{true: 1, false: 0}[tc.warn] {
			t.Errorf("%s %s: %d warnings (want one if it is missing): %q", tc.flag, tc.binary, n, errOut)
		}
		var spec cdispec.Spec
		if err := json.Unmarshal([]byte(stdout), &spec); err != nil {
			t.Fatal(err)
		}
		// The oldest version with device annotations, which engines that
		// vendor an older CDI library (Docker 26: 0.6) read.
		if spec.Version != "0.6.0" {
			t.Errorf("cdiVersion %q, want 0.6.0 (the oldest with what the spec uses)", spec.Version)
		}
		for _, d := range spec.Devices {
			hooks := d.ContainerEdits.Hooks
			if len(hooks) != 1 || hooks[0].HookName != "createContainer" || hooks[0].Path != tc.binary || !strings.HasPrefix(strings.Join(hooks[0].Args, " "), filepath.Base(tc.binary)+" hook update-ldcache --link /usr/bin/nvidia-smi=/usr/local/nvidia/bin/nvidia-smi ") ||
				hooks[0].Args[len(hooks[0].Args)-1] != driverfiles.ContainerLibDir {
				t.Errorf("device %s: hooks %+v", d.Name, hooks)
			}
			found := false
			for _, m := range d.ContainerEdits.Mounts {
				found = found || m.ContainerPath == driverfiles.ContainerDir && slices.Contains(m.Options, "ro") &&
					sameFile(filepath.Join(m.HostPath, "lib64", "libcuda.so.1"), filepath.Join(dir, "sim", "dgxh200", "driver", lib, "libcuda.so.580.159.04"))
			}
			if !found {
				t.Errorf("device %s has no read-only %s holding the simulated driver's libcuda.so.1", d.Name, driverfiles.ContainerDir)
			}
		}
	}
}

// sameFile says whether a and b are one file, through links.
func sameFile(a, b string) bool {
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	return err == nil && os.SameFile(fa, fb)
}

// stubLimiter returns a limiter_dir holding a stand-in for the limiter's
// libcuda.so.1, which gpumux only checks is there and mounts.
func stubLimiter(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "libcuda.so.1"), []byte("not a library: a test's stand-in\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestStatusShowsHolders(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := run(t, "status", "--simulate", "dgxh200", "--state-dir", dir, "--output", "json")
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var st cli.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatal(err)
	}
	id := st.Groups[0].Shares[3].ID
	s, err := lease.Open(lease.PathIn(dir))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(context.Background(), "web-1", func(map[string]string) ([]string, error) { return []string{id}, nil }); err != nil {
		t.Fatal(err)
	}
	s.Close()
	code, out, errOut = run(t, "status", "--simulate", "dgxh200", "--state-dir", dir)
	if code != cli.ExitOK || !strings.Contains(out, "nvidia/gpu/H200  exclusive  8       1") || !strings.Contains(out, id+"  container web-1") {
		t.Errorf("status does not show the holder (exit %d):\n%s%s", code, out, errOut)
	}
}
