//go:build e2e

package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/opencontainers/runtime-spec/specs-go"
)

// BenchmarkRuntimePassThrough measures what gpumux-runtime adds to a runc
// call it passes through, without an engine around it, interleaved in one
// run: `runc --version` (the baseline), the same through gpumux-runtime
// (its start and an exec of runc), and through gpumux-runtime-core (the
// start of the whole runtime, which every call paid before issue 16); then
// the create of a container that asks for nothing, with GPUMUX_RUNC=/bin/true
// so that only gpumux-runtime's part is left: /bin/true (the baseline) and
// gpumux-runtime reading the bundle's config.json and exec'ing it. It
// reports each baseline's microseconds and each variant's extra
// microseconds over its baseline. With GPUMUX_BENCH_RUNTIME_BEFORE naming an
// earlier gpumux-runtime, its --version and create run too ("before-"):
//
//	go test -tags 'e2e no_dynamic_plugins' -run '^$' -bench RuntimePassThrough -benchtime 200x -count 5 ./e2e/
func BenchmarkRuntimePassThrough(b *testing.B) {
	bin := filepath.Join(repoRoot(b), "bin")
	runc, err := exec.LookPath("runc")
	if err != nil {
		b.Skip(err)
	}
	bundle := b.TempDir()
	spec, _ := json.Marshal(specs.Spec{Version: specs.Version, Process: &specs.Process{Args: []string{"/probe"}, Env: []string{"PATH=/bin", "NVIDIA_VISIBLE_DEVICES=all"}},
		Root: &specs.Root{Path: "rootfs"}, Annotations: map[string]string{"io.kubernetes.cri.container-type": "container"}})
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), spec, 0o644); err != nil {
		b.Fatal(err)
	}
	create := []string{"--root", b.TempDir(), "create", "--bundle", bundle, "c1"}
	// Each variant runs argv with env added; base is the index of its
	// baseline (runc --version or /bin/true), -1 for a baseline.
	type variant struct {
		metric string
		env    string
		argv   []string
		base   int
	}
	variants := []variant{
		{"runc-µs", "", []string{runc, "--version"}, -1},
		{"entry+µs", "", []string{filepath.Join(bin, "gpumux-runtime"), "--version"}, 0},
		{"core+µs", "", []string{filepath.Join(bin, "gpumux-runtime-core"), "--version"}, 0},
		{"true-µs", "", []string{"/bin/true"}, -1},
		{"entry-create+µs", "GPUMUX_RUNC=/bin/true", append([]string{filepath.Join(bin, "gpumux-runtime")}, create...), 3},
	}
	if before := os.Getenv(EnvBenchRuntimeBefore); before != "" {
		variants = append(variants, variant{"before-entry+µs", "", []string{before, "--version"}, 0},
			variant{"before-entry-create+µs", "GPUMUX_RUNC=/bin/true", append([]string{before}, create...), 3})
	}
	took := make([]time.Duration, len(variants))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j, v := range variants {
			cmd := exec.Command(v.argv[0], v.argv[1:]...)
			cmd.Env = append(os.Environ(), v.env)
			start := time.Now()
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("%q: %v: %s", v.argv, err, out)
			}
			took[j] += time.Since(start)
		}
	}
	b.StopTimer()
	us := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N) }
	for j, v := range variants {
		if v.base < 0 {
			b.ReportMetric(us(took[j]), v.metric)
		} else {
			b.ReportMetric(us(took[j]-took[v.base]), v.metric)
		}
	}
}
