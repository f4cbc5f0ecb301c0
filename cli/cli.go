package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/gpumux/gpumux/internal/version"
	"github.com/gpumux/gpumux/node"
	"github.com/gpumux/gpumux/nodeconfig"
)

// Exit codes.
const (
	ExitOK    = 0
	ExitError = 1 // the command failed
	ExitUsage = 2 // bad flags or arguments
)

const usage = `gpumux — operate GPU sharing on this node

Usage:
  gpumux agent [--config FILE]
                            run this node's GPUs without Nomad: MIG layout, MPS daemons, lease reclaim, metrics
  gpumux status [flags]     GPUs, MIG instances and the shares the node offers
  gpumux cdi generate       a CDI spec with one device per share, for CDI-native engines
  gpumux mig plan|apply|assert|export
                            MIG layouts from a file: plan, apply and check them, export the node's
  gpumux remote secret|token
                            a pool secret for remote GPUs, a token for gpumux-remoted
  gpumux runtime configure --runtime=docker|containerd
                            register gpumux-runtime with Docker or containerd as the runtime "gpumux"
  gpumux repair [--dry-run] rebuild a damaged lease store from the containers that still run
  gpumux version            print the version

Run 'gpumux <command> -h' for the flags of a command.
`

// Run runs the gpumux command line and returns its exit code.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return ExitUsage
	}
	switch args[0] {
	case "agent":
		return runAgent(ctx, args[1:], stdout, stderr)
	case "status":
		return runStatus(ctx, args[1:], stdout, stderr)
	case "cdi":
		return runCDI(ctx, args[1:], stdout, stderr)
	case "mig":
		return runMIG(ctx, args[1:], stdout, stderr)
	case "remote":
		return runRemote(ctx, args[1:], stdout, stderr)
	case "runtime":
		return runRuntime(ctx, args[1:], stdout, stderr)
	case "repair":
		return runRepair(ctx, args[1:], stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, "gpumux", version.String())
		return ExitOK
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return ExitOK
	default:
		fmt.Fprintf(stderr, "gpumux: unknown command %q\n\n%s", args[0], usage)
		return ExitUsage
	}
}

// nodeFlags are the flags every command that reads GPUs takes.
type nodeFlags struct {
	simulate   string
	stateDir   string
	configFile string
}

func (n *nodeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&n.simulate, "simulate", os.Getenv("GPUMUX_SIMULATE"), "use the simulated node `NAME` (dgxa100, dgxh100, dgxh200) instead of the real GPUs (env GPUMUX_SIMULATE)")
	fs.StringVar(&n.stateDir, "state-dir", os.Getenv("GPUMUX_STATE_DIR"), "gpumux state `DIR`, shared with the plugin (env GPUMUX_STATE_DIR; default: the config's state_dir, else "+nodeconfig.DefaultStateDir+")")
	fs.StringVar(&n.configFile, "config", os.Getenv("GPUMUX_CONFIG"), "node config `FILE` (the plugin block's config body, HCL) to show shares under its layout (env GPUMUX_CONFIG)")
}

// config reads the node config (if any); flags override the file's
// simulate and state_dir.
func (n *nodeFlags) config() (*nodeconfig.Config, error) {
	cfg := &nodeconfig.Config{StateDir: nodeconfig.DefaultStateDir}
	if n.configFile != "" {
		src, err := os.ReadFile(n.configFile)
		if err != nil {
			return nil, err
		}
		if cfg, err = nodeconfig.ParseConfig(src); err != nil {
			return nil, fmt.Errorf("%s: %w", n.configFile, err)
		}
	}
	if n.simulate != "" {
		cfg.Simulate = n.simulate
	}
	if n.stateDir != "" {
		cfg.StateDir = n.stateDir
	}
	return cfg, nil
}

// open reads the node config and opens the node it names.
func (n *nodeFlags) open(opts ...node.Option) (*node.Node, error) {
	cfg, err := n.config()
	if err != nil {
		return nil, err
	}
	return node.Open(cfg, opts...)
}

// writeJSON writes v as indented JSON, the form --output json gives scripts.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// parseFlags parses a command's flags; it returns an exit code when the
// command should stop (help asked, or bad flags).
func parseFlags(fs *flag.FlagSet, args []string, stderr io.Writer) (int, bool) {
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK, false
		}
		return ExitUsage, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "gpumux %s: unexpected arguments %v\n", fs.Name(), fs.Args())
		return ExitUsage, false
	}
	return ExitOK, true
}
