package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
)

func main() {
	resamples := flag.Int("resamples", 2000, "how many times to resample the counts for the 95% intervals (0: none)")
	seed := flag.Uint64("seed", 1, "the resampling's seed")
	pair := flag.String("paired", "", "also print each way's time less `WAY`'s in the same round (milliseconds, median and 95% interval)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: benchratio [flags] SAMPLES-FILE...\n\nPools the containers an engine benchmark wrote to GPUMUX_BENCH_SAMPLES and prints each way's ratio to runc.\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 || *resamples < 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(os.Stdout, flag.Args(), Options{Resamples: *resamples, Seed: *seed, Paired: *pair}); err != nil {
		fmt.Fprintln(os.Stderr, "benchratio:", err)
		os.Exit(1)
	}
}

func run(w io.Writer, files []string, o Options) error {
	var samples []Sample
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		s, err := Parse(f, name)
		f.Close()
		if err != nil {
			return err
		}
		samples = append(samples, s...)
	}
	sums, err := Summarize(samples, o)
	if err != nil {
		return err
	}
	for _, s := range sums {
		fmt.Fprintf(w, "%s: %s: %d rounds in %d run(s); runc's median container %.1f ms\n", s.Source, s.Benchmark, s.Rounds, s.Runs, s.BaselineMedian/1e6)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "way\t× runc, pooled\t95% interval\tthe runs' ratios")
		for _, r := range s.Ratios {
			fmt.Fprintf(tw, "%s\t%.3f\t%s\t%.3f–%.3f\n", r.Variant, r.Pooled, span("%.3f", r.Low, r.High, o), r.RunMin, r.RunMax)
		}
		tw.Flush()
		if len(s.Paired) > 0 {
			fmt.Fprintf(w, "\npaired with %s, the same round's (ms):\n", o.Paired)
			tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintf(tw, "way\t− %s\t95%% interval\n", o.Paired)
			for _, d := range s.Paired {
				fmt.Fprintf(tw, "%s\t%+.2f\t%s\n", d.Variant, d.Median/1e6, span("%+.2f", d.Low/1e6, d.High/1e6, o))
			}
			tw.Flush()
		}
		fmt.Fprintln(w)
	}
	return nil
}

// span prints an interval, "–" where there was no resampling.
func span(format string, low, high float64, o Options) string {
	if o.Resamples == 0 {
		return "–"
	}
	return fmt.Sprintf(format+"–"+format, low, high)
}
