# A MIG instance chosen by memory: anything between 30 and 40 GiB. Hardware
# isolation of memory, compute and faults.
job "mig" {
  type = "batch"

  group "train" {
    task "probe" {
      driver = "exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "env | grep -E '^(NVIDIA|CUDA|GPUMUX)_' | sort; stat -c '%n %F %t:%T' /dev/nvidia* /dev/nvidia-caps/*"]
      }
      resources {
        cpu    = 100
        memory = 64
        device "nvidia/gpu" {
          count = 1
          constraint {
            attribute = "${device.attr.mechanism}"
            value     = "mig"
          }
          constraint {
            attribute = "${device.attr.memory}"
            operator  = ">="
            value     = "30 GiB"
          }
          constraint {
            attribute = "${device.attr.memory}"
            operator  = "<="
            value     = "40 GiB"
          }
        }
      }
    }
  }
}
