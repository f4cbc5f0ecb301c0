package layout

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/gpumux/gpumux/gpu"
	"github.com/gpumux/gpumux/mig"
)

// TestExportRoundTrip exports a simulated node with MIG devices, MIG mode
// without devices and MIG off, and checks that Parse then For on the node
// yields exactly its current layout.
func TestExportRoundTrip(t *testing.T) {
	ctx := context.Background()
	h := openSim(t, "dgxh200")
	if _, err := mig.Apply(ctx, h, 6, map[string]int{"3g.71gb": 1, "2g.35gb": 2}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := mig.Apply(ctx, h, 1, map[string]int{"1g.18gb": 7}, nil); err != nil {
		t.Fatal(err)
	}
	if err := h.EnableMIG(ctx, 2); err != nil {
		t.Fatal(err)
	}
	node := inventory(t, h)

	out, err := Export(node)
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	fmt.Fprintf(&want, "# MIG layout of a node with 8 GPUs, exported by gpumux (driver %s)\n\nversion: gpumux.io/v1\ngpus:\n", node.DriverVersion)
	for _, g := range node.GPUs {
		fmt.Fprintf(&want, "  # GPU %d: NVIDIA H200\n  - match: %s\n", g.Index, g.UUID)
		switch g.Index {
		case 1:
			want.WriteString("    mig-enabled: true\n    mig-devices:\n      1g.18gb: 7\n")
		case 2:
			want.WriteString("    mig-enabled: true\n    mig-devices: {}\n")
		case 6:
			want.WriteString("    mig-enabled: true\n    mig-devices:\n      2g.35gb: 2\n      3g.71gb: 1\n")
		default:
			want.WriteString("    mig-enabled: false\n")
		}
	}
	if string(out) != want.String() {
		t.Errorf("Export:\n%s\nwant:\n%s", out, want.String())
	}

	l, err := Parse("exported.yaml", out, "")
	if err != nil {
		t.Fatal(err)
	}
	got, err := l.For(node)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(node.GPUs) {
		t.Fatalf("For selects %d GPUs of %d", len(got), len(node.GPUs))
	}
	for _, g := range node.GPUs {
		cur := map[string]int{}
		for _, inst := range g.MIGInstances {
			cur[inst.Profile]++
		}
		w := got[g.Index]
		if w.MIGEnabled != g.MIGEnabled || !maps.Equal(w.Devices, cur) || w.Devices == nil {
			t.Errorf("GPU %d: want MIG %v %v, node has MIG %v %v", g.Index, w.MIGEnabled, w.Devices, g.MIGEnabled, cur)
		}
		// Applying what For says changes nothing.
		if w.MIGEnabled {
			res, err := mig.Apply(ctx, h, g.Index, w.Devices, nil)
			if err != nil || res.Changed {
				t.Errorf("GPU %d: applying the exported layout: changed %v, %v", g.Index, res.Changed, err)
			}
		}
	}
}

func TestExportComments(t *testing.T) {
	node := &gpu.Node{GPUs: []gpu.GPU{
		{Index: 0, UUID: "GPU-0", Model: "NVIDIA L40S"},
		{Index: 1, UUID: "GPU-1", Model: "NVIDIA H200", MIGCapable: true, MIGPending: true},
	}}
	out, err := Export(node)
	if err != nil {
		t.Fatal(err)
	}
	want := `# MIG layout of a node with 2 GPUs, exported by gpumux

version: gpumux.io/v1
gpus:
  # GPU 0: NVIDIA L40S, no MIG support
  - match: GPU-0
    mig-enabled: false
  # GPU 1: NVIDIA H200, MIG mode changes to enabled at its next reset
  - match: GPU-1
    mig-enabled: false
`
	if string(out) != want {
		t.Errorf("Export:\n%s\nwant:\n%s", out, want)
	}

	out, err = Export(&gpu.Node{})
	if err != nil || string(out) != "# MIG layout of a node with 0 GPUs, exported by gpumux\n\nversion: gpumux.io/v1\ngpus: []\n" {
		t.Errorf("Export of no GPUs: %q, %v", out, err)
	}

	for _, uuid := range []string{"", "GPU-", "0", "GPU-a,GPU-b", " GPU-a"} {
		if out, err := Export(&gpu.Node{GPUs: []gpu.GPU{{UUID: uuid, Model: "m"}}}); err == nil {
			t.Errorf("Export of UUID %q:\n%s", uuid, out)
		}
	}
}
