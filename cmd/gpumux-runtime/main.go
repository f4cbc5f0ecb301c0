// Command gpumux-runtime is gpumux's OCI runtime: a runc wrapper for
// containerd (runc options BinaryName) and Docker (runtimes). On `create` it
// gives a container the GPU shares it asks for; everything else is runc's.
package main

import (
	"context"
	"os"

	"github.com/gpumux/gpumux/runtimehook"
)

func main() {
	os.Exit(runtimehook.Main(context.Background(), os.Args[1:], os.Stdin, os.Stderr))
}
