//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/gpumux/gpumux/e2e/ctrd"
)

// BenchmarkContainerLifecycle measures create+start+wait+delete of the same
// probe container through containerd: with plain runc (the baseline), and
// through gpumux-runtime for a container that asks for nothing and for one
// share of each mechanism (mechanismVariants) of a simulated H200 node,
// interleaved in one run. It reports runc's milliseconds per container and
// each gpumux-runtime variant as a ratio to it:
//
//	go test -tags 'e2e no_dynamic_plugins' -run '^$' -bench ContainerLifecycle -benchtime 20x -count 5 ./e2e/
func BenchmarkContainerLifecycle(b *testing.B) {
	ctx := context.Background()
	_, config := runtimeNode(b)
	d := ctrd.Start(ctx, b, ctrd.WithEnv("GPUMUX_CONFIG="+config))
	runtime := filepath.Join(repoRoot(b), "bin", "gpumux-runtime")
	opts := []ctrd.RunOpts{{}}
	for _, v := range mechanismVariants {
		o := ctrd.RunOpts{BinaryName: runtime}
		if v.mechanism != "" {
			o.Annotations = map[string]string{"gpumux.io/mechanism": v.mechanism}
		}
		opts = append(opts, o)
	}
	benchInterleaved(b, func(i, j int) error {
		res, err := d.Run(ctx, fmt.Sprintf("bench-%d-%d", j, i), opts[j])
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("exit %d: %+v", res.ExitCode, res)
		}
		return err
	})
}
