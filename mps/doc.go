// Package mps runs NVIDIA MPS control daemons for the GPUs and MIG instances
// configured with mechanism = "mps": one daemon per device, each seeing its
// device alone (CUDA_VISIBLE_DEVICES=<GPU- or MIG- UUID>, so it is device 0
// to the daemon) and each with private directories under the state dir:
//
//	<stateDir>/mps/<uuid>/pipe   CUDA_MPS_PIPE_DIRECTORY, 0755: clients need it, and nothing else of MPS
//	<stateDir>/mps/<uuid>/log    CUDA_MPS_LOG_DIRECTORY, 0700: control.log and server.log
//
// A Manager starts, adopts, watches, restarts and drains the daemons:
//
//	m := mps.NewManager(stateDir, mps.WithLogger(logger))
//	err := m.Reconcile(ctx, []mps.Device{{UUID: "GPU-…", ThreadPercent: 50, PinnedMemLimitMiB: 71680}})
//	go m.Run(ctx)                 // health loop; leaves the daemons running when ctx ends
//	ok, why := m.Health("GPU-…")  // and re-read it whenever m.Changed() ticks
//
// A Device's defaults are the largest of its shares': each client lowers them
// for itself with CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and
// CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, and cannot raise them.
//
// The daemon is driven through its command line only: "nvidia-cuda-mps-control
// -d" to start it, and the program without arguments, one command on stdin,
// to talk to it. The commands used are get_server_list (the health probe),
// get_client_list, get_/set_default_active_thread_percentage,
// get_/set_default_device_pinned_mem_limit and quit. For machines without a
// GPU, cmd/gpumux-fake-mps-control (package mps/fakecontrol) is a stand-in
// that speaks the same command line, for tests and demos only.
//
// # What the real daemon does
//
// Read off driver 580.159.04 on an H200 (mps/realmps_test.go, build tag gpu,
// runs the Manager against it), and from NVIDIA's MPS documentation:
//
//   - -d returns at once; the daemon is a session leader, answers within
//     milliseconds, and starts a server only when the first client connects.
//     A round trip of a command takes about 10 ms.
//   - In the pipe directory it creates sockets control (0666) and
//     control_privileged (0755), a lock file control_lock, a FIFO log that
//     servers log through, and nvidia-cuda-mps-control.pid. No other file
//     appears while servers and clients run; the server's shared memory is
//     anonymous. The longest socket path must fit in 108 bytes, so a pipe
//     directory longer than 88 bytes makes -d exit 1, silently; Reconcile
//     refuses such a state directory up front.
//   - With no daemon, commands exit 1 with "Cannot find MPS control daemon
//     process" on stderr. A second -d in a live daemon's directory exits 1
//     with "An instance of this daemon is already running".
//   - set_default_active_thread_percentage replies with the value in force,
//     also when it refuses an invalid one (exit 0, reason only in
//     control.log), so the Manager checks the reply. The pinned limit
//     commands take "4G" or "4096M" (FormatMemLimit); the setter refuses no
//     value but reads anything else its own way (ParseMemLimit: "4096K" is
//     4096 MiB, "4.5G" 4 MiB), and after "0" the getter prints nothing, as
//     with no limit set (whether servers then start without one was not
//     checked). The getter rounds down to whole G from 1G on (3000M reads
//     back "2G", though the server enforces 3000 MiB; DisplayMemLimit), so a
//     limit that is not whole GiB is set once per daemon rather than
//     compared. Unknown commands print
//     `Unknown command "…"` and exit 0. Defaults are lost when the daemon
//     ends, and apply to servers started after they are set.
//   - With 25% and 3000M, a client saw 32 of 132 SMs and could not allocate
//     3500 MiB; with CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=10 of its own, 12 SMs.
//     A client running as another user (uid 65534) was served too, through
//     the 0755 pipe directory and a 0700 log directory.
//   - kill -9 of the daemon ends its server as well; a connected client's
//     next synchronisation fails ("the remote procedural call between the MPS
//     server and the MPS client failed"). Everything in the pipe directory
//     stays. A new -d starts over those files without complaint; the Manager
//     still removes the daemon's five files first (and only them, and only
//     when no daemon process for that directory lives), so that it never
//     reads a stale, maybe recycled, pid.
//   - A daemon that is stopped (SIGSTOP) takes connections but never answers:
//     commands and new clients hang. Hence the command timeout, and the hang
//     timeout after which such a daemon is killed and restarted.
//   - quit with a connected client does not end the client: the server
//     refuses to shut down ("unable to shutdown due to N active clients"),
//     retrying with a growing delay, and the quit command blocks until the
//     last client exits. The Manager sends quit only to daemons without
//     clients, checked just before.
//   - A client that cannot reach a daemon (none running, stale sockets, or a
//     pipe directory it may not search) gets no error: CUDA runs it without
//     MPS, on the whole GPU, with no limit (132 SMs). Shares must therefore
//     not be handed out while their daemon is unhealthy, and every directory
//     above the pipe directories must be searchable by task users; Reconcile
//     logs a warning when one is not.
//
// # Behaviour
//
// Reconcile adopts a daemon that already answers in a wanted device's pipe
// directory (after a plugin restart) instead of starting a second one, and
// sets only the defaults that read back different. Daemons of devices no
// longer wanted, whether this Manager started them or finds them under the
// state directory, are drained: reported unhealthy with their client pids
// while clients remain, quit once none does (by a later Reconcile or Run
// pass), and their pipe directory removed; logs stay. Run probes every daemon
// each check interval, reports one that does not answer unhealthy at once
// with the reason, restarts a dead one after a backoff (its defaults set
// again), and kills and restarts a live one that has not answered for the
// hang timeout. Nothing quits or kills a daemon when Run's context ends.
package mps
