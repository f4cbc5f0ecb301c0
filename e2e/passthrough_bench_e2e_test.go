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
// microseconds over its baseline:
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
	variants := []struct {
		metric string
		env    string
		argv   []string
	}{
		{"runc-µs", "", []string{runc, "--version"}},
		{"entry+µs", "", []string{filepath.Join(bin, "gpumux-runtime"), "--version"}},
		{"core+µs", "", []string{filepath.Join(bin, "gpumux-runtime-core"), "--version"}},
		{"true-µs", "", []string{"/bin/true"}},
		{"entry-create+µs", "GPUMUX_RUNC=/bin/true", append([]string{filepath.Join(bin, "gpumux-runtime")}, create...)},
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
	b.ReportMetric(us(took[0]), variants[0].metric)
	b.ReportMetric(us(took[1]-took[0]), variants[1].metric)
	b.ReportMetric(us(took[2]-took[0]), variants[2].metric)
	b.ReportMetric(us(took[3]), variants[3].metric)
	b.ReportMetric(us(took[4]-took[3]), variants[4].metric)
}
