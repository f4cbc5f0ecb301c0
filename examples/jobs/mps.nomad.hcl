# An MPS share with at least 60 GiB: a hard memory limit and a fixed part of
# the SMs, on a GPU whose MPS server other tasks share. Best throughput for
# many small workloads; no fault isolation (one server).
job "mps" {
  type = "batch"

  group "infer" {
    task "probe" {
      driver = "exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "env | grep -E '^(NVIDIA|CUDA|GPUMUX)_' | sort; stat -c '%n %F %t:%T' /dev/nvidia*; stat -c '%n %F' $CUDA_MPS_PIPE_DIRECTORY"]
      }
      resources {
        cpu    = 100
        memory = 64
        device "nvidia/gpu" {
          count = 1
          constraint {
            attribute = "${device.attr.mechanism}"
            value     = "mps"
          }
          constraint {
            attribute = "${device.attr.memory}"
            operator  = ">="
            value     = "60 GiB"
          }
        }
      }
    }
  }
}
