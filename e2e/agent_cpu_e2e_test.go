//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// envBenchAgentCPU gives every gpumux agent the e2e tests and benchmarks
// start (startAgent) a CPU cgroup of its own with this weight (1–10000,
// cgroup v2's cpu.weight; 100 is a service's default), as systemd gives
// the shipped unit's agent a cgroup of its own (and CPUWeight= a weight):
// unset, the agent shares the test's cgroup with containerd and the shims.
const envBenchAgentCPU = "GPUMUX_BENCH_AGENT_CPU_WEIGHT"

// agentCPUGroup moves the agent (process pid) into a CPU cgroup of its own
// with the weight GPUMUX_BENCH_AGENT_CPU_WEIGHT names, on cgroup v2 or on
// v1's cpu hierarchy (cpu.shares, weight × 1024 / 100), and checks that
// it is there; nothing where the variable is unset. The group goes when
// the test ends (its processes moved back first).
func agentCPUGroup(t testing.TB, pid int) {
	t.Helper()
	v := os.Getenv(envBenchAgentCPU)
	if v == "" {
		return
	}
	weight, err := strconv.Atoi(v)
	if err != nil || weight < 1 || weight > 10000 {
		t.Fatalf("%s=%s: want a weight from 1 to 10000 (100: a service's default)", envBenchAgentCPU, v)
	}
	root, file, value := "/sys/fs/cgroup", "cpu.weight", strconv.Itoa(weight)
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err != nil {
		root, file, value = "/sys/fs/cgroup/cpu", "cpu.shares", strconv.Itoa(weight*1024/100)
	}
	dir := filepath.Join(root, fmt.Sprintf("gpumux-e2e-agent-%d", pid))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatalf("%s: %v", envBenchAgentCPU, err)
	}
	t.Cleanup(func() {
		if procs, err := os.ReadFile(filepath.Join(dir, "cgroup.procs")); err == nil {
			for _, p := range strings.Fields(string(procs)) {
				os.WriteFile(filepath.Join(root, "cgroup.procs"), []byte(p), 0o644)
			}
		}
		if err := os.Remove(dir); err != nil {
			t.Logf("%s: %v", envBenchAgentCPU, err)
		}
	})
	for name, data := range map[string]string{file: value, "cgroup.procs": strconv.Itoa(pid)} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatalf("%s: %s: %v", envBenchAgentCPU, name, err)
		}
	}
	in, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil || !strings.Contains(string(in), filepath.Base(dir)) {
		t.Fatalf("%s: the agent (pid %d) is not in %s: %s %v", envBenchAgentCPU, pid, dir, in, err)
	}
	t.Logf("gpumux agent (pid %d) in %s, %s %s", pid, dir, file, value)
}
