# A job written for nomad-device-nvidia, which runs unchanged on a gpumux node
# (docs/migrating.md). Its device blocks are those of Nomad's documentation:
# any NVIDIA GPU with at least 2 GiB, preferring 4 GiB or more and a model by
# name; and a model asked for by its group name. With
# group_names = "nomad-device-nvidia" a gpumux node names whole GPUs as that
# plugin does ("NVIDIA H200"), and either block gets a whole GPU.
job "nomad-device-nvidia" {
  type = "batch"

  group "any" {
    count = 2

    task "probe" {
      driver = "exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "env | grep -E '^(NVIDIA|CUDA|GPUMUX)_' | sort"]
      }
      resources {
        cpu    = 100
        memory = 64
        device "nvidia/gpu" {
          count = 1
          constraint {
            attribute = "${device.attr.memory}"
            operator  = ">="
            value     = "2 GiB"
          }
          affinity {
            attribute = "${device.attr.memory}"
            operator  = ">="
            value     = "4 GiB"
            weight    = 75
          }
          affinity {
            attribute = "${device.model}"
            value     = "NVIDIA H200"
            weight    = 50
          }
        }
      }
    }
  }

  group "named" {
    task "probe" {
      driver = "exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "env | grep -E '^(NVIDIA|CUDA|GPUMUX)_' | sort"]
      }
      resources {
        cpu    = 100
        memory = 64
        device "nvidia/gpu/NVIDIA H200" {
          count = 1
          constraint {
            attribute = "${device.attr.bar1}"
            operator  = ">="
            value     = "16 GiB"
          }
          constraint {
            attribute = "${device.attr.power}"
            operator  = ">="
            value     = "300 W"
          }
        }
      }
    }
  }
}
