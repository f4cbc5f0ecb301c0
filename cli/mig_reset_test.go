package cli_test

import (
	"context"
	"encoding/json"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpumux/gpumux/cli"
	"github.com/gpumux/gpumux/gpu"
	"github.com/gpumux/gpumux/node/lease"
)

// simulated opens the node's simulated GPUs for a test's setup.
func (n *migNode) simulated() *gpu.Host {
	n.t.Helper()
	h, err := gpu.OpenSimulated("dgxh200", n.dir)
	if err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(func() { h.Close() })
	return h
}

func (n *migNode) resets() map[int]int {
	n.t.Helper()
	s := n.simulated().Simulated()
	out := map[int]int{}
	for i := 0; i < 8; i++ {
		r, err := s.Resets(i)
		if err != nil {
			n.t.Fatal(err)
		}
		if r > 0 {
			out[i] = r
		}
	}
	return out
}

// TestMIGApplyReset: GPUs 1, 2 and 3 need a reset for MIG mode changes. The
// layout selects GPUs 0-2: GPU 0 is in MIG mode already (its change needs no
// reset), GPU 1 is idle, a process runs on GPU 2. GPU 3 has a pending change
// too, but the layout does not select it. --reset resets GPU 1 only.
func TestMIGApplyReset(t *testing.T) {
	n := newMIGNode(t)
	setup := n.file("setup.yaml", "version: gpumux.io/v1\ngpus:\n  - {match: \"0\", mig-enabled: true, mig-devices: {7g.141gb: 1}}\n")
	code, out, errOut := n.run("mig", "apply", "-f", setup)
	mustExit(t, "setup", code, cli.ExitOK, out, errOut)
	h := n.simulated()
	s := h.Simulated()
	for _, i := range []int{1, 2, 3} {
		if err := s.RequireResetForModeChange(i, true); err != nil {
			t.Fatal(err)
		}
	}
	node, _ := h.Inventory(context.Background())
	if err := s.SetProcesses(node.GPUs[2].UUID, 4711); err != nil {
		t.Fatal(err)
	}
	dev, _ := s.NVML().DeviceGetHandleByIndex(3)
	if _, ret := dev.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	f := n.file("layout.yaml", "version: gpumux.io/v1\ngpus:\n  - {match: \"0-2\", mig-enabled: true, mig-devices: {3g.71gb: 2}}\n")

	steps := []struct {
		name       string
		args       []string
		wantExit   int
		wantErr    []string // in stderr
		wantResets map[int]int
		wantMIG    map[int]bool // MIG mode of GPUs 0-3 afterwards
	}{
		{
			name: "without --reset", args: []string{"mig", "apply", "-f", f}, wantExit: cli.ExitError,
			wantErr: []string{
				"GPU 1 failed: GPU 1: MIG mode is pending (activation status ERROR_RESET_REQUIRED): GPU reset required; to finish the change, run gpumux mig apply again with --reset",
				"GPU 2 failed", "nvidia-smi -r -i 2",
			},
			wantResets: map[int]int{}, wantMIG: map[int]bool{0: true, 1: false, 2: false, 3: false},
		},
		{
			name: "--reset", args: []string{"mig", "apply", "--reset", "-f", f}, wantExit: cli.ExitBusy,
			wantErr:    []string{"GPU 2 refused, left unchanged", "GPU 2 is not reset: in use (pids [4711])"},
			wantResets: map[int]int{1: 1}, wantMIG: map[int]bool{0: true, 1: true, 2: false, 3: false},
		},
		{
			name: "--reset again, nothing pending left to reset but GPU 2", args: []string{"mig", "apply", "--reset", "-f", f}, wantExit: cli.ExitBusy,
			wantResets: map[int]int{1: 1}, wantMIG: map[int]bool{0: true, 1: true, 2: false, 3: false},
		},
	}
	for _, st := range steps {
		code, out, errOut := n.run(st.args...)
		mustExit(t, st.name, code, st.wantExit, out, errOut)
		for _, w := range st.wantErr {
			if !strings.Contains(errOut, w) {
				t.Errorf("%s: stderr lacks %q:\n%s", st.name, w, errOut)
			}
		}
		if got := n.resets(); !maps.Equal(got, st.wantResets) {
			t.Errorf("%s: resets per GPU %v, want %v", st.name, got, st.wantResets)
		}
		node := n.inventory()
		for i, want := range st.wantMIG {
			if node.GPUs[i].MIGEnabled != want {
				t.Errorf("%s: GPU %d MIG %v, want %v", st.name, i, node.GPUs[i].MIGEnabled, want)
			}
		}
		if got := counts(node.GPUs[1]); st.wantMIG[1] && !maps.Equal(got, map[string]int{"3g.71gb": 2}) {
			t.Errorf("%s: GPU 1 carries %v after its reset", st.name, got)
		}
		if !node.GPUs[3].MIGPending {
			t.Errorf("%s: GPU 3's pending change is gone: it was reset", st.name)
		}
	}

	// The process ends: GPU 2 can be reset now; JSON says so.
	if err := s.SetProcesses(node.GPUs[2].UUID); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = n.run("mig", "apply", "--reset", "--output", "json", "-f", f)
	mustExit(t, "--reset --output json", code, cli.ExitOK, out, errOut)
	var res cli.ApplyResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	reset := map[int]bool{}
	for _, g := range res.GPUs {
		reset[g.Index] = g.Reset
	}
	if !maps.Equal(reset, map[int]bool{0: false, 1: false, 2: true}) || !slicesEqual(res.Changed, []int{2}) || !slicesEqual(res.Kept, []int{0, 1}) {
		t.Errorf("reset per GPU %v, changed %v, kept %v:\n%s", reset, res.Changed, res.Kept, out)
	}
	if got := n.resets(); !maps.Equal(got, map[int]int{1: 1, 2: 1}) {
		t.Errorf("resets per GPU %v, want GPUs 1 and 2 once each", got)
	}
}

func slicesEqual(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestMIGApplyJSON(t *testing.T) {
	n := newMIGNode(t)
	setup := n.file("setup.yaml", "version: gpumux.io/v1\ngpus:\n  - {match: \"0,1\", mig-enabled: true, mig-devices: {7g.141gb: 1}}\n")
	code, out, errOut := n.run("mig", "apply", "-f", setup)
	mustExit(t, "setup", code, cli.ExitOK, out, errOut)
	busy := n.inventory().GPUs[0].MIGInstances[0].UUID
	if err := n.simulated().Simulated().SetProcesses(busy, 99); err != nil {
		t.Fatal(err)
	}
	f := n.file("layout.yaml", `version: gpumux.io/v1
gpus:
  - {match: "0,1", mig-enabled: true, mig-devices: {3g.71gb: 1, 2g.35gb: 2}}
  - {match: "2", mig-enabled: false}
`)
	code, out, errOut = n.run("mig", "apply", "--output", "json", "-f", f)
	mustExit(t, "apply", code, cli.ExitBusy, out, errOut)
	var res cli.ApplyResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("stdout is not the JSON result: %v\n%s", err, out)
	}
	if res.ExitCode != cli.ExitBusy || !slicesEqual(res.Busy, []int{0}) || !slicesEqual(res.Changed, []int{1}) || !slicesEqual(res.Kept, []int{2}) || len(res.Failed) != 0 || len(res.GPUs) != 3 {
		t.Fatalf("result: %+v", res)
	}
	tests := []struct {
		index     int
		result    string
		steps     []string
		errPart   string
		layout    []string // profile@placement afterwards
		matches   bool
		keepsUUID string
	}{
		{index: 0, result: cli.ResultBusy, steps: []string{}, errPart: "pids [99]", layout: []string{"7g.141gb@0:8"}, keepsUUID: busy},
		{index: 1, result: cli.ResultChanged, steps: []string{
			"destroying 7g.141gb (GPU instance 0 at 0:8)", "creating 3g.71gb at 4:4", "creating 2g.35gb at 0:2", "creating 2g.35gb at 2:2", "MIG layout is 2× 2g.35gb + 1× 3g.71gb",
		}, layout: []string{"2g.35gb@0:2", "2g.35gb@2:2", "3g.71gb@4:4"}, matches: true},
		{index: 2, result: cli.ResultKept, steps: []string{"keeping MIG off"}, layout: []string{}, matches: true},
	}
	for i, tc := range tests {
		g := res.GPUs[i]
		var layout []string
		for _, inst := range g.Layout.Instances {
			layout = append(layout, inst.Profile+"@"+inst.Placement.String())
		}
		if g.Index != tc.index || g.Result != tc.result || strings.Join(g.Steps, "|") != strings.Join(tc.steps, "|") ||
			!strings.Contains(g.Error, tc.errPart) || (tc.errPart == "") != (g.Error == "") ||
			strings.Join(layout, ",") != strings.Join(tc.layout, ",") || g.Matches != tc.matches || g.Layout.MIGEnabled != (tc.index != 2) {
			t.Errorf("GPU %d: %+v\nwant %+v", tc.index, g, tc)
		}
		if tc.keepsUUID != "" && (len(g.Layout.Instances) != 1 || g.Layout.Instances[0].UUID != tc.keepsUUID) {
			t.Errorf("GPU %d: instances %+v, want %s kept", tc.index, g.Layout.Instances, tc.keepsUUID)
		}
		if g.Plan.Index != tc.index || g.Plan.Rule == "" {
			t.Errorf("GPU %d: plan %+v", tc.index, g.Plan)
		}
	}
	if strings.Contains(out, "GPUs changed") {
		t.Errorf("JSON output carries the table summary:\n%s", out)
	}
}

func TestMIGAssertJSON(t *testing.T) {
	n := newMIGNode(t)
	setup := n.file("setup.yaml", "version: gpumux.io/v1\ngpus:\n  - {match: \"0\", mig-enabled: true, mig-devices: {3g.71gb: 2}}\n  - {match: \"1\", mig-enabled: true, mig-devices: {}}\n")
	code, out, errOut := n.run("mig", "apply", "-f", setup)
	mustExit(t, "setup", code, cli.ExitOK, out, errOut)
	tests := []struct {
		name     string
		rule     string
		wantExit int
		wantDiff []cli.Difference // nil: matches
	}{
		{"matches", `{match: "0", mig-enabled: true, mig-devices: {3g.71gb: 2}}`, cli.ExitOK, nil},
		{"other profiles", `{match: "0", mig-enabled: true, mig-devices: {3g.71gb: 1, 2g.35gb: 2}}`, cli.ExitDiffers,
			[]cli.Difference{{Field: "mig-devices.2g.35gb", Has: 0.0, Wants: 2.0}, {Field: "mig-devices.3g.71gb", Has: 2.0, Wants: 1.0}}},
		{"MIG off wanted", `{match: "0", mig-enabled: false}`, cli.ExitDiffers,
			[]cli.Difference{{Field: "mig-enabled", Has: true, Wants: false}, {Field: "mig-devices.3g.71gb", Has: 2.0, Wants: 0.0}}},
		{"MIG on wanted", `{match: "2", mig-enabled: true, mig-devices: {7g.141gb: 1}}`, cli.ExitDiffers,
			[]cli.Difference{{Field: "mig-enabled", Has: false, Wants: true}, {Field: "mig-devices.7g.141gb", Has: 0.0, Wants: 1.0}}},
		{"MIG on, no instances", `{match: "1", mig-enabled: true, mig-devices: {}}`, cli.ExitOK, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := n.file("assert.yaml", "version: gpumux.io/v1\ngpus:\n  - "+tc.rule+"\n")
			code, out, errOut := n.run("mig", "assert", "--output", "json", "-f", f)
			mustExit(t, "assert", code, tc.wantExit, out, errOut)
			var res cli.AssertResult
			if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.GPUs) != 1 {
				t.Fatalf("%v\n%s", err, out)
			}
			g := res.GPUs[0]
			if res.Matches != (tc.wantDiff == nil) || g.Matches != res.Matches || res.Differ != len(res.GPUs)-btoi(res.Matches) {
				t.Errorf("matches %v (GPU %v, differ %d), want %v", res.Matches, g.Matches, res.Differ, tc.wantDiff == nil)
			}
			if len(g.Differences) != len(tc.wantDiff) {
				t.Fatalf("differences %+v, want %+v", g.Differences, tc.wantDiff)
			}
			for i, d := range tc.wantDiff {
				if g.Differences[i] != d {
					t.Errorf("difference %d: %+v, want %+v", i, g.Differences[i], d)
				}
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// A reservation made through the plugin's Reserve becomes a lease when
// gpumux-runtime claims it for its container: the instance is then busy.
// (An unclaimed reservation is not a lease; the Nomad allocation it was made
// for is what makes the instance busy, see TestMIGApplyNomadAllocations.)
func TestMIGApplyClaimedReservation(t *testing.T) {
	n := newMIGNode(t)
	setup := n.file("setup.yaml", "version: gpumux.io/v1\ngpus:\n  - {match: \"0\", mig-enabled: true, mig-devices: {7g.141gb: 1}}\n")
	code, out, errOut := n.run("mig", "apply", "-f", setup)
	mustExit(t, "setup", code, cli.ExitOK, out, errOut)
	inst := n.inventory().GPUs[0].MIGInstances[0].UUID
	st, err := lease.Open(lease.PathIn(n.dir))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const token = "0123456789abcdef0123456789abcdef"
	if err := st.Reserve(ctx, token, []string{inst}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Claim(ctx, "nomad-task-c1", token, []string{inst}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	change := n.file("change.yaml", "version: gpumux.io/v1\ngpus:\n  - {match: \"0\", mig-enabled: true, mig-devices: {3g.71gb: 2}}\n")
	code, out, errOut = n.run("mig", "apply", "-f", change)
	mustExit(t, "apply", code, cli.ExitBusy, out, errOut)
	if !strings.Contains(errOut, "held by container nomad-task-c1") {
		t.Errorf("stderr:\n%s", errOut)
	}
}

// A layout that cannot fit around a busy instance is refused with the
// instance in the way and its slots; one that cannot fit at all is refused
// with the profiles that overlap.
func TestMIGPlanInfeasibleReasons(t *testing.T) {
	n := newMIGNode(t)
	setup := n.file("setup.yaml", "version: gpumux.io/v1\ngpus:\n  - {match: \"0\", mig-enabled: true, mig-devices: {3g.71gb: 2}}\n")
	code, out, errOut := n.run("mig", "apply", "-f", setup)
	mustExit(t, "setup", code, cli.ExitOK, out, errOut)
	for _, inst := range n.inventory().GPUs[0].MIGInstances {
		if inst.Placement.Start == 0 {
			if err := n.simulated().Simulated().SetProcesses(inst.UUID, 12); err != nil {
				t.Fatal(err)
			}
		}
	}
	tests := []struct {
		name     string
		rule     string
		cmd      string
		wantExit int
		want     string // in stdout or stderr
	}{
		{"around a busy 3g.71gb", `{match: "0", mig-enabled: true, mig-devices: {4g.71gb: 1, 3g.71gb: 1}}`, "plan", cli.ExitOK,
			"cannot apply: GPU 0 (NVIDIA H200): layout does not fit: no non-overlapping placements exist for 1× 4g.71gb around the instances that stay (3g.71gb at 0:4): 1× 4g.71gb can only be placed at 0:4, which overlaps 3g.71gb at 0:4 (slots 0-3), an instance that stays"},
		{"apply around a busy 3g.71gb", `{match: "0", mig-enabled: true, mig-devices: {4g.71gb: 1, 3g.71gb: 1}}`, "apply", cli.ExitError,
			"GPU 0 failed: GPU 0: GPU 0 (NVIDIA H200): layout does not fit: no non-overlapping placements exist for 1× 4g.71gb around the instances that stay (3g.71gb at 0:4)"},
		{"4g.71gb and two 2g.35gb", `{match: "1", mig-enabled: true, mig-devices: {4g.71gb: 1, 2g.35gb: 2}}`, "plan", cli.ExitError,
			"1× 4g.71gb (at 0:4) and 2× 2g.35gb (at 0:2, 2:2, 4:2) overlap on memory slots 0-3; together they need 8 memory slots, and their placements cover only slots 0-5"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := n.file("l.yaml", "version: gpumux.io/v1\ngpus:\n  - "+tc.rule+"\n")
			code, out, errOut := n.run("mig", tc.cmd, "-f", f)
			mustExit(t, tc.cmd, code, tc.wantExit, out, errOut)
			if !strings.Contains(out+errOut, tc.want) {
				t.Errorf("output lacks %q:\n%s%s", tc.want, out, errOut)
			}
		})
	}
}

// The examples of docs/mig.md that do not fit say why.
func TestMIGExamplesThatDoNotFit(t *testing.T) {
	tests := []struct{ file, want string }{
		{"overlap.yaml", "overlap.yaml:8: gpus[0].mig-devices: {2g.35gb: 2, 4g.71gb: 1}: these do not fit together on GPUs 0-7 (NVIDIA H200): no non-overlapping placements exist for 2× 2g.35gb + 1× 4g.71gb: 1× 4g.71gb (at 0:4) and 2× 2g.35gb (at 0:2, 2:2, 4:2) overlap on memory slots 0-3"},
		{"no-fit.yaml", "2× 3g.71gb + 1× 4g.71gb need 12 memory slots, the GPU has 8"},
	}
	for _, tc := range tests {
		n := newMIGNode(t)
		code, out, errOut := n.run("mig", "plan", "-f", "../examples/mig/"+tc.file)
		mustExit(t, tc.file, code, cli.ExitError, out, errOut)
		if !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: stderr lacks %q:\n%s", tc.file, tc.want, errOut)
		}
	}
}
