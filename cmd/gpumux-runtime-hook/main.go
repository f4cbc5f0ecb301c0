// Command gpumux-runtime-hook runs gpumux-runtime's hooks that need no node
// core: update-ldcache (the driver's programs linked onto PATH, its
// libraries in the container's linker cache) and poststop (the container's leases given back). runc runs it
// from the hooks gpumux writes into a container's spec; it is installed
// beside gpumux-runtime (package runtimehook/entry).
package main

import (
	"context"
	"os"

	"github.com/gpumux/gpumux/runtimehook/entry"
)

func main() {
	os.Exit(entry.Main(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
