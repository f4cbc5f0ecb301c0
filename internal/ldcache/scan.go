package ldcache

import (
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/gpumux/gpumux/internal/bounded"
	"github.com/gpumux/gpumux/internal/filever"
)

// Scan reads dir, a clean absolute path inside root, as ldconfig's
// search_dir does, and returns the entries ldconfig would cache for it: a
// shared object's SONAME (its file name when it has none) or, for a link
// named by its SONAME or a prefix of it ending in .so (libfoo.so ->
// libfoo.so.1), the link's own name, each once, with the path dir/NAME.
// A directory that does not exist has none, as for ldconfig. A
// subdirectory ldconfig could descend into, or a library of an
// architecture without flags here, is ErrUnsupported.
func Scan(root *os.Root, dir string) ([]Entry, error) {
	rel := strings.TrimPrefix(dir, "/")
	if rel == "" {
		rel = "."
	}
	// Each file is looked up in the directory opened once (each lookup
	// from root would walk the whole path again: four opens a file under
	// /usr/local/nvidia/lib64), and from root where that fails: a link
	// out of the directory, which ldconfig follows anywhere in the root.
	d, err := root.OpenRoot(rel)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer d.Close()
	key := scanKey{dir: dir}
	keyed := false
	if fi, err := d.Stat("."); err == nil {
		key.version, keyed = filever.OfInfo(fi)
		// A directory's times move by the kernel's clock tick: one changed
		// a moment ago may change again without new times.
		keyed = keyed && time.Since(key.version.Changed()) >= scanSettle
	}
	if keyed {
		if s, ok := scans.Get(key); ok {
			if found, ok := s.current(d); ok {
				return found, nil
			}
		}
	}
	ents, err := fs.ReadDir(d.FS(), ".")
	if err != nil {
		return nil, err
	}
	// What a lookup from root found (a link out of the directory, a link
	// that leads nowhere) depends on the root, not the directory alone:
	// such a scan is not remembered. Each file found in the directory is
	// remembered with its version, checked again before what was read of
	// it is used.
	outside := false
	var files []fileSeen
	stat := func(name string) (fs.FileInfo, error) {
		fi, err := inDirOrRoot(d, root, rel, name, (*os.Root).Stat, &outside)
		if err == nil {
			v, ok := filever.OfInfo(fi)
			outside = outside || !ok
			files = append(files, fileSeen{name, v})
		}
		return fi, err
	}
	open := func(name string) (*os.File, error) {
		return inDirOrRoot(d, root, rel, name, (*os.Root).Open, &outside)
	}
	type lib struct {
		name   string
		flags  int32
		isLink bool
	}
	var libs []lib
	byName := map[string]int{}
	for _, de := range ents {
		name := de.Name()
		t := de.Type()
		if t&^(fs.ModeSymlink|fs.ModeDir) != 0 || isPrelinkTemp(name) {
			continue // sockets, devices, fifos; prelink's leftovers
		}
		isLink := t&fs.ModeSymlink != 0
		fi, err := stat(name)
		if err != nil {
			continue // a dangling link, or one leading out of the root
		}
		if fi.IsDir() {
			if !isDSO(name) {
				return nil, fmt.Errorf("%w: %s/%s is a directory ldconfig may read", ErrUnsupported, dir, name)
			}
			continue
		}
		if !isDSO(name) || !fi.Mode().IsRegular() {
			continue
		}
		soname, flags, err := readELF(open, name)
		if errors.Is(err, errNotLibrary) {
			continue // a linker script (libc.so), anything not a shared object
		}
		if err != nil {
			return nil, fmt.Errorf("%s/%s: %w", dir, name, err)
		}
		if soname == "" {
			soname = name
		}
		if isLink && name != soname && (!strings.HasSuffix(name, ".so") || !strings.HasPrefix(soname, name)) {
			isLink = false // a link by another name is taken as a file
		}
		if isLink {
			soname = name
		}
		if i, ok := byName[soname]; ok {
			// One entry a name; the file is preferred to a link.
			if !isLink && libs[i].isLink {
				libs[i].isLink = false
			}
			if libs[i].flags != flags {
				return nil, fmt.Errorf("%w: %s/%s and another library named %s differ in type", ErrUnsupported, dir, name, soname)
			}
			continue
		}
		byName[soname] = len(libs)
		libs = append(libs, lib{soname, flags, isLink})
	}
	out := make([]Entry, len(libs))
	for i, l := range libs {
		out[i] = Entry{Key: l.name, Value: path.Join(dir, l.name), Flags: l.flags}
	}
	if keyed && !outside {
		scans.Put(key, scanned{slices.Clone(out), files})
	}
	return out, nil
}

// inDirOrRoot is op on name in d, the directory rel of root opened, and
// where that fails on rel/name in root (outside set).
func inDirOrRoot[T any](d, root *os.Root, rel, name string, op func(*os.Root, string) (T, error), outside *bool) (T, error) {
	v, err := op(d, name)
	if err != nil {
		*outside = true
		v, err = op(root, path.Join(rel, name))
	}
	return v, err
}

var errNotLibrary = errors.New("not a shared object")

// maxDynamic bounds the dynamic section and string table readELF reads.
const maxDynamic = 16 << 20

// readELF reads a shared object's SONAME and the flags ldconfig gives it,
// or what it read of the same file before (sonames).
func readELF(open func(string) (*os.File, error), file string) (soname string, flags int32, err error) {
	f, err := open(file)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	key, known := filever.Of(f)
	if known {
		if r, ok := sonames.Get(key); ok {
			return r.soname, r.flags, r.err
		}
	}
	soname, flags, err = parseELF(f)
	if known && (err == nil || errors.Is(err, errNotLibrary)) {
		sonames.Put(key, elfResult{soname, flags, err})
	}
	return soname, flags, err
}

// parseELF reads an open file's SONAME and flags.
func parseELF(f *os.File) (soname string, flags int32, err error) {
	defer func() {
		if r := recover(); r != nil { // debug/elf is not hardened against any file
			soname, flags, err = "", 0, fmt.Errorf("%w: reading its ELF headers: %v", ErrUnsupported, r)
		}
	}()
	ef, err := elf.NewFile(f)
	if err != nil {
		return "", 0, errNotLibrary
	}
	if ef.Type != elf.ET_DYN {
		return "", 0, errNotLibrary
	}
	switch {
	case ef.Class == elf.ELFCLASS64 && ef.Machine == elf.EM_X86_64:
		flags = FlagELFLibc6 | FlagX8664Lib64
	case ef.Class == elf.ELFCLASS64 && ef.Machine == elf.EM_AARCH64:
		flags = FlagELFLibc6 | FlagAArch64Lib64
	case ef.Class == elf.ELFCLASS64 && ef.Machine == elf.EM_PPC64:
		flags = FlagELFLibc6 | FlagPowerPCLib64
	default:
		return "", 0, fmt.Errorf("%w: an ELF %v %v library", ErrUnsupported, ef.Class, ef.Machine)
	}
	// debug/elf reads a section whole, by the size its header claims: a
	// library's dynamic section and string table are KiBs.
	if ds := ef.SectionByType(elf.SHT_DYNAMIC); ds != nil {
		if ds.Size > maxDynamic || int(ds.Link) >= len(ef.Sections) || ef.Sections[ds.Link].Size > maxDynamic {
			return "", 0, fmt.Errorf("%w: a dynamic section or string table larger than %d bytes", ErrUnsupported, maxDynamic)
		}
	}
	names, err := ef.DynString(elf.DT_SONAME)
	if err != nil {
		return "", 0, fmt.Errorf("%w: its dynamic section: %v", ErrUnsupported, err)
	}
	if len(names) > 0 {
		soname = names[0]
	}
	return soname, flags, nil
}

// isDSO is glibc's _dl_is_dso: lib*.so*, ld-*.so*, ld.so.*, ld64.so.*.
func isDSO(name string) bool {
	return ((strings.HasPrefix(name, "lib") || strings.HasPrefix(name, "ld-")) && strings.Contains(name, ".so")) ||
		strings.HasPrefix(name, "ld.so.") || strings.HasPrefix(name, "ld64.so.")
}

// isPrelinkTemp: files prelink leaves, which ldconfig skips.
func isPrelinkTemp(name string) bool {
	if strings.HasSuffix(name, ".#prelink#") {
		return true
	}
	i := strings.LastIndex(name, ".#prelink#.")
	return i >= 0 && len(name)-i == len(".#prelink#.XXXXXX")
}

// sonames remembers what readELF read of each file, by the file's
// identity: a long-lived process (gpumux agent, which does the hook of
// every container) reads a driver's libraries once, not at every
// container (on the H200 node: 0.28 of the hook's 1.3 ms). A file
// rewritten in place changes its ctime; a file replaced is another inode.
// A driver has tens of libraries.
var sonames = bounded.New[filever.Version, elfResult](4096)

type elfResult struct {
	soname string
	flags  int32
	err    error // nil or errNotLibrary
}

// scans remembers Scan's result for a directory, by the directory's
// identity and the path it is scanned as, with the version of each file
// it found there: the driver's library directory gpumux staged is scanned
// for every container, and a stat of each of its files (checked against
// what was remembered: a file rewritten in place changes its times)
// replaces an open, a read and a close of each (on the H200 node the scan
// was most of the hook's 0.75 ms, docs/benchmarks.md). An entry added,
// removed or renamed changes the directory's times. A node has a driver
// tree or two, each a directory or two.
var scans = bounded.New[scanKey, scanned](64)

// scanSettle is how long ago a directory must have changed for its scan
// to be remembered (a variable for the tests).
var scanSettle = time.Second

type scanKey struct {
	version filever.Version
	dir     string
}

// scanned is a directory's scan: its entries, and the files it stat'ed.
type scanned struct {
	found []Entry
	files []fileSeen
}

type fileSeen struct {
	name    string
	version filever.Version
}

// current returns a copy of s's entries if every file they came from is
// still the version seen, in d.
func (s scanned) current(d *os.Root) ([]Entry, bool) {
	for _, f := range s.files {
		fi, err := d.Stat(f.name)
		if err != nil {
			return nil, false
		}
		if v, ok := filever.OfInfo(fi); !ok || v != f.version {
			return nil, false
		}
	}
	return slices.Clone(s.found), true
}
