package ctest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumux/gpumux/internal/cbuild"
	"github.com/gpumux/gpumux/internal/syncbuf"
)

// The C test programs linked against the limiter (timeslice/limiter/tests).
var programs = []string{"mem", "threads", "fork", "procaddr", "passthru", "nvml", "compute"}

var (
	buildOnce sync.Once
	built     *build
	buildErr  error
)

// build is where everything was built: the limiter's two libraries in
// lim/, the fake CUDA and NVML libraries in fake/ (both named as the real
// ones, so a search path can find them), the test programs in bin/.
type build struct {
	dir, lim, fake, bin string
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built != nil {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// repoRoot is the module's root.
func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := cbuild.Root()
	if err != nil {
		t.Fatalf("module root: %v", err)
	}
	return root
}

// getBuild builds the limiter with `make limiter` (into a temporary
// directory, not bin/), the fakes and the test programs, once per test
// binary. A missing compiler or make is a failure, not a skip.
func getBuild(t testing.TB) *build {
	t.Helper()
	buildOnce.Do(func() { built, buildErr = doBuild() })
	if buildErr != nil {
		t.Fatalf("building the limiter and its C tests: %v", buildErr)
	}
	return built
}

func doBuild() (*build, error) {
	e, err := cbuild.Setup()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "gpumux-limiter-ctest-")
	if err != nil {
		return nil, err
	}
	b := &build{dir: dir, lim: filepath.Join(dir, "lim"), fake: filepath.Join(dir, "fake"), bin: filepath.Join(dir, "bin")}
	for _, d := range []string{b.lim, b.fake, b.bin} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return b, err
		}
	}
	if err := e.Make("limiter", "LIMITER_EXTRA_CFLAGS", "LIMITER_OUT_DIR="+b.lim); err != nil {
		return b, err
	}
	src := filepath.Join(e.Root, "timeslice", "limiter")
	tests := filepath.Join(src, "tests")
	jobs := [][]string{
		// The fakes bind their own symbols (-Bsymbolic): the limiter,
		// first in the global scope, must not answer their calls.
		{"-o", filepath.Join(b.fake, "libcuda.so.1"), "-fPIC", "-shared", "-Wl,-Bsymbolic", "-Wl,-soname,libcuda.so.1",
			filepath.Join(tests, "fake_cuda.c"), "-ldl", "-lpthread"},
		{"-o", filepath.Join(b.fake, "libnvidia-ml.so.1"), "-fPIC", "-shared", "-Wl,-Bsymbolic",
			"-Wl,-soname,libnvidia-ml.so.1", filepath.Join(tests, "fake_nvml.c")},
		// acctfuzz links the accounting's sources: it tests hidden
		// internals.
		{"-o", filepath.Join(b.bin, "acctfuzz"), "-fvisibility=hidden", filepath.Join(tests, "acctfuzz.c"),
			filepath.Join(src, "lim_acct.c"), filepath.Join(src, "lim_conf.c"), filepath.Join(src, "lim_io.c"), "-ldl", "-lpthread"},
	}
	for _, p := range programs {
		args := []string{"-o", filepath.Join(b.bin, p), filepath.Join(tests, p+".c"), "-L", b.lim, "-l:libcuda.so.1"}
		if p == "nvml" {
			args = append(args, "-l:libnvidia-ml.so.1")
		}
		jobs = append(jobs, append(args, "-ldl", "-lpthread"))
	}
	return b, e.CompileAll([]string{"-std=gnu11", "-O1", "-g", "-Wall", "-Wextra", "-Werror"}, jobs)
}

// share is one share's host files: its limits file and state directory,
// and the node directory of its GPU (its own, unless a test gives several
// shares one).
type share struct {
	dir, limits, state, node string
	limit                    uint64
}

// newShare writes a limits file (version 1, the share "GPU-ctest/timeslice/0").
func newShare(t testing.TB, memory uint64, percent int, policy string) *share {
	t.Helper()
	return newShareText(t, memory, fmt.Sprintf("version=1\nmemory_bytes=%d\ncompute_percent=%d\npolicy=%s\nshare=GPU-ctest/timeslice/0\n",
		memory, percent, policy))
}

func newShareText(t testing.TB, memory uint64, limits string) *share {
	t.Helper()
	dir := t.TempDir()
	s := &share{dir: dir, limits: filepath.Join(dir, "limits"), state: filepath.Join(dir, "state"),
		node: filepath.Join(dir, "node"), limit: memory}
	for _, d := range []string{s.state, s.node} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(s.limits, []byte(limits), 0o444); err != nil {
		t.Fatal(err)
	}
	return s
}

// acctFile is the share's accounting file.
func (s *share) acctFile() string { return filepath.Join(s.state, "memory.v1") }

// program is one run of a C test program of a share.
type program struct {
	name string
	args []string
	sh   *share
	env  []string // more variables, or overrides (the last wins)
}

func (p program) command(ctx context.Context, t testing.TB) *exec.Cmd {
	b := getBuild(t)
	cmd := exec.CommandContext(ctx, filepath.Join(b.bin, p.name), p.args...)
	emulate(cmd)
	env := []string{
		"LD_LIBRARY_PATH=" + b.lim,
		"PATH=" + os.Getenv("PATH"),
		"GPUMUX_LIMITER_CUDA=" + filepath.Join(b.fake, "libcuda.so.1"),
		"GPUMUX_LIMITER_NVML=" + filepath.Join(b.fake, "libnvidia-ml.so.1"),
		"GM_TEST_FAKE_CUDA=" + filepath.Join(b.fake, "libcuda.so.1"),
	}
	if p.sh != nil {
		env = append(env, "GPUMUX_LIMITER_LIMITS="+p.sh.limits, "GPUMUX_LIMITER_STATE="+p.sh.state,
			"GPUMUX_LIMITER_NODE="+p.sh.node, fmt.Sprintf("GM_TEST_LIMIT=%d", p.sh.limit))
	}
	if os.Getenv("GM_CTEST_SANITIZE") != "" {
		env = append(env, "ASAN_OPTIONS=detect_leaks=0")
	}
	cmd.Env = mergeEnv(append(env, p.env...))
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// emulate runs cmd under GM_CTEST_EXEC when it is set: a command and its
// arguments, split on spaces, that runs programs built for another
// architecture, e.g. "qemu-aarch64-static -L /usr/aarch64-linux-gnu" with
// CC=aarch64-linux-gnu-gcc, to test the limiter's AArch64 stubs on an
// amd64 machine.
func emulate(cmd *exec.Cmd) {
	prefix := strings.Fields(os.Getenv("GM_CTEST_EXEC"))
	if len(prefix) == 0 {
		return
	}
	path, err := exec.LookPath(prefix[0])
	if err != nil {
		path = prefix[0] // cmd.Run reports it
	}
	cmd.Path = path
	cmd.Args = append(prefix, cmd.Args...)
}

// mergeEnv keeps the last value of each variable, in the place of its
// first.
func mergeEnv(env []string) []string {
	idx := map[string]int{}
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := idx[k]; ok {
			out[i] = kv
			continue
		}
		idx[k] = len(out)
		out = append(out, kv)
	}
	return out
}

// run runs the program to its end, fails the test if it failed, and
// returns stdout and stderr.
func (p program) run(t testing.TB) (stdout, stderr string) {
	t.Helper()
	o, e, err := p.try(t)
	if err != nil {
		t.Errorf("%s %s: %v\nstdout:\n%s\nstderr:\n%s", p.name, strings.Join(p.args, " "), err, o, e)
	}
	return o, e
}

// try runs the program to its end.
func (p program) try(t testing.TB) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := p.command(ctx, t)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("%v (timed out)", err)
	}
	return o.String(), e.String(), err
}

// proc is a program running in the background, talked to by lines.
type proc struct {
	t      testing.TB
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  *bufio.Scanner
	stderr *syncbuf.Buffer
	out    strings.Builder
}

// start starts the program and waits for a line starting with ready
// (unless ready is empty).
func (p program) start(t testing.TB, ready string) *proc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	cmd := p.command(ctx, t)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	pr := &proc{t: t, cmd: cmd, stdin: stdin, lines: bufio.NewScanner(stdout), stderr: &syncbuf.Buffer{}}
	cmd.Stderr = pr.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pr.stdin.Close()
		pr.cmd.Process.Kill()
		pr.cmd.Wait()
		cancel()
	})
	if ready != "" {
		pr.expect(ready)
	}
	return pr
}

// expect reads lines until one starts with prefix and returns it.
func (pr *proc) expect(prefix string) string {
	pr.t.Helper()
	for pr.lines.Scan() {
		line := pr.lines.Text()
		pr.out.WriteString(line + "\n")
		if strings.HasPrefix(line, prefix) {
			return line
		}
	}
	pr.t.Fatalf("%s: no %q line; stdout:\n%s\nstderr:\n%s", pr.cmd.Path, prefix, pr.out.String(), pr.stderr.String())
	return ""
}

func (pr *proc) send(line string) {
	pr.t.Helper()
	if _, err := io.WriteString(pr.stdin, line+"\n"); err != nil {
		pr.t.Fatalf("%s: %v", pr.cmd.Path, err)
	}
}

// finish closes stdin and waits for a clean exit.
func (pr *proc) finish() {
	pr.t.Helper()
	pr.stdin.Close()
	for pr.lines.Scan() {
		pr.out.WriteString(pr.lines.Text() + "\n")
	}
	if err := pr.cmd.Wait(); err != nil {
		pr.t.Errorf("%s: %v\nstdout:\n%s\nstderr:\n%s", pr.cmd.Path, err, pr.out.String(), pr.stderr.String())
	}
}

// limiterLines are the limiter's messages in stderr.
func limiterLines(stderr string) []string {
	var out []string
	for _, l := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(l, "gpumux limiter: ") {
			out = append(out, l)
		}
	}
	return out
}

// quiet fails the test if the limiter said anything.
func quiet(t testing.TB, stderr string) {
	t.Helper()
	if l := limiterLines(stderr); len(l) > 0 {
		t.Errorf("unexpected limiter messages:\n%s", strings.Join(l, "\n"))
	}
}
