package inotify

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// TestEach reads what a real inotify instance returns for a file made, one
// with a long name renamed in (NUL padding after each name), and a file
// of the directory removed, and stops at a record cut short.
func TestEach(t *testing.T) {
	dir := t.TempDir()
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		t.Skipf("no inotify instance to be had: %v", err)
	}
	defer unix.Close(fd)
	wd, err := unix.InotifyAddWatch(fd, dir, unix.IN_CREATE|unix.IN_MOVED_TO|unix.IN_DELETE)
	if err != nil {
		t.Fatal(err)
	}
	long := "a-name-longer-than-sixteen-bytes.json"
	for _, step := range []func() error{
		func() error { return os.WriteFile(filepath.Join(dir, "x"), nil, 0o644) },
		func() error { return os.Rename(filepath.Join(dir, "x"), filepath.Join(dir, long)) },
		func() error { return os.Remove(filepath.Join(dir, long)) },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	buf := make([]byte, BufSize(16))
	n, err := unix.Read(fd, buf)
	if err != nil {
		t.Fatal(err)
	}
	var got []Event
	Each(buf[:n], func(e Event) { got = append(got, e) })
	want := []Event{
		{Wd: int32(wd), Mask: unix.IN_CREATE, Name: "x"},
		{Wd: int32(wd), Mask: unix.IN_MOVED_TO, Name: long},
		{Wd: int32(wd), Mask: unix.IN_DELETE, Name: long},
	}
	if !slices.Equal(got, want) {
		t.Errorf("events %+v, want %+v", got, want)
	}

	got = nil
	Each(buf[:n-1], func(e Event) { got = append(got, e) })
	if !slices.Equal(got, want[:2]) {
		t.Errorf("with the last record cut short: events %+v, want %+v", got, want[:2])
	}
}
