package server

import (
	"math/bits"
	"slices"
	"sync/atomic"
	"time"

	"github.com/gpumux/gpumux/remote/proto"
)

// Statistics. Every process counts what it does in atomic counters: the
// sessions count their calls and copies, the front its refused handshakes
// and admissions and its workers. Stats is a snapshot of them. With tenant
// processes the calls happen in the workers, so each worker sends its
// snapshot to the front over the control socket every statsInterval while
// it changes, and with the message that says it is idle; the front keeps
// each worker's last one and, when the worker exits (idle or dead), adds
// its counters to those of the workers gone before, so no counter a worker
// reported goes down. Server.Stats on the front is thus the same in both
// modes, at most statsInterval behind with workers.

// statsInterval is how often a worker reports changed statistics.
const statsInterval = 250 * time.Millisecond

// Stats is a snapshot of a server's statistics: counters since it started
// (including those its exited tenant workers reported) and gauges of now.
type Stats struct {
	// Calls counts the forwarded calls by op, for ops called at least once.
	Calls map[proto.Op]CallStats `json:"calls,omitempty"`
	// BytesToDevice and BytesToHost are the host data moved by copies
	// (cuMemcpyHtoD*, cuMemcpyDtoH*).
	BytesToDevice uint64 `json:"h2d,omitempty"`
	BytesToHost   uint64 `json:"d2h,omitempty"`
	// Tenants are the token IDs with sessions now; clients without an ID
	// (WithInsecureNoAuth) are tenant "".
	Tenants map[string]TenantStats `json:"tenants,omitempty"`
	// Refused counts the refused handshakes by reason: every one of
	// RefusalReasons is present.
	Refused map[string]uint64 `json:"refused,omitempty"`
	// AdmissionsRefused counts the handshakes refused because the token's
	// quota would overcommit its GPU, by the backend's device ordinal;
	// every device is present.
	AdmissionsRefused map[int]uint64 `json:"admissions_refused,omitempty"`
	// Handshakes is the number of connections whose handshake is under
	// way (limits.go).
	Handshakes int `json:"handshakes,omitempty"`
	// Workers is the number of tenant worker processes running;
	// WorkerStarts counts those started, WorkerDeaths those that exited
	// while serving their tenant (a crash or a kill, not an idle exit or
	// the server's stop).
	Workers      int    `json:"workers,omitempty"`
	WorkerStarts uint64 `json:"worker_starts,omitempty"`
	WorkerDeaths uint64 `json:"worker_deaths,omitempty"`
}

// CallStats counts the calls of one op.
type CallStats struct {
	// OK and Failed count the calls by what the client got back: a
	// synchronous call's result (an earlier asynchronous call's failure it
	// reports is a failure), an asynchronous call's own result. A call
	// that broke the protocol failed.
	OK     uint64 `json:"ok,omitempty"`
	Failed uint64 `json:"failed,omitempty"`
	// Latency counts the calls by how long the server took to run them
	// (an asynchronous one: to queue it), in the buckets of LatencyBuckets:
	// Latency[i] counts those over LatencyBuckets()[i-1] and at most
	// LatencyBuckets()[i]; the last element those over the last bound.
	Latency []uint64 `json:"latency"`
	// Time is the calls' total latency.
	Time time.Duration `json:"time"`
}

// TenantStats is one tenant's sessions and device memory.
type TenantStats struct {
	Sessions int `json:"sessions"`
	// MemoryUsed is the memory its clients allocated (cuMemAlloc, as
	// counted against the quota); Quota its quota, 0 for none.
	MemoryUsed uint64 `json:"memory_used,omitempty"`
	Quota      uint64 `json:"quota,omitempty"`
}

// Latency buckets: latencyBase doubling, latencyBuckets bounds
// (5µs to about 10.5s).
const (
	latencyBase    = 5 * time.Microsecond
	latencyBuckets = 22
)

// LatencyBuckets returns the upper bounds, in seconds, of the latency
// buckets of CallStats.
func LatencyBuckets() []float64 {
	b := make([]float64, latencyBuckets)
	for i := range b {
		b[i] = (latencyBase << i).Seconds()
	}
	return b
}

// latencyBucket returns the bucket of a call that took d: the first bound
// at or over d.
func latencyBucket(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	return min(bits.Len64(uint64((d-1)/latencyBase)), latencyBuckets)
}

// Why handshakes are refused: the reason label of the metric.
type refusal uint8

const (
	refusedTimeout    refusal = iota // no handshake within the timeout
	refusedEvicted                   // closed to make room for newer handshakes
	refusedClosed                    // the connection ended or failed first
	refusedMalformed                 // not a handshake, or an undecodable one
	refusedVersion                   // another protocol version
	refusedNoToken                   // no token
	refusedBadToken                  // a token that does not check out
	refusedExpired                   // an expired token
	refusedNoSuchGPU                 // a token naming a GPU the server lacks
	refusedFull                      // the server serves its limit of clients
	refusedTenantFull                // the token ID has its limit of connections
	refusedAdmission                 // the quota would overcommit the GPU
	refusedWorker                    // the tenant's worker would not start
	refusedTLS                       // the TLS handshake failed (no TLS, a certificate refused)
	numRefusals
)

var refusalNames = [numRefusals]string{
	refusedTimeout:    "timeout",
	refusedEvicted:    "evicted",
	refusedClosed:     "closed",
	refusedMalformed:  "malformed",
	refusedVersion:    "version",
	refusedNoToken:    "no_token",
	refusedBadToken:   "bad_token",
	refusedExpired:    "expired",
	refusedNoSuchGPU:  "no_such_gpu",
	refusedFull:       "too_many_clients",
	refusedTenantFull: "too_many_tenant_connections",
	refusedAdmission:  "admission",
	refusedWorker:     "worker_failed",
	refusedTLS:        "tls",
}

// RefusalReasons returns the reasons Stats.Refused counts.
func RefusalReasons() []string { return slices.Clone(refusalNames[:]) }

// counters are one process's statistics as they happen.
type counters struct {
	calls         []opCounters // by proto.Op
	bytesToDevice atomic.Uint64
	bytesToHost   atomic.Uint64
	refused       [numRefusals]atomic.Uint64
	admissions    []atomic.Uint64 // refused, by device; made by Server.ready
	workerStarts  atomic.Uint64
	workerDeaths  atomic.Uint64
}

// opCounters are one op's.
type opCounters struct {
	ok, failed atomic.Uint64
	latency    [latencyBuckets + 1]atomic.Uint64
	time       atomic.Int64 // nanoseconds
}

func newCounters() *counters {
	maxOp := slices.Max(slices.Collect(func(yield func(proto.Op) bool) {
		for op := range proto.Calls {
			if !yield(op) {
				return
			}
		}
	}))
	return &counters{calls: make([]opCounters, maxOp+1)}
}

// call counts one call of op (one of proto.Calls) that took d.
func (c *counters) call(op proto.Op, d time.Duration, failed bool) {
	oc := &c.calls[op]
	oc.latency[latencyBucket(d)].Add(1)
	oc.time.Add(int64(d))
	if failed {
		oc.failed.Add(1)
	} else {
		oc.ok.Add(1)
	}
}

// snapshot returns the counters as Stats (without tenants and workers).
func (c *counters) snapshot() Stats {
	st := Stats{
		Calls:             map[proto.Op]CallStats{},
		BytesToDevice:     c.bytesToDevice.Load(),
		BytesToHost:       c.bytesToHost.Load(),
		Refused:           make(map[string]uint64, numRefusals),
		AdmissionsRefused: make(map[int]uint64, len(c.admissions)),
		WorkerStarts:      c.workerStarts.Load(),
		WorkerDeaths:      c.workerDeaths.Load(),
	}
	for op := range c.calls {
		oc := &c.calls[op]
		cs := CallStats{OK: oc.ok.Load(), Failed: oc.failed.Load(), Time: time.Duration(oc.time.Load())}
		if cs.OK+cs.Failed == 0 {
			continue
		}
		cs.Latency = make([]uint64, len(oc.latency))
		for i := range oc.latency {
			cs.Latency[i] = oc.latency[i].Load()
		}
		st.Calls[proto.Op(op)] = cs
	}
	for r, name := range refusalNames {
		st.Refused[name] = c.refused[r].Load()
	}
	for dev := range c.admissions {
		st.AdmissionsRefused[dev] = c.admissions[dev].Load()
	}
	return st
}

// add adds o's counters and gauges to st's.
func (st *Stats) add(o Stats) {
	for op, oc := range o.Calls {
		if st.Calls == nil {
			st.Calls = map[proto.Op]CallStats{}
		}
		cs := st.Calls[op]
		cs.OK += oc.OK
		cs.Failed += oc.Failed
		cs.Time += oc.Time
		if cs.Latency == nil {
			cs.Latency = make([]uint64, latencyBuckets+1)
		}
		for i := range min(len(cs.Latency), len(oc.Latency)) {
			cs.Latency[i] += oc.Latency[i]
		}
		st.Calls[op] = cs
	}
	st.BytesToDevice += o.BytesToDevice
	st.BytesToHost += o.BytesToHost
	for id, ot := range o.Tenants {
		if st.Tenants == nil {
			st.Tenants = map[string]TenantStats{}
		}
		st.Tenants[id] = st.Tenants[id].plus(ot)
	}
	st.Refused = addCounts(st.Refused, o.Refused)
	st.AdmissionsRefused = addCounts(st.AdmissionsRefused, o.AdmissionsRefused)
	st.Workers += o.Workers
	st.WorkerStarts += o.WorkerStarts
	st.WorkerDeaths += o.WorkerDeaths
}

func (t TenantStats) plus(o TenantStats) TenantStats {
	return TenantStats{Sessions: t.Sessions + o.Sessions, MemoryUsed: t.MemoryUsed + o.MemoryUsed, Quota: t.Quota + o.Quota}
}

func addCounts[K comparable](dst, src map[K]uint64) map[K]uint64 {
	for k, n := range src {
		if dst == nil {
			dst = map[K]uint64{}
		}
		dst[k] += n
	}
	return dst
}

// Stats returns the server's statistics. With tenant processes they
// include what its workers last reported (at most statsInterval ago) and
// the counters of its workers that have exited.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.counts.snapshot() // under s.mu: the admission counters are set up when Serve starts
	for _, q := range s.quotas {
		q.addTo(&st)
	}
	for q := range s.anonQuotas {
		q.addTo(&st)
	}
	st.add(s.retired)
	for t := range s.workers {
		st.add(t.last)
	}
	st.Workers = len(s.workers)
	st.Handshakes = len(s.handshakes)
	return st
}

// addTo adds the quota's sessions and memory to its tenant's in st.
func (q *quota) addTo(st *Stats) {
	q.mu.Lock()
	t := TenantStats{Sessions: q.refs, MemoryUsed: q.used, Quota: q.limit}
	q.mu.Unlock()
	st.add(Stats{Tenants: map[string]TenantStats{q.id: t}})
}
