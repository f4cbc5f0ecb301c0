#!/usr/bin/env bash
# Measures a container's start on a GPU node, through runc alone, as
# docs/benchmarks.md's containerd and Docker benchmarks do on the 2-core
# build machine, but on a real node (its CPUs, its disk, its driver): the
# create + start + wait + delete of a container whose root holds one static
# program that exits at once, interleaved in every round (in a random
# order each time):
#
#   runc                    plain runc, nothing asked (the baseline)
#   no-GPU                  gpumux-runtime, nothing asked
#   core-<share>            gpumux-runtime, its create decided by
#                           gpumux-runtime-core (no agent)
#   agent-<share>           gpumux-runtime with gpumux agent serving it (the
#                           create and the hooks decided in the agent)
#   edits-<share>           plain runc on the spec the agent wrote for the
#                           same share (its edits and hooks already in it):
#                           what an engine that applies a CDI device or an
#                           NRI adjustment runs
#   agent-before-<share>    with BEFORE=an earlier build's gpumux CLI: the
#                           same as agent-<share>, that build's agent
#                           deciding (a before and after in one run)
#
# for a whole GPU and a time-slice replica behind the limiter. ABLATE=1
# adds the replica's spec with parts taken out, to see where its cost goes:
#
#   edits-timeslice-nolimiter   without the limiter's mounts
#   edits-timeslice-nohook      without its createContainer (update-ldcache) hook
#   edits-timeslice-truehook    its createContainer hook replaced by /bin/true
#
# Prints each
# way's median milliseconds and its ratio to runc's, per round and over all,
# and each agent's CPU time a container it served. AGENT_LOG=debug runs the
# agents at that log level and checks that they did every update-ldcache
# hook of the edits ways themselves, from the hook's working directory
# (runc's init runs those hooks; none left to gpumux-runtime-hook).
# WAYS, a regular expression (grep -E), keeps only the ways it matches
# (runc always). Changes no card setting. Usage, from the repository root,
# as root, after make build (GPUMUX: the CLI, default beside RUNTIME;
# BEFORE: see above):
#
#   RUNTIME=bin/gpumux-runtime RUNC=runc LIMITER=bin/limiter ROUNDS=5 N=40 bash e2e/gpu/startbench.sh
set -euo pipefail
RUNTIME=$(realpath "${RUNTIME:?}") RUNC=$(command -v "${RUNC:-runc}") LIMITER=$(realpath "${LIMITER:?}")
GPUMUX=$(realpath "${GPUMUX:-$(dirname "$RUNTIME")/gpumux}")
ROUNDS=${ROUNDS:-5} N=${N:-40}
work=$(mktemp -d /tmp/gmxsb.XXXX)
declare -A agent_of # NAME -> the PID of the agent serving NAME.sock
cleanup() {
	for a in "${agent_of[@]}"; do kill "$a" 2>/dev/null && wait "$a" 2>/dev/null; done
	rm -rf "$work"
}
trap cleanup EXIT

# The root file system: one static program that exits 0.
mkdir -p "$work/rootfs"/{proc,dev,sys,tmp,etc}
printf 'int main(void) { return 0; }\n' >"$work/true.c"
gcc -O2 -static -o "$work/rootfs/true" "$work/true.c"

# SIMULATE (a simulated node's model, e.g. dgxh200) tries the script out
# on a machine without a GPU.
simulate=
[[ -n ${SIMULATE:-} ]] && simulate="simulate = \"$SIMULATE\""
# A node config per share, as a one-GPU node has one or the other: GPU 0
# whole (exclusive), and GPU 0 in two time-slice replicas.
printf '%s\nstate_dir = "%s"\n' "$simulate" "$work/state-exclusive" >"$work/exclusive.hcl"
cat >"$work/timeslice.hcl" <<HCL
$simulate
state_dir   = "$work/state-timeslice"
limiter_dir = "$LIMITER"
gpu {
  match     = "0"
  mechanism = "timeslice"
  replicas  = 2
}
HCL

# bundle NAME ANNOTATIONS-JSON: a bundle of the root file system.
bundle() {
	mkdir -p "$work/$1" && (cd "$work/$1" && "$RUNC" spec)
	python3 - "$work/$1/config.json" "$2" "$work/rootfs" <<'PY'
import json, sys
path, ann, rootfs = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
spec = json.load(open(path))
spec["root"] = {"path": rootfs, "readonly": True}
spec["process"]["terminal"] = False
spec["process"]["args"] = ["/true"]
spec["annotations"] = ann
json.dump(spec, open(path, "w"))
PY
	cp "$work/$1/config.json" "$work/$1/config.orig"
}

# once NAME RUNTIME [ENV...]: one container's create, start, wait and
# delete through RUNTIME; prints its milliseconds.
once() {
	local name=$1 rt=$2
	shift 2
	cp "$work/$name/config.orig" "$work/$name/config.json"
	local t0 t1
	t0=$(date +%s%N)
	env "$@" "$rt" --root "$work/runc" create --bundle "$work/$name" --pid-file "$work/$name.pid" "$name" </dev/null >/dev/null
	local pid
	pid=$(<"$work/$name.pid")
	"$RUNC" --root "$work/runc" start "$name"
	local st=R
	while [[ $st != Z ]] && read -r _ _ st _ <"/proc/$pid/stat" 2>/dev/null; do :; done # the init exits (reaped, or a zombie)
	env "$@" "$rt" --root "$work/runc" delete "$name"
	t1=$(date +%s%N)
	echo $(((t1 - t0) / 1000))
}

export GPUMUX_RUNC=$RUNC
# serve CLI NAME: gpumux agent of CLI on NAME.hcl, serving NAME.sock.
serve() {
	"$1" agent --config "$work/$2.hcl" --runc "$RUNC" --runtime-socket "$work/$2.sock" --log-level "${AGENT_LOG:-info}" >"$work/agent-$2.log" 2>&1 &
	agent_of[$2]=$!
	for _ in $(seq 300); do grep -q "serving gpumux-runtime" "$work/agent-$2.log" && break; sleep 0.1; done
	grep -q "serving gpumux-runtime" "$work/agent-$2.log" || { cat "$work/agent-$2.log"; echo "FAIL: gpumux agent ($2) does not serve gpumux-runtime"; exit 1; }
}
for share in exclusive timeslice; do
	serve "$GPUMUX" "$share"
	if [[ -n ${BEFORE:-} ]]; then
		# A node of its own (an agent locks its state directory).
		sed "s|state-$share|state-$share-before|" "$work/$share.hcl" >"$work/$share-before.hcl"
		serve "$(realpath "$BEFORE")" "$share-before"
	fi
done
# env_of WAY [agent]: the environment of a way's gpumux-runtime.
env_of() {
	local share=exclusive sock=$work/none.sock
	[[ $1 == *timeslice* ]] && share=timeslice
	[[ $1 == *-before-* ]] && share=$share-before
	[[ ${2:-} == agent ]] && sock=$work/$share.sock
	echo "GPUMUX_CONFIG=$work/$share.hcl GPUMUX_RUNTIME_SOCKET=$sock"
}

ways=(runc no-GPU)
bundle runc '{}'
bundle no-GPU '{}'
for share in exclusive timeslice; do
	ann="{\"gpumux.io/mechanism\": \"$share\"}"
	for w in core agent edits ${BEFORE:+agent-before}; do bundle "$w-$share" "$ann"; ways+=("$w-$share"); done
	# The edits: the spec the agent writes for this share, taken once, as a
	# CDI device or the NRI plugin gives it: with the update-ldcache hook,
	# which the agent keeps in the spec where it cannot write the cache at
	# create (here: a root not there yet, set back after). runc is not run;
	# the poststop hook gives the lease back.
	python3 - "$work/edits-$share/config.json" <<'PY'
import json, sys
spec = json.load(open(sys.argv[1]))
spec["root"]["path"] = "/nonexistent"
json.dump(spec, open(sys.argv[1], "w"))
PY
	# shellcheck disable=SC2046
	env $(env_of "edits-$share" agent) GPUMUX_RUNC=/bin/true "$RUNTIME" --root "$work/runc" create --bundle "$work/edits-$share" "edits-$share" </dev/null >/dev/null
	python3 - "$work/edits-$share/config.json" "$work/edits-$share/config.orig" "$work/rootfs" <<'PY'
import json, sys
spec = json.load(open(sys.argv[1]))
spec["root"]["path"] = sys.argv[3]
json.dump(spec, open(sys.argv[2], "w"))
PY
	# shellcheck disable=SC2046
	echo "{\"ociVersion\": \"1.0.2\", \"id\": \"edits-$share\", \"status\": \"stopped\", \"bundle\": \"$work/edits-$share\"}" |
		env $(env_of "edits-$share" agent) GPUMUX_STATE_DIR="$work/state-$share" "$RUNTIME" hook poststop
	grep -q '"update-ldcache"' "$work/edits-$share/config.orig" || { echo "FAIL: the agent wrote no edits for $share"; exit 1; }
done

# ablate NAME FROM FILTER: bundle NAME with FROM's edits spec less what
# the Python expression FILTER (on spec) drops.
ablate() {
	bundle "$1" '{}'
	python3 - "$work/$2/config.orig" "$work/$1/config.orig" "$3" <<'PY'
import json, sys
spec = json.load(open(sys.argv[1]))
exec(sys.argv[3])
json.dump(spec, open(sys.argv[2], "w"))
PY
	ways+=("$1")
}
if [[ ${ABLATE:-} == 1 ]]; then
	ablate edits-timeslice-nolimiter edits-timeslice 'spec["mounts"] = [m for m in spec["mounts"] if not m["destination"].startswith("/run/gpumux/limiter")]'
	ablate edits-timeslice-nohook edits-timeslice 'spec["hooks"].pop("createContainer")'
	ablate edits-timeslice-truehook edits-timeslice 'spec["hooks"]["createContainer"] = [{"path": "/bin/true", "args": ["true"]}]'
fi

if [[ -n ${WAYS:-} ]]; then
	mapfile -t ways < <(printf '%s\n' "${ways[@]}" | grep -E -e '^runc$' -e "$WAYS")
fi

run_way() { # run_way WAY: one container of that way
	case $1 in
	# shellcheck disable=SC2046
	runc | edits-*) once "$1" "$RUNC" ;;
	no-GPU | core-*) once "$1" "$RUNTIME" $(env_of "$1") ;;
	agent-*) once "$1" "$RUNTIME" $(env_of "$1" agent) ;;
	esac
}

# cpu_ticks PID: the CPU time (user + system, in clock ticks) of process
# PID, an agent of this script's (-1 once it is gone: its PID may be
# another process's by then).
cpu_ticks() {
	grep -qa -- "--runtime-socket" "/proc/$1/cmdline" 2>/dev/null || { echo -1; return; }
	awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo -1
}
declare -A cpu_before
for a in "${!agent_of[@]}"; do cpu_before[$a]=$(cpu_ticks "${agent_of[$a]}"); done

# Each iteration runs every way once, in an order of its own: what a
# container leaves behind (a cgroup's teardown) falls on the next one, so
# no way is always after the same one.
for round in $(seq "$ROUNDS"); do
	for i in $(seq "$N"); do
		mapfile -t order < <(printf '%s\n' "${ways[@]}" | shuf)
		for w in "${order[@]}"; do echo "$round $i $w $(run_way "$w")"; done
	done
done >"$work/times"
# Per round, each way's median and its ratio to runc's; and, since the
# node's noise moves whole iterations, the paired figures: each
# iteration's time of the way less runc's in the same iteration, and that
# iteration's ratio, medians over all iterations.
python3 - "$work/times" "${ways[@]}" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
ways = sys.argv[2:]
t = {(int(r[0]), int(r[1]), r[2]): int(r[3]) for r in rows}
rounds = sorted({k[0] for k in t})
iters = sorted({(k[0], k[1]) for k in t})
med = {(r, w): statistics.median(v for k, v in t.items() if k[0] == r and k[2] == w) for r in rounds for w in ways}
print(f"{'way':28} {'ms':>8} {'x runc: rounds (range)':>24} {'paired: +ms':>12} {'x runc':>8}")
for w in ways:
    ms = [med[(r, w)] / 1000 for r in rounds]
    ratio = [med[(r, w)] / med[(r, 'runc')] for r in rounds]
    diff = statistics.median((t[(r, i, w)] - t[(r, i, 'runc')]) / 1000 for r, i in iters)
    pr = statistics.median(t[(r, i, w)] / t[(r, i, 'runc')] for r, i in iters)
    print(f"{w:28} {statistics.median(ms):8.2f} {statistics.median(ratio):9.3f} ({min(ratio):.3f}-{max(ratio):.3f}) {diff:12.2f} {pr:8.3f}")
PY
# Each agent's CPU over the run, a container it served: the creates of its
# agent way and the update-ldcache hooks of the edits ways whose spec
# names its socket (the CPU a share's container costs the node beside
# runc's, which on a 2-core machine is taken from the engine and runc).
for a in "${!agent_of[@]}"; do
	mine=agent-$a # its way: agent-SHARE, or agent-before-SHARE for SHARE-before
	[[ $a == *-before ]] && mine=agent-before-${a%-before}
	served=0 hooks=0
	for w in "${ways[@]}"; do
		if [[ $w == edits-* ]] && grep -q '"update-ldcache"' "$work/$w/config.orig" &&
			grep -q "\"GPUMUX_RUNTIME_SOCKET=$work/$a.sock\"" "$work/$w/config.orig"; then
			hooks=$((hooks + ROUNDS * N))
		fi
		if [[ $w == "$mine" ]]; then served=$((served + ROUNDS * N)); fi
	done
	served=$((served + hooks))
	after=$(cpu_ticks "${agent_of[$a]}")
	# With AGENT_LOG=debug the agent logs each hook it did and each it
	# left to gpumux-runtime-hook: runc's init runs the edits ways' hooks,
	# whose root the agent takes from the hook's working directory. (The
	# agent ways keep no hook here: the agent writes their cache at create.)
	if [[ ${AGENT_LOG:-} == debug ]]; then
		((after >= 0)) || { echo "FAIL: gpumux agent ($a) is gone; the end of its log:"; tail -5 "$work/agent-$a.log"; exit 1; }
		did=$(grep -c "did a container's hook.*the hook's working directory" "$work/agent-$a.log" || true)
		left=$(grep -c "left a hook to gpumux-runtime-hook" "$work/agent-$a.log" || true)
		echo "gpumux agent ($a): did $did of the edits ways' $hooks update-ldcache hooks from the hook's working directory, left $left to gpumux-runtime-hook"
		if ((did != hooks || left != 0)); then
			grep "left a hook" "$work/agent-$a.log" | head -3 || true
			echo "FAIL: gpumux agent ($a) did not do every hook from the hook's working directory"
			exit 1
		fi
	fi
	((after >= 0)) || { echo "gpumux agent ($a) is gone: no CPU figure"; continue; }
	if ((served > 0)); then
		echo "gpumux agent ($a): $(((after - cpu_before[$a]) * 1000000 / $(getconf CLK_TCK) / served)) us of CPU a container it served ($served containers)"
	fi
done
echo PASS
