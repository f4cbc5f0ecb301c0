package ctrd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	containerd "github.com/containerd/containerd"
	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/cio"
	"github.com/containerd/containerd/oci"

	"github.com/gpumux/gpumux/e2e/internal/hostcheck"
	"github.com/gpumux/gpumux/internal/syncbuf"
)

// ProbePath is where the probe program sits in the rootfs.
const ProbePath = "/probe"

var (
	probeOnce sync.Once
	probeBin  []byte
	probeErr  error
)

// ProbeBinary returns the static probe program (e2e/probe): the file
// $GPUMUX_PROBE_BIN when set (for test binaries run where there is no Go
// toolchain), else built once per test binary with `CGO_ENABLED=0 go
// build` from the module the tests run in.
func ProbeBinary() ([]byte, error) {
	probeOnce.Do(func() { probeBin, probeErr = buildProbe() })
	return probeBin, probeErr
}

func buildProbe() ([]byte, error) {
	if p := os.Getenv("GPUMUX_PROBE_BIN"); p != "" {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("GPUMUX_PROBE_BIN: %w", err)
		}
		return b, nil
	}
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = "/usr/local/go/bin/go"
	}
	tmp, err := os.MkdirTemp("", "gmx-probe")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	out := filepath.Join(tmp, "probe")
	cmd := exec.Command(goBin, "build", "-trimpath", "-o", out, "./e2e/probe")
	cmd.Dir = root
	cmd.Env = append(hostcheck.FilterEnv(os.Environ(), "CGO_ENABLED", "GOOS", "GOARCH", "GOFLAGS"), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building the probe (%s in %s): %w\n%s", strings.Join(cmd.Args, " "), root, err, b)
	}
	return os.ReadFile(out)
}

// moduleRoot finds go.mod walking up from the working directory.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod above %s (set GPUMUX_PROBE_BIN to a built e2e/probe)", dir)
		}
	}
}

// MakeRootfs fills dir (created if missing) with a minimal rootfs: the
// probe program as /probe and empty /dev, /proc, /sys, /tmp, /etc and /run.
func MakeRootfs(dir string) error {
	bin, err := ProbeBinary()
	if err != nil {
		return err
	}
	for _, sub := range []string{"dev", "proc", "sys", "tmp", "etc", "run"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return err
		}
	}
	if err := os.Chmod(filepath.Join(dir, "tmp"), 0o1777); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, strings.TrimPrefix(ProbePath, "/")), bin, 0o755)
}

// Rootfs returns a new minimal rootfs (see MakeRootfs) under t.TempDir().
// The probe is built once per test binary. Runs without RunOpts.Rootfs use
// the daemon's own rootfs (Daemon.Rootfs), which lives in its Dir.
func Rootfs(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "rootfs")
	if err := MakeRootfs(dir); err != nil {
		t.Fatalf("rootfs: %v", err)
	}
	return dir
}

// Rootfs returns the daemon's default rootfs, Dir/rootfs, made on first
// use. Containers share it (they only read it).
func (d *Daemon) Rootfs() (string, error) {
	d.rootfsOnce.Do(func() {
		d.rootfs = filepath.Join(d.Dir, "rootfs")
		d.rootfsErr = MakeRootfs(d.rootfs)
	})
	return d.rootfs, d.rootfsErr
}

// RunOpts describes a container.
type RunOpts struct {
	// BinaryName is the OCI runtime the runc shim runs instead of runc
	// (containerd's runc option BinaryName), e.g. the path of
	// gpumux-runtime or of a wrapper script (absolute, or found on the
	// daemon's PATH). Empty: runc.
	BinaryName string
	// Runtime is the containerd runtime (shim); default DefaultRuntime.
	Runtime string
	// RuntimeOptions replaces the runtime options the harness passes
	// (&options.Options{BinaryName: BinaryName, Root: d.RuncRoot}).
	RuntimeOptions any
	// Rootfs is the container's root filesystem; default d.Rootfs().
	Rootfs string
	// Args is the process; default ["/probe"].
	Args []string
	// Env adds KEY=VALUE entries to the process environment (containerd's
	// default is PATH only).
	Env []string
	// Annotations are the OCI spec annotations.
	Annotations map[string]string
	// SpecOpts are applied after the harness's own (rootfs, args, env,
	// annotations).
	SpecOpts []oci.SpecOpts
}

// Result is what a container did.
type Result struct {
	// ExitCode is the exit status of the container's process (128+signal
	// when killed, e.g. 137 after Delete killed it).
	ExitCode int
	// Stdout and Stderr are what the process wrote.
	Stdout, Stderr string
}

// container is what the harness tracks of a container it created.
type container struct {
	c    containerd.Container
	task containerd.Task
	// exited is closed once the process exited; exit is then its status.
	exited chan struct{}
	exit   containerd.ExitStatus
	stdout *syncbuf.Buffer
	stderr *syncbuf.Buffer
	// taskDeleted: a Delete got as far as deleting the task.
	taskDeleted bool
	exitCode    int
}

// Run runs a container to its end: Create, Start, Wait, Delete. A failed
// create or start returns an error carrying containerd's and the runtime's
// error text (and the container is deleted); a process that exits non-zero
// is not an error (see Result.ExitCode).
func (d *Daemon) Run(ctx context.Context, id string, opts RunOpts) (Result, error) {
	if err := d.Create(ctx, id, opts); err != nil {
		return Result{}, err
	}
	if err := d.Start(ctx, id); err != nil {
		return Result{}, err
	}
	if _, err := d.Wait(ctx, id); err != nil {
		res, derr := d.Delete(ctx, id)
		return res, errors.Join(err, derr)
	}
	return d.Delete(ctx, id)
}

// Create creates the container (from opts.Rootfs, without an image) and its
// task: the runtime's `create` has run when Create returns, the process is
// not started. On error nothing is left (the container record is deleted).
func (d *Daemon) Create(ctx context.Context, id string, opts RunOpts) error {
	ctx = d.Context(ctx)
	var err error
	d.mu.Lock()
	if _, ok := d.containers[id]; ok {
		d.mu.Unlock()
		return fmt.Errorf("container %s: already created by this harness", id)
	}
	d.ids[id] = true
	d.mu.Unlock()

	rootfs := opts.Rootfs
	if rootfs == "" {
		if rootfs, err = d.Rootfs(); err != nil {
			return fmt.Errorf("rootfs: %w", err)
		}
	}
	args := opts.Args
	if len(args) == 0 {
		args = []string{ProbePath}
	}
	specOpts := []oci.SpecOpts{
		oci.WithRootFSPath(rootfs),
		oci.WithProcessArgs(args...),
	}
	if len(opts.Env) > 0 {
		specOpts = append(specOpts, oci.WithEnv(opts.Env))
	}
	if len(opts.Annotations) > 0 {
		specOpts = append(specOpts, oci.WithAnnotations(opts.Annotations))
	}
	specOpts = append(specOpts, opts.SpecOpts...)
	runtime := opts.Runtime
	if runtime == "" {
		runtime = DefaultRuntime
	}
	rtOpts := opts.RuntimeOptions
	if rtOpts == nil {
		rtOpts = &options.Options{BinaryName: opts.BinaryName, Root: d.RuncRoot}
	}

	c, err := d.Client.NewContainer(ctx, id,
		containerd.WithRuntime(runtime, rtOpts),
		containerd.WithNewSpec(specOpts...))
	if err != nil {
		return fmt.Errorf("create container %s: %w", id, err)
	}
	ct := &container{c: c, stdout: &syncbuf.Buffer{}, stderr: &syncbuf.Buffer{}}
	if err := os.MkdirAll(d.FIFODir, 0o700); err != nil {
		return errors.Join(fmt.Errorf("fifo dir: %w", err), d.deleteContainer(ctx, c))
	}
	ct.task, err = c.NewTask(ctx, cio.NewCreator(
		cio.WithStreams(nil, ct.stdout, ct.stderr),
		cio.WithFIFODir(d.FIFODir)))
	if err != nil {
		return errors.Join(fmt.Errorf("create task %s: %w", id, err), d.deleteContainer(ctx, c))
	}
	// Wait before Start so the exit cannot be missed; not bound to ctx,
	// which may end before the container does.
	exitCh, err := ct.task.Wait(context.WithoutCancel(ctx))
	if err != nil {
		_, derr := ct.task.Delete(ctx, containerd.WithProcessKill)
		return errors.Join(fmt.Errorf("wait task %s: %w", id, err), derr, d.deleteContainer(ctx, c))
	}
	ct.exited = make(chan struct{})
	go func() {
		ct.exit = <-exitCh
		close(ct.exited)
	}()
	d.mu.Lock()
	d.containers[id] = ct
	d.mu.Unlock()
	return nil
}

func (d *Daemon) deleteContainer(ctx context.Context, c containerd.Container) error {
	// Use a fresh context: ctx may be what ended.
	dctx, cancel := context.WithTimeout(d.Context(context.WithoutCancel(ctx)), 30*time.Second)
	defer cancel()
	if err := c.Delete(dctx); err != nil {
		return fmt.Errorf("delete container %s: %w", c.ID(), err)
	}
	return nil
}

func (d *Daemon) get(id string) (*container, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	ct, ok := d.containers[id]
	if !ok {
		return nil, fmt.Errorf("container %s: not created by this harness (or deleted)", id)
	}
	return ct, nil
}

// Start starts the process of a created container (the runtime's `start`).
// On error the container is deleted.
func (d *Daemon) Start(ctx context.Context, id string) error {
	ct, err := d.get(id)
	if err != nil {
		return err
	}
	if err := ct.task.Start(d.Context(ctx)); err != nil {
		_, derr := d.Delete(context.WithoutCancel(ctx), id)
		return errors.Join(fmt.Errorf("start task %s: %w", id, err), derr)
	}
	return nil
}

// Wait waits until the container's process exits and returns its exit
// code. The output is complete only after Delete.
func (d *Daemon) Wait(ctx context.Context, id string) (int, error) {
	ct, err := d.get(id)
	if err != nil {
		return -1, err
	}
	select {
	case <-ct.exited:
		code, _, err := ct.exit.Result()
		if err != nil {
			return -1, fmt.Errorf("wait task %s: %w", id, err)
		}
		return int(code), nil
	case <-ctx.Done():
		return -1, fmt.Errorf("wait task %s: %w", id, ctx.Err())
	}
}

// Delete kills the container's process if it has not exited (SIGKILL),
// deletes the task (the runtime's `delete`) and the container, and returns
// the exit code and the complete output.
func (d *Daemon) Delete(ctx context.Context, id string) (Result, error) {
	ct, err := d.get(id)
	if err != nil {
		return Result{}, err
	}
	ctx = d.Context(ctx)
	var errs []error
	if !ct.taskDeleted {
		ct.exitCode = -1
		var delOpts []containerd.ProcessDeleteOpts
		// Kill only what has not exited: the runtime would see a needless
		// `kill` otherwise.
		if s, err := ct.task.Status(ctx); err != nil || s.Status != containerd.Stopped {
			delOpts = append(delOpts, containerd.WithProcessKill)
		}
		st, err := ct.task.Delete(ctx, delOpts...)
		if err != nil {
			errs = append(errs, fmt.Errorf("delete task %s: %w", id, err))
		} else {
			ct.taskDeleted = true
			ct.exitCode = int(st.ExitCode())
		}
	}
	res := Result{ExitCode: ct.exitCode, Stdout: ct.stdout.String(), Stderr: ct.stderr.String()}
	if err := d.deleteContainer(ctx, ct.c); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		d.mu.Lock()
		delete(d.containers, id)
		d.mu.Unlock()
	}
	return res, errors.Join(errs...)
}

// Signal sends sig to the container's process.
func (d *Daemon) Signal(ctx context.Context, id string, sig syscall.Signal) error {
	ct, err := d.get(id)
	if err != nil {
		return err
	}
	return ct.task.Kill(d.Context(ctx), sig)
}

// Pid returns the host PID of the container's process (of `runc init`
// before Start).
func (d *Daemon) Pid(id string) (uint32, error) {
	ct, err := d.get(id)
	if err != nil {
		return 0, err
	}
	return ct.task.Pid(), nil
}
