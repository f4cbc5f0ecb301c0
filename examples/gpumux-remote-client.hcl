# Nomad client config for a node that uses GPUs of other hosts: remote
# shares. GPU nodes run gpumux-remoted as the Nomad job
# examples/jobs/remote-server.nomad.hcl, which registers the Nomad service
# "gpumux-remote"; the plugin finds the servers through this agent's HTTP
# API, probes their GPUs and offers each as `shares` remote shares. Tasks get
# no device node: gpumux's libcuda.so.1 (the interposer) forwards their CUDA
# calls to the server.
#
# One pool, one secret: the same bytes in token_file here (mode 0600) and in
# the Nomad variable the server job reads:
#
#   (umask 077; gpumux remote secret > /etc/gpumux/remote.key)   # once; copy it to every client node
#   nomad var put nomad/jobs/gpumux-remote secret="$(cat /etc/gpumux/remote.key)"
#
# and the interposer and its NVML library (make interposer remote-nvml builds
# bin/remote/libcuda.so.1 and bin/remote/libnvidia-ml.so.1):
#
#   install -D -m 644 bin/remote/libcuda.so.1 bin/remote/libnvidia-ml.so.1 -t /usr/lib/gpumux/remote/ && install -m 755 bin/remote/nvidia-smi /usr/lib/gpumux/remote/
#   ln -sfn libnvidia-ml.so.1 /usr/lib/gpumux/remote/libnvidia-ml.so
#
# A node with GPUs of its own may have a remote block too: its own GPUs are
# offered as usual, next to the remote ones.
plugin "nomad-device-gpumux" {
  config {
    state_dir          = "/var/lib/gpumux"
    fingerprint_period = "1m"

    remote {
      # Servers registered as Nomad services (provider = "nomad").
      discover        = true
      service         = "gpumux-remote"
      nomad_addr      = "http://127.0.0.1:4646"
      nomad_namespace = "default"
      # nomad_token_file = "/etc/gpumux/nomad.token"   # with ACLs: a token that may read services

      # Or, or as well, servers by address.
      # servers = ["10.0.0.5:7070", "unix:/run/gpumux-remoted.sock"]

      token_file     = "/etc/gpumux/remote.key"
      token_ttl      = "720h" # how long a task's token admits it
      shares         = 4      # per remote GPU; each gets 1/4 of its memory as a hard quota
      interposer_dir = "/usr/lib/gpumux/remote"
    }
  }
}
