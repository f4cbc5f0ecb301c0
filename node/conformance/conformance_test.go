package conformance_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/plugins/base"
	"github.com/hashicorp/nomad/plugins/device"
	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpumux/gpumux/cli"
	"github.com/gpumux/gpumux/exclusive"
	"github.com/gpumux/gpumux/gpu"
	"github.com/gpumux/gpumux/gpu/driverfiles"
	"github.com/gpumux/gpumux/gpu/sim"
	"github.com/gpumux/gpumux/internal/ldcache"
	"github.com/gpumux/gpumux/internal/nomadconf"
	"github.com/gpumux/gpumux/internal/ociruntime"
	"github.com/gpumux/gpumux/internal/testbin"
	"github.com/gpumux/gpumux/mig"
	"github.com/gpumux/gpumux/mps"
	"github.com/gpumux/gpumux/node"
	"github.com/gpumux/gpumux/nodeconfig"
	"github.com/gpumux/gpumux/plugin"
	"github.com/gpumux/gpumux/remote"
	"github.com/gpumux/gpumux/remote/fakecuda"
	"github.com/gpumux/gpumux/remote/pool/pooltest"
	"github.com/gpumux/gpumux/runtimehook"
	"github.com/gpumux/gpumux/share"
	"github.com/gpumux/gpumux/timeslice"
)

// simulatedNodes are the nodes every mechanism runs on.
var simulatedNodes = []string{"dgxa100", "dgxh100", "dgxh200"}

// mechanism is one row of the suite: a layout that offers shares of one
// mechanism, and how many.
type mechanism struct {
	name string          // sub-test name
	mech share.Mechanism // the mechanism of the shares under test
	// layout is the config's gpu blocks (or remote block); profile is a MIG
	// profile of the node's GPUs of which two fit on one GPU.
	layout func(profile string) string
	shares int  // shares of mech the layout offers
	mps    bool // needs the stand-in MPS control daemon
	remote bool // needs a gpumux-remoted
	// limited: its shares are time-slice replicas held by gpumux's
	// limiter, whose mounts every front door must give (the suite's
	// limiter_dir holds a stand-in, see stubLimiter).
	limited bool
}

var mechanisms = []mechanism{
	{
		name: "exclusive", mech: share.Exclusive, shares: 8, // GPUs no block matches are exclusive too
		layout: func(string) string { return "gpu {\n  match = \"0-3\"\n  mechanism = \"exclusive\"\n}\n" },
	},
	{
		name: "mig", mech: share.MIG, shares: 4,
		layout: func(p string) string {
			return fmt.Sprintf("gpu {\n  match = \"0,1\"\n  mechanism = \"mig\"\n  mig_devices {\n    %q = 2\n  }\n}\n", p)
		},
	},
	{
		name: "mps", mech: share.MPS, shares: 4, mps: true,
		layout: func(string) string { return "gpu {\n  match = \"0,1\"\n  mechanism = \"mps\"\n  shares = 2\n}\n" },
	},
	{
		name: "mps-on-mig", mech: share.MPS, shares: 4, mps: true,
		layout: func(p string) string {
			return fmt.Sprintf("gpu {\n  match = \"2\"\n  mechanism = \"mps\"\n  shares = 2\n  mig_devices {\n    %q = 2\n  }\n}\n", p)
		},
	},
	{
		name: "timeslice", mech: share.TimeSlice, shares: 4, limited: true, // limit = "cap", the default
		layout: func(string) string {
			return "gpu {\n  match = \"0,1\"\n  mechanism = \"timeslice\"\n  replicas = 2\n}\n"
		},
	},
	{
		name: "timeslice-unlimited", mech: share.TimeSlice, shares: 4,
		layout: func(string) string {
			return "gpu {\n  match = \"0,1\"\n  mechanism = \"timeslice\"\n  replicas = 2\n  limit = \"off\"\n}\n"
		},
	},
	{
		name: "remote", mech: share.Remote, shares: 4, remote: true, // two remote GPUs, two shares each
		layout: func(string) string { return "" },
	},
}

// maxShares bounds how many shares of a case go through every front door.
const maxShares = 4

func TestConformance(t *testing.T) {
	for _, simName := range simulatedNodes {
		for _, m := range mechanisms {
			t.Run(simName+"/"+m.name, func(t *testing.T) {
				t.Parallel()
				c := newCase(t, simName, m)
				t.Run("edits", c.testEdits)
				t.Run("health", c.testHealth)
				t.Run("lifecycle", c.testLifecycle) // stops the plugin
				if m.mps {
					t.Run("mps-restart", c.testMPSRestart)
				}
			})
		}
	}
}

// nodeCase is one mechanism on one simulated node, run by the plugin.
type nodeCase struct {
	sim      string
	m        mechanism
	dir      string // short: MPS pipe directories live under the state directory
	stateDir string
	cfgText  string // the node config, HCL: the plugin block's config body
	cfgFile  string
	// limiterDir is the node's limiter_dir: a stand-in libcuda.so.1 (the
	// suite runs no CUDA program; the node checks the file is there).
	limiterDir string
	mpsBin     string           // the stand-in MPS control daemon, through mpsWrapper
	srv        *pooltest.Server // the remote case's gpumux-remoted
	runc       string           // a fake runc that records nothing and says every container exists
	plugin     *plugin.Plugin   // running until stopPlugin
	fp         <-chan *device.FingerprintResponse
	cancel     context.CancelFunc // ends the plugin's fingerprint
	ids        []string           // the mechanism's shares, as first fingerprinted
}

func newCase(t *testing.T, simName string, m mechanism) *nodeCase {
	t.Helper()
	dir, err := os.MkdirTemp("", "gmx") // state_dir of at most 38 bytes for MPS
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	c := &nodeCase{sim: simName, m: m, dir: dir, stateDir: filepath.Join(dir, "s"), cfgFile: filepath.Join(dir, "node.hcl"), runc: filepath.Join(dir, "runc")}
	writeExecutable(t, c.runc, []byte("#!/bin/sh\nexit 0\n"))

	var b strings.Builder
	c.limiterDir = stubLimiter(t, dir)
	fmt.Fprintf(&b, "simulate = %q\nstate_dir = %q\nlimiter_dir = %q\nfingerprint_period = \"1s\"\n", simName, c.stateDir, c.limiterDir)
	if m.mps {
		c.mpsBin = mpsWrapper(t, dir)
		fmt.Fprintf(&b, "mps_control_binary = %q\n", c.mpsBin)
		t.Cleanup(func() { killDaemons(c.stateDir) }) // after the plugin's cleanup, which stops its node
	}
	if m.remote {
		c.srv = pooltest.Start(t, pooltest.Options{Fake: []fakecuda.Option{fakecuda.WithDevices(2), fakecuda.WithMemory(16 << 30), fakecuda.WithName("NVIDIA H200")}})
		fmt.Fprintf(&b, "remote {\n  servers = [%q]\n  token_file = %q\n  interposer_dir = %q\n  shares = 2\n}\n",
			c.srv.Addr, pooltest.WriteSecret(t, dir), pooltest.WriteInterposer(t, dir))
	}
	b.WriteString(m.layout(migProfile(t, simName)))
	c.cfgText = b.String()
	if err := os.WriteFile(c.cfgFile, []byte(c.cfgText), 0o644); err != nil {
		t.Fatal(err)
	}
	c.startPlugin(t)
	return c
}

// migProfile reads the node's GPUs and returns the largest MIG profile of
// which two fit on one GPU (e.g. "3g.71gb" on an H200).
func migProfile(t *testing.T, simName string) string {
	t.Helper()
	h, err := gpu.OpenSimulated(simName, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	inv, err := h.Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var best gpu.MIGProfile
	for _, p := range inv.GPUs[0].MIGProfiles {
		if p.MaxCount >= 2 && p.MemoryMiB > best.MemoryMiB {
			best = p
		}
	}
	if best.Name == "" {
		t.Fatalf("%s: no MIG profile of which two fit on GPU 0 (profiles %v)", simName, inv.GPUs[0].ProfileNames())
	}
	return best.Name
}

// config parses the node config as gpumux-runtime and gpumux agent do.
func (c *nodeCase) config(t *testing.T) *nodeconfig.Config {
	t.Helper()
	cfg, err := nodeconfig.ParseConfig([]byte(c.cfgText))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// encodeConfig turns the HCL config into what a Nomad agent sends the
// plugin: through the plugin's schema to msgpack.
func encodeConfig(t *testing.T, src string) []byte {
	t.Helper()
	b, err := nomadconf.Encode(src + "\nruntime_socket = \"\"\n") // not the node's socket
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// startPlugin configures the plugin, starts its fingerprint and reads the
// mechanism's shares from the first one.
func (c *nodeCase) startPlugin(t *testing.T) {
	t.Helper()
	logger := hclog.NewNullLogger()
	if os.Getenv("GPUMUX_TEST_LOG") != "" {
		logger = hclog.New(&hclog.LoggerOptions{Name: c.sim + "/" + c.m.name, Level: hclog.Info, Output: os.Stderr})
	}
	c.plugin = plugin.New(logger)
	if err := c.plugin.SetConfig(&base.Config{PluginConfig: encodeConfig(t, c.cfgText)}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := c.plugin.Fingerprint(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	c.fp, c.cancel = ch, cancel
	t.Cleanup(func() { c.stopPlugin(t) })
	var first *device.FingerprintResponse
	select {
	case first = <-ch:
	case <-time.After(60 * time.Second):
		t.Fatal("no fingerprint within 60s")
	}
	if first == nil || first.Error != nil {
		t.Fatalf("first fingerprint: %+v", first)
	}
	for _, g := range first.Devices {
		if a := g.Attributes[plugin.AttrMechanism]; a == nil || a.String == nil || *a.String != string(c.m.mech) {
			continue
		}
		for _, d := range g.Devices {
			c.ids = append(c.ids, d.ID)
			if !d.Healthy {
				t.Errorf("share %s unhealthy at start: %s", d.ID, d.HealthDesc)
			}
		}
	}
	slices.Sort(c.ids)
	if len(c.ids) != c.m.shares {
		t.Fatalf("the plugin offers %d %s shares %v, want %d (groups %v)", len(c.ids), c.m.mech, c.ids, c.m.shares, groupNames(first.Devices))
	}
}

// stopPlugin ends the plugin's fingerprint and waits until its node has
// stopped (it releases the state directory's lock last). Idempotent.
func (c *nodeCase) stopPlugin(t *testing.T) {
	t.Helper()
	if c.cancel == nil {
		return
	}
	c.cancel()
	c.cancel = nil
	deadline := time.After(30 * time.Second)
	for open := true; open; {
		select {
		case _, open = <-c.fp:
		case <-deadline:
			t.Fatal("the fingerprint stream stays open 30s after its context ended")
		}
	}
	waitUnlocked(t, c.stateDir)
}

// waitUnlocked waits until no agent holds the state directory's lock.
func waitUnlocked(t *testing.T, stateDir string) {
	t.Helper()
	f, err := os.Open(filepath.Join(stateDir, node.LockFile))
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for deadline := time.Now().Add(30 * time.Second); ; {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			unix.Flock(int(f.Fd()), unix.LOCK_UN)
			return
		}
		if !errors.Is(err, unix.EWOULDBLOCK) || time.Now().After(deadline) {
			t.Fatalf("the state directory's lock is still held: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ---------------------------------------------------------------------------
// 1. The same edits through every front door.

func (c *nodeCase) testEdits(t *testing.T) {
	spec := c.cdiSpec(t)
	cdiByName := map[string]*cdispec.Device{}
	for i, d := range spec.Devices {
		cdiByName[d.Name] = &spec.Devices[i]
		if share.IsRemoteID(d.Annotations["gpumux.io/share"]) || d.Annotations["gpumux.io/mechanism"] == string(share.Remote) {
			t.Errorf("the CDI spec has remote share %s: a spec handed to every container cannot carry its per-container token", d.Name)
		}
	}
	if c.m.mech != share.Remote {
		// Every share the plugin offers is in the spec, not only those
		// compared below.
		for _, id := range c.ids {
			if cdiByName[cli.CDIName(id)] == nil {
				t.Errorf("share %s is not in the CDI spec", id)
			}
		}
	}
	devIndex := deviceIndex(t, c.sim, c.stateDir)
	if c.m.mps {
		// gpumux-runtime, which runs no daemon, takes an MPS share as usable
		// while the daemon its pid file names runs.
		for _, id := range c.ids {
			readPID(t, filepath.Join(c.stateDir, "mps", share.DeviceOf(id), "pipe", "nvidia-cuda-mps-control.pid"))
		}
	}
	for i, id := range pick(c.ids, maxShares) {
		t.Run(strings.ReplaceAll(id, "/", "_"), func(t *testing.T) {
			r, err := c.plugin.Reserve([]string{id})
			if err != nil {
				t.Fatalf("Reserve: %v", err)
			}
			token := r.Envs[share.EnvReservation]
			if token == "" {
				t.Fatalf("the reservation has no %s: %v", share.EnvReservation, r.Envs)
			}
			viaPlugin := fromReservation(r)
			if got := viaPlugin.env[share.EnvShares]; got != id {
				t.Errorf("the reservation's %s = %q, want %q", share.EnvShares, got, id)
			}
			c.checkLimiter(t, id, viaPlugin)
			c.checkDriver(t, id, viaPlugin)
			// A reservation carries no hook and gives the driver's
			// libraries at their host paths; the other front doors give
			// them in the staged tree, with the linker cache hook.
			viaPlugin = c.staged(t, viaPlugin)
			if c.m.mech != share.Remote && len(viaPlugin.devices) == 0 {
				t.Errorf("the reservation of a local share has no device nodes: %+v", r)
			}

			viaRuntime, ok := c.create(t, fmt.Sprintf("c%d", i), id, token, devIndex)
			if ok {
				if d := diff(viaPlugin, viaRuntime, "plugin Reserve", "gpumux-runtime create"); d != "" {
					t.Errorf("share %s: the plugin and gpumux-runtime disagree:\n%s", id, d)
				}
			}

			dev := cdiByName[cli.CDIName(id)]
			if c.m.mech == share.Remote {
				if dev != nil {
					t.Errorf("remote share %s is in the CDI spec", id)
				}
				return
			}
			if dev == nil {
				t.Fatalf("no CDI device %s for share %s", cli.CDIName(id), id)
			}
			if dev.Annotations["gpumux.io/share"] != id || dev.Annotations["gpumux.io/mechanism"] != string(c.m.mech) {
				t.Errorf("CDI device %s annotations %v", dev.Name, dev.Annotations)
			}
			if d := diff(viaPlugin, fromCDI(dev.ContainerEdits), "plugin Reserve", "gpumux cdi generate"); d != "" {
				t.Errorf("share %s: the plugin and the CDI spec disagree:\n%s", id, d)
			}
		})
	}
}

// checkLimiter checks that a limited replica's reservation carries the
// limiter (what the other front doors are compared with), and that no
// other share's does.
func (c *nodeCase) checkLimiter(t *testing.T, id string, e edits) {
	t.Helper()
	lib := mountLine(timeslice.LibMount, c.limiterDir, true)
	has := slices.Contains(e.mounts, lib)
	switch {
	case c.m.limited && !has:
		t.Errorf("the reservation of limited replica %s has no limiter mount %q: mounts %v", id, lib, e.mounts)
	case c.m.limited:
		dir := filepath.Join(c.stateDir, "timeslice", share.DeviceOf(id), strconv.Itoa(replicaOf(t, id)))
		for _, want := range []string{mountLine(timeslice.LimitsMount, filepath.Join(dir, "limits"), true), mountLine(timeslice.StateMount, filepath.Join(dir, "state"), false)} {
			if !slices.Contains(e.mounts, want) {
				t.Errorf("the reservation of limited replica %s lacks mount %q: mounts %v", id, want, e.mounts)
			}
		}
		if e.env[share.EnvLibraryPath] != timeslice.LibMount || e.env[timeslice.EnvLimits] != timeslice.LimitsMount || e.env[timeslice.EnvState] != timeslice.StateMount {
			t.Errorf("the reservation of limited replica %s: env %v", id, e.env)
		}
	case has || e.env[timeslice.EnvLimits] != "":
		t.Errorf("the reservation of %s (not a limited replica) has the limiter: %+v", id, e)
	}
}

// withScratch adds to a reservation's edits the tmpfs at gpumux's
// directory that the other front doors give ahead of the mounts below it
// (a reservation binds host paths only).
func withScratch(e edits) edits {
	if slices.ContainsFunc(e.mounts, func(m string) bool { return strings.HasPrefix(m, share.ScratchDir+"/") }) {
		e.mounts = append([]string{mountLine(share.ScratchDir, "tmpfs", false)}, e.mounts...)
	}
	return e
}

// hookBinary is the gpumux-runtime-hook that the front doors' hooks name
// in the suite: beside the core for create (WithSelf(coreBinary)), cdi
// generate's --hook-binary.
const (
	hookBinary = "/usr/bin/gpumux-runtime-hook"
	coreBinary = "/usr/bin/gpumux-runtime-core"
)

// driverHooks are the hooks gpumux-runtime and the CDI spec must give a
// share: the update-ldcache hook for a local share, none for a remote one.
// staged turns a reservation's edits of a local share into what the front
// doors that run hooks give: each of the driver's libraries and programs
// (checked to be in the one staged tree, the same file) replaced by the
// tree's mount at /usr/local/nvidia, the limiter pointed there, and the
// hook that links the programs onto PATH and puts the libraries into the
// linker cache.
func (c *nodeCase) staged(t *testing.T, e edits) edits {
	t.Helper()
	e = withScratch(e)
	if c.m.mech == share.Remote {
		return e
	}
	trees, err := filepath.Glob(filepath.Join(c.stateDir, "driver", "[0-9]*"))
	if err != nil || len(trees) != 1 {
		t.Fatalf("staged driver trees %v (%v), want one", trees, err)
	}
	lib := "/" + sim.LibDir()
	driver := filepath.Join(c.stateDir, "sim", c.sim, "driver")
	args := []string{"gpumux-runtime-hook", "hook", ociruntime.HookUpdateLdcache}
	var mounts []string
	for _, m := range e.mounts {
		container, host, ok := strings.Cut(strings.TrimSuffix(m, " ro"), " <- ")
		var staged string
		switch {
		case ok && strings.HasPrefix(container, lib+"/") && strings.HasPrefix(host, filepath.Join(driver, lib)+"/"):
			staged = filepath.Join(trees[0], "lib64", filepath.Base(container))
		case ok && strings.HasPrefix(container, "/usr/bin/") && strings.HasPrefix(host, driver+"/"):
			staged = filepath.Join(trees[0], "bin", filepath.Base(container))
			args = append(args, ldcache.LinkFlag, container+"="+driverfiles.ContainerBinDir+"/"+filepath.Base(container))
		default:
			mounts = append(mounts, m)
			continue
		}
		if a, err := os.Stat(staged); err != nil {
			t.Errorf("the reservation's %s is not in the staged tree: %v", container, err)
		} else if b, err := os.Stat(host); err != nil || !os.SameFile(a, b) {
			t.Errorf("the staged tree's %s is not the reservation's %s (%v)", staged, host, err)
		}
	}
	e.mounts = append(mounts, mountLine(driverfiles.ContainerDir, trees[0], true))
	for _, k := range []string{timeslice.EnvCUDA, timeslice.EnvNVML} {
		if v, ok := e.env[k]; ok {
			e.env[k] = strings.Replace(v, lib, driverfiles.ContainerLibDir, 1)
		}
	}
	e.hooks = []string{hookLine(hookBinary, append(args, driverfiles.ContainerLibDir))}
	return e
}

// checkDriver checks that a local share's reservation carries the
// simulated driver's libcuda and nvidia-smi read-only, and that a remote
// share's carries nothing of the real driver (its interposer only).
func (c *nodeCase) checkDriver(t *testing.T, id string, e edits) {
	t.Helper()
	driver := filepath.Join(c.stateDir, "sim", c.sim, "driver")
	lib := "/" + sim.LibDir()
	want := []string{
		mountLine(lib+"/libcuda.so.1", filepath.Join(driver, lib, "libcuda.so.580.159.04"), true),
		mountLine("/usr/bin/nvidia-smi", filepath.Join(driver, "usr/bin/nvidia-smi"), true),
	}
	for _, m := range e.mounts {
		if c.m.mech == share.Remote && strings.Contains(m, " <- "+driver+"/") {
			t.Errorf("remote share %s got the real driver's file: %s", id, m)
		}
	}
	for _, w := range want {
		if c.m.mech != share.Remote && !slices.Contains(e.mounts, w) {
			t.Errorf("the reservation of %s lacks the driver's %q: mounts %v", id, w, e.mounts)
		}
	}
}

// replicaOf is n of a share ID ".../timeslice/<n>".
func replicaOf(t *testing.T, id string) int {
	t.Helper()
	_, num, _ := strings.Cut(id, "/timeslice/")
	n, err := strconv.Atoi(num)
	if err != nil {
		t.Fatalf("share %s is not a replica", id)
	}
	return n
}

// cdiSpec runs `gpumux cdi generate --config FILE`.
func (c *nodeCase) cdiSpec(t *testing.T) *cdispec.Spec {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := cli.Run(context.Background(), []string{"cdi", "generate", "--config", c.cfgFile, "--hook-binary", hookBinary}, &out, &errOut); code != cli.ExitOK {
		t.Fatalf("gpumux cdi generate: exit %d: %s", code, errOut.String())
	}
	var spec cdispec.Spec
	if err := json.Unmarshal(out.Bytes(), &spec); err != nil {
		t.Fatalf("gpumux cdi generate wrote %q: %v", out.String(), err)
	}
	if spec.Kind != cli.CDIKind {
		t.Errorf("CDI kind %q, want %q", spec.Kind, cli.CDIKind)
	}
	return &spec
}

// What a bundle has before gpumux-runtime edits it: the runtime must keep
// it, and the comparison ignores it.
var (
	bundleEnv   = []string{"PATH=/bin"}
	bundleMount = specs.Mount{Destination: "/proc", Type: "proc", Source: "proc"}
	fuseMajor   = int64(10)
	fuseMinor   = int64(229)
	bundleDev   = specs.LinuxDevice{Path: "/dev/fuse", Type: "c", Major: fuseMajor, Minor: fuseMinor}
	bundleRule  = specs.LinuxDeviceCgroup{Allow: true, Type: "c", Major: &fuseMajor, Minor: &fuseMinor, Access: "rwm"}
)

// create runs gpumux-runtime's create on a bundle that asks for share id
// with Nomad's reservation token, as Nomad's docker driver starts a task,
// and returns the edits it wrote into config.json.
func (c *nodeCase) create(t *testing.T, container, id, token string, devIndex map[string]string) (edits, bool) {
	t.Helper()
	bundle := t.TempDir()
	spec := specs.Spec{
		Version: specs.Version,
		Process: &specs.Process{Args: []string{"/probe"}, Env: append(slices.Clone(bundleEnv), share.EnvShares+"="+id, share.EnvReservation+"="+token)},
		Root:    &specs.Root{Path: "rootfs"},
		Mounts:  []specs.Mount{bundleMount},
		Linux: &specs.Linux{
			Devices:   []specs.LinuxDevice{bundleDev},
			Resources: &specs.LinuxResources{Devices: []specs.LinuxDeviceCgroup{bundleRule}},
		},
	}
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(bundle, "config.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := c.config(t)
	var stderr bytes.Buffer
	rt := runtimehook.New(func() (*nodeconfig.Config, error) { return cfg, nil },
		runtimehook.WithRunc(c.runc), runtimehook.WithSelf(coreBinary), runtimehook.WithStderr(&stderr))
	if code := rt.Run(context.Background(), []string{"--root", filepath.Join(c.dir, "runc-root"), "create", "--bundle", bundle, container}); code != 0 {
		t.Errorf("gpumux-runtime create of share %s with its reservation: exit %d: %s", id, code, stderr.String())
		return edits{}, false
	}
	b, err = os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out specs.Spec
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("the rewritten config.json: %v", err)
	}
	if out.Process == nil || out.Linux == nil {
		t.Errorf("the rewritten config.json lost its process or linux section: %s", b)
		return edits{}, false
	}
	return fromSpec(t, out, devIndex), true
}

// deviceIndex maps the simulated node's device nodes' numbers ("c 195:3")
// to their host paths, to read the host path of a device in an OCI spec
// (which keeps the container path and the numbers only).
func deviceIndex(t *testing.T, simName, stateDir string) map[string]string {
	t.Helper()
	n, err := sim.Open(simName, stateDir)
	if err != nil {
		t.Fatal(err)
	}
	index := map[string]string{}
	err = filepath.WalkDir(n.DevRoot(), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT == unix.S_IFCHR {
			index[fmt.Sprintf("c %d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))] = path
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(index) == 0 {
		t.Fatalf("no device nodes under %s", n.DevRoot())
	}
	return index
}

// edits are a container's edits in one form for all front doors.
type edits struct {
	env     map[string]string
	devices []string // "CONTAINER PATH <- HOST PATH (PERMISSIONS)"
	mounts  []string // "CONTAINER PATH <- HOST PATH ro|rw"
	// hooks are the createContainer hooks, "PATH ARGS...": gpumux-runtime
	// and CDI specs run them; a Nomad reservation has none.
	hooks []string
}

func deviceLine(container, host, perms string) string {
	return fmt.Sprintf("%s <- %s (%s)", container, host, perms)
}

func mountLine(container, host string, readOnly bool) string {
	mode := "rw"
	if readOnly {
		mode = "ro"
	}
	return fmt.Sprintf("%s <- %s %s", container, host, mode)
}

// envMap turns K=V entries into a map; a key set twice is shown with both
// values (a program's getenv would see the first).
func envMap(entries []string) map[string]string {
	m := map[string]string{}
	for _, kv := range entries {
		k, v, _ := strings.Cut(kv, "=")
		if old, dup := m[k]; dup {
			v = old + " AND AGAIN " + v
		}
		m[k] = v
	}
	return m
}

// normalizeEnv drops the reservation token (the plugin's alone: it is how
// gpumux-runtime finds the reservation) and masks a remote token (minted
// per container).
func normalizeEnv(env map[string]string) map[string]string {
	delete(env, share.EnvReservation)
	if env[remote.EnvToken] != "" {
		env[remote.EnvToken] = "<token>"
	}
	return env
}

func fromReservation(r *device.ContainerReservation) edits {
	e := edits{env: normalizeEnv(maps.Clone(r.Envs))}
	if e.env == nil {
		e.env = map[string]string{}
	}
	for _, d := range r.Devices {
		e.devices = append(e.devices, deviceLine(d.TaskPath, d.HostPath, d.CgroupPerms))
	}
	for _, m := range r.Mounts {
		e.mounts = append(e.mounts, mountLine(m.TaskPath, m.HostPath, m.ReadOnly))
	}
	return e
}

func fromCDI(ce cdispec.ContainerEdits) edits {
	e := edits{env: normalizeEnv(envMap(ce.Env))}
	for _, d := range ce.DeviceNodes {
		e.devices = append(e.devices, deviceLine(d.Path, d.HostPath, d.Permissions))
	}
	for _, m := range ce.Mounts {
		e.mounts = append(e.mounts, mountLine(m.ContainerPath, m.HostPath, slices.Contains(m.Options, "ro")))
	}
	for _, h := range ce.Hooks {
		if h.HookName == "createContainer" {
			e.hooks = append(e.hooks, hookLine(h.Path, h.Args))
		}
	}
	return e
}

func hookLine(path string, args []string) string { return path + " " + strings.Join(args, " ") }

// fromSpec reads the edits gpumux-runtime wrote into a bundle's spec,
// leaving out what the bundle had before (and the runtime's own hooks, of
// other stages). A device's host
// path is found by its numbers, its permissions in the device cgroup rule
// that allows it.
func fromSpec(t *testing.T, spec specs.Spec, devIndex map[string]string) edits {
	t.Helper()
	env := envMap(spec.Process.Env)
	for k, v := range envMap(bundleEnv) {
		if env[k] == v {
			delete(env, k)
		} else {
			t.Errorf("gpumux-runtime changed the bundle's own %s=%s to %q", k, v, env[k])
		}
	}
	e := edits{env: normalizeEnv(env)}
	var rules []specs.LinuxDeviceCgroup
	if spec.Linux.Resources != nil {
		rules = spec.Linux.Resources.Devices
	}
	keptDev := false
	for _, d := range spec.Linux.Devices {
		if d.Path == bundleDev.Path {
			keptDev = d.Type == bundleDev.Type && d.Major == bundleDev.Major && d.Minor == bundleDev.Minor
			continue
		}
		num := fmt.Sprintf("%s %d:%d", d.Type, d.Major, d.Minor)
		host, ok := devIndex[num]
		if !ok {
			host = "<no device " + num + " on the node>"
		}
		perms := "<no cgroup rule>"
		for _, r := range rules {
			if r.Allow && r.Type == d.Type && r.Major != nil && *r.Major == d.Major && r.Minor != nil && *r.Minor == d.Minor {
				perms = r.Access
			}
		}
		e.devices = append(e.devices, deviceLine(d.Path, host, perms))
	}
	keptMount := false
	for _, m := range spec.Mounts {
		if m.Destination == bundleMount.Destination {
			keptMount = m.Source == bundleMount.Source && m.Type == bundleMount.Type
			continue
		}
		e.mounts = append(e.mounts, mountLine(m.Destination, m.Source, slices.Contains(m.Options, "ro")))
	}
	if spec.Hooks != nil {
		for _, h := range spec.Hooks.CreateContainer {
			e.hooks = append(e.hooks, hookLine(h.Path, h.Args))
		}
	}
	if !keptDev || !keptMount {
		t.Errorf("gpumux-runtime dropped what the bundle had (device %s kept: %v, mount %s kept: %v)", bundleDev.Path, keptDev, bundleMount.Destination, keptMount)
	}
	return e
}

// lines is e as sorted lines; a line that appears more than once says so.
func (e edits) lines() []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(e.env)) {
		out = append(out, "env    "+k+"="+e.env[k])
	}
	for _, group := range []struct {
		prefix string
		lines  []string
	}{{"device ", e.devices}, {"mount  ", e.mounts}, {"hook   ", e.hooks}} {
		counts := map[string]int{}
		for _, l := range group.lines {
			counts[l]++
		}
		for _, l := range slices.Sorted(maps.Keys(counts)) {
			if n := counts[l]; n > 1 {
				l += fmt.Sprintf(" (%d times)", n)
			}
			out = append(out, group.prefix+l)
		}
	}
	return out
}

// diff returns "" when a and b are the same edits, else both side by side
// as a unified listing: "-" only in a, "+" only in b.
func diff(a, b edits, aName, bName string) string {
	al, bl := a.lines(), b.lines()
	if slices.Equal(al, bl) {
		return ""
	}
	inA, inB := map[string]bool{}, map[string]bool{}
	for _, l := range al {
		inA[l] = true
	}
	for _, l := range bl {
		inB[l] = true
	}
	all := slices.Sorted(maps.Keys(inA))
	for _, l := range bl {
		if !inA[l] {
			all = append(all, l)
		}
	}
	slices.Sort(all)
	var s strings.Builder
	fmt.Fprintf(&s, "  --- %s\n  +++ %s\n", aName, bName)
	for _, l := range all {
		switch {
		case inA[l] && inB[l]:
			s.WriteString("      " + l + "\n")
		case inA[l]:
			s.WriteString("    - " + l + "\n")
		default:
			s.WriteString("    + " + l + "\n")
		}
	}
	return s.String()
}

// pick returns at most n of ids, spread over the list.
func pick(ids []string, n int) []string {
	if len(ids) <= n {
		return ids
	}
	out := make([]string, n)
	for i := range out {
		out[i] = ids[i*len(ids)/n]
	}
	return out
}

// ---------------------------------------------------------------------------
// 2. Health transitions.

func (c *nodeCase) testHealth(t *testing.T) {
	victim := c.ids[0]
	switch c.m.name {
	case "exclusive", "timeslice", "timeslice-unlimited":
		// A critical XID on the victim's GPU: every share of that GPU is
		// unhealthy, those of another GPU are not.
		idx, _ := c.locate(t, share.DeviceOf(victim))
		var sameGPU, otherGPU []string
		for _, id := range c.ids {
			if share.DeviceOf(id) == share.DeviceOf(victim) {
				sameGPU = append(sameGPU, id)
			} else {
				otherGPU = append(otherGPU, id)
			}
		}
		c.injectXid(t, func(n *sim.Node) error { return n.InjectXid(idx, 79) })
		devs := c.waitFor(t, victim+" unhealthy", func(d map[string]*device.Device) bool { return !d[victim].Healthy })
		c.checkUnhealthy(t, devs, sameGPU, "XID 79")
		c.checkHealthy(t, devs, otherGPU)
	case "mig":
		// A MIG XID on the victim's instance: its sibling on the same GPU
		// stays healthy.
		idx, inst := c.locate(t, victim)
		var sibling []string
		for _, id := range c.ids {
			if id == victim {
				continue
			}
			if i, _ := c.locate(t, id); i == idx {
				sibling = append(sibling, id)
			}
		}
		if len(sibling) == 0 {
			t.Fatalf("no sibling instance of %s on GPU %d among %v", victim, idx, c.ids)
		}
		c.injectXid(t, func(n *sim.Node) error { return n.InjectMigXid(idx, inst.GIID, inst.CIID, 94) })
		devs := c.waitFor(t, victim+" unhealthy", func(d map[string]*device.Device) bool { return !d[victim].Healthy })
		c.checkUnhealthy(t, devs, []string{victim}, "XID 94")
		c.checkHealthy(t, devs, slices.DeleteFunc(slices.Clone(c.ids), func(id string) bool { return id == victim }))
	case "mps", "mps-on-mig":
		// The victim's control daemon is killed, and may not start again:
		// its device's shares are unhealthy, the other device's are not.
		// (That the node restarts it is testMPSRestart's: the plugin would
		// take its restart backoff and period to show it.)
		dev := share.DeviceOf(victim)
		pidFile := filepath.Join(c.stateDir, "mps", dev, "pipe", "nvidia-cuda-mps-control.pid")
		oldPID := readPID(t, pidFile)
		var sameDev, otherDev []string
		for _, id := range c.ids {
			if share.DeviceOf(id) == dev {
				sameDev = append(sameDev, id)
			} else {
				otherDev = append(otherDev, id)
			}
		}
		unblock := c.blockDaemon(t, dev)
		defer unblock()
		if err := syscall.Kill(oldPID, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		devs := c.waitFor(t, victim+" unhealthy", func(d map[string]*device.Device) bool { return !d[victim].Healthy })
		c.checkUnhealthy(t, devs, sameDev, dev)
		c.checkHealthy(t, devs, otherDev)
		// While the daemon cannot start, the plugin fingerprints at its
		// period (1s), not as fast as Nomad reads.
		n := 0
		for deadline := time.After(spinWindow); n >= 0; {
			select {
			case <-c.fp:
				n++
			case <-deadline:
				if n > spinLimit {
					t.Errorf("while the MPS daemon of %s cannot start, the plugin sent %d fingerprints in %s (fingerprint_period 1s): %s", dev, n, spinWindow, spinWhy)
				}
				n = -1
			}
		}
	case "remote":
		// The server stops: after the next catalog every share of its GPUs
		// is unhealthy, the server named in the reason.
		c.srv.Stop()
		devs := c.waitFor(t, "remote shares unhealthy", func(d map[string]*device.Device) bool {
			for _, id := range c.ids {
				if d[id].Healthy {
					return false
				}
			}
			return true
		})
		c.checkUnhealthy(t, devs, c.ids, "remote server "+c.srv.Addr)
	default:
		t.Fatalf("mechanism %s: no health transition in this suite; add one", c.m.name)
	}
}

// locate finds a GPU's index, or a MIG instance and its GPU's index, on
// the node.
func (c *nodeCase) locate(t *testing.T, uuid string) (int, gpu.MIGInstance) {
	t.Helper()
	h, err := gpu.OpenSimulated(c.sim, c.stateDir)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	inv, err := h.Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range inv.GPUs {
		if g.UUID == uuid {
			return g.Index, gpu.MIGInstance{GIID: -1, CIID: -1}
		}
		for _, inst := range g.MIGInstances {
			if inst.UUID == uuid {
				return g.Index, inst
			}
		}
	}
	t.Fatalf("no GPU or MIG instance %s on %s", uuid, c.sim)
	return 0, gpu.MIGInstance{}
}

func (c *nodeCase) injectXid(t *testing.T, inject func(*sim.Node) error) {
	t.Helper()
	h, err := gpu.OpenSimulated(c.sim, c.stateDir)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := inject(h.Simulated()); err != nil {
		t.Fatal(err)
	}
}

// waitFor reads the plugin's fingerprints until the devices (by share ID)
// satisfy ok; the mechanism's shares are all in each.
func (c *nodeCase) waitFor(t *testing.T, what string, ok func(map[string]*device.Device) bool) map[string]*device.Device {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case r, open := <-c.fp:
			if !open {
				t.Fatalf("the fingerprint stream closed waiting for %s", what)
			}
			if r.Error != nil {
				t.Fatalf("fingerprint error waiting for %s: %v", what, r.Error)
			}
			devs := map[string]*device.Device{}
			for _, g := range r.Devices {
				for _, d := range g.Devices {
					devs[d.ID] = d
				}
			}
			missing := false
			for _, id := range c.ids {
				if devs[id] == nil {
					missing = true
					t.Errorf("share %s is no longer fingerprinted", id)
				}
			}
			if missing {
				t.FailNow()
			}
			if ok(devs) {
				return devs
			}
		case <-deadline:
			t.Fatalf("no fingerprint with %s within 30s", what)
		}
	}
}

// checkUnhealthy checks that the shares are unhealthy with a reason that
// contains want, and that Reserve refuses them, naming the share and the
// reason.
func (c *nodeCase) checkUnhealthy(t *testing.T, devs map[string]*device.Device, ids []string, want string) {
	t.Helper()
	if len(ids) == 0 {
		t.Fatal("no shares to check")
	}
	for _, id := range ids {
		d := devs[id]
		if d.Healthy || d.HealthDesc == "" || !strings.Contains(d.HealthDesc, want) {
			t.Errorf("share %s: healthy %v, reason %q; want unhealthy with a reason naming %q", id, d.Healthy, d.HealthDesc, want)
		}
		_, err := c.plugin.Reserve([]string{id})
		if err == nil || !strings.Contains(err.Error(), id) || !strings.Contains(err.Error(), want) {
			t.Errorf("Reserve of unhealthy share %s: %v; want an error naming it and %q", id, err, want)
		}
	}
}

// checkHealthy checks that the shares stay healthy and can be reserved.
func (c *nodeCase) checkHealthy(t *testing.T, devs map[string]*device.Device, ids []string) {
	t.Helper()
	if len(ids) == 0 {
		t.Fatal("no shares to check")
	}
	for _, id := range ids {
		if d := devs[id]; !d.Healthy {
			t.Errorf("share %s became unhealthy too: %s", id, d.HealthDesc)
		}
		if _, err := c.plugin.Reserve([]string{id}); err != nil {
			t.Errorf("Reserve of healthy share %s: %v", id, err)
		}
	}
}

// While an MPS daemon cannot start, a node agent may build at most
// spinLimit catalogs in spinWindow (its period is 1s or more); spinWhy is
// what going past it has meant.
const (
	spinWindow = 500 * time.Millisecond
	spinLimit  = 5
	spinWhy    = "the node spins: each failed start changes the daemon's reason (attempt number, next attempt), which ticks the mps provider's Changed; " +
		"node.Watch rebuilds the catalog on it, and Refresh calls mps Reconcile, which must not retry the start before the restart backoff " +
		"(mps.Manager.ensure; the first find of this suite)"
)

// mpsWrapper installs the stand-in MPS control daemon in dir, behind a
// wrapper that refuses to start a daemon (-d) for the pipe directory named
// in dir/block (see blockDaemon), and returns the wrapper's path. Both are
// named mpsctl, as the node checks a daemon's process by the binary's name.
func mpsWrapper(t *testing.T, dir string) string {
	t.Helper()
	real := filepath.Join(dir, "bin", "mpsctl")
	if err := os.MkdirAll(filepath.Dir(real), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(fakeMPS(t))
	if err != nil {
		t.Fatal(err)
	}
	writeExecutable(t, real, b)
	wrapper := filepath.Join(dir, "mpsctl")
	script := fmt.Sprintf(`#!/bin/sh
if [ "$1" = "-d" ] && [ -f %[1]q ] && [ "$CUDA_MPS_PIPE_DIRECTORY" = "$(cat %[1]q)" ]; then
	echo "conformance test: no daemon may start in $CUDA_MPS_PIPE_DIRECTORY" >&2
	exit 1
fi
exec %[2]q "$@"
`, filepath.Join(dir, "block"), real)
	writeExecutable(t, wrapper, []byte(script))
	return wrapper
}

// blockDaemon keeps the MPS daemon of device uuid from starting until the
// returned unblock (also run at the end of the test).
func (c *nodeCase) blockDaemon(t *testing.T, uuid string) (unblock func()) {
	t.Helper()
	block := filepath.Join(c.dir, "block")
	if err := os.WriteFile(block, []byte(filepath.Join(c.stateDir, "mps", uuid, "pipe")), 0o644); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	unblock = func() {
		once.Do(func() {
			if err := os.Remove(block); err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(unblock)
	return unblock
}

// testMPSRestart kills a share's MPS daemon under a node agent with a short
// health interval (200ms; the plugin's is 10s) and a Watch period too long
// to matter: the node's health loop sees the daemon gone, and restarts it.
func (c *nodeCase) testMPSRestart(t *testing.T) {
	c.stopPlugin(t)
	victim := c.ids[0]
	dev := share.DeviceOf(victim)
	n, err := node.Open(c.config(t), node.WithHealthInterval(200*time.Millisecond), node.WithMPSControl(c.mpsBin))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := n.Start(ctx, "gpumux agent"); err != nil {
		t.Fatal(err)
	}
	updates := n.Watch(ctx, time.Hour)
	var first node.Update
	select {
	case first = <-updates:
	case <-time.After(30 * time.Second):
		t.Fatal("no catalog from Watch within 30s")
	}
	if first.Err != nil {
		t.Fatal(first.Err)
	}
	var passes atomic.Int64
	watching := make(chan struct{})
	go func() {
		defer close(watching)
		for range updates {
			passes.Add(1)
		}
	}()
	t.Cleanup(func() { cancel(); <-watching })
	shares, err := first.Catalog.Lookup(victim)
	if err != nil {
		t.Fatal(err)
	}
	s := shares[0]
	if ok, why := n.Health(s); !ok {
		t.Fatalf("share %s unhealthy after the node adopted its daemon: %s", victim, why)
	}
	pidFile := filepath.Join(c.stateDir, "mps", dev, "pipe", "nvidia-cuda-mps-control.pid")
	oldPID := readPID(t, pidFile)

	unblock := c.blockDaemon(t, dev)
	if err := syscall.Kill(oldPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	why := waitHealth(t, n, s, false)
	if !strings.Contains(why, dev) {
		t.Errorf("share %s unhealthy with reason %q, which does not name its device %s", victim, why, dev)
	}
	// While the daemon cannot start, the node should not spin.
	before := passes.Load()
	time.Sleep(spinWindow)
	if spun := passes.Load() - before; spun > spinLimit {
		t.Errorf("while the MPS daemon of %s cannot start, node.Watch (period 1h) built %d catalogs in %s: %s", dev, spun, spinWindow, spinWhy)
	}
	if ok, _ := n.Health(s); ok {
		t.Errorf("share %s healthy while its daemon cannot run", victim)
	}

	unblock()
	waitHealth(t, n, s, true)
	if newPID := readPID(t, pidFile); newPID == oldPID {
		t.Errorf("healthy again with the killed daemon's pid %d", oldPID)
	}
}

// waitHealth polls n.Health(s) until it is want, and returns the reason.
func waitHealth(t *testing.T, n *node.Node, s share.Share, want bool) string {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		ok, why := n.Health(s)
		if ok == want {
			return why
		}
		if time.Now().After(deadline) {
			t.Fatalf("share %s: healthy %v after 30s (%s), want %v", s.ID, ok, why, want)
		}
	}
}

// ---------------------------------------------------------------------------
// 3. Start and stop are idempotent.

func (c *nodeCase) testLifecycle(t *testing.T) {
	ctx := context.Background()
	open := func() *node.Node {
		t.Helper()
		n, err := node.Open(c.config(t))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// The plugin runs the node: no second agent.
	other := open()
	err := other.Start(ctx, "gpumux agent")
	wantHolder(t, err, plugin.Name)
	if err := other.Close(); err != nil {
		t.Errorf("Close of a node whose Start failed: %v", err)
	}
	c.stopPlugin(t)

	a, b := open(), open()
	closed := map[*node.Node]bool{}
	closeNode := func(n *node.Node) error {
		if closed[n] {
			return nil
		}
		closed[n] = true
		return n.Close()
	}
	defer closeNode(a)
	defer closeNode(b)
	for i := 1; i <= 2; i++ {
		if err := a.Start(ctx, "gpumux agent"); err != nil {
			t.Fatalf("Start %d: %v", i, err)
		}
	}
	wantHolder(t, b.Start(ctx, "gpumux agent (second)"), "gpumux agent")
	for i := 1; i <= 2; i++ {
		if err := a.Stop(ctx); err != nil {
			t.Errorf("Stop %d: %v", i, err)
		}
	}
	if err := b.Start(ctx, "gpumux agent (second)"); err != nil {
		t.Fatalf("Start once the first agent stopped: %v", err)
	}
	if err := b.Stop(ctx); err != nil {
		t.Errorf("Stop of the second agent: %v", err)
	}
	if err := a.Start(ctx, "gpumux agent"); err != nil {
		t.Fatalf("Start after Stop: %v", err)
	}
	wantHolder(t, b.Start(ctx, "gpumux agent (second)"), "gpumux agent")
	cat, err := a.Refresh(ctx)
	if err != nil {
		t.Fatalf("Refresh after a restart: %v", err)
	}
	if n := countShares(cat, c.m.mech); c.m.mech != share.Remote && n != c.m.shares {
		// (A new node knows no remote GPU of a server that is down.)
		t.Errorf("after a restart the node offers %d %s shares, want %d", n, c.m.mech, c.m.shares)
	}
	if err := a.Stop(ctx); err != nil {
		t.Errorf("Stop: %v", err)
	}
	if err := closeNode(a); err != nil {
		t.Errorf("Close after Stop: %v", err)
	}
	if err := b.Start(ctx, "gpumux agent (second)"); err != nil {
		t.Errorf("Start once the first agent closed: %v", err)
	}
	if err := closeNode(b); err != nil {
		t.Errorf("Close of a started node: %v", err)
	}

	c.testProviderLifecycles(t)
}

// wantHolder checks that err is ErrAgentRunning naming holder as the
// lock's holder (the message names both kinds of agent in its advice, so
// the holder is matched where the lock file's line is quoted).
func wantHolder(t *testing.T, err error, holder string) {
	t.Helper()
	if !errors.Is(err, node.ErrAgentRunning) {
		t.Errorf("a second agent's Start: %v, want node.ErrAgentRunning", err)
		return
	}
	if want := ": " + holder + " (pid " + strconv.Itoa(os.Getpid()) + ","; !strings.Contains(err.Error(), want) && !strings.Contains(err.Error(), "("+holder+") (pid "+strconv.Itoa(os.Getpid())+",") {
		t.Errorf("a second agent's Start: %q does not name the holder %q", err, holder)
	}
}

func countShares(c *share.Catalog, m share.Mechanism) int {
	n := 0
	for _, s := range c.Shares() {
		if s.Mechanism == m {
			n++
		}
	}
	return n
}

// allProviders is every mechanism's provider on the node, as node.Open
// builds them.
func (c *nodeCase) allProviders(t *testing.T, host *gpu.Host, cfg *nodeconfig.Config) []node.Provider {
	t.Helper()
	bin := c.mpsBin
	if bin == "" {
		bin = nodeconfig.SimulatedMPSControl
	}
	list := []node.Provider{
		exclusive.New(),
		mig.NewProvider(host, func(string, ...any) {}, mig.WithCheckpoint(mig.CheckpointDir(cfg.StateDir))),
		mps.NewProvider(mps.NewManager(cfg.StateDir, mps.WithControlBinary(bin))),
		timeslice.New(cfg.StateDir, cfg.LimiterDir),
	}
	if cfg.Remote != nil {
		list = append(list, remote.NewProvider(cfg.Remote, "conformance", hclog.NewNullLogger()))
	}
	return list
}

// testProviderLifecycles starts and stops every provider with something to
// run twice, directly: a second Start and Stop change nothing.
func (c *nodeCase) testProviderLifecycles(t *testing.T) {
	ctx := context.Background()
	cfg := c.config(t)
	host, err := gpu.OpenSimulated(c.sim, c.stateDir)
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	inv, err := host.Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	as, err := cfg.Layout().Assign(inv)
	if err != nil {
		t.Fatal(err)
	}
	instances := func() []string {
		inv, err := host.Inventory(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, g := range inv.GPUs {
			for _, i := range g.MIGInstances {
				out = append(out, fmt.Sprintf("GPU %d %s %s", g.Index, i.Profile, i.UUID))
			}
		}
		return out
	}
	before := instances()
	lifecycles := 0
	for _, p := range c.allProviders(t, host, cfg) {
		lc, ok := p.(node.Lifecycle)
		if !ok {
			continue
		}
		lifecycles++
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if err := lc.Stop(sctx); err != nil {
			t.Errorf("%s: Stop before Start: %v", p.Mechanism(), err)
		}
		for i := 1; i <= 2; i++ {
			if err := lc.Start(sctx, inv, as); err != nil {
				t.Errorf("%s: Start %d: %v", p.Mechanism(), i, err)
			}
		}
		for i := 1; i <= 2; i++ {
			if err := lc.Stop(sctx); err != nil {
				t.Errorf("%s: Stop %d: %v", p.Mechanism(), i, err)
			}
		}
		cancel()
	}
	if lifecycles == 0 {
		t.Error("no provider implements node.Lifecycle: mig and mps should")
	}
	if after := instances(); !slices.Equal(before, after) {
		t.Errorf("starting the providers again changed the MIG instances:\nbefore %v\nafter  %v", before, after)
	}
}

// ---------------------------------------------------------------------------
// Helpers.

// fakeMPS returns gpumux's stand-in MPS control daemon, built once.
func fakeMPS(t *testing.T) string { return testbin.FakeMPS(t) }

func TestMain(m *testing.M) { os.Exit(testbin.Main(m)) }

// writeExecutable writes a program. It holds syscall.ForkLock while the
// file is open for writing, so that no child forked meanwhile by a parallel
// test inherits the descriptor, which would make exec of the program fail
// with ETXTBSY ("text file busy") until that child execs.
func writeExecutable(t *testing.T, path string, b []byte) {
	t.Helper()
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
}

// stubLimiter writes a stand-in for the limiter's libcuda.so.1 in
// dir/limiter and returns that limiter_dir.
func stubLimiter(t *testing.T, dir string) string {
	t.Helper()
	limiter := filepath.Join(dir, "limiter")
	if err := os.MkdirAll(limiter, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(limiter, timeslice.Lib), []byte("not a library: a test's stand-in\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return limiter
}

// killDaemons ends every stand-in MPS daemon under stateDir: node agents
// leave them running on purpose, a test must not.
func killDaemons(stateDir string) {
	pids, _ := filepath.Glob(filepath.Join(stateDir, "mps", "*", "pipe", "nvidia-cuda-mps-control.pid"))
	for _, f := range pids {
		if b, err := os.ReadFile(f); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
}

// readPID waits for a control daemon's pid file and returns the pid.
func readPID(t *testing.T, path string) int {
	t.Helper()
	for i := 0; i < 200; i++ {
		if b, err := os.ReadFile(path); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
				return pid
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no pid in %s", path)
	return 0
}

func groupNames(groups []*device.DeviceGroup) []string {
	var out []string
	for _, g := range groups {
		out = append(out, fmt.Sprintf("%s (%d)", g.Name, len(g.Devices)))
	}
	return out
}
