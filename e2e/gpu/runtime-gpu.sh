#!/usr/bin/env bash
# Proves on a GPU machine that gpumux-runtime's injection is what a CUDA
# container needs: the same container (root filesystem "/" read-only, running
# e2e/gpu/mpsprobe) through plain runc, which gives it no GPU device, and
# through gpumux-runtime asking for a whole GPU, on the real NVML. Read-only for
# the card. Usage, from the repository root, as root:
#
#   RUNTIME=bin/gpumux-runtime GPUMUX=bin/gpumux RUNC=runc PROBE=/tmp/mpsprobe bash e2e/gpu/runtime-gpu.sh
set -euo pipefail
RUNTIME=$(realpath "${RUNTIME:?}") RUNC=$(command -v "${RUNC:-runc}") PROBE=$(realpath "${PROBE:?}") GPUMUX=$(realpath "${GPUMUX:?}")
work=$(mktemp -d /tmp/gmxrt.XXXX)
trap 'for c in plain gpumux; do "$RUNC" --root "$work/runc" delete -f $c >/dev/null 2>&1 || true; done; umount -R -l "$work/rootfs" 2>/dev/null || true; rm -rf "$work"' EXIT
# The containers' root: the host's, bound read-only (runc cannot pivot into / itself).
mkdir -p "$work/rootfs" && mount --rbind / "$work/rootfs" && mount --make-rslave "$work/rootfs"
printf 'state_dir = "%s/state"\n' "$work" > "$work/node.hcl"

bundle() { # name, annotations (JSON)
	mkdir -p "$work/$1" && (cd "$work/$1" && "$RUNC" spec)
	python3 - "$work/$1/config.json" "$PROBE" "$2" "$work/rootfs" <<'PY'
import json, sys
path, probe, ann, rootfs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
spec = json.load(open(path))
spec["root"] = {"path": rootfs, "readonly": True}
spec["process"]["terminal"] = False
spec["process"]["args"] = ["/bin/sh", "-c", probe + " sm; ls /dev | grep -E '^nvidia' | tr '\\n' ' '; echo; env | grep -E '^(NVIDIA|GPUMUX)_' | sort"]
spec["annotations"] = ann
json.dump(spec, open(path, "w"))
PY
}

run() { # name, runtime
	if ! "$2" --root "$work/runc" create --bundle "$work/$1" "$1" >"$work/$1.out" 2>&1 </dev/null; then
		echo "== $1: create failed:"; cat "$work/$1.out"; return 1
	fi
	"$RUNC" --root "$work/runc" start "$1"
	for _ in $(seq 100); do
		[[ $("$RUNC" --root "$work/runc" state "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["status"])') == stopped ]] && break
		sleep 0.1
	done
	"$2" --root "$work/runc" delete "$1"
	echo "== $1:"; cat "$work/$1.out"
}

bundle plain '{}'
bundle gpumux '{"gpumux.io/mechanism": "exclusive"}'
run plain "$RUNC"
GPUMUX_CONFIG="$work/node.hcl" GPUMUX_RUNC="$RUNC" run gpumux "$RUNTIME"
echo "== after delete (the poststop hook released the lease):"
if "$GPUMUX" status --config "$work/node.hcl" | grep -q 'Held by containers'; then
	echo "FAIL: a share is still held"; exit 1
fi
echo "no share held"
