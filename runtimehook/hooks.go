package runtimehook

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpumux/gpumux/mps"
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
)

// Hook runs one of gpumux's OCI hooks; the container's state is on stdin.
func (r *Runtime) Hook(ctx context.Context, name string, stdin io.Reader) error {
	var st specs.State
	if err := json.NewDecoder(io.LimitReader(stdin, 1<<20)).Decode(&st); err != nil {
		return fmt.Errorf("hook %s: decoding the container state: %w", name, err)
	}
	if st.ID == "" {
		return fmt.Errorf("hook %s: the container state has no id", name)
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
		return fmt.Errorf("unknown hook %q (valid: %s, %s)", name, HookCreateRuntime, HookPoststop)
	}
}

// checkUsable fails the start of a container whose shares went away since
// they were leased (a MIG instance destroyed) or whose MPS daemon is down:
// an MPS client that cannot reach its daemon would silently run on the whole
// GPU without limits.
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
	host, err := r.openHost()
	if err != nil {
		return err
	}
	defer host.Close()
	catalog, err := r.catalog(ctx, host)
	if err != nil {
		return err
	}
	shares, err := catalog.Lookup(ids...)
	if err != nil {
		return fmt.Errorf("container %s: %w", container, err)
	}
	m := mps.NewManager(r.cfg.StateDir)
	for _, s := range shares {
		if s.Mechanism != share.MPS {
			continue
		}
		if !daemonAlive(m.PipeDir(s.Parent())) {
			return fmt.Errorf("container %s: share %s: no MPS control daemon serves %s (is the gpumux plugin running on this node?)", container, s.ID, s.Parent())
		}
	}
	return nil
}

// daemonAlive reports whether the MPS control daemon whose pid file is in
// pipeDir is running.
func daemonAlive(pipeDir string) bool {
	b, err := os.ReadFile(filepath.Join(pipeDir, "nvidia-cuda-mps-control.pid"))
	if err != nil {
		return false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return err == nil && pid > 0 && syscall.Kill(pid, 0) == nil
}
