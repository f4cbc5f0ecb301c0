// Package lease is gpumux's node-local lease store: which container holds
// which shares, for containers started outside Nomad (gpumux-runtime under
// containerd or Docker). It is one bbolt file, shared by every runtime and
// hook process of the node.
//
// bbolt locks the file from Open to Close: a second process's Open waits for
// the first one's Close, up to a timeout (WithTimeout, 10s by default). So
// open the store for one operation and close it at once; within a process,
// one Store may be used by many goroutines.
//
// Layout (schema 1): bucket "meta" holds "schema" = "1"; bucket "shares" maps
// a share ID to the container that holds it, and is the truth about leases;
// bucket "containers" maps a container ID to its Record (JSON, decoded
// leniently: unknown fields are ignored, so newer gpumux versions may add
// some). A newer schema is refused by Open, never rewritten.
//
// A damaged file is never reset: Open checks every page of it (the store is
// a few pages) and refuses an empty or garbled file with ErrDamaged, naming
// it; bbolt's panics on garbled pages become that error too. A new store
// is built beside its path and linked into place, so an empty leases.db is
// always damage. `gpumux repair` rebuilds a damaged store (see Rebuild).
package lease
