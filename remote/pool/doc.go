// Package pool finds the GPUs of gpumux-remoted servers for a client node:
// servers named in the node config, and servers that Nomad's native service
// discovery knows (a Nomad job running gpumux-remoted with a service of
// provider "nomad", named gpumux-remote by default). Each server is probed
// over the remote protocol with a short-lived token signed with the pool's
// secret, which reads what a client would see of each GPU: name, memory,
// compute capability, SM count, UUID.
//
// A server that cannot be reached or probed is reported and left out; it
// never fails the others. The Nomad plugin scans the pool at every
// fingerprint and offers the GPUs as remote shares (share.Catalog.WithRemote);
// gpumux-runtime scans it when a container needs a remote share.
//
// A gpumux-remoted stopping with --drain-to pool looks at the pool the same
// way, for the servers it can move its sessions to (remote/daemon).
//
// Grant mints the token of one reservation: what a task presents to the
// server (GPUMUX_REMOTE_TOKEN) to use its share.
package pool
