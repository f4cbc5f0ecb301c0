package sim

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/gpumux/gpumux/gpu/driverfiles"
)

// DriverRoot is <stateDir>/sim/<name>/driver: the simulated driver's
// user-space files, laid out as the NVIDIA driver installs them on a
// Debian or Ubuntu host under "/" (EnsureDriverFiles).
func (n *Node) DriverRoot() string { return filepath.Join(n.dir, "driver") }

// LibDir is the directory under a driver root where the simulated driver
// keeps its libraries: usr/lib/<multiarch triplet>.
func LibDir() string { return filepath.Join("usr", "lib", driverfiles.Triplet()) }

// stubLibraries are the simulated driver's libraries (named
// <name>.<driver version>) and their SONAMEs, as driver 580 ships them:
// most are <name>.1, libnvidia-nvvm is .4, and libnvidia-gpucomp carries
// the driver version. The rest of a real driver (OpenCL, graphics, the
// PKCS#11 libraries) is left out, so that a node without them is what the
// simulation shows.
var stubLibraries = []struct{ name, soname string }{
	{"libcuda.so", "libcuda.so.1"},
	{"libnvidia-ml.so", "libnvidia-ml.so.1"},
	{"libnvidia-ptxjitcompiler.so", "libnvidia-ptxjitcompiler.so.1"},
	{"libnvidia-nvvm.so", "libnvidia-nvvm.so.4"},
	{"libnvidia-gpucomp.so", ""}, // SONAME: the file's own name
	{"libcudadebugger.so", "libcudadebugger.so.1"},
	{"libnvidia-cfg.so", "libnvidia-cfg.so.1"},
	{"libnvidia-allocator.so", "libnvidia-allocator.so.1"},
}

// stubBinaries are the simulated driver's programs under usr/bin: shell
// scripts that say what they are (the simulation runs no GPU program).
var stubBinaries = []string{"nvidia-smi", "nvidia-debugdump"}

// EnsureDriverFiles creates (idempotently) the simulated driver's files
// under DriverRoot: for each library a valid, empty ELF shared object of
// this machine named <name>.<driver version> whose SONAME is the real
// one's, with the SONAME link (and libcuda.so) that ldconfig and the driver's
// installer make; nvidia-smi and nvidia-debugdump; and the socket of
// nvidia-persistenced. Files that are already right are left alone, so
// several processes that open one node may call it at once.
func (n *Node) EnsureDriverFiles() error {
	root := n.DriverRoot()
	lib := filepath.Join(root, LibDir())
	bin := filepath.Join(root, "usr", "bin")
	sock := filepath.Join(root, "run", "nvidia-persistenced", "socket")
	for _, d := range []string{lib, bin, filepath.Dir(sock)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("sim: %w", err)
		}
	}
	ver := n.model.driver
	for _, l := range stubLibraries {
		file := l.name + "." + ver
		soname := l.soname
		if soname == "" {
			soname = file
		}
		if err := ensureFile(filepath.Join(lib, file), stubLibrary(soname), 0o644); err != nil {
			return err
		}
		if soname != file {
			if err := ensureSymlink(filepath.Join(lib, soname), file); err != nil {
				return err
			}
		}
	}
	if err := ensureSymlink(filepath.Join(lib, "libcuda.so"), "libcuda.so.1"); err != nil {
		return err
	}
	for _, b := range stubBinaries {
		script := fmt.Sprintf("#!/bin/sh\necho '%s of gpumux'\"'\"'s simulated node %s, driver %s'\n", b, n.name, ver)
		if err := ensureFile(filepath.Join(bin, b), []byte(script), 0o755); err != nil {
			return err
		}
	}
	return ensureSocket(sock)
}

// ensureFile writes data to path (atomically) unless it already holds it
// with mode perm.
func ensureFile(path string, data []byte, perm os.FileMode) error {
	if fi, err := os.Lstat(path); err == nil && fi.Mode() == perm {
		if have, err := os.ReadFile(path); err == nil && bytes.Equal(have, data) {
			return nil
		}
	}
	return writeFileAtomic(path, data, perm, nil)
}

// ensureSymlink makes path a symbolic link to target (atomically).
func ensureSymlink(path, target string) error {
	if have, err := os.Readlink(path); err == nil && have == target {
		return nil
	}
	tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
	os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("sim: %w", err)
	}
	return nil
}

// ensureSocket makes path a unix socket inode with nothing listening, as
// nvidia-persistenced leaves it when it is stopped (mknod needs no
// privilege for a socket, and, unlike bind, no short path).
func ensureSocket(path string) error {
	if fi, err := os.Lstat(path); err == nil && fi.Mode().Type() == os.ModeSocket {
		return nil
	}
	os.Remove(path)
	if err := unix.Mknod(path, unix.S_IFSOCK|0o666, 0); err != nil {
		return fmt.Errorf("sim: mknod %s: %w", path, err)
	}
	return os.Chmod(path, 0o666) // mknod applies the umask
}

// stubLibrary returns the smallest ELF shared object of this machine that
// both ldconfig and debug/elf read as a library named soname: one
// loadable segment, a dynamic section holding DT_SONAME, DT_STRTAB and
// DT_STRSZ, and the section headers that name them. It has no code.
func stubLibrary(soname string) []byte {
	const (
		ehdr, phdr, shdr = 64, 56, 64
		dynEnt           = 16
	)
	dynstr := "\x00" + soname + "\x00"
	shstr := "\x00.dynstr\x00.dynamic\x00.shstrtab\x00" // names at 1, 9 and 18
	align8 := func(n int) int { return (n + 7) &^ 7 }
	dynstrOff := ehdr + 2*phdr
	dynOff := align8(dynstrOff + len(dynstr))
	dyn := []elf.Dyn64{
		{Tag: int64(elf.DT_SONAME), Val: 1},
		{Tag: int64(elf.DT_STRTAB), Val: uint64(dynstrOff)},
		{Tag: int64(elf.DT_STRSZ), Val: uint64(len(dynstr))},
		{Tag: int64(elf.DT_NULL)},
	}
	shstrOff := dynOff + len(dyn)*dynEnt
	shOff := align8(shstrOff + len(shstr))

	m, _ := driverfiles.Machine()
	var ident [elf.EI_NIDENT]byte
	copy(ident[:], elf.ELFMAG)
	ident[elf.EI_CLASS], ident[elf.EI_DATA], ident[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)
	segment := uint64(shstrOff) // the header, the program headers, .dynstr and .dynamic
	parts := []any{
		elf.Header64{
			Ident: ident, Type: uint16(elf.ET_DYN), Machine: uint16(m), Version: uint32(elf.EV_CURRENT),
			Phoff: ehdr, Shoff: uint64(shOff), Ehsize: ehdr, Phentsize: phdr, Phnum: 2, Shentsize: shdr, Shnum: 4, Shstrndx: 3,
		},
		elf.Prog64{Type: uint32(elf.PT_LOAD), Flags: uint32(elf.PF_R | elf.PF_W), Filesz: segment, Memsz: segment, Align: 0x1000},
		elf.Prog64{Type: uint32(elf.PT_DYNAMIC), Flags: uint32(elf.PF_R | elf.PF_W), Off: uint64(dynOff), Vaddr: uint64(dynOff), Paddr: uint64(dynOff),
			Filesz: uint64(len(dyn) * dynEnt), Memsz: uint64(len(dyn) * dynEnt), Align: 8},
		[]byte(dynstr), make([]byte, dynOff-dynstrOff-len(dynstr)),
		dyn,
		[]byte(shstr), make([]byte, shOff-shstrOff-len(shstr)),
		elf.Section64{},
		elf.Section64{Name: 1, Type: uint32(elf.SHT_STRTAB), Flags: uint64(elf.SHF_ALLOC), Addr: uint64(dynstrOff), Off: uint64(dynstrOff), Size: uint64(len(dynstr)), Addralign: 1},
		elf.Section64{Name: 9, Type: uint32(elf.SHT_DYNAMIC), Flags: uint64(elf.SHF_WRITE | elf.SHF_ALLOC), Addr: uint64(dynOff), Off: uint64(dynOff),
			Size: uint64(len(dyn) * dynEnt), Link: 1, Addralign: 8, Entsize: dynEnt},
		elf.Section64{Name: 18, Type: uint32(elf.SHT_STRTAB), Off: uint64(shstrOff), Size: uint64(len(shstr)), Addralign: 1},
	}
	var b bytes.Buffer
	for _, p := range parts {
		binary.Write(&b, binary.LittleEndian, p) // cannot fail: fixed-size values into a buffer
	}
	return b.Bytes()
}
