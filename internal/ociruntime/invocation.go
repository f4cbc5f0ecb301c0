package ociruntime

import "strings"

// Binary names: gpumux-runtime is the C entry (cmd/gpumux-runtime), which
// routes every call; gpumux-runtime-hook runs the hooks that need no node
// (this package's Main); gpumux-runtime-core links the node core. All three
// are installed in one directory.
const (
	EntryBinary = "gpumux-runtime"
	HookBinary  = "gpumux-runtime-hook"
	CoreBinary  = "gpumux-runtime-core"
)

// Environment of gpumux-runtime and its hooks.
const (
	EnvRunc     = "GPUMUX_RUNC"      // runc binary (default "runc" on PATH)
	EnvStateDir = "GPUMUX_STATE_DIR" // overrides the node config's state_dir
)

// The hooks gpumux-runtime-hook runs: update-ldcache (`hook update-ldcache
// [--link LINK=TARGET]... DIR...`, the hook the node core's edits name), and poststop when its
// environment names the state directory (the core's hooks do), which is
// all it needs to release the container's leases.
const (
	HookUpdateLdcache = "update-ldcache"
	HookPoststop      = "poststop"
)

// runcGlobalValueFlags are runc's global flags that take a value; the
// subcommand is the first argument that is neither one of these nor a flag.
var runcGlobalValueFlags = map[string]bool{
	"--root": true, "--log": true, "--log-format": true, "--criu": true, "--rootless": true,
}

// Invocation is a runc command line as a containerd shim or Docker passes it.
type Invocation struct {
	Args       []string // everything, as given
	Subcommand string   // "create", "start", "delete", …; "" if none
	Root       string   // --root: runc's state directory
	Bundle     string   // create: --bundle (or -b); default "."
	ID         string   // create: the container ID (the last argument)
}

// ParseInvocation finds what gpumux needs in runc's arguments without
// changing them.
func ParseInvocation(args []string) Invocation {
	inv := Invocation{Args: args}
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		name, _, hasValue := strings.Cut(a, "=")
		if !strings.HasPrefix(a, "-") {
			inv.Subcommand = a
			break
		}
		if runcGlobalValueFlags[name] && !hasValue && i+1 < len(args) {
			if name == "--root" {
				inv.Root = args[i+1]
			}
			i++
		} else if name == "--root" && hasValue {
			inv.Root = strings.TrimPrefix(a, "--root=")
		}
	}
	if inv.Subcommand != "create" {
		return inv
	}
	rest := args[i+1:]
	inv.Bundle = "."
	for j := 0; j < len(rest); j++ {
		a := rest[j]
		switch {
		case (a == "--bundle" || a == "-b") && j+1 < len(rest):
			inv.Bundle = rest[j+1]
			j++
		case strings.HasPrefix(a, "--bundle="):
			inv.Bundle = strings.TrimPrefix(a, "--bundle=")
		}
	}
	if len(rest) > 0 {
		inv.ID = rest[len(rest)-1]
	}
	return inv
}

// Flag returns the value of a global runc flag, "" if absent.
func (inv Invocation) Flag(name string) string {
	for i, a := range inv.Args {
		if a == inv.Subcommand {
			break
		}
		if a == name && i+1 < len(inv.Args) {
			return inv.Args[i+1]
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}
