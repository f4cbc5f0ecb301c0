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
source "$(dirname "$0")/runc-lib.sh"
mount_rootfs
printf 'state_dir = "%s/state"\n' "$work" > "$work/node.hcl"

bundle plain '{}'
bundle gpumux '{"gpumux.io/mechanism": "exclusive"}'
run plain "$RUNC"
GPUMUX_CONFIG="$work/node.hcl" GPUMUX_RUNC="$RUNC" run gpumux "$RUNTIME"
echo "== after delete (the poststop hook released the lease):"
if ! "$GPUMUX" status --config "$work/node.hcl" --nomad off -o json | grep -q '"held": \[\]'; then
	echo "FAIL: a share is still held"; "$GPUMUX" status --config "$work/node.hcl" --nomad off; exit 1
fi
echo "no share held"
