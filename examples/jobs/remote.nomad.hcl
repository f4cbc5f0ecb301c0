# A remote share: part of a GPU of another host, with a hard memory quota
# the server enforces. The task gets no device node: gpumux's libcuda.so.1
# is mounted at /run/gpumux/remote and first on LD_LIBRARY_PATH, and
# forwards the program's CUDA driver calls to the server named by
# GPUMUX_REMOTE_ADDR, presenting GPUMUX_REMOTE_TOKEN. Runs on nodes whose
# plugin has a remote block (examples/gpumux-remote-client.hcl).
job "remote" {
  type = "batch"

  group "infer" {
    task "probe" {
      driver = "exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "env | grep -E '^(GPUMUX_REMOTE_ADDR|GPUMUX_SHARES|LD_LIBRARY_PATH)=' | sort; echo \"GPUMUX_REMOTE_TOKEN=$(printenv GPUMUX_REMOTE_TOKEN | cut -c1-12)...\"; ls -l /run/gpumux/remote; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader"]
      }
      resources {
        cpu    = 100
        memory = 64
        device "nvidia/gpu" {
          count = 1
          constraint {
            attribute = "${device.attr.mechanism}"
            value     = "remote"
          }
          constraint {
            attribute = "${device.attr.memory}"
            operator  = ">="
            value     = "4 GiB"
          }
        }
      }
    }
  }
}
