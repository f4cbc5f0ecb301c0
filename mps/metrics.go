package mps

import "github.com/prometheus/client_golang/prometheus"

// The MPS daemons' metrics, served by a node agent with the node's.
var (
	descDaemonUp       = prometheus.NewDesc("gpumux_mps_daemon_up", "1 while the device's MPS control daemon answers with its defaults; 0 while it is down, restarting or draining.", []string{"device"}, nil)
	descDaemonRestarts = prometheus.NewDesc("gpumux_mps_daemon_restarts_total", "Times the agent restarted the device's MPS control daemon after it stopped answering.", []string{"device"}, nil)
	descDaemonDraining = prometheus.NewDesc("gpumux_mps_daemon_draining", "1 while the daemon of a device that left MPS waits for its clients before it quits.", []string{"device"}, nil)
)

var _ prometheus.Collector = (*Provider)(nil)

// Describe sends the descriptions of the daemons' metrics.
func (p *Provider) Describe(ch chan<- *prometheus.Desc) {
	ch <- descDaemonUp
	ch <- descDaemonRestarts
	ch <- descDaemonDraining
}

// Collect sends each daemon's state as the Manager knows it.
func (p *Provider) Collect(ch chan<- prometheus.Metric) {
	for _, st := range p.m.Status() {
		up, draining := 0.0, 0.0
		if st.Healthy {
			up = 1
		}
		if st.Draining {
			draining = 1
		}
		ch <- prometheus.MustNewConstMetric(descDaemonUp, prometheus.GaugeValue, up, st.Device.UUID)
		ch <- prometheus.MustNewConstMetric(descDaemonRestarts, prometheus.CounterValue, float64(st.Restarts), st.Device.UUID)
		ch <- prometheus.MustNewConstMetric(descDaemonDraining, prometheus.GaugeValue, draining, st.Device.UUID)
	}
}
