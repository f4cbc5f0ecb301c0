package sim_test

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpumux/gpumux/gpu/sim"
)

func TestEnsureDeviceNodes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("creating device nodes needs root (CAP_MKNOD)")
	}
	f := loadH200Fixture(t)
	n, lib := open(t, "dgxh200", t.TempDir(), sim.WithGPUCount(2), sim.WithMinors(0, 3))
	d := device(t, lib, 1) // minor 3
	enableMig(t, d)
	gi := createGI(t, d, 9, 4) // GI 2
	createFullCI(t, gi)

	err := n.EnsureDeviceNodes()
	if errors.Is(err, sim.ErrMknodNotPermitted) {
		t.Skipf("mknod not permitted here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	check := func(rel string, major, minor uint32, perm os.FileMode) {
		t.Helper()
		fi, err := os.Lstat(filepath.Join(n.DevRoot(), rel))
		if err != nil {
			t.Error(err)
			return
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode()&os.ModeCharDevice == 0 || unix.Major(st.Rdev) != major || unix.Minor(st.Rdev) != minor || fi.Mode().Perm() != perm {
			t.Errorf("%s: mode %v %d:%d, want char %v %d:%d", rel, fi.Mode(), unix.Major(st.Rdev), unix.Minor(st.Rdev), perm, major, minor)
		}
	}
	// The numbers seen on the real H200 machine.
	perms := map[string]os.FileMode{"nvidia-caps/nvidia-cap1": 0o400, "nvidia-caps/nvidia-cap2": 0o444}
	for rel, mm := range f.DeviceNodes {
		perm, ok := perms[rel]
		if !ok {
			perm = 0o666
		}
		check(rel, mm[0], mm[1], perm)
	}
	check("nvidia3", 195, 3, 0o666) // by device minor, not index
	if _, err := os.Lstat(filepath.Join(n.DevRoot(), "nvidia1")); err == nil {
		t.Error("nvidia1 exists but no GPU has minor 1")
	}
	// gpu3/gi2/access = 3 + 3*135 + 2*9 = 426, ci0 = 427.
	check("nvidia-caps/nvidia-cap426", 241, 426, 0o444)
	check("nvidia-caps/nvidia-cap427", 241, 427, 0o444)

	// Idempotent, and repairs a wrong node.
	bad := filepath.Join(n.DevRoot(), "nvidiactl")
	os.Remove(bad)
	if err := os.WriteFile(bad, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := n.EnsureDeviceNodes(); err != nil {
		t.Fatal(err)
	}
	check("nvidiactl", 195, 255, 0o666)
	if _, err := os.Stat(n.MigMinorsPath()); err != nil {
		t.Error(err)
	}
}
