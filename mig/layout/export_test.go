package layout

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

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

// TestExportMIGParted exports a simulated node in mig-parted's format:
// GPUs of one layout share an entry, the file reads back (as mig-parted's
// format, config "current") as exactly the node's layout, and a GPU
// instance without a compute instance is left out and named.
func TestExportMIGParted(t *testing.T) {
	ctx := context.Background()
	h := openSim(t, "dgxh200")
	for _, i := range []int{1, 3} {
		if _, err := mig.Apply(ctx, h, i, map[string]int{"1g.18gb": 7}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := mig.Apply(ctx, h, 6, map[string]int{"3g.71gb": 1}, nil); err != nil {
		t.Fatal(err)
	}
	halfMake(t, h, 6, 0)
	node := inventory(t, h)
	if len(node.GPUs[6].MIGIncomplete) != 1 {
		t.Fatalf("GPU 6: %+v, want one GPU instance without a compute instance", node.GPUs[6].MIGIncomplete)
	}

	out, err := ExportMIGParted(node, "")
	if err != nil {
		t.Fatal(err)
	}
	want := `# MIG layout of a node with 8 GPUs, exported by gpumux (driver ` + node.DriverVersion + `), in mig-parted's format

version: v1
mig-configs:
  current:
    # GPU 0: NVIDIA H200
    # GPU 2: NVIDIA H200
    # GPU 4: NVIDIA H200
    # GPU 5: NVIDIA H200
    # GPU 7: NVIDIA H200
    - devices: [0, 2, 4, 5, 7]
      mig-enabled: false
      mig-devices: {}
    # GPU 1: NVIDIA H200
    # GPU 3: NVIDIA H200
    - devices: [1, 3]
      mig-enabled: true
      mig-devices:
        "1g.18gb": 7
    # GPU 6: NVIDIA H200; left out: a 1g.18gb GPU instance at 0:1 without a compute instance (left by an interrupted change; applying this layout removes it)
    - devices: [6]
      mig-enabled: true
      mig-devices:
        "3g.71gb": 1
`
	if string(out) != want {
		t.Errorf("ExportMIGParted:\n%s\nwant:\n%s", out, want)
	}
	l, err := Parse("exported.yaml", out, "current")
	if err != nil {
		t.Fatal(err)
	}
	got, err := l.For(node)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range node.GPUs {
		if w := got[g.Index]; w.MIGEnabled != g.MIGEnabled || !maps.Equal(w.Devices, devicesOf(&g)) {
			t.Errorf("GPU %d: the export wants MIG %v %v; the GPU has MIG %v %v", g.Index, w.MIGEnabled, w.Devices, g.MIGEnabled, devicesOf(&g))
		}
	}

	// One layout on every GPU is devices: all.
	for i := range node.GPUs {
		node.GPUs[i].MIGEnabled, node.GPUs[i].MIGInstances, node.GPUs[i].MIGIncomplete = false, nil, nil
	}
	out, err = ExportMIGParted(node, "off")
	if err != nil || !strings.Contains(string(out), "  off:\n") || !strings.Contains(string(out), "- devices: all\n      mig-enabled: false\n      mig-devices: {}\n") {
		t.Errorf("ExportMIGParted of an all-off node: %v\n%s", err, out)
	}
}

// halfMake creates a 1g GPU instance without a compute instance at slot
// start of GPU index, as a change killed between the two creates leaves.
func halfMake(t *testing.T, h *gpu.Host, index, start int) {
	t.Helper()
	dev, ret := h.Simulated().NVML().DeviceGetHandleByIndex(index)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	info, ret := dev.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_1_SLICE)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if _, ret := dev.CreateGpuInstanceWithPlacement(&info, &nvml.GpuInstancePlacement{Start: uint32(start), Size: 1}); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
}
