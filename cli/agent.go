package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/cobra"

	"github.com/gpumux/gpumux/node"
	"github.com/gpumux/gpumux/nodeconfig"
	"github.com/gpumux/gpumux/nri"
	"github.com/gpumux/gpumux/ocicreate"
	"github.com/gpumux/gpumux/share"
)

const agentHelp = `
Runs this node's GPUs on a node without Nomad (a containerd or Docker host,
a Kubernetes node with a RuntimeClass): the long-lived agent that the Nomad
plugin is on a Nomad node. It
  - applies the config's MIG layouts at start (as gpumux mig apply does:
    instances that containers hold are kept, a half-done change is undone);
  - runs one MPS control daemon per MPS GPU or MIG instance, restarts a dead
    one and drains one whose GPU left MPS (daemons outlive the agent and
    are adopted by the next);
  - watches XIDs, and re-reads the GPUs every fingerprint_period;
  - releases the leases of containers runc no longer knows;
  - serves Prometheus metrics at http://<metrics_addr>/metrics when the
    config sets metrics_addr;
  - serves an NRI plugin to containerd 1.7+/2.x when the config has an nri
    block: containers that ask by gpumux.io/* annotation or GPUMUX_* env
    get their shares with plain runc, no gpumux-runtime;
  - serves gpumux-runtime on a root-only socket (--runtime-socket): a
    create that asks for shares is decided here, in the process that has
    the node open, instead of in a gpumux-runtime-core started for it
    (which loads NVML for every create), and the update-ldcache and
    poststop hooks gpumux-runtime runs are done here.
gpumux-runtime, on the same node and with the same config, hands out the
shares (by itself where no agent answers). The agent and the Nomad plugin refuse to run one state_dir at once.
It runs until SIGINT or SIGTERM.

Exit codes: 0 stopped by a signal, 1 error (bad config, another agent runs
the node, the GPUs cannot be read), 2 bad flags.`

// agentOptions are gpumux agent's flags.
type agentOptions struct {
	config, runc, runcRoot, logLevel, runtimeSocket string
	health                                          time.Duration
}

func newAgentCmd(stderr io.Writer) *cobra.Command {
	var o agentOptions
	cmd := leaf("agent [--config FILE]", "run this node's GPUs without Nomad: MIG layout, MPS daemons, lease reclaim, metrics", agentHelp,
		func(ctx context.Context) int { return runAgent(ctx, &o, stderr) })
	fs := cmd.Flags()
	fs.StringVar(&o.config, "config", envOr("GPUMUX_CONFIG", nodeconfig.DefaultFile), "node config `FILE`: the same schema as the Nomad plugin's config body (env GPUMUX_CONFIG)")
	fs.StringVar(&o.runc, "runc", envOr("GPUMUX_RUNC", "runc"), "runc `BINARY` asked whether a leased container still exists (env GPUMUX_RUNC)")
	fs.StringVar(&o.runcRoot, "runc-root", "", "runc state `DIR` (runc --root) for leases that did not record theirs; default: runc's own")
	fs.StringVar(&o.logLevel, "log-level", "info", "log `LEVEL`: trace, debug, info, warn or error")
	fs.StringVar(&o.runtimeSocket, "runtime-socket", envOr(ocicreate.EnvSocket, ocicreate.DefaultSocket), "unix socket `PATH` on which gpumux-runtime asks this agent to prepare its creates and do its hooks (env "+ocicreate.EnvSocket+", which gpumux-runtime reads too; \"\" serves none)")
	fs.DurationVar(&o.health, "health-interval", 10*time.Second, "how often (a `DURATION`) each MPS daemon is probed")
	cmd.MarkFlagFilename("config", "hcl")
	cmd.RegisterFlagCompletionFunc("log-level", cobra.FixedCompletions([]string{"trace", "debug", "info", "warn", "error"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func runAgent(ctx context.Context, o *agentOptions, stderr io.Writer) int {
	level := hclog.LevelFromString(o.logLevel)
	if level == hclog.NoLevel {
		fmt.Fprintf(stderr, "gpumux agent: --log-level %q: want trace, debug, info, warn or error\n", o.logLevel)
		return ExitUsage
	}
	if o.health < 100*time.Millisecond {
		fmt.Fprintf(stderr, "gpumux agent: --health-interval %s: want at least 100ms\n", o.health)
		return ExitUsage
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "gpumux-agent", Level: level, Output: stderr})
	if err := agent(ctx, o, logger); err != nil {
		fmt.Fprintf(stderr, "gpumux agent: %v\n", err)
		return ExitError
	}
	return ExitOK
}

// agent runs the node until ctx ends.
func agent(ctx context.Context, o *agentOptions, logger hclog.Logger) error {
	configFile, err := filepath.Abs(o.config)
	if err != nil {
		return fmt.Errorf("node config: %w", err)
	}
	env := ocicreate.HookEnv(o.runtimeSocket) // what the containers' hooks need to find this agent
	src, err := os.ReadFile(configFile)
	if err != nil {
		return fmt.Errorf("node config: %w (set --config or GPUMUX_CONFIG)", err)
	}
	cfg, err := nodeconfig.ParseConfig(src)
	if err != nil {
		return fmt.Errorf("%s: %w", configFile, err)
	}
	n, err := node.Open(cfg, node.WithLogger(logger), node.WithIssuer("agent"), node.WithHealthInterval(o.health), node.WithHookEnv(env...))
	if err != nil {
		return err
	}
	defer n.Close()
	if err := n.Start(ctx, "gpumux agent"); err != nil {
		return err
	}
	if cfg.MetricsAddr != "" {
		addr, err := node.ServeMetrics(ctx, cfg.MetricsAddr, n.Collectors()...)
		if err != nil {
			return err
		}
		logger.Info("serving metrics", "url", fmt.Sprintf("http://%s/metrics", addr))
	}
	logger.Info("running the node", "config", configFile, "state_dir", cfg.StateDir, "period", cfg.Period())
	alive := node.RuncAlive(ctx, o.runc, o.runcRoot)
	if o.runtimeSocket != "" {
		ln, err := ocicreate.Listen(o.runtimeSocket)
		if err != nil {
			logger.Warn("not serving gpumux-runtime: its creates start gpumux-runtime-core", "error", err)
		} else {
			srv := ocicreate.NewServer(n, configFile, cfg.StateDir, alive, ocicreate.WithLogger(logger.Named("runtime")), ocicreate.WithHookEnv(env...))
			done := make(chan struct{})
			go func() {
				defer close(done)
				if err := srv.Serve(ctx, ln); err != nil {
					logger.Error("serving gpumux-runtime stopped", "error", err)
				}
			}()
			defer func() { <-done }()
			logger.Info("serving gpumux-runtime", "socket", o.runtimeSocket)
		}
	}
	if cfg.NRI != nil && cfg.NRI.Enabled {
		// The NRI plugin's leases carry their own runc root (the CRI
		// containers'), which alive uses.
		p := nri.New(n, cfg.StateDir, *cfg.NRI, alive, nri.WithLogger(logger.Named("nri")))
		done := make(chan struct{})
		go func() { defer close(done); p.Run(ctx, nriRetry) }()
		defer func() { <-done }()
	}
	var last string
	for u := range n.Watch(ctx, cfg.Period()) {
		if u.Err != nil {
			logger.Error("cannot read the node; the shares keep their last state", "error", u.Err)
			continue
		}
		if s := summary(u.Catalog); s != last {
			logger.Info("shares", "groups", s)
			last = s
		}
		n.ReclaimLogged(ctx, alive)
	}
	logger.Info("stopping; MPS daemons and MIG instances stay for the next agent")
	return nil
}

// nriRetry is how often the agent tries to reach a runtime's NRI socket
// that is not there.
const nriRetry = time.Second

// summary lists a catalog's groups with their share counts.
func summary(c *share.Catalog) string {
	parts := make([]string, len(c.Groups))
	for i, g := range c.Groups {
		parts[i] = fmt.Sprintf("%d× %s", len(g.Shares), g.Name)
	}
	return strings.Join(parts, ", ")
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
