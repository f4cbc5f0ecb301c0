// Package remote is gpumux's fifth mechanism: a GPU on another host, reached
// by forwarding the CUDA driver API. It holds the mechanism's provider
// (Provider: the pool's GPUs as shares, their edits and health); its
// subpackages are the pieces:
//
//   - proto: the wire protocol — frames, handshake, and the per-call code
//     generated from proto/calls.def (the one list of forwarded calls);
//   - interposer: the C library installed as libcuda.so.1 in a container,
//     which sends a program's driver calls to the server (built by
//     `make interposer`, not a Go package);
//   - server: gpumux-remoted's server — handshake, one worker process per
//     tenant, per-client handles and pointer checks, quotas, cleanup;
//   - cudabackend: the server's backend over the real driver (dlopen);
//   - fakecuda: a CPU backend for tests and demos;
//   - token: the per-reservation tokens a pool's secret signs;
//   - control: the client side of control connections (live migration
//     requests from the CLI and between servers);
//   - pool: how a client node finds servers (a static list or Nomad
//     services) and what GPUs they offer.
//
// docs/remote.md is the user's guide; docs/design.md ("Remote GPUs") says
// why the pieces have this shape.
package remote
