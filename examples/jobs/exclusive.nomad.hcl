# A whole GPU, for work that needs all of it.
job "exclusive" {
  type = "batch"

  group "train" {
    task "probe" {
      driver = "exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "env | grep -E '^(NVIDIA|CUDA|GPUMUX)_' | sort; stat -c '%n %F %t:%T' /dev/nvidia*"]
      }
      resources {
        cpu    = 100
        memory = 64
        device "nvidia/gpu" {
          count = 1
          constraint {
            attribute = "${device.attr.mechanism}"
            value     = "exclusive"
          }
          # Prefer Hopper or newer where the node has several models.
          affinity {
            attribute = "${device.attr.cuda_compute_capability}"
            operator  = "version"
            value     = ">= 9.0"
            weight    = 50
          }
        }
      }
    }
  }
}
