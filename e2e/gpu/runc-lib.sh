# Sourced by the GPU scripts that run containers through runc or
# gpumux-runtime. Needs: RUNC (runc's path), PROBE (the e2e/gpu/mpsprobe
# binary), work (a scratch directory whose rootfs/ is the host's /, bound
# read-only by mount_rootfs).

# mount_rootfs binds the host's / as the containers' root (runc cannot
# pivot into / itself).
mount_rootfs() {
	mkdir -p "$work/rootfs" && mount --rbind / "$work/rootfs" && mount --make-rslave "$work/rootfs"
}

# bundle NAME ANNOTATIONS-JSON [PROBE-ARGS]: a bundle that runs the probe
# (default "sm"), then lists /dev/nvidia* and the NVIDIA_, CUDA_ and
# GPUMUX_ variables it was given.
bundle() {
	bundle_sh "$1" "$2" "$PROBE ${3:-sm}; ls /dev | grep -E '^nvidia' | tr '\n' ' '; echo; env | grep -E '^(NVIDIA|CUDA|GPUMUX)_' | sort"
}

# bundle_sh NAME ANNOTATIONS-JSON COMMAND: a bundle that runs COMMAND with
# /bin/sh -c.
bundle_sh() {
	mkdir -p "$work/$1" && (cd "$work/$1" && "$RUNC" spec)
	python3 - "$work/$1/config.json" "$2" "$work/rootfs" "$3" <<'PY'
import json, sys
path, ann, rootfs, cmd = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
spec = json.load(open(path))
spec["root"] = {"path": rootfs, "readonly": True}
spec["process"]["terminal"] = False
spec["process"]["args"] = ["/bin/sh", "-c", cmd]
spec["annotations"] = ann
json.dump(spec, open(path, "w"))
PY
}

# run NAME RUNTIME: create (through RUNTIME), start, wait (2 minutes at
# most), delete; prints
# what the container printed. Returns 1 when create fails (its error is
# printed).
run() {
	if ! "$2" --root "$work/runc" create --bundle "$work/$1" "$1" >"$work/$1.out" 2>&1 </dev/null; then
		echo "== $1: create failed:"; cat "$work/$1.out"; return 1
	fi
	"$RUNC" --root "$work/runc" start "$1"
	for _ in $(seq 1200); do # up to 2 minutes: PyTorch's import and CUDA's start take seconds
		[[ $("$RUNC" --root "$work/runc" state "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["status"])') == stopped ]] && break
		sleep 0.1
	done
	"$2" --root "$work/runc" delete "$1"
	echo "== $1:"; cat "$work/$1.out"
}
