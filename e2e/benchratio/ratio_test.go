package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// samples writes runs of rounds where runc takes base(run, round) and each
// other variant that times its factor.
func samples(runs, rounds int, base func(run, round int) int64, factors map[string]float64) string {
	var sb strings.Builder
	for r := range runs {
		for i := range rounds {
			b := base(r, i)
			fmt.Fprintf(&sb, "BenchmarkX,%d,%d,runc,%d\n", r, i, b)
			for v, f := range factors {
				fmt.Fprintf(&sb, "BenchmarkX,%d,%d,%s,%d\n", r, i, v, int64(float64(b)*f))
			}
		}
	}
	return sb.String()
}

func TestSummarize(t *testing.T) {
	// runc drifts from run to run, and within a run; a way that is always
	// 1.08 of the same round's runc is 1.08 however it is pooled.
	drift := func(run, round int) int64 { return int64(80e6 + 10e6*run + 1e5*((round*7)%13)) }
	in := samples(3, 30, drift, map[string]float64{"cdi": 1.08, "same": 1})
	got, err := Summarize(mustParse(t, in), Options{Resamples: 500, Seed: 1, Paired: "runc"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Runs != 3 || got[0].Rounds != 90 || len(got[0].Ratios) != 2 {
		t.Fatalf("got %+v; want one benchmark of 3 runs, 90 rounds, 2 ways", got)
	}
	// Each round's cdi is 8% over its runc: 6.4 to 8.1 ms, by how far runc
	// drifted (80 to 101.2 ms); "same" is runc's own time.
	for _, d := range got[0].Paired {
		want := map[string][2]float64{"cdi": {6.4e6, 8.1e6}, "same": {0, 0}}[d.Variant]
		lo, hi := want[0], want[1]
		if d.Median < lo || d.Median > hi || d.Low > d.Median || d.High < d.Median {
			t.Errorf("%s paired with runc: %+v; want a median within %.0f–%.0f ns inside its interval", d.Variant, d, lo, hi)
		}
	}
	if len(got[0].Paired) != 2 {
		t.Errorf("paired: %+v; want cdi and same", got[0].Paired)
	}
	for _, r := range got[0].Ratios {
		want := map[string]float64{"cdi": 1.08, "same": 1}[r.Variant]
		for what, x := range map[string]float64{"pooled": r.Pooled, "low": r.Low, "high": r.High, "runs' least": r.RunMin, "runs' most": r.RunMax} {
			if math.Abs(x-want) > 0.001 {
				t.Errorf("%s: %s %.4f; want %.2f", r.Variant, what, x, want)
			}
		}
	}
}

// TestSummarizeInterval: a way whose time varies round to round gets an
// interval around its pooled ratio that narrows with more rounds.
func TestSummarizeInterval(t *testing.T) {
	width := func(rounds int) float64 {
		var sb strings.Builder
		for i := range rounds {
			jitter := int64((i*7919)%21 - 10) // -10..10 ms
			fmt.Fprintf(&sb, "B,1,%d,runc,%d\nB,1,%d,way,%d\n", i, 100_000_000, i, 110_000_000+jitter*1_000_000)
		}
		s, err := Summarize(mustParse(t, sb.String()), Options{Resamples: 1000, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		r := s[0].Ratios[0]
		if !(r.Low <= r.Pooled && r.Pooled <= r.High) || r.High-r.Low <= 0 {
			t.Fatalf("%d rounds: %.3f not within %.3f–%.3f, or no width", rounds, r.Pooled, r.Low, r.High)
		}
		return r.High - r.Low
	}
	if few, many := width(21), width(21*20); many >= few {
		t.Errorf("the interval of 420 rounds (%.4f) is not narrower than of 21 (%.4f)", many, few)
	}
}

// TestSummarizeRunsAsWholes: runs that sit apart as wholes (a way at 1.05
// of runc in two counts, 1.15 in two others, steady within each) give an
// interval that spans them: the runs are resampled, not only the rounds,
// whose many steady containers would make it narrow.
func TestSummarizeRunsAsWholes(t *testing.T) {
	var sb strings.Builder
	for run, f := range []float64{1.05, 1.15, 1.05, 1.15} {
		for i := range 50 {
			base := int64(90_000_000 + (i%5)*100_000)
			fmt.Fprintf(&sb, "B,%d,%d,runc,%d\nB,%d,%d,way,%d\n", run, i, base, run, i, int64(float64(base)*f))
		}
	}
	s, err := Summarize(mustParse(t, sb.String()), Options{Resamples: 2000, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if r := s[0].Ratios[0]; r.Low > 1.07 || r.High < 1.13 {
		t.Errorf("interval %.3f–%.3f; want it to span the runs' 1.05 and 1.15", r.Low, r.High)
	}
}

// TestSummarizeFilesApart: one benchmark's runs in two files, of other
// ways (a full run and a focused one), are summarised apart.
func TestSummarizeFilesApart(t *testing.T) {
	full, err := Parse(strings.NewReader("B,1,0,runc,100\nB,1,0,cdi,110\nB,1,0,nri,120\n"), "full.csv")
	if err != nil {
		t.Fatal(err)
	}
	focus, err := Parse(strings.NewReader("B,2,0,runc,100\nB,2,0,nri,105\n"), "focus.csv")
	if err != nil {
		t.Fatal(err)
	}
	s, err := Summarize(append(full, focus...), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(s) != 2 || s[0].Source != "full.csv" || len(s[0].Ratios) != 2 || s[1].Source != "focus.csv" || s[1].Ratios[0].Pooled != 1.05 {
		t.Errorf("got %+v; want full.csv's two ways, then focus.csv's nri at 1.05", s)
	}
}

func TestSummarizeRefuses(t *testing.T) {
	for _, tc := range []struct{ name, in, paired, want string }{
		{"no baseline", "B,1,0,cdi,5\n", "", "no runc samples"},
		{"a round short of a way", "B,1,0,runc,5\nB,1,0,cdi,6\nB,1,1,runc,5\n", "", "run 1 round 1 has 1 of the 2 ways (runc, cdi): runs with other GPUMUX_BENCH_WAYS"},
		{"a way twice in a round", "B,1,0,runc,5\nB,1,0,runc,6\n", "", "has runc twice"},
		{"nothing", "", "", "no samples"},
		{"paired with a way not run", "B,1,0,runc,5\nB,1,0,cdi,6\n", "nri", "no nri samples to pair with (ways: runc, cdi)"},
	} {
		_, err := Summarize(mustParse(t, tc.in), Options{Resamples: 10, Seed: 1, Paired: tc.paired})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want an error with %q", tc.name, err, tc.want)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"B,1,0,runc\n", "s:1: 4 fields"},
		{"B,1,x,runc,5\n", `s:1: round "x"`},
		{"B,1,-1,runc,5\n", `s:1: round "-1"`},
		{"B,1,0,runc,5\nB,1,0,cdi,0\n", `s:2: nanoseconds "0"`},
		{"B,1,0,,5\n", "s:1: empty benchmark, run or variant"},
	} {
		if _, err := Parse(strings.NewReader(tc.in), "s"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v; want an error with %q", tc.in, err, tc.want)
		}
	}
}

// TestRun prints what a file of samples says.
func TestRun(t *testing.T) {
	path := filepath.Join(t.TempDir(), "samples.csv")
	flat := func(int, int) int64 { return 90e6 }
	if err := os.WriteFile(path, []byte(samples(2, 5, flat, map[string]float64{"agent-exclusive": 1.1})), 0o644); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := run(&out, []string{path}, Options{Resamples: 100, Seed: 1, Paired: "runc"}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{": BenchmarkX: 10 rounds in 2 run(s); runc's median container 90.0 ms", "agent-exclusive  1.100", "1.100–1.100", "paired with runc", "agent-exclusive  +9.00   +9.00–+9.00"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if err := run(&out, []string{filepath.Join(t.TempDir(), "none.csv")}, Options{}); err == nil {
		t.Error("a file that is not there: no error")
	}
}

func mustParse(t *testing.T, in string) []Sample {
	t.Helper()
	s, err := Parse(strings.NewReader(in), "s")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestQuantile(t *testing.T) {
	s := make([]float64, 2000)
	for i := range s {
		s[i] = float64(i + 1)
	}
	for _, tc := range []struct{ q, want float64 }{{0.025, 50}, {0.975, 1950}, {0, 1}, {1, 2000}, {0.5, 1000}} {
		if got := quantile(s, tc.q); got != tc.want {
			t.Errorf("quantile(1..2000, %v) = %v; want %v (nearest rank)", tc.q, got, tc.want)
		}
	}
}

// TestRunResampling: the same seed gives the same intervals, another seed
// others; no resampling prints no interval.
func TestRunResampling(t *testing.T) {
	path := filepath.Join(t.TempDir(), "samples.csv")
	var sb strings.Builder
	for run := range 12 {
		for i := range 20 {
			fmt.Fprintf(&sb, "B,%02d,%d,runc,%d\nB,%02d,%d,way,%d\n", run, i, 90_000_000+(i*7919)%5_000_000, run, i, 99_000_000+(run*run*137_000)%4_000_000+(i*104729)%9_000_000)
		}
	}
	if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out := func(o Options) string {
		var w strings.Builder
		if err := run(&w, []string{path}, o); err != nil {
			t.Fatal(err)
		}
		return w.String()
	}
	a, b, c := out(Options{Resamples: 500, Seed: 1}), out(Options{Resamples: 500, Seed: 1}), out(Options{Resamples: 500, Seed: 2})
	if a != b {
		t.Errorf("the same seed, other output:\n%s\n%s", a, b)
	}
	if a == c {
		t.Errorf("another seed, the same intervals:\n%s", a)
	}
	if none := out(Options{Paired: "runc"}); !regexp.MustCompile(`(?m)^way +[0-9.]+ +– +[0-9]`).MatchString(none) || !regexp.MustCompile(`(?m)^way +[+0-9.]+ +–$`).MatchString(none) {
		t.Errorf("without resampling, want \"–\" for each interval:\n%s", none)
	}
}
