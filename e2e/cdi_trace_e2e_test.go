//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpumux/gpumux/e2e/ctrd"
)

// TestCDIAblationTrace runs, for runc alone, the full time-slice replica's
// CDI device and each of cdiAblations' devices, 10 containers traced, one
// variant after another, and writes each trace to $GPUMUX_E2E_TRACE/:
// with GPUMUX_E2E_TRACE_TOOL=strace (the default) `strace -f -c -w`
// attached to containerd and the pod's shim (so every runc and hook they
// start is followed), a summary of syscalls in <variant>.txt; with perf,
// `perf record -a -g` of the whole machine in <variant>.data (read it with
// `perf report -i <variant>.data --sort comm`). Skipped unless
// GPUMUX_E2E_TRACE names a directory:
//
//	GPUMUX_E2E_TRACE=/tmp/cdi-trace go test -tags 'e2e no_dynamic_plugins' -run CDIAblationTrace ./e2e/
func TestCDIAblationTrace(t *testing.T) {
	out := os.Getenv("GPUMUX_E2E_TRACE")
	if out == "" {
		t.Skip("GPUMUX_E2E_TRACE is not set")
	}
	tool := os.Getenv("GPUMUX_E2E_TRACE_TOOL")
	if tool == "" {
		tool = "strace"
	}
	if tool != "strace" && tool != "perf" {
		t.Fatalf("GPUMUX_E2E_TRACE_TOOL=%s: want strace or perf", tool)
	}
	bin, err := exec.LookPath(tool)
	if err != nil {
		t.Skip(err)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	_, config := runtimeNode(t)
	d := startContainerd2(t, ctx, config)
	dev, ok := writeCDISpec(t, ctx, config, d.CDISpecDir, "gpumux-runtime-hook")["timeslice"]
	if !ok {
		t.Fatal("the CDI spec has no time-slice replica")
	}
	selected := selectedCDIAblations(t)
	ablations := writeCDIAblations(t, selected, filepath.Join(d.CDISpecDir, "gpumux.json"), dev, d.CDISpecDir)
	pod, err := d.RunPod(ctx, "trace", "")
	if err != nil {
		t.Fatal(err)
	}
	variants := map[string][]string{"runc": nil, "cdi-timeslice": {dev}}
	names := []string{"runc", "cdi-timeslice"}
	for i, a := range selected {
		variants["cdi-"+a.name] = []string{ablations[i]}
		names = append(names, "cdi-"+a.name)
	}
	// containerd and the pod's shim: processes whose command line names
	// the daemon's config or socket.
	var pids []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if s := string(cmd); strings.Contains(s, d.ConfigPath) || strings.Contains(s, d.Address) {
			pids = append(pids, "-p", e.Name())
		}
	}
	if len(pids) < 4 {
		t.Fatalf("containerd and its shim: found %v", pids)
	}
	for _, name := range names {
		args := append([]string{"-f", "-c", "-w", "-S", "time", "-o", filepath.Join(out, name+".txt")}, pids...)
		if tool == "perf" {
			args = []string{"record", "-a", "-g", "-F", "997", "-q", "-o", filepath.Join(out, name+".data")}
		}
		cmd := exec.Command(bin, args...)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		for i := 0; i < 10; i++ {
			res, err := pod.Run(ctx, fmt.Sprintf("%s-%d", name, i), ctrd.CRIOpts{CDIDevices: variants[name]})
			if err == nil && res.ExitCode != 0 {
				err = fmt.Errorf("exit %d: %s", res.ExitCode, res.Stdout)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		_ = cmd.Process.Signal(syscall.SIGINT)
		_ = cmd.Wait()
	}
}
