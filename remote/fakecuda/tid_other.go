//go:build !linux

package fakecuda

// gettid has no per-thread answer off Linux: every thread shares one
// current context.
func gettid() int { return 0 }
