//go:build gpu

package plugin_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// TestRealMPSBench compares N concurrent small workloads on one GPU as MPS
// shares (reserved through the plugin), as plain concurrent processes
// (time-slicing), and one after another (the baseline), in one run. It needs
// PyTorch and e2e/gpu/mps_bench.py (path in $MPSBENCH):
//
//	MPSBENCH=e2e/gpu/mps_bench.py plugin.test -test.run RealMPSBench -test.v
//
// and prints a markdown table for docs/benchmarks.md.
func TestRealMPSBench(t *testing.T) {
	script := os.Getenv("MPSBENCH")
	if script == "" {
		t.Fatal("set MPSBENCH to e2e/gpu/mps_bench.py")
	}
	ops := map[string]int{"matmul": 4000, "infer": 10000}
	var rows []string
	for _, n := range []int{2, 4, 8} {
		for _, workload := range []string{"matmul", "infer"} {
			seq := runWorkers(t, script, workload, ops[workload], make([][]string, n), false)
			ts := runWorkers(t, script, workload, ops[workload], make([][]string, n), true)
			envs, stop := mpsShareEnvs(t, n)
			mps := runWorkers(t, script, workload, ops[workload], envs, true)
			stop()
			for _, r := range []struct {
				mode string
				res  benchResult
			}{{"one after another", seq}, {"time-slicing", ts}, {"MPS shares", mps}} {
				rows = append(rows, fmt.Sprintf("| %s | %d | %s | %.0f | %.2f | %.3f | %.3f |",
					workload, n, r.mode, r.res.opsPerSec, r.res.opsPerSec/seq.opsPerSec, r.res.p50, r.res.p99))
			}
		}
	}
	t.Logf("\n| workload | N | mode | ops/s (all workers) | × one after another | p50 latency (ms) | p99 latency (ms) |\n|---|---|---|---|---|---|---|\n%s", strings.Join(rows, "\n"))
}

type benchResult struct {
	opsPerSec, p50, p99 float64
}

// runWorkers runs one worker per env (extra environment), together or one
// after another, and sums their throughput.
func runWorkers(t *testing.T, script, workload string, ops int, envs [][]string, together bool) benchResult {
	t.Helper()
	type out struct {
		Ops     int     `json:"ops"`
		Seconds float64 `json:"seconds"`
		LatP50  float64 `json:"lat_p50_ms"`
		LatP99  float64 `json:"lat_p99_ms"`
	}
	run := func(batch [][]string) []out {
		barrier := t.TempDir()
		cmds := make([]*exec.Cmd, len(batch))
		outs := make([]strings.Builder, len(batch))
		for i, env := range batch {
			cmds[i] = exec.Command("python3", script, workload, fmt.Sprint(ops), barrier)
			cmds[i].Env = append(os.Environ(), env...)
			cmds[i].Stdout, cmds[i].Stderr = &outs[i], &outs[i]
			if err := cmds[i].Start(); err != nil {
				t.Fatal(err)
			}
		}
		deadline := time.Now().Add(3 * time.Minute)
		for {
			ready, _ := filepath.Glob(filepath.Join(barrier, "ready.*"))
			if len(ready) == len(batch) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("workers not ready: %d of %d", len(ready), len(batch))
			}
			time.Sleep(5 * time.Millisecond)
		}
		os.WriteFile(filepath.Join(barrier, "go"), nil, 0o644)
		res := make([]out, len(batch))
		for i, c := range cmds {
			if err := c.Wait(); err != nil {
				t.Fatalf("worker: %v\n%s", err, outs[i].String())
			}
			lines := strings.Split(strings.TrimSpace(outs[i].String()), "\n")
			if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res[i]); err != nil {
				t.Fatalf("worker output %q: %v", outs[i].String(), err)
			}
		}
		return res
	}
	var all []out
	var wall float64
	if together {
		all = run(envs)
		for _, o := range all {
			wall = max(wall, o.Seconds)
		}
	} else {
		for _, env := range envs {
			o := run([][]string{env})
			all = append(all, o...)
			wall += o[0].Seconds
		}
	}
	var p50s []float64
	var p99 float64
	total := 0
	for _, o := range all {
		total += o.Ops
		p50s = append(p50s, o.LatP50)
		p99 = max(p99, o.LatP99)
	}
	sort.Float64s(p50s)
	return benchResult{opsPerSec: float64(total) / wall, p50: p50s[len(p50s)/2], p99: p99}
}

// mpsShareEnvs starts the plugin with GPU 0 split into n equal MPS shares,
// reserves each, and returns each share's environment for a host process.
func mpsShareEnvs(t *testing.T, n int) ([][]string, func()) {
	t.Helper()
	stateDir := shortTempDir(t)
	p := dialPlugin(t)
	cfg := fmt.Sprintf("state_dir = %q\ngpu {\n  match = \"0\"\n  mechanism = \"mps\"\n  shares = %d\n}", stateDir, n)
	start := time.Now()
	_, groups, cancel := fingerprintWith(t, p, cfg)
	t.Logf("N=%d: plugin start with the MPS control daemon: %v", n, time.Since(start))
	var envs [][]string
	var uuid string
	for _, g := range groups {
		for _, d := range g.Devices {
			res, err := p.Reserve([]string{d.ID})
			if err != nil {
				t.Fatal(err)
			}
			uuid = strings.SplitN(d.ID, "/", 2)[0]
			var env []string
			for k, v := range res.Envs {
				if k == "CUDA_MPS_PIPE_DIRECTORY" {
					v = hostPathOf(res.Mounts, v)
				}
				env = append(env, k+"="+v)
			}
			envs = append(envs, env)
		}
	}
	if len(envs) != n {
		t.Fatalf("%d shares reserved, want %d", len(envs), n)
	}
	return envs, func() {
		cancel()
		quitDaemon(t, stateDir, uuid)
	}
}
