# A time-slice replica: a part of one GPU, scheduled by time with the GPU's
# other replicas. Cheapest. gpumux's limiter (limit = "cap", the default)
# holds the task to the replica's memory and part of the GPU's time at the
# CUDA API (memory_isolation = "soft"); no fault isolation.
job "timeslice" {
  type = "batch"

  group "infer" {
    task "probe" {
      driver = "exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "env | grep -E '^(NVIDIA|CUDA|GPUMUX)_' | sort; stat -c '%n %F %t:%T' /dev/nvidia*; cat /run/gpumux/limiter/limits; ls /run/gpumux/limiter/lib"]
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
