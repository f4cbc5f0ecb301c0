package driverfiles

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Where a container gets a staged tree, and its directories there: the
// layout NVIDIA's CUDA images already search (their LD_LIBRARY_PATH has
// /usr/local/nvidia/lib64, their PATH /usr/local/nvidia/bin), as the
// first nvidia-docker gave the driver.
const (
	ContainerDir    = "/usr/local/nvidia"
	ContainerLibDir = ContainerDir + "/lib64"
	ContainerBinDir = ContainerDir + "/bin"
)

// Staged is a tree of the driver's files on the host, laid out to be given
// to a container in one bind mount at ContainerDir: lib64/ holds each
// library under its file name with its SONAME (and bare-name) links,
// bin/ the programs.
type Staged struct {
	Path string // the tree: <dir>/<driver version>-<digest>
	// Copied is how many files were copied into the tree because they
	// could not be linked (another file system); 0 when it was there.
	Copied int
	// Built says that this call built the tree.
	Built bool
}

// stagedEntry is one name in a staged tree: a file linked (or copied)
// from the host, or a symbolic link to a name beside it.
type stagedEntry struct {
	name string // "lib64/libcuda.so.1"
	from string // host file, for a file
	link string // target, for a link: "libcuda.so.580.159.04"
}

// entries are the names of the tree of f, files before the links to them.
func (f *Files) entries() []stagedEntry {
	var out []stagedEntry
	for _, l := range f.Libraries {
		base := filepath.Base(l.ContainerPath)
		out = append(out, stagedEntry{name: "lib64/" + base, from: l.HostPath})
		for _, link := range l.Links {
			out = append(out, stagedEntry{name: "lib64/" + filepath.Base(link), link: base})
		}
	}
	for _, b := range f.Binaries {
		out = append(out, stagedEntry{name: "bin/" + filepath.Base(b.ContainerPath), from: b.HostPath})
	}
	return out
}

// digest names the tree of f: the driver version and, for every file, its
// name in the tree and the host file's identity (device, inode, size,
// modification time), so that a driver whose files change gets a new tree.
func (f *Files) digest() (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "gpumux driver tree v1\n%s\n", f.Version)
	for _, e := range f.entries() {
		if e.from == "" {
			fmt.Fprintf(h, "%s -> %s\n", e.name, e.link)
			continue
		}
		fi, err := os.Stat(e.from)
		if err != nil {
			return "", err
		}
		var dev, ino uint64
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			dev, ino = uint64(st.Dev), st.Ino
		}
		fmt.Fprintf(h, "%s %s %d:%d %d %d\n", e.name, e.from, dev, ino, fi.Size(), fi.ModTime().UnixNano())
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// stagingPrefix begins the names of trees being built; one older than
// staleStaging was left by a process that died building it.
const (
	stagingPrefix = ".staging-"
	staleStaging  = 10 * time.Minute
)

// Stage makes sure the tree of f is under dir, building it when it is not:
// each file hard-linked from the host (copied where it cannot be linked),
// in a temporary directory renamed into place, so that the tree is whole
// or absent whoever else builds it at the same time and wherever a
// process dies. A tree that is there but lacks a name is damaged: Stage
// refuses it with an error that says what to remove.
func (f *Files) Stage(dir string) (Staged, error) {
	sum, err := f.digest()
	if err != nil {
		return Staged{}, fmt.Errorf("staging the driver's files: %w", err)
	}
	path := filepath.Join(dir, f.Version+"-"+sum)
	if _, err := os.Lstat(path); err == nil {
		return Staged{Path: path}, f.check(path)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Staged{}, fmt.Errorf("staging the driver's files: %w", err)
	}
	removeStale(dir)
	tmp, err := os.MkdirTemp(dir, stagingPrefix)
	if err != nil {
		return Staged{}, fmt.Errorf("staging the driver's files: %w", err)
	}
	defer os.RemoveAll(tmp) // gone once renamed
	copied, err := f.build(tmp)
	if err != nil {
		return Staged{}, fmt.Errorf("staging the driver's files in %s: %w", dir, err)
	}
	// The tree's names on disk before its name: a crash after the rename
	// leaves a whole tree, not one that check refuses.
	for _, sub := range []string{"lib64", "bin", ""} {
		syncDir(filepath.Join(tmp, sub))
	}
	if err := os.Rename(tmp, path); err != nil {
		if _, lerr := os.Lstat(path); lerr == nil { // another process built it first
			return Staged{Path: path}, f.check(path)
		}
		return Staged{}, fmt.Errorf("staging the driver's files: %w", err)
	}
	syncDir(dir)
	return Staged{Path: path, Copied: copied, Built: true}, nil
}

// syncDir flushes a directory's entries to disk, as far as it can: a
// failure leaves what a crash would, which check refuses.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

// build lays the tree out in dir. Modes are set, not left to the umask:
// a container's user, whoever it is, reads the tree.
func (f *Files) build(dir string) (copied int, err error) {
	for _, sub := range []string{"lib64", "bin"} {
		if err := os.Mkdir(filepath.Join(dir, sub), 0o755); err != nil {
			return 0, err
		}
	}
	for _, sub := range []string{"", "lib64", "bin"} {
		if err := os.Chmod(filepath.Join(dir, sub), 0o755); err != nil {
			return 0, err
		}
	}
	for _, e := range f.entries() {
		to := filepath.Join(dir, e.name)
		if e.from == "" {
			if err := os.Symlink(e.link, to); err != nil {
				return copied, err
			}
			continue
		}
		if err := os.Link(e.from, to); err == nil {
			continue
		}
		if err := copyFile(e.from, to); err != nil {
			return copied, err
		}
		copied++
	}
	return copied, nil
}

// copyFile copies the regular file from to a new file to, with its mode,
// synced.
func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fi.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Chmod(fi.Mode().Perm()); err != nil { // past the umask
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// check says whether the tree at path has every name of f's tree.
func (f *Files) check(path string) error {
	var missing []string
	for _, e := range f.entries() {
		fi, err := os.Lstat(filepath.Join(path, e.name))
		switch {
		case err != nil:
			missing = append(missing, e.name)
		case e.from == "" && fi.Mode().Type() != os.ModeSymlink, e.from != "" && !fi.Mode().IsRegular():
			missing = append(missing, e.name+" (wrong type)")
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return fmt.Errorf("the staged driver tree %s is damaged: %s missing; remove the directory and gpumux stages it again",
			path, strings.Join(missing, ", "))
	}
	return nil
}

// removeStale removes trees whose building was left unfinished long ago.
func removeStale(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), stagingPrefix) {
			continue
		}
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > staleStaging {
			os.RemoveAll(filepath.Join(dir, e.Name())) // another's try: it fails alike
		}
	}
}
