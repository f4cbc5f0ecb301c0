#!/usr/bin/env bash
# make demo: start a Nomad dev agent with the gpumux plugin on a simulated
# 8×H200 node configured by examples/gpumux-plugin.hcl, plus remote shares
# of a gpumux-remoted on CPU-simulated GPUs, run the jobs in examples/jobs,
# print what each task got, and stop everything.
#
# Needs root (Nomad's exec driver), bin/ built (make build) and a Nomad agent
# (make nomad). Every step uses the plain nomad CLI, so it can be copied.
# GPUMUX_DEMO_KEEP=1 keeps the work directory (agent log, state) afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

NOMAD_BIN=${NOMAD_BIN:-$HOME/.cache/gpumux/nomad-v1.10.5/nomad}
nomad() { "$NOMAD_BIN" "$@"; }
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
die() { echo "demo: $*" >&2; exit 1; }

[[ $(id -u) == 0 ]] || die "run as root: Nomad's exec driver needs it"
[[ -x $NOMAD_BIN ]] || die "no Nomad agent at $NOMAD_BIN (make nomad)"
[[ -x bin/plugins/nomad-device-gpumux && -x bin/gpumux && -x bin/gpumux-remoted && -f bin/remote/libcuda.so.1 ]] ||
	die "binaries missing (make build)"

work=$(mktemp -d /tmp/gpumux-demo.XXXXXX)
state=$work/state
data=$work/data
jobs=(timeslice mig mps exclusive remote)

# free_port prints the first port from $1 on that nothing listens on.
free_port() {
	local p=$1
	while (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; do p=$((p + 1)); done
	echo "$p"
}
http=$(free_port 24646)
rpc=$(free_port $((http + 1)))
serf=$(free_port $((rpc + 1)))
remote_port=$(free_port $((serf + 1)))
export NOMAD_ADDR=http://127.0.0.1:$http

# The example node config, with its state under the work directory and a
# short fingerprint period.
sed -e "s#\"/var/lib/gpumux\"#\"$state\"#" -e 's#fingerprint_period = "1m"#fingerprint_period = "10s"#' \
	examples/gpumux-plugin.hcl >"$work/gpumux-plugin.hcl"

# Remote shares: a gpumux-remoted on two CPU-simulated 16 GiB GPUs (its fake
# backend) with a fresh pool secret, listed in the plugin's remote block.
(umask 077; bin/gpumux remote secret >"$work/pool.key")
remote_block="    remote {\n      servers        = [\"127.0.0.1:$remote_port\"]\n      token_file     = \"$work/pool.key\"\n      shares         = 4\n      interposer_dir = \"$root/bin/remote\"\n    }"
sed -i "0,/^  config {\$/s##  config {\n$remote_block#" "$work/gpumux-plugin.hcl"
grep -q "servers        = \[\"127.0.0.1:$remote_port\"\]" "$work/gpumux-plugin.hcl" || die "could not add the remote block to the plugin config"

# The remote job's task runs a small CUDA driver API program (e2e/remoteprobe)
# through the interposer; the exec driver's chroot gets it at /opt/gpumux-demo.
mkdir -p "$work/probe"
cc -std=gnu11 -O2 -o "$work/probe/remote-probe" e2e/remoteprobe/remote-probe.c -ldl || die "building e2e/remoteprobe (make deps installs a C compiler)"
sed -e 's#ls -l /run/gpumux/remote;#ls -l /run/gpumux/remote; /opt/gpumux-demo/remote-probe;#' \
	examples/jobs/remote.nomad.hcl >"$work/remote.nomad.hcl"
grep -q remote-probe "$work/remote.nomad.hcl" || die "could not add the probe to the remote job"
cat >"$work/agent.hcl" <<HCL
data_dir   = "$data"
plugin_dir = "$root/bin/plugins"
bind_addr  = "127.0.0.1"
disable_update_check = true
ports {
  http = $http
  rpc  = $rpc
  serf = $serf
}
client {
  options = {
    "fingerprint.denylist" = "env_aws,env_gce,env_azure,env_digitalocean"
  }
  # Nomad's default chroot, and the remote job's probe.
  chroot_env = {
    "/bin" = "/bin", "/etc" = "/etc", "/lib" = "/lib", "/lib32" = "/lib32", "/lib64" = "/lib64"
    "/run/resolvconf" = "/run/resolvconf", "/sbin" = "/sbin", "/usr" = "/usr"
    "$work/probe" = "/opt/gpumux-demo"
  }
}
HCL

agent_pid=
remoted_pid=
cleanup() {
	local status=$?
	trap - EXIT INT TERM
	say "Stopping"
	if [[ -n $agent_pid ]] && kill -0 "$agent_pid" 2>/dev/null; then
		for j in "${jobs[@]}" too-big; do nomad job stop -purge -detach "$j" >/dev/null 2>&1 || true; done
		# Let the client collect the allocations (and unmount their dirs).
		for _ in $(seq 60); do
			[[ -z $(ls -A "$data/alloc" 2>/dev/null) ]] && break
			sleep 0.5
		done
		kill -INT "$agent_pid" 2>/dev/null || true
		for _ in $(seq 60); do kill -0 "$agent_pid" 2>/dev/null || break; sleep 0.5; done
		kill -KILL -- "-$agent_pid" 2>/dev/null || true
	fi
	if [[ -n $remoted_pid ]]; then
		kill -TERM "$remoted_pid" 2>/dev/null || true
		wait "$remoted_pid" 2>/dev/null || true
	fi
	# The plugin leaves MPS daemons running for their clients; the demo ends them.
	for f in "$state"/mps/*/pipe/nvidia-cuda-mps-control.pid; do
		[[ -f $f ]] && kill -KILL "$(cat "$f")" 2>/dev/null || true
	done
	local left mounts
	left=$(pgrep -af -- "$work" | grep -v pgrep || true)
	mounts=$(grep -F " $work" /proc/self/mountinfo | awk '{print $5}' || true)
	if [[ -n $left || -n $mounts ]]; then
		echo "demo: left behind (cleaning up):"
		[[ -n $left ]] && echo "$left"
		[[ -n $mounts ]] && echo "$mounts"
		pkill -KILL -f -- "$work" 2>/dev/null || true
		for m in $mounts; do umount -l "$m" 2>/dev/null || true; done
		status=1
	else
		echo "agent, executors and plugin stopped; no mounts left"
	fi
	if [[ ${GPUMUX_DEMO_KEEP:-} == 1 ]]; then echo "kept $work"; else rm -rf "$work"; fi
	exit "$status"
}
trap cleanup EXIT INT TERM

say "Starting gpumux-remoted on 127.0.0.1:$remote_port, fake backend (log: $work/remoted.log)"
setsid bin/gpumux-remoted --listen "127.0.0.1:$remote_port" --token-file "$work/pool.key" \
	--backend fake --fake-devices 2 --fake-memory 16GiB >"$work/remoted.log" 2>&1 &
remoted_pid=$!

say "Starting a Nomad dev agent (log: $work/agent.log)"
setsid "$NOMAD_BIN" agent -dev -config "$work/agent.hcl" -config "$work/gpumux-plugin.hcl" >"$work/agent.log" 2>&1 &
agent_pid=$!
ready=
for _ in $(seq 240); do
	kill -0 "$agent_pid" 2>/dev/null || { tail -20 "$work/agent.log"; die "the agent exited"; }
	if [[ $(nomad node status -self -t '{{.Status}} {{len .NodeResources.Devices}}' 2>/dev/null) == "ready "[1-9]* ]]; then
		ready=1
		break
	fi
	sleep 0.5
done
[[ -n $ready ]] || { tail -20 "$work/agent.log"; die "the node did not become ready with GPU devices"; }

say "What the node offers (gpumux status, reading the state the plugin shares)"
bin/gpumux status --config "$work/gpumux-plugin.hcl"

say "Device groups Nomad sees"
nomad node status -self -t '{{range .NodeResources.Devices}}{{printf "%-40s" (print .Vendor "/" .Type "/" .Name)}} {{len .Instances}} instances  mechanism={{(index .Attributes "mechanism").StringVal}}  memory={{(index .Attributes "memory").IntVal}} MiB{{"\n"}}{{end}}'

say "Running examples/jobs: ${jobs[*]}"
declare -A mechanism_of
while read -r name mech; do [[ -n $name ]] && mechanism_of[$name]=$mech; done < <(
	nomad node status -self -t '{{range .NodeResources.Devices}}{{.Name}} {{(index .Attributes "mechanism").StringVal}}{{"\n"}}{{end}}')
jobfile() { if [[ $1 == remote ]]; then echo "$work/remote.nomad.hcl"; else echo "examples/jobs/$1.nomad.hcl"; fi; }
for j in "${jobs[@]}"; do
	nomad job run -detach "$(jobfile "$j")" >/dev/null 2>&1 || die "nomad job run $(jobfile "$j") failed"
done

rows=()
for j in "${jobs[@]}"; do
	alloc= status=
	for _ in $(seq 240); do
		read -r alloc status < <(nomad job allocs -t '{{range .}}{{.ID}} {{.ClientStatus}}{{"\n"}}{{end}}' "$j" 2>/dev/null | head -1) || true
		[[ $status == complete || $status == failed ]] && break
		sleep 0.5
	done
	[[ $status == complete ]] || { nomad job status "$j" || true; die "job $j did not complete (status: ${status:-none})"; }
	read -r group share < <(nomad alloc status -t '{{range .AllocatedResources.Tasks}}{{range .Devices}}{{.Name}} {{range .DeviceIDs}}{{.}}{{end}}{{end}}{{end}}' "$alloc")
	logs=$(nomad alloc logs "$alloc" probe)
	visible=$(sed -n 's/^NVIDIA_VISIBLE_DEVICES=//p' <<<"$logs")
	cuda=$(sed -n 's/^CUDA_VISIBLE_DEVICES=//p' <<<"$logs")
	devs=
	while read -r path _ _ _ mm; do # "/dev/nvidia0 character special file c3:0"
		devs+="${path#/dev/}($((16#${mm%%:*})):$((16#${mm##*:}))) "
	done < <(grep 'character special file' <<<"$logs")
	saw="NVIDIA_VISIBLE_DEVICES=$visible"
	[[ -n $cuda ]] && saw+=" CUDA_VISIBLE_DEVICES=set"
	if addr=$(sed -n 's/^GPUMUX_REMOTE_ADDR=//p' <<<"$logs") && [[ -n $addr ]]; then
		# What the probe's CUDA calls got through the interposer.
		saw="GPUMUX_REMOTE_ADDR=$addr; through libcuda.so.1: $(sed -n 's/^\(NAME\|MEMORY\|ALLOC\) /\1=/p' <<<"$logs" | tr '\n' ' ')"
	fi
	mps=$(sed -n 's/^CUDA_MPS_\(ACTIVE_THREAD_PERCENTAGE\|PINNED_DEVICE_MEM_LIMIT\|PIPE_DIRECTORY\)=/\1=/p' <<<"$logs" | tr '\n' ' ')
	[[ -n $mps ]] && saw+=" MPS: $mps"
	rows+=("$j|${mechanism_of[$group]:-?}|$group|$share|$saw|$devs")
done

say "Unplaceable: examples/jobs/too-big.nomad.hcl asks for ≥ 200 GiB"
nomad job run -detach examples/jobs/too-big.nomad.hcl >/dev/null 2>&1 || die "nomad job run examples/jobs/too-big.nomad.hcl failed"
for _ in $(seq 20); do
	failure=$(nomad job status too-big 2>/dev/null | sed -n '/Placement Failure/,/^$/p')
	[[ -n $failure ]] && break
	sleep 0.5
done
echo "${failure:-no placement failure reported}"

say "Result"
printf '%-10s %-10s %-26s %s\n' JOB MECHANISM GROUP SHARE
for r in "${rows[@]}"; do
	IFS='|' read -r j mech group share saw devs <<<"$r"
	printf '%-10s %-10s %-26s %s\n' "$j" "$mech" "$group" "$share"
	printf '%-48s task saw: %s\n' "" "$saw"
	printf '%-48s devices:  %s\n' "" "$devs"
done
