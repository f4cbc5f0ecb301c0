# Nomad client config for gpumux on an 8-GPU node. Copy it into the client's
# config directory and put the nomad-device-gpumux binary in plugin_dir.
#
# Remove `simulate` on a real GPU node: it makes the plugin use a simulated
# DGX H200 (device nodes and state under state_dir) for demos and tests, and
# gpumux's stand-in MPS control daemon instead of nvidia-cuda-mps-control.
plugin "nomad-device-gpumux" {
  config {
    simulate           = "dgxh200"
    state_dir          = "/var/lib/gpumux"
    fingerprint_period = "1m"

    # GPUs 0-2: four time-slice replicas each (12 shares).
    gpu {
      match     = "0-2"
      mechanism = "timeslice"
      replicas  = 4
    }

    # GPU 4: MPS, four equal shares (25% of the SMs and 35 GiB each).
    gpu {
      match     = "4"
      mechanism = "mps"
      shares    = 4
    }

    # GPU 5: MPS, one large and two small shares.
    gpu {
      match       = "5"
      mechanism   = "mps"
      share_sizes = ["50%", "25%", "25%"]
    }

    # GPUs 6 and 7: MIG, one 3g.71gb and two 2g.35gb each. Applied at plugin
    # start when the GPU has no instance in use.
    gpu {
      match     = "6,7"
      mechanism = "mig"
      mig_devices {
        "3g.71gb" = 1
        "2g.35gb" = 2
      }
    }

    # GPU 3 matches no block: it is offered whole (mechanism "exclusive").
  }
}
