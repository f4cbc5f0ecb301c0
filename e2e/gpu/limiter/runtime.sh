#!/usr/bin/env bash
# Proves on a GPU machine that a container gpumux-runtime starts on a
# time-slice replica gets the limiter and is held by it: two runc
# containers (the host's / read-only as their root) ask by annotation for
# memory and compute on a GPU split as replica_sizes = ["50%", "25%", "25%"];
# inside, PyTorch sees its replica's memory and no more, and the two get
# their parts of the GPU's time while both are busy. Changes no card
# setting. With CONTAINERD set (containerd's binary), the containers come
# from a private containerd instead (ctr run with gpumux-runtime as the runc
# shim's binary, as a runtime class sets BinaryName); CTR names ctr.
# Usage, from the repository root, as root:
#
#   RUNTIME=bin/gpumux-runtime RUNC=runc LIMITER=bin/limiter bash e2e/gpu/limiter/runtime.sh
#   CONTAINERD=containerd CTR=ctr RUNTIME=… RUNC=… LIMITER=… bash e2e/gpu/limiter/runtime.sh
set -euo pipefail
RUNTIME=$(realpath "${RUNTIME:?}") RUNC=$(command -v "${RUNC:-runc}") LIMITER=$(realpath "${LIMITER:?}")
here=$(dirname "$(realpath "$0")")
python=$(command -v python3)
work=$(mktemp -d /tmp/gmxlr.XXXX)
ctrd=
cleanup() {
	for c in big small big-spin small-spin; do "$RUNC" --root "$work/runc" delete -f $c >/dev/null 2>&1 || true; done
	[[ -n $ctrd ]] && kill "$ctrd" 2>/dev/null && wait "$ctrd" 2>/dev/null
	umount -R -l "$work/rootfs" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
source "$(dirname "$here")/runc-lib.sh"
source "$here/checks.sh"
mount_rootfs
fail() { echo "FAIL: $*"; exit 1; }
nvcc -O2 -o "$work/spin" "$here/../../../timeslice/limiter/tests/gpu/spin.cu"
cat >"$work/node.hcl" <<HCL
state_dir   = "$work/state"
limiter_dir = "$LIMITER"
gpu {
  match         = "0"
  mechanism     = "timeslice"
  replica_sizes = ["50%", "25%", "25%"]
}
HCL
export GPUMUX_CONFIG="$work/node.hcl" GPUMUX_RUNC="$RUNC"
# launch NAME ANNOTATIONS-JSON COMMAND: one container, through runc or
# containerd; prints what it printed.
if [[ -n ${CONTAINERD:-} ]]; then
	mkdir -p "$work/ctrd"
	cat >"$work/ctrd/config.toml" <<TOML
version = 2
root = "$work/ctrd/root"
state = "$work/ctrd/state"
[grpc]
  address = "$work/ctrd/sock"
TOML
	"$CONTAINERD" --config "$work/ctrd/config.toml" >"$work/ctrd/log" 2>&1 &
	ctrd=$!
	for _ in $(seq 50); do "${CTR:-ctr}" --address "$work/ctrd/sock" version >/dev/null 2>&1 && break; sleep 0.2; done
	echo "containerd: $("${CTR:-ctr}" --address "$work/ctrd/sock" version | awk '/Version/ {print $2}' | tail -1)"
	launch() {
		local ann=()
		mapfile -t ann < <(python3 -c 'import json, sys; [print(f"--annotation={k}={v}") for k, v in json.loads(sys.argv[1]).items()]' "$2")
		echo "== $1:"
		"${CTR:-ctr}" --address "$work/ctrd/sock" -n gpumux run --rm --rootfs --read-only --runc-binary "$RUNTIME" "${ann[@]}" \
			"$work/rootfs" "$1" /bin/sh -c "$3" </dev/null 2>&1
	}
else
	launch() { bundle_sh "$1" "$2" "$3" && run "$1" "$RUNTIME"; }
fi
total=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i 0)   # MiB, as NVML reports it to gpumux
half_mib=$(( total * 50 / 100 )) quarter_mib=$(( total * 25 / 100 ))
echo "GPU 0: $total MiB; replicas of $half_mib and $quarter_mib MiB"

# Memory: each container sees its replica and gets no more.
launch big '{"gpumux.io/mechanism": "timeslice", "gpumux.io/memory": "40Gi"}' "env | grep -E '^(GPUMUX_SHARES|LD_LIBRARY_PATH)='; $python $here/memory.py report; $python $here/memory.py fill 100" | tee "$work/big.txt"
launch small '{"gpumux.io/mechanism": "timeslice", "gpumux.io/compute": "20"}' "env | grep -E '^(GPUMUX_SHARES|LD_LIBRARY_PATH)='; $python $here/memory.py report; $python $here/memory.py fill 100" | tee "$work/small.txt"
check_held big "$half_mib" "$work/big.txt"
check_held small "$quarter_mib" "$work/small.txt"

# Time: both busy at once, each gets its part.
alone=$("$work/spin" run 4 200 | awk '{print $6}')
at=$(python3 -c "import time; print(time.time() + ${CONTAINERD:+3+}3)")
launch big-spin '{"gpumux.io/mechanism": "timeslice", "gpumux.io/memory": "40Gi"}' "START_AT=$at $work/spin run 4 200" >"$work/bs.txt" &
big_spin=$!
launch small-spin '{"gpumux.io/mechanism": "timeslice", "gpumux.io/compute": "20"}' "START_AT=$at $work/spin run 4 200" >"$work/ss.txt"
wait "$big_spin" # not containerd's
check_split "$work/bs.txt" "$work/ss.txt" "$alone"
echo PASS
