package runtimehook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/hashicorp/go-hclog"

	"github.com/gpumux/gpumux/node"
	"github.com/gpumux/gpumux/node/lease"
	"github.com/gpumux/gpumux/nodeconfig"
	"github.com/gpumux/gpumux/runtimehook/entry"
	"github.com/gpumux/gpumux/share"
)

// Runtime is gpumux-runtime: a runc wrapper that, on `create`, leases the
// shares a container asks for and writes their edits into its config.json.
type Runtime struct {
	load   func() (*nodeconfig.Config, error) // the node config, read when needed
	cfg    *nodeconfig.Config
	runc   string // runc binary
	self   string // gpumux-runtime-core, beside which gpumux-runtime-hook is
	limits node.Limits
	open   node.OpenFunc // nil: the node core's default
	stderr io.Writer
}

// Option configures a Runtime.
type Option func(*Runtime)

// WithRunc sets the runc binary (default "runc" on PATH).
func WithRunc(path string) Option { return func(r *Runtime) { r.runc = path } }

// WithSelf sets where gpumux-runtime-core is (default: this executable):
// the poststop hook and the update-ldcache hook of the node core's edits
// call gpumux-runtime-hook in the same directory, which runs them without
// the node core.
func WithSelf(path string) Option { return func(r *Runtime) { r.self = path } }

// WithLimits bounds what one container may ask for.
func WithLimits(l node.Limits) Option { return func(r *Runtime) { r.limits = l } }

// WithStderr sets where the runtime reports errors (default os.Stderr).
func WithStderr(w io.Writer) Option { return func(r *Runtime) { r.stderr = w } }

// New returns a runtime that reads the node config with load when a
// container asks for GPUs (containers that do not never pay for it).
func New(load func() (*nodeconfig.Config, error), opts ...Option) *Runtime {
	r := &Runtime{load: load, runc: "runc", limits: node.DefaultLimits, stderr: os.Stderr}
	if self, err := os.Executable(); err == nil {
		r.self = self
	}
	for _, o := range opts {
		o(r)
	}
	return r
}

// Run handles one runc command line and returns the exit code: `create` is
// prepared and then handed to runc; every other subcommand goes to runc
// untouched. gpumux-runtime (package entry) sends only the create of a
// container that asks for GPUs here.
func (r *Runtime) Run(ctx context.Context, args []string) int {
	inv := entry.ParseInvocation(args)
	if inv.Subcommand != "create" {
		return r.execRunc(args)
	}
	leased, err := r.prepare(ctx, inv)
	if err != nil {
		r.fail(inv, err)
		return 1
	}
	code := r.runRunc(args)
	if code != 0 && leased {
		// A failed start gives its shares back.
		if _, err := r.store().Release(ctx, inv.ID); err != nil {
			fmt.Fprintf(r.stderr, "gpumux-runtime: releasing the shares of %s: %v\n", inv.ID, err)
		}
	}
	return code
}

// prepare leases the container's shares and writes their edits into its
// config.json. It reports whether it leased anything; a container that asks
// for nothing is not touched at all.
func (r *Runtime) prepare(ctx context.Context, inv entry.Invocation) (leased bool, err error) {
	path := filepath.Join(inv.Bundle, "config.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		return false, fmt.Errorf("reading the container spec: %w", err)
	}
	var spec specs.Spec
	if err := json.Unmarshal(raw, &spec); err != nil {
		return false, fmt.Errorf("decoding %s: %w", path, err)
	}
	var env []string
	if spec.Process != nil {
		env = spec.Process.Env
	}
	req, reserved, asked, err := node.ParseRequest(spec.Annotations, env, r.limits)
	if err != nil || !asked {
		return false, err
	}
	n, err := r.openNode()
	if err != nil {
		return false, err
	}
	defer n.Close()
	claim := node.Claim{Container: inv.ID, Request: req, Reserved: reserved, Token: node.EnvValue(env, share.EnvReservation), Env: env}
	g, err := n.Lease(ctx, claim, node.RuncAlive(ctx, r.runc, inv.Root), r.stderr, lease.WithBundle(inv.Bundle), lease.WithRuncRoot(inv.Root))
	if err != nil {
		return false, err
	}
	defer func() {
		if err != nil {
			r.store().Release(context.WithoutCancel(ctx), inv.ID)
		}
	}()
	edits := g.Edits
	if len(reserved) > 0 && slices.ContainsFunc(g.Shares, func(s share.Share) bool { return s.Remote == nil }) {
		if err := dropReservationMounts(&spec, n); err != nil {
			return true, err
		}
	}
	dropEnv(&spec, edits.Env)
	if err := (&cdi.ContainerEdits{ContainerEdits: node.CDIEdits(edits)}).Apply(&spec); err != nil {
		return true, fmt.Errorf("applying the container edits of %v: %w", share.IDs(g.Shares), err)
	}
	r.addHooks(&spec)
	return true, writeSpec(path, &spec)
}

// store is the node's lease store.
func (r *Runtime) store() node.Leases { return node.LeasesIn(r.cfg.StateDir) }

func (r *Runtime) loadConfig() error {
	if r.cfg != nil {
		return nil
	}
	cfg, err := r.load()
	if err != nil {
		return err
	}
	r.cfg = cfg
	return nil
}

// openNode reads the node config and opens the node.
func (r *Runtime) openNode() (*node.Node, error) {
	if err := r.loadConfig(); err != nil {
		return nil, err
	}
	opts := []node.Option{node.WithIssuer("runtime"), node.WithLogger(r.logger()), node.WithHookBinary(r.hookPath())}
	if r.open != nil {
		opts = append(opts, node.WithOpen(r.open))
	}
	return node.Open(r.cfg, opts...)
}

// hookPath is gpumux-runtime-hook, installed beside the core (r.self).
func (r *Runtime) hookPath() string {
	return filepath.Join(filepath.Dir(r.self), entry.HookBinary)
}

// logger reports what the node core logs (a remote server that cannot be
// probed, a GPU not offered) at warning level and above to stderr.
func (r *Runtime) logger() hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: "gpumux-runtime", Output: r.stderr, Level: hclog.Warn})
}

// addHooks makes runc call gpumux back: poststop (gpumux-runtime-hook,
// which opens only the lease store) releases the shares. Nothing is checked
// again as runc creates the container: prepare checked every share a
// moment before (an MPS daemon that answers, a MIG instance that exists),
// and a createRuntime hook, run within the same runc create, would start
// the whole node core again to see the same (~10 ms; docs/runtime.md).
func (r *Runtime) addHooks(spec *specs.Spec) {
	if spec.Hooks == nil {
		spec.Hooks = &specs.Hooks{}
	}
	env := []string{EnvStateDir + "=" + r.cfg.StateDir}
	if p := os.Getenv(EnvConfig); p != "" {
		env = append(env, EnvConfig+"="+p)
	}
	timeout := 30
	hook := func(path, name string) specs.Hook {
		return specs.Hook{Path: path, Args: []string{filepath.Base(path), "hook", name}, Env: env, Timeout: &timeout}
	}
	spec.Hooks.Poststop = append(spec.Hooks.Poststop, hook(r.hookPath(), HookPoststop))
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

// fail reports err where the caller sees it: stderr, and runc's JSON log
// (containerd's shim reads the last error from it).
func (r *Runtime) fail(inv entry.Invocation, err error) {
	msg := "gpumux-runtime: " + err.Error()
	fmt.Fprintln(r.stderr, msg)
	if logPath := inv.Flag("--log"); logPath != "" {
		if f, ferr := os.OpenFile(logPath, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); ferr == nil {
			json.NewEncoder(f).Encode(map[string]string{"level": "error", "msg": msg})
			f.Close()
		}
	}
}

// execRunc replaces this process with runc.
func (r *Runtime) execRunc(args []string) int {
	path, err := exec.LookPath(r.runc)
	if err != nil {
		fmt.Fprintf(r.stderr, "gpumux-runtime: runc: %v\n", err)
		return 127
	}
	err = syscall.Exec(path, append([]string{path}, args...), os.Environ())
	fmt.Fprintf(r.stderr, "gpumux-runtime: exec %s: %v\n", path, err)
	return 127
}

// runRunc runs runc with the same arguments and standard streams, and returns
// its exit code.
func (r *Runtime) runRunc(args []string) int {
	cmd := exec.Command(r.runc, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		return exit.ExitCode()
	default:
		fmt.Fprintf(r.stderr, "gpumux-runtime: running %s: %v\n", r.runc, err)
		return 127
	}
}

// dropReservationMounts removes from a Nomad docker task's spec the
// mounts of the driver's files that its reservation gave, each file at its
// host path (node.ReservationDriverMounts): the staged tree the edits give
// holds the same files in one mount. Only mounts that are exactly those
// (source and destination) go.
func dropReservationMounts(spec *specs.Spec, n *node.Node) error {
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
