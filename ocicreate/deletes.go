package ocicreate

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/gpumux/gpumux/internal/inotify"
)

// deletes tells the server when runc deletes a container it prepared, so
// that the container's shares go back without a poststop hook: runc keeps
// a container's state in ROOT/ID (runc --root) and removes that directory
// when it deletes the container, after the container's processes are
// killed and its cgroup destroyed, just before it would run the poststop
// hooks. The server watches each runc root it prepares a container under
// (inotify, IN_DELETE of a directory) and is told of the IDs it prepared
// there; the kernel queues the event as runc removes the directory, and
// runc starts no hook process for the container (up to a few
// milliseconds of a container's start, by the machine: docs/benchmarks.md).
//
// Events are read and acted on under one lock, so sync sees every event
// the kernel queued before it was called: a create of a container ID that
// was just deleted (Docker's restart reuses it) calls sync first, and so
// finds the old container's release started and waits for it.
//
// What no event reaches (the queue overflowed, a root removed or
// unmounted) is checked at once: a container whose state directory was
// seen (IN_CREATE, or there when it was expected) and is gone is gone; one
// runc has not made yet is left alone. What the server never saw (the
// agent was not running when runc deleted the container, a root that
// went) the lease store's reclaim gives back at the next create and at
// the agent's every period.
type deletes struct {
	mu     sync.Mutex
	fd     int // the inotify instance, non-blocking; -1 once closed
	file   *os.File
	conn   syscall.RawConn
	roots  map[int32]string // watch → the runc root it watches
	byRoot map[string]rootWatch
	// want are the containers prepared here, by root's watch and ID: true
	// once runc made the container's state directory.
	want map[watched]bool
	// gone is told of a prepared container runc deleted, under the lock
	// (it must start the release before the next sync returns).
	gone func(id string)
	buf  []byte
}

// watched is a container prepared under a watched runc root.
type watched struct {
	wd int32
	id string
}

// rootWatch is a root's watch and the directory it watches (a path that
// names another directory since is watched anew).
type rootWatch struct {
	wd       int32
	dev, ino uint64
}

// watchMask: a directory in the runc root made or removed.
const watchMask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_ONLYDIR

func newDeletes(gone func(id string)) (*deletes, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	f := os.NewFile(uintptr(fd), "inotify")
	conn, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("inotify: %w", err)
	}
	return &deletes{
		fd: fd, file: f, conn: conn, roots: map[int32]string{}, byRoot: map[string]rootWatch{}, want: map[watched]bool{},
		gone: gone, buf: make([]byte, inotify.BufSize(64)),
	}, nil
}

// run acts on events as they come, until close.
func (d *deletes) run() {
	for {
		err := d.conn.Read(func(uintptr) bool {
			d.mu.Lock()
			defer d.mu.Unlock()
			return d.drainLocked() // false: nothing queued, wait for some
		})
		if err != nil {
			return // closed
		}
	}
}

// sync acts on every event queued so far.
func (d *deletes) sync() {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.drainLocked()
}

// drainLocked reads and acts on the events queued; it says whether there
// were any.
func (d *deletes) drainLocked() bool {
	some := false
	for d.fd >= 0 {
		n, err := unix.Read(d.fd, d.buf)
		if err == unix.EINTR {
			continue
		}
		if n <= 0 || err != nil {
			break // EAGAIN: the queue is empty
		}
		some = true
		d.handleLocked(d.buf[:n])
	}
	return some
}

// handleLocked acts on a read of inotify events.
func (d *deletes) handleLocked(b []byte) { inotify.Each(b, d.eventLocked) }

func (d *deletes) eventLocked(ev inotify.Event) {
	switch {
	case ev.Mask&unix.IN_Q_OVERFLOW != 0:
		// Events were lost: look at every container prepared here.
		d.checkLocked(func(watched) bool { return true })
	case ev.Mask&unix.IN_IGNORED != 0:
		// The root went (removed, unmounted), and its containers' state
		// with it; what is left there cannot be watched: the reclaim's.
		d.checkLocked(func(w watched) bool { return w.wd == ev.Wd })
		for w := range d.want {
			if w.wd == ev.Wd {
				delete(d.want, w)
			}
		}
		for root, rw := range d.byRoot {
			if rw.wd == ev.Wd {
				delete(d.byRoot, root)
			}
		}
		delete(d.roots, ev.Wd)
	case ev.Mask&unix.IN_ISDIR == 0:
	case ev.Mask&unix.IN_CREATE != 0:
		if w := (watched{ev.Wd, ev.Name}); d.hasLocked(w) {
			d.want[w] = true
		}
	case ev.Mask&unix.IN_DELETE != 0:
		if w := (watched{ev.Wd, ev.Name}); d.hasLocked(w) {
			delete(d.want, w)
			d.gone(ev.Name)
		}
	}
}

func (d *deletes) hasLocked(w watched) bool {
	_, ok := d.want[w]
	return ok
}

// checkLocked looks at the containers of which: one whose state directory
// was seen and is gone is told to gone; one whose directory is there now
// is marked seen.
func (d *deletes) checkLocked(which func(watched) bool) {
	for w, seen := range d.want {
		if !which(w) {
			continue
		}
		_, err := os.Lstat(filepath.Join(d.roots[w.wd], w.id))
		switch {
		case err == nil:
			d.want[w] = true
		case seen && errors.Is(err, os.ErrNotExist):
			delete(d.want, w)
			d.gone(w.id)
		}
	}
}

// watch watches root (runc --root) for the deletes of the containers
// prepared under it; it returns the watch, or an error where it cannot
// (no such directory yet: runc makes it at its first container).
func (d *deletes) watch(root string) (int32, error) {
	if d == nil {
		return 0, errors.New("no inotify")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fd < 0 {
		return 0, errors.New("closed")
	}
	var st unix.Stat_t
	if err := unix.Stat(root, &st); err != nil {
		return 0, fmt.Errorf("watching runc's root %s: %w", root, err)
	}
	if rw, ok := d.byRoot[root]; ok && rw.dev == st.Dev && rw.ino == st.Ino {
		return rw.wd, nil
	}
	wd, err := unix.InotifyAddWatch(d.fd, root, watchMask)
	if err != nil {
		return 0, fmt.Errorf("watching runc's root %s: %w", root, err)
	}
	// Another path of a root already watched (a link on the way) is the
	// same watch; its containers keep the path they were prepared with.
	if _, ok := d.roots[int32(wd)]; !ok {
		d.roots[int32(wd)] = root
	}
	d.byRoot[root] = rootWatch{int32(wd), st.Dev, st.Ino}
	return int32(wd), nil
}

// expect records container id, prepared under the root of watch wd
// (seen: its state directory is there already): its delete is told to
// gone.
func (d *deletes) expect(wd int32, id string, seen bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fd >= 0 {
		d.want[watched{wd, id}] = seen
	}
}

// present says whether container id, under runc root root, is one
// prepared here whose state directory runc made and whose delete has not
// been read: alive, without a look at runc's state (a delete queued since
// is acted on at the next read, and gives its shares back then).
func (d *deletes) present(root, id string) bool {
	if d == nil {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	rw, ok := d.byRoot[root]
	return ok && d.want[watched{rw.wd, id}]
}

// close stops the watching; run returns.
func (d *deletes) close() {
	if d == nil {
		return
	}
	d.mu.Lock()
	d.fd = -1
	d.mu.Unlock()
	d.file.Close()
}
