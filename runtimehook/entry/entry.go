package entry

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpumux/gpumux/internal/version"
	"github.com/gpumux/gpumux/node/lease"
)

// Binary names: gpumux-runtime is this entry, gpumux-runtime-core the
// runtime with the node core, installed in the same directory.
const (
	EntryBinary = "gpumux-runtime"
	CoreBinary  = "gpumux-runtime-core"
)

// Environment of gpumux-runtime and its hooks.
const (
	EnvRunc     = "GPUMUX_RUNC"      // runc binary (default "runc" on PATH)
	EnvStateDir = "GPUMUX_STATE_DIR" // overrides the node config's state_dir
)

// The hooks this entry runs itself: update-ldcache (`hook update-ldcache
// DIR...`; node.HookUpdateLdcache is the same name), and poststop when its
// environment names the state directory (the core's hooks do), which is
// all it needs to release the container's leases.
const (
	HookUpdateLdcache = "update-ldcache"
	HookPoststop      = "poststop"
)

// AnnotationPrefix is the prefix of gpumux's annotations. Any annotation
// under it is a request (an unknown one is refused by the core).
const AnnotationPrefix = "gpumux.io/"

// RequestEnv are the process environment variables that make a request
// (node.ParseRequest reads them; other GPUMUX_* are not requests).
var RequestEnv = []string{"GPUMUX_MECHANISM", "GPUMUX_MEMORY", "GPUMUX_COMPUTE", "GPUMUX_ISOLATION", "GPUMUX_GPUS", "GPUMUX_SHARES"}

// Asks says whether a container with these annotations and process env
// ("K=V" entries) asks gpumux for anything: an annotation under
// AnnotationPrefix or a variable of RequestEnv, set to anything (even
// malformed: the core refuses it with the reason). A container that asks
// for nothing goes to runc untouched.
func Asks(annotations map[string]string, env []string) bool {
	for k := range annotations {
		if strings.HasPrefix(k, AnnotationPrefix) {
			return true
		}
	}
	for _, kv := range env {
		if !strings.HasPrefix(kv, "GPUMUX_") {
			continue
		}
		name, _, _ := strings.Cut(kv, "=")
		for _, e := range RequestEnv {
			if name == e {
				return true
			}
		}
	}
	return false
}

// Main is gpumux-runtime's command line: runc's, `hook <name> [args]`, and
// a leading `--config FILE` for the core. It hands the call over with exec
// and returns only when it did the work itself (the update-ldcache hook, the
// poststop hook) or could not hand over; the result is the exit code.
func Main(ctx context.Context, args []string, stdin io.Reader, stderr io.Writer) int {
	return handler{exec: syscall.Exec, corePath: CorePath, stderr: stderr}.main(ctx, args, stdin)
}

// handler is Main with how it hands over and where the core is, for tests.
type handler struct {
	exec     func(path string, argv, env []string) error
	corePath func() (string, error)
	stderr   io.Writer
}

func (h handler) main(ctx context.Context, args []string, stdin io.Reader) int {
	runcArgs := args
	if len(args) >= 2 && args[0] == "--config" {
		runcArgs = args[2:]
	}
	if len(runcArgs) >= 1 && runcArgs[0] == "hook" {
		switch {
		case len(runcArgs) >= 2 && runcArgs[1] == HookUpdateLdcache:
			return h.updateLdcache(ctx, runcArgs[2:], stdin)
		case len(runcArgs) == 2 && runcArgs[1] == HookPoststop && os.Getenv(EnvStateDir) != "":
			return h.poststop(ctx, os.Getenv(EnvStateDir), stdin)
		}
		return h.core(args)
	}
	if len(runcArgs) == 1 && (runcArgs[0] == "--version" || runcArgs[0] == "-v") {
		// gpumux's version, then runc's (Docker reads runc's lines).
		fmt.Fprintln(os.Stdout, "gpumux-runtime", version.String())
	}
	inv := ParseInvocation(runcArgs)
	if inv.Subcommand == "create" && bundleAsks(inv.Bundle) {
		return h.core(args)
	}
	return h.runc(runcArgs)
}

// bundleAsks says whether the bundle's config.json asks for anything. A
// spec it cannot read or decode is the core's to report: it says true.
func bundleAsks(bundle string) bool {
	raw, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		return true
	}
	var spec struct {
		Annotations map[string]string `json:"annotations"`
		Process     *struct {
			Env []string `json:"env"`
		} `json:"process"`
	}
	if err := json.Unmarshal(raw, &spec); err != nil {
		return true
	}
	var env []string
	if spec.Process != nil {
		env = spec.Process.Env
	}
	return Asks(spec.Annotations, env)
}

// runc replaces this process with runc.
func (h handler) runc(args []string) int {
	name := os.Getenv(EnvRunc)
	if name == "" {
		name = "runc"
	}
	path, err := exec.LookPath(name)
	if err != nil {
		fmt.Fprintf(h.stderr, "%s: runc: %v\n", EntryBinary, err)
		return 127
	}
	return h.handOver(path, args)
}

// core replaces this process with gpumux-runtime-core, given the same
// arguments.
func (h handler) core(args []string) int {
	path, err := h.corePath()
	if err != nil {
		fmt.Fprintf(h.stderr, "%s: %v\n", EntryBinary, err)
		return 127
	}
	return h.handOver(path, args)
}

func (h handler) handOver(path string, args []string) int {
	err := h.exec(path, append([]string{path}, args...), os.Environ())
	fmt.Fprintf(h.stderr, "%s: exec %s: %v\n", EntryBinary, path, err)
	return 127
}

// CorePath is gpumux-runtime-core beside this executable.
func CorePath() (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("finding %s: %w", CoreBinary, err)
	}
	path := filepath.Join(filepath.Dir(self), CoreBinary)
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("%s must be installed beside %s: %w", CoreBinary, self, err)
	}
	return path, nil
}

// updateLdcache runs the update-ldcache hook on the container state on
// stdin.
func (h handler) updateLdcache(ctx context.Context, dirs []string, stdin io.Reader) int {
	st, err := DecodeState(stdin)
	if err == nil {
		err = UpdateLdcache(ctx, st, dirs)
		if err != nil {
			err = fmt.Errorf("container %s: %w", st.ID, err)
		}
	}
	if err != nil {
		fmt.Fprintf(h.stderr, "%s hook %s: %v\n", EntryBinary, HookUpdateLdcache, err)
		return 1
	}
	return 0
}

// poststop runs the poststop hook: the container's leases in the lease
// store of stateDir are released.
func (h handler) poststop(ctx context.Context, stateDir string, stdin io.Reader) int {
	err := func() error {
		st, err := DecodeState(stdin)
		if err != nil {
			return err
		}
		path := lease.PathIn(stateDir)
		s, err := lease.Open(path)
		if err != nil {
			return fmt.Errorf("opening the lease store %s: %w", path, err)
		}
		defer s.Close()
		if _, err := s.Release(ctx, st.ID); err != nil {
			return fmt.Errorf("container %s: %w", st.ID, err)
		}
		return nil
	}()
	if err != nil {
		fmt.Fprintf(h.stderr, "%s hook %s: %v\n", EntryBinary, HookPoststop, err)
		return 1
	}
	return 0
}

// DecodeState reads the container state runc gives a hook on stdin.
func DecodeState(stdin io.Reader) (specs.State, error) {
	var st specs.State
	if err := json.NewDecoder(io.LimitReader(stdin, 1<<20)).Decode(&st); err != nil {
		return st, fmt.Errorf("decoding the container state: %w", err)
	}
	if st.ID == "" {
		return st, fmt.Errorf("the container state has no id")
	}
	return st, nil
}
