package layout

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpumux/gpumux/gpu"
	"github.com/gpumux/gpumux/mig"
)

// simIDs are the PCI ids the simulated models report (gpu/sim/models.go).
var simIDs = map[string]DeviceID{
	"NVIDIA H200":           {ID: 0x233510DE, Subsystem: 0x18BF10DE},
	"NVIDIA H100 80GB HBM3": {ID: 0x233010DE, Subsystem: 0x16C110DE},
	"NVIDIA A100-SXM4-40GB": {ID: 0x20B010DE, Subsystem: 0x134F10DE},
}

func simPCIID(g *gpu.GPU) (DeviceID, error) {
	id, ok := simIDs[g.Model]
	if !ok {
		return DeviceID{}, fmt.Errorf("no PCI ids for %s", g.Model)
	}
	return id, nil
}

func openSim(t *testing.T, model string) *gpu.Host {
	t.Helper()
	h, err := gpu.OpenSimulated(model, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func inventory(t *testing.T, h *gpu.Host) *gpu.Node {
	t.Helper()
	node, err := h.Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return node
}

func simNode(t *testing.T, model string) *gpu.Node {
	t.Helper()
	return inventory(t, openSim(t, model))
}

// mixedNode has H200s as GPUs 0-3 and A100s as GPUs 4-7.
func mixedNode(t *testing.T) *gpu.Node {
	h200, a100 := simNode(t, "dgxh200"), simNode(t, "dgxa100")
	node := *h200
	node.GPUs = append(slices.Clone(h200.GPUs[:4]), a100.GPUs[4:]...)
	return &node
}

// wants writes For's result one GPU per line, for comparison.
func wants(m map[int]Want) []string {
	out := []string{}
	for _, i := range slices.Sorted(maps.Keys(m)) {
		w := m[i]
		s := fmt.Sprintf("GPU %d: mig=%v", i, w.MIGEnabled)
		if w.MIGEnabled {
			s += " " + describe(w.Devices)
		}
		if w.Devices == nil {
			s += " (nil devices)"
		}
		out = append(out, s+" from "+w.Rule.Path)
	}
	return out
}

func TestForTestdata(t *testing.T) {
	src, err := os.ReadFile("testdata/h200.yaml")
	if err != nil {
		t.Fatal(err)
	}
	l, err := Parse("testdata/h200.yaml", src, "")
	if err != nil {
		t.Fatal(err)
	}
	l.PCIID = simPCIID
	got, err := l.For(simNode(t, "dgxh200"))
	if err != nil {
		t.Fatal(err)
	}
	equalLines(t, "wants", wants(got), []string{
		"GPU 0: mig=true {2g.35gb: 2, 3g.71gb: 1} from gpus[0]",
		"GPU 1: mig=true {2g.35gb: 2, 3g.71gb: 1} from gpus[0]",
		"GPU 2: mig=true {2g.35gb: 2, 3g.71gb: 1} from gpus[0]",
		"GPU 3: mig=true {2g.35gb: 2, 3g.71gb: 1} from gpus[0]",
		"GPU 4: mig=true {1g.18gb: 7} from gpus[1]",
		"GPU 5: mig=true {1g.18gb: 7} from gpus[1]",
		"GPU 6: mig=true {} from gpus[2]",
		"GPU 7: mig=false from gpus[3]",
	})
	// Want.Devices is the caller's to change.
	got[0].Devices["1g.18gb"] = 1
	if _, ok := l.Rules[0].Devices["1g.18gb"]; ok {
		t.Error("Want.Devices shares the rule's map")
	}
}

func TestFor(t *testing.T) {
	h200 := simNode(t, "dgxh200")
	mixed := mixedNode(t)
	noMIG := *h200
	noMIG.GPUs = slices.Clone(h200.GPUs)
	noMIG.GPUs[7].Model, noMIG.GPUs[7].MIGCapable, noMIG.GPUs[7].MIGProfiles = "NVIDIA L40S", false, nil

	tests := []struct {
		name, src, config string
		node              *gpu.Node
		want              []string
	}{
		{
			name: "unselected GPUs are left out",
			src:  "version: gpumux.io/v1\ngpus:\n  - match: \"6\"\n    mig-enabled: true\n    mig-devices: {3g.71gb: 1, 2g.35gb: 2}\n  - match: \"*A100*\"\n    mig-enabled: false\n",
			node: h200,
			want: []string{"GPU 6: mig=true {2g.35gb: 2, 3g.71gb: 1} from gpus[0]"},
		},
		{
			name: "by UUID",
			src:  fmt.Sprintf("version: gpumux.io/v1\ngpus:\n  - match: %s,%s\n    mig-enabled: false\n", h200.GPUs[3].UUID, h200.GPUs[5].UUID),
			node: h200,
			want: []string{"GPU 3: mig=false from gpus[0]", "GPU 5: mig=false from gpus[0]"},
		},
		{
			name: "by model and device id on a mixed node",
			src: `version: gpumux.io/v1
gpus:
  - match: "*H200*"
    mig-enabled: true
    mig-devices: {7g.141gb: 1}
  - match: all
    device-filter: ["0x20B010DE:0x134F10DE"]
    mig-enabled: true
    mig-devices: {1g.10gb: 4}
`,
			node: mixed,
			want: []string{
				"GPU 0: mig=true {7g.141gb: 1} from gpus[0]",
				"GPU 1: mig=true {7g.141gb: 1} from gpus[0]",
				"GPU 2: mig=true {7g.141gb: 1} from gpus[0]",
				"GPU 3: mig=true {7g.141gb: 1} from gpus[0]",
				"GPU 4: mig=true {1g.10gb: 4} from gpus[1]",
				"GPU 5: mig=true {1g.10gb: 4} from gpus[1]",
				"GPU 6: mig=true {1g.10gb: 4} from gpus[1]",
				"GPU 7: mig=true {1g.10gb: 4} from gpus[1]",
			},
		},
		{
			name: "a subsystem id narrows a filter",
			src:  "version: gpumux.io/v1\ngpus:\n  - match: all\n    device-filter: 0x233510DE:0x000110DE\n    mig-enabled: false\n",
			node: h200,
			want: []string{},
		},
		{
			name: "mig-enabled: false suits GPUs without MIG",
			src:  "version: gpumux.io/v1\ngpus:\n  - match: all\n    mig-enabled: false\n",
			node: &noMIG,
			want: []string{
				"GPU 0: mig=false from gpus[0]", "GPU 1: mig=false from gpus[0]", "GPU 2: mig=false from gpus[0]", "GPU 3: mig=false from gpus[0]",
				"GPU 4: mig=false from gpus[0]", "GPU 5: mig=false from gpus[0]", "GPU 6: mig=false from gpus[0]", "GPU 7: mig=false from gpus[0]",
			},
		},
		{
			name: "mig-parted, the later rule wins",
			src: `version: v1
mig-configs:
  x:
    - devices: all
      mig-enabled: false
    - devices: [0]
      mig-enabled: true
      mig-devices: {"3g.71gb": 2}
    - devices: [0, 1]
      device-filter: "0x233510DE"
      mig-enabled: true
      mig-devices: {"7g.141gb": 1}
`,
			node: h200,
			want: []string{
				"GPU 0: mig=true {7g.141gb: 1} from mig-configs.x[2]",
				"GPU 1: mig=true {7g.141gb: 1} from mig-configs.x[2]",
				"GPU 2: mig=false from mig-configs.x[0]",
				"GPU 3: mig=false from mig-configs.x[0]",
				"GPU 4: mig=false from mig-configs.x[0]",
				"GPU 5: mig=false from mig-configs.x[0]",
				"GPU 6: mig=false from mig-configs.x[0]",
				"GPU 7: mig=false from mig-configs.x[0]",
			},
		},
		{
			name: "mig-parted's devices list, mig-devices: {}",
			src: `version: v1
mig-configs:
  x:
    - devices: [1, 0]
      mig-enabled: true
      mig-devices: {}
    - devices: [7]
      mig-enabled: true
      mig-devices: {"1g.18gb": 0, "1g.35gb": 4}
`,
			node: h200,
			want: []string{
				"GPU 0: mig=true {} from mig-configs.x[0]",
				"GPU 1: mig=true {} from mig-configs.x[0]",
				"GPU 7: mig=true {1g.35gb: 4} from mig-configs.x[1]",
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, err := Parse("l.yaml", []byte(tc.src), tc.config)
			if err != nil {
				t.Fatal(err)
			}
			l.PCIID = simPCIID
			got, err := l.For(tc.node)
			if err != nil {
				t.Fatal(err)
			}
			equalLines(t, "wants", wants(got), tc.want)
		})
	}
}

func TestForErrors(t *testing.T) {
	h200 := simNode(t, "dgxh200")
	mixed := mixedNode(t)
	noMIG := *h200
	noMIG.GPUs = slices.Clone(h200.GPUs)
	noMIG.GPUs[7].Model, noMIG.GPUs[7].MIGCapable, noMIG.GPUs[7].MIGProfiles = "NVIDIA L40S", false, nil
	const h200Profiles = "1g.18gb (up to 7), 2g.35gb (up to 3), 3g.71gb (up to 2), 4g.71gb (up to 1), 7g.141gb (up to 1), 1g.18gb+me (up to 1), 1g.35gb (up to 4)"
	const a100Profiles = "1g.5gb (up to 7), 2g.10gb (up to 3), 3g.20gb (up to 2), 4g.20gb (up to 1), 7g.40gb (up to 1), 1g.5gb+me (up to 1), 1g.10gb (up to 4)"

	tests := []struct {
		name, src, config string
		node              *gpu.Node
		pciErr            bool
		want              []string
	}{
		{
			name: "two rules select a GPU",
			src:  "version: gpumux.io/v1\ngpus:\n  - match: \"0-3\"\n    mig-enabled: false\n  - match: \"*H200*\"\n    mig-enabled: false\n  - match: \"3\"\n    mig-enabled: false\n",
			node: h200,
			want: []string{
				`l.yaml:5: gpus[1].match: "*H200*": selects GPUs 0-3 (NVIDIA H200), which gpus[0] (line 3) selects too; each GPU may be selected once`,
				`l.yaml:7: gpus[2].match: "3": selects GPU 3 (NVIDIA H200), which gpus[0] (line 3) selects too; each GPU may be selected once`,
			},
		},
		{
			name: "mig-parted, an overridden rule is still checked",
			src:  "version: v1\nmig-configs:\n  x:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {\"1g.10gb\": 7}\n    - devices: [0, 1, 2, 3, 4, 5, 6, 7]\n      mig-enabled: false\n",
			node: h200,
			want: []string{
				`l.yaml:6: mig-configs.x[0].mig-devices: "1g.10gb": no such MIG profile on GPUs 0-7 (NVIDIA H200); valid: ` + h200Profiles,
			},
		},
		{
			name: "profile of another model",
			src:  "version: gpumux.io/v1\ngpus:\n  - match: all\n    mig-enabled: true\n    mig-devices:\n      1g.10gb: 7\n",
			node: h200,
			want: []string{
				`l.yaml:6: gpus[0].mig-devices: "1g.10gb": no such MIG profile on GPUs 0-7 (NVIDIA H200); valid: ` + h200Profiles,
			},
		},
		{
			name: "errors per model on a mixed node",
			src:  "version: gpumux.io/v1\ngpus:\n  - match: all\n    mig-enabled: true\n    mig-devices:\n      3g.71gb: 2\n      1g.10gb: 5\n",
			node: mixed,
			want: []string{
				`l.yaml:6: gpus[0].mig-devices: "3g.71gb": no such MIG profile on GPUs 4-7 (NVIDIA A100-SXM4-40GB); valid: ` + a100Profiles,
				`l.yaml:7: gpus[0].mig-devices: "1g.10gb": no such MIG profile on GPUs 0-3 (NVIDIA H200); valid: ` + h200Profiles,
				`l.yaml:7: gpus[0].mig-devices: 1g.10gb: 5: at most 4 fit on GPUs 4-7 (NVIDIA A100-SXM4-40GB)`,
			},
		},
		{
			name: "more than fit",
			src:  "version: gpumux.io/v1\ngpus:\n  - match: \"2,4\"\n    mig-enabled: true\n    mig-devices: {2g.35gb: 4, 7g.141gb: 2}\n",
			node: h200,
			want: []string{
				`l.yaml:5: gpus[0].mig-devices: 2g.35gb: 4: at most 3 fit on GPUs 2,4 (NVIDIA H200)`,
				`l.yaml:5: gpus[0].mig-devices: 7g.141gb: 2: at most 1 fit on GPUs 2,4 (NVIDIA H200)`,
			},
		},
		{
			name: "no placements",
			src:  "version: gpumux.io/v1\ngpus:\n  - match: \"2\"\n    mig-enabled: true\n    mig-devices:\n      4g.71gb: 1\n      2g.35gb: 2\n  - match: \"3\"\n    mig-enabled: true\n    mig-devices: {3g.71gb: 2, 1g.18gb: 1}\n",
			node: h200,
			want: []string{
				`l.yaml:5: gpus[0].mig-devices: {2g.35gb: 2, 4g.71gb: 1}: these do not fit together on GPU 2 (NVIDIA H200): no non-overlapping placements exist for 2× 2g.35gb + 1× 4g.71gb: 1× 4g.71gb (at 0:4) and 2× 2g.35gb (at 0:2, 2:2, 4:2) overlap on memory slots 0-3; together they need 8 memory slots, and their placements cover only slots 0-5`,
				`l.yaml:10: gpus[1].mig-devices: {1g.18gb: 1, 3g.71gb: 2}: these do not fit together on GPU 3 (NVIDIA H200): 1× 1g.18gb + 2× 3g.71gb need 9 memory slots, the GPU has 8`,
			},
		},
		{
			name: "GPU indexes the node does not have",
			src:  "version: gpumux.io/v1\ngpus:\n  - match: \"0,42\"\n    mig-enabled: false\n  - match: \"6-9\"\n    mig-enabled: false\n",
			node: h200,
			want: []string{
				`l.yaml:3: gpus[0].match: "0,42": GPU index 42 is out of range: this node has 8 GPUs, indexes 0-7`,
				`l.yaml:5: gpus[1].match: "6-9": GPU indexes 8-9 are out of range: this node has 8 GPUs, indexes 0-7`,
			},
		},
		{
			name:   "mig-parted, GPU indexes the node does not have",
			src:    "version: v1\nmig-configs:\n  x:\n    - devices: [0, 42]\n      mig-enabled: false\n",
			config: "x",
			node:   h200,
			want: []string{
				`l.yaml:4: mig-configs.x[0].devices: [0, 42]: GPU index 42 is out of range: this node has 8 GPUs, indexes 0-7`,
			},
		},
		{
			name: "no MIG support",
			src:  "version: gpumux.io/v1\ngpus:\n  - match: all\n    mig-enabled: true\n    mig-devices: {1g.18gb: 1}\n",
			node: &noMIG,
			want: []string{
				`l.yaml:4: gpus[0].mig-enabled: true: GPU 7 (NVIDIA L40S) has no MIG support; use mig-enabled: false, or a match that leaves it out`,
			},
		},
		{
			name:   "PCI ids unreadable",
			src:    "version: gpumux.io/v1\ngpus:\n  - match: \"1-2\"\n    device-filter: \"0x233510DE\"\n    mig-enabled: false\n",
			node:   h200,
			pciErr: true,
			want: []string{
				`l.yaml:4: gpus[0].device-filter: cannot read the PCI ids of GPUs 1-2 (NVIDIA H200): no PCI ids here`,
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, err := Parse("l.yaml", []byte(tc.src), tc.config)
			if err != nil {
				t.Fatal(err)
			}
			l.PCIID = simPCIID
			if tc.pciErr {
				l.PCIID = func(*gpu.GPU) (DeviceID, error) { return DeviceID{}, errors.New("no PCI ids here") }
			}
			got, err := l.For(tc.node)
			if err == nil {
				t.Fatalf("accepted: %v", wants(got))
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("%v is not ErrInvalid", err)
			}
			equalLines(t, "errors", strings.Split(err.Error(), "\n"), tc.want)
		})
	}
}

// TestForMIGPartedDefault resolves every config of mig-parted's default file
// on a simulated H200 node: exactly those written for the H200 (or for no
// model) succeed; the all-balanced config then applies to a GPU.
func TestForMIGPartedDefault(t *testing.T) {
	const file = "testdata/mig-parted-config-default.yaml"
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	h := openSim(t, "dgxh200")
	node := inventory(t, h)
	var ok, empty []string
	var results = map[string]map[int]Want{}
	for _, name := range configNames(t, file, src) {
		l, err := Parse(file, src, name)
		if err != nil {
			t.Fatal(err)
		}
		l.PCIID = simPCIID
		got, err := l.For(node)
		switch {
		case err == nil && len(got) == 0:
			empty = append(empty, name)
		case err == nil:
			if len(got) != 8 {
				t.Errorf("-c %s: %d GPUs", name, len(got))
			}
			ok = append(ok, name)
			results[name] = got
		case !strings.Contains(err.Error(), "no such MIG profile on GPUs 0-7 (NVIDIA H200)"):
			t.Errorf("-c %s: %v", name, err)
		}
	}
	equalLines(t, "configs that fit an H200", ok, []string{
		"all-disabled", "all-enabled", "all-balanced",
		"all-1g.18gb", "all-1g.18gb.me", "all-1g.35gb", "all-2g.35gb", "all-3g.71gb", "all-4g.71gb", "all-7g.141gb",
	})
	// Their device filters select no H200, as with mig-parted.
	equalLines(t, "configs that select no H200", empty, []string{"all-1g.10gb"})

	w := results["all-balanced"][0]
	if w.Rule.Path != "mig-configs.all-balanced[4]" || w.Rule.Line != 325 {
		t.Errorf("GPU 0 got rule %s at line %d, want the H200 rule", w.Rule.Path, w.Rule.Line)
	}
	if _, err := mig.Apply(context.Background(), h, 0, w.Devices, nil); err != nil {
		t.Fatalf("applying all-balanced to GPU 0: %v", err)
	}
	g := inventory(t, h).GPUs[0]
	got := map[string]int{}
	for _, inst := range g.MIGInstances {
		got[inst.Profile]++
	}
	if !maps.Equal(got, map[string]int{"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}) {
		t.Errorf("GPU 0 carries %v", got)
	}
}

func TestForMIGPartedOnA100(t *testing.T) {
	src, err := os.ReadFile("testdata/mig-parted-config-default.yaml")
	if err != nil {
		t.Fatal(err)
	}
	l, err := Parse("default.yaml", src, "all-1g.10gb")
	if err != nil {
		t.Fatal(err)
	}
	l.PCIID = simPCIID
	got, err := l.For(mixedNode(t))
	if err != nil {
		t.Fatal(err)
	}
	// The A100-40GB rule (the second) selects GPUs 4-7; the H100/A100-80GB
	// rule selects nothing here.
	equalLines(t, "wants", wants(got), []string{
		"GPU 4: mig=true {1g.10gb: 4} from mig-configs.all-1g.10gb[1]",
		"GPU 5: mig=true {1g.10gb: 4} from mig-configs.all-1g.10gb[1]",
		"GPU 6: mig=true {1g.10gb: 4} from mig-configs.all-1g.10gb[1]",
		"GPU 7: mig=true {1g.10gb: 4} from mig-configs.all-1g.10gb[1]",
	})
}

func TestSysfsPCIID(t *testing.T) {
	root := t.TempDir()
	old := sysfsRoot
	sysfsRoot = root
	t.Cleanup(func() { sysfsRoot = old })
	dir := filepath.Join(root, "0000:5d:00.0")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]string{"device": "0x2335", "vendor": "0x10de", "subsystem_device": "0x18bf", "subsystem_vendor": "0x10de"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	g := &gpu.GPU{Index: 3, Model: "NVIDIA H200", PCIBusID: "00000000:5D:00.0"}
	id, err := sysfsPCIID(g)
	if err != nil || id != (DeviceID{ID: 0x233510DE, Subsystem: 0x18BF10DE}) {
		t.Fatalf("sysfsPCIID = %v, %v", id, err)
	}

	// For reads sysfs when PCIID is nil.
	node := &gpu.Node{GPUs: []gpu.GPU{*g, {Index: 4, Model: "NVIDIA H200", PCIBusID: "00000000:9A:00.0"}}}
	l, err := Parse("l.yaml", []byte("version: gpumux.io/v1\ngpus:\n  - match: \"3\"\n    device-filter: 0x233510DE:0x18BF10DE\n    mig-enabled: false\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	got, err := l.For(node)
	if err != nil {
		t.Fatal(err)
	}
	equalLines(t, "wants", wants(got), []string{"GPU 3: mig=false from gpus[0]"})

	l.Rules[0].Match.Indexes = []int{4}
	_, err = l.For(node)
	want := "l.yaml:4: gpus[0].device-filter: cannot read the PCI ids of GPU 4 (NVIDIA H200): open " + filepath.Join(root, "0000:9a:00.0", "device") + ": no such file or directory"
	if err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
}
