//go:build e2e

package e2e

import (
	"context"
	"maps"
	"slices"
	"testing"

	"github.com/gpumux/gpumux/e2e/dockerd"
	"github.com/gpumux/gpumux/ocicreate"
)

// BenchmarkDockerRun measures `docker run --rm` of the probe image on a
// private Docker engine: through plain runc (the baseline), and through
// gpumux-runtime for a container that asks for nothing and for one share of
// each mechanism (mechanismVariants, asked for by GPUMUX_MECHANISM) of a
// simulated H200 node, its create decided by gpumux-runtime-core, and for
// each share again with gpumux agent serving gpumux-runtime ("agent-…"),
// interleaved in one run. It reports runc's median milliseconds per
// container and each gpumux-runtime variant's median as a ratio to it:
//
//	go test -tags 'e2e no_dynamic_plugins' -run '^$' -bench DockerRun -benchtime 10x -count 5 ./e2e/
func BenchmarkDockerRun(b *testing.B) {
	ctx := context.Background()
	_, config := runtimeNode(b)
	_, socket := agentRuntimeSocket(b, ctx, config)
	benchDocker(b, ctx, startDocker(b, ctx, config, ocicreate.EnvSocket+"="+socket), socket, nil)
}

// BenchmarkDockerCDIRun is BenchmarkDockerRun on Docker 26 (startDockerCDI),
// with two more ways beside gpumux-runtime's, without any wrapper: the CDI
// devices of a whole GPU and of a time-slice replica (`docker run --device
// gpumux.io/share=…`), which the engine applies itself with plain runc,
// their hooks done by the agent:
//
//	go test -tags 'e2e no_dynamic_plugins' -run '^$' -bench DockerCDIRun -benchtime 10x -count 5 ./e2e/
func BenchmarkDockerCDIRun(b *testing.B) {
	ctx := context.Background()
	_, config := runtimeNode(b)
	_, socket := agentRuntimeSocket(b, ctx, config)
	d, specDir := startDockerCDI(b, ctx, config, ocicreate.EnvSocket+"="+socket)
	devs := writeCDISpec(b, ctx, config, specDir, "gpumux-runtime", ocicreate.EnvSocket+"="+socket)
	cdi := map[string][]string{}
	for _, m := range []string{"exclusive", "timeslice"} {
		if devs[m] == "" {
			b.Fatalf("the CDI spec has no %s device: %v", m, devs)
		}
		cdi["cdi-"+m] = []string{"--device", devs[m]}
	}
	benchDocker(b, ctx, d, socket, cdi)
}

// benchDocker runs the probe image on d, interleaved: plain runc (the
// baseline), gpumux-runtime asking for nothing and for each mechanism,
// through the core and through the agent serving socket, and the extra
// ways (name → docker run's arguments), which have the agent.
func benchDocker(b *testing.B, ctx context.Context, d *dockerd.Daemon, socket string, extra map[string][]string) {
	image, err := d.ProbeImage(ctx)
	if err != nil {
		b.Fatal(err)
	}
	args := [][]string{nil}
	agent := []bool{false}
	var names []string
	add := func(name string, withAgent bool, a []string) {
		names, args, agent = append(names, name), append(args, a), append(agent, withAgent)
	}
	for _, v := range mechanismVariants {
		a := []string{"--runtime", "gpumux"}
		if v.mechanism != "" {
			a = append(a, "-e", "GPUMUX_MECHANISM="+v.mechanism)
			add("agent-"+v.name, true, a)
		}
		add(v.name, false, a)
	}
	for _, name := range slices.Sorted(maps.Keys(extra)) {
		add(name, true, extra[name])
	}
	sw := agentSwitch{socket}
	benchInterleaved(b, names, func(_, j int) error {
		if err := sw.use(agent[j]); err != nil {
			return err
		}
		_, _, err := d.Docker(ctx, append(append([]string{"run", "--rm"}, args[j]...), image)...)
		return err
	})
}
