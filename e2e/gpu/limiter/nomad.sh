#!/usr/bin/env bash
# Proves on a GPU machine that a Nomad job on a time-slice replica gets
# gpumux's limiter and is held by it: a Nomad dev agent runs the plugin
# with GPU 0 split as replica_sizes = ["50%", "25%", "25%"]; one batch job
# of two tasks (exec driver) asks for a replica by its attributes, one task
# for 50% of the GPU, one for 25%. Inside, PyTorch sees its replica's
# memory and gets no more, trains inside it, and the two tasks get their
# parts of the GPU's time while both are busy (a file barrier in the
# group's shared /alloc lines their starts up). Changes no card setting.
#
# PyTorch's environment (sys.prefix, when not under /usr) and the test
# programs reach the tasks through the client's chroot_env (hard links on
# one filesystem), not through host volumes: Nomad drops a task's
# volume_mount when a device plugin gives the task mounts (docs/nomad.md,
# "Known upstream issues").
#
# Carried from a build machine: .devbin/nomad.xz (`xz -c $NOMAD_BIN`),
# .devbin/nomad-device-gpumux, bin/limiter (`make limiter`). Usage, from
# the repository root, as root:
#
#   PLUGIN=.devbin/nomad-device-gpumux LIMITER=bin/limiter bash e2e/gpu/limiter/nomad.sh
set -euo pipefail
PLUGIN=$(realpath "${PLUGIN:?}") LIMITER=$(realpath "${LIMITER:?}")
here=$(dirname "$(realpath "$0")")
root=$(realpath "$here/../../..")
work=$(mktemp -d /tmp/gmxln.XXXX)
agent=
cleanup() {
	[[ -n $agent ]] && kill "$agent" 2>/dev/null && wait "$agent" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT
source "$here/checks.sh"
fail() {
	echo "FAIL: $*"
	grep -i gpumux "$work/agent.log" | grep -v DEBUG | tail -20
	exit 1
}
xz -dc "$root/.devbin/nomad.xz" >"$work/nomad"
chmod +x "$work/nomad"
nomad() { "$work/nomad" "$@"; }
mkdir -p "$work/plugins" "$work/state" "$work/e2e"
cp "$PLUGIN" "$work/plugins/nomad-device-gpumux"
cp "$here/memory.py" "$work/e2e/"
nvcc -O2 -o "$work/e2e/spin" "$root/timeslice/limiter/tests/gpu/spin.cu"
chmod -R a+rX "$work/e2e"
python=$(command -v python3)
prefix=$(python3 -c 'import sys; print(sys.prefix)')
# exec's default chroot, plus PyTorch's environment and the test programs.
chroot="\"/bin\" = \"/bin\", \"/etc\" = \"/etc\", \"/lib\" = \"/lib\", \"/lib32\" = \"/lib32\", \"/lib64\" = \"/lib64\",
    \"/run/resolvconf\" = \"/run/resolvconf\", \"/sbin\" = \"/sbin\", \"/usr\" = \"/usr\", \"$work/e2e\" = \"/e2e\""
[[ $prefix != /usr && $prefix != /usr/* ]] && chroot+=", \"$prefix\" = \"$prefix\""
total=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i 0) # MiB, as NVML reports it to gpumux
half_mib=$((total * 50 / 100)) quarter_mib=$((total * 25 / 100))
echo "GPU 0: $total MiB; replicas of $half_mib and $quarter_mib MiB; python $python (prefix $prefix)"

cat >"$work/agent.hcl" <<HCL
plugin_dir = "$work/plugins"
client {
  options = {
    "fingerprint.denylist" = "env_aws,env_gce,env_azure,env_digitalocean"
  }
  chroot_env = {
    $chroot
  }
}
plugin "nomad-device-gpumux" {
  config {
    state_dir          = "$work/state"
    limiter_dir        = "$LIMITER"
    fingerprint_period = "2s"
    gpu {
      match         = "0"
      mechanism     = "timeslice"
      replica_sizes = ["50%", "25%", "25%"]
    }
  }
}
HCL

# task NAME PERCENT: a task on a replica of PERCENT% of the GPU that
# reports its memory, fills it, trains in it, then (once both tasks are
# there) keeps the GPU busy for 4 s.
task() {
	cat <<HCL
    task "$1" {
      driver = "exec"
      config {
        command = "/bin/sh"
        args = ["-c", <<SH
set -e
env | grep -E '^(GPUMUX_SHARES|LD_LIBRARY_PATH)='
$python /e2e/memory.py report
$python /e2e/memory.py fill 100
$python /e2e/memory.py train 30
touch /alloc/ready.$1
while [ \$(ls /alloc | grep -c '^ready\.') -lt 2 ]; do sleep 0.05; done
at=\$(( \$(stat -c %Y /alloc/ready.big /alloc/ready.small | sort -n | tail -1) + 3 ))
START_AT=\$at /e2e/spin run 4 200
SH
        ]
      }
      resources {
        memory = 4096
        device "nvidia/gpu" {
          count = 1
          constraint {
            attribute = "\${device.attr.mechanism}"
            value     = "timeslice"
          }
          constraint {
            attribute = "\${device.attr.compute_percent}"
            value     = "$2"
          }
        }
      }
    }
HCL
}
cat >"$work/limited.nomad.hcl" <<HCL
job "limited" {
  type = "batch"
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
$(task big 50)
$(task small 25)
  }
}
HCL

"$work/nomad" agent -dev -config "$work/agent.hcl" >"$work/agent.log" 2>&1 &
agent=$!
export NOMAD_ADDR=http://127.0.0.1:4646
for _ in $(seq 60); do nomad node status >/dev/null 2>&1 && break; sleep 1; done
nomad node status >/dev/null 2>&1 || { tail -40 "$work/agent.log"; fail "the Nomad agent did not come up"; }
for _ in $(seq 30); do
	nomad node status -self -verbose 2>/dev/null | grep -q "timeslice-25pct" && break
	sleep 2
done
nomad node status -self -verbose | grep -E "nvidia/gpu" | sort -u
nomad node status -self -verbose | grep -q "timeslice-25pct" || fail "no replicas fingerprinted"

alone=$("$work/e2e/spin" run 4 200 | awk '{print $6}')
nomad job run -detach "$work/limited.nomad.hcl" >/dev/null
for _ in $(seq 150); do
	st=$(nomad job allocs -t '{{range .}}{{.ClientStatus}}{{end}}' limited)
	[[ $st == complete || $st == failed ]] && break
	sleep 2
done
alloc=$(nomad job allocs -t '{{range .}}{{.ID}}{{end}}' limited)
for j in big small; do
	nomad alloc logs "$alloc" $j >"$work/$j.txt" || true
	echo "== task $j (allocation ${alloc:0:8}, $st):"
	cat "$work/$j.txt"
done
[[ $st == complete ]] || {
	for j in big small; do nomad alloc logs -stderr "$alloc" $j | tail -20; done
	fail "job limited: $st"
}

for j in big small; do
	grep -q '^LD_LIBRARY_PATH=/run/gpumux/limiter/lib' "$work/$j.txt" || fail "$j: the limiter is not first on the library path"
done
check_held big "$half_mib" "$work/big.txt"
check_held small "$quarter_mib" "$work/small.txt"
check_split "$work/big.txt" "$work/small.txt" "$alone"
echo PASS
