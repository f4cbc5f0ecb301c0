package runtimehook

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"

	"github.com/gpumux/gpumux/node"
	"github.com/gpumux/gpumux/runtimehook/entry"
	"github.com/gpumux/gpumux/share"
)

// Environment of gpumux-runtime and its hooks.
const (
	EnvConfig   = "GPUMUX_CONFIG"   // node config file (default /etc/gpumux/node.hcl)
	EnvStateDir = entry.EnvStateDir // overrides the config's state_dir
	EnvRunc     = entry.EnvRunc     // runc binary (default "runc")
)

// The OCI hooks gpumux-runtime adds, run as `gpumux-runtime hook <name>`.
const (
	HookCreateRuntime = "create-runtime"   // the shares are still usable
	HookPoststop      = entry.HookPoststop // release the shares
	// HookUpdateLdcache (`hook update-ldcache [--link LINK=TARGET]...
	// DIR...`, a createContainer hook) links the driver's programs onto
	// PATH and adds the driver's library directories to the container's
	// linker cache. The node core's edits of local shares carry it, for
	// gpumux-runtime and CDI specs alike.
	HookUpdateLdcache = node.HookUpdateLdcache
)

// HookUsage is the command line of the hooks.
var HookUsage = fmt.Sprintf("gpumux-runtime hook %s|%s|%s", HookCreateRuntime, HookPoststop, entry.UpdateLdcacheUsage)

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
	if name != HookPoststop && name != HookCreateRuntime {
		return fmt.Errorf("unknown hook %q; usage: %s", name, HookUsage)
	}
	if len(args) > 0 {
		return fmt.Errorf("hook %s takes no arguments (got %q); usage: %s", name, args, HookUsage)
	}
	if err := r.loadConfig(); err != nil {
		return err
	}
	switch name {
	case HookPoststop:
		_, err := r.store().Release(ctx, st.ID)
		return err
	default: // HookCreateRuntime
		return r.checkUsable(ctx, st.ID)
	}
}

// checkUsable fails the start of a container whose shares went away since
// they were leased (a MIG instance destroyed) or cannot be used now (an MPS
// daemon down: an MPS client that cannot reach its daemon would silently
// run on the whole GPU without limits).
func (r *Runtime) checkUsable(ctx context.Context, container string) error {
	ids, err := r.store().Held(ctx, container)
	if err != nil {
		return err
	}
	// Remote shares were seen on their server when they were leased, a
	// moment ago; a server gone since makes the program's first CUDA call
	// fail with the reason.
	ids = slices.DeleteFunc(ids, share.IsRemoteID)
	if len(ids) == 0 {
		return nil
	}
	sort.Strings(ids)
	n, err := r.openNode()
	if err != nil {
		return err
	}
	defer n.Close()
	catalog, err := n.Catalog(ctx, node.Local())
	if err != nil {
		return err
	}
	shares, err := catalog.Lookup(ids...)
	if err != nil {
		return fmt.Errorf("container %s: %w", container, err)
	}
	for _, s := range shares {
		if ok, why := n.Health(s); !ok {
			return fmt.Errorf("container %s: share %s cannot be used now: %s", container, s.ID, why)
		}
	}
	return nil
}
