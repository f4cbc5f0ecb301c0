package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gpumux/gpumux/remote/proto"
	"github.com/gpumux/gpumux/remote/server"
)

// Source is what the metrics and the health come from: a server.Server.
type Source interface {
	Stats() server.Stats
	// Health is nil when the server takes clients, else why not.
	Health() error
}

// Serve serves src's metrics, and the Go runtime's and this process's,
// at /metrics on ln, and src's health at /healthz, until ctx ends, then
// closes ln and returns nil. It returns an error if serving fails before.
func Serve(ctx context.Context, ln net.Listener, src Source) error {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", handler(src))
	mux.Handle("GET /healthz", healthHandler(src))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	stop := context.AfterFunc(ctx, func() { hs.Close() })
	defer stop()
	if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("metrics on %s: %w", ln.Addr(), err)
	}
	return nil
}

// handler serves the metrics from a registry of its own.
func handler(src Source) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		newCollector(src),
	)
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}

// healthHandler answers 200 "ok" while src takes clients, else 503 and
// the reason, as plain text.
func healthHandler(src Source) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if err := src.Health(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, err)
			return
		}
		fmt.Fprintln(w, "ok")
	})
}

const ns = "gpumux_remote"

var (
	sessionsDesc = prometheus.NewDesc(ns+"_sessions",
		"Clients connected, by tenant (token ID; \"\" for clients without one).", []string{"tenant"}, nil)
	callsDesc = prometheus.NewDesc(ns+"_calls_total",
		"Forwarded CUDA driver calls run, by call and by result (ok or error: what the client got back).", []string{"call", "result"}, nil)
	latencyDesc = prometheus.NewDesc(ns+"_call_duration_seconds",
		"How long the server took to run a call (an asynchronous one: to queue it), by call.", []string{"call"}, nil)
	bytesDesc = prometheus.NewDesc(ns+"_copy_bytes_total",
		"Host data moved by memory copies, by direction (host_to_device, device_to_host).", []string{"direction"}, nil)
	memoryDesc = prometheus.NewDesc(ns+"_memory_used_bytes",
		"Device memory the tenant's clients allocated, as counted against its quota.", []string{"tenant"}, nil)
	quotaDesc = prometheus.NewDesc(ns+"_memory_quota_bytes",
		"The tenant's device memory quota (tenants with one).", []string{"tenant"}, nil)
	refusedDesc = prometheus.NewDesc(ns+"_handshakes_refused_total",
		"Connections refused at the handshake, by reason.", []string{"reason"}, nil)
	admissionsDesc = prometheus.NewDesc(ns+"_admissions_refused_total",
		"Token IDs refused because their quota would overcommit the GPU's memory, by GPU (the server's device ordinal).", []string{"gpu"}, nil)
	handshakesDesc = prometheus.NewDesc(ns+"_handshakes",
		"Connections whose handshake is under way.", nil, nil)
	workersDesc = prometheus.NewDesc(ns+"_workers",
		"Tenant worker processes running.", nil, nil)
	workerStartsDesc = prometheus.NewDesc(ns+"_worker_starts_total",
		"Tenant worker processes started.", nil, nil)
	workerDeathsDesc = prometheus.NewDesc(ns+"_worker_deaths_total",
		"Tenant worker processes that exited while serving their tenant (crashed or killed).", nil, nil)
)

// collector turns a snapshot of a server's statistics into metrics at
// each scrape.
type collector struct {
	src     Source
	buckets []float64 // server.LatencyBuckets
}

func newCollector(src Source) *collector {
	return &collector{src: src, buckets: server.LatencyBuckets()}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{sessionsDesc, callsDesc, latencyDesc, bytesDesc, memoryDesc, quotaDesc,
		refusedDesc, admissionsDesc, handshakesDesc, workersDesc, workerStartsDesc, workerDeathsDesc} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	st := c.src.Stats()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	for op, cs := range st.Calls {
		name := proto.Calls[op].Name
		counter(callsDesc, cs.OK, name, "ok")
		counter(callsDesc, cs.Failed, name, "error")
		ch <- c.histogram(cs, name)
	}
	counter(bytesDesc, st.BytesToDevice, "host_to_device")
	counter(bytesDesc, st.BytesToHost, "device_to_host")
	for id, t := range st.Tenants {
		gauge(sessionsDesc, float64(t.Sessions), id)
		gauge(memoryDesc, float64(t.MemoryUsed), id)
		if t.Quota > 0 {
			gauge(quotaDesc, float64(t.Quota), id)
		}
	}
	for reason, n := range st.Refused {
		counter(refusedDesc, n, reason)
	}
	for dev, n := range st.AdmissionsRefused {
		counter(admissionsDesc, n, strconv.Itoa(dev))
	}
	gauge(handshakesDesc, float64(st.Handshakes))
	gauge(workersDesc, float64(st.Workers))
	counter(workerStartsDesc, st.WorkerStarts)
	counter(workerDeathsDesc, st.WorkerDeaths)
}

// histogram makes a call's latency histogram: Prometheus's buckets are
// cumulative, the server's not.
func (c *collector) histogram(cs server.CallStats, call string) prometheus.Metric {
	buckets := make(map[float64]uint64, len(c.buckets))
	var count uint64
	for i, n := range cs.Latency {
		count += n
		if i < len(c.buckets) {
			buckets[c.buckets[i]] = count
		}
	}
	return prometheus.MustNewConstHistogram(latencyDesc, count, cs.Time.Seconds(), buckets, call)
}
