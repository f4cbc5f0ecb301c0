package entry

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpumux/gpumux/internal/ociruntime"
	"github.com/gpumux/gpumux/internal/version"
	"github.com/gpumux/gpumux/node/lease"
)

// Main is gpumux-runtime-hook's command line: `hook update-ldcache [--link
// LINK=TARGET]... DIR...`,
// `hook poststop` (GPUMUX_STATE_DIR names the lease store) and `--version`.
// gpumux-runtime hands it these hooks; the others are the core's. The
// result is the exit code.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 1 && (args[0] == "--version" || args[0] == "-v"):
		fmt.Fprintln(stdout, ociruntime.HookBinary, version.String())
		return 0
	case len(args) >= 2 && args[0] == "hook" && args[1] == ociruntime.HookUpdateLdcache:
		return updateLdcache(ctx, args[2:], stdin, stderr)
	case len(args) == 2 && args[0] == "hook" && args[1] == ociruntime.HookPoststop:
		dir := os.Getenv(ociruntime.EnvStateDir)
		if dir == "" {
			fmt.Fprintf(stderr, "%s hook %s: %s is not set: it names the state directory of the lease store\n", ociruntime.HookBinary, ociruntime.HookPoststop, ociruntime.EnvStateDir)
			return 2
		}
		return poststop(ctx, dir, stdin, stderr)
	}
	fmt.Fprintf(stderr, "%s: usage: %s hook %s | hook %s | --version (got %q; the other hooks are %s's)\n",
		ociruntime.HookBinary, ociruntime.HookBinary, UpdateLdcacheUsage, ociruntime.HookPoststop, args, ociruntime.CoreBinary)
	return 2
}

// updateLdcache runs the update-ldcache hook on the container state on
// stdin.
func updateLdcache(ctx context.Context, args []string, stdin io.Reader, stderr io.Writer) int {
	st, err := DecodeState(stdin)
	if err == nil {
		err = UpdateLdcache(ctx, st, args)
		if err != nil {
			err = fmt.Errorf("container %s: %w", st.ID, err)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s hook %s: %v\n", ociruntime.HookBinary, ociruntime.HookUpdateLdcache, err)
		return 1
	}
	return 0
}

// poststop runs the poststop hook: the container's leases in the lease
// store of stateDir are released.
func poststop(ctx context.Context, stateDir string, stdin io.Reader, stderr io.Writer) int {
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
		fmt.Fprintf(stderr, "%s hook %s: %v\n", ociruntime.HookBinary, ociruntime.HookPoststop, err)
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
