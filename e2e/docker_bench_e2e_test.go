//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"
)

// BenchmarkDockerRun measures `docker run --rm` of the probe image on a
// private Docker engine, through plain runc (the baseline) and through
// gpumux-runtime (a container that asks for nothing, and one that leases and
// gets a whole GPU of a simulated H200 node), interleaved in one run so
// that drift hits all three alike. It reports runc's milliseconds per
// container and each gpumux-runtime variant as a ratio to it:
//
//	go test -tags 'e2e no_dynamic_plugins' -run '^$' -bench DockerRun -benchtime 20x -count 5 ./e2e/
func BenchmarkDockerRun(b *testing.B) {
	ctx := context.Background()
	_, config := runtimeNode(b)
	d := startDocker(b, ctx, config)
	image, err := d.ProbeImage(ctx)
	if err != nil {
		b.Fatal(err)
	}
	variants := []struct {
		metric string
		args   []string
	}{
		{"runc-ms/op", nil},
		{"no-GPU/runc", []string{"--runtime", "gpumux"}},
		{"whole-GPU/runc", []string{"--runtime", "gpumux", "-e", "GPUMUX_MECHANISM=exclusive"}},
	}
	took := make([]time.Duration, len(variants))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j, v := range variants {
			args := append(append([]string{"run", "--rm"}, v.args...), image)
			start := time.Now()
			if _, _, err := d.Docker(ctx, args...); err != nil {
				b.Fatal(err)
			}
			took[j] += time.Since(start)
		}
	}
	b.StopTimer()
	b.ReportMetric(took[0].Seconds()*1000/float64(b.N), variants[0].metric)
	for j := 1; j < len(variants); j++ {
		b.ReportMetric(float64(took[j])/float64(took[0]), variants[j].metric)
	}
}
