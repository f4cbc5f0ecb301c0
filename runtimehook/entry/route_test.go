package entry

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpumux/gpumux/internal/cbuild"
	"github.com/gpumux/gpumux/internal/ociruntime"
	"github.com/gpumux/gpumux/internal/testbin"
	"github.com/gpumux/gpumux/node"
)

// The C entry, cmd/gpumux-runtime, routes each call: these tests build it
// and run it as the engine does, beside stand-ins for runc, the core and
// gpumux-runtime-hook that write down how they were called.

// entryDir builds gpumux-runtime once per test binary and returns a
// directory with it and stand-ins of gpumux-runtime-core and
// gpumux-runtime-hook beside it, a runc stand-in, and a stand-in of runc's
// init (testbin.RuncInit).
var entryDir = sync.OnceValues(func() (string, error) {
	env, err := cbuild.Setup()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "gpumux-entry")
	if err != nil {
		return "", err
	}
	args := append([]string{"-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror", `-DGPUMUX_VERSION="9.9.9 (commit c0ffee)"`},
		env.Sanitize...)
	args = append(args, "-o", filepath.Join(dir, ociruntime.EntryBinary), filepath.Join(env.Root, "cmd", ociruntime.EntryBinary, ociruntime.EntryBinary+".c"))
	if err := env.Run(env.CC, args...); err != nil {
		return "", err
	}
	for _, name := range []string{ociruntime.CoreBinary, ociruntime.HookBinary, "runc"} {
		// Each writes "NAME ARG..." (one argument a line) to $ROUTE_OUT,
		// and its stdin to $ROUTE_OUT.stdin.
		script := fmt.Sprintf("#!/bin/sh\n{ echo %s; for a in \"$@\"; do echo \"$a\"; done; } >\"$ROUTE_OUT\"\ncat >\"$ROUTE_OUT.stdin\"\n", name)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
			return "", err
		}
	}
	if _, err := testbin.RuncInit(dir); err != nil {
		return "", err
	}
	return dir, nil
})

// route runs gpumux-runtime with args and env ("K=V") and returns the
// stand-in it handed over to and the arguments that one got, or its exit
// code and output when it handed over to nothing.
func route(t *testing.T, args []string, env ...string) (to string, argv []string, code int, out string) {
	t.Helper()
	to, argv, code, out, _ = routeWithStdin(t, "", "", args, env...)
	return to, argv, code, out
}

// routeWithStdin is route with stdin given, and also returns what the
// stand-in handed over to read on its stdin; with a working directory
// given, gpumux-runtime runs there, as the child of a stand-in of runc's
// init.
func routeWithStdin(t *testing.T, stdin, initDir string, args []string, env ...string) (to string, argv []string, code int, out, gotStdin string) {
	t.Helper()
	dir, err := entryDir()
	if err != nil {
		t.Fatal(err)
	}
	record := filepath.Join(t.TempDir(), "route")
	cmd := exec.Command(filepath.Join(dir, ociruntime.EntryBinary), args...)
	if initDir != "" {
		cmd = exec.Command(filepath.Join(dir, testbin.RuncInitName), append([]string{cmd.Path}, args...)...)
		// In a PID namespace of its own where one can be had, as runc's
		// init is: the entry's getppid() is 1 there, and its /proc the
		// host's.
		if unshare := pidNamespace(); unshare != "" {
			cmd = exec.Command(unshare, append([]string{"--pid", "--fork"}, cmd.Args...)...)
		} else {
			t.Log("runc's init stand-in runs in this PID namespace (no unshare --pid here)")
		}
		cmd.Dir = initDir
	}
	// No node agent unless env names one (the default socket is the
	// machine's).
	noAgent := "GPUMUX_RUNTIME_SOCKET=" + filepath.Join(t.TempDir(), "no-agent.sock")
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "ROUTE_OUT=" + record, ociruntime.EnvRunc + "=" + filepath.Join(dir, "runc"), noAgent}, env...)
	cmd.Stdin = strings.NewReader(stdin)
	b, err := cmd.CombinedOutput()
	if exit, ok := err.(*exec.ExitError); ok {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	rec, err := os.ReadFile(record)
	if err != nil {
		return "", nil, code, string(b), ""
	}
	in, _ := os.ReadFile(record + ".stdin")
	lines := strings.Split(strings.TrimSuffix(string(rec), "\n"), "\n")
	return lines[0], lines[1:], code, string(b), string(in)
}

// pidNamespace is unshare, where `unshare --pid --fork` runs here (root,
// and namespaces allowed); "" otherwise.
var pidNamespace = sync.OnceValue(func() string {
	unshare, err := exec.LookPath("unshare")
	if err != nil || exec.Command(unshare, "--pid", "--fork", "true").Run() != nil {
		return ""
	}
	return unshare
})

// bundleWith writes a bundle whose config.json is spec (nil: no
// config.json) or raw as given.
func bundleWith(t *testing.T, spec *specs.Spec, raw string) string {
	t.Helper()
	dir := t.TempDir()
	b := []byte(raw)
	switch {
	case raw != "":
	case spec != nil:
		b, _ = json.Marshal(spec)
	default:
		return dir
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func specWith(ann map[string]string, env ...string) *specs.Spec {
	return &specs.Spec{Annotations: ann, Process: &specs.Process{Env: env}}
}

// TestCEntryRoutes: runc gets every call of a container that asks for
// nothing, with gpumux's own --config dropped; the core gets a create that
// asks (or whose spec it cannot read: the core reports why) and the hooks
// that need the node, with the arguments as given; gpumux-runtime-hook the
// update-ldcache hook and the poststop hook that has its state directory.
func TestCEntryRoutes(t *testing.T) {
	plain := bundleWith(t, specWith(map[string]string{"io.kubernetes.cri.container-type": "container"}, "PATH=/bin", "NVIDIA_VISIBLE_DEVICES=all"), "")
	tests := []struct {
		name     string
		args     []string
		env      []string
		to       string
		wantArgs []string // nil: args as given
	}{
		{"start", []string{"--root", "/r", "start", "c1"}, nil, "runc", nil},
		{"delete, with --config", []string{"--config", "/etc/n.hcl", "delete", "c1"}, nil, "runc", []string{"delete", "c1"}},
		{"state, a flag with its value joined", []string{"--root=/r", "--log", "create", "state", "c1"}, nil, "runc", nil},
		{"create, nothing asked", []string{"--root", "/r", "create", "--bundle", plain, "c1"}, nil, "runc", nil},
		{"create, in the working directory", []string{"create", "c1"}, nil, ociruntime.CoreBinary, nil}, // the test's directory has no config.json
		{"create, no process", []string{"create", "--bundle", bundleWith(t, &specs.Spec{}, ""), "c1"}, nil, "runc", nil},
		{"create, a config.json that is not JSON", []string{"create", "--bundle", bundleWith(t, nil, "{"), "c1"}, nil, "runc", nil},
		{"create, annotation", []string{"create", "--bundle", bundleWith(t, specWith(map[string]string{"gpumux.io/mechanism": "mps"}), ""), "c1"}, nil, ociruntime.CoreBinary, nil},
		{"create, unknown gpumux annotation", []string{"create", "-b", bundleWith(t, specWith(map[string]string{"gpumux.io/typo": "1"}), ""), "c1"}, nil, ociruntime.CoreBinary, nil},
		{"create, escaped annotation", []string{"create", "-b", bundleWith(t, nil, `{"annotations":{"\u0067pumux.io\/gpus":"1"}}`), "c1"}, nil, ociruntime.CoreBinary, nil},
		{"create, env", []string{"--config", "/etc/n.hcl", "create", "--bundle=" + bundleWith(t, specWith(nil, "PATH=/bin", "GPUMUX_GPUS=2"), ""), "c1"}, nil, ociruntime.CoreBinary, nil},
		{"create, escaped env", []string{"create", "--bundle", bundleWith(t, nil, `{"process":{"env":["GPUMUX\u005fSHARES=GPU-1"]}}`), "c1"}, nil, ociruntime.CoreBinary, nil},
		{"create, reserved shares", []string{"create", "--bundle", bundleWith(t, specWith(nil, "GPUMUX_SHARES=GPU-1"), ""), "c1"}, nil, ociruntime.CoreBinary, nil},
		{"create, a request variable without a value", []string{"create", "--bundle", bundleWith(t, specWith(nil, "GPUMUX_MEMORY"), ""), "c1"}, nil, ociruntime.CoreBinary, nil},
		{"create, no config.json", []string{"create", "--bundle", bundleWith(t, nil, ""), "c1"}, nil, ociruntime.CoreBinary, nil},
		{"hook update-ldcache", []string{"hook", ociruntime.HookUpdateLdcache, "/usr/lib"}, nil, ociruntime.HookBinary, nil},
		{"hook update-ldcache, with --config", []string{"--config", "/etc/n.hcl", "hook", ociruntime.HookUpdateLdcache, "/usr/lib"}, nil, ociruntime.HookBinary, []string{"hook", ociruntime.HookUpdateLdcache, "/usr/lib"}},
		{"hook poststop with its state directory", []string{"hook", ociruntime.HookPoststop}, []string{ociruntime.EnvStateDir + "=/var/lib/gpumux"}, ociruntime.HookBinary, nil},
		{"hook poststop without", []string{"hook", ociruntime.HookPoststop}, nil, ociruntime.CoreBinary, nil},
		{"another hook", []string{"--config", "/etc/n.hcl", "hook", "prestart"}, []string{ociruntime.EnvStateDir + "=/var/lib/gpumux"}, ociruntime.CoreBinary, nil},
		{"hook, no name", []string{"hook"}, nil, ociruntime.CoreBinary, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			to, argv, code, out := route(t, tc.args, tc.env...)
			want := tc.wantArgs
			if want == nil {
				want = tc.args
			}
			if to != tc.to || !slices.Equal(argv, want) {
				t.Errorf("handed over to %q %q (exit %d, %q), want %s %q", to, argv, code, out, tc.to, want)
			}
		})
	}
}

// TestCEntryVersion: gpumux's version, then runc's.
func TestCEntryVersion(t *testing.T) {
	to, argv, _, out := route(t, []string{"--version"})
	if out != ociruntime.EntryBinary+" 9.9.9 (commit c0ffee)\n" || to != "runc" || !slices.Equal(argv, []string{"--version"}) {
		t.Errorf("--version printed %q and handed over to %s %q", out, to, argv)
	}
}

// TestCEntryFailures: what cannot be handed over is reported with exit 127,
// naming what is missing.
func TestCEntryFailures(t *testing.T) {
	if _, _, code, out := route(t, []string{"start", "c1"}, ociruntime.EnvRunc+"=no-such-runc"); code != 127 || !strings.Contains(out, "no-such-runc") {
		t.Errorf("no runc: exit %d, %q", code, out)
	}
	dir, err := entryDir()
	if err != nil {
		t.Fatal(err)
	}
	alone := filepath.Join(t.TempDir(), ociruntime.EntryBinary)
	b, err := os.ReadFile(filepath.Join(dir, ociruntime.EntryBinary))
	if err == nil {
		err = os.WriteFile(alone, b, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(alone, "create", "--bundle", bundleWith(t, specWith(map[string]string{"gpumux.io/gpus": "1"}), ""), "c1")
	out, err := cmd.CombinedOutput()
	if exit, ok := err.(*exec.ExitError); !ok || exit.ExitCode() != 127 || !strings.Contains(string(out), ociruntime.CoreBinary+" must be installed beside "+alone) {
		t.Errorf("no core beside it: %v, %q", err, out)
	}
}

// TestCEntryRoutesEveryRequestToTheCore: for random specs, written with
// JSON's escapes at random, a create whose spec asks (node.ParseRequest
// finds a request, or refuses one: what the core applies) always goes to
// the core; one that goes to runc never asks.
func TestCEntryRoutesEveryRequestToTheCore(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(s ...string) string { return s[rng.IntN(len(s))] }
	var requestVars []string // each request variable, set
	for _, e := range node.RequestEnv() {
		requestVars = append(requestVars, e+"=1")
	}
	n := 200
	if testing.Short() {
		n = 40
	}
	for i := range n {
		ann := map[string]string{}
		for range rng.IntN(3) {
			ann[pick("io.kubernetes.cri.sandbox-id", "gpumux.io/mechanism", "gpumux.io/memory", "example.com/gpumux", "gpumux.iox")] = pick("mps", "16Gi", "a&b<c>", "")
		}
		var env []string
		for range rng.IntN(4) {
			env = append(env, pick(append(requestVars, "PATH=/bin", "GPUMUX_STATE_DIR=/x", "XGPUMUX=1", "GPUMUX_GPUS", "HOME=/root", "GPUMUX=1")...))
		}
		raw := escapeAtRandom(rng, specWith(ann, env...))
		to, _, code, out := route(t, []string{"create", "--bundle", bundleWith(t, nil, raw), "c1"})
		_, _, asked, err := node.ParseRequest(ann, env, node.DefaultLimits)
		asks := asked || err != nil
		if (asks && to != ociruntime.CoreBinary) || (to != ociruntime.CoreBinary && to != "runc") {
			t.Fatalf("case %d: %s asks %v, handed over to %q (exit %d, %q)", i, raw, asks, to, code, out)
		}
	}
}

// escapeAtRandom writes spec as JSON whose string characters are written
// as \uXXXX (or \/ for a slash) at random.
func escapeAtRandom(rng *rand.Rand, spec *specs.Spec) string {
	b, _ := json.Marshal(spec)
	var out strings.Builder
	inString := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case c == '\\' && b[i+1] == 'u':
			out.Write(b[i : i+6])
			i += 5
		case c == '\\':
			out.Write(b[i : i+2])
			i++
		case c == '"':
			inString = !inString
			out.WriteByte(c)
		case inString && c == '/' && rng.IntN(3) == 0:
			out.WriteString(`\/`)
		case inString && rng.IntN(4) == 0:
			fmt.Fprintf(&out, `\u%04x`, c)
		default:
			out.WriteByte(c)
		}
	}
	return out.String()
}

// agentStandIn listens on a unix socket and answers each connection with
// answer (nothing, closing, for ""), sending what it read on got.
func agentStandIn(t *testing.T, answer string) (socket string, got chan []string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "gmx") // short: a unix socket's path is bounded
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket = filepath.Join(dir, "runtime.sock")
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got = make(chan []string, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b, _ := io.ReadAll(c)
			got <- strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
			if answer != "" {
				io.WriteString(c, answer+"\n")
			}
			c.Close()
		}
	}()
	return socket, got
}

// TestCEntryAsksTheAgent: a create that may ask goes to the node agent
// first, with the node config the core would read, the state directory,
// the entry's path and runc's arguments; the entry then execs runc, runs
// the core, or fails with the agent's message, as the agent answers, and
// fails clearly when the agent breaks off.
func TestCEntryAsksTheAgent(t *testing.T) {
	dir, err := entryDir()
	if err != nil {
		t.Fatal(err)
	}
	asks := bundleWith(t, specWith(map[string]string{"gpumux.io/mechanism": "timeslice"}), "")
	plain := bundleWith(t, specWith(nil, "PATH=/bin"), "")
	create := []string{"--root", "/r", "create", "--bundle", asks, "c1"}
	for _, tc := range []struct {
		name     string
		answer   string
		args     []string
		env      []string
		to       string   // "" for none
		wantArgs []string // nil: args as given
		code     int
		out      string
		request  []string // what the agent gets; nil: not asked
	}{
		{"prepared", "runc", append([]string{"--config", "/etc/n.hcl"}, create...), []string{ociruntime.EnvStateDir + "=/var/lib/g"}, "runc", create, 0, "",
			append([]string{"gpumux-create/1", "/etc/n.hcl", "/var/lib/g", filepath.Join(dir, ociruntime.EntryBinary)}, create...)},
		{"the config from the environment", "runc", create, []string{"GPUMUX_CONFIG=/etc/e.hcl"}, "runc", create, 0, "",
			append([]string{"gpumux-create/1", "/etc/e.hcl", "", filepath.Join(dir, ociruntime.EntryBinary)}, create...)},
		{"the default config", "core", create, nil, ociruntime.CoreBinary, nil, 0, "",
			append([]string{"gpumux-create/1", "/etc/gpumux/node.hcl", "", filepath.Join(dir, ociruntime.EntryBinary)}, create...)},
		{"refused", "error gpumux-runtime: no share fits", create, nil, "", nil, 1, "gpumux-runtime: no share fits\n", []string{}},
		{"an answer it does not know", "maybe", create, nil, "", nil, 1, "answered maybe", []string{}},
		{"no answer", "", create, nil, "", nil, 1, "did not answer: no answer", []string{}},
		{"nothing asked: the agent is not asked", "error not to be asked", []string{"create", "--bundle", plain, "c2"}, nil, "runc", nil, 0, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			socket, got := agentStandIn(t, tc.answer)
			to, argv, code, out := route(t, tc.args, append(tc.env, "GPUMUX_RUNTIME_SOCKET="+socket)...)
			want := tc.wantArgs
			if want == nil {
				want = tc.args
			}
			if to != tc.to || (to != "" && !slices.Equal(argv, want)) || code != tc.code || !strings.Contains(out, tc.out) {
				t.Errorf("handed over to %q %q, exit %d, %q; want %q %q, exit %d, %q", to, argv, code, out, tc.to, want, tc.code, tc.out)
			}
			select {
			case req := <-got:
				if tc.request == nil {
					t.Errorf("the agent was asked: %q", req)
				} else if len(tc.request) > 0 && !slices.Equal(req, tc.request) {
					t.Errorf("the agent got %q, want %q", req, tc.request)
				}
			default:
				if tc.request != nil {
					t.Error("the agent was not asked")
				}
			}
		})
	}
}

// TestCEntryHooksAskTheAgent: the update-ldcache and poststop hooks go to
// the node agent with the container's state read from stdin; the agent's
// "ok" ends them, and where it leaves the hook ("fallback"), breaks off or
// is not there, gpumux-runtime-hook runs it with the same stdin. An
// update-ldcache hook run by runc's init sends no state and leaves stdin
// for gpumux-runtime-hook.
func TestCEntryHooksAskTheAgent(t *testing.T) {
	dir, err := entryDir()
	if err != nil {
		t.Fatal(err)
	}
	const state = `{"ociVersion":"1.2.0","id":"c1","status":"creating","bundle":"/b"}`
	ld := []string{"hook", ociruntime.HookUpdateLdcache, "/usr/local/nvidia/lib64"}
	post := []string{"hook", ociruntime.HookPoststop}
	request := func(state string, args []string) []string {
		return append([]string{"gpumux-hook/1", "/etc/gpumux/node.hcl", "/var/lib/g", filepath.Join(dir, ociruntime.EntryBinary), state}, args...)
	}
	for _, tc := range []struct {
		name     string
		answer   string // "-": no agent
		args     []string
		fromInit bool
		to       string
		code     int
		request  []string
		noStdin  bool // stdin empty, where it is the state
	}{
		{"done by the agent", "ok", ld, false, "", 0, request(state, ld), false},
		{"poststop done by the agent", "ok", post, false, "", 0, request(state, post), false},
		{"left to gpumux-runtime-hook", "fallback", ld, false, ociruntime.HookBinary, 0, request(state, ld), false},
		{"the agent breaks off", "", post, false, ociruntime.HookBinary, 0, nil, false},
		{"an answer it does not know", "maybe", ld, false, ociruntime.HookBinary, 0, nil, false},
		{"an error: left to gpumux-runtime-hook", "error gpumux agent: internal error", ld, false, ociruntime.HookBinary, 0, nil, false},
		{"no agent", "-", ld, false, ociruntime.HookBinary, 0, nil, false},
		{"from runc's init: done by the agent without the state", "ok", ld, true, "", 0, request("", ld), false},
		{"from runc's init: left to gpumux-runtime-hook, stdin unread", "fallback", ld, true, ociruntime.HookBinary, 0, request("", ld), false},
		{"from runc's init, no agent", "-", ld, true, ociruntime.HookBinary, 0, nil, false},
		{"poststop from runc's init: the state sent", "ok", post, true, "", 0, request(state, post), false},
		{"no state on stdin: gpumux-runtime-hook's, the agent not asked", "ok", ld, false, ociruntime.HookBinary, 0, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := []string{ociruntime.EnvStateDir + "=/var/lib/g"}
			var got chan []string
			if tc.answer != "-" {
				var socket string
				socket, got = agentStandIn(t, tc.answer)
				env = append(env, "GPUMUX_RUNTIME_SOCKET="+socket)
			}
			initDir := ""
			if tc.fromInit {
				initDir = t.TempDir()
			}
			in := state
			if tc.noStdin {
				in = ""
			}
			to, argv, code, out, stdin := routeWithStdin(t, in, initDir, tc.args, env...)
			if to != tc.to || code != tc.code || (to != "" && (!slices.Equal(argv, tc.args) || stdin != in)) {
				t.Errorf("handed over to %q %q with stdin %q, exit %d (%q); want %q, exit %d, stdin %q", to, argv, stdin, code, out, tc.to, tc.code, in)
			}
			switch {
			case tc.request != nil:
				if req := <-got; !slices.Equal(req, tc.request) {
					t.Errorf("the agent got %q, want %q", req, tc.request)
				}
			case tc.noStdin:
				select {
				case req := <-got:
					t.Errorf("the agent was asked: %q", req)
				default:
				}
			}
		})
	}
}
