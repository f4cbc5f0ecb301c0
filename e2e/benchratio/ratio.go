package main

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
)

// Baseline is the variant the others are compared with.
const Baseline = "runc"

// Sample is one container's time: a line of GPUMUX_BENCH_SAMPLES.
type Sample struct {
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
		out = append(out, Sample{Benchmark: f[0], Run: f[1], Round: round, Variant: f[3], Nanos: ns})
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
	Low, High      float64 // the 95% interval of Pooled, by resampling rounds
	RunLow, RunMax float64 // the runs' own ratios of medians: least, most
}

// Diff is one variant's time less a reference variant's in the same
// round: the median over the rounds and its 95% interval, nanoseconds.
type Diff struct {
	Variant   string
	Median    float64
	Low, High float64
}

// Summary is one benchmark's figures.
type Summary struct {
	Benchmark      string
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

// Summarize pools each benchmark's samples. A round that lacks a variant
// some other round of its benchmark has (a count that failed part way) is
// an error: the pooled medians would then not be of the same rounds.
func Summarize(samples []Sample, o Options) ([]Summary, error) {
	type key struct {
		run   string
		round int
	}
	byBench := map[string]map[key]round{}
	var benches []string
	variants := map[string][]string{}
	for _, s := range samples {
		rounds, ok := byBench[s.Benchmark]
		if !ok {
			rounds = map[key]round{}
			byBench[s.Benchmark] = rounds
			benches = append(benches, s.Benchmark)
		}
		k := key{s.Run, s.Round}
		if rounds[k] == nil {
			rounds[k] = round{}
		}
		if _, dup := rounds[k][s.Variant]; dup {
			return nil, fmt.Errorf("%s: run %s round %d has %s twice", s.Benchmark, s.Run, s.Round, s.Variant)
		}
		rounds[k][s.Variant] = float64(s.Nanos)
		if !slices.Contains(variants[s.Benchmark], s.Variant) {
			variants[s.Benchmark] = append(variants[s.Benchmark], s.Variant)
		}
	}
	var out []Summary
	for _, bench := range benches {
		names := variants[bench]
		if !slices.Contains(names, Baseline) {
			return nil, fmt.Errorf("%s: no %s samples to compare with", bench, Baseline)
		}
		if o.Paired != "" && !slices.Contains(names, o.Paired) {
			return nil, fmt.Errorf("%s: no %s samples to pair with (ways: %s)", bench, o.Paired, strings.Join(names, ", "))
		}
		keys := make([]key, 0, len(byBench[bench]))
		for k := range byBench[bench] {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, func(a, b key) int { return cmp.Or(cmp.Compare(a.run, b.run), cmp.Compare(a.round, b.round)) })
		rounds := make([]round, len(keys))
		runs := map[string][]round{}
		var runOrder []string
		for i, k := range keys {
			rounds[i] = byBench[bench][k]
			if len(rounds[i]) != len(names) {
				return nil, fmt.Errorf("%s: run %s round %d has %d of the %d variants", bench, k.run, k.round, len(rounds[i]), len(names))
			}
			if _, ok := runs[k.run]; !ok {
				runOrder = append(runOrder, k.run)
			}
			runs[k.run] = append(runs[k.run], rounds[i])
		}
		s := Summary{Benchmark: bench, Runs: len(runs), Rounds: len(rounds), BaselineMedian: median(column(rounds, Baseline))}
		rng := rand.New(rand.NewPCG(o.Seed, uint64(len(rounds))))
		boot := make([][]float64, len(names))
		picked := make([]round, len(rounds))
		for range o.Resamples {
			for i := range picked {
				picked[i] = rounds[rng.IntN(len(rounds))]
			}
			base := median(column(picked, Baseline))
			for j, v := range names {
				boot[j] = append(boot[j], median(column(picked, v))/base)
			}
		}
		for j, v := range names {
			if v == Baseline {
				continue
			}
			r := Ratio{Variant: v, Pooled: median(column(rounds, v)) / s.BaselineMedian}
			if o.Resamples > 0 {
				slices.Sort(boot[j])
				r.Low, r.High = quantile(boot[j], 0.025), quantile(boot[j], 0.975)
			}
			for i, run := range runOrder {
				x := median(column(runs[run], v)) / median(column(runs[run], Baseline))
				if i == 0 || x < r.RunLow {
					r.RunLow = x
				}
				if i == 0 || x > r.RunMax {
					r.RunMax = x
				}
			}
			s.Ratios = append(s.Ratios, r)
		}
		if o.Paired != "" {
			for _, v := range names {
				if v != o.Paired {
					s.Paired = append(s.Paired, paired(rounds, v, o.Paired, o.Resamples, rng))
				}
			}
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil, errors.New("no samples")
	}
	return out, nil
}

// paired is v's Diff to ref over rounds, its interval by resampling the
// rounds' differences.
func paired(rounds []round, v, ref string, resamples int, rng *rand.Rand) Diff {
	d := make([]float64, len(rounds))
	for i, r := range rounds {
		d[i] = r[v] - r[ref]
	}
	out := Diff{Variant: v, Median: median(d)}
	if resamples == 0 {
		return out
	}
	boot := make([]float64, resamples)
	picked := make([]float64, len(d))
	for k := range boot {
		for i := range picked {
			picked[i] = d[rng.IntN(len(d))]
		}
		boot[k] = median(picked)
	}
	slices.Sort(boot)
	out.Low, out.High = quantile(boot, 0.025), quantile(boot, 0.975)
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
// as the benchmarks' own.
func median(x []float64) float64 {
	s := slices.Sorted(slices.Values(x))
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// quantile is the q-quantile of sorted s, the nearest rank's.
func quantile(s []float64, q float64) float64 {
	i := int(q * float64(len(s)))
	return s[min(max(i, 0), len(s)-1)]
}
