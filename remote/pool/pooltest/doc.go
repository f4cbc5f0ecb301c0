// Package pooltest runs real gpumux-remoted servers (package remote/server)
// on fake backends (remote/fakecuda) in-process, for the tests of the
// packages that use the pool: the pool itself, the Nomad plugin and
// gpumux-runtime.
package pooltest
