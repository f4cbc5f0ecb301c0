package cli_test

import (
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/gpumux/gpumux/gpu"
	"github.com/gpumux/gpumux/gpu/sim"
)

// exactLayout writes GPU 2's MIG layout exactly: MIG mode, each MIG
// device by profile and placement, each GPU instance without a compute
// instance.
func exactLayout(g gpu.GPU) string {
	var parts []string
	for _, i := range g.MIGInstances {
		parts = append(parts, i.Profile+"@"+i.Placement.String())
	}
	for _, i := range g.MIGIncomplete {
		parts = append(parts, i.Profile+"@"+i.Placement.String()+"(no CI)")
	}
	slices.Sort(parts)
	return fmt.Sprintf("mig=%v [%s]", g.MIGEnabled, strings.Join(parts, " "))
}

// TestMIGApplyKilledAtEveryStep runs gpumux mig apply as a process on a
// simulated node and kills it with SIGKILL at each NVML change in turn
// (the simulated node kills the process making its k-th change), for a
// change of layout and for MIG off in one step. After each kill, status and
// mig export work and show any GPU instance left without a compute
// instance; the next apply restores exactly the layout the killed one
// started from (placements included; an apply of that layout then changes
// nothing), and the wanted layout then applies.
func TestMIGApplyKilledAtEveryStep(t *testing.T) {
	cases := []struct {
		name, from, to string
	}{
		{"change the layout", "{3g.71gb: 1, 2g.35gb: 2}", "{1g.18gb: 7}"},
		{"MIG off in one step", "{2g.35gb: 3, 1g.18gb: 1}", "off"},
		{"MIG on", "off", "{3g.71gb: 2}"},
	}
	halfMade := 0
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rule := func(devices string) string {
				if devices == "off" {
					return "version: gpumux.io/v1\ngpus:\n  - {match: \"2\", mig-enabled: false}\n"
				}
				return "version: gpumux.io/v1\ngpus:\n  - {match: \"2\", mig-enabled: true, mig-devices: " + devices + "}\n"
			}
			for k := 0; ; k++ {
				if k > 40 {
					t.Fatal("the apply never ran through")
				}
				n := newMIGNode(t)
				from, to := n.file("from.yaml", rule(tc.from)), n.file("to.yaml", rule(tc.to))
				node := []string{"--simulate", "dgxh200", "--state-dir", n.dir, "--nomad", "off"}
				code, out, errOut := n.run("mig", "apply", "-f", from, "--nomad", "off")
				mustExit(t, "setup", code, 0, out, errOut)
				before := exactLayout(n.inventory().GPUs[2])

				s, err := sim.Open("dgxh200", n.dir)
				if err != nil {
					t.Fatal(err)
				}
				if err := s.KillAtMutation(k); err != nil {
					t.Fatal(err)
				}
				cmd := gpumuxCommand(t, append([]string{"mig", "apply", "-f", to}, node...)...)
				output, err := cmd.CombinedOutput()
				ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
				if pending, _ := s.FaultPending(); pending {
					// The apply made fewer than k+1 changes: it ran through.
					if err != nil || exactLayout(n.inventory().GPUs[2]) == before {
						t.Fatalf("unkilled apply: %v\n%s", err, output)
					}
					if k < 2 {
						t.Fatalf("the apply made only %d NVML changes", k)
					}
					return
				}
				if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
					t.Fatalf("step %d: the apply was not killed (%v):\n%s", k+1, err, output)
				}
				killed := n.inventory().GPUs[2]
				code, status, errOut := runProcess(t, append([]string{"status"}, node[:4]...)...)
				mustExit(t, "status after the kill", code, 0, status, errOut)
				code, export, errOut := runProcess(t, append([]string{"mig", "export"}, node[:4]...)...)
				mustExit(t, "export after the kill", code, 0, export, errOut)
				for _, inst := range killed.MIGIncomplete {
					halfMade++
					at := inst.Placement.String()
					if !strings.Contains(status, "(no compute instance)") || !strings.Contains(status, "at "+at+", INCOMPLETE") {
						t.Errorf("step %d: status does not show the %s at %s without a compute instance:\n%s", k+1, inst.Profile, at, status)
					}
					if !strings.Contains(export, "a "+inst.Profile+" GPU instance at "+at+" without a compute instance") {
						t.Errorf("step %d: export does not name the %s at %s:\n%s", k+1, inst.Profile, at, export)
					}
				}

				// The next apply restores exactly the layout the killed one
				// started from: applying that layout leaves it so.
				code, out, errOut = runProcess(t, append([]string{"mig", "apply", "-f", from}, node...)...)
				mustExit(t, fmt.Sprintf("step %d: apply after the kill (%s)", k+1, exactLayout(killed)), code, 0, out, errOut)
				if got := exactLayout(n.inventory().GPUs[2]); got != before {
					t.Fatalf("step %d: killed at %s; after the next apply %s, want %s\n%s", k+1, exactLayout(killed), got, before, out)
				}
				if exactLayout(killed) != before && !strings.Contains(out, "did not finish; restoring the layout it found") {
					t.Errorf("step %d: the restore is not reported:\n%s", k+1, out)
				}
				code, out, errOut = runProcess(t, append([]string{"mig", "apply", "-f", to}, node...)...)
				mustExit(t, fmt.Sprintf("step %d: the wanted layout after the kill", k+1), code, 0, out, errOut)
			}
		})
	}
	if halfMade == 0 {
		t.Error("no kill left a GPU instance without a compute instance: the finding is not reproduced")
	}
}
