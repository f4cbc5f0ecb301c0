package fakecuda

import "syscall"

func gettid() int { return syscall.Gettid() }
