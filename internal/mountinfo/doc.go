// Package mountinfo reads the mountinfo files of Linux (proc(5),
// /proc/PID/mountinfo): each mount's file system, the directory of it the
// mount shows, its mount point, type and whether it is read-only, with
// the kernel's octal escapes undone. gpu/driverfiles reads them to tell
// whether a container still mounts a staged tree; the e2e tests, what a
// container or the host has mounted.
package mountinfo
