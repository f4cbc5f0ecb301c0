package sim

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"golang.org/x/sys/unix"

	"github.com/gpumux/gpumux/internal/inotify"
)

// Events are injected into the persisted event log (InjectXid,
// InjectMigXid), so any process that opened the node receives them. An event
// set receives the events of the GPUs it is registered on that were injected
// after the registration, like NVML.

// eventPoll is how often Wait rereads the state file where it cannot be
// told of the file's changes (no inotify instance to be had, or another
// Wait of the set has it); eventRecheck how often it rereads the file
// when it can, should a change go untold.
const (
	eventPoll    = 20 * time.Millisecond
	eventRecheck = time.Second
)

type eventSet struct {
	funcEventSet
	n *Node
	// changes tells Wait of the state file's replacements, so that it
	// sleeps until one, as nvmlEventSetWait sleeps in the driver, where
	// it would otherwise reread the file every eventPoll: 50 wakeups a
	// second of a process that watches for XIDs (gpumux agent, the Nomad
	// plugin), which cost a 2-core machine more CPU than the containers'
	// creates they serve. nil: polling.
	changes *fileChanges

	mu     sync.Mutex
	regs   map[int]registration // by GPU index
	cursor uint64               // last event sequence looked at
	freed  bool
}

type registration struct {
	mask  uint64
	after uint64 // deliver only events with a larger sequence number
}

var _ nvml.EventSet = (*eventSet)(nil)

func (n *Node) eventSetCreate() (nvml.EventSet, nvml.Return) {
	if _, ret := ifInit(n, 0); ret != nvml.SUCCESS {
		return nil, ret
	}
	es := &eventSet{n: n, regs: map[int]registration{}}
	es.changes, _ = watchFile(n.statePath) // nil: Wait polls
	es.WaitFunc = es.wait
	es.FreeFunc = es.free
	return es, nvml.SUCCESS
}

// registerEvents adds the GPU to the event set for the given event types
// (ERROR_NOT_SUPPORTED if some type is not supported).
func (d *gpu) registerEvents(types uint64, set nvml.EventSet) nvml.Return {
	es, ok := set.(*eventSet)
	return d.n.view(func(st *state) nvml.Return {
		if !ok || es == nil || es.n != d.n {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		if types&^uint64(supportedEvents) != 0 {
			return nvml.ERROR_NOT_SUPPORTED
		}
		es.mu.Lock()
		defer es.mu.Unlock()
		if es.freed {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		r, ok := es.regs[d.idx]
		if !ok {
			r.after = st.NextEventSeq - 1
		}
		r.mask |= types
		es.regs[d.idx] = r
		return nvml.SUCCESS
	})
}

// wait returns the next event, or ERROR_TIMEOUT after timeoutMs.
func (es *eventSet) wait(timeoutMs uint32) (nvml.EventData, nvml.Return) {
	deadline := time.Now().Add(time.Duration(timeoutMs) * time.Millisecond)
	for {
		data, found, ret := es.poll()
		if ret != nvml.SUCCESS || found {
			return data, ret
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nvml.EventData{}, nvml.ERROR_TIMEOUT
		}
		if es.changes != nil && es.changes.wait(time.Now().Add(min(left, eventRecheck))) {
			continue // changed, or the time is up: reread
		}
		time.Sleep(min(left, eventPoll))
	}
}

func (es *eventSet) poll() (data nvml.EventData, found bool, ret nvml.Return) {
	ret = es.n.view(func(st *state) nvml.Return {
		es.mu.Lock()
		defer es.mu.Unlock()
		if es.freed {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		for _, e := range st.Events {
			if e.Seq <= es.cursor {
				continue
			}
			es.cursor = e.Seq
			r, ok := es.regs[e.GPU]
			if !ok || e.Seq <= r.after || e.Type&r.mask == 0 || e.GPU >= len(es.n.gpus) {
				continue
			}
			data = nvml.EventData{
				Device:            es.n.gpus[e.GPU],
				EventType:         e.Type,
				EventData:         e.Data,
				GpuInstanceId:     e.GI,
				ComputeInstanceId: e.CI,
			}
			found = true
			return nvml.SUCCESS
		}
		return nvml.SUCCESS
	})
	return data, found, ret
}

func (es *eventSet) free() nvml.Return {
	es.mu.Lock()
	defer es.mu.Unlock()
	if es.freed {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	es.freed = true
	if es.changes != nil {
		es.changes.close()
	}
	return nvml.SUCCESS
}

// fileChanges watches one file for replacements (a rename onto it, as
// writeFileAtomic does) and writes, through an inotify instance on its
// directory.
type fileChanges struct {
	f    *os.File // the inotify instance, non-blocking: read through the runtime's poller
	name string

	mu  sync.Mutex // one wait at a time: the read deadline and buf are the wait's
	buf []byte
}

// watchFile starts watching the file at path.
func watchFile(path string) (*fileChanges, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "inotify")
	if _, err := unix.InotifyAddWatch(fd, filepath.Dir(path), unix.IN_MOVED_TO|unix.IN_CLOSE_WRITE); err != nil {
		f.Close()
		return nil, err
	}
	return &fileChanges{f: f, name: filepath.Base(path), buf: make([]byte, inotify.BufSize(16))}, nil
}

// wait returns true when the file changed since the last wait (or since
// the watch began), or at deadline: the caller rereads the file either
// way. It returns false at once when it cannot tell (the watch closed or
// failed, or another wait has it): the caller then polls. Events of the
// directory's other files are read and passed over.
func (c *fileChanges) wait(deadline time.Time) bool {
	if !c.mu.TryLock() {
		return false
	}
	defer c.mu.Unlock()
	if c.f.SetReadDeadline(deadline) != nil {
		return false
	}
	for {
		n, err := c.f.Read(c.buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return true
		}
		if err != nil {
			return false
		}
		changed := false
		inotify.Each(c.buf[:n], func(ev inotify.Event) {
			changed = changed || ev.Mask&unix.IN_Q_OVERFLOW != 0 || ev.Name == c.name
		})
		if changed {
			return true
		}
	}
}

// close ends the watch; a wait blocked on it returns.
func (c *fileChanges) close() { c.f.Close() }
