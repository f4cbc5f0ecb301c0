package driverfiles_test

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpumux/gpumux/gpu/driverfiles"
	"github.com/gpumux/gpumux/gpu/sim"
)

const version = "580.159.04" // the simulated nodes' driver

// simulatedDriver returns the root of a simulated node's driver files.
func simulatedDriver(t *testing.T) string {
	t.Helper()
	n, err := sim.Open("dgxh200", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := n.EnsureDriverFiles(); err != nil {
		t.Fatal(err)
	}
	return n.DriverRoot()
}

func TestFindSimulatedDriver(t *testing.T) {
	root := simulatedDriver(t)
	f, err := driverfiles.Find(root, version)
	if err != nil {
		t.Fatal(err)
	}
	lib := "/" + sim.LibDir()
	for _, tc := range []struct {
		name, soname string
		links        []string
	}{
		{"libcuda.so", "libcuda.so.1", []string{lib + "/libcuda.so.1", lib + "/libcuda.so"}},
		{"libnvidia-ml.so", "libnvidia-ml.so.1", []string{lib + "/libnvidia-ml.so.1"}}, // no bare name on this host
		{"libnvidia-nvvm.so", "libnvidia-nvvm.so.4", []string{lib + "/libnvidia-nvvm.so.4"}},
		{"libnvidia-gpucomp.so", "libnvidia-gpucomp.so." + version, nil},
		{"libnvidia-ptxjitcompiler.so", "libnvidia-ptxjitcompiler.so.1", []string{lib + "/libnvidia-ptxjitcompiler.so.1"}},
	} {
		l, ok := f.Library(tc.name)
		container := lib + "/" + tc.name + "." + version
		if !ok || l.ContainerPath != container || l.HostPath != root+container || l.SONAME != tc.soname || !slices.Equal(l.Links, tc.links) {
			t.Errorf("%s: %+v (found %v); want %s from %s, SONAME %s, links %v", tc.name, l, ok, container, root+container, tc.soname, tc.links)
		}
	}
	if len(f.Libraries) != 8 {
		t.Errorf("%d libraries, want the simulated driver's 8: %+v", len(f.Libraries), f.Libraries)
	}
	if want := []string{lib}; !slices.Equal(f.LibraryDirs(), want) {
		t.Errorf("library directories %v, want %v", f.LibraryDirs(), want)
	}
	var bins []string
	for _, b := range f.Binaries {
		bins = append(bins, b.ContainerPath)
		if b.HostPath != root+b.ContainerPath {
			t.Errorf("%s from %s", b.ContainerPath, b.HostPath)
		}
	}
	if want := []string{"/usr/bin/nvidia-smi", "/usr/bin/nvidia-debugdump"}; !slices.Equal(bins, want) {
		t.Errorf("programs %v, want %v", bins, want)
	}
	if len(f.Sockets) != 1 || f.Sockets[0].ContainerPath != "/run/nvidia-persistenced/socket" {
		t.Errorf("sockets %+v, want nvidia-persistenced's", f.Sockets)
	}
	if !slices.Contains(f.Missing, "libnvidia-opencl.so") || slices.Contains(f.Missing, "libcuda.so") || slices.Contains(f.Missing, "nvidia-smi") {
		t.Errorf("missing %v: want the libraries the simulated driver lacks (OpenCL), not those it has", f.Missing)
	}
}

// stub copies the simulated driver's library name (libcuda.so,
// libnvidia-ml.so) to dir under root, as built for machine (0: this one's).
func stub(t *testing.T, from, root, dir, name string, machine elf.Machine) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(from, sim.LibDir(), name+"."+version))
	if err != nil {
		t.Fatal(err)
	}
	if machine != 0 {
		binary.LittleEndian.PutUint16(b[18:], uint16(machine)) // e_machine
	}
	write(t, root, filepath.Join(dir, name+"."+version), string(b), 0o644)
}

func write(t *testing.T, root, path, content string, mode os.FileMode) {
	t.Helper()
	p := filepath.Join(root, path)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, root, path, target string) {
	t.Helper()
	p := filepath.Join(root, path)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}

// TestFindLayouts: where distributions and installers put the driver, and
// the links on the way, resolved inside the root.
func TestFindLayouts(t *testing.T) {
	from := simulatedDriver(t)
	both := func(t *testing.T, root, dir string) {
		stub(t, from, root, dir, "libcuda.so", 0)
		stub(t, from, root, dir, "libnvidia-ml.so", 0)
	}
	for _, tc := range []struct {
		name    string
		setup   func(t *testing.T, root string)
		wantDir string // the libraries' directory in the container
	}{
		{"lib64, as Red Hat's", func(t *testing.T, root string) { both(t, root, "/usr/lib64") }, "/usr/lib64"},
		{"a directory of ld.so.conf's includes", func(t *testing.T, root string) {
			write(t, root, "/etc/ld.so.conf", "# comment\ninclude ld.so.conf.d/*.conf\n", 0o644)
			write(t, root, "/etc/ld.so.conf.d/nvidia.conf", "/opt/nvidia/lib64  # the driver\n", 0o644)
			both(t, root, "/opt/nvidia/lib64")
		}, "/opt/nvidia/lib64"},
		{"ld.so.conf's directories before the usual ones", func(t *testing.T, root string) {
			write(t, root, "/etc/ld.so.conf", "/opt/nvidia/lib64\n", 0o644)
			both(t, root, "/opt/nvidia/lib64")
			both(t, root, "/usr/lib64")
		}, "/opt/nvidia/lib64"},
		{"a 32-bit library passed over", func(t *testing.T, root string) {
			write(t, root, "/etc/ld.so.conf", "/usr/lib\n", 0o644) // looked at first
			stub(t, from, root, "/usr/lib", "libcuda.so", elf.EM_386)
			both(t, root, "/usr/lib64")
		}, "/usr/lib64"},
		{"a directory behind a link", func(t *testing.T, root string) {
			write(t, root, "/etc/ld.so.conf", "/lib/"+driverfiles.Triplet()+"\n", 0o644)
			symlink(t, root, "/lib", "usr/lib")
			both(t, root, "/usr/lib/"+driverfiles.Triplet())
		}, "/usr/lib/" + driverfiles.Triplet()},
		{"an absolute link resolved inside the root", func(t *testing.T, root string) {
			symlink(t, root, "/usr/lib64", "/driver/lib")
			both(t, root, "/driver/lib")
		}, "/driver/lib"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			tc.setup(t, root)
			f, err := driverfiles.Find(root, version)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(f.LibraryDirs(), []string{tc.wantDir}) {
				t.Errorf("library directories %v, want %s", f.LibraryDirs(), tc.wantDir)
			}
			for _, l := range f.Libraries {
				if l.HostPath != root+l.ContainerPath {
					t.Errorf("%s from %s, want from under the root %s", l.ContainerPath, l.HostPath, root)
				}
			}
		})
	}
}

func TestFindSocketOnce(t *testing.T) {
	root := simulatedDriver(t)
	symlink(t, root, "/var/run", "../run")
	f, err := driverfiles.Find(root, version)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Sockets) != 1 || f.Sockets[0].ContainerPath != "/run/nvidia-persistenced/socket" {
		t.Errorf("sockets %+v, want nvidia-persistenced's once, at /run", f.Sockets)
	}
}

func TestFindErrors(t *testing.T) {
	from := simulatedDriver(t)
	for _, tc := range []struct {
		name    string
		setup   func(t *testing.T, root string)
		root    func(root string) string
		version string
		missing bool     // wraps ErrMissing
		want    []string // in the message
	}{
		{"no driver", func(*testing.T, string) {}, nil, version, true,
			[]string{"no libcuda.so.580.159.04 under driver root", "/usr/lib64", "driver_root"}},
		{"only a 32-bit libcuda", func(t *testing.T, root string) {
			stub(t, from, root, "/usr/lib", "libcuda.so", elf.EM_386)
			stub(t, from, root, "/usr/lib64", "libnvidia-ml.so", 0)
		}, nil, version, true, []string{"passed over /usr/lib/libcuda.so.580.159.04", "EM_386"}},
		{"libcuda of another version", func(t *testing.T, root string) {
			stub(t, from, root, "/usr/lib64", "libcuda.so", 0)
			if err := os.Rename(filepath.Join(root, "usr/lib64/libcuda.so."+version), filepath.Join(root, "usr/lib64/libcuda.so.570.1")); err != nil {
				t.Fatal(err)
			}
		}, nil, version, true, []string{"no libcuda.so.580.159.04"}},
		{"libnvidia-ml missing", func(t *testing.T, root string) { stub(t, from, root, "/usr/lib64", "libcuda.so", 0) }, nil, version, true,
			[]string{"no libnvidia-ml.so.580.159.04"}},
		{"a version that is not one", func(*testing.T, string) {}, nil, "580/../x", false, []string{`driver version "580/../x"`}},
		{"a relative root", func(*testing.T, string) {}, func(string) string { return "driver" }, version, false, []string{`driver root "driver"`}},
		{"a root that is not there", func(*testing.T, string) {}, func(r string) string { return r + "/none" }, version, false, []string{"no such file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			tc.setup(t, root)
			if tc.root != nil {
				root = tc.root(root)
			}
			_, err := driverfiles.Find(root, tc.version)
			if err == nil || errors.Is(err, driverfiles.ErrMissing) != tc.missing {
				t.Fatalf("Find: %v, want an error (ErrMissing: %v)", err, tc.missing)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestFindSkipsWhatIsNotItself: a program that cannot run, and an optional
// library that is not an ELF file, are left out (and said missing).
func TestFindSkipsWhatIsNotItself(t *testing.T) {
	root := simulatedDriver(t)
	if err := os.Chmod(filepath.Join(root, "usr/bin/nvidia-smi"), 0o644); err != nil {
		t.Fatal(err)
	}
	write(t, root, filepath.Join(sim.LibDir(), "libnvidia-opencl.so."+version), "not a library", 0o644)
	f, err := driverfiles.Find(root, version)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := f.Library("libnvidia-opencl.so"); ok || !slices.Contains(f.Missing, "libnvidia-opencl.so") {
		t.Errorf("a text file taken for libnvidia-opencl: missing %v", f.Missing)
	}
	if len(f.Binaries) != 1 || f.Binaries[0].ContainerPath != "/usr/bin/nvidia-debugdump" || !slices.Contains(f.Missing, "nvidia-smi") {
		t.Errorf("programs %+v, missing %v: want nvidia-smi (not executable) left out", f.Binaries, f.Missing)
	}
}

// TestFindProgramBesideTheLibraries: a driver installed under one prefix
// (the libraries in /usr/local/nvidia/lib64, as on the H200 machine of
// docs/validation.md) keeps nvidia-smi in /usr/local/nvidia/bin, and the
// host's /usr/bin/nvidia-smi may be a script that execs it there: the
// container gets the program itself, at /usr/bin/nvidia-smi; a script is
// taken only where there is no ELF program.
func TestFindProgramBesideTheLibraries(t *testing.T) {
	from := simulatedDriver(t)
	elfProgram, err := os.ReadFile(filepath.Join(from, sim.LibDir(), "libcuda.so."+version)) // any ELF file
	if err != nil {
		t.Fatal(err)
	}
	const script = "#!/bin/sh\nexec /usr/local/nvidia/bin/nvidia-smi \"$@\"\n"
	for _, tc := range []struct {
		name     string
		elfAt    string // "" for none
		wantHost string
	}{
		{"the ELF program beside the libraries", "/usr/local/nvidia/bin/nvidia-smi", "/usr/local/nvidia/bin/nvidia-smi"},
		{"only the script", "", "/usr/bin/nvidia-smi"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			write(t, root, "/etc/ld.so.conf", "/usr/local/nvidia/lib64\n", 0o644)
			stub(t, from, root, "/usr/local/nvidia/lib64", "libcuda.so", 0)
			stub(t, from, root, "/usr/local/nvidia/lib64", "libnvidia-ml.so", 0)
			write(t, root, "/usr/bin/nvidia-smi", script, 0o755)
			if tc.elfAt != "" {
				write(t, root, tc.elfAt, string(elfProgram), 0o755)
			}
			f, err := driverfiles.Find(root, version)
			if err != nil {
				t.Fatal(err)
			}
			want := driverfiles.File{HostPath: root + tc.wantHost, ContainerPath: "/usr/bin/nvidia-smi"}
			if !slices.Contains(f.Binaries, want) {
				t.Errorf("programs %+v, want %+v", f.Binaries, want)
			}
		})
	}
}
