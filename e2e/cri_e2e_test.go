//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	cri "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/gpumux/gpumux/e2e/ctrd"
	"github.com/gpumux/gpumux/internal/ociruntime"
	"github.com/gpumux/gpumux/ocicreate"
)

// startContainerd2 starts a private containerd 2.x with its CRI (and NRI,
// with nri) on the node of config. It fails the test if containerd 2.x is
// not built (make containerd2).
func startContainerd2(t testing.TB, ctx context.Context, config string, opts ...ctrd.Option) *ctrd.Daemon {
	t.Helper()
	if _, err := os.Stat(ctrd.Containerd2Bin()); err != nil {
		t.Fatalf("containerd %s: %v (run make containerd2)", ctrd.Containerd2Version, err)
	}
	return ctrd.Start(ctx, t, append([]ctrd.Option{ctrd.WithContainerd2(), ctrd.WithCRI(), ctrd.WithEnv("GPUMUX_CONFIG=" + config)}, opts...)...)
}

// TestCDINativeOnContainerd2: containerd 2.x applies `gpumux cdi generate`'s
// spec itself, through CRI's CDI devices, with plain runc: a container
// given a whole GPU's, a time-slice replica's or an MPS share's device gets
// exactly that share's device nodes, env and mounts (the driver's files and
// the limiter's included), with no gpumux-runtime. The spec's
// update-ldcache hook is gpumux-runtime-hook, or gpumux-runtime asking
// gpumux agent, which then writes the container's linker cache in the
// hook's working directory, runc's state left unread (ocicreate/doc.go).
func TestCDINativeOnContainerd2(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, config := runtimeNode(t)
	a, socket := agentRuntimeSocket(t, ctx, config)
	for _, hook := range []struct {
		name  string
		agent bool
	}{
		{ociruntime.HookBinary, false},
		{ociruntime.EntryBinary, true},
	} {
		// A containerd of its own for each spec, stopped at the subtest's
		// end: a spec rewritten under a running containerd may not be read
		// again before its next container.
		t.Run(hook.name, func(t *testing.T) {
			d := startContainerd2(t, ctx, config)
			pod, err := d.RunPod(ctx, "cdi", "")
			if err != nil {
				t.Fatal(err)
			}
			devs := writeCDISpec(t, ctx, config, d.CDISpecDir, hook.name, ocicreate.EnvSocket+"="+socket)
			for _, tc := range []struct {
				mechanism, idPattern string
				mps                  bool
			}{
				{"exclusive", `^GPU-[0-9a-f-]+$`, false},
				{"timeslice", `^GPU-[0-9a-f-]+/timeslice/[0-3]$`, false},
				{"mps", `^GPU-[0-9a-f-]+/mps/[0-3]$`, true},
			} {
				t.Run(tc.mechanism, func(t *testing.T) {
					dev, ok := devs[tc.mechanism]
					if !ok {
						t.Fatalf("the CDI spec has no %s device: %v", tc.mechanism, devs)
					}
					before := agentDidHooks(a)
					res, err := pod.Run(ctx, tc.mechanism, ctrd.CRIOpts{CDIDevices: []string{dev}})
					if err != nil {
						t.Fatal(err)
					}
					if res.ExitCode != 0 {
						t.Fatalf("probe exit %d: %s", res.ExitCode, res.Stdout)
					}
					id := checkShareProbe(t, ctrd.ParseProbe(res.Stdout), regexp.MustCompile(tc.idPattern), false, tc.mps)
					if want := strings.TrimPrefix(dev, "gpumux.io/share="); strings.ReplaceAll(id, "/", "_") != want {
						t.Errorf("container got share %s, want the device's, %s", id, want)
					}
					want := 0
					if hook.agent {
						want = 1
					}
					if did := agentDidHooks(a) - before; did != want {
						t.Errorf("gpumux agent did %d update-ldcache hooks in the hook's working directory for the container, want %d\n%s", did, want, a.log.String())
					}
				})
			}
		})
	}
}

// agentDidHooks counts the update-ldcache hooks gpumux agent has done in
// the root that was the hook's working directory (its debug log).
func agentDidHooks(a *agentProc) int {
	n := 0
	for _, line := range strings.Split(a.log.String(), "\n") {
		if strings.Contains(line, "did a container's hook") && strings.Contains(line, "the hook's working directory") {
			n++
		}
	}
	return n
}

// TestNRIPluginOnContainerd2: gpumux agent's NRI plugin serves containerd
// 2.x's CRI with plain runc: containers asking gpumux.io/mechanism=timeslice
// or mps (or GPUMUX_MECHANISM) get that share; a running container holds its
// lease, which goes when it is stopped and removed; a bad request fails the
// create with the reason, and leaves no lease.
func TestNRIPluginOnContainerd2(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	stateDir, config := runtimeNode(t)
	d := startContainerd2(t, ctx, config, ctrd.WithNRI())
	nriConfig := withNRI(t, config, d)
	a := startAgent(t, nriConfig)
	waitFor(t, ctx, 30*time.Second, "gpumux agent's NRI plugin to register", func() (bool, string) {
		return strings.Contains(d.Log(), "plugin \"50-gpumux\" registered") || strings.Contains(a.log.String(), "serving NRI"), a.log.String()
	})
	pod, err := d.RunPod(ctx, "nri", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, idPattern string
		opts            ctrd.CRIOpts
		mps             bool
	}{
		{"timeslice", `^GPU-[0-9a-f-]+/timeslice/[0-3]$`, ctrd.CRIOpts{Annotations: map[string]string{"gpumux.io/mechanism": "timeslice"}}, false},
		{"mps", `^GPU-[0-9a-f-]+/mps/[0-3]$`, ctrd.CRIOpts{Annotations: map[string]string{"gpumux.io/mechanism": "mps"}}, true},
		{"exclusive-by-env", `^GPU-[0-9a-f-]+$`, ctrd.CRIOpts{Env: []string{"GPUMUX_MECHANISM=exclusive"}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := pod.Run(ctx, tc.name, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if res.ExitCode != 0 {
				t.Fatalf("probe exit %d: %s", res.ExitCode, res.Stdout)
			}
			checkShareProbe(t, ctrd.ParseProbe(res.Stdout), regexp.MustCompile(tc.idPattern), false, tc.mps)
			if l := leases(t, ctx, stateDir); len(l) != 0 {
				t.Errorf("leases after the container was removed: %v", l)
			}
		})
	}

	t.Run("lease held while running", func(t *testing.T) {
		id, err := pod.Create(ctx, "sleeper", ctrd.CRIOpts{Annotations: map[string]string{"gpumux.io/mechanism": "timeslice"}, Args: []string{ctrd.ProbePath, "-sleep"}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.CRI.StartContainer(ctx, &cri.StartContainerRequest{ContainerId: id}); err != nil {
			t.Fatal(err)
		}
		held := 0
		for share, c := range leases(t, ctx, stateDir) {
			if c == id && strings.Contains(share, "/timeslice/") {
				held++
			}
		}
		if held != 1 {
			t.Fatalf("running container %s holds %d time-slice leases: %v", id, held, leases(t, ctx, stateDir))
		}
		if _, err := d.CRI.StopContainer(ctx, &cri.StopContainerRequest{ContainerId: id, Timeout: 1}); err != nil {
			t.Fatal(err)
		}
		if _, err := d.CRI.RemoveContainer(ctx, &cri.RemoveContainerRequest{ContainerId: id}); err != nil {
			t.Fatal(err)
		}
		if l := leases(t, ctx, stateDir); len(l) != 0 {
			t.Errorf("leases after the container was stopped and removed: %v", l)
		}
	})

	for _, tc := range []struct {
		name string
		opts ctrd.CRIOpts
		want string
	}{
		{"bad mechanism", ctrd.CRIOpts{Annotations: map[string]string{"gpumux.io/mechanism": "magic"}}, `annotation gpumux.io/mechanism = "magic": unknown mechanism`},
		{"bad memory", ctrd.CRIOpts{Env: []string{"GPUMUX_MEMORY=16G"}}, `GPUMUX_MEMORY`},
		{"no fit", ctrd.CRIOpts{Annotations: map[string]string{"gpumux.io/mechanism": "timeslice", "gpumux.io/memory": "1Ti"}}, `no `},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, err := pod.Create(ctx, strings.ReplaceAll(tc.name, " ", "-"), tc.opts)
			if err == nil {
				t.Fatalf("create succeeded (container %s), want it refused saying %q", id, tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "gpumux") {
				t.Errorf("create failed with %v, want the reason %q from gpumux", err, tc.want)
			}
			t.Logf("refused: %v", err)
			if l := leases(t, ctx, stateDir); len(l) != 0 {
				t.Errorf("leases after a refused create: %v", l)
			}
		})
	}
}

// withNRI writes a copy of config with an nri block for d: its socket, the
// runc root of its CRI containers, and the runtime class "gpumux"
// (gpumux-runtime's, WithRuntimeClass) left to gpumux-runtime.
func withNRI(t testing.TB, config string, d *ctrd.Daemon) string {
	t.Helper()
	b, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	b = append(b, []byte("\nnri {\n  socket    = \""+d.NRISocket+"\"\n  runc_root = \""+filepath.Join(d.RuncRoot, ctrd.CRINamespace)+"\"\n  skip_runtime_handlers = [\"gpumux\"]\n}\n")...)
	p := filepath.Join(filepath.Dir(config), "node-nri.hcl")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
