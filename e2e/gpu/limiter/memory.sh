#!/usr/bin/env bash
# Proves on a GPU machine that gpumux's limiter holds PyTorch to a share's
# memory: with an 8 GiB limit, what torch.cuda.mem_get_info() and nvidia-smi
# show; how much a program can take; two and four processes of one share together;
# a process killed with -9 gives its memory back; a training loop runs
# inside the share with the same losses as without the limiter. Changes no
# card setting. Usage, from the repository root (bin/limiter from `make
# limiter`, carried):
#
#   LIMITER=bin/limiter bash e2e/gpu/limiter/memory.sh
set -euo pipefail
LIMITER=$(realpath "${LIMITER:?}")
here=$(dirname "$(realpath "$0")")
work=$(mktemp -d /tmp/gmxlim.XXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
real_cuda=$(ldconfig -p | awk '/libcuda\.so\.1 / {print $NF; exit}')
real_nvml=$(ldconfig -p | awk '/libnvidia-ml\.so\.1 / {print $NF; exit}')
echo "real driver: $real_cuda, $real_nvml"
limit_gib=8
mkdir -p "$work/state"
printf 'version=1\nshare=GPU-test/timeslice/0\nmemory_bytes=%d\ncompute_percent=50\npolicy=cap\n' $((limit_gib << 30)) >"$work/limits"
fail() { echo "FAIL: $*"; exit 1; }
# limited CMD...: runs CMD as a process of the share. In the background,
# use "env "${share_env[@]}" CMD &" instead, so that $! is the command's
# own pid (env execs it), which kill -9 then reaches.
share_env=(LD_LIBRARY_PATH="$LIMITER${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" GPUMUX_LIMITER_LIMITS="$work/limits"
	GPUMUX_LIMITER_STATE="$work/state" GPUMUX_LIMITER_CUDA="$real_cuda" GPUMUX_LIMITER_NVML="$real_nvml")
limited() { env "${share_env[@]}" "$@"; }
py() { python3 "$here/memory.py" "$@"; }

echo "== without the limiter"; py report
echo "== with an ${limit_gib} GiB limit"
limited python3 "$here/memory.py" report | tee "$work/report"
grep -q "total=$((limit_gib << 30))$" "$work/report" || fail "mem_get_info's total is not the limit"
grep -q "DEVICE_TOTAL $((limit_gib << 30))$" "$work/report" || fail "the device's total memory is not the limit"
smi=$(limited nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i 0)
echo "nvidia-smi memory.total: $smi MiB"
[[ $smi == $((limit_gib * 1024)) ]] || fail "nvidia-smi shows $smi MiB"

limited python3 "$here/memory.py" fill 12 | tee "$work/fill"
got=$(awk '/^FILLED/ {print $2}' "$work/fill")
[[ $got -le $limit_gib && $got -ge $((limit_gib - 1)) ]] && grep -q '^OOM' "$work/fill" || fail "filled $got GiB under an ${limit_gib} GiB limit"
echo "one process: $got of ${limit_gib} GiB, then CUDA out of memory"

echo "== two processes of one share"
env "${share_env[@]}" python3 "$here/memory.py" hold 5 8 >"$work/a" &
a=$!
for _ in $(seq 100); do grep -q HELD "$work/a" && break; sleep 0.1; done
grep -q "HELD 5" "$work/a" || fail "process A: $(cat "$work/a")"
b=$(limited python3 "$here/memory.py" hold 5 0)
[[ $b == OOM ]] || fail "process B got 5 GiB while A held 5 of 8: $b"
echo "A holds 5 GiB: B's 5 GiB is refused ($b)"
kill -9 "$a"; wait "$a" 2>/dev/null || true
b=$(limited python3 "$here/memory.py" hold 5 0)
[[ $b == "HELD 5" ]] || fail "after A was killed with -9, B: $b"
echo "A killed with -9: B now gets 5 GiB ($b)"

echo "== four processes of one share"
pids=()
for i in 1 2 3 4; do
	env "${share_env[@]}" python3 "$here/memory.py" hold 2 10 >"$work/p$i" &
	pids+=($!)
done
for i in 1 2 3 4; do
	for _ in $(seq 200); do grep -q 'HELD\|OOM' "$work/p$i" && break; sleep 0.1; done
done
held=$(cat "$work"/p[1-4] | grep -c "HELD 2")
fifth=$(limited python3 "$here/memory.py" hold 1 0)
kill -9 "${pids[@]}" 2>/dev/null; wait 2>/dev/null || true
[[ $held == 4 && $fifth == OOM ]] || fail "four processes holding 2 GiB each: $held held; a fifth's 1 GiB: $fifth"
echo "four processes hold 2 GiB each (8 of 8): all held; a fifth's 1 GiB is refused ($fifth)"

echo "== training inside the share"
py train 60 >"$work/train-plain"
limited python3 "$here/memory.py" train 60 >"$work/train-limited"
diff <(grep STEP "$work/train-plain") <(grep STEP "$work/train-limited") || fail "losses differ under the limiter"
peak=$(awk '/^PEAK_RESERVED/ {print $2}' "$work/train-limited")
[[ $peak -le $((limit_gib << 30)) ]] || fail "training reserved $peak bytes"
echo "60 AdamW steps: losses identical to the run without the limiter; peak reserved $peak bytes"
echo PASS
