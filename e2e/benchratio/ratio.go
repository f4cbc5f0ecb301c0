package main

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
)

// Baseline is the variant the others are compared with.
const Baseline = "runc"

// Sample is one container's time: a line of GPUMUX_BENCH_SAMPLES.
type Sample struct {
	Source    string // the input it was read from
	Benchmark string
	Run       string // one count of the benchmark
	Round     int    // the iteration within the count
	Variant   string
	Nanos     int64
}

// Parse reads samples, one "benchmark,run,round,variant,nanoseconds" line
// each; name is the input's, for errors.
func Parse(r io.Reader, name string) ([]Sample, error) {
	var out []Sample
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		f := strings.Split(line, ",")
		if len(f) != 5 {
			return nil, fmt.Errorf("%s:%d: %d fields; want 5 (benchmark,run,round,variant,nanoseconds)", name, n, len(f))
		}
		round, err := strconv.Atoi(f[2])
		if err != nil || round < 0 {
			return nil, fmt.Errorf("%s:%d: round %q: want a count from 0", name, n, f[2])
		}
		ns, err := strconv.ParseInt(f[4], 10, 64)
		if err != nil || ns <= 0 {
			return nil, fmt.Errorf("%s:%d: nanoseconds %q: want a positive integer", name, n, f[4])
		}
		if f[0] == "" || f[1] == "" || f[3] == "" {
			return nil, fmt.Errorf("%s:%d: empty benchmark, run or variant", name, n)
		}
		out = append(out, Sample{Source: name, Benchmark: f[0], Run: f[1], Round: round, Variant: f[3], Nanos: ns})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return out, nil
}

// Ratio is one variant's figures against the baseline.
type Ratio struct {
	Variant        string
	Pooled         float64 // median over all rounds / the baseline's
	Low, High      float64 // Pooled's 95% interval (Options.Resamples > 0)
	RunMin, RunMax float64 // the runs' own ratios of medians: least, most
}

// Diff is one variant's time less a reference variant's in the same
// round: the median over the rounds and its 95% interval, nanoseconds.
type Diff struct {
	Variant   string
	Median    float64
	Low, High float64
}

// Summary is one benchmark's figures, from one input.
type Summary struct {
	Benchmark      string
	Source         string // the input it was read from
	Runs, Rounds   int
	BaselineMedian float64 // nanoseconds
	Ratios         []Ratio // in the order the variants first appear
	// Paired, where Options.Paired names a variant, is each other
	// variant's Diff to it.
	Paired []Diff
}

// Options are Summarize's.
type Options struct {
	Resamples int    // for the 95% intervals (0: none)
	Seed      uint64 // the resampling's
	Paired    string // a variant to give every other one's Diff to ("": none)
}

// round is one iteration of one run: each variant's time in it.
type round map[string]float64

// Summarize pools the samples of each benchmark of each input. Every round
// of one must have the same variants: a file that holds runs with other
// GPUMUX_BENCH_WAYS or ablations than its others is refused, as the pooled
// medians would not be of the same rounds (give such runs files of their
// own).
//
// The 95% intervals come from resampling the runs (counts) with
// replacement, each drawn run with all its rounds: a run has a containerd
// and an agent of its own and may sit higher or lower as a whole, which
// resampling the rounds alone would not show. A file of one run has its
// rounds resampled instead, an interval that leaves out how counts differ.
func Summarize(samples []Sample, o Options) ([]Summary, error) {
	type bench struct{ source, name string }
	type key struct {
		run   string
		round int
	}
	byBench := map[bench]map[key]round{}
	var benches []bench
	variants := map[bench][]string{}
	for _, s := range samples {
		b := bench{s.Source, s.Benchmark}
		rounds, ok := byBench[b]
		if !ok {
			rounds = map[key]round{}
			byBench[b] = rounds
			benches = append(benches, b)
		}
		k := key{s.Run, s.Round}
		if rounds[k] == nil {
			rounds[k] = round{}
		}
		if _, dup := rounds[k][s.Variant]; dup {
			return nil, fmt.Errorf("%s: %s: run %s round %d has %s twice", s.Source, s.Benchmark, s.Run, s.Round, s.Variant)
		}
		rounds[k][s.Variant] = float64(s.Nanos)
		if !slices.Contains(variants[b], s.Variant) {
			variants[b] = append(variants[b], s.Variant)
		}
	}
	var out []Summary
	for _, b := range benches {
		names := variants[b]
		where := b.source + ": " + b.name
		if !slices.Contains(names, Baseline) {
			return nil, fmt.Errorf("%s: no %s samples to compare with", where, Baseline)
		}
		if o.Paired != "" && !slices.Contains(names, o.Paired) {
			return nil, fmt.Errorf("%s: no %s samples to pair with (ways: %s)", where, o.Paired, strings.Join(names, ", "))
		}
		keys := slices.SortedFunc(maps.Keys(byBench[b]), func(x, y key) int {
			return cmp.Or(cmp.Compare(x.run, y.run), cmp.Compare(x.round, y.round))
		})
		var runs [][]round
		for i, k := range keys {
			r := byBench[b][k]
			if len(r) != len(names) {
				return nil, fmt.Errorf("%s: run %s round %d has %d of the %d ways (%s): runs with other GPUMUX_BENCH_WAYS or ablations belong in a file of their own", where, k.run, k.round, len(r), len(names), strings.Join(names, ", "))
			}
			if i == 0 || k.run != keys[i-1].run {
				runs = append(runs, nil)
			}
			runs[len(runs)-1] = append(runs[len(runs)-1], r)
		}
		s := summarize(runs, names, o)
		s.Benchmark, s.Source = b.name, b.source
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil, errors.New("no samples")
	}
	return out, nil
}

// summarize is one benchmark's Summary, of its runs' rounds.
func summarize(runs [][]round, names []string, o Options) Summary {
	all := slices.Concat(runs...)
	s := Summary{Runs: len(runs), Rounds: len(all), BaselineMedian: median(column(all, Baseline))}
	// Each resample's ratio, and difference to o.Paired, per variant.
	ratios := make([][]float64, len(names))
	diffs := make([][]float64, len(names))
	rng := rand.New(rand.NewPCG(o.Seed, uint64(len(all))))
	var picked []round
	for range o.Resamples {
		picked = picked[:0]
		if len(runs) == 1 {
			for range all {
				picked = append(picked, all[rng.IntN(len(all))])
			}
		} else {
			for range runs {
				picked = append(picked, runs[rng.IntN(len(runs))]...)
			}
		}
		base := median(column(picked, Baseline))
		for j, v := range names {
			ratios[j] = append(ratios[j], median(column(picked, v))/base)
			if o.Paired != "" {
				diffs[j] = append(diffs[j], median(difference(picked, v, o.Paired)))
			}
		}
	}
	for j, v := range names {
		if v != Baseline {
			r := Ratio{Variant: v, Pooled: median(column(all, v)) / s.BaselineMedian}
			r.Low, r.High = interval(ratios[j])
			for i, run := range runs {
				x := median(column(run, v)) / median(column(run, Baseline))
				if i == 0 || x < r.RunMin {
					r.RunMin = x
				}
				if i == 0 || x > r.RunMax {
					r.RunMax = x
				}
			}
			s.Ratios = append(s.Ratios, r)
		}
		if o.Paired != "" && v != o.Paired {
			d := Diff{Variant: v, Median: median(difference(all, v, o.Paired))}
			d.Low, d.High = interval(diffs[j])
			s.Paired = append(s.Paired, d)
		}
	}
	return s
}

// interval is the 95% interval of resampled figures (0, 0 for none).
func interval(x []float64) (low, high float64) {
	if len(x) == 0 {
		return 0, 0
	}
	slices.Sort(x)
	return quantile(x, 0.025), quantile(x, 0.975)
}

// difference is each round's time of v less its time of ref.
func difference(rounds []round, v, ref string) []float64 {
	out := make([]float64, len(rounds))
	for i, r := range rounds {
		out[i] = r[v] - r[ref]
	}
	return out
}

func column(rounds []round, variant string) []float64 {
	out := make([]float64, len(rounds))
	for i, r := range rounds {
		out[i] = r[variant]
	}
	return out
}

// median is the median of x (the mean of the middle two of an even count),
// as the benchmarks' own; x is not empty (every run has a round).
func median(x []float64) float64 {
	s := slices.Sorted(slices.Values(x))
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// quantile is the q-quantile of sorted s, the nearest rank's.
func quantile(s []float64, q float64) float64 {
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}
