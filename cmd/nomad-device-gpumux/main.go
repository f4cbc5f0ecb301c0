// Command nomad-device-gpumux is gpumux's Nomad device plugin. Nomad starts it
// from its plugin_dir; it is not meant to be run by hand, except as
// `nomad-device-gpumux --version`, which prints its version and commit.
package main

import (
	"fmt"
	"os"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/plugins"

	"github.com/gpumux/gpumux/internal/version"
	"github.com/gpumux/gpumux/plugin"
)

func main() {
	if len(os.Args) == 2 && os.Args[1] == "--version" {
		fmt.Println("nomad-device-gpumux", version.String())
		return
	}
	plugins.Serve(func(logger hclog.Logger) any { return plugin.New(logger) })
}
