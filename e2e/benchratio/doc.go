// Command benchratio pools the containers of an engine benchmark's counts
// and says how much slower than plain runc each way of starting one is,
// with how sure that figure is.
//
// The e2e engine benchmarks (BenchmarkCRILifecycle, BenchmarkContainerLifecycle,
// BenchmarkDockerCDIRun, ...) report, per count, each way's median container
// over runc's. On a noisy node one count's ratio moves by 0.1, so whether a
// way is within 1.10 of runc cannot be read off a few counts. With
// GPUMUX_BENCH_SAMPLES=FILE the benchmarks also append every container's
// time to FILE; benchratio reads it and prints, per benchmark and way:
//
//   - the ratio of the pooled medians: the way's median container over
//     runc's, every count's containers together;
//   - a 95% interval for it, by resampling the counts with replacement
//     (a count's rounds are one container of every way, back to back in a
//     shuffled order, so that what drifts between rounds hits runc and the
//     way alike);
//   - the range of the counts' own ratios, as the benchmark reported them;
//   - with -paired WAY, each way's time less WAY's in the same round, in
//     milliseconds: the median over the rounds and its 95% interval.
//
// The intervals resample whole counts: a count has a containerd and an
// agent of its own and can sit high or low as a whole. A file of one count
// has its rounds resampled instead, which leaves that out. Each file is
// summarised apart, and every round of a file must have the same ways: keep
// runs of other GPUMUX_BENCH_WAYS or ablations, and runs of other builds,
// in files of their own. Samples are written only by counts of more than
// one iteration: run the benchmarks with -benchtime Nx, N at least 2.
//
// Usage:
//
//	GPUMUX_BENCH_SAMPLES=/tmp/samples.csv go test -tags 'e2e no_dynamic_plugins' -run '^$' -bench CRILifecycle -benchtime 30x -count 8 ./e2e/
//	go run ./e2e/benchratio /tmp/samples.csv
//
// The resampling is seeded (-seed), so that a file always gives the same
// figures.
package main
