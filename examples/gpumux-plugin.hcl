# Nomad client config for gpumux on an 8-GPU node. Copy it into the client's
# config directory and put the nomad-device-gpumux binary in plugin_dir.
#
# Remove `simulate` on a real GPU node: it makes the plugin use a simulated
# DGX H200 (device nodes and state under state_dir) for demos and tests.
plugin "nomad-device-gpumux" {
  config {
    simulate           = "dgxh200"
    state_dir          = "/var/lib/gpumux"
    fingerprint_period = "1m"

    # GPUs 0-3: four time-slice replicas each (16 shares).
    gpu {
      match     = "0-3"
      mechanism = "timeslice"
      replicas  = 4
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

    # GPUs 4 and 5 match no block: each is offered whole (mechanism "exclusive").
  }
}
