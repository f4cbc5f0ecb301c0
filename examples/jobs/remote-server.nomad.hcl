# gpumux-remoted on a GPU node: serves the GPU the job reserves to remote
# shares on nodes without GPUs, and registers the Nomad service
# "gpumux-remote" that their plugins discover (examples/gpumux-remote-client.hcl).
#
# The pool secret comes from the Nomad variable nomad/jobs/gpumux-remote,
# key "secret" (the same bytes as the clients' token_file):
#
#   nomad var put nomad/jobs/gpumux-remote secret="$(cat /etc/gpumux/remote.key)"
#
# Install the server on the GPU nodes (make build puts it in bin/):
#
#   install -m 755 bin/gpumux-remoted /usr/local/bin/gpumux-remoted
job "gpumux-remote" {
  type = "service"

  group "remoted" {
    count = 1

    network {
      # A dynamic port: clients find it through the service. Give it
      # static = 7070 for clients that list servers by address instead.
      port "remote" {}
      # Prometheus metrics (gpumux_remote_*), at /metrics.
      port "metrics" {}
    }

    service {
      name     = "gpumux-remote"
      provider = "nomad"
      port     = "remote"
    }

    service {
      name     = "gpumux-remote-metrics"
      provider = "nomad"
      port     = "metrics"
      tags     = ["prometheus"]
    }

    task "remoted" {
      driver = "exec"
      user   = "nobody"

      config {
        command = "/usr/local/bin/gpumux-remoted"
        args = [
          "--listen", "${NOMAD_ADDR_remote}",
          "--metrics-addr", "${NOMAD_ADDR_metrics}",
          "--token-file", "${NOMAD_SECRETS_DIR}/remote.key",
          "--backend", "cuda",
        ]
      }

      # The pool secret, readable by the task's user only.
      template {
        destination = "${NOMAD_SECRETS_DIR}/remote.key"
        perms       = "600"
        uid         = 65534
        gid         = 65534
        data        = <<EOT
{{ with nomadVar "nomad/jobs/gpumux-remote" }}{{ .secret }}{{ end }}
EOT
      }

      resources {
        cpu    = 2000
        memory = 1024

        # The GPU to serve: a whole one from the node's device plugin
        # (gpumux's, or NVIDIA's). With count = N the server serves N GPUs.
        device "nvidia/gpu" {
          count = 1
          constraint {
            attribute = "${device.attr.mechanism}"
            value     = "exclusive"
          }
        }
      }
    }
  }
}
