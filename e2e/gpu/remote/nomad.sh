#!/usr/bin/env bash
# A CUDA program on a GPU-less Nomad task, against a GPU server pooled
# through Nomad, on the GPU machine (docs/validation.md):
#
#   - a Nomad dev agent with gpumux's plugin, whose node config has a
#     `remote` block that discovers servers through Nomad services;
#   - gpumux-remoted (backend cuda, the real H200) as a Nomad job that
#     registers the service gpumux-remote (raw_exec: bin/ is not in exec's
#     chroot);
#   - a job asking for a remote share (exec driver): the task gets no
#     /dev/nvidia* device, only the interposer and its token, and runs
#     vectoradd, built by plain nvcc with the static CUDA runtime.
#
# Carried from a build machine: .devbin/nomad.xz (`xz -c $NOMAD_BIN`),
# .devbin/nomad-device-gpumux, .devbin/gpumux-remoted, bin/remote. It changes
# no GPU setting; it installs the test program as /usr/local/bin/gpumux-vectoradd
# (the exec driver's chroot holds /usr).
set -euo pipefail
cd "$(dirname "$0")/../../.."
root=$PWD
work=$(mktemp -d /tmp/gmx-nomad.XXXX)
cuda=${CUDA_HOME:-/usr/local/cuda}

xz -dc .devbin/nomad.xz >"$work/nomad"
chmod +x "$work/nomad"
mkdir -p "$work/plugins" "$work/state"
cp .devbin/nomad-device-gpumux "$work/plugins/"
"$cuda/bin/nvcc" -arch=sm_90 -o /usr/local/bin/gpumux-vectoradd e2e/gpu/remote/vectoradd.cu
(umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$work/pool.key")

cat >"$work/agent.hcl" <<HCL
plugin_dir = "$work/plugins"
client {
  # No cloud here: their fingerprinters fail the agent's start.
  options = {
    "fingerprint.denylist" = "env_aws,env_gce,env_azure,env_digitalocean"
  }
}
plugin "raw_exec" {
  config { enabled = true }
}
plugin "nomad-device-gpumux" {
  config {
    state_dir          = "$work/state"
    fingerprint_period = "2s"
    remote {
      discover       = true
      nomad_addr     = "http://127.0.0.1:4646"
      token_file     = "$work/pool.key"
      shares         = 4
      interposer_dir = "$root/bin/remote"
    }
  }
}
HCL

cat >"$work/server.nomad.hcl" <<HCL
job "gpumux-remote" {
  group "remoted" {
    network {
      port "remote" {}
    }
    service {
      name     = "gpumux-remote"
      provider = "nomad"
      port     = "remote"
    }
    task "remoted" {
      driver = "raw_exec"
      config {
        command = "$root/.devbin/gpumux-remoted"
        args    = ["--listen", "\${NOMAD_ADDR_remote}", "--token-file", "$work/pool.key", "--backend", "cuda"]
      }
    }
  }
}
HCL

cat >"$work/client.nomad.hcl" <<'HCL'
job "vectoradd" {
  type = "batch"
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "vectoradd" {
      driver = "exec"
      config {
        command = "/bin/sh"
        args = ["-c", "echo \"devices: $(ls /dev | grep -c nvidia) /dev/nvidia* nodes\"; echo \"GPUMUX_REMOTE_ADDR=$GPUMUX_REMOTE_ADDR\"; /usr/local/bin/gpumux-vectoradd"]
      }
      resources {
        device "nvidia/gpu" {
          count = 1
          constraint {
            attribute = "${device.attr.mechanism}"
            value     = "remote"
          }
        }
      }
    }
  }
}
HCL

# One machine plays both roles. So that the client side is GPU-less (the
# plugin must not see the H200 through NVML, or it offers it locally and
# will not offer the same GPU again as remote), the agent runs in a mount
# namespace where libnvidia-ml.so.1 is /dev/null: the plugin finds no
# driver and offers remote shares only. libcuda.so.1, which the server job
# uses, is untouched.
nvml=$(readlink -f "$(ldconfig -p | awk '/libnvidia-ml.so.1 /{print $NF; exit}')")
unshare -m --propagation private bash -c "mount --bind /dev/null '$nvml' && exec '$work/nomad' agent -dev -config '$work/agent.hcl'" >"$work/agent.log" 2>&1 &
agent=$!
trap 'kill $agent 2>/dev/null; wait $agent 2>/dev/null; grep -i "gpumux" "$work/agent.log" | tail -15 >&2' EXIT
export NOMAD_ADDR=http://127.0.0.1:4646
for _ in $(seq 60); do "$work/nomad" node status >/dev/null 2>&1 && break; sleep 1; done
if ! "$work/nomad" node status >/dev/null 2>&1; then
	echo "the Nomad agent did not come up:" >&2
	tail -40 "$work/agent.log" >&2
	exit 1
fi

"$work/nomad" job run -detach "$work/server.nomad.hcl"
echo "== waiting for the remote shares"
for _ in $(seq 30); do
	"$work/nomad" node status -self -verbose 2>/dev/null | grep -q "remote-4x" && break
	sleep 2
done
"$work/nomad" node status -self -verbose | grep -E "nvidia/gpu" | sort | uniq
if ! "$work/nomad" node status -self -verbose | grep -q "remote-4x"; then
	echo "no remote shares; the server job:" >&2
	"$work/nomad" job status gpumux-remote | tail -5 >&2
	salloc=$("$work/nomad" job allocs -t '{{range .}}{{.ID}}{{end}}' gpumux-remote)
	"$work/nomad" alloc logs -stderr "$salloc" remoted | tail -20 >&2 || true
	"$work/nomad" service info gpumux-remote >&2 || true
	grep -i "remote" "$work/agent.log" | grep -v DEBUG | tail -20 >&2
	exit 1
fi
"$work/nomad" job run "$work/client.nomad.hcl" || true
alloc=$("$work/nomad" job allocs -t '{{range .}}{{.ID}}{{end}}' vectoradd)
for _ in $(seq 60); do
	st=$("$work/nomad" alloc status -t '{{.ClientStatus}}' "$alloc")
	[[ $st == complete || $st == failed ]] && break
	sleep 2
done
echo "== the task's output (allocation $alloc, $st)"
"$work/nomad" alloc logs "$alloc" vectoradd
"$work/nomad" alloc logs -stderr "$alloc" vectoradd
"$work/nomad" alloc status "$alloc" | grep -E "nvidia/gpu|Terminated|Driver Failure|Exit Code" || true
