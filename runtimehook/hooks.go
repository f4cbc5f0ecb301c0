package runtimehook

import (
	"context"
	"fmt"
	"io"

	"github.com/gpumux/gpumux/node"
	"github.com/gpumux/gpumux/runtimehook/entry"
)

// Environment of gpumux-runtime and its hooks.
const (
	EnvConfig   = "GPUMUX_CONFIG"   // node config file (default /etc/gpumux/node.hcl)
	EnvStateDir = entry.EnvStateDir // overrides the config's state_dir
	EnvRunc     = entry.EnvRunc     // runc binary (default "runc")
)

// The OCI hooks gpumux-runtime adds, run as `gpumux-runtime hook <name>`.
const (
	HookPoststop = entry.HookPoststop // release the shares
	// HookUpdateLdcache (`hook update-ldcache [--link LINK=TARGET]...
	// DIR...`, a createContainer hook) links the driver's programs onto
	// PATH and adds the driver's library directories to the container's
	// linker cache. The node core's edits of local shares carry it, for
	// gpumux-runtime and CDI specs alike.
	HookUpdateLdcache = node.HookUpdateLdcache
)

// HookUsage is the command line of the hooks.
var HookUsage = fmt.Sprintf("gpumux-runtime hook %s|%s", HookPoststop, entry.UpdateLdcacheUsage)

// Hook runs one of gpumux's OCI hooks with its arguments; the container's
// state is on stdin.
func (r *Runtime) Hook(ctx context.Context, name string, args []string, stdin io.Reader) error {
	st, err := entry.DecodeState(stdin)
	if err != nil {
		return fmt.Errorf("hook %s: %w", name, err)
	}
	if name == HookUpdateLdcache {
		// Needs no node config: only the container's root. gpumux-runtime
		// runs it itself; this serves specs that name the core.
		if err := entry.UpdateLdcache(ctx, st, args); err != nil {
			return fmt.Errorf("container %s: %w", st.ID, err)
		}
		return nil
	}
	if name != HookPoststop {
		return fmt.Errorf("unknown hook %q; usage: %s", name, HookUsage)
	}
	if len(args) > 0 {
		return fmt.Errorf("hook %s takes no arguments (got %q); usage: %s", name, args, HookUsage)
	}
	if err := r.loadConfig(); err != nil {
		return err
	}
	_, err = r.store().Release(ctx, st.ID)
	return err
}
