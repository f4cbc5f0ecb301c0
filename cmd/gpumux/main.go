// Command gpumux is the gpumux operator CLI.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/gpumux/gpumux/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
