package driverfiles

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/gpumux/gpumux/internal/mountinfo"
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
	self, err := mountinfo.Read(filepath.Join(proc, "self", "mountinfo"))
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
		mounts, err := mountinfo.Read(filepath.Join(proc, e.Name(), "mountinfo"))
		if err != nil {
			continue // gone since, or not ours to read
		}
		for p, fp := range want {
			for _, m := range mounts {
				if m.Dev == fp.dev && (m.Root == fp.path || strings.HasPrefix(m.Root, fp.path+"/")) {
					inUse[p] = true
					break
				}
			}
		}
	}
	return inUse, nil
}

// whereIn finds path's file system and its path there from the mounts of
// the path's own namespace: the mount with the longest mount point above
// it, the last of those on one point (the one on top).
func whereIn(mounts []mountinfo.Mount, path string) (fsPath, bool) {
	var best *mountinfo.Mount
	for i, m := range mounts {
		if (path == m.Point || m.Point == "/" || strings.HasPrefix(path, m.Point+"/")) && (best == nil || len(m.Point) >= len(best.Point)) {
			best = &mounts[i]
		}
	}
	if best == nil {
		return fsPath{}, false
	}
	rel := strings.TrimPrefix(strings.TrimPrefix(path, best.Point), "/")
	return fsPath{dev: best.Dev, path: filepath.Join(best.Root, rel)}, true
}
