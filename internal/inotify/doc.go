// Package inotify reads the event records of a Linux inotify instance, as
// the node agent's watch of runc's roots (ocicreate) and the simulated
// GPU's watch of its state file (gpu/sim) read them.
package inotify
