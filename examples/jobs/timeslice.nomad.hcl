# A time-slice replica: a fair share of one GPU, scheduled by time with the
# GPU's other replicas. Cheapest; no memory or fault isolation.
job "timeslice" {
  type = "batch"

  group "infer" {
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
            value     = "timeslice"
          }
        }
      }
    }
  }
}
