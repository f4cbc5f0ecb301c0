package ocicreate

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/gpumux/gpumux/internal/ociruntime"
	"github.com/gpumux/gpumux/node"
	"github.com/gpumux/gpumux/node/lease"
	"github.com/gpumux/gpumux/share"
)

// Node is what a create needs of the node core.
type Node interface {
	Lease(ctx context.Context, c node.Claim, alive func(lease.Record) (bool, error), warn io.Writer, record ...lease.AcquireOption) (node.Grant, error)
	ReservationDriverMounts() ([]share.Mount, error)
}

var _ Node = (*node.Node)(nil)

// Bundle is a create's bundle, read: its spec and what the spec asks for.
type Bundle struct {
	path     string // config.json
	spec     specs.Spec
	req      share.Request
	reserved []string
	asked    bool
}

// ReadBundle reads the bundle's config.json and the request in it, within
// limits; a request that is malformed or beyond the limits is an error.
func ReadBundle(dir string, limits node.Limits) (*Bundle, error) {
	b := &Bundle{path: filepath.Join(dir, "config.json")}
	raw, err := os.ReadFile(b.path)
	if err != nil {
		return nil, fmt.Errorf("reading the container spec: %w", err)
	}
	if err := json.Unmarshal(raw, &b.spec); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", b.path, err)
	}
	b.req, b.reserved, b.asked, err = node.ParseRequest(b.spec.Annotations, b.env(), limits)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// Asks says whether the container asks for shares.
func (b *Bundle) Asks() bool { return b.asked }

func (b *Bundle) env() []string {
	if b.spec.Process == nil {
		return nil
	}
	return b.spec.Process.Env
}

// Create is what leasing a bundle's shares needs besides the node.
type Create struct {
	ID       string // the container ID
	RuncRoot string // runc --root, recorded with the lease ("" for runc's default)
	StateDir string // the node's state directory (its lease store)
	// HookBinary is the program the poststop hook runs:
	// gpumux-runtime-hook (the core's creates), or gpumux-runtime, which
	// asks the agent (the agent's); HookEnv is added to that hook's
	// environment.
	HookBinary string
	HookEnv    []string
	// NoPoststop leaves the poststop hook out: the caller gives the
	// shares back itself when runc deletes the container (the agent). The
	// bundle gets node.LeasedMarker instead, for node.Repair.
	NoPoststop bool
	// Alive tells whether a lease's container still exists, for the stale
	// leases reclaimed before the lease (node.RuncAlive).
	Alive func(lease.Record) (bool, error)
	// Warn receives what the node core reports on the way (nil: dropped).
	Warn io.Writer
	// Record is added to the lease's record (lease.WithOwner).
	Record []lease.AcquireOption
	// Logger gets what is worth a debug line (nil: none).
	Logger hclog.Logger
	// Peer is the asking process, in the mount namespace runc will run in
	// (0: this process is).
	Peer int
}

// Prepare leases the bundle's shares on n and writes their edits, and the
// poststop hook that gives them back, into its config.json. Anything that
// fails after the lease gives it back.
func (b *Bundle) Prepare(ctx context.Context, n Node, c Create) (err error) {
	warn := c.Warn
	if warn == nil {
		warn = io.Discard
	}
	env := b.env()
	claim := node.Claim{Container: c.ID, Request: b.req, Reserved: b.reserved, Token: node.EnvValue(env, share.EnvReservation), Env: env}
	record := append([]lease.AcquireOption{lease.WithBundle(filepath.Dir(b.path)), lease.WithRuncRoot(c.RuncRoot)}, c.Record...)
	g, err := n.Lease(ctx, claim, c.Alive, warn, record...)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			node.LeasesIn(c.StateDir).Release(context.WithoutCancel(ctx), c.ID)
		}
	}()
	spec := &b.spec
	if len(b.reserved) > 0 && slices.ContainsFunc(g.Shares, func(s share.Share) bool { return s.Remote == nil }) {
		if err := dropReservationMounts(spec, n); err != nil {
			return err
		}
	}
	dropEnv(spec, g.Edits.Env)
	if err := (&cdi.ContainerEdits{ContainerEdits: node.CDIEdits(g.Edits)}).Apply(spec); err != nil {
		return fmt.Errorf("applying the container edits of %v: %w", share.IDs(g.Shares), err)
	}
	// Where it cannot, the hook does it in the container (cacheAtCreate
	// says why); that is no failure of the create.
	if err := cacheAtCreate(spec, filepath.Dir(b.path), c.Peer); err != nil && c.Logger != nil {
		c.Logger.Debug("left update-ldcache to the container's hook", "container", c.ID, "reason", err)
	}
	if c.NoPoststop {
		marker := filepath.Join(filepath.Dir(b.path), node.LeasedMarker)
		if err := os.WriteFile(marker, []byte(c.StateDir), fileMode); err != nil {
			return fmt.Errorf("marking the bundle leased: %w", err)
		}
	} else {
		addPoststop(spec, c)
	}
	return writeSpec(b.path, spec)
}

// addPoststop makes runc call gpumux back: poststop (c.HookBinary: the
// agent, or gpumux-runtime-hook, which opens only the lease store)
// releases the shares. Nothing is checked
// again as runc creates the container: Prepare checked every share a
// moment before (an MPS daemon that answers, a MIG instance that exists),
// and a createRuntime hook, run within the same runc create, would start
// the whole node core again to see the same (~10 ms; docs/runtime.md).
func addPoststop(spec *specs.Spec, c Create) {
	if spec.Hooks == nil {
		spec.Hooks = &specs.Hooks{}
	}
	env := append([]string{ociruntime.EnvStateDir + "=" + c.StateDir}, c.HookEnv...)
	timeout := 30
	spec.Hooks.Poststop = append(spec.Hooks.Poststop, specs.Hook{
		Path: c.HookBinary, Args: []string{filepath.Base(c.HookBinary), "hook", ociruntime.HookPoststop}, Env: env, Timeout: &timeout,
	})
}

// fileMode is the mode a spec file is rewritten with when it had none.
const fileMode os.FileMode = 0o644

func writeSpec(path string, spec *specs.Spec) error {
	b, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	mode := fileMode
	if fi, err := os.Stat(path); err == nil {
		mode = fi.Mode().Perm()
	}
	tmp := path + ".gpumux.tmp"
	if err := os.WriteFile(tmp, b, mode); err != nil {
		return fmt.Errorf("writing the container spec: %w", err)
	}
	return os.Rename(tmp, path)
}

// dropReservationMounts removes from a Nomad docker task's spec the
// mounts of the driver's files that its reservation gave, each file at its
// host path (node.ReservationDriverMounts): the staged tree the edits give
// holds the same files in one mount. Only mounts that are exactly those
// (source and destination) go.
func dropReservationMounts(spec *specs.Spec, n Node) error {
	dup, err := n.ReservationDriverMounts()
	if err != nil {
		return err
	}
	spec.Mounts = slices.DeleteFunc(spec.Mounts, func(m specs.Mount) bool {
		return slices.ContainsFunc(dup, func(d share.Mount) bool { return d.ContainerPath == m.Destination && d.HostPath == m.Source })
	})
	return nil
}

// dropEnv removes the variables in set from the spec's process env.
// CDI's env edits append a variable the spec already has rather than
// replace it, and a program's getenv finds the first: the image's
// NVIDIA_VISIBLE_DEVICES=all or LD_LIBRARY_PATH would win over the share's.
func dropEnv(spec *specs.Spec, set map[string]string) {
	if spec.Process == nil {
		return
	}
	spec.Process.Env = slices.DeleteFunc(spec.Process.Env, func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		_, drop := set[k]
		return drop
	})
}

// LogError appends msg to runc's JSON log at path (runc --log) as an
// error line: containerd's shim shows the runtime's last logged error,
// not its stderr, when a create fails. A path of "" logs nothing.
func LogError(path, msg string) {
	if path == "" {
		return
	}
	if f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
		json.NewEncoder(f).Encode(map[string]string{"level": "error", "msg": msg})
		f.Close()
	}
}
