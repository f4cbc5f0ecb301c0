// Package ocicreate prepares the create of a container that asks for GPU
// shares: its bundle's config.json read, the request found in it
// (node.ParseRequest), the shares leased, their edits and gpumux's
// poststop hook written into the spec; where gpumux agent prepared it and
// watches runc's root, no hook: the agent gives the shares back when runc
// deletes the container (deletes.go). gpumux-runtime-core (package
// runtimehook: a process per create) and gpumux agent (package cli: a
// node agent that has the node open already) both use it.
//
// The agent serves it to gpumux-runtime's C entry over a unix socket
// (Server; only root may connect): the entry sends the runc command line
// of a create that may ask, with the node config and state directory it
// would use, and execs runc once the agent has prepared the bundle, or
// starts the core when no agent answers or the agent runs another node
// config. A request is NUL-terminated strings, ended by the end of what
// the entry writes:
//
//	gpumux-create/1  CONFIG  STATE_DIR  ENTRY  RUNC_ARG...
//
// (CONFIG: the node config file the core would read; STATE_DIR:
// $GPUMUX_STATE_DIR or empty; ENTRY: the entry's own path, beside which
// gpumux-runtime-hook is). The answer is one line: "runc" (prepared, or
// nothing asked: run runc), "core" (not this agent's to decide: run the
// core) or "error MESSAGE" (refused; the agent has written it to runc's
// log as the core would).
//
// gpumux-runtime run as a hook asks the same way, with the container's
// state (what runc writes on the hook's stdin) before the arguments:
//
//	gpumux-hook/1  CONFIG  STATE_DIR  ENTRY  STATE  hook NAME ARG...
//
// The agent does update-ldcache in the container's root as the hook's
// process sees it (the hook runs in the container's mount namespace, where
// the driver's tree is mounted: the bundle's root within /proc/PID/root)
// and poststop (the container's leases given back) when the state
// directory is its own, and answers "ok"; anything else, or anything that
// fails, is "fallback": gpumux-runtime hands the hook to
// gpumux-runtime-hook with the same stdin, as where no agent answers. Only
// root (or the agent's own user) is served; anyone else is told "core" or
// "fallback".
//
// An update-ldcache hook whose parent is runc's init ("runc:[2:INIT]")
// sends an empty STATE and leaves stdin unread: runc runs createContainer
// hooks from its init with the container's root as their working
// directory, which is the root the agent then uses (/proc/PID/cwd), once
// it has checked the hook's parent itself, that the hook's root is the
// agent's (runc's init runs startContainer hooks too, after its switch to
// the container's root) and that the directory is not that root. runc's
// init writes the state from a goroutine of a
// process that runs one goroutine at a time (GOMAXPROCS 1), which may not
// run until Go's monitor takes the processor back from the goroutine
// blocked waiting for the hook: a hook that read its stdin waited for it
// (docs/benchmarks.md). Where the agent leaves such a hook,
// gpumux-runtime-hook reads the state from the same stdin, still unread.
// Any other hook with an empty stdin is gpumux-runtime-hook's, unasked.
package ocicreate
