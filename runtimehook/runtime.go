package runtimehook

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/gpumux/gpumux/internal/ociruntime"
	"github.com/gpumux/gpumux/node"
	"github.com/gpumux/gpumux/nodeconfig"
	"github.com/gpumux/gpumux/ocicreate"
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
	inv := ociruntime.ParseInvocation(args)
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
// config.json (package ocicreate). It reports whether it leased anything; a
// container that asks for nothing is not touched at all.
func (r *Runtime) prepare(ctx context.Context, inv ociruntime.Invocation) (leased bool, err error) {
	b, err := ocicreate.ReadBundle(inv.Bundle, r.limits)
	if err != nil || !b.Asks() {
		return false, err
	}
	n, err := r.openNode()
	if err != nil {
		return false, err
	}
	defer n.Close()
	var hookEnv []string
	if p := os.Getenv(EnvConfig); p != "" {
		hookEnv = []string{EnvConfig + "=" + p}
	}
	err = b.Prepare(ctx, n, ocicreate.Create{
		ID: inv.ID, RuncRoot: inv.Root, StateDir: r.cfg.StateDir,
		HookBinary: r.hookPath(), HookEnv: hookEnv,
		Alive: node.RuncAlive(ctx, r.runc, inv.Root), Warn: r.stderr,
	})
	return err == nil, err
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
	return filepath.Join(filepath.Dir(r.self), ociruntime.HookBinary)
}

// logger reports what the node core logs (a remote server that cannot be
// probed, a GPU not offered) at warning level and above to stderr.
func (r *Runtime) logger() hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: "gpumux-runtime", Output: r.stderr, Level: hclog.Warn})
}

// fail reports err where the caller sees it: stderr, and runc's JSON log
// (containerd's shim reads the last error from it).
func (r *Runtime) fail(inv ociruntime.Invocation, err error) {
	msg := "gpumux-runtime: " + err.Error()
	fmt.Fprintln(r.stderr, msg)
	ocicreate.LogError(inv.Flag("--log"), msg)
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
