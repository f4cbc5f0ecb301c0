#!/usr/bin/env bash
# Plugin benchmarks for docs/benchmarks.md: Fingerprint against the NVML
# inventory alone, measured in the same run, and Reserve. Prints medians of
# COUNT runs and the ratio.
#
#   scripts/bench-plugin.sh                          simulated 8×H200 node with 56 MIG instances (go test)
#   PLUGIN_TEST=.devbin/plugin.test PREFIX=Real \
#     scripts/bench-plugin.sh                        the machine's real GPUs (binary from `make gpu-bin`)
set -euo pipefail
cd "$(dirname "$0")/.."
count=${COUNT:-7}
prefix=${PREFIX:-}
pattern="^Benchmark${prefix}(Inventory|Fingerprint|Reserve)\$"
if [[ -n ${PLUGIN_TEST:-} ]]; then
	out=$("$PLUGIN_TEST" -test.run '^$' -test.bench "$pattern" -test.benchmem -test.count "$count")
else
	out=$(go test ./plugin/ -run '^$' -bench "$pattern" -benchmem -count "$count")
fi
echo "$out" | grep -E '^(goos|goarch|cpu):'
echo "$out" | awk -v count="$count" -v prefix="$prefix" '
	/^Benchmark/ {
		name = $1; sub(/-[0-9]+$/, "", name); sub("^Benchmark" prefix, "", name)
		ns[name] = ns[name] " " $3; bytes[name] = $5; allocs[name] = $7
	}
	function median(list,   a, n, i, j, t) {
		n = split(list, a, " ")
		for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
		return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
	}
	END {
		printf "%-12s %14s %12s %10s\n", "benchmark", "median ns/op", "B/op", "allocs/op"
		split("Inventory Fingerprint Reserve", order, " ")
		for (k = 1; k <= 3; k++) { n = order[k]; m[n] = median(ns[n]); printf "%-12s %14.0f %12s %10s\n", prefix n, m[n], bytes[n], allocs[n] }
		printf "\nFingerprint / Inventory = %.2f (median of %d runs each, same process)\n", m["Fingerprint"] / m["Inventory"], count
	}'
