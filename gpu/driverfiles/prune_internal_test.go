package driverfiles

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestPruneReadsEveryMountNamespace: with a fake /proc, a tree that a
// mount in another process's namespace shows (itself, or a directory in
// it) is kept, one nothing mounts is removed, the current one is kept
// whatever mounts it, and a staging left long ago is removed. Mount points
// and roots with the kernel's escapes are read as paths.
func TestPruneReadsEveryMountNamespace(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "state dir", "driver")
	tree := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Join(p, "lib64"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	current, whole, sub, unused := tree("580.159.04-cccc"), tree("570.86.15-aaaa"), tree("575.51.03-bbbb"), tree("550.54.14-dddd")
	stale := tree(stagingPrefix + "1")
	long := time.Now().Add(-time.Hour)
	if err := os.Chtimes(stale, long, long); err != nil {
		t.Fatal(err)
	}

	// The host's root is device 8:1 holding base at base; another file
	// system (8:2) is mounted on base/"state dir", so the trees are at
	// /driver/... in it. Mountinfo escapes the space.
	stateMount := filepath.Join(base, "state\\040dir")
	// A file system mounted there before (8:7) is hidden by the later one.
	self := "20 1 8:1 / / rw - ext4 /dev/sda1 rw\n" +
		"21 20 8:7 / " + stateMount + " rw - ext4 /dev/sdc1 rw\n" +
		"22 21 8:2 / " + stateMount + " rw - ext4 /dev/sda2 rw\n"
	proc := filepath.Join(base, "proc")
	write := func(pid, mountinfo string, ns string) {
		d := filepath.Join(proc, pid)
		if err := os.MkdirAll(filepath.Join(d, "ns"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "mountinfo"), []byte(mountinfo), 0o644); err != nil {
			t.Fatal(err)
		}
		if ns != "" {
			if err := os.Link(ns, filepath.Join(d, "ns", "mnt")); err != nil {
				t.Fatal(err)
			}
		}
	}
	nsFile := func(name string) string {
		p := filepath.Join(base, name)
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	hostNS, ctrA, ctrB := nsFile("ns-host"), nsFile("ns-a"), nsFile("ns-b")
	write("self", self, "")
	write("1", self, hostNS)
	write("2", self, hostNS) // the host's namespace again: read once
	// A container that mounts the whole tree, and one that mounts a
	// directory in another tree, and the current tree.
	write("100", "300 299 0:50 / / rw - overlay overlay rw\n"+
		"301 300 8:2 /driver/570.86.15-aaaa /usr/local/nvidia ro - ext4 /dev/sda2 rw\n"+
		"302 300 8:2 /driver/580.159.04-cccc /opt/x ro - ext4 /dev/sda2 rw\n", ctrA)
	write("200", "400 399 0:51 / / rw - overlay overlay rw\n"+
		"401 400 8:2 /driver/575.51.03-bbbb/lib64 /usr/lib64/nvidia ro - ext4 /dev/sda2 rw\n"+
		// the same path on another device is not the tree
		"402 400 8:9 /driver/550.54.14-dddd /elsewhere ro - ext4 /dev/sdb1 rw\n", ctrB)
	if err := os.MkdirAll(filepath.Join(proc, "sys"), 0o755); err != nil { // not a process
		t.Fatal(err)
	}

	removed, mounted, err := prune(dir, current, proc)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(removed, []string{unused}) || !slices.Equal(mounted, []string{whole, sub}) {
		t.Errorf("removed %v, kept as mounted %v; want %v removed, %v kept", removed, mounted, []string{unused}, []string{whole, sub})
	}
	for _, p := range []string{current, whole, sub} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s: %v, want it kept", p, err)
		}
	}
	for _, p := range []string{unused, stale} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s is still there", p)
		}
	}
}
