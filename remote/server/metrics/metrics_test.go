package metrics

import (
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gpumux/gpumux/remote/proto"
	"github.com/gpumux/gpumux/remote/server"
)

// fixed is a Source of given statistics.
type fixed server.Stats

func (f fixed) Stats() server.Stats { return server.Stats(f) }

func (fixed) Health() error { return nil }

func get(t *testing.T, src Source) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	handler(src).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", rec.Code, rec.Body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// TestHistogram: the server's latency counts per bucket become
// Prometheus's cumulative buckets, with the total time as the sum.
func TestHistogram(t *testing.T) {
	bounds := server.LatencyBuckets()
	latency := make([]uint64, len(bounds)+1)
	latency[0], latency[3], latency[len(bounds)] = 2, 1, 4 // 4 past the last bound
	fams := get(t, fixed{Calls: map[proto.Op]server.CallStats{
		proto.OpCtxSynchronize: {OK: 6, Failed: 1, Latency: latency, Time: 90 * time.Second},
	}})
	h := fams["gpumux_remote_call_duration_seconds"].GetMetric()[0].GetHistogram()
	if h.GetSampleCount() != 7 || h.GetSampleSum() != 90 {
		t.Errorf("count %d sum %v, want 7 and 90", h.GetSampleCount(), h.GetSampleSum())
	}
	bounds = append(bounds, math.Inf(1))
	if len(h.GetBucket()) != len(bounds) {
		t.Fatalf("%d buckets, want %d", len(h.GetBucket()), len(bounds))
	}
	for i, b := range h.GetBucket() {
		want := uint64(2)
		switch {
		case i == len(bounds)-1:
			want = 7
		case i >= 3:
			want = 3
		}
		if b.GetUpperBound() != bounds[i] || b.GetCumulativeCount() != want {
			t.Errorf("bucket %d: le %v count %d, want le %v count %d", i, b.GetUpperBound(), b.GetCumulativeCount(), bounds[i], want)
		}
	}
}

// TestTenants: a tenant's quota is a series only if it has one.
func TestTenants(t *testing.T) {
	fams := get(t, fixed{Tenants: map[string]server.TenantStats{
		"with":    {Sessions: 2, MemoryUsed: 10, Quota: 100},
		"without": {Sessions: 1, MemoryUsed: 20},
	}})
	tests := []struct {
		family, tenant string
		want           float64 // -1: no series
	}{
		{"gpumux_remote_sessions", "with", 2},
		{"gpumux_remote_sessions", "without", 1},
		{"gpumux_remote_memory_used_bytes", "with", 10},
		{"gpumux_remote_memory_used_bytes", "without", 20},
		{"gpumux_remote_memory_quota_bytes", "with", 100},
		{"gpumux_remote_memory_quota_bytes", "without", -1},
	}
	for _, tt := range tests {
		got := -1.0
		for _, m := range fams[tt.family].GetMetric() {
			if l := m.GetLabel(); len(l) == 1 && l[0].GetName() == "tenant" && l[0].GetValue() == tt.tenant {
				got = m.GetGauge().GetValue()
			}
		}
		if got != tt.want {
			t.Errorf("%s{tenant=%q} = %v, want %v", tt.family, tt.tenant, got, tt.want)
		}
	}
}

// TestGauges: the server-wide gauges are series without labels.
func TestGauges(t *testing.T) {
	fams := get(t, fixed{Handshakes: 3, Workers: 2})
	for family, want := range map[string]float64{"gpumux_remote_handshakes": 3, "gpumux_remote_workers": 2} {
		if ms := fams[family].GetMetric(); len(ms) != 1 || ms[0].GetGauge().GetValue() != want {
			t.Errorf("%s: %v, want one series of %v", family, ms, want)
		}
	}
}
