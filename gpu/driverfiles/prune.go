package driverfiles

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Prune removes the staged trees in dir other than keep that no mount on
// the host shows, in any process's mount namespace (a container's mount of
// a tree keeps it: removing its files would take the driver from under the
// container), and stagings left unfinished long ago. It returns the trees
// removed and those kept because something mounts them. Trees of a driver
// that was upgraded in place hold the old driver's files (hard links):
// pruning gives their space back once no container uses them.
func Prune(dir, keep string) (removed, mounted []string, err error) {
	return prune(dir, keep, "/proc")
}

func prune(dir, keep, proc string) (removed, mounted []string, err error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("pruning staged driver trees: %w", err)
	}
	removeStale(dir)
	var trees []string
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		if e.IsDir() && !strings.HasPrefix(e.Name(), stagingPrefix) && path != keep {
			trees = append(trees, path)
		}
	}
	if len(trees) == 0 {
		return nil, nil, nil
	}
	inUse, err := mountedAnywhere(proc, trees)
	if err != nil {
		return nil, nil, fmt.Errorf("pruning staged driver trees: %w", err)
	}
	var errs []error
	for _, t := range trees {
		if inUse[t] {
			mounted = append(mounted, t)
			continue
		}
		if err := os.RemoveAll(t); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, t)
	}
	return removed, mounted, errors.Join(errs...)
}

// fsPath is where a directory is within its file system: the device
// mountinfo names it by, and its path from that file system's root.
type fsPath struct {
	dev  string // "major:minor"
	path string
}

// mountedAnywhere says which of paths (directories of the host's) some
// mount shows, in the mount namespace of any process under proc: a mount
// whose root, in the same file system, is the directory or inside it.
// Each mount namespace is read once.
func mountedAnywhere(proc string, paths []string) (map[string]bool, error) {
	self, err := readMountinfo(filepath.Join(proc, "self", "mountinfo"))
	if err != nil {
		return nil, err
	}
	want := map[string]fsPath{}
	for _, p := range paths {
		if fp, ok := whereIn(self, p); ok {
			want[p] = fp
		}
	}
	pids, err := os.ReadDir(proc)
	if err != nil {
		return nil, err
	}
	inUse := map[string]bool{}
	seen := map[uint64]bool{} // mount namespaces read
	for _, e := range pids {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(proc, e.Name(), "ns", "mnt"), &st); err == nil {
			if seen[st.Ino] {
				continue
			}
			seen[st.Ino] = true
		}
		mounts, err := readMountinfo(filepath.Join(proc, e.Name(), "mountinfo"))
		if err != nil {
			continue // gone since, or not ours to read
		}
		for p, fp := range want {
			for _, m := range mounts {
				if m.dev == fp.dev && (m.root == fp.path || strings.HasPrefix(m.root, fp.path+"/")) {
					inUse[p] = true
					break
				}
			}
		}
	}
	return inUse, nil
}

// mountEntry is one line of a mountinfo file: the mount's file system
// (major:minor), the directory of that file system it shows, and where.
type mountEntry struct {
	dev, root, point string
}

// whereIn finds path's file system and its path there from the mounts of
// the path's own namespace: the mount with the longest mount point above
// it.
func whereIn(mounts []mountEntry, path string) (fsPath, bool) {
	var best *mountEntry
	for i, m := range mounts {
		if (path == m.point || m.point == "/" || strings.HasPrefix(path, m.point+"/")) && (best == nil || len(m.point) > len(best.point)) {
			best = &mounts[i]
		}
	}
	if best == nil {
		return fsPath{}, false
	}
	rel := strings.TrimPrefix(strings.TrimPrefix(path, best.point), "/")
	return fsPath{dev: best.dev, path: filepath.Join(best.root, rel)}, true
}

// readMountinfo reads a mountinfo file (proc(5)): fields 3 to 5 of each
// line, with the kernel's octal escapes undone.
func readMountinfo(path string) ([]mountEntry, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []mountEntry
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			continue
		}
		out = append(out, mountEntry{dev: f[2], root: unescapeMountinfo(f[3]), point: unescapeMountinfo(f[4])})
	}
	return out, sc.Err()
}

// unescapeMountinfo undoes mountinfo's \ooo escapes (of space, tab,
// newline and backslash).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
