//go:build e2e

package e2e

import (
	"testing"
	"time"
)

// mechanismVariants are the runtime benchmarks' containers besides plain
// runc, in the order they run: one that asks for nothing, then one share of
// each mechanism the simulated node of runtimeNode serves without a remote
// server.
var mechanismVariants = []struct{ name, mechanism string }{
	{"no-GPU", ""},
	{"exclusive", "exclusive"},
	{"mig", "mig"},
	{"mps", "mps"},
	{"timeslice", "timeslice"},
}

// benchInterleaved runs variant 0 (plain runc, the baseline) and then each
// of the others (named by names) once per iteration, so that drift of a
// shared machine hits them alike, and reports runc's milliseconds per
// container and each other variant as a ratio to it ("mps/runc").
func benchInterleaved(b *testing.B, names []string, run func(i, variant int) error) {
	took := make([]time.Duration, 1+len(names))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range took {
			start := time.Now()
			if err := run(i, j); err != nil {
				b.Fatal(err)
			}
			took[j] += time.Since(start)
		}
	}
	b.StopTimer()
	b.ReportMetric(took[0].Seconds()*1000/float64(b.N), "runc-ms/op")
	for j, name := range names {
		b.ReportMetric(float64(took[j+1])/float64(took[0]), name+"/runc")
	}
}
