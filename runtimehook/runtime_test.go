package runtimehook

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpumux/gpumux/gpu"
	"github.com/gpumux/gpumux/gpu/driverfiles"
	"github.com/gpumux/gpumux/gpu/sim"
	"github.com/gpumux/gpumux/internal/ociruntime"
	"github.com/gpumux/gpumux/mig"
	"github.com/gpumux/gpumux/node"
	"github.com/gpumux/gpumux/node/lease"
	"github.com/gpumux/gpumux/nodeconfig"
)

// fixture is a bundle, a node config on a simulated H200 and a fake runc
// that records how it was called.
type fixture struct {
	bundle, stateDir, runcLog string
	rt                        *Runtime
	stderr                    bytes.Buffer
}

func newFixture(t testing.TB, layout string, runcExit int) *fixture {
	t.Helper()
	dir, err := os.MkdirTemp("", "gmx") // short: MPS layouts bound state_dir's length
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	f := &fixture{bundle: filepath.Join(dir, "bundle"), stateDir: filepath.Join(dir, "state"), runcLog: filepath.Join(dir, "runc.log")}
	os.MkdirAll(f.bundle, 0o755)
	runc := filepath.Join(dir, "runc")
	script := "#!/bin/sh\necho \"$@\" >> " + f.runcLog + "\n"
	if runcExit != 0 {
		script += "echo 'runc: boom' >&2\nexit 1\n"
	}
	os.WriteFile(runc, []byte(script), 0o755)
	cfg, err := nodeconfig.ParseConfig([]byte(`simulate = "dgxh200"
state_dir = "` + f.stateDir + `"
` + layout))
	if err != nil {
		t.Fatal(err)
	}
	f.rt = New(func() (*nodeconfig.Config, error) { return cfg, nil }, WithRunc(runc), WithSelf("/usr/bin/gpumux-runtime-core"), WithStderr(&f.stderr))
	return f
}

func (f *fixture) writeSpec(t testing.TB, annotations map[string]string, env ...string) []byte {
	t.Helper()
	spec := specs.Spec{Version: specs.Version, Process: &specs.Process{Args: []string{"/probe"}, Env: append([]string{"PATH=/bin"}, env...)},
		Root: &specs.Root{Path: "rootfs"}, Annotations: annotations, Linux: &specs.Linux{}}
	b, _ := json.Marshal(spec)
	if err := os.WriteFile(filepath.Join(f.bundle, "config.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	return b
}

func (f *fixture) readSpec(t *testing.T) specs.Spec {
	t.Helper()
	var spec specs.Spec
	b, _ := os.ReadFile(filepath.Join(f.bundle, "config.json"))
	if err := json.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	return spec
}

func (f *fixture) create(id string) int {
	return f.rt.Run(context.Background(), []string{"--root", "/nonexistent-runc-root", "create", "--bundle", f.bundle, id})
}

func TestCreateInjectsTheLeasedShare(t *testing.T) {
	f := newFixture(t, "", 0) // GPU 6 is in MIG mode: offered as its instances
	h, err := gpu.OpenSimulated("dgxh200", f.stateDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mig.Apply(context.Background(), h, 6, map[string]int{"3g.71gb": 2}, nil); err != nil {
		t.Fatal(err)
	}
	h.Close()
	f.writeSpec(t, map[string]string{"gpumux.io/mechanism": "mig", "gpumux.io/memory": "60Gi"})
	if code := f.create("c1"); code != 0 {
		t.Fatalf("exit %d: %s", code, f.stderr.String())
	}
	spec := f.readSpec(t)
	env := strings.Join(spec.Process.Env, " ")
	if !strings.Contains(env, "NVIDIA_VISIBLE_DEVICES=MIG-") || !strings.Contains(env, "GPUMUX_SHARES=MIG-") {
		t.Errorf("env %v", spec.Process.Env)
	}
	var paths []string
	for _, d := range spec.Linux.Devices {
		paths = append(paths, d.Path)
		if d.Type != "c" || d.Major == 0 && d.Minor == 0 {
			t.Errorf("device %+v: want a character device with its real numbers", d)
		}
	}
	if len(paths) != 6 || !strings.Contains(strings.Join(paths, " "), "/dev/nvidia-caps/nvidia-cap") {
		t.Errorf("devices %v: want ctl, uvm, uvm-tools, the GPU and two caps nodes", paths)
	}
	if len(spec.Linux.Resources.Devices) == 0 {
		t.Error("no device cgroup rules were added")
	}
	if h := spec.Hooks; h == nil || len(h.CreateRuntime) != 0 || len(h.Poststop) != 1 || h.Poststop[0].Args[2] != ociruntime.HookPoststop ||
		h.Poststop[0].Path != "/usr/bin/gpumux-runtime-hook" {
		t.Errorf("hooks %+v, want poststop only", spec.Hooks)
	}
	// The driver's files, read-only, in the staged tree, and
	// gpumux-runtime's hook (beside the core) that links its programs onto
	// PATH and puts its library directory into the container's linker
	// cache.
	lib := "/" + sim.LibDir()
	mounted := map[string]string{}
	for _, m := range spec.Mounts {
		if slices.Contains(m.Options, "ro") {
			mounted[m.Destination] = m.Source
		}
	}
	driver := filepath.Join(f.stateDir, "sim", "dgxh200", "driver")
	for file, host := range map[string]string{
		driverfiles.ContainerLibDir + "/libcuda.so.1":      filepath.Join(driver, lib, "libcuda.so.580.159.04"),
		driverfiles.ContainerLibDir + "/libnvidia-ml.so.1": filepath.Join(driver, lib, "libnvidia-ml.so.580.159.04"),
		driverfiles.ContainerBinDir + "/nvidia-smi":        filepath.Join(driver, "usr/bin/nvidia-smi"),
	} {
		source := mounted[file]
		if rel, err := filepath.Rel(driverfiles.ContainerDir, file); err == nil && !strings.HasPrefix(rel, "..") {
			source = filepath.Join(mounted[driverfiles.ContainerDir], rel)
		}
		if a, err := os.Stat(source); err != nil || !sameAs(t, a, host) {
			t.Errorf("%s is not the simulated driver's %s, read-only: mounts %+v", file, host, spec.Mounts)
		}
	}
	wantHook := []string{"gpumux-runtime-hook", "hook", ociruntime.HookUpdateLdcache,
		"--link", "/usr/bin/nvidia-smi=" + driverfiles.ContainerBinDir + "/nvidia-smi",
		"--link", "/usr/bin/nvidia-debugdump=" + driverfiles.ContainerBinDir + "/nvidia-debugdump",
		driverfiles.ContainerLibDir}
	if h := spec.Hooks; h == nil || len(h.CreateContainer) != 1 || h.CreateContainer[0].Path != "/usr/bin/gpumux-runtime-hook" || !slices.Equal(h.CreateContainer[0].Args, wantHook) {
		t.Errorf("createContainer hooks %+v, want /usr/bin/gpumux-runtime-hook %v", spec.Hooks, wantHook)
	}
	log, _ := os.ReadFile(f.runcLog)
	if !strings.Contains(string(log), "create --bundle "+f.bundle+" c1") {
		t.Errorf("runc was called with %q", log)
	}
	held, _ := f.rt.store().Held(context.Background(), "c1")
	if len(held) != 1 || !strings.HasPrefix(held[0], "MIG-") {
		t.Errorf("leases of c1: %v", held)
	}
}

// TestCreateAddsPoststopOnly: whatever the share, its spec gets the
// poststop hook and no createRuntime hook: prepare checked the share a
// moment before runc creates the container (a MIG instance's spec too:
// TestCreateInjectsTheLeasedShare).
func TestCreateAddsPoststopOnly(t *testing.T) {
	f := newFixture(t, `gpu {
  match     = "0"
  mechanism = "timeslice"
  replicas  = 2
  limit     = "off"
}`, 0)
	for _, m := range []string{"exclusive", "timeslice"} {
		f.writeSpec(t, map[string]string{node.AnnotationMechanism: m})
		if code := f.create("c-" + m); code != 0 {
			t.Fatalf("%s: exit %d: %s", m, code, f.stderr.String())
		}
		if h := f.readSpec(t).Hooks; h == nil || len(h.CreateRuntime) != 0 || len(h.Poststop) != 1 {
			t.Errorf("%s: hooks %+v, want poststop only", m, h)
		}
	}
}

func TestContainerThatAsksNothingIsUntouched(t *testing.T) {
	f := newFixture(t, "", 0)
	before := f.writeSpec(t, map[string]string{"io.kubernetes.pod.name": "x"}, "FOO=bar")
	if code := f.create("c1"); code != 0 {
		t.Fatalf("exit %d: %s", code, f.stderr.String())
	}
	after, _ := os.ReadFile(filepath.Join(f.bundle, "config.json"))
	if !bytes.Equal(before, after) {
		t.Error("the spec of a container that asks for nothing was rewritten")
	}
}

func TestFailedStartReleasesItsLease(t *testing.T) {
	f := newFixture(t, "", 1) // runc fails
	f.writeSpec(t, map[string]string{"gpumux.io/mechanism": "exclusive"})
	if code := f.create("c1"); code != 1 {
		t.Fatalf("exit %d, want runc's 1", code)
	}
	if held, _ := f.rt.store().Held(context.Background(), "c1"); len(held) != 0 {
		t.Errorf("a container whose start failed still holds %v", held)
	}
}

func TestBadRequestFailsTheStartWithTheReason(t *testing.T) {
	f := newFixture(t, "", 0)
	f.writeSpec(t, map[string]string{"gpumux.io/memroy": "16Gi"})
	if code := f.create("c1"); code == 0 {
		t.Fatal("a misspelt annotation started")
	}
	if !strings.Contains(f.stderr.String(), "gpumux.io/memroy") {
		t.Errorf("stderr %q does not name the bad key", f.stderr.String())
	}
	if log, _ := os.ReadFile(f.runcLog); len(log) != 0 {
		t.Errorf("runc was called: %q", log)
	}
}

func TestExclusiveSharesAreNeverGivenTwice(t *testing.T) {
	f := newFixture(t, "", 0) // the fake runc says every container is alive: no lease is reclaimed
	f.writeSpec(t, map[string]string{"gpumux.io/mechanism": "exclusive", "gpumux.io/gpus": "5"})
	if code := f.create("a"); code != 0 {
		t.Fatal(f.stderr.String())
	}
	f.writeSpec(t, map[string]string{"gpumux.io/mechanism": "exclusive", "gpumux.io/gpus": "3"})
	if code := f.create("b"); code != 0 {
		t.Fatal(f.stderr.String())
	}
	f.writeSpec(t, map[string]string{"gpumux.io/mechanism": "exclusive"})
	if code := f.create("c"); code == 0 {
		t.Fatal("a ninth whole GPU was handed out on an 8-GPU node")
	}
	if !strings.Contains(f.stderr.String(), "exclusive") {
		t.Errorf("the refusal does not say what was asked: %q", f.stderr.String())
	}
}

func TestPoststopReleases(t *testing.T) {
	f := newFixture(t, "", 0)
	f.writeSpec(t, map[string]string{"gpumux.io/mechanism": "exclusive"})
	if code := f.create("c1"); code != 0 {
		t.Fatal(f.stderr.String())
	}
	state, _ := json.Marshal(specs.State{ID: "c1", Bundle: f.bundle})
	if err := f.rt.Hook(context.Background(), ociruntime.HookPoststop, nil, bytes.NewReader(state)); err != nil {
		t.Fatal(err)
	}
	if held, _ := f.rt.store().Held(context.Background(), "c1"); len(held) != 0 {
		t.Errorf("after poststop c1 still holds %v", held)
	}
}

func TestReservedSharesNeedTheirToken(t *testing.T) {
	f := newFixture(t, "", 0)
	st, err := lease.Open(lease.PathIn(f.stateDir))
	if err != nil {
		t.Fatal(err)
	}
	h, _ := gpu.OpenSimulated("dgxh200", f.stateDir)
	node, _ := h.Inventory(context.Background())
	h.Close()
	reserved := node.GPUs[3].UUID
	token := "0123456789abcdef0123456789abcdef"
	if err := st.Reserve(context.Background(), token, []string{reserved}, time.Minute); err != nil {
		t.Fatal(err)
	}
	st.Close()
	tests := []struct {
		name, id string
		env      []string
		want     string // "" = started with the reserved share
	}{
		{"no token", "c1", []string{"GPUMUX_SHARES=" + reserved}, "without GPUMUX_RESERVATION"},
		{"forged token", "c2", []string{"GPUMUX_SHARES=" + reserved, "GPUMUX_RESERVATION=ffffffffffffffffffffffffffffffff"}, "unknown to this node"},
		{"other share", "c3", []string{"GPUMUX_SHARES=" + node.GPUs[2].UUID, "GPUMUX_RESERVATION=" + token}, "not ["},
		{"the plugin's reservation", "c4", []string{"GPUMUX_SHARES=" + reserved, "GPUMUX_RESERVATION=" + token}, ""},
		{"the token again", "c5", []string{"GPUMUX_SHARES=" + reserved, "GPUMUX_RESERVATION=" + token}, "used already"},
	}
	for _, tc := range tests {
		f.stderr.Reset()
		f.writeSpec(t, nil, tc.env...)
		code := f.create(tc.id)
		if tc.want != "" {
			if code == 0 || !strings.Contains(f.stderr.String(), tc.want) || !strings.Contains(f.stderr.String(), "not reserved on this node") {
				t.Errorf("%s: exit %d, stderr %q; want a refusal containing %q", tc.name, code, f.stderr.String(), tc.want)
			}
			continue
		}
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", tc.name, code, f.stderr.String())
		}
		env := strings.Join(f.readSpec(t).Process.Env, " ")
		if !strings.Contains(env, "NVIDIA_VISIBLE_DEVICES="+reserved) {
			t.Errorf("%s: env %s", tc.name, env)
		}
		if held, _ := f.rt.store().Held(context.Background(), tc.id); len(held) != 1 || held[0] != reserved {
			t.Errorf("%s: %s holds %v", tc.name, tc.id, held)
		}
	}
}

func TestCreateRefusesUnusableShares(t *testing.T) {
	f := newFixture(t, `gpu {
  match     = "4"
  mechanism = "mps"
  shares    = 2
}`, 0)
	ctx := context.Background()

	// An MPS share whose daemon is not running (no agent or plugin on this
	// node) is refused before runc starts, with the reason and the remedy,
	// and nothing stays leased.
	f.writeSpec(t, map[string]string{"gpumux.io/mechanism": "mps"})
	if code := f.create("mps"); code == 0 || !strings.Contains(f.stderr.String(), "no MPS control daemon serves") || !strings.Contains(f.stderr.String(), "gpumux agent") {
		t.Errorf("MPS share without a daemon: exit %d: %s", code, f.stderr.String())
	}
	if held, _ := f.rt.store().Held(ctx, "mps"); len(held) != 0 {
		t.Errorf("a refused create holds %v", held)
	}
}

// TestShareEnvReplacesTheImages: a variable the share sets that the image
// sets too (CUDA images say NVIDIA_VISIBLE_DEVICES=all) is there once, with
// the share's value: a program's getenv finds the first of two.
func TestShareEnvReplacesTheImages(t *testing.T) {
	f := newFixture(t, "", 0)
	f.writeSpec(t, map[string]string{"gpumux.io/mechanism": "exclusive"}, "NVIDIA_VISIBLE_DEVICES=all")
	if code := f.create("c1"); code != 0 {
		t.Fatal(f.stderr.String())
	}
	var got []string
	for _, kv := range f.readSpec(t).Process.Env {
		if strings.HasPrefix(kv, "NVIDIA_VISIBLE_DEVICES=") {
			got = append(got, kv)
		}
	}
	if len(got) != 1 || !strings.HasPrefix(got[0], "NVIDIA_VISIBLE_DEVICES=GPU-") {
		t.Errorf("NVIDIA_VISIBLE_DEVICES entries %v, want the share's only", got)
	}
}

// TestCreateRefusesADamagedLeaseStore checks that gpumux-runtime create on
// a damaged lease store (emptied) fails with an error naming the store and
// gpumux repair, and never calls runc: a new store in its place would hand
// out shares that running containers hold.
func TestCreateRefusesADamagedLeaseStore(t *testing.T) {
	f := newFixture(t, "", 0)
	s, err := lease.Open(lease.PathIn(f.stateDir))
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := os.Truncate(lease.PathIn(f.stateDir), 0); err != nil {
		t.Fatal(err)
	}
	f.writeSpec(t, map[string]string{"gpumux.io/mechanism": "exclusive"})
	if code := f.create("c1"); code != 1 {
		t.Fatalf("exit %d, want 1: %s", code, f.stderr.String())
	}
	for _, want := range []string{lease.PathIn(f.stateDir), "empty (0 bytes)", "gpumux repair"} {
		if !strings.Contains(f.stderr.String(), want) {
			t.Errorf("stderr %q does not say %q", f.stderr.String(), want)
		}
	}
	if _, err := os.Stat(f.runcLog); err == nil {
		t.Error("runc was called")
	}
}

// sameAs says whether fi is host's file.
func sameAs(t *testing.T, fi os.FileInfo, host string) bool {
	t.Helper()
	h, err := os.Stat(host)
	if err != nil {
		t.Error(err)
		return false
	}
	return os.SameFile(fi, h)
}

// TestReservationDriverMountsGiveWayToTheTree: a Nomad docker task through
// gpumux-runtime comes with its reservation's mounts of the driver's files
// (one per file, at the host paths); the create replaces exactly those by
// the staged tree, and keeps the task's other mounts.
func TestReservationDriverMountsGiveWayToTheTree(t *testing.T) {
	f := newFixture(t, "", 0)
	ctx := context.Background()
	h, _ := gpu.OpenSimulated("dgxh200", f.stateDir)
	inv, _ := h.Inventory(ctx)
	h.Close()
	reserved := inv.GPUs[3].UUID
	st, err := lease.Open(lease.PathIn(f.stateDir))
	if err != nil {
		t.Fatal(err)
	}
	token := "0123456789abcdef0123456789abcdef"
	if err := st.Reserve(ctx, token, []string{reserved}, time.Minute); err != nil {
		t.Fatal(err)
	}
	st.Close()

	// What the Nomad plugin's node gives the task: its reservation edits.
	cfg := &nodeconfig.Config{Simulate: "dgxh200", StateDir: f.stateDir}
	n, err := node.Open(cfg, node.WithDriverAtHostPaths())
	if err != nil {
		t.Fatal(err)
	}
	dup, err := n.ReservationDriverMounts()
	n.Close()
	if err != nil || len(dup) < 10 {
		t.Fatalf("the reservation's driver mounts: %d, %v", len(dup), err)
	}
	var spec specs.Spec
	if err := json.Unmarshal(f.writeSpec(t, nil, "GPUMUX_SHARES="+reserved, "GPUMUX_RESERVATION="+token), &spec); err != nil {
		t.Fatal(err)
	}
	task := specs.Mount{Destination: "/alloc", Source: filepath.Join(f.stateDir, "alloc"), Type: "bind", Options: []string{"rbind"}}
	// A mount of a driver file elsewhere is the task's own: kept.
	own := specs.Mount{Destination: "/opt/libcuda.so.1", Source: dup[0].HostPath, Type: "bind", Options: []string{"rbind", "ro"}}
	spec.Mounts = append(spec.Mounts, task, own)
	for _, m := range dup {
		spec.Mounts = append(spec.Mounts, specs.Mount{Destination: m.ContainerPath, Source: m.HostPath, Type: "bind", Options: []string{"rbind", "ro"}})
	}
	b, _ := json.Marshal(spec)
	if err := os.WriteFile(filepath.Join(f.bundle, "config.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := f.create("task"); code != 0 {
		t.Fatalf("exit %d: %s", code, f.stderr.String())
	}
	got := map[string]string{}
	for _, m := range f.readSpec(t).Mounts {
		got[m.Destination] = m.Source
	}
	for _, m := range dup {
		if src, ok := got[m.ContainerPath]; ok {
			t.Errorf("the reservation's %s <- %s is still mounted", m.ContainerPath, src)
		}
	}
	if !strings.HasPrefix(got[driverfiles.ContainerDir], filepath.Join(f.stateDir, "driver")+"/") || got["/alloc"] != task.Source || got[own.Destination] != own.Source {
		t.Errorf("mounts %v: want the staged tree at %s, and the task's /alloc and %s kept", got, driverfiles.ContainerDir, own.Destination)
	}
}
