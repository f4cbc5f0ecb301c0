package driverfiles_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpumux/gpumux/gpu/driverfiles"
	"github.com/gpumux/gpumux/gpu/sim"
)

// stagedNames are what the simulated driver's tree must hold: name →
// the host file (under the driver root) it is, or "-> target" for a link.
func stagedNames(root string) map[string]string {
	lib := filepath.Join(root, sim.LibDir())
	return map[string]string{
		"lib64/libcuda.so." + version:                  filepath.Join(lib, "libcuda.so."+version),
		"lib64/libcuda.so.1":                           "-> libcuda.so." + version,
		"lib64/libcuda.so":                             "-> libcuda.so." + version,
		"lib64/libnvidia-ml.so." + version:             filepath.Join(lib, "libnvidia-ml.so."+version),
		"lib64/libnvidia-ml.so.1":                      "-> libnvidia-ml.so." + version,
		"lib64/libnvidia-nvvm.so.4":                    "-> libnvidia-nvvm.so." + version,
		"lib64/libnvidia-gpucomp.so." + version:        filepath.Join(lib, "libnvidia-gpucomp.so."+version),
		"lib64/libnvidia-ptxjitcompiler.so." + version: filepath.Join(lib, "libnvidia-ptxjitcompiler.so."+version),
		"bin/nvidia-smi":                               filepath.Join(root, "usr/bin/nvidia-smi"),
		"bin/nvidia-debugdump":                         filepath.Join(root, "usr/bin/nvidia-debugdump"),
	}
}

// checkTree checks that tree holds the simulated driver's files (hard
// links, or copies with the same bytes and mode when copied) and their
// relative links, in directories anyone may read and only root write.
func checkTree(t *testing.T, tree, root string, copied bool) {
	t.Helper()
	for _, dir := range []string{"", "lib64", "bin"} {
		fi, err := os.Stat(filepath.Join(tree, dir))
		if err != nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("%s/%s: %v, mode %v; want a directory 0755", tree, dir, err, fi.Mode())
		}
	}
	for name, want := range stagedNames(root) {
		path := filepath.Join(tree, name)
		if target, ok := strings.CutPrefix(want, "-> "); ok {
			if got, err := os.Readlink(path); err != nil || got != target {
				t.Errorf("%s -> %q (%v), want -> %s", name, got, err, target)
			}
			continue
		}
		a, err := os.Lstat(path)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		b, err := os.Stat(want)
		if err != nil {
			t.Fatal(err)
		}
		if !copied && !os.SameFile(a, b) {
			t.Errorf("%s is not a link of %s", name, want)
		}
		x, _ := os.ReadFile(path)
		y, _ := os.ReadFile(want)
		if !a.Mode().IsRegular() || a.Mode() != b.Mode() || string(x) != string(y) {
			t.Errorf("%s: mode %v, %d bytes; want %s's %v, %d bytes", name, a.Mode(), len(x), want, b.Mode(), len(y))
		}
	}
}

func TestStage(t *testing.T) {
	root := simulatedDriver(t)
	f, err := driverfiles.Find(root, version)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "driver")
	st, err := f.Stage(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Built || st.Copied != 0 || filepath.Dir(st.Path) != dir || !strings.HasPrefix(filepath.Base(st.Path), version+"-") {
		t.Fatalf("staged %+v, want a tree built in %s, named for driver %s, nothing copied", st, dir, version)
	}
	checkTree(t, st.Path, root, false)

	// Again: the same tree, not built again.
	if again, err := f.Stage(dir); err != nil || again.Path != st.Path || again.Built {
		t.Errorf("staging again: %+v, %v; want %s as it was", again, err, st.Path)
	}

	// A file of the driver changes (an upgrade of its package in place):
	// a new tree, the old one left to the containers that have it.
	cuda := filepath.Join(root, sim.LibDir(), "libcuda.so."+version)
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(cuda, later, later); err != nil {
		t.Fatal(err)
	}
	f2, err := driverfiles.Find(root, version)
	if err != nil {
		t.Fatal(err)
	}
	changed, err := f2.Stage(dir)
	if err != nil || changed.Path == st.Path || !changed.Built {
		t.Errorf("staging a changed driver: %+v, %v; want a new tree beside %s", changed, err, st.Path)
	}
	if _, err := os.Stat(st.Path); err != nil {
		t.Errorf("the first tree is gone: %v", err)
	}

	// A damaged tree is refused, naming what it lacks; nothing is rebuilt
	// behind the operator's back.
	if err := os.Remove(filepath.Join(changed.Path, "lib64", "libcuda.so.1")); err != nil {
		t.Fatal(err)
	}
	if _, err := f2.Stage(dir); err == nil || !strings.Contains(err.Error(), "lib64/libcuda.so.1 missing") || !strings.Contains(err.Error(), changed.Path) {
		t.Errorf("staging over a damaged tree: %v; want it refused, naming lib64/libcuda.so.1 and the tree", err)
	}
	if _, err := os.Lstat(filepath.Join(changed.Path, "lib64", "libcuda.so.1")); err == nil {
		t.Error("the damaged tree was repaired silently")
	}
}

// TestStageConcurrently: processes that stage at once (containers created
// together on a fresh node) end with one whole tree and no leftovers; a
// staging left by a process that died long ago is cleaned, a recent one
// (another's, under way) is not.
func TestStageConcurrently(t *testing.T) {
	root := simulatedDriver(t)
	f, err := driverfiles.Find(root, version)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "driver")
	if err := os.MkdirAll(filepath.Join(dir, ".staging-dead", "lib64"), 0o755); err != nil {
		t.Fatal(err)
	}
	long := time.Now().Add(-time.Hour)
	if err := os.Chtimes(filepath.Join(dir, ".staging-dead"), long, long); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, ".staging-busy"), 0o755); err != nil {
		t.Fatal(err)
	}
	const n = 8
	paths := make([]string, n)
	built := make([]bool, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := f.Stage(dir)
			if err != nil {
				t.Error(err)
			}
			paths[i], built[i] = st.Path, st.Built
		}()
	}
	wg.Wait()
	nbuilt := 0
	for i := range n {
		if paths[i] != paths[0] {
			t.Errorf("stagings gave %s and %s", paths[0], paths[i])
		}
		if built[i] {
			nbuilt++
		}
	}
	if nbuilt == 0 {
		t.Error("no staging says it built the tree")
	}
	checkTree(t, paths[0], root, false)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{".staging-busy", filepath.Base(paths[0])}; strings.Join(names, " ") != strings.Join(want, " ") {
		t.Errorf("%s holds %v, want %v", dir, names, want)
	}
}

// TestStageCopiesAcrossFileSystems: where the driver's files are on
// another file system than the state directory (a driver in a container's
// root, a tmpfs), they are copied.
func TestStageCopiesAcrossFileSystems(t *testing.T) {
	shm, err := os.MkdirTemp("/dev/shm", "gpumux-driver-")
	if err != nil {
		t.Skipf("no /dev/shm to put a driver on another file system: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(shm) })
	dir := t.TempDir()
	var a, b syscall.Stat_t
	if syscall.Stat(shm, &a) != nil || syscall.Stat(dir, &b) != nil || a.Dev == b.Dev {
		t.Skipf("/dev/shm and %s are one file system here", dir)
	}
	n, err := sim.Open("dgxh200", shm)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.EnsureDriverFiles(); err != nil {
		t.Fatal(err)
	}
	f, err := driverfiles.Find(n.DriverRoot(), version)
	if err != nil {
		t.Fatal(err)
	}
	st, err := f.Stage(filepath.Join(dir, "driver"))
	if err != nil {
		t.Fatal(err)
	}
	if want := len(f.Libraries) + len(f.Binaries); st.Copied != want {
		t.Errorf("%d files copied, want %d", st.Copied, want)
	}
	checkTree(t, st.Path, n.DriverRoot(), true)
}

// TestPruneKeepsMountedTrees: on this host, a staged tree that a process
// in a mount namespace of its own has bind-mounted (as a container has
// its driver) is kept; once that namespace is gone, it is removed; the
// current tree stays.
func TestPruneKeepsMountedTrees(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip(err)
	}
	root := simulatedDriver(t)
	f, err := driverfiles.Find(root, version)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "driver")
	old, err := f.Stage(dir)
	if err != nil {
		t.Fatal(err)
	}
	// The driver changes: a new tree is the current one.
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(filepath.Join(root, sim.LibDir(), "libcuda.so."+version), later, later); err != nil {
		t.Fatal(err)
	}
	if f, err = driverfiles.Find(root, version); err != nil {
		t.Fatal(err)
	}
	current, err := f.Stage(dir)
	if err != nil {
		t.Fatal(err)
	}

	mnt := t.TempDir()
	cmd := exec.Command(unshare, "--mount", "--propagation", "private", "sh", "-c", `mount --bind "$1" "$2" && echo ready && exec sleep 60`, "sh", old.Path, mnt)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("the mount namespace: %q, %v", line, err)
	}

	removed, mounted, err := driverfiles.Prune(dir, current.Path)
	if err != nil || len(removed) != 0 || !slices.Equal(mounted, []string{old.Path}) {
		t.Errorf("pruning with the old tree mounted: removed %v, kept %v, %v; want %s kept", removed, mounted, err, old.Path)
	}
	cmd.Process.Kill()
	cmd.Wait()
	removed, mounted, err = driverfiles.Prune(dir, current.Path)
	if err != nil || !slices.Equal(removed, []string{old.Path}) || len(mounted) != 0 {
		t.Errorf("pruning once nothing mounts it: removed %v, kept %v, %v; want %s removed", removed, mounted, err, old.Path)
	}
	if _, err := os.Stat(filepath.Join(current.Path, "lib64", "libcuda.so.1")); err != nil {
		t.Errorf("the current tree: %v", err)
	}
}
