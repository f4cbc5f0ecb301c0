//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpumux/gpumux/e2e/ctrd"
	"github.com/gpumux/gpumux/e2e/dockerd"
)

// startDockerCDI starts a private Docker 26 engine (dockerd.CDIBinDir: the
// first Debian Docker that applies CDI specs) on the node of config, with
// CDI on, reading the specs of the directory it returns, and gpumux-runtime
// registered as well (`gpumux runtime configure`), so that the wrapper and
// CDI run on one engine. It fails the test if Docker 26 is not fetched
// (make docker-cdi).
func startDockerCDI(t testing.TB, ctx context.Context, config string, env ...string) (*dockerd.Daemon, string) {
	t.Helper()
	bin := dockerd.CDIBinDir()
	for _, b := range []string{"dockerd", "docker"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			t.Fatalf("Docker %s: %v (run make docker-cdi)", dockerd.CDIVersion, err)
		}
	}
	gpumux := filepath.Join(repoRoot(t), "bin", "gpumux")
	specDir := t.TempDir()
	d := dockerd.Start(ctx, t,
		dockerd.WithBinaries(filepath.Join(bin, "dockerd"), filepath.Join(bin, "docker")),
		dockerd.WithContainerdOptions(ctrd.WithEnv(append([]string{"GPUMUX_CONFIG=" + config}, env...)...)),
		dockerd.WithConfigure(func(daemonJSON string) error {
			if out, err := exec.CommandContext(ctx, gpumux, "runtime", "configure", "--runtime=docker", "--config", daemonJSON).CombinedOutput(); err != nil {
				return fmt.Errorf("gpumux runtime configure: %w\n%s", err, out)
			}
			return editJSON(daemonJSON, func(m map[string]any) {
				m["features"] = map[string]any{"cdi": true}
				m["cdi-spec-dirs"] = []string{specDir}
			})
		}))
	out, _, err := d.Docker(ctx, "version", "--format", "{{.Server.Version}}")
	if err != nil || !strings.HasPrefix(strings.TrimSpace(out), dockerd.CDIVersion) {
		t.Fatalf("the engine's version: %q (%v), want %s", out, err, dockerd.CDIVersion)
	}
	return d, specDir
}

// editJSON rewrites the JSON object in path through f.
func editJSON(path string, f func(map[string]any)) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	m := map[string]any{}
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	f(m)
	if b, err = json.MarshalIndent(m, "", "  "); err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// writeCDISpec runs `gpumux cdi generate` into dir (a containerd's
// CDISpecDir, a Docker engine's cdi-spec-dirs), its hooks naming hook
// (bin/gpumux-runtime-hook, or bin/gpumux-runtime, which asks the agent
// whose socket env names), and returns one device of each mechanism:
// mechanism → gpumux.io/share=<name>.
func writeCDISpec(t testing.TB, ctx context.Context, config, dir, hook string, env ...string) map[string]string {
	t.Helper()
	bin := filepath.Join(repoRoot(t), "bin")
	file := filepath.Join(dir, "gpumux.json")
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "gpumux"), "cdi", "generate", "--config", config, "-f", file,
		"--hook-binary", filepath.Join(bin, hook))
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gpumux cdi generate: %v\n%s", err, out)
	}
	var spec struct {
		Kind    string
		Devices []struct {
			Name        string
			Annotations map[string]string
		}
	}
	b, err := os.ReadFile(file)
	if err == nil {
		err = json.Unmarshal(b, &spec)
	}
	if err != nil {
		t.Fatal(err)
	}
	devs := map[string]string{}
	for _, dev := range spec.Devices {
		m := dev.Annotations["gpumux.io/mechanism"]
		if _, ok := devs[m]; !ok {
			devs[m] = spec.Kind + "=" + dev.Name
		}
	}
	return devs
}

// TestDockerCDI is `docker run --device gpumux.io/share=…` on Docker 26:
// the engine applies gpumux's CDI spec itself, with plain runc, and the
// container gets what gpumux-runtime would give it for the share: its
// device nodes, env, the driver's staged tree, the linker cache and the
// programs on PATH (the spec's hook), the MPS pipe or the limiter. A
// device the spec does not have is refused by the engine, naming it.
func TestDockerCDI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, config := runtimeNode(t)
	d, specDir := startDockerCDI(t, ctx, config)
	devs := writeCDISpec(t, ctx, config, specDir, "gpumux-runtime-hook")
	image, err := d.ProbeImage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mechanism, idPattern string
		caps, mps            bool
	}{
		{"exclusive", `^GPU-[0-9a-f-]+$`, false, false},
		{"mig", `^MIG-[0-9a-f-]+$`, true, false},
		{"mps", `^GPU-[0-9a-f-]+/mps/[0-3]$`, false, true},
		{"timeslice", `^GPU-[0-9a-f-]+/timeslice/[0-3]$`, false, false},
	} {
		t.Run(tc.mechanism, func(t *testing.T) {
			dev, ok := devs[tc.mechanism]
			if !ok {
				t.Fatalf("the CDI spec has no %s device: %v", tc.mechanism, devs)
			}
			out, _, err := d.Docker(ctx, "run", "--rm", "--device", dev, image)
			if err != nil {
				t.Fatal(err)
			}
			p := ctrd.ParseProbe(out)
			id := checkShareProbe(t, p, regexp.MustCompile(tc.idPattern), tc.caps, tc.mps)
			if want := strings.TrimPrefix(dev, "gpumux.io/share="); strings.ReplaceAll(id, "/", "_") != want {
				t.Errorf("container got share %s, want the device's, %s", id, want)
			}
			if limited := tc.mechanism == "timeslice"; p.HasMount("/run/gpumux/limiter/lib") != limited {
				t.Errorf("the limiter's mount: %v, want %v", p.HasMount("/run/gpumux/limiter/lib"), limited)
			}
		})
	}
	t.Run("unknown device", func(t *testing.T) {
		_, stderr, err := d.Docker(ctx, "run", "--rm", "--device", "gpumux.io/share=GPU-nonexistent", image)
		if err == nil || !strings.Contains(stderr, "GPU-nonexistent") {
			t.Errorf("an unknown CDI device: %v, %q; want the engine to refuse it, naming it", err, stderr)
		}
	})
}
