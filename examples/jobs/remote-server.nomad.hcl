# gpumux-remoted on the GPU nodes: a system job that runs one server on
# every GPU node (a node whose device plugin offers a whole GPU, below),
# serving that GPU to remote shares on nodes without GPUs, and registering
# the Nomad service "gpumux-remote" that their plugins discover
# (examples/gpumux-remote-client.hcl). Nodes without a whole GPU to give
# are left out without a placement failure; a GPU node whose client config
# has `meta { gpumux_remote_server = "false" }` is left out too.
#
# The pool secret comes from the Nomad variable nomad/jobs/gpumux-remote,
# key "secret" (the same bytes as the clients' token_file):
#
#   nomad var put nomad/jobs/gpumux-remote secret="$(cat /etc/gpumux/remote.key)"
#
# Install the server on the GPU nodes: the gpumux package puts it in
# /usr/bin (docs/install.md); from a source tree,
#
#   make install PREFIX=/usr
job "gpumux-remote" {
  type = "system"

  # Operators keep a GPU node out with meta gpumux_remote_server = "false".
  constraint {
    attribute = "${meta.gpumux_remote_server}"
    operator  = "!="
    value     = "false"
  }

  group "remoted" {
    network {
      # A dynamic port: clients find it through the service. Give it
      # static = 7070 for clients that list servers by address instead.
      port "remote" {}
      # Prometheus metrics (gpumux_remote_*) at /metrics, health at /healthz.
      port "metrics" {}
    }

    service {
      name     = "gpumux-remote"
      provider = "nomad"
      port     = "remote"

      # 200 while the server accepts clients on an initialised GPU, 503
      # and the reason otherwise (docs/remote.md, "Health check").
      check {
        name     = "healthz"
        type     = "http"
        port     = "metrics"
        path     = "/healthz"
        interval = "10s"
        timeout  = "2s"

        # Restart a server that stays unhealthy for three checks.
        check_restart {
          limit = 3
          grace = "30s"
        }
      }
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
        command = "/usr/bin/gpumux-remoted"
        args = [
          "--listen", "${NOMAD_ADDR_remote}",
          "--metrics-addr", "${NOMAD_ADDR_metrics}",
          "--token-file", "${NOMAD_SECRETS_DIR}/remote.key",
          "--backend", "cuda",
          # Live migration (docs/remote.md): uncomment to move this server's
          # sessions to the other servers of the service when the job stops
          # or its node drains, instead of ending them.
          # "--migratable", "--drain-to", "pool",
        ]
      }

      # How long a stopping server has to move its sessions (--drain-to
      # gives up after 5 minutes); one without --drain-to stops at once.
      kill_timeout = "5m"

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

      # What one server with a handful of tenants needs; each tenant runs
      # in a worker process of its own (docs/remote.md).
      resources {
        cpu    = 2000
        memory = 1024

        # The GPU to serve, which also keeps the job to GPU nodes: a whole
        # one from gpumux's device plugin. With count = N the server serves
        # N GPUs.
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
