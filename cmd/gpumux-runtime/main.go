// Command gpumux-runtime is gpumux's OCI runtime: a runc wrapper for
// containerd (runc options BinaryName) and Docker (runtimes). It is small:
// every runc call of a container that asks for no GPU is handed to runc
// with an exec; a create that asks, and gpumux's hooks, are handed to
// gpumux-runtime-core, installed beside it (package runtimehook/entry).
package main

import (
	"context"
	"os"

	"github.com/gpumux/gpumux/runtimehook/entry"
)

func main() {
	os.Exit(entry.Main(context.Background(), os.Args[1:], os.Stdin, os.Stderr))
}
