package node

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gpumux/gpumux/gpu"
)

// The node's metrics (Prometheus text format at /metrics of metrics_addr).
// Every name starts with gpumux_; docs/metrics.md lists them.
var (
	descGPUInfo      = prometheus.NewDesc("gpumux_gpu_info", "A GPU of the node (value 1).", []string{"gpu", "uuid", "model"}, nil)
	descGPUHealthy   = prometheus.NewDesc("gpumux_gpu_healthy", "1 while no critical XID was seen on the GPU since the agent started.", []string{"gpu", "uuid"}, nil)
	descGPUXIDs      = prometheus.NewDesc("gpumux_gpu_xid_errors_total", "Critical XID errors seen on the GPU (its MIG instances included) since the agent started.", []string{"gpu", "uuid"}, nil)
	descGPUMemUsed   = prometheus.NewDesc("gpumux_gpu_memory_used_bytes", "Device memory in use on the GPU.", []string{"gpu", "uuid"}, nil)
	descGPUMemTotal  = prometheus.NewDesc("gpumux_gpu_memory_total_bytes", "Device memory of the GPU.", []string{"gpu", "uuid"}, nil)
	descGPUUtil      = prometheus.NewDesc("gpumux_gpu_utilization_percent", "GPU utilization over NVML's last sample period.", []string{"gpu", "uuid"}, nil)
	descMIGInstances = prometheus.NewDesc("gpumux_mig_instances", "MIG instances on the GPU, by profile.", []string{"gpu", "uuid", "profile"}, nil)
	descShareInfo    = prometheus.NewDesc("gpumux_share_info", "A share the node offers (value 1): its group, mechanism and the device it runs on.", []string{"share", "group", "mechanism", "device"}, nil)
	descShareHealthy = prometheus.NewDesc("gpumux_share_healthy", "1 while the share can be handed out.", []string{"share"}, nil)
	descShareMemory  = prometheus.NewDesc("gpumux_share_memory_limit_bytes", "The share's memory (what it advertises and, where the mechanism enforces it, its limit).", []string{"share"}, nil)
	descShareUsed    = prometheus.NewDesc("gpumux_share_memory_used_bytes", "Device memory in use on the share's device (its MIG instance, else its GPU: shares of one device report the same).", []string{"share"}, nil)
	descShareUtil    = prometheus.NewDesc("gpumux_share_utilization_percent", "Utilization of the share's device (its GPU's for replicas and MPS shares).", []string{"share"}, nil)
	descShareHeld    = prometheus.NewDesc("gpumux_share_held", "1 for each holder of a held share: a container (gpumux-runtime lease) or a Nomad allocation.", []string{"share", "holder"}, nil)
	descLeases       = prometheus.NewDesc("gpumux_leases_held", "Shares held by containers in the node's lease store.", nil, nil)
	descScrapeErrors = prometheus.NewDesc("gpumux_scrape_errors", "Parts of the node that could not be read for this scrape, by part.", []string{"part"}, nil)
)

// collectTimeout bounds one scrape's reads (NVML, the lease store, Nomad).
const collectTimeout = 5 * time.Second

// collector reads the node at each scrape.
type collector struct {
	n       *Node
	holders []HoldersOption
}

// Collectors returns the node's metrics: the core's (GPUs, shares,
// holders, leases) and each mechanism's that has some (a provider that is a
// prometheus.Collector, e.g. the MPS daemons'). holders says whom to ask
// who holds the shares besides the lease store (AskNomad).
func (n *Node) Collectors(holders ...HoldersOption) []prometheus.Collector {
	out := []prometheus.Collector{collector{n: n, holders: holders}}
	for _, p := range n.providers {
		if c, ok := p.(prometheus.Collector); ok {
			out = append(out, c)
		}
	}
	return out
}

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descGPUInfo, descGPUHealthy, descGPUXIDs, descGPUMemUsed, descGPUMemTotal, descGPUUtil,
		descMIGInstances, descShareInfo, descShareHealthy, descShareMemory, descShareUsed, descShareUtil, descShareHeld, descLeases, descScrapeErrors} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), collectTimeout)
	defer cancel()
	n := c.n
	fail := func(part string) {
		ch <- prometheus.MustNewConstMetric(descScrapeErrors, prometheus.GaugeValue, 1, part)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	usage, err := n.host.Usage(ctx)
	if err != nil {
		n.logger.Debug("metrics: GPU usage", "error", err)
		fail("usage")
	}
	inv, err := n.host.Inventory(ctx)
	if err != nil {
		n.logger.Debug("metrics: inventory", "error", err)
		fail("inventory")
		inv = &gpu.Node{}
	}
	for _, g := range inv.GPUs {
		idx := strconv.Itoa(g.Index)
		gauge(descGPUInfo, 1, idx, g.UUID, g.Model)
		healthy, xids := n.xids.gpuHealth(g.UUID)
		gauge(descGPUHealthy, b2f(healthy), idx, g.UUID)
		ch <- prometheus.MustNewConstMetric(descGPUXIDs, prometheus.CounterValue, float64(xids), idx, g.UUID)
		if u, ok := usage[g.UUID]; ok {
			gauge(descGPUMemUsed, mib(u.MemoryUsedMiB), idx, g.UUID)
			gauge(descGPUMemTotal, mib(u.MemoryTotalMiB), idx, g.UUID)
			if u.GPUUtilPercent != nil {
				gauge(descGPUUtil, float64(*u.GPUUtilPercent), idx, g.UUID)
			}
		}
		profiles := map[string]int{}
		for _, m := range g.MIGInstances {
			profiles[m.Profile]++
		}
		for p, k := range profiles {
			gauge(descMIGInstances, float64(k), idx, g.UUID, p)
		}
	}
	holders, err := n.Holders(ctx, c.holders...)
	if err != nil && len(c.holders) > 0 {
		// Nomad could not be asked: the leases still say who holds what.
		n.logger.Debug("metrics: holders", "error", err)
		fail("nomad")
		holders, err = n.Holders(ctx)
	}
	if err != nil {
		n.logger.Debug("metrics: leases", "error", err)
		fail("leases")
		holders = &Holders{}
	}
	if cat := n.Current(); cat != nil {
		for _, g := range cat.Groups {
			for _, s := range g.Shares {
				gauge(descShareInfo, 1, s.ID, g.Name, string(s.Mechanism), s.Parent())
				ok, _ := n.Health(s)
				gauge(descShareHealthy, b2f(ok), s.ID)
				gauge(descShareMemory, mib(s.MemoryMiB), s.ID)
				if u, ok := usage[s.Parent()]; ok {
					gauge(descShareUsed, mib(u.MemoryUsedMiB), s.ID)
					if u.GPUUtilPercent != nil {
						gauge(descShareUtil, float64(*u.GPUUtilPercent), s.ID)
					}
				}
				for _, who := range holders.Shares[s.ID] {
					gauge(descShareHeld, 1, s.ID, who)
				}
			}
		}
	}
	gauge(descLeases, float64(holders.Leases))
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func mib(v uint64) float64 { return float64(v) * (1 << 20) }

// ServeMetrics serves the collectors at http://addr/metrics until ctx ends.
// It listens before it returns, so that a bad or taken address is its
// error, and returns the address it listens on (addr may name port 0).
func ServeMetrics(ctx context.Context, addr string, collectors ...prometheus.Collector) (net.Addr, error) {
	reg := prometheus.NewRegistry()
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics_addr %q: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	go srv.Serve(l) // returns when ctx ends and closes it
	return l.Addr(), nil
}
