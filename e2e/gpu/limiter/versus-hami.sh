#!/usr/bin/env bash
# gpumux's limiter and HAMi-core side by side on one GPU, in one run: the
# same programs, the same splits. HAMi-core (github.com/Project-HAMi/HAMi-core,
# its own CMake and nvcc) is built here from a source tarball and never
# enters this repository. Changes no card setting. Usage, from the
# repository root:
#
#   LIMITER=bin/limiter HAMI_SRC=/path/to/HAMi-core.tar.gz bash e2e/gpu/limiter/versus-hami.sh
#
# Prints, per limiter: memory (an 8 GiB limit: what PyTorch's mem_get_info
# says, and how many 1 GiB tensors it gets), the GPU time two processes get
# at 50/50, 25/75 and 10/90 (kernels that keep every SM busy for 200 µs,
# back to back for 4 s; the part of the wall time their kernels ran,
# normalised by what one process gets alone), one process alone at 25%, and
# the host cost of a launch (200 000 empty kernels).
set -uo pipefail
LIMITER=$(realpath "${LIMITER:?}") HAMI_SRC=$(realpath "${HAMI_SRC:?}")
here=$(dirname "$(realpath "$0")")
spin_src=$(realpath "$here/../../../timeslice/limiter/tests/gpu/spin.cu")
work=$(mktemp -d /tmp/gmxvs.XXXX)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
nvcc -O2 -o "$work/spin" "$spin_src" || exit 1
real_cuda=$(readlink -f "$(ldconfig -p | awk '/libcuda\.so\.1 / {print $NF; exit}')")
real_nvml=$(readlink -f "$(ldconfig -p | awk '/libnvidia-ml\.so\.1 / {print $NF; exit}')")

mkdir -p "$work/hami" && tar -xzf "$HAMI_SRC" -C "$work/hami"
# HAMi-core's own build script (its hooks and multi-process limit on); its
# CMakeLists asks for CMake < 3.5, which current CMake refuses without this.
(cd "$work/hami" && CMAKE_OPTIONS="-DCMAKE_POLICY_VERSION_MINIMUM=3.5" J="$(nproc)" sh build.sh >"$work/hami-build.log" 2>&1)
hami_lib=$(find "$work/hami" -name 'libvgpu.so' | head -1)
if [[ -z $hami_lib ]]; then
	echo "HAMi-core did not build:"; tail -20 "$work/hami-build.log"
fi
echo "HAMi-core: ${hami_lib:-not built}"

# ours N PCT MEM_BYTES CMD...: CMD as replica N of gpumux's limiter, with
# policy $POLICY (default cap); ours_share is the same with policy share.
ours_share() { POLICY=share ours "$@"; }
ours() {
	local n=$1 pct=$2 mem=$3; shift 3
	mkdir -p "$work/o$n/state" "$work/onode"
	printf 'version=1\nshare=GPU-vs/timeslice/%d\nmemory_bytes=%d\ncompute_percent=%d\npolicy=%s\n' "$n" "$mem" "$pct" "${POLICY:-cap}" >"$work/o$n/limits"
	LD_LIBRARY_PATH="$LIMITER" GPUMUX_LIMITER_LIMITS="$work/o$n/limits" GPUMUX_LIMITER_STATE="$work/o$n/state" \
		GPUMUX_LIMITER_NODE="$work/onode" GPUMUX_LIMITER_CUDA="$real_cuda" GPUMUX_LIMITER_NVML="$real_nvml" "$@"
}
# hami N PCT MEM CMD...: CMD as container N under HAMi-core (its own shared cache per container).
hami() {
	local n=$1 pct=$2 mem=$3; shift 3
	local env=(LD_PRELOAD="$hami_lib" CUDA_DEVICE_SM_LIMIT="$pct" CUDA_DEVICE_MEMORY_SHARED_CACHE="$work/h$n.cache")
	[[ $mem != 0 ]] && env+=(CUDA_DEVICE_MEMORY_LIMIT="$((mem >> 30))g")
	env "${env[@]}" "$@"
}
frac() { awk '/GPU_FRAC/ {print $6}' <<<"$1"; }
alone=$(frac "$("$work/spin" run 4 200)")
echo "alone, no limiter: GPU_FRAC $alone"
pct() { python3 -c "print(f'{100*$1/$alone:.1f}')"; }

declare -A row
run_pair() { # run_pair LIMITER A B
	local l=$1 a=$2 b=$3 at
	rm -rf "$work/onode" "$work"/h*.cache
	at=$(python3 -c 'import time; print(time.time() + 1.5)')
	START_AT=$at $l 0 "$a" 0 "$work/spin" run 4 200 >"$work/pa" 2>"$work/pa.err" &
	START_AT=$at $l 1 "$b" 0 "$work/spin" run 4 200 >"$work/pb" 2>"$work/pb.err"
	wait
	row[$l,$a/$b]="$(pct "$(frac "$(cat "$work/pa")")") / $(pct "$(frac "$(cat "$work/pb")")")"
}
limiters=(ours ours_share)
[[ -n $hami_lib ]] && limiters+=(hami)
for l in "${limiters[@]}"; do
	for split in "50 50" "25 75" "10 90"; do
		set -- $split; run_pair "$l" "$1" "$2"
	done
	rm -rf "$work/onode" "$work"/h*.cache
	row[$l,alone]=$(pct "$(frac "$($l 0 25 0 "$work/spin" run 4 200)")")
	rm -rf "$work/o0" "$work"/h*.cache
	out=$($l 0 100 $((8 << 30)) python3 "$here/memory.py" report 2>&1; $l 0 100 $((8 << 30)) python3 "$here/memory.py" fill 12 2>&1)
	row[$l,memtotal]=$(grep -o 'total=[0-9]*' <<<"$out" | head -1 | cut -d= -f2)
	row[$l,filled]=$(awk '/^FILLED/ {print $2}' <<<"$out")
done
# Launch cost: 5 rounds, the limiters alternated, the median of each.
declare -A launches
for r in 1 2 3 4 5; do
	rm -rf "$work/onode" "$work"/h*.cache
	launches[plain]+="$("$work/spin" bench 200000 | awk '{print $2}') "
	launches[plain,torch]+="$(python3 "$here/compute.py" launches 50000 | awk '{print $2}') "
	for l in "${limiters[@]}"; do
		launches[$l]+="$($l 0 100 0 "$work/spin" bench 200000 | awk '{print $2}') "
		launches[$l,torch]+="$($l 0 100 0 python3 "$here/compute.py" launches 50000 | awk '{print $2}') "
	done
done
median() { tr ' ' '\n' <<<"$1" | grep . | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
plain_launch=$(median "${launches[plain]}") plain_torch=$(median "${launches[plain,torch]}")
for l in "${limiters[@]}"; do
	m=$(median "${launches[$l]}") mt=$(median "${launches[$l,torch]}")
	row[$l,launch]="$m ($(python3 -c "print(f'{100*($m/$plain_launch-1):+.1f}%')"))"
	row[$l,torch]="$mt ($(python3 -c "print(f'{100*($mt/$plain_torch-1):+.1f}%')"))"
done

printf '\n%-34s %-22s %-22s %-22s\n' "" "gpumux limiter, cap" "gpumux limiter, share" "HAMi-core"
printf '%-34s %-22s %-22s %-22s\n' "mem_get_info total, 8 GiB limit" "${row[ours,memtotal]:-}" "${row[ours_share,memtotal]:-}" "${row[hami,memtotal]:-}"
printf '%-34s %-22s %-22s %-22s\n' "1 GiB tensors before OOM (of 8)" "${row[ours,filled]:-}" "${row[ours_share,filled]:-}" "${row[hami,filled]:-}"
for split in 50/50 25/75 10/90; do
	printf '%-34s %-22s %-22s %-22s\n' "GPU time % at $split" "${row[ours,$split]:-}" "${row[ours_share,$split]:-}" "${row[hami,$split]:-}"
done
printf '%-34s %-22s %-22s %-22s\n' "GPU time % alone at 25" "${row[ours,alone]:-}" "${row[ours_share,alone]:-}" "${row[hami,alone]:-}"
printf '%-34s %-22s %-22s %-22s\n' "µs per launch, median of 5 (plain $plain_launch)" "${row[ours,launch]:-}" "${row[ours_share,launch]:-}" "${row[hami,launch]:-}"
printf '%-34s %-22s %-22s %-22s\n' "µs per PyTorch op (plain $plain_torch)" "${row[ours,torch]:-}" "${row[ours_share,torch]:-}" "${row[hami,torch]:-}"
