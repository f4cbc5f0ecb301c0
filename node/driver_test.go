package node_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/gpumux/gpumux/gpu/driverfiles"
	"github.com/gpumux/gpumux/gpu/sim"
	"github.com/gpumux/gpumux/internal/ldcache"
	"github.com/gpumux/gpumux/internal/ociruntime"
	"github.com/gpumux/gpumux/node"
	"github.com/gpumux/gpumux/nodeconfig"
	"github.com/gpumux/gpumux/share"
	"github.com/gpumux/gpumux/timeslice"
)

// driverMounts are the mounts of the node's driver files among mounts.
func driverMounts(n *node.Node, mounts []share.Mount) []share.Mount {
	return slices.DeleteFunc(slices.Clone(mounts), func(m share.Mount) bool { return !underDriver(n, m) })
}

// withoutDriver are the mounts other than the node's driver files and
// the scratch tmpfs (TestEditsScratch).
func withoutDriver(n *node.Node, mounts []share.Mount) []share.Mount {
	return slices.DeleteFunc(slices.Clone(mounts), func(m share.Mount) bool { return underDriver(n, m) || m.Scratch })
}

func underDriver(n *node.Node, m share.Mount) bool {
	return strings.HasPrefix(m.HostPath, n.DriverRoot()+"/") || strings.HasPrefix(m.HostPath, n.StagedDriverDir()+"/")
}

// TestEditsDriverFiles: the container of every local mechanism's share
// gets the simulated driver's files read-only: by default the libraries
// and programs in one bind of the staged tree at /usr/local/nvidia (hard
// links of the driver's files, with their SONAME and, for libcuda,
// bare-name links, which the simulated driver has) and the hook that
// links the programs onto PATH and puts the library directory into its
// linker cache; with WithDriverAtHostPaths each library at its path under
// the driver root and at its links, each program at its path, and the
// hook on the host's library directory. The socket is at its path either
// way. A limited replica's limiter is pointed at the real libraries.
func TestEditsDriverFiles(t *testing.T) {
	lib := "/" + sim.LibDir()
	for _, layout := range []struct {
		name   string
		opts   []node.Option
		libDir string // where the container finds the libraries
	}{
		{"staged tree", nil, driverfiles.ContainerLibDir},
		{"host paths", []node.Option{node.WithDriverAtHostPaths()}, lib},
	} {
		t.Run(layout.name, func(t *testing.T) {
			testEditsDriverFiles(t, layout.libDir, layout.opts...)
		})
	}
}

func testEditsDriverFiles(t *testing.T, libDir string, opts ...node.Option) {
	n, err := node.Open(&nodeconfig.Config{Simulate: "dgxh200", StateDir: t.TempDir(), LimiterDir: stubLimiter(t), GPUs: []share.GPURule{
		{Match: "2", Mechanism: share.TimeSlice, Replicas: 2},
		{Match: "3", Mechanism: share.TimeSlice, Replicas: 2, Limit: share.LimitOff},
		{Match: "4", Mechanism: share.MPS, Shares: 2},
	}}, append([]node.Option{node.WithOpen(openDGXHost), node.WithHookBinary("/opt/gpumux/bin/gpumux-runtime-hook")}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	c, inv := dgxCatalog(t, n)
	root := filepath.Join(n.Config().StateDir, "sim", "dgxh200", "driver")
	if n.DriverRoot() != root {
		t.Fatalf("driver root %s, want the simulated driver %s", n.DriverRoot(), root)
	}
	lib := "/" + sim.LibDir()
	at := func(file string) string { return filepath.Join(root, lib, file) }
	cuda, nvml, nvvm := at("libcuda.so.580.159.04"), at("libnvidia-ml.so.580.159.04"), at("libnvidia-nvvm.so.580.159.04")
	// The container path of each library name → the host file it must be
	// (among the other libraries of the simulated driver).
	libs := map[string]string{
		"libcuda.so.580.159.04":      cuda,
		"libcuda.so.1":               cuda,
		"libcuda.so":                 cuda,
		"libnvidia-ml.so.580.159.04": nvml,
		"libnvidia-ml.so.1":          nvml,
		"libnvidia-nvvm.so.4":        nvvm,
	}
	smi := filepath.Join(root, "usr/bin/nvidia-smi")
	// Container path → host path of the other files.
	want := map[string]string{
		"/run/nvidia-persistenced/socket": filepath.Join(root, "run/nvidia-persistenced/socket"),
	}
	staged := libDir == driverfiles.ContainerLibDir
	hookArgs := []string{"gpumux-runtime-hook", "hook", ociruntime.HookUpdateLdcache}
	if staged {
		// The programs are the tree's, linked onto PATH by the hook.
		for _, p := range []string{"nvidia-smi", "nvidia-debugdump"} {
			hookArgs = append(hookArgs, ldcache.LinkFlag, "/usr/bin/"+p+"="+driverfiles.ContainerBinDir+"/"+p)
		}
	} else {
		for name, host := range libs {
			want[filepath.Join(lib, name)] = host
		}
		want["/usr/bin/nvidia-smi"] = smi
	}
	wantHook := share.Hook{Stage: share.HookCreateContainer, Path: "/opt/gpumux/bin/gpumux-runtime-hook", Args: append(hookArgs, libDir)}
	g := inv.GPUs
	for _, tc := range []struct {
		name    string
		id      string
		limited bool
	}{
		{"exclusive", g[0].UUID, false},
		{"mig", bigInstance(t, inv).UUID, false},
		{"mps", g[4].UUID + "/mps/1", false},
		{"limited replica", g[2].UUID + "/timeslice/0", true},
		{"unlimited replica", g[3].UUID + "/timeslice/1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := editsOf(t, n, c, tc.id)
			got := map[string]string{}
			for _, m := range driverMounts(n, e.Mounts) {
				if !m.ReadOnly {
					t.Errorf("driver file %s is mounted read-write", m.ContainerPath)
				}
				if _, dup := got[m.ContainerPath]; dup {
					t.Errorf("%s mounted twice", m.ContainerPath)
				}
				got[m.ContainerPath] = m.HostPath
			}
			for container, host := range want {
				if got[container] != host {
					t.Errorf("%s <- %q, want %s", container, got[container], host)
				}
			}
			if staged {
				tree := got[driverfiles.ContainerDir]
				if !strings.HasPrefix(tree, n.StagedDriverDir()+"/") || len(got) != len(want)+1 {
					t.Fatalf("driver mounts %v, want the staged tree under %s at %s and %d others", got, n.StagedDriverDir(), driverfiles.ContainerDir, len(want))
				}
				for name, host := range libs {
					if !sameFile(t, filepath.Join(tree, "lib64", name), host) {
						t.Errorf("the tree's lib64/%s is not %s", name, host)
					}
				}
				if !sameFile(t, filepath.Join(tree, "bin", "nvidia-smi"), smi) {
					t.Errorf("the tree's bin/nvidia-smi is not the driver's")
				}
				// The simulated driver, like many, has no bare libnvidia-ml.so.
				if _, err := os.Lstat(filepath.Join(tree, "lib64", "libnvidia-ml.so")); err == nil {
					t.Errorf("the tree has a libnvidia-ml.so, which the host does not have")
				}
			} else if host, ok := got[lib+"/libnvidia-ml.so"]; ok {
				t.Errorf("%s/libnvidia-ml.so <- %s, which the host does not have", lib, host)
			}
			if len(e.Hooks) != 1 || !slices.Equal(e.Hooks[0].Args, wantHook.Args) || e.Hooks[0].Path != wantHook.Path || e.Hooks[0].Stage != wantHook.Stage {
				t.Errorf("hooks %+v, want %+v", e.Hooks, wantHook)
			}
			if e.DriverLibraries["libcuda.so.1"] != libDir+"/libcuda.so.1" || e.DriverLibraries["libnvidia-nvvm.so.4"] != libDir+"/libnvidia-nvvm.so.4" {
				t.Errorf("driver libraries %v", e.DriverLibraries)
			}
			if got := e.Env[timeslice.EnvCUDA]; (got == libDir+"/libcuda.so.1") != tc.limited || (tc.limited && e.Env[timeslice.EnvNVML] != libDir+"/libnvidia-ml.so.1") {
				t.Errorf("limiter's real libraries %s=%q %s=%q; want them only for a limited replica", timeslice.EnvCUDA, got, timeslice.EnvNVML, e.Env[timeslice.EnvNVML])
			}
			// (An MPS share is unhealthy here for want of its daemon.)
			if s, err := c.Lookup(tc.id); err != nil {
				t.Fatal(err)
			} else if ok, why := n.Health(s[0]); !ok && strings.Contains(why, "driver files") {
				t.Errorf("unhealthy: %s", why)
			}
		})
	}
	// The CDI form carries the hook, as a createContainer hook.
	shares, _ := c.Lookup(g[0].UUID)
	e, _ := n.Edits(shares)
	ce := node.CDIEdits(e)
	if len(ce.Hooks) != 1 || ce.Hooks[0].HookName != "createContainer" || ce.Hooks[0].Path != wantHook.Path || !slices.Equal(ce.Hooks[0].Args, wantHook.Args) {
		t.Errorf("CDI hooks %+v", ce.Hooks)
	}
}

// sameFile says whether path is host's file, through links.
func sameFile(t *testing.T, path, host string) bool {
	t.Helper()
	a, err := os.Stat(path)
	if err != nil {
		t.Error(err)
		return false
	}
	b, err := os.Stat(host)
	if err != nil {
		t.Error(err)
		return false
	}
	return os.SameFile(a, b)
}

// TestDriverRoot: driver_root points the node at another root; without
// libcuda there, local shares are unhealthy and their edits fail, saying
// what is missing where; remote shares are not concerned (TestEditsRemote).
func TestDriverRoot(t *testing.T) {
	empty := t.TempDir()
	cfg := &nodeconfig.Config{Simulate: "dgxh200", StateDir: t.TempDir(), DriverRoot: empty}
	n := openDGXConfig(t, cfg)
	if n.DriverRoot() != empty {
		t.Fatalf("driver root %s, want driver_root %s", n.DriverRoot(), empty)
	}
	c, inv := dgxCatalog(t, n)
	shares, err := c.Lookup(inv.GPUs[0].UUID)
	if err != nil {
		t.Fatal(err)
	}
	ok, why := n.Health(shares[0])
	if ok || !strings.Contains(why, "libcuda.so.580.159.04") || !strings.Contains(why, empty) {
		t.Errorf("health without libcuda: %v, %q; want unhealthy, naming the library and the root", ok, why)
	}
	if _, err := n.Edits(shares); !errors.Is(err, driverfiles.ErrMissing) || !strings.Contains(err.Error(), inv.GPUs[0].UUID) {
		t.Errorf("edits without libcuda: %v, want ErrMissing naming the share", err)
	}

	// The driver installed there later (the simulated one, behind a
	// link): found without a restart.
	other, err := sim.Open("dgxh200", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := other.EnsureDriverFiles(); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(os.Remove(empty), os.Symlink(other.DriverRoot(), empty)); err != nil {
		t.Fatal(err)
	}
	if ok, why := n.Health(shares[0]); !ok {
		t.Errorf("health with the driver under driver_root: %s", why)
	}
	e, err := n.Edits(shares)
	if err != nil {
		t.Fatal(err)
	}
	if m := driverMounts(n, e.Mounts); len(m) == 0 || m[0].ContainerPath != driverfiles.ContainerDir ||
		!sameFile(t, filepath.Join(m[0].HostPath, "lib64", "libcuda.so.1"), filepath.Join(empty, sim.LibDir(), "libcuda.so.580.159.04")) {
		t.Errorf("driver mounts %+v, want the tree of libcuda from %s first", m, empty)
	}
}

// TestStartLogsDriverFiles: a node agent says at start what containers get
// of the driver, or why they cannot get it.
func TestStartLogsDriverFiles(t *testing.T) {
	for _, tc := range []struct {
		name       string
		driverRoot string
		want       string
	}{
		{"found", "", `driver files for containers: version=580.159.04`},
		{"missing", "<empty>", "containers of this node's shares cannot get the driver's files"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log strings.Builder
			root := tc.driverRoot
			if root == "<empty>" {
				root = t.TempDir()
			}
			cfg := &nodeconfig.Config{Simulate: "dgxh200", StateDir: t.TempDir(), DriverRoot: root}
			n, err := node.Open(cfg, node.WithOpen(openDGXHost), node.WithLogger(hclog.New(&hclog.LoggerOptions{Output: &log, Level: hclog.Info})))
			if err != nil {
				t.Fatal(err)
			}
			defer n.Close()
			if err := n.Start(context.Background(), "a test"); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(log.String(), tc.want) {
				t.Errorf("the log does not say %q:\n%s", tc.want, log.String())
			}
		})
	}
}

// TestStagedTreeDamaged: a staged tree damaged since it was built (a name
// removed) makes the node's local shares unhealthy and their edits fail,
// naming the tree and what it lacks, for a process that opens the node
// afterwards; nothing is rebuilt behind the operator's back.
func TestStagedTreeDamaged(t *testing.T) {
	cfg := &nodeconfig.Config{Simulate: "dgxh200", StateDir: t.TempDir()}
	n := openDGXConfig(t, cfg)
	c, inv := dgxCatalog(t, n)
	shares, err := c.Lookup(inv.GPUs[0].UUID)
	if err != nil {
		t.Fatal(err)
	}
	e, err := n.Edits(shares)
	if err != nil {
		t.Fatal(err)
	}
	tree := driverMounts(n, e.Mounts)[0].HostPath
	if err := os.Remove(filepath.Join(tree, "lib64", "libcuda.so.1")); err != nil {
		t.Fatal(err)
	}
	later := openDGXConfig(t, cfg) // another process: gpumux-runtime-core's next create
	if ok, why := later.Health(shares[0]); ok || !strings.Contains(why, tree) || !strings.Contains(why, "lib64/libcuda.so.1 missing") {
		t.Errorf("health with a damaged tree: %v, %q; want unhealthy, naming the tree and lib64/libcuda.so.1", ok, why)
	}
	if _, err := later.Edits(shares); err == nil || !strings.Contains(err.Error(), "remove the directory") {
		t.Errorf("edits with a damaged tree: %v, want the error saying what to do", err)
	}
	if _, err := os.Lstat(filepath.Join(tree, "lib64", "libcuda.so.1")); err == nil {
		t.Error("the damaged tree was repaired silently")
	}
}

// TestStartPrunesDriverTrees: a node agent's start stages the driver's
// tree and removes the trees of drivers before that no container mounts,
// saying so.
func TestStartPrunesDriverTrees(t *testing.T) {
	var log strings.Builder
	cfg := &nodeconfig.Config{Simulate: "dgxh200", StateDir: t.TempDir()}
	n, err := node.Open(cfg, node.WithOpen(openDGXHost), node.WithLogger(hclog.New(&hclog.LoggerOptions{Output: &log, Level: hclog.Info})))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	old := filepath.Join(n.StagedDriverDir(), "570.86.15-0123456789abcdef")
	if err := os.MkdirAll(filepath.Join(old, "lib64"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background(), "a test"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(old); err == nil {
		t.Errorf("%s, a tree nothing mounts, is still there", old)
	}
	entries, _ := os.ReadDir(n.StagedDriverDir())
	if len(entries) != 1 || !strings.HasPrefix(entries[0].Name(), "580.159.04-") {
		t.Errorf("%s holds %v, want the current driver's tree only", n.StagedDriverDir(), entries)
	}
	if !strings.Contains(log.String(), `removed=["`+old+`"]`) {
		t.Errorf("the log does not say %s was removed:\n%s", old, log.String())
	}
}
