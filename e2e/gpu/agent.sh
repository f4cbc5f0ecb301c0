#!/usr/bin/env bash
# Proves on a GPU machine that `gpumux agent` runs a node without Nomad: it
# starts a real nvidia-cuda-mps-control for an MPS GPU, gpumux-runtime hands
# containers (runc, the host's / read-only as their root) MPS shares whose
# SM limits the probe measures, a daemon killed while the agent is frozen
# makes the next create fail before runc with the reason, the resumed agent
# restarts it, the metrics come from the real NVML, and a second agent is
# refused. Touches no card setting: MPS daemons with private directories
# under /tmp, quit at the end (GPU.md). Usage, from the repository root, as
# root:
#
#   GPUMUX=.devbin/gpumux RUNTIME=.devbin/gpumux-runtime RUNC=runc PROBE=/tmp/mpsprobe bash e2e/gpu/agent.sh
set -euo pipefail
RUNTIME=$(realpath "${RUNTIME:?}") RUNC=$(command -v "${RUNC:-runc}") PROBE=$(realpath "${PROBE:?}") GPUMUX=$(realpath "${GPUMUX:?}")
work=$(mktemp -d /tmp/gmxag.XXXX)   # short: MPS pipe directories must fit in 88 bytes
agent_pid=
cleanup() {
	[[ -n $agent_pid ]] && kill -CONT "$agent_pid" 2>/dev/null && kill "$agent_pid" 2>/dev/null && wait "$agent_pid" 2>/dev/null
	for pipe in "$work"/state/mps/*/pipe; do
		[[ -d $pipe ]] && echo quit | CUDA_MPS_PIPE_DIRECTORY=$pipe nvidia-cuda-mps-control >/dev/null 2>&1 || true
	done
	for c in mps50 mps25 dead again; do "$RUNC" --root "$work/runc" delete -f $c >/dev/null 2>&1 || true; done
	umount -R -l "$work/rootfs" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
source "$(dirname "$0")/runc-lib.sh"
mount_rootfs
fail() { echo "FAIL: $*"; echo "== agent log:"; cat "$work/agent.log"; exit 1; }
metrics=127.0.0.1:9477
cat >"$work/node.hcl" <<HCL
state_dir          = "$work/state"
fingerprint_period = "2s"
metrics_addr       = "$metrics"
gpu {
  match       = "0"
  mechanism   = "mps"
  share_sizes = ["50%", "25%"]
}
HCL
# metric NAME LABEL-SUBSTRING: the value of the first sample of NAME whose
# labels contain LABEL-SUBSTRING ("" if none).
metric() {
	python3 - "http://$metrics/metrics" "$1" "$2" <<'PY'
import sys, urllib.request
url, name, sub = sys.argv[1:]
try:
    text = urllib.request.urlopen(url, timeout=5).read().decode()
except Exception:
    sys.exit(0)
for line in text.splitlines():
    if line.startswith(name + "{") or line.startswith(name + " "):
        if sub in line:
            print(line.rsplit(" ", 1)[1]); break
PY
}
waitfor() { # seconds, description, command...
	local n=$(( $1 * 10 )) what=$2; shift 2
	for _ in $(seq "$n"); do "$@" && return 0; sleep 0.1; done
	fail "waited for $what"
}

total=$("$PROBE" sm | awk '/^SM/ {print $2}')   # no MPS: the whole GPU
uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader -i 0)
echo "GPU 0: $uuid, $total SMs"

"$GPUMUX" agent --config "$work/node.hcl" --health-interval 500ms >"$work/agent.log" 2>&1 &
agent_pid=$!
up() { [[ $(metric gpumux_mps_daemon_up "$uuid") == 1 ]]; }
waitfor 60 "the agent's MPS daemon for $uuid" up
echo "agent up: MPS daemon for $uuid answers (gpumux_mps_daemon_up 1)"

if out=$("$GPUMUX" agent --config "$work/node.hcl" 2>&1); then fail "a second agent ran"; fi
grep -q "gpumux agent (pid $agent_pid" <<<"$out" || fail "the second agent's refusal does not name the first: $out"
echo "a second agent is refused: $out"

export GPUMUX_CONFIG="$work/node.hcl" GPUMUX_RUNC="$RUNC"
bundle mps50 '{"gpumux.io/mechanism": "mps", "gpumux.io/compute": "50"}'
bundle mps25 '{"gpumux.io/mechanism": "mps"}'
run mps50 "$RUNTIME" | tee "$work/mps50.txt"
run mps25 "$RUNTIME" | tee "$work/mps25.txt"
sm50=$(awk '/^SM/ {print $2}' "$work/mps50.txt") sm25=$(awk '/^SM/ {print $2}' "$work/mps25.txt")
want50=$(( total * 50 / 100 / 2 * 2 )) want25=$(( total * 25 / 100 / 2 * 2 ))
[[ $sm50 == "$want50" && $sm25 == "$want25" ]] || fail "SMs seen: 50% share $sm50 (want $want50), 25% share $sm25 (want $want25)"
echo "MPS limits in force: the 50% share sees $sm50 of $total SMs, the 25% share $sm25"

pid=$(cat "$work/state/mps/$uuid/pipe/nvidia-cuda-mps-control.pid")
kill -STOP "$agent_pid"
kill -KILL "$pid"
waitfor 10 "daemon $pid to die" bash -c "! kill -0 $pid 2>/dev/null"
bundle dead '{"gpumux.io/mechanism": "mps"}'
if run dead "$RUNTIME" >"$work/dead.txt"; then kill -CONT "$agent_pid"; fail "a create succeeded while the daemon was dead"; fi
kill -CONT "$agent_pid"
grep -q "no MPS control daemon serves $uuid" "$work/dead.txt" && grep -q "gpumux agent" "$work/dead.txt" || fail "the refused create does not give the reason: $(cat "$work/dead.txt")"
echo "daemon killed, agent frozen: $(grep -o 'gpumux-runtime: .*' "$work/dead.txt" | head -1)"
restarted() { [[ $(metric gpumux_mps_daemon_restarts_total "$uuid") == 1 ]] && up; }
waitfor 60 "the agent to restart the daemon" restarted
echo "agent resumed: daemon restarted (gpumux_mps_daemon_restarts_total 1)"
bundle again '{"gpumux.io/mechanism": "mps", "gpumux.io/compute": "50"}'
run again "$RUNTIME" >"$work/again.txt" || fail "create after the restart: $(cat "$work/again.txt")"
[[ $(awk '/^SM/ {print $2}' "$work/again.txt") == "$want50" ]] || fail "after the restart: $(cat "$work/again.txt")"
echo "after the restart a 50% share sees $want50 SMs again"

mem=$(metric gpumux_gpu_memory_total_bytes "$uuid")
shares=$(python3 -c "import urllib.request; print(sum(1 for l in urllib.request.urlopen('http://$metrics/metrics').read().decode().splitlines() if l.startswith('gpumux_share_info{')))")
[[ -n $mem && $mem != 0 && $shares == 2 ]] || fail "metrics: memory total '$mem', $shares shares"
echo "metrics from the real NVML: gpumux_gpu_memory_total_bytes $mem, 2 shares"

kill -TERM "$agent_pid"; code=0; wait "$agent_pid" || code=$?; agent_pid=
[[ $code == 0 ]] || fail "the agent exited $code after SIGTERM"
pid=$(cat "$work/state/mps/$uuid/pipe/nvidia-cuda-mps-control.pid")
kill -0 "$pid" || fail "the MPS daemon did not outlive the agent"
echo "SIGTERM: the agent exited 0, the daemon (pid $pid) stays for the next agent"
echo PASS
