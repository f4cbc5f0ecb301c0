#!/usr/bin/env bash
# The limiter on a real GPU (driver 580, CUDA 13): ABI against cuda.h, the
# driver's cuGetProcAddress answers, an nvcc program with the static
# runtime, nvidia-smi. From the repository root: bash timeslice/limiter/tests/gpu/smoke.sh
set -uo pipefail
here=$(dirname "$(realpath "$0")")
root=$(realpath "$here/../../../..")
work=$(mktemp -d /tmp/limsmoke.XXXX)
cd "$root"
make --no-print-directory limiter LIMITER_OUT_DIR="$work/lib" >/dev/null || exit 1
lim=timeslice/limiter
echo "== abi-check against $(ls /usr/local/cuda/include/cuda.h)"
cc -std=gnu11 -fsyntax-only -Wall -Wextra -Werror -DGM_USE_CUDA_H -I/usr/local/cuda/include \
	$lim/lim_*.c $lim/cuda_*.c $lim/zz_cuda.c && echo "abi-check ok"
real_cuda=$(readlink -f "$(ldconfig -p | awk '/libcuda\.so\.1 / {print $NF; exit}')")
real_nvml=$(readlink -f "$(ldconfig -p | awk '/libnvidia-ml\.so\.1 / {print $NF; exit}')")
echo "== the real driver: $real_cuda"
readelf -d "$real_cuda" | grep -E 'SYMBOLIC|FLAGS' || echo "(no DT_SYMBOLIC / flags)"
echo "dynamic relocations against cu* symbols: $(readelf -rW "$real_cuda" | awk '$5 ~ /^cu/' | wc -l)"
readelf -rW "$real_cuda" | awk '$5 ~ /^cu/' | head -5
mkdir -p "$work/state"
limit=$((4 << 30))
printf 'version=1\nshare=GPU-smoke/timeslice/0\nmemory_bytes=%d\ncompute_percent=50\npolicy=cap\n' $limit >"$work/limits"
limited() {
	LD_LIBRARY_PATH="$work/lib" GPUMUX_LIMITER_LIMITS="$work/limits" GPUMUX_LIMITER_STATE="$work/state" \
		GPUMUX_LIMITER_CUDA="$real_cuda" GPUMUX_LIMITER_NVML="$real_nvml" "$@"
}
echo "== cuGetProcAddress through the limiter"
cc -O1 -o "$work/procaddr" "$here/procaddr_real.c" -L"$work/lib" -l:libcuda.so.1 -ldl
limited "$work/procaddr"
echo "== nvcc program (static cudart), 4 GiB limit"
nvcc -O2 -o "$work/vadd" "$here/vadd.cu" 2>&1 | grep -v warning
limited "$work/vadd"
echo "== without the limiter"
"$work/vadd" | head -2
echo "== nvidia-smi through the limiter"
limited nvidia-smi --query-gpu=name,memory.total,memory.used,memory.free --format=csv
echo "== search without GPUMUX_LIMITER_CUDA"
LD_LIBRARY_PATH="$work/lib" GPUMUX_LIMITER_LIMITS="$work/limits" GPUMUX_LIMITER_STATE="$work/state" "$work/vadd" | head -2
ls -la "$work/state"
