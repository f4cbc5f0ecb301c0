//go:build e2e

package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumux/gpumux/e2e/nomadagent"
)

// TestDemo runs `make demo`'s script (scripts/demo.sh, after make build):
// the README's first command must keep working. Every job of examples/jobs
// completes on its share (the script fails otherwise), the remote task's
// CUDA calls reach the server through the interposer and hit its quota,
// and everything is stopped with no mount left.
func TestDemo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	root := repoRoot(t)
	cmd := exec.CommandContext(ctx, filepath.Join(root, "scripts", "demo.sh"))
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "NOMAD_BIN="+nomadagent.DefaultNomadBin())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/demo.sh: %v\n%s", err, out)
	}
	for _, want := range []string{
		"timeslice  timeslice  H200-timeslice-4x", "mig        mig", "mps        mps", "exclusive  exclusive  H200",
		"remote     remote", "CUDA_ERROR_OUT_OF_MEMORY", "Constraint \"missing devices\"", "no mounts left",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the demo's output lacks %q:\n%s", want, out)
		}
	}
}
