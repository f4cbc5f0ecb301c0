package sim

import (
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Events are injected into the persisted event log (InjectXid,
// InjectMigXid), so any process that opened the node receives them. An event
// set receives the events of the GPUs it is registered on that were injected
// after the registration, like NVML.

// eventPoll is how often Wait rereads the state file.
const eventPoll = 20 * time.Millisecond

type eventSet struct {
	funcEventSet
	n *Node

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
	return nvml.SUCCESS
}
