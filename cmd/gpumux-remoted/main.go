// Command gpumux-remoted is gpumux's remote GPU server: it runs the CUDA
// driver calls that containers on GPU-less nodes forward to it. Its command
// line is package remote/daemon; main only wires the process to it.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/gpumux/gpumux/remote/daemon"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := daemon.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
