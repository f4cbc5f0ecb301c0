package ctest

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The compute tests' timing: a 40 ms period, kernels of 500 µs, 1.5 s runs.
// The fake GPU's time is real time: on a loaded machine a test process
// may not run when its window opens, so a case gets three tries.
const (
	periodMS = 40
	kernelUS = 500
	runFor   = "1.5"
	slack    = 0.05 // each replica's part of the GPU within 5 points
	tries    = 3
)

// gpuWorld is one fake GPU shared by replicas: its lock file and node
// directory.
type gpuWorld struct {
	gpu, node string
}

func newGPU(t *testing.T) gpuWorld {
	dir := t.TempDir()
	w := gpuWorld{gpu: filepath.Join(dir, "gpu"), node: filepath.Join(dir, "node")}
	if err := os.Mkdir(w.node, 0o755); err != nil {
		t.Fatal(err)
	}
	return w
}

// replica is a share of the fake GPU: replica n, pct percent, policy.
func (w gpuWorld) replica(t *testing.T, n, pct int, policy string) *share {
	sh := newShareText(t, limit, fmt.Sprintf("version=1\nmemory_bytes=%d\ncompute_percent=%d\npolicy=%s\nshare=GPU-ctest/timeslice/%d\n",
		limit, pct, policy, n))
	sh.node = w.node
	return sh
}

// run runs `compute run` in each share at once and returns the part of
// the wall time each one's kernels held the fake GPU.
func (w gpuWorld) run(t *testing.T, shares ...*share) []float64 {
	t.Helper()
	at := time.Now().Add(300 * time.Millisecond).UnixNano()
	env := []string{"FAKE_CUDA_GPU=" + w.gpu, "GPUMUX_LIMITER_PERIOD_MS=" + strconv.Itoa(periodMS),
		"GM_TEST_START_AT=" + strconv.FormatInt(at, 10)}
	var procs []*proc
	for _, sh := range shares {
		procs = append(procs, program{name: "compute", args: []string{"run", runFor, strconv.Itoa(kernelUS)}, sh: sh, env: env}.start(t, ""))
	}
	var out []float64
	for _, p := range procs {
		var g, wall, n float64
		if _, err := fmt.Sscanf(p.expect("GPU_NS"), "GPU_NS %g WALL_NS %g LAUNCHES %g", &g, &wall, &n); err != nil {
			t.Fatal(err)
		}
		p.finish()
		quiet(t, p.stderr.String())
		out = append(out, g/wall)
	}
	return out
}

// TestComputeSplit: two replicas busy at once get their parts of the GPU.
func TestComputeSplit(t *testing.T) {
	for _, tc := range []struct {
		a, b   int
		policy string
	}{
		{50, 50, "cap"}, {25, 75, "cap"}, {10, 90, "cap"}, {10, 90, "share"},
	} {
		t.Run(fmt.Sprintf("%d-%d-%s", tc.a, tc.b, tc.policy), func(t *testing.T) {
			var why []string
			for try := 0; try < tries; try++ {
				w := newGPU(t)
				got := w.run(t, w.replica(t, 0, tc.a, tc.policy), w.replica(t, 1, tc.b, tc.policy))
				t.Logf("replica 0 (%d%%): %.3f, replica 1 (%d%%): %.3f", tc.a, got[0], tc.b, got[1])
				why = why[:0]
				for i, want := range []int{tc.a, tc.b} {
					if math.Abs(got[i]-float64(want)/100) > slack {
						why = append(why, fmt.Sprintf("replica %d (%d%%) held the GPU %.1f%% of the time", i, want, 100*got[i]))
					}
				}
				if len(why) == 0 {
					return
				}
			}
			t.Errorf("%d tries, the last: %s", tries, strings.Join(why, "; "))
		})
	}
}

// TestComputeAlone: policy share lets a lone replica use the whole GPU;
// cap holds it to its part.
func TestComputeAlone(t *testing.T) {
	for _, tc := range []struct {
		policy string
		pct    int
		want   float64
	}{
		{"share", 25, 1}, {"cap", 25, 0.25}, {"cap", 100, 1},
	} {
		t.Run(fmt.Sprintf("%s-%d", tc.policy, tc.pct), func(t *testing.T) {
			var got []float64
			for try := 0; try < tries; try++ {
				w := newGPU(t)
				got = w.run(t, w.replica(t, 0, tc.pct, tc.policy))
				t.Logf("alone at %d%% (%s): %.3f", tc.pct, tc.policy, got[0])
				if math.Abs(got[0]-tc.want) <= slack {
					return
				}
			}
			t.Errorf("%d tries, the last held the GPU %.1f%% of the time, want %.0f%%", tries, 100*got[0], 100*tc.want)
		})
	}
}

// TestComputeOff: policy=off launches are not gated.
func TestComputeOff(t *testing.T) {
	w := newGPU(t)
	got := w.run(t, w.replica(t, 0, 25, "off"))
	if got[0] < 1-slack {
		t.Errorf("policy=off held the GPU %.1f%% of the time", 100*got[0])
	}
	if _, err := os.Stat(filepath.Join(w.node, "sched.v1")); err == nil {
		t.Error("policy=off registered in the node directory")
	}
}

// TestComputeProcesses: the processes of one replica share its window:
// two of a 50% replica together get 50%, beside a 50% replica of one.
func TestComputeProcesses(t *testing.T) {
	var got []float64
	for try := 0; try < tries; try++ {
		w := newGPU(t)
		a := w.replica(t, 0, 50, "cap")
		got = w.run(t, a, a, w.replica(t, 1, 50, "cap"))
		t.Logf("replica 0: %.3f + %.3f, replica 1: %.3f", got[0], got[1], got[2])
		if math.Abs(got[0]+got[1]-0.5) <= slack && math.Abs(got[2]-0.5) <= slack {
			return
		}
	}
	t.Errorf("%d tries, the last: replica 0's processes %.1f%% + %.1f%%, replica 1 %.1f%%", tries, 100*got[0], 100*got[1], 100*got[2])
}

// TestComputeDamagedRegistry: garbage in the node directory's registry
// is ignored: no crash, and the replica keeps its window.
func TestComputeDamagedRegistry(t *testing.T) {
	var got []float64
	for try := 0; try < tries; try++ {
		w := newGPU(t)
		junk := make([]byte, 64+256*128)
		for i := range junk {
			junk[i] = byte(i*7 + 3)
		}
		copy(junk, "GPUMUXSC")
		if err := os.WriteFile(filepath.Join(w.node, "sched.v1"), junk, 0o666); err != nil {
			t.Fatal(err)
		}
		got = w.run(t, w.replica(t, 0, 25, "cap"))
		if math.Abs(got[0]-0.25) <= slack {
			return
		}
	}
	t.Errorf("with a damaged registry, a 25%% replica held the GPU %.1f%% of the time", 100*got[0])
}

// TestComputeLaunchKinds: graphs, Ex and cooperative launches are gated
// like cuLaunchKernel.
func TestComputeLaunchKinds(t *testing.T) {
	w := newGPU(t)
	out, stderr := program{name: "compute", args: []string{"graph"}, sh: w.replica(t, 0, 25, "cap"),
		env: []string{"FAKE_CUDA_GPU=" + w.gpu, "GPUMUX_LIMITER_PERIOD_MS=" + strconv.Itoa(periodMS)}}.run(t)
	quiet(t, stderr)
	var g, wall float64
	if _, err := fmt.Sscanf(strings.TrimSpace(out), "GPU_NS %g WALL_NS %g", &g, &wall); err != nil {
		t.Fatalf("%q: %v", out, err)
	}
	if f := g / wall; math.Abs(f-0.25) > slack {
		t.Errorf("200 ms of launches of every kind held the GPU %.1f%% of %v", 100*f, time.Duration(wall))
	}
}

// TestLaunchOverhead: what the limiter adds to a launch on the fake
// driver (the real one is measured on a GPU: README.md).
func TestLaunchOverhead(t *testing.T) {
	w := newGPU(t)
	bench := func(policy string) float64 {
		out, _ := program{name: "compute", args: []string{"bench", "200000"}, sh: w.replica(t, 0, 100, policy)}.run(t)
		v, err := strconv.ParseFloat(strings.TrimPrefix(strings.TrimSpace(out), "NS_PER_LAUNCH "), 64)
		if err != nil {
			t.Fatalf("%q: %v", out, err)
		}
		return v
	}
	off, capped := bench("off"), bench("cap")
	t.Logf("ns per launch: %.0f pass-through, %.0f limited (+%.0f ns)", off, capped, capped-off)
}
