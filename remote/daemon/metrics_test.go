package daemon

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumux/gpumux/internal/scrape"
	"github.com/gpumux/gpumux/remote/proto"
	"github.com/gpumux/gpumux/remote/token"
)

// sample is one expected sample: the value of a counter or gauge, or a
// histogram's count; absent: there is no such series.
type sample struct {
	name   string
	labels string // "k=v,k=v" in any order; "" for none
	want   float64
	absent bool
}

func (s sample) String() string { return s.name + "{" + s.labels + "}" }

// find returns the value of s's series in fams, and whether it is there.
func find(fams scrape.Families, s sample) (float64, bool) {
	want := map[string]string{}
	for _, kv := range strings.Split(s.labels, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			want[k] = v
		}
	}
	return fams.Exact(s.name, want)
}

// scrapeUntil scrapes url until every sample is as expected (workers
// report within a second), and returns the last scrape.
func scrapeUntil(t *testing.T, url string, samples []sample) scrape.Families {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		fams, err := scrape.Get(t.Context(), url)
		var wrong []string
		for _, s := range samples {
			if err != nil {
				break
			}
			switch v, ok := find(fams, s); {
			case s.absent && ok:
				wrong = append(wrong, fmt.Sprintf("%v = %v, want none", s, v))
			case !s.absent && !ok:
				wrong = append(wrong, fmt.Sprintf("%v missing, want %v", s, s.want))
			case !s.absent && v != s.want:
				wrong = append(wrong, fmt.Sprintf("%v = %v, want %v", s, v, s.want))
			}
		}
		if err == nil && len(wrong) == 0 {
			return fams
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics after 5s: %v\n%s", err, strings.Join(wrong, "\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestMetrics: --metrics-addr serves what the clients did, the same with
// and without tenant processes.
func TestMetrics(t *testing.T) {
	for _, procs := range []bool{false, true} {
		t.Run(fmt.Sprintf("tenant-processes=%v", procs), func(t *testing.T) {
			dir := shortDir(t)
			secret := []byte("0123456789abcdef0123456789abcdef")
			if err := os.WriteFile(filepath.Join(dir, "secret"), secret, 0o600); err != nil {
				t.Fatal(err)
			}
			sock, metricsAddr := filepath.Join(dir, "s"), freeAddr(t)
			url := "http://" + metricsAddr + "/metrics"
			stderr, stop := serveFake(t, "--unix", sock, "--token-file", filepath.Join(dir, "secret"), "--backend", "fake",
				"--fake-memory", "1GiB", "--metrics-addr", metricsAddr, fmt.Sprintf("--tenant-processes=%v", procs))
			mint := func(secret []byte, c token.Claims) string {
				if c.Expires.IsZero() {
					c.Expires = time.Now().Add(time.Hour)
				}
				tok, err := token.Mint(secret, c)
				if err != nil {
					t.Fatal(err)
				}
				return tok
			}
			good := token.Claims{ID: "job", Quota: 64 << 20}
			cl := dialUntil(t, "unix", sock, proto.Hello{Token: mint(secret, good)})
			// Serving clients, so healthy (what the Nomad job's check asks).
			resp, err := http.Get("http://" + metricsAddr + "/healthz")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET /healthz of a serving server: %s", resp.Status)
			}
			check := func(what string, r proto.Result, err error) {
				t.Helper()
				if r != proto.Success || err != nil {
					t.Fatalf("%s: %v %v", what, r, err)
				}
			}
			ctx, r, err := cl.DevicePrimaryCtxRetain(0, 0)
			check("cuDevicePrimaryCtxRetain", r, err)
			p, r, err := cl.MemAllocV2(ctx, 1<<20)
			check("cuMemAlloc", r, err)
			r, err = cl.MemcpyHtoDV2(ctx, p, make([]byte, 3000), 3000)
			check("cuMemcpyHtoD", r, err)
			r, err = cl.MemcpyDtoHV2(ctx, make([]byte, 1000), p, 1000)
			check("cuMemcpyDtoH", r, err)
			for range 7 {
				r, err = cl.CtxSynchronize(ctx)
				check("cuCtxSynchronize", r, err)
			}
			if r, err := cl.MemFreeV2(ctx, p+8); r != proto.ErrInvalidValue || err != nil {
				t.Fatalf("cuMemFree inside an allocation: %v %v, want %v", r, err, proto.ErrInvalidValue)
			}
			for _, hello := range []proto.Hello{
				{Token: mint([]byte("another pool's secret, 32 bytes!"), good)},
				{Token: mint(secret, token.Claims{ID: "old", Expires: time.Now().Add(-time.Minute)})},
				{Token: mint(secret, good), Version: proto.Version + 1},
				{Token: mint(secret, token.Claims{ID: "big", Quota: 1 << 30})}, // 64 MiB of the 1 GiB are held
			} {
				if _, err := proto.Dial(t.Context(), "unix", sock, hello, 5*time.Second); !errors.Is(err, proto.ErrRefused) {
					t.Fatalf("handshake %+v: %v, want refused", hello, err)
				}
			}

			workers := 0.0
			if procs {
				workers = 1
			}
			fams := scrapeUntil(t, url, []sample{
				{name: "gpumux_remote_sessions", labels: "tenant=job", want: 1},
				{name: "gpumux_remote_calls_total", labels: "call=cuCtxSynchronize,result=ok", want: 7},
				{name: "gpumux_remote_calls_total", labels: "call=cuCtxSynchronize,result=error", want: 0},
				{name: "gpumux_remote_calls_total", labels: "call=cuMemAlloc_v2,result=ok", want: 1},
				{name: "gpumux_remote_calls_total", labels: "call=cuMemFree_v2,result=error", want: 1},
				{name: "gpumux_remote_calls_total", labels: "call=cuMemFree_v2,result=ok", want: 0},
				{name: "gpumux_remote_call_duration_seconds", labels: "call=cuCtxSynchronize", want: 7},
				{name: "gpumux_remote_call_duration_seconds", labels: "call=cuMemFree_v2", want: 1},
				{name: "gpumux_remote_copy_bytes_total", labels: "direction=host_to_device", want: 3000},
				{name: "gpumux_remote_copy_bytes_total", labels: "direction=device_to_host", want: 1000},
				{name: "gpumux_remote_memory_used_bytes", labels: "tenant=job", want: 1 << 20},
				{name: "gpumux_remote_memory_quota_bytes", labels: "tenant=job", want: 64 << 20},
				{name: "gpumux_remote_handshakes_refused_total", labels: "reason=bad_token", want: 1},
				{name: "gpumux_remote_handshakes_refused_total", labels: "reason=expired", want: 1},
				{name: "gpumux_remote_handshakes_refused_total", labels: "reason=version", want: 1},
				{name: "gpumux_remote_handshakes_refused_total", labels: "reason=admission", want: 1},
				{name: "gpumux_remote_handshakes_refused_total", labels: "reason=timeout", want: 0},
				{name: "gpumux_remote_admissions_refused_total", labels: "gpu=0", want: 1},
				{name: "gpumux_remote_workers", want: workers},
				{name: "gpumux_remote_worker_starts_total", want: workers},
				{name: "gpumux_remote_worker_deaths_total", want: 0},
			})
			checkDocumented(t, fams)
			h := fams["gpumux_remote_call_duration_seconds"].GetMetric()[0].GetHistogram()
			if b := h.GetBucket(); len(b) == 0 || b[0].GetUpperBound() != 5e-6 || b[len(b)-1].GetUpperBound() < 10 {
				t.Errorf("latency buckets %v: want 5µs to about 10s", b)
			}

			r, err = cl.MemFreeV2(ctx, p)
			check("cuMemFree", r, err)
			scrapeUntil(t, url, []sample{
				{name: "gpumux_remote_memory_used_bytes", labels: "tenant=job", want: 0},
				{name: "gpumux_remote_calls_total", labels: "call=cuMemFree_v2,result=ok", want: 1},
			})
			cl.Close()
			scrapeUntil(t, url, []sample{
				{name: "gpumux_remote_sessions", labels: "tenant=job", absent: true},
				{name: "gpumux_remote_memory_used_bytes", labels: "tenant=job", absent: true},
				{name: "gpumux_remote_workers", want: 0},
				{name: "gpumux_remote_calls_total", labels: "call=cuCtxSynchronize,result=ok", want: 7},
				{name: "gpumux_remote_copy_bytes_total", labels: "direction=host_to_device", want: 3000},
			})
			if code := stop(); code != 0 {
				t.Errorf("exit %d, stderr:\n%s", code, stderr.String())
			}
			if _, err := scrape.Get(t.Context(), url); err == nil {
				t.Error("metrics still served after the daemon stopped")
			}
		})
	}
}

// checkDocumented fails unless docs/remote.md lists every gpumux metric.
func checkDocumented(t *testing.T, fams scrape.Families) {
	t.Helper()
	doc, err := os.ReadFile("../../docs/remote.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range slices.Sorted(maps.Keys(fams)) {
		if strings.HasPrefix(name, "gpumux_") && !strings.Contains(string(doc), "`"+name+"`") {
			t.Errorf("docs/remote.md does not list %s", name)
		}
	}
}
