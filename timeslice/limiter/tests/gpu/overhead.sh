#!/usr/bin/env bash
# The limiter's cost per launch on a real GPU, and what it knows about a
# PyTorch loop (GPUMUX_LIMITER_DEBUG). bash timeslice/limiter/tests/gpu/overhead.sh
set -uo pipefail
here=$(dirname "$(realpath "$0")")
root=$(realpath "$here/../../../..")
work=$(mktemp -d /tmp/limover.XXXX)
cd "$root"
make --no-print-directory limiter LIMITER_OUT_DIR="$work/lib" >/dev/null || exit 1
nvcc -O2 -o "$work/spin" "$here/spin.cu" || exit 1
cc -O2 -o "$work/clockbench" "$here/clockbench.c" && "$work/clockbench"
cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null
real_cuda=$(readlink -f "$(ldconfig -p | awk '/libcuda\.so\.1 / {print $NF; exit}')")
mkdir -p "$work/node"
share() {
	mkdir -p "$work/s$1/state"
	printf 'version=1\nshare=GPU-c/timeslice/%d\nmemory_bytes=0\ncompute_percent=%d\npolicy=%s\n' "$1" "$2" "$3" >"$work/s$1/limits"
}
as() {
	local n=$1; shift
	LD_LIBRARY_PATH="$work/lib" GPUMUX_LIMITER_LIMITS="$work/s$n/limits" GPUMUX_LIMITER_STATE="$work/s$n/state" \
		GPUMUX_LIMITER_NODE="$work/node" GPUMUX_LIMITER_CUDA="$real_cuda" "$@"
}
share 0 100 off; share 1 100 cap
for r in 1 2 3 4; do
	echo "plain $("$work/spin" bench 300000) | off $(as 0 "$work/spin" bench 300000) | cap 100 $(as 1 "$work/spin" bench 300000)"
done
GPUMUX_LIMITER_DEBUG=1 as 1 "$work/spin" bench 300000
SECS=${SECS:-4}
echo "plain: $(python3 "$here/mm.py" "$SECS")"
share 2 50 cap; rm -f "$work/node/"*
echo "alone, 50% cap: $(GPUMUX_LIMITER_DEBUG=1 as 2 python3 "$here/mm.py" "$SECS" 2>&1 | tr '\n' ' ')"
rm -f "$work/node/"*
echo "spin alone, 50% cap: $(GPUMUX_LIMITER_DEBUG=1 as 2 "$work/spin" run "$SECS" 200 2>&1 | tr '\n' ' ')"
