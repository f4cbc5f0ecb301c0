//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpumux/gpumux/e2e/ctrd"
	"github.com/gpumux/gpumux/ocicreate"
)

// EnvBenchRuntimeBefore names another gpumux-runtime (an earlier build) that
// BenchmarkContainerLifecycle also runs, asking for nothing and for a whole
// GPU ("before-no-GPU/runc", "before-exclusive/runc"), for a before and
// after in one run.
const EnvBenchRuntimeBefore = "GPUMUX_BENCH_RUNTIME_BEFORE"

// BenchmarkContainerLifecycle measures create+start+wait+delete of the same
// probe container through containerd: with plain runc (the baseline), and
// through gpumux-runtime for a container that asks for nothing and for one
// share of each mechanism (mechanismVariants) of a simulated H200 node,
// its create decided by gpumux-runtime-core, and for each share again with
// gpumux agent serving gpumux-runtime ("agent-exclusive", ...: the agent
// decides), interleaved in one run; the agent's socket is renamed away for
// the variants through the core, as on a node without an agent. It reports
// runc's median milliseconds per container and each gpumux-runtime
// variant's median as a ratio to it:
//
//	go test -tags 'e2e no_dynamic_plugins' -run '^$' -bench ContainerLifecycle -benchtime 10x -count 5 ./e2e/
func BenchmarkContainerLifecycle(b *testing.B) {
	ctx := context.Background()
	_, config := runtimeNode(b)
	_, socket := agentRuntimeSocket(b, ctx, config)
	d := ctrd.Start(ctx, b, ctrd.WithEnv("GPUMUX_CONFIG="+config), ctrd.WithEnv(ocicreate.EnvSocket+"="+socket))
	runtime := filepath.Join(repoRoot(b), "bin", "gpumux-runtime")
	type variant struct {
		name, mechanism, runtime string
		agent                    bool
	}
	var variants []variant
	for _, v := range mechanismVariants {
		variants = append(variants, variant{v.name, v.mechanism, runtime, false})
	}
	for _, v := range mechanismVariants[1:] {
		variants = append(variants, variant{"agent-" + v.name, v.mechanism, runtime, true})
	}
	if before := os.Getenv(EnvBenchRuntimeBefore); before != "" {
		variants = append(variants, variant{"before-no-GPU", "", before, false}, variant{"before-exclusive", "exclusive", before, false})
	}
	opts := []ctrd.RunOpts{{}}
	agent := []bool{false}
	var names []string
	for _, v := range variants {
		o := ctrd.RunOpts{BinaryName: v.runtime}
		if v.mechanism != "" {
			o.Annotations = map[string]string{"gpumux.io/mechanism": v.mechanism}
		}
		opts = append(opts, o)
		agent = append(agent, v.agent)
		names = append(names, v.name)
	}
	sw := agentSwitch{socket}
	benchInterleaved(b, names, func(i, j int) error {
		if err := sw.use(agent[j]); err != nil {
			return err
		}
		res, err := d.Run(ctx, fmt.Sprintf("bench-%d-%d", j, i), opts[j])
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("exit %d: %+v", res.ExitCode, res)
		}
		return err
	})
}
