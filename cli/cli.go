package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

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

// exitCode ends a command with a code; what went wrong was said already.
type exitCode int

func (c exitCode) Error() string { return fmt.Sprintf("exit status %d", int(c)) }

// exit turns a command's exit code into what its RunE returns.
func exit(code int) error {
	if code == ExitOK {
		return nil
	}
	return exitCode(code)
}

// Run runs the gpumux command line and returns its exit code.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRootCmd(stdout, stderr)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	var code exitCode
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &code):
		return int(code)
	default: // the command line itself: an unknown command or flag, a bad value
		fmt.Fprintf(stderr, "%s: %v\nRun '%s --help' for usage.\n", cmd.CommandPath(), err, cmd.CommandPath())
		return ExitUsage
	}
}

// newRootCmd is the gpumux command with every verb under it.
func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "gpumux",
		Short: "operate GPU sharing on this node",
		Long: `gpumux operates GPU sharing on this node: it shows the GPUs and the
shares the node offers, applies MIG layouts, writes CDI specs, registers
gpumux-runtime with container engines, makes remote GPU secrets and tokens,
repairs the lease store, and runs the node without Nomad (gpumux agent).

Commands that print state take -o table|json|yaml|wide; their JSON and YAML
keys are snake_case (docs/cli.md lists them). Colours only on a terminal,
never with NO_COLOR set.`,
		Version:       version.String(),
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          cobra.NoArgs,
		RunE:          usageOnly,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetVersionTemplate("gpumux {{.Version}}\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return err })
	root.AddCommand(
		newAgentCmd(stderr),
		newStatusCmd(stdout, stderr),
		newCDICmd(stdout, stderr),
		newMIGCmd(stdout, stderr),
		newRemoteCmd(stdout, stderr),
		newRuntimeCmd(stdout, stderr),
		newRepairCmd(stdout, stderr),
		&cobra.Command{
			Use:   "version",
			Short: "print the version",
			Args:  noArgs,
			Run:   func(*cobra.Command, []string) { fmt.Fprintln(stdout, "gpumux", version.String()) },
		},
	)
	return root
}

// usageOnly is the RunE of a command that only groups others: run alone it
// prints its usage on stderr and exits 2.
func usageOnly(cmd *cobra.Command, _ []string) error {
	cmd.SetOut(cmd.ErrOrStderr())
	cmd.Usage()
	return exitCode(ExitUsage)
}

// group is a command that only holds subcommands.
func group(use, short string, subs ...*cobra.Command) *cobra.Command {
	c := &cobra.Command{Use: use, Short: short, Args: cobra.NoArgs, RunE: usageOnly}
	c.AddCommand(subs...)
	return c
}

// leaf is a command that takes flags but no arguments; run gets the
// command's context and returns an exit code.
func leaf(use, short, long string, run func(ctx context.Context) int) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Long:  strings.TrimSpace(long),
		Args:  noArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return exit(run(cmd.Context())) },
	}
}

// noArgs refuses arguments: a command that only takes flags.
func noArgs(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("unexpected arguments %q", args)
	}
	return nil
}

// nodeFlags are the flags every command that reads GPUs takes.
type nodeFlags struct {
	simulate   string
	stateDir   string
	configFile string
}

// simulatedNodes are the names --simulate takes.
var simulatedNodes = []string{"dgxa100", "dgxh100", "dgxh200"}

func (n *nodeFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&n.simulate, "simulate", os.Getenv("GPUMUX_SIMULATE"), "use the simulated node `NAME` ("+strings.Join(simulatedNodes, ", ")+") instead of the real GPUs (env GPUMUX_SIMULATE)")
	fs.StringVar(&n.stateDir, "state-dir", os.Getenv("GPUMUX_STATE_DIR"), "gpumux state `DIR`, shared with the plugin (env GPUMUX_STATE_DIR; default: the config's state_dir, else "+nodeconfig.DefaultStateDir+")")
	fs.StringVar(&n.configFile, "config", os.Getenv("GPUMUX_CONFIG"), "node config `FILE` (the plugin block's config body, HCL) to show shares under its layout (env GPUMUX_CONFIG)")
	cmd.RegisterFlagCompletionFunc("simulate", cobra.FixedCompletions(simulatedNodes, cobra.ShellCompDirectiveNoFileComp))
	cmd.MarkFlagFilename("config", "hcl")
	cmd.MarkFlagDirname("state-dir")
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

// nomadFlag registers --nomad, the node's Nomad agent asked who holds what.
func nomadFlag(fs *pflag.FlagSet, what string) *string {
	return fs.String("nomad", os.Getenv("NOMAD_ADDR"), "`ADDR` of the node's Nomad agent, asked which live allocations hold "+what+" (env NOMAD_ADDR, token NOMAD_TOKEN; default "+node.DefaultNomadAddr+", skipped with a note where no agent listens there); off: do not ask")
}

// askNomad is what --nomad addr says to ask.
func askNomad(addr string) node.HoldersOption { return node.AskNomad(addr, addr != "") }
