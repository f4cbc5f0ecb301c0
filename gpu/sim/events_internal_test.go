package sim

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"golang.org/x/sys/unix"
)

// TestFileChanges: a Wait of an event set sleeps until the state file is
// replaced (as writeFileAtomic replaces it) or written, not polling it:
// a write of another file of the directory does not end the wait, the
// deadline does, a replacement does at once, one made before the wait is
// not lost, a second wait at the same time is told to poll, and closing
// the watch ends a wait blocked on it.
func TestFileChanges(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	if err := os.WriteFile(path, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := watchFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "lock"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if !c.wait(start.Add(100 * time.Millisecond)) {
		t.Error("the wait's deadline did not end it as a time to reread")
	}
	if took := time.Since(start); took < 90*time.Millisecond {
		t.Errorf("a write of another file ended the wait after %v, before its deadline", took)
	}

	if err := writeFileAtomic(path, []byte("{ }"), 0o644, nil); err != nil {
		t.Fatal(err)
	}
	if !c.wait(time.Now().Add(10 * time.Second)) {
		t.Error("a replacement made before the wait was not seen")
	}
	go func() {
		time.Sleep(50 * time.Millisecond)
		if err := os.WriteFile(path, []byte("{  }"), 0o644); err != nil {
			t.Error(err)
		}
	}()
	if !c.wait(time.Now().Add(10 * time.Second)) {
		t.Error("a write of the file during the wait was not seen")
	}

	done := make(chan bool)
	go func() { done <- c.wait(time.Now().Add(time.Minute)) }()
	time.Sleep(50 * time.Millisecond)
	if c.wait(time.Now().Add(time.Minute)) {
		t.Error("a second wait at the same time waited on the watch")
	}
	c.close()
	select {
	case changed := <-done:
		if changed {
			t.Error("a closed watch reported a change")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("closing the watch did not end the wait")
	}
}

// TestEventSetWatchesTheStateFile: an event set of a node waits on the
// state file's changes, not by polling it.
func TestEventSetWatchesTheStateFile(t *testing.T) {
	if fd, err := unix.InotifyInit1(unix.IN_CLOEXEC); err != nil {
		t.Skipf("no inotify instance to be had (%v): event sets poll", err)
	} else {
		unix.Close(fd)
	}
	n, err := Open("dgxh100", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	lib := n.NVML()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		t.Fatalf("Init: %v", ret)
	}
	defer lib.Shutdown()
	set, ret := lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		t.Fatalf("EventSetCreate: %v", ret)
	}
	if es, ok := set.(*eventSet); !ok || es.changes == nil {
		t.Fatalf("event set %T watches nothing", set)
	}
	set.Free()
}
