//go:build e2e

package e2e

import (
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// envBenchSamples names a file to which benchInterleaved appends every
// container's time, for e2e/benchratio to pool the counts of a run:
// one line per container, "benchmark,run,round,variant,nanoseconds".
// Only counts of more than one iteration write (-benchtime Nx, N at least
// 2: a benchmark starts with a one-iteration run, and a -benchtime in
// seconds would write its ramp-up's runs too); a fresh file per command.
const envBenchSamples = "GPUMUX_BENCH_SAMPLES"

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

// benchInterleaved runs variant 0 (plain runc, the baseline) and each of
// the others (named by names) once per iteration, so that drift of a
// shared machine hits them alike, in an order of its own each iteration:
// what a container leaves behind (its cgroup's and mounts' teardown, a
// release) falls on the one after it, so no variant always follows the
// same one. It reports runc's median milliseconds per container and each
// other variant's median as a ratio to runc's ("mps/runc"): medians, as a
// container's start is, where a mean would follow the stalls of a busy
// 2-core machine (one 300 ms stall in 10 containers moves a mean by 30 ms).
// With GPUMUX_BENCH_SAMPLES set it also writes every container's time
// there, for e2e/benchratio's ratios of the counts pooled.
// GPUMUX_BENCH_WAYS, a regular expression, keeps only the variants whose
// names it matches (runc always), for many rounds of a few ways in the
// time of a run. It returns whether each of names ran.
func benchInterleaved(b *testing.B, names []string, run func(i, variant int) error) (ran map[string]bool) {
	order, ran := selectedWays(b, names)
	took := make([][]time.Duration, 1+len(names))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rand.Shuffle(len(order), func(x, y int) { order[x], order[y] = order[y], order[x] })
		for _, j := range order {
			start := time.Now()
			if err := run(i, j); err != nil {
				b.Fatal(err)
			}
			took[j] = append(took[j], time.Since(start))
		}
	}
	b.StopTimer()
	if err := writeSamples(b, os.Getenv(envBenchSamples), append([]string{"runc"}, names...), took); err != nil {
		b.Fatal(err)
	}
	runc := median(took[0])
	b.ReportMetric(float64(runc)/float64(time.Millisecond), "runc-ms/op")
	for j, name := range names {
		if ran[name] {
			b.ReportMetric(float64(median(took[j+1]))/float64(runc), name+"/runc")
		}
	}
	return ran
}

// envBenchWays is a regular expression of the variants a benchmark runs
// besides runc (benchInterleaved); all where unset.
const envBenchWays = "GPUMUX_BENCH_WAYS"

// selectedWays is the variants (indexes into runc and names) that
// GPUMUX_BENCH_WAYS keeps, and whether each of names is one.
func selectedWays(b *testing.B, names []string) ([]int, map[string]bool) {
	var re *regexp.Regexp
	if expr := os.Getenv(envBenchWays); expr != "" {
		var err error
		if re, err = regexp.Compile(expr); err != nil {
			b.Fatalf("%s=%s: %v", envBenchWays, expr, err)
		}
	}
	order := []int{0}
	ran := map[string]bool{}
	for j, name := range names {
		if re == nil || re.MatchString(name) {
			order = append(order, j+1)
			ran[name] = true
		}
	}
	if len(order) == 1 {
		b.Fatalf("%s=%s matches none of %v", envBenchWays, re, names)
	}
	return order, ran
}

// writeSamples appends took, each variant's times by round, to the file
// at path (envBenchSamples), one line per container; nothing where path is
// empty, or for the one-iteration run with which a benchmark starts. The
// run is named by when it ended, so that the counts of one command, which
// restart the rounds at 0, stay apart.
func writeSamples(b *testing.B, path string, names []string, took [][]time.Duration) error {
	if path == "" || b.N < 2 {
		return nil
	}
	var sb strings.Builder
	run := time.Now().UnixNano()
	for j, d := range took {
		for i, t := range d { // none for a variant that did not run
			fmt.Fprintf(&sb, "%s,%d,%d,%s,%d\n", b.Name(), run, i, names[j], t.Nanoseconds())
		}
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("%s: %w", envBenchSamples, err)
	}
	_, err = f.WriteString(sb.String())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s: %w", envBenchSamples, err)
	}
	return nil
}

// median is the median of d (the mean of the middle two of an even count).
func median(d []time.Duration) time.Duration {
	s := slices.Sorted(slices.Values(d))
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}
