# Asks for more memory than any share on the node has: Nomad leaves it
# unplaced and says why (no device matches the constraint).
job "too-big" {
  type = "batch"

  group "g" {
    task "probe" {
      driver = "exec"
      config {
        command = "/bin/true"
      }
      resources {
        cpu    = 100
        memory = 64
        device "nvidia/gpu" {
          count = 1
          constraint {
            attribute = "${device.attr.memory}"
            operator  = ">="
            value     = "200 GiB"
          }
        }
      }
    }
  }
}
