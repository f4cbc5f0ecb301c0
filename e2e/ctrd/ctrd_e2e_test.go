//go:build e2e

package ctrd

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	containerd "github.com/containerd/containerd"
	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/cio"
	"github.com/containerd/containerd/oci"
)

// writeScript writes an executable shell script into a temp dir.
func writeScript(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// loggingRunc writes a BinaryName wrapper that appends its arguments to a
// file, one call per line, and execs runc. It returns the wrapper and the
// file.
func loggingRunc(t *testing.T) (wrapper, calls string) {
	t.Helper()
	calls = filepath.Join(t.TempDir(), "calls")
	wrapper = writeScript(t, "runc-wrapper", `echo "$@" >> '`+calls+`'
exec runc "$@"
`)
	return wrapper, calls
}

// subcommands returns the runc subcommand of each logged call, in order.
func subcommands(t *testing.T, calls string) []string {
	t.Helper()
	b, err := os.ReadFile(calls)
	if err != nil {
		t.Fatalf("wrapper log: %v", err)
	}
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		// Global flags (--root X --log X --log-format json ...) come first.
		for i := 0; i < len(f); i++ {
			if strings.HasPrefix(f[i], "--") {
				if !strings.Contains(f[i], "=") && i+1 < len(f) && !strings.HasPrefix(f[i+1], "-") &&
					f[i] != "--systemd-cgroup" && f[i] != "--debug" {
					i++
				}
				continue
			}
			out = append(out, f[i])
			break
		}
	}
	return out
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// checkProbe checks what every container of these tests must see.
func checkProbe(t *testing.T, res Result) Probe {
	t.Helper()
	if res.ExitCode != 0 {
		t.Errorf("exit code %d, want 0; stderr:\n%s", res.ExitCode, res.Stderr)
	}
	if res.Stderr != "" {
		t.Errorf("stderr: %q", res.Stderr)
	}
	p := ParseProbe(res.Stdout)
	if len(p.Other) > 0 {
		t.Errorf("unparsed probe lines: %q", p.Other)
	}
	if got := p.Devices["/dev/null"]; got != "1:3" {
		t.Errorf("/dev/null = %q, want 1:3; devices %v", got, p.Devices)
	}
	for k := range p.Env {
		if strings.HasPrefix(k, "NVIDIA_") || strings.HasPrefix(k, "CUDA_") {
			t.Errorf("unexpected %s=%s", k, p.Env[k])
		}
	}
	for path := range p.Devices {
		if strings.HasPrefix(path, "/dev/nvidia") {
			t.Errorf("unexpected device %s", path)
		}
	}
	for _, m := range []string{"/", "/proc", "/dev", "/sys"} {
		if !p.HasMount(m) {
			t.Errorf("no mount %s in %q", m, p.Mounts)
		}
	}
	return p
}

// TestProbeWithRunc runs the probe with plain runc and checks its output:
// the environment it was given, runc's default devices, the default
// mounts, nothing of NVIDIA's.
func TestProbeWithRunc(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d := Start(ctx, t)

	start := time.Now()
	res, err := d.Run(ctx, "plain", RunOpts{
		Env:         []string{"GPUMUX_E2E_HELLO=hello world", "OTHER=x"},
		Annotations: map[string]string{"gpumux.io/test": "1"},
	})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	t.Logf("run took %v; probe output:\n%s", time.Since(start), res.Stdout)
	p := checkProbe(t, res)
	if got := p.Env["GPUMUX_E2E_HELLO"]; got != "hello world" {
		t.Errorf("GPUMUX_E2E_HELLO = %q, want %q (env %v)", got, "hello world", p.Env)
	}
	if _, ok := p.Env["OTHER"]; ok {
		t.Errorf("probe printed OTHER, which it should filter")
	}
	for _, dev := range []string{"/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"} {
		if _, ok := p.Devices[dev]; !ok {
			t.Errorf("runc default device %s missing: %v", dev, p.Devices)
		}
	}

	// A non-zero exit is a result, not an error.
	res, err = d.Run(ctx, "false", RunOpts{Args: []string{"/nonexistent-but-probe-is-absent"}})
	t.Logf("missing binary: %+v, %v", res, err)
	if err == nil {
		t.Errorf("running a missing binary: no error (result %+v)", res)
	}
}

// TestBinaryNameWrapper runs the probe through a BinaryName wrapper that
// only logs its arguments and execs runc: the shim runs the wrapper for
// every runtime call, and the container sees what it sees with runc.
func TestBinaryNameWrapper(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d := Start(ctx, t)
	wrapper, calls := loggingRunc(t)

	res, err := d.Run(ctx, "wrapped", RunOpts{BinaryName: wrapper, Env: []string{"GPUMUX_E2E_X=1"}})
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	p := checkProbe(t, res)
	if p.Env["GPUMUX_E2E_X"] != "1" {
		t.Errorf("env %v", p.Env)
	}
	b, _ := os.ReadFile(calls)
	t.Logf("wrapper calls:\n%s", b)
	subs := subcommands(t, calls)
	for _, want := range []string{"create", "start", "delete"} {
		if !contains(subs, want) {
			t.Errorf("wrapper never ran %q: %q", want, subs)
		}
	}
	if !strings.Contains(string(b), "--root "+filepath.Join(d.RuncRoot, Namespace)) {
		t.Errorf("runc --root is not inside the daemon's dir (%s):\n%s", d.RuncRoot, b)
	}
}

// TestFailingRuntime runs wrappers that fail `create`. containerd (1.6,
// runc shim v2) does not show the runtime's stderr: it runs the runtime
// with the container's stdio pipes, which are copied only once create
// succeeded. It shows the last "error" entry of the runtime's JSON log
// (--log <bundle>/log.json --log-format json), as runc writes it; without
// one, the runtime's path and exit status. The container is gone after the
// failed Create.
func TestFailingRuntime(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d := Start(ctx, t)

	stderrOnly := writeScript(t, "stderr-runtime", "echo gpumux-boom-on-stderr >&2\nexit 1\n")
	_, err := d.Run(ctx, "stderr-only", RunOpts{BinaryName: stderrOnly})
	if err == nil {
		t.Fatal("create with a failing runtime: no error")
	}
	t.Logf("stderr only: %v", err)
	for _, want := range []string{"OCI runtime create failed", stderrOnly, "exit status 1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not contain %q: %v", want, err)
		}
	}
	if strings.Contains(err.Error(), "gpumux-boom-on-stderr") {
		t.Logf("note: this containerd shows the runtime's stderr")
	}

	// What runc does: the error is the last level=error entry of --log.
	jsonLog := writeScript(t, "log-runtime", `log=
prev=
for a in "$@"; do
	[ "$prev" = --log ] && log=$a
	prev=$a
done
echo boom >&2
if [ -n "$log" ]; then
	printf '{"level":"error","msg":"gpumux: boom: no such share","time":"2025-01-01T00:00:00Z"}\n' >> "$log"
fi
exit 1
`)
	_, err = d.Run(ctx, "json-log", RunOpts{BinaryName: jsonLog})
	if err == nil {
		t.Fatal("create with a failing runtime: no error")
	}
	t.Logf("JSON log: %v", err)
	if !strings.Contains(err.Error(), "OCI runtime create failed: gpumux: boom: no such share") {
		t.Errorf("error does not carry the runtime's logged error: %v", err)
	}

	cs, err := d.Client.Containers(d.Context(ctx))
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 0 {
		t.Errorf("%d container(s) left after failed creates", len(cs))
	}
	if _, err := d.Run(ctx, "after-failures", RunOpts{}); err != nil {
		t.Errorf("daemon unusable after failed creates: %v", err)
	}
}

// TestCreateStartDelete drives the steps one at a time, as the lease tests
// do: a created container has a task in state Created and the runtime ran
// `create` but not `start`; deleting a created container runs `delete`.
func TestCreateStartDelete(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d := Start(ctx, t)
	wrapper, calls := loggingRunc(t)

	if err := d.Create(ctx, "c1", RunOpts{BinaryName: wrapper}); err != nil {
		t.Fatalf("create: %v", err)
	}
	if err := d.Create(ctx, "c1", RunOpts{BinaryName: wrapper}); err == nil {
		t.Errorf("second create of c1: no error")
	}
	task := loadTask(ctx, t, d, "c1")
	if st, err := task.Status(d.Context(ctx)); err != nil || st.Status != containerd.Created {
		t.Errorf("c1 status %v, %v; want created", st.Status, err)
	}
	if pid, err := d.Pid("c1"); err != nil || pid == 0 {
		t.Errorf("c1 pid %d, %v", pid, err)
	}
	if subs := subcommands(t, calls); !contains(subs, "create") || contains(subs, "start") {
		t.Errorf("after Create the runtime ran %q; want create, no start", subs)
	}
	if err := d.Start(ctx, "c1"); err != nil {
		t.Fatalf("start: %v", err)
	}
	code, err := d.Wait(ctx, "c1")
	if err != nil || code != 0 {
		t.Errorf("wait: %d, %v", code, err)
	}
	if code2, err := d.Wait(ctx, "c1"); err != nil || code2 != code {
		t.Errorf("second wait: %d, %v", code2, err)
	}
	res, err := d.Delete(ctx, "c1")
	if err != nil {
		t.Fatalf("delete: %v", err)
	}
	checkProbe(t, res)
	if _, err := d.Delete(ctx, "c1"); err == nil {
		t.Errorf("second delete of c1: no error")
	}

	// Created, never started, deleted: the runtime sees create and delete.
	if err := os.Remove(calls); err != nil {
		t.Fatal(err)
	}
	if err := d.Create(ctx, "c2", RunOpts{BinaryName: wrapper}); err != nil {
		t.Fatalf("create c2: %v", err)
	}
	res, err = d.Delete(ctx, "c2")
	if err != nil {
		t.Fatalf("delete c2: %v", err)
	}
	t.Logf("c2 deleted before start: exit %d", res.ExitCode)
	subs := subcommands(t, calls)
	if !contains(subs, "create") || !contains(subs, "delete") || contains(subs, "start") {
		t.Errorf("created-then-deleted: runtime ran %q; want create and delete, no start", subs)
	}

	// A running container killed by Delete.
	if err := d.Create(ctx, "c3", RunOpts{Args: []string{ProbePath, "-sleep"}}); err != nil {
		t.Fatal(err)
	}
	if err := d.Start(ctx, "c3"); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 500*time.Millisecond)
	if _, err := d.Wait(wctx, "c3"); err == nil {
		t.Errorf("c3 exited; want it running")
	}
	wcancel()
	res, err = d.Delete(ctx, "c3")
	if err != nil {
		t.Fatalf("delete c3: %v", err)
	}
	if res.ExitCode != 137 {
		t.Errorf("killed c3 exit code %d, want 137", res.ExitCode)
	}
	if !strings.Contains(res.Stdout, "DEV /dev/null 1:3") {
		t.Errorf("c3 output lost: %q", res.Stdout)
	}
}

func loadTask(ctx context.Context, t *testing.T, d *Daemon, id string) containerd.Task {
	t.Helper()
	c, err := d.Client.LoadContainer(d.Context(ctx), id)
	if err != nil {
		t.Fatal(err)
	}
	task, err := c.Task(d.Context(ctx), nil)
	if err != nil {
		t.Fatal(err)
	}
	return task
}

// TestNothingLeft leaves containers in every state for Stop (a created one,
// a running one, one made directly through the client) and checks that
// Leftovers sees their shims, processes, cgroups and sockets while they
// run, and that nothing is left once Stop has cleaned up.
func TestNothingLeft(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d := Start(ctx, t)
	wrapper, _ := loggingRunc(t)

	if err := d.Create(ctx, "created", RunOpts{BinaryName: wrapper}); err != nil {
		t.Fatal(err)
	}
	if err := d.Create(ctx, "running", RunOpts{Args: []string{ProbePath, "-sleep"}}); err != nil {
		t.Fatal(err)
	}
	if err := d.Start(ctx, "running"); err != nil {
		t.Fatal(err)
	}
	// Made through the client, unknown to the harness's bookkeeping: Stop
	// must find and delete it too.
	rootfs, err := d.Rootfs()
	if err != nil {
		t.Fatal(err)
	}
	dctx := d.Context(ctx)
	c, err := d.Client.NewContainer(dctx, "direct",
		containerd.WithRuntime(DefaultRuntime, &options.Options{Root: d.RuncRoot}),
		containerd.WithNewSpec(oci.WithRootFSPath(rootfs), oci.WithProcessArgs(ProbePath, "-sleep")))
	if err != nil {
		t.Fatal(err)
	}
	task, err := c.NewTask(dctx, cio.NullIO)
	if err != nil {
		t.Fatal(err)
	}
	if err := task.Start(dctx); err != nil {
		t.Fatal(err)
	}

	lo, err := d.Leftovers()
	if err != nil {
		t.Fatal(err)
	}
	var shims, probes int
	for _, p := range lo.Procs {
		t.Logf("while running: %s", p)
		if strings.Contains(p.Cmdline, "containerd-shim-runc-v2") {
			shims++
		}
		if strings.HasPrefix(p.Cmdline, ProbePath) {
			probes++
		}
	}
	t.Logf("while running: cgroups %q, files %q, mounts %q", lo.Cgroups, lo.Files, lo.Mounts)
	if shims != 3 {
		t.Errorf("found %d shims, want 3 (one per container)", shims)
	}
	if probes != 2 {
		t.Errorf("found %d running probes, want 2", probes)
	}
	if len(lo.Cgroups) == 0 {
		t.Errorf("found no cgroup of the running container")
	}
	if len(lo.Files) != 2 {
		t.Errorf("found %d shim sockets, want 2", len(lo.Files))
	}

	if err := d.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	lo, err = d.Leftovers()
	if err != nil {
		t.Fatal(err)
	}
	if !lo.Empty() {
		t.Errorf("left after Stop: %+v", lo)
	}
	if _, err := os.Stat(d.Dir); !os.IsNotExist(err) {
		t.Errorf("%s still there (%v)", d.Dir, err)
	}
	// Nothing anywhere names the dir (shims, runc, the daemon).
	out, _ := exec.Command("ps", "-eo", "pid,args").Output()
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, d.Dir) {
			t.Errorf("process still names %s: %s", d.Dir, line)
		}
	}
}

// TestConfigDump checks that config dump shows the harness's settings and
// an extra snippet; and that a CRI runtime class shows only with WithCRI
// (config dump leaves disabled plugins out).
func TestConfigDump(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const runtimeClass = `[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.gpumux]
  runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.gpumux.options]
    BinaryName = "/usr/local/bin/gpumux-runtime"`
	d := Start(ctx, t, WithConfig(`[plugins."io.containerd.monitor.v1.cgroups"]
  no_prometheus = true`), WithConfig(runtimeClass))
	dump, err := d.ConfigDump(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{d.Address, d.Root, `"io.containerd.grpc.v1.cri"`, "no_prometheus = true"} {
		if !strings.Contains(dump, want) {
			t.Errorf("config dump lacks %q:\n%s", want, dump)
		}
	}
	if strings.Contains(dump, "runtimes.gpumux]") {
		t.Errorf("config dump shows the disabled CRI plugin's runtime class")
	}

	cri := Start(ctx, t, WithCRI(), WithConfig(runtimeClass))
	dump, err = cri.ConfigDump(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.gpumux]`,
		`BinaryName = "/usr/local/bin/gpumux-runtime"`,
	} {
		if !strings.Contains(dump, want) {
			t.Errorf("config dump (CRI enabled) lacks %q:\n%s", want, dump)
		}
	}
	if _, err := cri.Run(ctx, "with-cri", RunOpts{}); err != nil {
		t.Errorf("run with CRI enabled: %v", err)
	}
}

// recordingTB passes everything to the test but records errors instead of
// failing it, for a test that expects Stop's cleanup to complain.
type recordingTB struct {
	testing.TB
	errs []string
}

func (r *recordingTB) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
	r.TB.Logf("(recorded error) "+format, args...)
}

func (r *recordingTB) Error(args ...any) {
	r.errs = append(r.errs, fmt.Sprint(args...))
	r.TB.Log(append([]any{"(recorded error) "}, args...)...)
}

// TestStopReportsLeftovers kills the daemon under a running container, the
// way a crash would, so its shim, the container and its cgroups outlive it:
// Stop must report each of them, and remove them.
func TestStopReportsLeftovers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rt := &recordingTB{TB: t}
	d := Start(ctx, rt)
	if err := d.Create(ctx, "orphan", RunOpts{Args: []string{ProbePath, "-sleep"}}); err != nil {
		t.Fatal(err)
	}
	if err := d.Start(ctx, "orphan"); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(d.proc.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-d.Exited()

	err := d.Stop()
	if err == nil {
		t.Fatal("Stop found nothing left after containerd was killed under a container")
	}
	t.Logf("Stop: %v", err)
	for _, want := range []string{
		"already exited",
		"containerd-shim-runc-v2 -namespace gpumux-e2e -id orphan",
		"/probe -sleep",
		"/gpumux-e2e/orphan",
		shimSocket(d.Address, "orphan"),
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Stop's error does not mention %q", want)
		}
	}
	lo, lerr := d.Leftovers()
	if lerr != nil {
		t.Fatal(lerr)
	}
	if !lo.Empty() {
		t.Errorf("left after Stop removed the leftovers: %+v", lo)
	}
	if _, err := os.Stat(d.Dir); !os.IsNotExist(err) {
		t.Errorf("%s still there (%v)", d.Dir, err)
	}
}
