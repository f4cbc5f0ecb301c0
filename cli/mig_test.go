package cli_test

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumux/gpumux/cli"
	"github.com/gpumux/gpumux/gpu"
	"github.com/gpumux/gpumux/node/lease"
)

// migNode is a simulated dgxh200 in a temp state dir.
type migNode struct {
	t   *testing.T
	dir string
}

func newMIGNode(t *testing.T) *migNode { return &migNode{t, t.TempDir()} }

func (n *migNode) run(args ...string) (int, string, string) {
	n.t.Helper()
	return run(n.t, append(args, "--simulate", "dgxh200", "--state-dir", n.dir)...)
}

// file writes a layout file and returns its path.
func (n *migNode) file(name, src string) string {
	n.t.Helper()
	p := filepath.Join(n.dir, name)
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		n.t.Fatal(err)
	}
	return p
}

// inventory reads the node afresh, through a new Host.
func (n *migNode) inventory() *gpu.Node {
	n.t.Helper()
	h, err := gpu.OpenSimulated("dgxh200", n.dir)
	if err != nil {
		n.t.Fatal(err)
	}
	defer h.Close()
	node, err := h.Inventory(context.Background())
	if err != nil {
		n.t.Fatal(err)
	}
	return node
}

func counts(g gpu.GPU) map[string]int {
	m := map[string]int{}
	for _, i := range g.MIGInstances {
		m[i.Profile]++
	}
	return m
}

func mustExit(t *testing.T, what string, got, want int, stdout, stderr string) {
	t.Helper()
	if got != want {
		t.Fatalf("%s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", what, got, want, stdout, stderr)
	}
}

const h200Layout = `version: gpumux.io/v1
gpus:
  - match: "0-3"
    mig-enabled: true
    mig-devices:
      3g.71gb: 1
      2g.35gb: 2
  - match: "4"
    mig-enabled: true
    mig-devices:
      1g.18gb: 7
  - match: "6"
    mig-enabled: true
    mig-devices: {}
  - match: "7"
    device-filter: "0x233510DE"
    mig-enabled: false
`

func TestMIGPlanApplyAssert(t *testing.T) {
	n := newMIGNode(t)
	f := n.file("layout.yaml", h200Layout)

	code, out, errOut := n.run("mig", "plan", "-f", f)
	mustExit(t, "plan", code, cli.ExitOK, out, errOut)
	for _, want := range []string{
		"enable MIG and create 3g.71gb at 4:4, 2g.35gb at 0:2, 2g.35gb at 2:2",
		"enable MIG and create 1g.18gb at 6:1", // the slot that blocks the fewest others
		"MIG on, no instances     enable MIG\n",
		"MIG off  MIG off                  keep",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("plan lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\n5 ") {
		t.Errorf("plan shows GPU 5, which no rule selects:\n%s", out)
	}
	if node := n.inventory(); node.GPUs[0].MIGEnabled {
		t.Fatal("plan changed GPU 0")
	}

	code, out, errOut = n.run("mig", "assert", "-f", f)
	mustExit(t, "assert before apply", code, cli.ExitDiffers, out, errOut)
	if !strings.Contains(out, "GPU 0: differs") || strings.Contains(out, "GPU 7: differs") {
		t.Errorf("assert output:\n%s", out)
	}

	code, out, errOut = n.run("mig", "apply", "-f", f, "--dry-run")
	mustExit(t, "apply --dry-run", code, cli.ExitOK, out, errOut)
	if node := n.inventory(); node.GPUs[0].MIGEnabled {
		t.Fatal("apply --dry-run changed GPU 0")
	}

	code, out, errOut = n.run("mig", "apply", "-f", f)
	mustExit(t, "apply", code, cli.ExitOK, out, errOut)
	for _, want := range []string{"GPU 0: enabling MIG mode", "GPU 0: creating 3g.71gb at 4:4", "GPU 4: creating 1g.18gb at 6:1", "GPU 7: keeping MIG off", "6 GPUs changed [0 1 2 3 4 6], 1 kept [7]"} {
		if !strings.Contains(out, want) {
			t.Errorf("apply output lacks %q:\n%s", want, out)
		}
	}
	node := n.inventory()
	wants := map[int]map[string]int{
		0: {"3g.71gb": 1, "2g.35gb": 2}, 3: {"3g.71gb": 1, "2g.35gb": 2},
		4: {"1g.18gb": 7}, 5: {}, 6: {}, 7: {},
	}
	for i, want := range wants {
		g := node.GPUs[i]
		if got := counts(g); !maps.Equal(got, want) {
			t.Errorf("GPU %d: %v, want %v", i, got, want)
		}
		if wantMIG := i != 5 && i != 7; g.MIGEnabled != wantMIG {
			t.Errorf("GPU %d: MIG enabled %v, want %v", i, g.MIGEnabled, wantMIG)
		}
	}

	code, out, errOut = n.run("mig", "apply", "-f", f)
	mustExit(t, "second apply", code, cli.ExitOK, out, errOut)
	if !strings.Contains(out, "0 GPUs changed [], 7 kept") || strings.Contains(out, "creating") {
		t.Errorf("second apply changed something:\n%s", out)
	}
	code, out, errOut = n.run("mig", "assert", "-f", f)
	mustExit(t, "assert after apply", code, cli.ExitOK, out, errOut)
}

func TestMIGPlanActions(t *testing.T) {
	n := newMIGNode(t)
	setup := n.file("setup.yaml", `version: gpumux.io/v1
gpus:
  - match: "0,1"
    mig-enabled: true
    mig-devices: {7g.141gb: 1}
  - match: "2"
    mig-enabled: true
    mig-devices: {}
`)
	code, out, errOut := n.run("mig", "apply", "-f", setup)
	mustExit(t, "setup", code, cli.ExitOK, out, errOut)

	tests := []struct {
		name, rule, action string
	}{
		{"keep", `{match: "0", mig-enabled: true, mig-devices: {7g.141gb: 1}}`, "keep"},
		{"change", `{match: "0", mig-enabled: true, mig-devices: {3g.71gb: 2}}`, "destroy 7g.141gb at 0:8; create 3g.71gb at 4:4, 3g.71gb at 0:4"},
		{"create", `{match: "2", mig-enabled: true, mig-devices: {4g.71gb: 1}}`, "create 4g.71gb at 0:4"},
		{"enable", `{match: "3", mig-enabled: true, mig-devices: {4g.71gb: 1, 3g.71gb: 1}}`, "enable MIG and create 4g.71gb at 0:4, 3g.71gb at 4:4"},
		{"disable", `{match: "2", mig-enabled: false}`, "disable MIG"},
		{"disable with instances", `{match: "1", mig-enabled: false}`, "destroy 7g.141gb at 0:8; disable MIG"},
		{"keep off", `{match: "5", mig-enabled: false}`, "keep"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := n.file("plan.yaml", "version: gpumux.io/v1\ngpus:\n  - "+tc.rule+"\n")
			code, out, errOut := n.run("mig", "plan", "-f", f)
			mustExit(t, "plan", code, cli.ExitOK, out, errOut)
			if !strings.Contains(out, tc.action) {
				t.Errorf("plan lacks %q:\n%s", tc.action, out)
			}
			code, out, errOut = n.run("mig", "plan", "-f", f, "--output", "json")
			mustExit(t, "plan json", code, cli.ExitOK, out, errOut)
			var plans []cli.GPUPlan
			if err := json.Unmarshal([]byte(out), &plans); err != nil || len(plans) != 1 {
				t.Fatalf("plan json: %v\n%s", err, out)
			}
		})
	}
	// The plans changed nothing.
	node := n.inventory()
	if !maps.Equal(counts(node.GPUs[0]), map[string]int{"7g.141gb": 1}) || node.GPUs[3].MIGEnabled {
		t.Errorf("plan changed the node: GPU 0 %v, GPU 3 MIG %v", counts(node.GPUs[0]), node.GPUs[3].MIGEnabled)
	}
}

func TestMIGApplyBusy(t *testing.T) {
	n := newMIGNode(t)
	setup := n.file("setup.yaml", "version: gpumux.io/v1\ngpus:\n  - {match: \"0,1\", mig-enabled: true, mig-devices: {7g.141gb: 1}}\n")
	code, out, errOut := n.run("mig", "apply", "-f", setup)
	mustExit(t, "setup", code, cli.ExitOK, out, errOut)

	h, err := gpu.OpenSimulated("dgxh200", n.dir)
	if err != nil {
		t.Fatal(err)
	}
	node, _ := h.Inventory(context.Background())
	busyUUID := node.GPUs[0].MIGInstances[0].UUID
	if err := h.Simulated().SetProcesses(busyUUID, 4242); err != nil {
		t.Fatal(err)
	}
	h.Close()

	f := n.file("layout.yaml", "version: gpumux.io/v1\ngpus:\n  - {match: \"0,1\", mig-enabled: true, mig-devices: {3g.71gb: 2}}\n")
	code, out, errOut = n.run("mig", "plan", "-f", f)
	mustExit(t, "plan", code, cli.ExitOK, out, errOut)
	if !strings.Contains(out, "apply will refuse: "+busyUUID) {
		t.Errorf("plan does not mark GPU 0 busy:\n%s", out)
	}
	code, out, errOut = n.run("mig", "apply", "-f", f)
	mustExit(t, "apply", code, cli.ExitBusy, out, errOut)
	if !strings.Contains(errOut, "GPU 0 refused, left unchanged") || !strings.Contains(errOut, "4242") {
		t.Errorf("stderr:\n%s", errOut)
	}
	if !strings.Contains(out, "1 GPUs changed [1], 0 kept [], 1 refused as busy [0]") {
		t.Errorf("summary:\n%s", out)
	}
	node = n.inventory()
	if got := counts(node.GPUs[0]); !maps.Equal(got, map[string]int{"7g.141gb": 1}) || node.GPUs[0].MIGInstances[0].UUID != busyUUID {
		t.Errorf("busy GPU 0 changed: %+v", node.GPUs[0].MIGInstances)
	}
	if got := counts(node.GPUs[1]); !maps.Equal(got, map[string]int{"3g.71gb": 2}) {
		t.Errorf("GPU 1: %v, want 2× 3g.71gb", got)
	}
	code, out, errOut = n.run("mig", "assert", "-f", f)
	mustExit(t, "assert", code, cli.ExitDiffers, out, errOut)
	if !strings.Contains(out, "GPU 0: differs") || strings.Contains(out, "GPU 1: differs") {
		t.Errorf("assert:\n%s", out)
	}
}

func TestMIGExport(t *testing.T) {
	n := newMIGNode(t)
	f := n.file("layout.yaml", h200Layout)
	code, out, errOut := n.run("mig", "apply", "-f", f)
	mustExit(t, "apply", code, cli.ExitOK, out, errOut)

	exported := filepath.Join(n.dir, "exported.yaml")
	code, out, errOut = n.run("mig", "export", "-f", exported)
	mustExit(t, "export", code, cli.ExitOK, out, errOut)
	code, stdoutExport, errOut := n.run("mig", "export")
	mustExit(t, "export to stdout", code, cli.ExitOK, stdoutExport, errOut)
	if b, _ := os.ReadFile(exported); string(b) != stdoutExport || !strings.Contains(stdoutExport, "version: gpumux.io/v1") {
		t.Errorf("export to a file and to stdout differ, or are not a layout:\n%s\n---\n%s", b, stdoutExport)
	}
	code, out, errOut = n.run("mig", "assert", "-f", exported)
	mustExit(t, "assert of the export", code, cli.ExitOK, out, errOut)
	if !strings.Contains(out, "all 8 selected GPUs match") {
		t.Errorf("assert:\n%s", out)
	}

	// The export names GPUs by UUID: on another node it selects nothing,
	// which assert accepts with a note.
	other := newMIGNode(t)
	code, out, errOut = other.run("mig", "assert", "-f", exported)
	mustExit(t, "assert of the export on another node", code, cli.ExitOK, out, errOut)
	if !strings.Contains(errOut, "selects no GPU of this node") {
		t.Errorf("no note that the export selects no GPU:\n%s", errOut)
	}

	// Change GPU 0, then apply the export: back to what was exported.
	change := n.file("change.yaml", "version: gpumux.io/v1\ngpus:\n  - {match: \"0\", mig-enabled: true, mig-devices: {7g.141gb: 1}}\n")
	code, out, errOut = n.run("mig", "apply", "-f", change)
	mustExit(t, "apply change", code, cli.ExitOK, out, errOut)
	code, out, errOut = n.run("mig", "assert", "-f", exported)
	mustExit(t, "assert after change", code, cli.ExitDiffers, out, errOut)
	code, out, errOut = n.run("mig", "apply", "-f", exported)
	mustExit(t, "apply export", code, cli.ExitOK, out, errOut)
	if !strings.Contains(out, "1 GPUs changed [0], 7 kept") {
		t.Errorf("apply of the export:\n%s", out)
	}
	if got := counts(n.inventory().GPUs[0]); !maps.Equal(got, map[string]int{"3g.71gb": 1, "2g.35gb": 2}) {
		t.Errorf("GPU 0 after applying the export: %v", got)
	}
}

// TestMIGDisable turns MIG off on GPUs with instances in one apply, as
// mig-parted's all-disabled does: idle instances are destroyed and MIG
// mode disabled; a GPU with an instance in use is refused and left as it
// is, the others still done.
func TestMIGDisable(t *testing.T) {
	n := newMIGNode(t)
	on := n.file("on.yaml", "version: gpumux.io/v1\ngpus:\n  - {match: \"1,2\", mig-enabled: true, mig-devices: {1g.18gb: 1, 3g.71gb: 1, 2g.35gb: 1}}\n")
	code, out, errOut := n.run("mig", "apply", "-f", on)
	mustExit(t, "apply on", code, cli.ExitOK, out, errOut)
	busyUUID := n.inventory().GPUs[1].MIGInstances[0].UUID
	h, err := gpu.OpenSimulated("dgxh200", n.dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Simulated().SetProcesses(busyUUID, 4242); err != nil {
		t.Fatal(err)
	}
	h.Close()

	// mig-parted's own file, unchanged: all-disabled on every GPU.
	f := filepath.Join("..", "mig", "layout", "testdata", "mig-parted-config-default.yaml")
	code, out, errOut = n.run("mig", "plan", "-f", f, "-c", "all-disabled")
	mustExit(t, "plan all-disabled", code, cli.ExitOK, out, errOut)
	if !strings.Contains(out, "destroy 3g.71gb at 4:4, 2g.35gb at 0:2, 1g.18gb at 2:1; disable MIG") || !strings.Contains(out, "; disable MIG") || !strings.Contains(out, "apply will refuse: "+busyUUID) {
		t.Errorf("plan all-disabled:\n%s", out)
	}
	code, out, errOut = n.run("mig", "apply", "-f", f, "-c", "all-disabled")
	mustExit(t, "apply all-disabled", code, cli.ExitBusy, out, errOut)
	if !strings.Contains(out, "GPU 2: destroying 3g.71gb") || !strings.Contains(out, "GPU 2: disabling MIG mode") || !strings.Contains(errOut, "GPU 1 refused, left unchanged") {
		t.Errorf("apply all-disabled:\n%s\n%s", out, errOut)
	}
	node := n.inventory()
	if g := node.GPUs[2]; g.MIGEnabled || g.MIGPending || len(g.MIGInstances) != 0 {
		t.Errorf("GPU 2 after all-disabled: MIG %v (pending %v), %d instances", g.MIGEnabled, g.MIGPending, len(g.MIGInstances))
	}
	if g := node.GPUs[1]; !g.MIGEnabled || !maps.Equal(counts(g), map[string]int{"1g.18gb": 1, "3g.71gb": 1, "2g.35gb": 1}) {
		t.Errorf("busy GPU 1 changed: MIG %v, %v", g.MIGEnabled, counts(g))
	}

	// Once the processes are gone, the same file finishes the job.
	h, err = gpu.OpenSimulated("dgxh200", n.dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Simulated().SetProcesses(busyUUID); err != nil {
		t.Fatal(err)
	}
	h.Close()
	code, out, errOut = n.run("mig", "apply", "-f", f, "-c", "all-disabled")
	mustExit(t, "apply all-disabled again", code, cli.ExitOK, out, errOut)
	code, out, errOut = n.run("mig", "assert", "-f", f, "-c", "all-disabled")
	mustExit(t, "assert all-disabled", code, cli.ExitOK, out, errOut)
}

func TestMIGPartedConfig(t *testing.T) {
	n := newMIGNode(t)
	f := filepath.Join("..", "mig", "layout", "testdata", "mig-parted-config-default.yaml")
	code, out, errOut := n.run("mig", "apply", "-f", f, "-c", "all-balanced")
	mustExit(t, "apply all-balanced", code, cli.ExitOK, out, errOut)
	want := map[string]int{"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}
	for _, g := range n.inventory().GPUs {
		if got := counts(g); !maps.Equal(got, want) {
			t.Errorf("GPU %d: %v, want %v", g.Index, got, want)
		}
	}
	code, out, errOut = n.run("mig", "assert", "-f", f, "-c", "all-balanced")
	mustExit(t, "assert all-balanced", code, cli.ExitOK, out, errOut)
	code, out, errOut = n.run("mig", "assert", "-f", f, "-c", "all-enabled")
	mustExit(t, "assert all-enabled", code, cli.ExitDiffers, out, errOut)
	code, out, errOut = n.run("mig", "plan", "-f", f, "-c", "no-such-config")
	mustExit(t, "unknown config", code, cli.ExitError, out, errOut)
}

func TestMIGErrors(t *testing.T) {
	n := newMIGNode(t)
	bad := n.file("bad.yaml", "version: gpumux.io/v1\ngpus:\n  - match: \"0\"\n    mig-enabled: yes\n")
	nofit := n.file("nofit.yaml", "version: gpumux.io/v1\ngpus:\n  - match: \"0\"\n    mig-enabled: true\n    mig-devices: {1g.10gb: 1}\n")
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"bad file", []string{"mig", "plan", "-f", bad}, cli.ExitError, "bad.yaml:4: gpus[0].mig-enabled"},
		{"bad file apply", []string{"mig", "apply", "-f", bad}, cli.ExitError, "bad.yaml:4:"},
		{"bad file assert", []string{"mig", "assert", "-f", bad}, cli.ExitError, "bad.yaml:4:"},
		{"no such profile", []string{"mig", "apply", "-f", nofit}, cli.ExitError, "nofit.yaml:5:"},
		{"missing file", []string{"mig", "plan", "-f", filepath.Join(n.dir, "nope.yaml")}, cli.ExitError, "nope.yaml"},
		{"no -f", []string{"mig", "plan"}, cli.ExitUsage, "-f FILE is required"},
		{"bad output", []string{"mig", "plan", "-f", bad, "-o", "xml"}, cli.ExitUsage, `--output "xml": want table, json, yaml, wide`},
		{"extra args", []string{"mig", "assert", "-f", bad, "x"}, cli.ExitUsage, "unexpected arguments"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := n.run(tc.args...)
			mustExit(t, strings.Join(tc.args, " "), code, tc.code, out, errOut)
			if !strings.Contains(errOut, tc.stderr) {
				t.Errorf("stderr lacks %q:\n%s", tc.stderr, errOut)
			}
		})
	}
	if g := n.inventory().GPUs[0]; g.MIGEnabled {
		t.Error("a failed command changed GPU 0")
	}
	for _, tc := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"mig", "frob"}, `unknown command "frob" for "gpumux mig"`},
		{[]string{"mig"}, "gpumux mig [command]"},
	} {
		code, out, errOut := run(t, tc.args...)
		mustExit(t, strings.Join(tc.args, " "), code, cli.ExitUsage, out, errOut)
		if !strings.Contains(errOut, tc.stderr) {
			t.Errorf("%v: stderr lacks %q:\n%s", tc.args, tc.stderr, errOut)
		}
	}
}

func TestMIGHelp(t *testing.T) {
	tests := []struct {
		cmd  string
		want []string
	}{
		{"plan", []string{"-o, --output FORMAT", "--nomad ADDR", "overlap on which\nmemory slots", "live Nomad allocation", "-o wide adds"}},
		{"apply", []string{"-o, --output FORMAT", "--reset", "--force", "--nomad ADDR", "nvidia-smi -r -i N", "resets exactly that", "-o json (or yaml) prints", "4 a GPU was refused"}},
		{"assert", []string{"-o, --output FORMAT", "-o json (or yaml) prints", "mig-devices.<profile>", "3 a GPU\ndiffers"}},
		{"export", []string{"-f, --file FILE", "--format FORMAT", "-c, --selected-config CONFIG", "nvidia-mig-parted apply -f FILE -c current and", "--output FILE, the flag's name before -f/--file"}},
	}
	for _, tc := range tests {
		code, out, errOut := run(t, "mig", tc.cmd, "-h")
		mustExit(t, tc.cmd+" -h", code, cli.ExitOK, out, errOut)
		for _, w := range append(tc.want, "Exit codes: 0", "--simulate") {
			if !strings.Contains(out, w) {
				t.Errorf("mig %s -h lacks %q:\n%s", tc.cmd, w, out)
			}
		}
	}
	if _, out, _ := run(t, "mig", "assert", "-h"); strings.Contains(out, "--reset") || strings.Contains(out, "--nomad") {
		t.Errorf("mig assert -h offers flags of apply:\n%s", out)
	}
	if _, out, _ := run(t, "mig", "export", "-h"); strings.Contains(out, "--output") && !strings.Contains(out, "--output FILE, the flag's name") {
		t.Errorf("mig export -h offers the deprecated --output as a flag:\n%s", out)
	}
	code, out, _ := run(t, "mig", "-h")
	if code != cli.ExitOK || !strings.Contains(out, "4  apply: a GPU was refused") {
		t.Errorf("mig -h: exit %d\n%s", code, out)
	}
	if _, out, _ := run(t, "help"); !strings.Contains(out, "mig ") {
		t.Errorf("usage lacks mig:\n%s", out)
	}
}

func TestMIGApplyRespectsLeases(t *testing.T) {
	n := newMIGNode(t)
	setup := n.file("setup.yaml", "version: gpumux.io/v1\ngpus:\n  - {match: \"0\", mig-enabled: true, mig-devices: {7g.141gb: 1}}\n")
	code, out, errOut := n.run("mig", "apply", "-f", setup)
	mustExit(t, "setup", code, cli.ExitOK, out, errOut)
	inst := n.inventory().GPUs[0].MIGInstances[0]
	// A container of gpumux-runtime holds the instance; nothing runs on it yet.
	st, err := lease.Open(lease.PathIn(n.dir))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Acquire(context.Background(), "c1", func(map[string]string) ([]string, error) { return []string{inst.UUID}, nil }); err != nil {
		t.Fatal(err)
	}
	st.Close()

	change := n.file("change.yaml", "version: gpumux.io/v1\ngpus:\n  - {match: \"0\", mig-enabled: true, mig-devices: {3g.71gb: 2}}\n")
	code, out, errOut = n.run("mig", "plan", "-f", change)
	mustExit(t, "plan", code, cli.ExitOK, out, errOut)
	if !strings.Contains(out, "in use, apply will refuse: "+inst.UUID) {
		t.Errorf("plan does not show the held instance:\n%s", out)
	}
	code, out, errOut = n.run("mig", "apply", "-f", change)
	if code != cli.ExitBusy || !strings.Contains(errOut, "held by container c1") {
		t.Fatalf("apply over a held instance: exit %d, stderr %q", code, errOut)
	}
	if got := n.inventory().GPUs[0].MIGInstances; len(got) != 1 || got[0].UUID != inst.UUID {
		t.Fatalf("a refused apply changed GPU 0: %+v", got)
	}
	code, out, errOut = n.run("mig", "apply", "--force", "-f", change)
	mustExit(t, "apply --force", code, cli.ExitOK, out, errOut)
	if got := n.inventory().GPUs[0].MIGInstances; len(got) != 2 || got[0].Profile != "3g.71gb" {
		t.Errorf("after --force: %+v", got)
	}
}
