package runtimehook

import (
	"context"
	"fmt"
	"io"

	"github.com/gpumux/gpumux/internal/ociruntime"
	"github.com/gpumux/gpumux/runtimehook/entry"
)

// EnvConfig is gpumux-runtime's node config file (default
// /etc/gpumux/node.hcl). Its other variables and hooks' names are package
// ociruntime's.
const EnvConfig = "GPUMUX_CONFIG"

// HookUsage is the command line of the hooks.
var HookUsage = fmt.Sprintf("gpumux-runtime hook %s|%s", ociruntime.HookPoststop, entry.UpdateLdcacheUsage)

// Hook runs one of gpumux's OCI hooks with its arguments; the container's
// state is on stdin.
func (r *Runtime) Hook(ctx context.Context, name string, args []string, stdin io.Reader) error {
	st, err := entry.DecodeState(stdin)
	if err != nil {
		return fmt.Errorf("hook %s: %w", name, err)
	}
	if name == ociruntime.HookUpdateLdcache {
		// Needs no node config: only the container's root. gpumux-runtime
		// runs it itself; this serves specs that name the core.
		if err := entry.UpdateLdcache(ctx, st, args); err != nil {
			return fmt.Errorf("container %s: %w", st.ID, err)
		}
		return nil
	}
	if name != ociruntime.HookPoststop {
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
