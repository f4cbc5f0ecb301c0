package share_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/gpumux/gpumux/gpu"
	"github.com/gpumux/gpumux/mig"
	"github.com/gpumux/gpumux/share"
)

// testNode is a simulated 8×H200 node whose GPU 7 carries 1× 3g.71gb and
// 2× 2g.35gb, plus a GPU without MIG support appended as index 8.
func testNode(t testing.TB) *gpu.Node {
	t.Helper()
	ctx := context.Background()
	h, err := gpu.OpenSimulated("dgxh200", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	if _, err := mig.Apply(ctx, h, 7, map[string]int{"3g.71gb": 1, "2g.35gb": 2}, nil); err != nil {
		t.Fatal(err)
	}
	node, err := h.Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	node.GPUs = append(node.GPUs, gpu.GPU{Index: 8, UUID: "GPU-t4", Minor: 8, Model: "Tesla T4", MemoryMiB: 15360, SMCount: 40, ComputeCapability: "7.5"})
	return node
}

// catalogOf builds the catalog of node under the given gpu blocks.
func catalogOf(t *testing.T, node *gpu.Node, rules ...share.GPURule) *share.Catalog {
	t.Helper()
	as, err := (&share.Layout{GPUs: rules}).Assign(node)
	if err != nil {
		t.Fatal(err)
	}
	c, err := share.Build(node, as)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestLayoutErrors(t *testing.T) {
	node := testNode(t)
	tests := []struct {
		name  string
		rules []share.GPURule
		want  []string // substrings of the error; none means valid
	}{
		{"default is exclusive", nil, nil},
		{"timeslice", []share.GPURule{{Match: "0-3", Mechanism: share.TimeSlice, Replicas: 4}}, nil},
		{"mig by uuid list", []share.GPURule{{Match: node.GPUs[6].UUID, Mechanism: share.MIG, MIGDevices: map[string]int{"1g.18gb": 7}}}, nil},
		{"model glob", []share.GPURule{{Match: "*H200*", Mechanism: share.TimeSlice, Replicas: 2}}, nil},
		{"glob that matches nothing is fine", []share.GPURule{{Match: "*A100*", Mechanism: share.TimeSlice, Replicas: 2}}, nil},
		{"replicas 1", []share.GPURule{{Match: "0", Mechanism: share.TimeSlice, Replicas: 1}},
			[]string{`gpu block 1 (match = "0"): replicas = 1: `, `mechanism = "exclusive"`}},
		{"replicas too many", []share.GPURule{{Match: "0", Mechanism: share.TimeSlice, Replicas: 49}}, []string{"replicas = 49", "2 to 48"}},
		{"replicas on exclusive", []share.GPURule{{Match: "0", Mechanism: share.Exclusive, Replicas: 2}}, []string{"replicas applies only to", `"exclusive"`}},
		{"unknown mechanism", []share.GPURule{{Match: "0", Mechanism: "fractional"}}, []string{"mechanism", `"fractional"`, "valid: exclusive, mig, mps, timeslice, remote"}},
		{"mechanism of a later issue", []share.GPURule{{Match: "0", Mechanism: share.Remote}}, []string{`"remote" is not available`}},
		{"mps equal shares", []share.GPURule{{Match: "4,5", Mechanism: share.MPS, Shares: 4}}, nil},
		{"mps sizes", []share.GPURule{{Match: "4", Mechanism: share.MPS, ShareSizes: []string{"50%", "25%", "25%"}}}, nil},
		{"mps without shares", []share.GPURule{{Match: "4", Mechanism: share.MPS}}, []string{"shares: an mps GPU needs shares = N"}},
		{"mps both", []share.GPURule{{Match: "4", Mechanism: share.MPS, Shares: 2, ShareSizes: []string{"50%"}}}, []string{"not both"}},
		{"mps too many", []share.GPURule{{Match: "4", Mechanism: share.MPS, Shares: 49}}, []string{"shares = 49", "1 to 48 clients"}},
		{"mps sizes over 100", []share.GPURule{{Match: "4", Mechanism: share.MPS, ShareSizes: []string{"50%", "50%", "25%"}}}, []string{"add up to 125%; at most 100%"}},
		{"mps zero size", []share.GPURule{{Match: "4", Mechanism: share.MPS, ShareSizes: []string{"0%", "50%"}}}, []string{`"0%": want a percentage from 1% to 100%`}},
		{"mps size not a percentage", []share.GPURule{{Match: "4", Mechanism: share.MPS, ShareSizes: []string{"16GiB"}}}, []string{`"16GiB": want a percentage`}},
		{"shares on timeslice", []share.GPURule{{Match: "4", Mechanism: share.TimeSlice, Replicas: 2, Shares: 2}}, []string{"shares = 2: applies only to mechanism = \"mps\""}},
		{"bad index range", []share.GPURule{{Match: "3-1", Mechanism: share.Exclusive}}, []string{"match", `"3-1"`}},
		{"huge index", []share.GPURule{{Match: "9223372036854775807", Mechanism: share.Exclusive}}, []string{"0 to 1023"}},
		{"huge range end", []share.GPURule{{Match: "0-9223372036854775807", Mechanism: share.Exclusive}}, []string{"indexes 0 to 1023"}},
		{"bad glob", []share.GPURule{{Match: "[H200", Mechanism: share.Exclusive}}, []string{"not a valid model glob"}},
		{"uuid mixed with index", []share.GPURule{{Match: "GPU-x,3", Mechanism: share.Exclusive}}, []string{`"3" is not a GPU UUID`}},
		{"empty match", []share.GPURule{{Match: "", Mechanism: share.Exclusive}}, []string{"match: ", "empty"}},
		{"overlapping matches", []share.GPURule{
			{Match: "0-3", Mechanism: share.TimeSlice, Replicas: 4},
			{Match: "3,4", Mechanism: share.Exclusive},
		}, []string{`gpu block 2 (match = "3,4")`, "GPU 3", `also matched by gpu block 1 (match = "0-3")`}},
		{"mig without layout", []share.GPURule{{Match: "6", Mechanism: share.MIG}}, []string{"mig_devices", "empty"}},
		{"mig layout on timeslice", []share.GPURule{{Match: "6", Mechanism: share.TimeSlice, Replicas: 2, MIGDevices: map[string]int{"1g.18gb": 1}}}, []string{"mig_devices", "applies only to"}},
		{"mig on a GPU without MIG", []share.GPURule{{Match: "8", Mechanism: share.MIG, MIGDevices: map[string]int{"1g.5gb": 1}}}, []string{"GPU 8 (Tesla T4) has no MIG support"}},
		{"unknown profile", []share.GPURule{{Match: "6", Mechanism: share.MIG, MIGDevices: map[string]int{"3g.40gb": 1}}},
			[]string{`profile "3g.40gb" does not exist on GPU 6 (NVIDIA H200)`, "valid: 1g.18gb", "7g.141gb"}},
		{"too many of a profile", []share.GPURule{{Match: "6", Mechanism: share.MIG, MIGDevices: map[string]int{"2g.35gb": 4}}}, []string{"4× 2g.35gb: at most 3 fit on GPU 6"}},
		{"too many slots", []share.GPURule{{Match: "6", Mechanism: share.MIG, MIGDevices: map[string]int{"4g.71gb": 1, "3g.71gb": 2}}}, []string{"need 12 memory slots", "has 8"}},
		{"zero count", []share.GPURule{{Match: "6", Mechanism: share.MIG, MIGDevices: map[string]int{"1g.18gb": 0}}}, []string{`"1g.18gb" = 0`, "at least 1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := share.Layout{GPUs: tc.rules}
			_, err := l.Assign(node)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("want an error containing %q, got none", tc.want)
			}
			if !errors.Is(err, share.ErrInvalid) {
				t.Errorf("error does not wrap ErrInvalid: %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	l := share.Layout{GPUs: []share.GPURule{
		{Match: "0", Mechanism: share.TimeSlice, Replicas: 1},
		{Match: "1", Mechanism: "bogus"},
	}}
	err := l.Validate()
	var fe *share.FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("want a FieldError, got %v", err)
	}
	for _, w := range []string{"gpu block 1", "replicas", "gpu block 2", "bogus"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not name %q", err, w)
		}
	}
}

func TestBuildGroups(t *testing.T) {
	node := testNode(t)
	c := catalogOf(t, node,
		share.GPURule{Match: "0-1", Mechanism: share.TimeSlice, Replicas: 4},
		share.GPURule{Match: "7", Mechanism: share.MIG, MIGDevices: map[string]int{"3g.71gb": 1, "2g.35gb": 2}})
	byName := map[string]share.Group{}
	for _, g := range c.Groups {
		byName[g.Name] = g
	}
	type want struct {
		shares  int
		mech    share.Mechanism
		mem     uint64
		percent int
		sms     int
		iso     share.Isolation
		fault   bool
		profile string
		parent  string
	}
	wants := map[string]want{
		"H200":              {5, share.Exclusive, 143771, 100, 132, share.Hard, true, "", ""},
		"H200-timeslice-4x": {8, share.TimeSlice, 143771 / 4, 25, 132, share.None, false, "", ""},
		"H200-mig-3g.71gb":  {1, share.MIG, 71424, 45, 60, share.Hard, true, "3g.71gb", node.GPUs[7].UUID},
		"H200-mig-2g.35gb":  {2, share.MIG, 33280, 24, 32, share.Hard, true, "2g.35gb", node.GPUs[7].UUID},
		"Tesla-T4":          {1, share.Exclusive, 15360, 100, 40, share.Hard, true, "", "GPU-t4"},
	}
	if len(byName) != len(wants) {
		t.Errorf("groups %v, want %d", keys(byName), len(wants))
	}
	for name, w := range wants {
		g, ok := byName[name]
		if !ok {
			t.Errorf("no group %s (have %v)", name, keys(byName))
			continue
		}
		a := g.Attrs
		got := want{len(g.Shares), a.Mechanism, a.MemoryMiB, a.ComputePercent, a.SMCount, a.MemoryIsolation, a.FaultIsolation, a.MIGProfile, a.ParentUUID}
		if got != w {
			t.Errorf("group %s = %+v, want %+v", name, got, w)
		}
		if a.DriverVersion != "580.159.04" && g.Model == "NVIDIA H200" || a.CUDAComputeCapability == "" {
			t.Errorf("group %s: driver %q, CC %q", name, a.DriverVersion, a.CUDAComputeCapability)
		}
	}
	// IDs: unique, stable forms.
	seen := map[string]bool{}
	for _, g := range c.Groups {
		for _, s := range g.Shares {
			if seen[s.ID] {
				t.Errorf("duplicate share ID %s", s.ID)
			}
			seen[s.ID] = true
		}
	}
	if !seen[node.GPUs[1].UUID+"/timeslice/3"] || !seen[node.GPUs[2].UUID] {
		t.Errorf("share IDs do not have the documented forms: %v", seen)
	}
}

func TestUnmatchedMIGGPUOffersItsInstances(t *testing.T) {
	node := testNode(t)
	c := catalogOf(t, node)
	var migShares int
	for _, g := range c.Groups {
		if g.Mechanism == share.MIG {
			migShares += len(g.Shares)
		}
		for _, s := range g.Shares {
			if s.Mechanism == share.Exclusive && s.GPU.Index == 7 {
				t.Errorf("GPU 7 is in MIG mode but offered whole: %s", s.ID)
			}
		}
	}
	if migShares != 3 {
		t.Errorf("want GPU 7's 3 existing MIG instances offered, got %d", migShares)
	}
}

func TestLookup(t *testing.T) {
	node := testNode(t)
	c := catalogOf(t, node)
	got, err := c.Lookup(node.GPUs[0].UUID)
	if err != nil || len(got) != 1 || got[0].GPU.Index != 0 {
		t.Fatalf("Lookup(GPU 0) = %v, %v", got, err)
	}
	_, err = c.Lookup(node.GPUs[0].UUID, "GPU-gone", "MIG-stale")
	if !errors.Is(err, share.ErrUnknownShare) || !strings.Contains(err.Error(), "GPU-gone, MIG-stale") {
		t.Fatalf("want ErrUnknownShare naming both IDs, got %v", err)
	}
}

func TestEditsFor(t *testing.T) {
	node := testNode(t)
	c := catalogOf(t, node, share.GPURule{Match: "2", Mechanism: share.TimeSlice, Replicas: 2})
	devPath := testPaths{}
	g7 := node.GPUs[7]
	big := g7.MIGInstances[len(g7.MIGInstances)-1]
	for _, inst := range g7.MIGInstances {
		if inst.Profile == "3g.71gb" {
			big = inst
		}
	}
	tests := []struct {
		name    string
		ids     []string
		env     map[string]string
		devices []string // container paths
		hosts   []string // host paths that must appear
	}{
		{
			name:    "whole GPU",
			ids:     []string{node.GPUs[3].UUID},
			env:     map[string]string{"NVIDIA_VISIBLE_DEVICES": node.GPUs[3].UUID, "GPUMUX_SHARES": node.GPUs[3].UUID},
			devices: []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia3"},
			hosts:   []string{"/sim/dev/nvidia3"},
		},
		{
			name: "two replicas of one GPU",
			ids:  []string{node.GPUs[2].UUID + "/timeslice/0", node.GPUs[2].UUID + "/timeslice/1"},
			env: map[string]string{
				"NVIDIA_VISIBLE_DEVICES": node.GPUs[2].UUID,
				"GPUMUX_SHARES":          node.GPUs[2].UUID + "/timeslice/0," + node.GPUs[2].UUID + "/timeslice/1",
			},
			devices: []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia2"},
		},
		{
			name: "MIG instance",
			ids:  []string{big.UUID},
			env:  map[string]string{"NVIDIA_VISIBLE_DEVICES": big.UUID, "CUDA_VISIBLE_DEVICES": big.UUID, "GPUMUX_SHARES": big.UUID},
			devices: []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia7",
				"/dev/nvidia-caps/nvidia-cap" + strconv.Itoa(big.GICapMinor), "/dev/nvidia-caps/nvidia-cap" + strconv.Itoa(big.CICapMinor)},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			shares, err := c.Lookup(tc.ids...)
			if err != nil {
				t.Fatal(err)
			}
			e, err := share.EditsFor(shares, devPath)
			if err != nil {
				t.Fatal(err)
			}
			if len(e.Env) != len(tc.env) {
				t.Errorf("env %v, want %v", e.Env, tc.env)
			}
			for k, v := range tc.env {
				if e.Env[k] != v {
					t.Errorf("env %s = %q, want %q", k, e.Env[k], v)
				}
			}
			var got []string
			for _, d := range e.DeviceNodes {
				got = append(got, d.ContainerPath)
				if d.HostPath != "/sim/dev/"+strings.TrimPrefix(d.ContainerPath, "/dev/") {
					t.Errorf("device %s has host path %s", d.ContainerPath, d.HostPath)
				}
			}
			if strings.Join(got, " ") != strings.Join(tc.devices, " ") {
				t.Errorf("devices %v, want %v", got, tc.devices)
			}
		})
	}
	// The GPU instance and compute instance minors follow the driver's table.
	if want := 3 + 7*135 + big.GIID*9; big.GICapMinor != want || big.CICapMinor != want+1+big.CIID {
		t.Errorf("cap minors %d/%d, want %d/%d", big.GICapMinor, big.CICapMinor, want, want+1+big.CIID)
	}
}

func TestEditsRefuseMIGWithoutCapMinors(t *testing.T) {
	s := share.Share{ID: "MIG-x", Mechanism: share.MIG, MIG: &gpu.MIGInstance{UUID: "MIG-x", GICapMinor: -1, CICapMinor: -1}}
	if _, err := share.EditsFor([]share.Share{s}, testPaths{}); err == nil || !strings.Contains(err.Error(), "mig-minors") {
		t.Fatalf("want an error about mig-minors, got %v", err)
	}
}

type testPaths struct{}

func (testPaths) DevicePath(name string) string { return "/sim/dev/" + name }
func (testPaths) MPSPipeDir(uuid string) string { return "/state/mps/" + uuid + "/pipe" }

func TestMPSShares(t *testing.T) {
	node := testNode(t)
	c := catalogOf(t, node,
		share.GPURule{Match: "4", Mechanism: share.MPS, Shares: 4},
		share.GPURule{Match: "5", Mechanism: share.MPS, ShareSizes: []string{"50%", "25%", "25%"}})
	got := map[string]string{}
	for _, g := range c.Groups {
		if g.Mechanism == share.MPS {
			a := g.Attrs
			got[g.Name] = fmt.Sprintf("%d× %d MiB %d%% %d SMs %s fault=%v", len(g.Shares), a.MemoryMiB, a.ComputePercent, a.SMCount, a.MemoryIsolation, a.FaultIsolation)
		}
	}
	want := map[string]string{
		"H200-mps-25pct": "6× 35942 MiB 25% 32 SMs hard fault=false", // 4 of GPU 4, 2 of GPU 5
		"H200-mps-50pct": "1× 71885 MiB 50% 66 SMs hard fault=false",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("MPS groups\n got %v\nwant %v", got, want)
	}
	daemons := c.MPSDaemons()
	if len(daemons) != 2 {
		t.Fatalf("daemons %+v", daemons)
	}
	for _, d := range daemons {
		wantPct, wantMem := 25, uint64(35942)
		if d.UUID == node.GPUs[5].UUID {
			wantPct, wantMem = 50, 71885 // the largest share's
		}
		if d.ThreadPercent != wantPct || d.PinnedMemLimitMiB != wantMem {
			t.Errorf("daemon %+v, want %d%% and %d MiB", d, wantPct, wantMem)
		}
	}

	g4 := node.GPUs[4].UUID
	shares, err := c.Lookup(g4+"/mps/1", g4+"/mps/3")
	if err != nil {
		t.Fatal(err)
	}
	e, err := share.EditsFor(shares, testPaths{})
	if err != nil {
		t.Fatal(err)
	}
	wantEnv := map[string]string{
		"NVIDIA_VISIBLE_DEVICES":            g4,
		"GPUMUX_SHARES":                     g4 + "/mps/1," + g4 + "/mps/3",
		"CUDA_MPS_PIPE_DIRECTORY":           "/run/gpumux/mps",
		"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50",
		"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT":  "0=71884M",
	}
	if fmt.Sprint(e.Env) != fmt.Sprint(wantEnv) {
		t.Errorf("env\n got %v\nwant %v", e.Env, wantEnv)
	}
	if len(e.Mounts) != 1 || e.Mounts[0].HostPath != "/state/mps/"+g4+"/pipe" || e.Mounts[0].ContainerPath != "/run/gpumux/mps" || e.Mounts[0].ReadOnly {
		t.Errorf("mounts %+v", e.Mounts)
	}

	// One task, two MPS daemons: refused, since a process talks to one server.
	g5 := node.GPUs[5].UUID
	two, _ := c.Lookup(g4+"/mps/0", g5+"/mps/1")
	if _, err := share.EditsFor(two, testPaths{}); err == nil || !strings.Contains(err.Error(), "must come from one device") {
		t.Errorf("MPS shares of two GPUs in one task: %v", err)
	}
	// MPS with a whole GPU: refused.
	mixed, _ := c.Lookup(g4+"/mps/0", node.GPUs[0].UUID)
	if _, err := share.EditsFor(mixed, testPaths{}); err == nil || !strings.Contains(err.Error(), "cannot be combined with exclusive") {
		t.Errorf("MPS with an exclusive share: %v", err)
	}
}

func TestMPSSMCount(t *testing.T) {
	for _, tc := range []struct{ total, pct, want int }{
		{132, 25, 32}, // seen on the H200
		{132, 50, 66},
		{132, 100, 132},
		{132, 1, 2},
		{108, 33, 34},
	} {
		if got := share.MPSSMCount(tc.total, tc.pct); got != tc.want {
			t.Errorf("MPSSMCount(%d, %d) = %d, want %d", tc.total, tc.pct, got, tc.want)
		}
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestMPSOnMIG(t *testing.T) {
	node := testNode(t) // GPU 7: 1× 3g.71gb, 2× 2g.35gb
	c := catalogOf(t, node, share.GPURule{Match: "7", Mechanism: share.MPS, MIGDevices: map[string]int{"3g.71gb": 1, "2g.35gb": 2}, Shares: 2})
	got := map[string]string{}
	for _, g := range c.Groups {
		if g.Mechanism == share.MPS {
			a := g.Attrs
			got[g.Name] = fmt.Sprintf("%d× %d MiB %d%% %d SMs %s", len(g.Shares), a.MemoryMiB, a.ComputePercent, a.SMCount, a.MIGProfile)
		}
	}
	want := map[string]string{
		"H200-mps-3g.71gb-50pct": "2× 35712 MiB 22% 30 SMs 3g.71gb",
		"H200-mps-2g.35gb-50pct": "4× 16640 MiB 12% 16 SMs 2g.35gb",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("groups\n got %v\nwant %v", got, want)
	}
	daemons := c.MPSDaemons()
	if len(daemons) != 3 {
		t.Fatalf("want a daemon per MIG instance, got %+v", daemons)
	}
	for _, d := range daemons {
		if !strings.HasPrefix(d.UUID, "MIG-") || d.ThreadPercent != 50 {
			t.Errorf("daemon %+v: want a MIG UUID and 50%% of its instance", d)
		}
	}
	var big gpu.MIGInstance
	for _, inst := range node.GPUs[7].MIGInstances {
		if inst.Profile == "3g.71gb" {
			big = inst
		}
	}
	shares, err := c.Lookup(big.UUID + "/mps/1")
	if err != nil {
		t.Fatal(err)
	}
	e, err := share.EditsFor(shares, testPaths{})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"NVIDIA_VISIBLE_DEVICES":            big.UUID,
		"CUDA_VISIBLE_DEVICES":              big.UUID,
		"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50",
		"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT":  "0=35712M",
	} {
		if e.Env[k] != v {
			t.Errorf("env %s = %q, want %q", k, e.Env[k], v)
		}
	}
	if len(e.Mounts) != 1 || e.Mounts[0].HostPath != "/state/mps/"+big.UUID+"/pipe" {
		t.Errorf("mounts %+v: want the MIG instance's own daemon", e.Mounts)
	}
	caps := 0
	for _, d := range e.DeviceNodes {
		if strings.HasPrefix(d.ContainerPath, "/dev/nvidia-caps/") {
			caps++
		}
	}
	if caps != 2 {
		t.Errorf("device nodes %+v: want the instance's two caps nodes", e.DeviceNodes)
	}
}
