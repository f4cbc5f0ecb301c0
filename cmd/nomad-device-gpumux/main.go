// Command nomad-device-gpumux is gpumux's Nomad device plugin. Nomad starts it
// from its plugin_dir; it is not meant to be run by hand.
package main

import (
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/plugins"

	"github.com/gpumux/gpumux/plugin"
)

func main() {
	plugins.Serve(func(logger hclog.Logger) any { return plugin.New(logger) })
}
