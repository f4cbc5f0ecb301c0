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
// probe container through containerd, with plain runc (the baseline) and with
// gpumux-runtime leasing and injecting a whole GPU, in one run:
//
//	go test -tags 'e2e no_dynamic_plugins' -run '^$' -bench ContainerLifecycle -count 5 ./e2e/
func BenchmarkContainerLifecycle(b *testing.B) {
	ctx := context.Background()
	_, config := runtimeNode(b)
	d := ctrd.Start(ctx, b, ctrd.WithEnv("GPUMUX_CONFIG="+config))
	runtime := filepath.Join(repoRoot(b), "bin", "gpumux-runtime")
	for _, bc := range []struct {
		name string
		opts ctrd.RunOpts
	}{
		{"runc", ctrd.RunOpts{}},
		{"gpumux-runtime, no GPU asked", ctrd.RunOpts{BinaryName: runtime}},
		{"gpumux-runtime, whole GPU", ctrd.RunOpts{BinaryName: runtime, Annotations: map[string]string{"gpumux.io/mechanism": "exclusive"}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				res, err := d.Run(ctx, fmt.Sprintf("bench-%d", i), bc.opts)
				if err != nil || res.ExitCode != 0 {
					b.Fatalf("%v %+v", err, res)
				}
			}
		})
	}
}
