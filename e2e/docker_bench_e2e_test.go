//go:build e2e

package e2e

import (
	"context"
	"testing"
)

// BenchmarkDockerRun measures `docker run --rm` of the probe image on a
// private Docker engine: through plain runc (the baseline), and through
// gpumux-runtime for a container that asks for nothing and for one share of
// each mechanism (mechanismVariants, asked for by GPUMUX_MECHANISM) of a
// simulated H200 node, interleaved in one run. It reports runc's
// milliseconds per container and each gpumux-runtime variant as a ratio to
// it:
//
//	go test -tags 'e2e no_dynamic_plugins' -run '^$' -bench DockerRun -benchtime 10x -count 5 ./e2e/
func BenchmarkDockerRun(b *testing.B) {
	ctx := context.Background()
	_, config := runtimeNode(b)
	d := startDocker(b, ctx, config)
	image, err := d.ProbeImage(ctx)
	if err != nil {
		b.Fatal(err)
	}
	args := [][]string{nil}
	var names []string
	for _, v := range mechanismVariants {
		names = append(names, v.name)
		a := []string{"--runtime", "gpumux"}
		if v.mechanism != "" {
			a = append(a, "-e", "GPUMUX_MECHANISM="+v.mechanism)
		}
		args = append(args, a)
	}
	benchInterleaved(b, names, func(_, j int) error {
		_, _, err := d.Docker(ctx, append(append([]string{"run", "--rm"}, args[j]...), image)...)
		return err
	})
}
