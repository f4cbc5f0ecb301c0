#!/usr/bin/env bash
# Proves on a GPU machine that a container whose root file system has no
# NVIDIA file at all runs a CUDA program and nvidia-smi through
# gpumux-runtime, which gives it the host driver's files (docs/runtime.md,
# "What a container gets"): on a whole GPU, and on a time-slice replica
# behind gpumux's limiter, which must load the real libraries from where
# gpumux mounted them. The root file system holds a shell, ldconfig, a CUDA
# program (nvcc's default static cudart) and the C libraries they need,
# copied from the host; the script checks that no file of it is named
# *nvidia* or *cuda*; its linker cache is ldconfig's of its own libraries,
# which the container must keep beside the driver's. The same container
# through plain runc must fail. The replica runs again with gpumux agent
# serving gpumux-runtime (GPUMUX: the gpumux CLI, default beside RUNTIME):
# the agent decides its create, writes its linker cache at create and
# gives the share back when runc deletes the container (no poststop hook). Changes no card setting. Usage, from the
# repository root, as root, after make build:
#
#   RUNTIME=bin/gpumux-runtime RUNC=runc LIMITER=bin/limiter bash e2e/gpu/driverlibs.sh
set -euo pipefail
RUNTIME=$(realpath "${RUNTIME:?}") RUNC=$(command -v "${RUNC:-runc}") LIMITER=$(realpath "${LIMITER:?}")
GPUMUX=$(realpath "${GPUMUX:-$(dirname "$RUNTIME")/gpumux}")
here=$(dirname "$(realpath "$0")")
work=$(mktemp -d /tmp/gmxdl.XXXX)
cleanup() {
	[[ -n ${agent:-} ]] && kill "$agent" 2>/dev/null && wait "$agent" 2>/dev/null
	for c in plain whole replica agent; do "$RUNC" --root "$work/runc" delete -f $c >/dev/null 2>&1 || true; done
	rm -rf "$work"
}
trap cleanup EXIT
source "$here/runc-lib.sh"
fail() { echo "FAIL: $*"; exit 1; }

# The CUDA program, named without "cuda".
nvcc -O2 -o "$work/vectoradd" "$here/remote/vectoradd.cu"

# The root file system: merged /usr, as current images have it; each
# program and each library it loads at its canonical path. ldd's list
# leaves out what a program dlopens (libcuda.so.1, libnvidia-ml.so.1):
# exactly what gpumux must bring.
rootfs="$work/rootfs"
mkdir -p "$rootfs"/{usr/bin,usr/sbin,usr/lib64,etc,proc,dev,sys,tmp,run}
ln -s usr/bin "$rootfs/bin" && ln -s usr/sbin "$rootfs/sbin" && ln -s usr/lib64 "$rootfs/lib64"
multiarch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
mkdir -p "$rootfs/usr/lib/$multiarch" && ln -s usr/lib "$rootfs/lib"
copy_libs() { # copy_libs PROGRAM: the shared libraries it links, except the driver's
	ldd "$1" | awk '/=> \// {print $3} /^[ \t]*\/.*ld-linux/ {print $1}' | while read -r lib; do
		case "$lib" in *nvidia*|*cuda*) continue ;; esac
		if [[ $lib == */ld-linux* ]]; then dst="$rootfs/usr/lib64/$(basename "$lib")"; else dst="$rootfs/usr/lib/$multiarch/$(basename "$lib")"; fi
		[[ -e $dst ]] || cp -L "$lib" "$dst"
	done
}
for prog in $(command -v sh grep cut env) "$work/vectoradd"; do
	cp -L "$prog" "$rootfs/usr/bin/$(basename "$prog")"
	copy_libs "$prog"
done
# ldconfig, to list the container's cache from inside (static; Ubuntu's
# /sbin/ldconfig is a script around ldconfig.real).
if [[ -x /sbin/ldconfig.real ]]; then cp /sbin/ldconfig.real "$rootfs/usr/sbin/ldconfig"; else cp -L /sbin/ldconfig "$rootfs/usr/sbin/ldconfig"; fi
# nvidia-smi itself is not copied: only the C libraries it links.
copy_libs "$(command -v nvidia-smi)"
if found=$(find "$rootfs" -iname '*nvidia*' -o -iname '*cuda*') && [[ -n $found ]]; then
	fail "the root file system has NVIDIA files: $found"
fi
echo "root file system without NVIDIA files: $(find "$rootfs" -type f | wc -l) files"
# The image's own linker cache, as a distribution's image has one.
ldconfig -r "$rootfs"

check='set -e
echo "== mounts:"; grep -E " (/usr/local/nvidia|/usr/bin/nvidia-smi) " /proc/self/mountinfo | cut -d" " -f5,6
echo "== files:"; for f in /usr/local/nvidia/lib64/* /usr/local/nvidia/bin/*; do echo "$f"; done
echo "== programs:"; for p in /usr/bin/nvidia-smi /usr/bin/nvidia-debugdump; do if [ -L "$p" ]; then echo "$p: a link"; fi; done
echo "== cache:"; ldconfig -p | grep -E "lib(cuda|nvidia-ml)\.so|libc\.so\.6"
echo "== limiter:"; env | grep -E "^(LD_LIBRARY_PATH|GPUMUX_LIMITER_(CUDA|NVML))=" || true
echo "== nvidia-smi:"; nvidia-smi -L; nvidia-smi --query-gpu=memory.total --format=csv,noheader
echo "== vectoradd:"; vectoradd'

printf 'state_dir = "%s/state-whole"\n' "$work" >"$work/whole.hcl"
cat >"$work/replica.hcl" <<HCL
state_dir   = "$work/state-replica"
limiter_dir = "$LIMITER"
gpu {
  match     = "0"
  mechanism = "timeslice"
  replicas  = 2
}
HCL

# Plain runc: no driver, no GPU.
bundle_sh plain '{}' "$check"
run plain "$RUNC" | tee "$work/plain.txt"
grep -q "vectoradd: cudaSuccess" "$work/plain.txt" && fail "the container ran CUDA without gpumux"

# Through gpumux-runtime: a whole GPU, then a replica behind the limiter.
export GPUMUX_RUNC="$RUNC"
for c in whole replica; do
	mech=exclusive
	[[ $c == replica ]] && mech=timeslice
	bundle_sh $c "{\"gpumux.io/mechanism\": \"$mech\"}" "$check"
	GPUMUX_CONFIG="$work/$c.hcl" run $c "$RUNTIME" | tee "$work/$c.txt"
	# The driver's libraries in the tree gpumux staged, one read-only
	# mount at /usr/local/nvidia, wherever the host keeps them.
	lib=/usr/local/nvidia/lib64
	for want in "/usr/local/nvidia ro," "$lib/libcuda.so.1" "$lib/libnvidia-ml.so.1" "$lib/libnvidia-ptxjitcompiler.so.1" "/usr/bin/nvidia-smi: a link" \
		"libcuda.so.1 (libc6,x86-64) => $lib/libcuda.so.1" "GPU 0: NVIDIA" "vectoradd: cudaSuccess, 0 wrong"; do
		grep -qF -- "$want" "$work/$c.txt" || fail "$c: the container's output lacks '$want'"
	done
done
# The replica again, its create decided by gpumux agent.
"$GPUMUX" agent --config "$work/replica.hcl" --runc "$RUNC" --runtime-socket "$work/rt.sock" --log-level debug >"$work/agent.log" 2>&1 &
agent=$!
for _ in $(seq 300); do grep -q "serving gpumux-runtime" "$work/agent.log" && break; sleep 0.1; done
grep -q "serving gpumux-runtime" "$work/agent.log" || { cat "$work/agent.log"; fail "gpumux agent does not serve gpumux-runtime"; }
bundle_sh agent '{"gpumux.io/mechanism": "timeslice"}' "$check"
GPUMUX_RUNTIME_SOCKET="$work/rt.sock" GPUMUX_CONFIG="$work/replica.hcl" run agent "$RUNTIME" | tee "$work/agent.txt"
grep -q "prepared a container's create.*container=agent" "$work/agent.log" || { cat "$work/agent.log"; fail "the agent did not prepare the create"; }
# The linker cache written at create (the output's cache checks below):
# no update-ldcache hook ran; the share went back at runc's delete, which
# the agent watches (no poststop hook).
grep -q "hook=update-ldcache" "$work/agent.log" && { cat "$work/agent.log"; fail "an update-ldcache hook ran for a create the agent prepared"; }
released="gave a deleted container's shares back: container=agent by=runc-delete"
for _ in $(seq 50); do grep -q "$released" "$work/agent.log" && break; sleep 0.1; done
grep -q "$released" "$work/agent.log" || { cat "$work/agent.log"; fail "the agent did not give the share back at runc's delete"; }
for c in whole replica agent; do
	grep -qE "libc\.so\.6 \(" "$work/$c.txt" || fail "$c: the image's libraries left the container's cache"
done
for c in replica agent; do
	for want in "GPUMUX_LIMITER_CUDA=$lib/libcuda.so.1" "LD_LIBRARY_PATH=/run/gpumux/limiter/lib" "libcuda.so.1 (libc6,x86-64) => $lib/libcuda.so.1" "vectoradd: cudaSuccess, 0 wrong"; do
		grep -qF -- "$want" "$work/$c.txt" || fail "$c: the container's output lacks '$want'"
	done
done
# The replica's nvidia-smi goes through the limiter: half the GPU's memory.
total=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i 0)
seen=$(grep -A3 '== nvidia-smi:' "$work/replica.txt" | grep -oE '^[0-9]+ MiB' | head -1 | cut -d' ' -f1)
echo "GPU 0: $total MiB; the replica's nvidia-smi: ${seen:-?} MiB"
[[ -n $seen && $seen -le $(( total / 2 + 1 )) ]] || fail "the replica's nvidia-smi saw ${seen:-nothing}, want at most half of $total MiB"
echo PASS
