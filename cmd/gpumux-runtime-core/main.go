// Command gpumux-runtime-core is the part of gpumux-runtime that links the
// node core: gpumux-runtime hands it the create of a container that asks for
// GPU shares, which it leases and injects into the container's config.json
// before it runs runc, and the poststop hook where the spec names it. It is
// installed beside gpumux-runtime and not registered with an engine.
package main

import (
	"context"
	"os"

	"github.com/gpumux/gpumux/runtimehook"
)

func main() {
	os.Exit(runtimehook.Main(context.Background(), os.Args[1:], os.Stdin, os.Stderr))
}
