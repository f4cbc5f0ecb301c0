package nodeconfig

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"

	"github.com/hashicorp/nomad/plugins/shared/hclspec"
)

// Defaults of the nri block.
const (
	// DefaultNRISocket is containerd's NRI socket (its nri plugin's
	// socket_path).
	DefaultNRISocket = "/var/run/nri/nri.sock"
	// DefaultNRIIndex orders gpumux among NRI plugins: two digits, lower
	// runs first.
	DefaultNRIIndex = "50"
	// DefaultNRIRuncRoot is where containerd's runc shim keeps the state of
	// CRI containers (runc --root for namespace k8s.io).
	DefaultNRIRuncRoot = "/run/containerd/runc/k8s.io"
)

// nriSpec is the nri block's schema.
var nriSpec = hclspec.NewBlock("nri", false, hclspec.NewObject(map[string]*hclspec.Spec{
	"enabled":               hclspec.NewDefault(hclspec.NewAttr("enabled", "bool", false), hclspec.NewLiteral("true")),
	"socket":                hclspec.NewDefault(hclspec.NewAttr("socket", "string", false), hclspec.NewLiteral(`"`+DefaultNRISocket+`"`)),
	"plugin_index":          hclspec.NewDefault(hclspec.NewAttr("plugin_index", "string", false), hclspec.NewLiteral(`"`+DefaultNRIIndex+`"`)),
	"runc_root":             hclspec.NewDefault(hclspec.NewAttr("runc_root", "string", false), hclspec.NewLiteral(`"`+DefaultNRIRuncRoot+`"`)),
	"skip_runtime_handlers": hclspec.NewAttr("skip_runtime_handlers", "list(string)", false),
}))

// NRI is the nri { … } block: gpumux agent serves an NRI plugin to
// containerd 1.7+/2.x, which leases shares to the containers that ask for
// them by annotation, with no runtime wrapper. Only gpumux agent reads it.
type NRI struct {
	// Enabled false keeps the block without serving the plugin.
	Enabled bool `codec:"enabled"`
	// Socket is containerd's NRI socket, the plugin connects to it.
	Socket string `codec:"socket"`
	// PluginIndex orders the plugin among others ("00" to "99").
	PluginIndex string `codec:"plugin_index"`
	// RuncRoot is the runc state directory of the containers the plugin
	// leases to, recorded with their leases: where a later agent asks runc
	// whether a container still exists.
	RuncRoot string `codec:"runc_root"`
	// SkipRuntimeHandlers are CRI runtime handlers (runtime classes) whose
	// pods the plugin leaves alone: those that run gpumux-runtime, which
	// serves their containers itself (both would lease for one container).
	SkipRuntimeHandlers []string `codec:"skip_runtime_handlers"`
}

func (n *NRI) normalize() {
	if n.Socket == "" {
		n.Socket = DefaultNRISocket
	}
	if n.PluginIndex == "" {
		n.PluginIndex = DefaultNRIIndex
	}
	if n.RuncRoot == "" {
		n.RuncRoot = DefaultNRIRuncRoot
	}
}

var nriIndex = regexp.MustCompile(`^[0-9]{2}$`)

// Validate checks the nri block, naming field, value and what is valid.
func (n *NRI) Validate() error {
	var errs []error
	for _, f := range []struct{ field, value, what string }{
		{"socket", n.Socket, "containerd's NRI socket, e.g. " + DefaultNRISocket},
		{"runc_root", n.RuncRoot, "runc's state directory of CRI containers, e.g. " + DefaultNRIRuncRoot},
	} {
		if !filepath.IsAbs(f.value) || filepath.Clean(f.value) != f.value {
			errs = append(errs, fmt.Errorf("nri block: %s = %q: want the clean absolute path of %s", f.field, f.value, f.what))
		}
	}
	for _, h := range n.SkipRuntimeHandlers {
		if h == "" {
			errs = append(errs, errors.New(`nri block: skip_runtime_handlers: an empty name (want CRI runtime handler names, e.g. ["gpumux"])`))
		}
	}
	if !nriIndex.MatchString(n.PluginIndex) {
		errs = append(errs, fmt.Errorf("nri block: plugin_index = %q: want two digits, \"00\" to \"99\" (lower runs first)", n.PluginIndex))
	}
	return errors.Join(errs...)
}
