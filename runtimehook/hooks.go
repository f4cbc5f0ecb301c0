package runtimehook

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpumux/gpumux/node"
	"github.com/gpumux/gpumux/share"
)

// Environment of gpumux-runtime and its hooks.
const (
	EnvConfig   = "GPUMUX_CONFIG"    // node config file (default /etc/gpumux/node.hcl)
	EnvStateDir = "GPUMUX_STATE_DIR" // overrides the config's state_dir
	EnvRunc     = "GPUMUX_RUNC"      // runc binary (default "runc")
)

// The OCI hooks gpumux-runtime adds, run as `gpumux-runtime hook <name>`.
const (
	HookCreateRuntime = "create-runtime" // the shares are still usable
	HookPoststop      = "poststop"       // release the shares
	// HookUpdateLdcache (`hook update-ldcache DIR...`, a createContainer
	// hook) adds the driver's library directories to the container's
	// linker cache. The node core's edits of local shares carry it, for
	// gpumux-runtime and CDI specs alike.
	HookUpdateLdcache = node.HookUpdateLdcache
)

// HookUsage is the command line of the hooks.
var HookUsage = fmt.Sprintf("gpumux-runtime hook %s|%s|%s DIR...", HookCreateRuntime, HookPoststop, HookUpdateLdcache)

// Hook runs one of gpumux's OCI hooks with its arguments; the container's
// state is on stdin.
func (r *Runtime) Hook(ctx context.Context, name string, args []string, stdin io.Reader) error {
	var st specs.State
	if err := json.NewDecoder(io.LimitReader(stdin, 1<<20)).Decode(&st); err != nil {
		return fmt.Errorf("hook %s: decoding the container state: %w", name, err)
	}
	if st.ID == "" {
		return fmt.Errorf("hook %s: the container state has no id", name)
	}
	if name == HookUpdateLdcache {
		// Needs no node config: only the container's root.
		if err := updateLdcache(ctx, st, args); err != nil {
			return fmt.Errorf("container %s: %w", st.ID, err)
		}
		return nil
	}
	if len(args) > 0 {
		return fmt.Errorf("hook %s takes no arguments (got %q); usage: %s", name, args, HookUsage)
	}
	if err := r.loadConfig(); err != nil {
		return err
	}
	switch name {
	case HookPoststop:
		_, err := r.store().release(ctx, st.ID)
		return err
	case HookCreateRuntime:
		return r.checkUsable(ctx, st.ID)
	default:
		return fmt.Errorf("unknown hook %q; usage: %s", name, HookUsage)
	}
}

// checkUsable fails the start of a container whose shares went away since
// they were leased (a MIG instance destroyed) or cannot be used now (an MPS
// daemon down: an MPS client that cannot reach its daemon would silently
// run on the whole GPU without limits).
func (r *Runtime) checkUsable(ctx context.Context, container string) error {
	ids, err := r.store().held(ctx, container)
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
