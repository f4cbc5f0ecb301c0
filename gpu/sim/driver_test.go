package sim

import (
	"debug/elf"
	"os"
	"path/filepath"
	"testing"
)

// TestDriverFiles: the simulated driver's libraries are ELF shared objects
// with their real SONAMEs, linked as ldconfig links them, and a second
// call changes no file (several processes open one node).
func TestDriverFiles(t *testing.T) {
	n, err := Open("dgxh200", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := n.EnsureDriverFiles(); err != nil {
		t.Fatal(err)
	}
	lib := filepath.Join(n.DriverRoot(), LibDir())
	for file, soname := range map[string]string{
		"libcuda.so.580.159.04":           "libcuda.so.1",
		"libnvidia-nvvm.so.580.159.04":    "libnvidia-nvvm.so.4",
		"libnvidia-gpucomp.so.580.159.04": "libnvidia-gpucomp.so.580.159.04",
	} {
		f, err := elf.Open(filepath.Join(lib, file))
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		names, err := f.DynString(elf.DT_SONAME)
		f.Close()
		if err != nil || len(names) != 1 || names[0] != soname || f.Type != elf.ET_DYN || f.Class != elf.ELFCLASS64 {
			t.Errorf("%s: SONAME %v (%v), %s %s; want %s, a 64-bit shared object", file, names, err, f.Class, f.Type, soname)
		}
	}
	if target, err := os.Readlink(filepath.Join(lib, "libcuda.so.1")); err != nil || target != "libcuda.so.580.159.04" {
		t.Errorf("libcuda.so.1 -> %q (%v)", target, err)
	}
	smi := filepath.Join(n.DriverRoot(), "usr/bin/nvidia-smi")
	sock := filepath.Join(n.DriverRoot(), "run/nvidia-persistenced/socket")
	before := map[string]os.FileInfo{}
	for _, p := range []string{smi, sock, filepath.Join(lib, "libcuda.so.580.159.04"), filepath.Join(lib, "libcuda.so.1")} {
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		before[p] = fi
	}
	if before[smi].Mode().Perm()&0o111 == 0 || before[sock].Mode().Type() != os.ModeSocket {
		t.Errorf("nvidia-smi %v, socket %v", before[smi].Mode(), before[sock].Mode())
	}
	if err := n.EnsureDriverFiles(); err != nil {
		t.Fatal(err)
	}
	for p, fi := range before {
		if after, err := os.Lstat(p); err != nil || !os.SameFile(fi, after) {
			t.Errorf("%s was replaced by a second EnsureDriverFiles (%v)", p, err)
		}
	}
}
