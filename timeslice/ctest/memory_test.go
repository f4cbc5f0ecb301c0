package ctest

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpumux/gpumux/internal/namelist"
)

const limit = 64 << 20 // memory_bytes of most tests

// TestStubsUpToDate fails when an export or intercept list changed
// without `go generate ./timeslice/ctest`.
func TestStubsUpToDate(t *testing.T) {
	root := repoRoot(t)
	for _, lib := range Libraries {
		c, h, err := Generate(root, lib)
		if err != nil {
			t.Fatal(err)
		}
		for path, want := range map[string][]byte{lib.Out: c, strings.TrimSuffix(lib.Out, ".c") + ".h": h} {
			got, err := os.ReadFile(filepath.Join(root, path))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s is stale: run `go generate ./timeslice/ctest`", path)
			}
		}
	}
}

// TestGenerateStubs refuses an intercepted name the library does not export.
func TestGenerateStubs(t *testing.T) {
	if _, _, err := GenerateStubs(Library{Intercept: "x"}, []string{"cuA"}, []string{"cuB"}); err == nil {
		t.Error("GenerateStubs accepted an intercepted name the library does not export")
	}
}

// TestExports: each library exports exactly the real library's functions.
func TestExports(t *testing.T) {
	b := getBuild(t)
	root := repoRoot(t)
	for _, lib := range Libraries {
		t.Run(lib.Soname, func(t *testing.T) {
			want, err := namelist.ReadFile(filepath.Join(root, lib.Symbols))
			if err != nil {
				t.Fatal(err)
			}
			f, err := elf.Open(filepath.Join(b.lim, lib.Soname))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			syms, err := f.DynamicSymbols()
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, s := range syms {
				if s.Section == elf.SHN_UNDEF || elf.ST_BIND(s.Info) == elf.STB_LOCAL {
					continue
				}
				if elf.ST_TYPE(s.Info) != elf.STT_FUNC {
					t.Errorf("exports %s of type %v", s.Name, elf.ST_TYPE(s.Info))
				}
				got = append(got, s.Name)
			}
			sort.Strings(got)
			sort.Strings(want)
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("exports %d symbols, the real library %d; they differ", len(got), len(want))
			}
			t.Logf("%d exports", len(got))
		})
	}
}

// TestMemory runs the single-process checks.
func TestMemory(t *testing.T) {
	for _, tc := range []struct {
		name string
		cmd  string
		env  []string
		text string // the limits file, if not the usual
	}{
		{name: "basic", cmd: "basic"},
		{name: "unknown keys and comments", cmd: "basic", text: fmt.Sprintf(
			"# gpumux\nversion=1\nmemory_bytes=%d\r\ncolor=blue\ncompute_percent=50\n\npolicy=share\nshare=GPU-x/timeslice/1\nfuture=1", limit)},
		{name: "device smaller than the limit", cmd: "small", env: []string{fmt.Sprintf("FAKE_CUDA_TOTAL=%d", limit/2)}},
		{name: "contexts", cmd: "ctx"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sh := newShare(t, limit, 50, "cap")
			if tc.text != "" {
				sh = newShareText(t, limit, tc.text)
			}
			_, stderr := program{name: "mem", args: []string{tc.cmd}, sh: sh, env: tc.env}.run(t)
			quiet(t, stderr)
		})
	}
}

// TestPolicyOff: policy=off is pure pass-through (and memory_bytes=0 is no
// memory limit).
func TestPolicyOff(t *testing.T) {
	sh := newShare(t, limit, 50, "off")
	_, stderr := program{name: "mem", args: []string{"off"}, sh: sh, env: []string{"FAKE_CUDA_TOTAL=1073741824", "GM_TEST_POLICY_OFF=1"}}.run(t)
	quiet(t, stderr)
	if _, err := os.Stat(sh.acctFile()); err == nil {
		t.Error("policy=off created an accounting file")
	}
	sh = newShare(t, 0, 50, "cap")
	sh.limit = limit // what the program tries to go past
	_, stderr = program{name: "mem", args: []string{"off"}, sh: sh, env: []string{"FAKE_CUDA_TOTAL=1073741824"}}.run(t)
	quiet(t, stderr)
}

// TestFailClosed: a missing or malformed limits file, or an unusable state
// directory, makes cuInit fail with CUDA_ERROR_NOT_PERMITTED and logs one
// line naming the file and the problem.
func TestFailClosed(t *testing.T) {
	good := "version=1\nmemory_bytes=1000\ncompute_percent=50\npolicy=cap\nshare=GPU-a/timeslice/0\n"
	swap := func(old, new string) string { return strings.Replace(good, old, new, 1) }
	for _, tc := range []struct {
		name, text, why string
		setup           func(sh *share)
	}{
		{name: "missing", why: "No such file or directory", setup: func(sh *share) { os.Remove(sh.limits) }},
		{name: "a directory", why: "not a regular file", setup: func(sh *share) { os.Remove(sh.limits); os.Mkdir(sh.limits, 0o755) }},
		{name: "empty", text: "", why: "no version= line"},
		{name: "version 2", text: swap("version=1", "version=2"), why: "line 1: version=2 is not supported (want version=1)"},
		{name: "no memory", text: swap("memory_bytes=1000\n", ""), why: "no memory_bytes= line"},
		{name: "negative memory", text: swap("=1000", "=-1"), why: "line 2: memory_bytes=-1 is not a number of bytes"},
		{name: "memory overflow", text: swap("=1000", "=18446744073709551616"), why: "is not a number of bytes"},
		{name: "memory with spaces", text: swap("=1000", "= 1000"), why: "is not a number of bytes"},
		{name: "percent 0", text: swap("=50", "=0"), why: "line 3: compute_percent=0 is not in 1..100"},
		{name: "percent 101", text: swap("=50", "=101"), why: "compute_percent=101 is not in 1..100"},
		{name: "no percent", text: swap("compute_percent=50\n", ""), why: "no compute_percent= line"},
		{name: "policy", text: swap("=cap", "=CAP"), why: "line 4: policy=CAP is not cap, share or off"},
		{name: "no share", text: swap("share=GPU-a/timeslice/0\n", ""), why: "no share= line"},
		{name: "empty share", text: swap("=GPU-a/timeslice/0", "="), why: "share= must name the share"},
		{name: "twice", text: good + "policy=share\n", why: "line 6: policy given twice"},
		{name: "not key=value", text: "version=1\nmemory_bytes 5\n", why: `line 2: want key=value, got "memory_bytes 5"`},
		{name: "nul", text: "version=1\x00\n", why: "line 1: a NUL byte"},
		{name: "huge", text: good + strings.Repeat("# padding\n", 7000), why: "larger than 65536 bytes"},
		{name: "state is a file", text: good, why: "the accounting file: ", setup: func(sh *share) {
			os.Remove(sh.state)
			os.WriteFile(sh.state, nil, 0o644)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sh := newShareText(t, 1000, tc.text)
			if tc.setup != nil {
				tc.setup(sh)
			}
			_, stderr := program{name: "mem", args: []string{"failclosed"}, sh: sh}.run(t)
			lines := limiterLines(stderr)
			if len(lines) != 1 {
				t.Fatalf("want one limiter message, got:\n%s", stderr)
			}
			want := "; CUDA is disabled (cuInit returns CUDA_ERROR_NOT_PERMITTED)"
			if !strings.Contains(lines[0], tc.why) || !strings.HasSuffix(lines[0], want) {
				t.Errorf("message %q does not say %q ... %q", lines[0], tc.why, want)
			}
			if !strings.Contains(tc.name, "state") && !strings.HasPrefix(lines[0], "gpumux limiter: "+sh.limits+": ") {
				t.Errorf("message %q does not name %s", lines[0], sh.limits)
			}
		})
	}
	t.Run("no variable, no default file", func(t *testing.T) {
		if _, err := os.Stat("/run/gpumux/limiter/limits"); err == nil {
			t.Skip("this machine has /run/gpumux/limiter/limits")
		}
		_, stderr := program{name: "mem", args: []string{"failclosed"}, env: []string{"GPUMUX_LIMITER_LIMITS="}}.run(t)
		if !strings.Contains(stderr, "gpumux limiter: /run/gpumux/limiter/limits: No such file or directory") {
			t.Errorf("stderr:\n%s", stderr)
		}
	})
}

// TestRealDriver: where the real driver comes from, and that the limiter
// never loads itself.
func TestRealDriver(t *testing.T) {
	b := getBuild(t)
	sh := newShare(t, limit, 50, "cap")
	self := filepath.Join(b.lim, "libcuda.so.1")
	link := filepath.Join(t.TempDir(), "libcuda.so.1")
	if err := os.Symlink(self, link); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, cmd string
		env       []string
		why       string
	}{
		{"search path skips the limiter", "basic", []string{"GPUMUX_LIMITER_CUDA=", "GPUMUX_LIMITER_SEARCH_PATH=" + b.lim + ":" + filepath.Dir(link) + ":" + b.fake}, ""},
		{"itself", "nodriver", []string{"GPUMUX_LIMITER_CUDA=" + self}, "is the limiter itself"},
		{"itself by a link", "nodriver", []string{"GPUMUX_LIMITER_CUDA=" + link}, "is the limiter itself"},
		{"missing", "nodriver", []string{"GPUMUX_LIMITER_CUDA=/nonexistent/libcuda.so.1"}, "/nonexistent/libcuda.so.1: No such file or directory"},
		{"relative", "nodriver", []string{"GPUMUX_LIMITER_CUDA=libcuda.so.1"}, "GPUMUX_LIMITER_CUDA=libcuda.so.1 is not an absolute path"},
		{"not in the search path", "nodriver", []string{"GPUMUX_LIMITER_CUDA=", "GPUMUX_LIMITER_SEARCH_PATH=" + b.lim + ":/nonexistent"}, "no libcuda.so.1 in"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr := program{name: "mem", args: []string{tc.cmd}, sh: sh, env: tc.env}.run(t)
			lines := limiterLines(stderr)
			if tc.why == "" {
				quiet(t, stderr)
				return
			}
			if len(lines) != 1 || !strings.Contains(lines[0], "cannot load the real libcuda.so.1: ") || !strings.Contains(lines[0], tc.why) {
				t.Errorf("want one message saying %q, got:\n%s", tc.why, stderr)
			}
		})
	}
}

// TestMultiProcess: three processes of one share allocate concurrently
// until refused: together they never hold more than the limit (the fake
// GPU's high-water mark), and they fill it to within one allocation.
func TestMultiProcess(t *testing.T) {
	sh := newShare(t, limit, 50, "cap")
	gpu := filepath.Join(t.TempDir(), "gpu")
	const chunk = 64<<10 + 13
	env := []string{"FAKE_CUDA_SHARED=" + gpu}
	var procs []*proc
	for i := 0; i < 3; i++ {
		procs = append(procs, program{name: "mem", args: []string{"grab", strconv.Itoa(chunk)}, sh: sh, env: env}.start(t, ""))
	}
	var sum uint64
	for _, p := range procs {
		n, _ := strconv.ParseUint(strings.TrimPrefix(p.expect("GOT "), "GOT "), 10, 64)
		sum += n
	}
	if sum > limit || sum <= limit-chunk {
		t.Errorf("the processes got %d bytes together, want (%d, %d]", sum, limit-chunk, limit)
	}
	if high := highWater(t, gpu); high > limit {
		t.Errorf("the share held %d bytes at once, over the limit %d", high, limit)
	}
	for _, p := range procs {
		p.finish()
		quiet(t, p.stderr.String())
	}
	// Gone without freeing: all of it is free again.
	out, _ := program{name: "mem", args: []string{"try", strconv.Itoa(limit)}, sh: sh}.run(t)
	if !strings.Contains(out, fmt.Sprintf("FREE %d\nRESULT 0\n", limit)) {
		t.Errorf("after the processes exited:\n%s", out)
	}
}

// highWater reads the fake GPU's highest total.
func highWater(t *testing.T, path string) uint64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil || len(b) < 16 {
		t.Fatalf("the fake GPU's file: %v", err)
	}
	var v uint64
	for i := 0; i < 8; i++ {
		v |= uint64(b[8+i]) << (8 * i)
	}
	return v
}

// TestKillReclaim: the bytes of a process killed with SIGKILL come back.
func TestKillReclaim(t *testing.T) {
	sh := newShare(t, limit, 50, "cap")
	p := program{name: "mem", args: []string{"hold", strconv.Itoa(limit / 2)}, sh: sh}.start(t, "HELD")
	out, _ := program{name: "mem", args: []string{"try", strconv.Itoa(limit/2 + 1)}, sh: sh}.run(t)
	if !strings.Contains(out, fmt.Sprintf("FREE %d\nRESULT 2\n", limit/2)) {
		t.Errorf("while the holder lives:\n%s", out)
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	p.cmd.Wait()
	out, stderr := program{name: "mem", args: []string{"try", strconv.Itoa(limit)}, sh: sh}.run(t)
	if !strings.Contains(out, fmt.Sprintf("FREE %d\nRESULT 0\n", limit)) {
		t.Errorf("after the holder was killed:\n%s", out)
	}
	quiet(t, stderr)
}

// TestFork: a forked child has a slot of its own; its bytes come back when
// it exits; forks under load do not deadlock.
func TestFork(t *testing.T) {
	_, stderr := program{name: "fork", sh: newShare(t, limit, 50, "cap")}.run(t)
	quiet(t, stderr)
}

// TestThreads: 16 threads hammer alloc and free.
func TestThreads(t *testing.T) {
	sh := newShare(t, limit, 50, "cap")
	gpu := filepath.Join(t.TempDir(), "gpu")
	start := time.Now()
	out, stderr := program{name: "threads", sh: sh, env: []string{"FAKE_CUDA_SHARED=" + gpu}}.run(t)
	quiet(t, stderr)
	if high := highWater(t, gpu); high > limit {
		t.Errorf("the threads held %d bytes at once, over the limit %d", high, limit)
	}
	t.Logf("%s in %v", strings.TrimSpace(out), time.Since(start))
}

// TestGetProcAddress: cuGetProcAddress hands out the limiter's functions.
func TestGetProcAddress(t *testing.T) {
	_, stderr := program{name: "procaddr", sh: newShare(t, limit, 50, "cap")}.run(t)
	quiet(t, stderr)
}

// TestPassThrough: calls the limiter does not intercept reach the driver
// intact, including through the lazy first resolution.
func TestPassThrough(t *testing.T) {
	for _, first := range []string{"occupancy", "float"} {
		t.Run(first, func(t *testing.T) {
			_, stderr := program{name: "passthru", args: []string{first}, sh: newShare(t, limit, 50, "cap")}.run(t)
			quiet(t, stderr)
		})
	}
}

// TestNVML: the memory queries answer for the share; the rest passes
// through.
func TestNVML(t *testing.T) {
	t.Run("share", func(t *testing.T) {
		sh := newShare(t, limit, 50, "cap")
		program{name: "nvml", args: []string{"share"}, sh: sh, env: []string{"GM_TEST_USED=0"}}.run(t)
		program{name: "mem", args: []string{"hold", strconv.Itoa(5 << 20)}, sh: sh}.start(t, "HELD")
		_, stderr := program{name: "nvml", args: []string{"share"}, sh: sh, env: []string{"GM_TEST_USED=5242880"}}.run(t)
		quiet(t, stderr)
	})
	t.Run("with CUDA in the same process", func(t *testing.T) {
		sh := newShare(t, limit, 50, "cap")
		program{name: "mem", args: []string{"hold", strconv.Itoa(5 << 20)}, sh: sh}.start(t, "HELD")
		_, stderr := program{name: "nvml", args: []string{"self"}, sh: sh,
			env: []string{"GM_TEST_USED=5242880", "GM_TEST_SELF=1048576"}}.run(t)
		quiet(t, stderr)
	})
	t.Run("off", func(t *testing.T) {
		_, stderr := program{name: "nvml", args: []string{"off"}, sh: newShare(t, limit, 50, "off")}.run(t)
		quiet(t, stderr)
	})
	t.Run("bad limits", func(t *testing.T) {
		_, stderr := program{name: "nvml", args: []string{"closed"}, sh: newShareText(t, limit, "version=3\n")}.run(t)
		if l := limiterLines(stderr); len(l) != 1 || !strings.HasSuffix(l[0], "; NVML's memory queries return NVML_ERROR_NO_PERMISSION") {
			t.Errorf("stderr:\n%s", stderr)
		}
	})
}
