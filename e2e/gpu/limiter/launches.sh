#!/usr/bin/env bash
# Launch cost of two builds of the limiter, A and B, against no limiter,
# in one run: five rounds, alternated, each printing µs per empty-kernel
# launch and per PyTorch elementwise op for plain, A and B under cap and
# share (one replica of compute_percent 100, alone). Changes no card
# setting. Usage, from the repository root:
#
#   A=old/limiter B=bin/limiter bash e2e/gpu/limiter/launches.sh
set -euo pipefail
A=$(realpath "${A:?}") B=$(realpath "${B:?}")
here=$(dirname "$(realpath "$0")")
work=$(mktemp -d /tmp/gmxll.XXXX)
trap 'rm -rf "$work"' EXIT
nvcc -O2 -o "$work/spin" "$here/../../../timeslice/limiter/tests/gpu/spin.cu"
real_cuda=$(ldconfig -p | awk '/libcuda\.so\.1 / {print $NF; exit}')
real_nvml=$(ldconfig -p | awk '/libnvidia-ml\.so\.1 / {print $NF; exit}')
# limited LIB POLICY CMD...: CMD as a lone replica of compute_percent 100.
limited() {
	local lib=$1 policy=$2
	shift 2
	rm -rf "$work/o" "$work/node" && mkdir -p "$work/o/state" "$work/node"
	printf 'version=1\nshare=GPU-ab/timeslice/0\nmemory_bytes=0\ncompute_percent=100\npolicy=%s\n' "$policy" >"$work/o/limits"
	LD_LIBRARY_PATH=$lib GPUMUX_LIMITER_LIMITS=$work/o/limits GPUMUX_LIMITER_STATE=$work/o/state GPUMUX_LIMITER_NODE=$work/node \
		GPUMUX_LIMITER_CUDA=$real_cuda GPUMUX_LIMITER_NVML=$real_nvml "$@"
}
costs() { # costs [LIB POLICY]: "µs-per-launch µs-per-op"
	local pre=()
	[[ $# -gt 0 ]] && pre=(limited "$@")
	echo "$("${pre[@]}" "$work/spin" bench 200000 | awk '{print $2}') $("${pre[@]}" python3 "$here/compute.py" launches 50000 | awk '{print $2}')"
}
for _ in 1 2 3 4 5; do
	line="plain $(costs)"
	for l in A B; do
		for p in cap share; do line+=" | $l-$p $(costs "${!l}" $p)"; done
	done
	echo "$line"
done
