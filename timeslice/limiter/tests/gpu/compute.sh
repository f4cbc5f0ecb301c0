#!/usr/bin/env bash
# The compute limit on a real GPU: launch overhead, and the GPU time two
# replicas get. From the repository root: bash timeslice/limiter/tests/gpu/compute.sh
set -uo pipefail
here=$(dirname "$(realpath "$0")")
root=$(realpath "$here/../../../..")
work=$(mktemp -d /tmp/limcomp.XXXX)
cd "$root"
make --no-print-directory limiter LIMITER_OUT_DIR="$work/lib" >/dev/null || exit 1
nvcc -O2 -o "$work/spin" "$here/spin.cu" || exit 1
real_cuda=$(readlink -f "$(ldconfig -p | awk '/libcuda\.so\.1 / {print $NF; exit}')")
mkdir -p "$work/node"
US=${US:-200}
SECS=${SECS:-4}
# share N PCT POLICY: a replica's directory
share() {
	mkdir -p "$work/s$1/state"
	printf 'version=1\nshare=GPU-c/timeslice/%d\nmemory_bytes=0\ncompute_percent=%d\npolicy=%s\n' "$1" "$2" "$3" >"$work/s$1/limits"
}
as() { # as N CMD...: run CMD in replica N
	local n=$1; shift
	LD_LIBRARY_PATH="$work/lib" GPUMUX_LIMITER_LIMITS="$work/s$n/limits" GPUMUX_LIMITER_STATE="$work/s$n/state" \
		GPUMUX_LIMITER_NODE="$work/node" GPUMUX_LIMITER_CUDA="$real_cuda" "$@"
}
echo "== launch overhead (200000 empty kernels, 3 rounds)"
share 0 100 off; share 1 100 cap; share 2 100 share
for r in 1 2 3; do
	echo "plain $("$work/spin" bench 200000) | off $(as 0 "$work/spin" bench 200000) | cap 100 $(as 1 "$work/spin" bench 200000) | share $(as 2 "$work/spin" bench 200000)"
done
echo "== alone"
for us in 20 200 2000; do
	echo "plain ${us} µs: $("$work/spin" run "$SECS" "$us")"
done
for c in "25 cap" "25 share"; do
	set -- $c; share 0 "$1" "$2"; rm -f "$work/node/"*
	echo "limiter $1% $2, ${US} µs: $(as 0 "$work/spin" run "$SECS" "$US")"
done
echo "== two at once"
pair() { # pair A B POLICY
	share 0 "$1" "$3"; share 1 "$2" "$3"; rm -f "$work/node/"*
	local at; at=$(python3 -c 'import time; print(time.time() + 1.5)')
	START_AT=$at as 0 "$work/spin" run "$SECS" "$US" >"$work/a" & START_AT=$at as 1 "$work/spin" run "$SECS" "$US" >"$work/b"
	wait
	echo "$1/$2 $3 ${US} µs: A $(cat "$work/a") | B $(cat "$work/b")"
}
pair 50 50 cap
pair 25 75 cap
pair 10 90 cap
pair 25 75 share
US=2000 pair 25 75 cap
US=20 pair 25 75 cap
US=20 pair 10 90 cap
echo "== PyTorch bf16 4096² matmuls"
echo "plain: $(python3 "$here/mm.py" "$SECS")"
share 0 50 cap; rm -f "$work/node/"*
echo "alone, 50% cap: $(as 0 python3 "$here/mm.py" "$SECS")"
share 0 25 cap; share 1 75 cap; rm -f "$work/node/"*
at=$(python3 -c 'import time; print(time.time() + 8)')
START_AT=$at as 0 python3 "$here/mm.py" "$SECS" >"$work/a" & START_AT=$at as 1 python3 "$here/mm.py" "$SECS" >"$work/b"
wait
echo "25/75 cap: A $(cat "$work/a") | B $(cat "$work/b")"
