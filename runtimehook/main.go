package runtimehook

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/gpumux/gpumux/internal/ociruntime"
	"github.com/gpumux/gpumux/internal/version"
	"github.com/gpumux/gpumux/nodeconfig"
)

// Main is gpumux-runtime's command line: runc's, plus `hook <name> [args]`
// for the hooks it adds (HookUsage), and a leading `--config FILE` of its own;
// `--version` prints gpumux's version before runc's. It returns the exit code.
func Main(ctx context.Context, args []string, stdin io.Reader, stderr io.Writer) int {
	cfgPath := os.Getenv(EnvConfig)
	if len(args) >= 2 && args[0] == "--config" {
		cfgPath, args = args[1], args[2:]
	}
	if cfgPath == "" {
		cfgPath = nodeconfig.DefaultFile
	}
	load := func() (*nodeconfig.Config, error) { return loadConfig(cfgPath) }
	opts := []Option{WithStderr(stderr)}
	if runc := os.Getenv(ociruntime.EnvRunc); runc != "" {
		opts = append(opts, WithRunc(runc))
	}
	r := New(load, opts...)
	if len(args) == 1 && (args[0] == "--version" || args[0] == "-v") {
		// gpumux's version, then runc's (as gpumux-runtime prints them).
		fmt.Println(ociruntime.CoreBinary, version.String())
	}
	if len(args) >= 1 && args[0] == "hook" {
		if len(args) < 2 {
			fmt.Fprintf(stderr, "gpumux-runtime: usage: %s\n", HookUsage)
			return 2
		}
		if err := r.Hook(ctx, args[1], args[2:], stdin); err != nil {
			fmt.Fprintf(stderr, "gpumux-runtime hook %s: %v\n", args[1], err)
			return 1
		}
		return 0
	}
	return r.Run(ctx, args)
}

// loadConfig reads the node config file; GPUMUX_STATE_DIR overrides its
// state_dir.
func loadConfig(path string) (*nodeconfig.Config, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("node config: %w (set --config or %s)", err, EnvConfig)
	}
	cfg, err := nodeconfig.ParseConfig(src)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if dir := os.Getenv(ociruntime.EnvStateDir); dir != "" {
		cfg.StateDir = dir
	}
	return cfg, nil
}
