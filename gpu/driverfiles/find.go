package driverfiles

import (
	"bufio"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"
)

// ErrMissing is wrapped by Find when a library every CUDA or NVML program
// needs (libcuda, libnvidia-ml) is not under the driver root.
var ErrMissing = errors.New("NVIDIA driver library not found")

// What Find looks for, after libnvidia-container's lists for the "compute"
// and "utility" capabilities.
var (
	// requiredLibraries are what every CUDA (libcuda) and NVML
	// (libnvidia-ml) program loads.
	requiredLibraries = []string{"libcuda.so", "libnvidia-ml.so"}
	// optionalLibraries are given where the driver has them: libcuda's
	// PTX JIT and NVVM compilers, the shared compiler library, the CUDA
	// debugger, the allocator, NVML's config library and NVSwitch
	// topology library, OpenCL, and the PKCS#11 libraries of confidential
	// computing. Older drivers had the fatbinary loader and OpenCL's
	// compiler.
	optionalLibraries = []string{
		"libnvidia-ptxjitcompiler.so", "libnvidia-nvvm.so", "libnvidia-gpucomp.so", "libcudadebugger.so",
		"libnvidia-allocator.so", "libnvidia-cfg.so", "libnvidia-nscq.so", "libnvidia-opencl.so",
		"libnvidia-pkcs11.so", "libnvidia-pkcs11-openssl3.so", "libnvidia-fatbinaryloader.so", "libnvidia-compiler.so",
	}
	// unversioned are libraries that programs also load by their bare
	// name (dlopen("libcuda.so")), which the driver's installer links;
	// a container gets that name where the host has it: a mount on a name
	// the host lacks would create it in a container whose root is the
	// host's own.
	unversioned = []string{"libcuda.so", "libnvidia-ml.so"}
	// binaries are the utility capability's programs a container runs.
	binaries = []string{"nvidia-smi", "nvidia-debugdump"}
	// binDirs are where the driver's installers put them.
	binDirs = []string{"/usr/bin", "/usr/sbin", "/bin", "/sbin", "/usr/local/bin"}
	// sockets are IPC endpoints of the driver's daemons that NVML uses.
	sockets = []string{"/run/nvidia-persistenced/socket", "/var/run/nvidia-persistenced/socket"}
)

// File is one file given to a container.
type File struct {
	HostPath      string // where it is on the host: under the driver root
	ContainerPath string // where the container gets it: its path under the root
}

// Library is one of the driver's libraries.
type Library struct {
	File
	Name   string // what Find looked for: "libcuda.so"
	SONAME string // what programs load: "libcuda.so.1"
	// Links are the other container paths the library is given at, in its
	// directory: the SONAME, and for libcuda and libnvidia-ml the bare
	// name where the host has it (the links ldconfig and the driver's
	// installer make).
	Links []string
}

// Files are the driver's files a container gets.
type Files struct {
	Root      string // the driver root they were found under
	Version   string // the driver version: "580.159.04"
	Libraries []Library
	Binaries  []File
	Sockets   []File
	// Missing names the optional libraries and programs that were not
	// found, for the log.
	Missing []string
}

// Library returns the library found for name ("libcuda.so").
func (f *Files) Library(name string) (Library, bool) {
	for _, l := range f.Libraries {
		if l.Name == name {
			return l, true
		}
	}
	return Library{}, false
}

// LibraryDirs are the container directories that hold the libraries, in
// the order they were found, each once: what the container's linker cache
// must list.
func (f *Files) LibraryDirs() []string {
	var dirs []string
	for _, l := range f.Libraries {
		if d := filepath.Dir(l.ContainerPath); !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

var versionPattern = regexp.MustCompile(`^[0-9]+(\.[0-9]+)*$`)

// Find finds the files of driver version ("580.159.04", as NVML reports
// it) under root. The libraries libcuda.so.<version> and
// libnvidia-ml.so.<version> must be there (the error wraps ErrMissing and
// says where it looked); the others are taken where they are.
func Find(root, version string) (*Files, error) {
	if !versionPattern.MatchString(version) {
		return nil, fmt.Errorf("driver version %q: want dot-separated numbers, e.g. 580.159.04", version)
	}
	if !filepath.IsAbs(root) || filepath.Clean(root) != root {
		return nil, fmt.Errorf("driver root %q: want a clean absolute path, e.g. \"/\"", root)
	}
	if fi, err := os.Stat(root); err != nil {
		return nil, fmt.Errorf("driver root: %w", err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("driver root %s is not a directory", root)
	}
	r := resolver{root: root}
	f := &Files{Root: root, Version: version}
	dirs := r.dirs(append(r.confDirs("/etc/ld.so.conf", 0), defaultLibDirs()...))
	for _, name := range slices.Concat(requiredLibraries, optionalLibraries) {
		lib, why := r.library(dirs, name, name+"."+version)
		switch {
		case lib != nil:
			f.Libraries = append(f.Libraries, *lib)
		case slices.Contains(requiredLibraries, name):
			return nil, fmt.Errorf("%w: no %s.%s under driver root %s (looked in %s%s); is driver %s's user-space installed there? (set driver_root to where it is)",
				ErrMissing, name, version, root, strings.Join(dirs, ", "), why, version)
		default:
			f.Missing = append(f.Missing, name)
		}
	}
	for _, name := range binaries {
		if bin := r.binary(name, f.LibraryDirs()); bin != nil {
			f.Binaries = append(f.Binaries, *bin)
		} else {
			f.Missing = append(f.Missing, name)
		}
	}
	for _, path := range r.dirs(sockets) { // /var/run is /run on most hosts: once
		if fi, err := os.Lstat(r.host(path)); err == nil && fi.Mode().Type() == fs.ModeSocket {
			f.Sockets = append(f.Sockets, File{HostPath: r.host(path), ContainerPath: path})
		}
	}
	return f, nil
}

// resolver maps paths as the driver root sees them to the host's.
type resolver struct{ root string }

// canonical resolves every link of path inside the root and returns the
// path as the root sees it.
func (r resolver) canonical(path string) (string, error) {
	host, err := securejoin.SecureJoin(r.root, path)
	if err != nil {
		return "", err
	}
	rel, err := filepath.Rel(r.root, host)
	if err != nil {
		return "", err
	}
	return filepath.Join("/", rel), nil
}

// host is where the root's path is on the host.
func (r resolver) host(path string) string { return filepath.Join(r.root, path) }

// dirs returns paths (directories or files) canonical and each once, in order, leaving out those
// that cannot be resolved.
func (r resolver) dirs(paths []string) []string {
	var out []string
	for _, p := range paths {
		if c, err := r.canonical(p); err == nil && !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}

// maxIncludeDepth bounds ld.so.conf's include nesting (a loop of includes
// would be endless).
const maxIncludeDepth = 8

// confDirs returns the directories an ld.so.conf file of the root lists,
// those of the files it includes first where it includes them. A file
// that cannot be read lists nothing, as for ldconfig.
func (r resolver) confDirs(path string, depth int) []string {
	if depth > maxIncludeDepth {
		return nil
	}
	c, err := r.canonical(path)
	if err != nil {
		return nil
	}
	file, err := os.Open(r.host(c))
	if err != nil {
		return nil
	}
	defer file.Close()
	var dirs []string
	sc := bufio.NewScanner(file)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "hwcap "):
		case strings.HasPrefix(line, "include "):
			for _, pattern := range strings.Fields(strings.TrimPrefix(line, "include ")) {
				if !filepath.IsAbs(pattern) {
					pattern = filepath.Join(filepath.Dir(path), pattern)
				}
				matches, _ := filepath.Glob(r.host(pattern))
				for _, m := range matches { // sorted, as ldconfig reads them
					rel, err := filepath.Rel(r.root, m)
					if err == nil {
						dirs = append(dirs, r.confDirs(filepath.Join("/", rel), depth+1)...)
					}
				}
			}
		case filepath.IsAbs(line):
			dirs = append(dirs, line)
		}
	}
	return dirs
}

// library looks for file, a library named name, in dirs; why says why the
// files of that name it found are not it.
func (r resolver) library(dirs []string, name, file string) (*Library, string) {
	var why []string
	for _, dir := range dirs {
		path, err := r.canonical(filepath.Join(dir, file))
		if err != nil {
			continue
		}
		fi, err := os.Stat(r.host(path))
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		soname, err := sharedObject(r.host(path))
		if err != nil {
			why = append(why, fmt.Sprintf("%s: %v", path, err))
			continue
		}
		lib := &Library{File: File{HostPath: r.host(path), ContainerPath: path}, Name: name, SONAME: soname}
		links := []string{soname}
		if _, err := os.Lstat(r.host(filepath.Join(filepath.Dir(path), name))); err == nil && slices.Contains(unversioned, name) {
			links = append(links, name) // where the host has it: see unversioned
		}
		for _, l := range links {
			if link := filepath.Join(filepath.Dir(path), l); l != filepath.Base(path) && !slices.Contains(lib.Links, link) {
				lib.Links = append(lib.Links, link)
			}
		}
		return lib, ""
	}
	if len(why) == 0 {
		return nil, ""
	}
	return nil, "; passed over " + strings.Join(why, ", ")
}

// sharedObject checks that path is a 64-bit shared object of this
// machine, and returns its SONAME (its file name when it has none).
func sharedObject(path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", fmt.Errorf("not an ELF file: %w", err)
	}
	defer f.Close()
	if m, ok := Machine(); f.Class != elf.ELFCLASS64 || f.Type != elf.ET_DYN || (ok && f.Machine != m) {
		return "", fmt.Errorf("a %s %s for %s, not a 64-bit shared object of this machine", f.Class, f.Type, f.Machine)
	}
	names, err := f.DynString(elf.DT_SONAME)
	if err != nil || len(names) == 0 {
		return filepath.Base(path), nil
	}
	return names[0], nil
}

// binary looks for the program name in binDirs, then in the bin
// directory beside each of the driver's library directories (libDirs),
// where a driver installed under one prefix keeps it
// (/usr/local/nvidia/lib64 and /usr/local/nvidia/bin). It prefers the
// program itself, an ELF file, to a script that runs it from elsewhere
// (some hosts have a /usr/bin/nvidia-smi that execs
// /usr/local/nvidia/bin/nvidia-smi, which the container would not have);
// with no ELF file, the first executable found. A program found outside
// binDirs goes to /usr/bin in the container, on every image's PATH.
func (r resolver) binary(name string, libDirs []string) *File {
	dirs := slices.Clone(binDirs)
	for _, d := range libDirs {
		dirs = append(dirs, filepath.Join(filepath.Dir(d), "bin"))
	}
	var found *File
	for _, dir := range r.dirs(dirs) {
		path, err := r.canonical(filepath.Join(dir, name))
		if err != nil {
			continue
		}
		exe, isELF := program(r.host(path))
		if !exe || (!isELF && found != nil) {
			continue
		}
		in := path
		if !slices.Contains(binDirs, filepath.Dir(path)) {
			in = filepath.Join("/usr/bin", name)
		}
		found = &File{HostPath: r.host(path), ContainerPath: in}
		if isELF {
			break
		}
	}
	return found
}

// program says whether path is an executable regular file, and whether it
// is an ELF file.
func program(path string) (exe, isELF bool) {
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
		return false, false
	}
	f, err := os.Open(path)
	if err != nil {
		return false, false
	}
	defer f.Close()
	magic := make([]byte, len(elf.ELFMAG))
	_, err = io.ReadFull(f, magic)
	return true, err == nil && string(magic) == elf.ELFMAG
}

// defaultLibDirs are where distributions put 64-bit libraries: the Debian
// multiarch directories, then the lib64 ones, then lib (which is 64-bit
// where there is no lib64).
func defaultLibDirs() []string {
	var dirs []string
	if t := Triplet(); t != "" {
		dirs = append(dirs, "/usr/lib/"+t, "/lib/"+t)
	}
	return append(dirs, "/usr/lib64", "/lib64", "/usr/lib", "/lib")
}

// Triplet is the Debian multiarch name of this machine's libraries
// ("x86_64-linux-gnu"), "" on architectures the NVIDIA driver does not
// support.
func Triplet() string {
	switch runtime.GOARCH {
	case "amd64":
		return "x86_64-linux-gnu"
	case "arm64":
		return "aarch64-linux-gnu"
	case "ppc64le":
		return "powerpc64le-linux-gnu"
	}
	return ""
}

// Machine is the ELF machine of this machine's libraries; ok is false on
// architectures the NVIDIA driver does not support.
func Machine() (m elf.Machine, ok bool) {
	switch runtime.GOARCH {
	case "amd64":
		return elf.EM_X86_64, true
	case "arm64":
		return elf.EM_AARCH64, true
	case "ppc64le":
		return elf.EM_PPC64, true
	}
	return 0, false
}
