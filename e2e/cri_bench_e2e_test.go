//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumux/gpumux/e2e/ctrd"
	"github.com/gpumux/gpumux/ocicreate"
)

// BenchmarkCRILifecycle measures create+start+wait+remove of the probe
// container through containerd 2.x's CRI, each way of giving it a share,
// interleaved in one run: plain runc asking for nothing (the baseline),
// gpumux-runtime (a runtime class) asking for nothing, for a time-slice
// replica and for a whole GPU, through gpumux-runtime-core (the agent's
// socket renamed away, as on a node without an agent: "runtime-*") and
// through gpumux agent ("agent-*"), the CDI devices of a time-slice replica and
// of a whole GPU applied by containerd itself, and a time-slice replica and
// a whole GPU leased by gpumux agent's NRI plugin; the replicas with the
// limiter. The NRI plugin is connected for the whole run, so every
// container, the baseline's too, passes through it. Interleaved with them,
// the time-slice replica's CDI device taken apart (cdiAblations: without
// its hook, mounts, device nodes, env only, and other ways tried out:
// cdi_ablation_e2e_test.go), applied by containerd with plain runc
// ("cdi-no-hooks", ...). It reports runc's median milliseconds per
// container and each other way's median as a ratio to it; e2e/benchratio
// pools the counts (GPUMUX_BENCH_SAMPLES; docs/benchmarks.md):
//
//	go test -tags 'e2e no_dynamic_plugins' -run '^$' -bench CRILifecycle -benchtime 30x -count 7 ./e2e/
func BenchmarkCRILifecycle(b *testing.B) {
	ctx := context.Background()
	_, config := runtimeNode(b)
	runtime := filepath.Join(repoRoot(b), "bin", "gpumux-runtime")
	socket := runtimeSocketPath(b)
	d := startContainerd2(b, ctx, config, ctrd.WithNRI(), ctrd.WithRuntimeClass("gpumux", runtime), ctrd.WithEnv(ocicreate.EnvSocket+"="+socket))
	// The agent serves the NRI plugin, gpumux-runtime's creates and the
	// hooks gpumux-runtime runs (the CDI devices' and the NRI plugin's
	// name it): its socket for the hooks' environment. It answers
	// gpumux-runtime only for the config file gpumux-runtime reads, so the
	// NRI block goes into that file.
	nri, err := os.ReadFile(withNRI(b, config, d))
	if err == nil {
		err = os.WriteFile(config, nri, 0o644)
	}
	if err != nil {
		b.Fatal(err)
	}
	a := serveRuntimeSocket(b, ctx, config, socket)
	waitFor(b, ctx, 30*time.Second, "gpumux agent's NRI plugin", func() (bool, string) {
		return strings.Contains(a.log.String(), "serving NRI"), a.log.String()
	})
	devs := writeCDISpec(b, ctx, config, d.CDISpecDir, "gpumux-runtime", ocicreate.EnvSocket+"="+socket)
	dev, whole := devs["timeslice"], devs["exclusive"]
	if dev == "" || whole == "" {
		b.Fatalf("the CDI spec lacks a time-slice replica or a whole GPU: %v", devs)
	}
	runcPod, err := d.RunPod(ctx, "runc", "")
	if err != nil {
		b.Fatal(err)
	}
	gpumuxPod, err := d.RunPod(ctx, "gpumux", "gpumux")
	if err != nil {
		b.Fatal(err)
	}
	timeslice := map[string]string{"gpumux.io/mechanism": "timeslice"}
	exclusive := map[string]string{"gpumux.io/mechanism": "exclusive"}
	type variant struct {
		name string
		pod  *ctrd.Pod
		opts ctrd.CRIOpts
	}
	variants := []variant{
		{"runc", runcPod, ctrd.CRIOpts{}},
		{"runtime-no-GPU", gpumuxPod, ctrd.CRIOpts{}},
		{"runtime-timeslice", gpumuxPod, ctrd.CRIOpts{Annotations: timeslice}},
		{"agent-timeslice", gpumuxPod, ctrd.CRIOpts{Annotations: timeslice}},
		{"cdi-timeslice", runcPod, ctrd.CRIOpts{CDIDevices: []string{dev}}},
		{"nri-timeslice", runcPod, ctrd.CRIOpts{Annotations: timeslice}},
		{"runtime-exclusive", gpumuxPod, ctrd.CRIOpts{Annotations: exclusive}},
		{"agent-exclusive", gpumuxPod, ctrd.CRIOpts{Annotations: exclusive}},
		{"cdi-exclusive", runcPod, ctrd.CRIOpts{CDIDevices: []string{whole}}},
		{"nri-exclusive", runcPod, ctrd.CRIOpts{Annotations: exclusive}},
	}
	selected := selectedCDIAblations(b)
	ablations := writeCDIAblations(b, selected, filepath.Join(d.CDISpecDir, "gpumux.json"), dev, d.CDISpecDir)
	for i, a := range selected {
		variants = append(variants, variant{"cdi-" + a.name, runcPod, ctrd.CRIOpts{CDIDevices: []string{ablations[i]}}})
	}
	var names []string
	for _, v := range variants[1:] {
		names = append(names, v.name)
	}
	sw := agentSwitch{socket}
	ran := benchInterleaved(b, names, func(i, j int) error {
		v := variants[j]
		// The core's creates without the agent; the hooks of everything
		// else with it.
		if err := sw.use(!strings.HasPrefix(v.name, "runtime-")); err != nil {
			return err
		}
		res, err := v.pod.Run(ctx, fmt.Sprintf("%s-%d", v.name, i), v.opts)
		if err == nil && (res.ExitCode != 0 || (v.name != "runc" && v.name != "runtime-no-GPU") != strings.Contains(res.Stdout, "GPUMUX_SHARES=")) {
			err = fmt.Errorf("%s: exit %d, or a share where none was asked for or none where one was: %s", v.name, res.ExitCode, res.Stdout)
		}
		return err
	})
	// The agent-* containers were the agent's to prepare, and only they;
	// the update-ldcache hooks of the CDI and NRI ways' containers were
	// the agent's to do, none left to gpumux-runtime-hook, and the
	// ablations' as each says (cdiAblation.hook).
	prepared, did, left := 0, 0, 0
	for name := range ran {
		switch {
		case strings.HasPrefix(name, "agent-"):
			prepared += b.N
		case slices.Contains([]string{"cdi-timeslice", "cdi-exclusive", "nri-timeslice", "nri-exclusive"}, name):
			did += b.N
		}
	}
	for _, abl := range selected {
		switch {
		case !ran["cdi-"+abl.name]:
		case abl.hook == hookAgent:
			did += b.N
		case abl.hook == hookLeft:
			left += b.N
		}
	}
	log := a.log.String()
	if got := strings.Count(log, "prepared a container's create"); got != prepared {
		b.Errorf("the agent prepared %d creates; want the %d of agent-*", got, prepared)
	}
	gotDid, gotLeft := strings.Count(log, "did a container's hook"), strings.Count(log, "left a hook to gpumux-runtime-hook")
	if gotDid != did || gotLeft != left {
		b.Errorf("the agent did %d update-ldcache hooks and left %d to gpumux-runtime-hook; want %d and %d", gotDid, gotLeft, did, left)
	}
}
