package timeslice_test

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumux/gpumux/gpu"
	"github.com/gpumux/gpumux/share"
	"github.com/gpumux/gpumux/timeslice"
)

// node is two H200 and a T4, and an H200 in MIG mode with a 3g.71gb and a
// 2g.35gb instance.
var node = &gpu.Node{DriverVersion: "580.159.04", CUDAVersion: "13.0", GPUs: []gpu.GPU{
	{Index: 0, UUID: "GPU-h0", Minor: 0, Model: "NVIDIA H200", MemoryMiB: 143771, SMCount: 132, ComputeCapability: "9.0"},
	{Index: 1, UUID: "GPU-h1", Minor: 1, Model: "NVIDIA H200", MemoryMiB: 143771, SMCount: 132, ComputeCapability: "9.0"},
	{Index: 2, UUID: "GPU-t4", Minor: 5, Model: "Tesla T4", MemoryMiB: 15360, SMCount: 40, ComputeCapability: "7.5"},
	{Index: 3, UUID: "GPU-m3", Minor: 3, Model: "NVIDIA H200", MemoryMiB: 143771, SMCount: 132, ComputeCapability: "9.0",
		MIGCapable: true, MIGEnabled: true, MIGInstances: []gpu.MIGInstance{
			{UUID: "MIG-big", Profile: "3g.71gb", GIID: 2, MemoryMiB: 71424, SMCount: 60, GICapMinor: 30, CICapMinor: 31},
			{UUID: "MIG-small", Profile: "2g.35gb", GIID: 3, MemoryMiB: 33280, SMCount: 32, GICapMinor: 39, CICapMinor: 40},
		}},
}}

// stubLimiter returns a limiter directory holding a stand-in for the
// limiter's libcuda.so.1: the provider only checks that it is there.
func stubLimiter(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, timeslice.Lib), []byte("not a library: a test's stand-in\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// catalogOf is the catalog of the replicas p offers on node under rules.
func catalogOf(t *testing.T, p timeslice.Provider, rules ...share.GPURule) *share.Catalog {
	t.Helper()
	as, err := (&share.Layout{GPUs: rules}).Assign(node)
	if err != nil {
		t.Fatal(err)
	}
	offers, err := p.Offers(context.Background(), node, as)
	if err != nil {
		t.Fatal(err)
	}
	c, err := share.NewCatalog(offers)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func groupNames(c *share.Catalog) []string {
	var out []string
	for _, g := range c.Groups {
		out = append(out, fmt.Sprintf("%s (%d)", g.Name, len(g.Shares)))
	}
	return out
}

// h200Attrs are the attributes every group of the H200s shares.
func h200Attrs(iso share.Isolation) share.Attributes {
	return share.Attributes{Mechanism: share.TimeSlice, SMCount: 132, MemoryIsolation: iso, FaultIsolation: false,
		CUDAComputeCapability: "9.0", DriverVersion: "580.159.04", CUDAVersion: "13.0"}
}

// TestOffers: replicas = N splits a GPU in N equal replicas, grouped and
// named as before the limiter; a limited replica's memory isolation is
// soft, and it carries its part of the time and its limit.
func TestOffers(t *testing.T) {
	p := timeslice.New(t.TempDir(), t.TempDir())
	if p.Mechanism() != share.TimeSlice {
		t.Errorf("Mechanism %s", p.Mechanism())
	}
	c := catalogOf(t, p,
		share.GPURule{Match: "0,1", Mechanism: share.TimeSlice, Replicas: 4},
		share.GPURule{Match: "2", Mechanism: share.TimeSlice, Replicas: 3})
	if len(c.Groups) != 2 || c.Len() != 4+4+3 {
		t.Fatalf("groups %v", groupNames(c))
	}
	h, t4 := c.Groups[0], c.Groups[1]
	wantAttrs := h200Attrs(share.Soft)
	wantAttrs.MemoryMiB, wantAttrs.ComputePercent = 143771/4, 25
	if h.Name != "H200-timeslice-4x" || h.Profile != "4x" || h.Spread != share.SpreadAlone || h.Attrs != wantAttrs {
		t.Errorf("group %s, profile %q, spread %d, attributes %+v", h.Name, h.Profile, h.Spread, h.Attrs)
	}
	if t4.Name != "Tesla-T4-timeslice-3x" || t4.Attrs.MemoryMiB != 5120 || t4.Attrs.ComputePercent != 33 || t4.Attrs.ParentUUID != "GPU-t4" || t4.Attrs.MemoryIsolation != share.Soft {
		t.Errorf("group %s: %+v", t4.Name, t4.Attrs)
	}
	for i, s := range h.Shares {
		g := node.GPUs[i/4]
		want := share.Share{ID: share.SubID(g.UUID, share.TimeSlice, i%4), Mechanism: share.TimeSlice, GPU: share.RefOf(&g),
			Replica: i % 4, Replicas: 4, MemoryMiB: 143771 / 4, ComputePercent: 25, SMCount: 132,
			TimePercent: 25, Limit: share.LimitCap}
		if s != want {
			t.Errorf("share %d\n got %+v\nwant %+v", i, s, want)
		}
	}
	for _, s := range t4.Shares {
		if s.TimePercent != 33 || s.Limit != share.LimitCap {
			t.Errorf("T4 replica %s: time %d%%, limit %q", s.ID, s.TimePercent, s.Limit)
		}
	}
	if timeslice.Properties != (share.Properties{MemoryIsolation: share.Soft, FaultIsolation: false}) {
		t.Errorf("Properties %+v", timeslice.Properties)
	}
	if timeslice.Unlimited != (share.Properties{MemoryIsolation: share.None, FaultIsolation: false}) {
		t.Errorf("Unlimited %+v", timeslice.Unlimited)
	}
}

// TestOffersReplicaSizes: replica_sizes splits a GPU in replicas of those
// parts of its memory and time, one group per size.
func TestOffersReplicaSizes(t *testing.T) {
	p := timeslice.New(t.TempDir(), t.TempDir())
	c := catalogOf(t, p, share.GPURule{Match: "0,1", Mechanism: share.TimeSlice, ReplicaSizes: []string{"50%", "25%", "25%"}, Limit: share.LimitShare})
	if got := groupNames(c); strings.Join(got, ", ") != "H200-timeslice-50pct-share (2), H200-timeslice-25pct-share (4)" {
		t.Fatalf("groups %v", got)
	}
	for _, tc := range []struct {
		group   string
		mem     uint64
		pct     int
		ids     []string
		replica []int
	}{
		{"H200-timeslice-50pct-share", 71885, 50, []string{"GPU-h0/timeslice/0", "GPU-h1/timeslice/0"}, []int{0, 0}},
		{"H200-timeslice-25pct-share", 35942, 25, []string{"GPU-h0/timeslice/1", "GPU-h0/timeslice/2", "GPU-h1/timeslice/1", "GPU-h1/timeslice/2"}, []int{1, 2, 1, 2}},
	} {
		var g share.Group
		for _, cg := range c.Groups {
			if cg.Name == tc.group {
				g = cg
			}
		}
		want := h200Attrs(share.Soft)
		want.MemoryMiB, want.ComputePercent = tc.mem, tc.pct
		if g.Attrs != want || g.Profile != strings.TrimPrefix(tc.group, "H200-timeslice-") || g.Spread != share.SpreadAlone {
			t.Errorf("group %s: profile %q, spread %d, attributes %+v\nwant attributes %+v", tc.group, g.Profile, g.Spread, g.Attrs, want)
		}
		for i, s := range g.Shares {
			if s.ID != tc.ids[i] || s.Replica != tc.replica[i] || s.Replicas != 3 || s.MemoryMiB != tc.mem || s.ComputePercent != tc.pct ||
				s.TimePercent != tc.pct || s.Limit != share.LimitShare || s.SMCount != 132 || s.MIG != nil {
				t.Errorf("group %s share %d: %+v, want %s, replica %d of 3, %d MiB, %d%% of the GPU and its time, limit share",
					tc.group, i, s, tc.ids[i], tc.replica[i], tc.mem, tc.pct)
			}
		}
	}
	// Sizes that leave part of the GPU unused: each replica is its size,
	// not a share of what is left.
	c = catalogOf(t, p, share.GPURule{Match: "2", Mechanism: share.TimeSlice, ReplicaSizes: []string{"30%", "10%"}})
	if got := groupNames(c); strings.Join(got, ", ") != "Tesla-T4-timeslice-30pct (1), Tesla-T4-timeslice-10pct (1)" ||
		c.Groups[0].Attrs.MemoryMiB != 4608 || c.Groups[0].Attrs.ComputePercent != 30 || c.Groups[1].Attrs.MemoryMiB != 1536 || c.Groups[1].Attrs.ComputePercent != 10 {
		t.Errorf("30%% and 10%% of a T4: %v, %+v", got, c.Groups)
	}
}

// TestOffersMIGInstances: a timeslice rule on a GPU in MIG mode splits each
// of its instances; the group names the profile, memory is the instance's
// part, compute_percent is relative to the whole GPU (what a job compares
// across groups), the replica's time relative to its instance.
func TestOffersMIGInstances(t *testing.T) {
	p := timeslice.New(t.TempDir(), t.TempDir())
	c := catalogOf(t, p, share.GPURule{Match: "3", Mechanism: share.TimeSlice, Replicas: 2})
	if got := groupNames(c); strings.Join(got, ", ") != "H200-timeslice-3g.71gb-2x (2), H200-timeslice-2g.35gb-2x (2)" {
		t.Fatalf("groups %v", got)
	}
	for _, tc := range []struct {
		group, profile, inst string
		mem                  uint64
		sms, pct             int
	}{
		{"H200-timeslice-3g.71gb-2x", "3g.71gb", "MIG-big", 71424 / 2, 60, 60 * 100 / 132 / 2},
		{"H200-timeslice-2g.35gb-2x", "2g.35gb", "MIG-small", 33280 / 2, 32, 32 * 100 / 132 / 2},
	} {
		var g share.Group
		for _, cg := range c.Groups {
			if cg.Name == tc.group {
				g = cg
			}
		}
		want := h200Attrs(share.Soft)
		want.MemoryMiB, want.ComputePercent, want.SMCount, want.MIGProfile, want.ParentUUID = tc.mem, tc.pct, tc.sms, tc.profile, "GPU-m3"
		if g.Attrs != want || g.Profile != tc.profile+"-2x" {
			t.Errorf("group %s: profile %q, attributes %+v\nwant attributes %+v", tc.group, g.Profile, g.Attrs, want)
		}
		for k, s := range g.Shares {
			if s.ID != tc.inst+"/timeslice/"+fmt.Sprint(k) || s.MIG == nil || s.MIG.UUID != tc.inst || s.Parent() != tc.inst || s.GPU.UUID != "GPU-m3" ||
				s.Replica != k || s.Replicas != 2 || s.TimePercent != 50 || s.Limit != share.LimitCap {
				t.Errorf("group %s share %d: %+v (MIG %+v)", tc.group, k, s, s.MIG)
			}
		}
	}
	// Sizes on MIG instances: "<model>-timeslice-<profile>-<P>pct".
	c = catalogOf(t, p, share.GPURule{Match: "3", Mechanism: share.TimeSlice, ReplicaSizes: []string{"75%", "25%"}})
	if got := groupNames(c); strings.Join(got, ", ") != "H200-timeslice-3g.71gb-75pct (1), H200-timeslice-3g.71gb-25pct (1), H200-timeslice-2g.35gb-75pct (1), H200-timeslice-2g.35gb-25pct (1)" {
		t.Fatalf("groups %v", got)
	}
	big := c.Groups[0]
	if s := big.Shares[0]; s.MemoryMiB != 71424*75/100 || s.ComputePercent != 45*75/100 || s.TimePercent != 75 || s.ID != "MIG-big/timeslice/0" {
		t.Errorf("75%% of the 3g.71gb instance: %+v", s)
	}
}

// TestOffersLimitOff: limit = "off" offers the same replicas without the
// limiter: memory isolation none, and the shares say so.
func TestOffersLimitOff(t *testing.T) {
	p := timeslice.New(t.TempDir(), t.TempDir())
	c := catalogOf(t, p,
		share.GPURule{Match: "0", Mechanism: share.TimeSlice, Replicas: 4, Limit: share.LimitOff},
		share.GPURule{Match: "1", Mechanism: share.TimeSlice, Replicas: 4})
	// Each replica carries its own rule's limit (what Edits and Health go
	// by), whatever its group says.
	for _, s := range c.Shares() {
		want := share.LimitCap
		if s.GPU.UUID == "GPU-h0" {
			want = share.LimitOff
		}
		if s.Limit != want {
			t.Errorf("replica %s: limit %q, want %q", s.ID, s.Limit, want)
		}
	}
	c = catalogOf(t, p, share.GPURule{Match: "0,1", Mechanism: share.TimeSlice, Replicas: 4, Limit: share.LimitOff})
	if len(c.Groups) != 1 || c.Groups[0].Name != "H200-timeslice-4x-off" || c.Groups[0].Spread != share.SpreadDistinctGPUs || c.Groups[0].Attrs.MemoryIsolation != share.None || c.Len() != 8 {
		t.Errorf("limit off: %v, %+v", groupNames(c), c.Groups)
	}
}

func TestOffersRefuseNoReplicas(t *testing.T) {
	// Layout validation refuses fewer than 2 replicas; the provider still
	// refuses an assignment without any rather than divide by zero.
	as := []share.Assignment{{GPUIndex: 1, Rule: 0, Mechanism: share.TimeSlice, Limit: share.LimitCap}}
	if _, err := timeslice.New(t.TempDir(), t.TempDir()).Offers(context.Background(), node, as); err == nil || !strings.Contains(err.Error(), "GPU 1: timeslice without replicas") {
		t.Errorf("0 replicas: %v", err)
	}
}

// replica is replica n of GPU-h0 split in 4, as Offers makes it.
func replica(n int, limit share.Limit) share.Share {
	return share.Share{ID: share.SubID("GPU-h0", share.TimeSlice, n), Mechanism: share.TimeSlice, GPU: share.GPURef{UUID: "GPU-h0", Model: "NVIDIA H200"},
		Replica: n, Replicas: 4, MemoryMiB: 143771 / 4, ComputePercent: 25, SMCount: 132, TimePercent: 25, Limit: limit}
}

// edits runs p.Edits for a task of shares (mine: those of timeslice) on
// edits that already carry GPUMUX_SHARES, as the node core does.
func edits(p timeslice.Provider, shares ...share.Share) (share.Edits, error) {
	e := share.Edits{Env: map[string]string{share.EnvShares: strings.Join(share.SortedIDs(shares), ",")}}
	var mine []share.Share
	for _, s := range shares {
		if s.Mechanism == share.TimeSlice {
			mine = append(mine, s)
		}
	}
	err := p.Edits(mine, shares, &e)
	return e, err
}

func TestEdits(t *testing.T) {
	stateDir, limiter := t.TempDir(), stubLimiter(t)
	p := timeslice.New(stateDir, limiter)
	s := replica(1, share.LimitCap)
	e, err := edits(p, s)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(stateDir, "timeslice", "GPU-h0", "1")
	if p.Dir(s) != dir {
		t.Errorf("Dir %s, want %s", p.Dir(s), dir)
	}
	wantEnv := map[string]string{
		share.EnvShares:         s.ID,
		share.EnvLibraryPath:    "/run/gpumux/limiter/lib",
		"GPUMUX_LIMITER_LIMITS": "/run/gpumux/limiter/limits",
		"GPUMUX_LIMITER_STATE":  "/run/gpumux/limiter/state",
		"GPUMUX_LIMITER_NODE":   "/run/gpumux/limiter/node",
	}
	if fmt.Sprint(e.Env) != fmt.Sprint(wantEnv) {
		t.Errorf("env\n got %v\nwant %v", e.Env, wantEnv)
	}
	wantMounts := []share.Mount{
		{HostPath: limiter, ContainerPath: "/run/gpumux/limiter/lib", ReadOnly: true},
		{HostPath: filepath.Join(dir, "state"), ContainerPath: "/run/gpumux/limiter/state", ReadOnly: false},
		{HostPath: filepath.Join(dir, "limits"), ContainerPath: "/run/gpumux/limiter/limits", ReadOnly: true},
		{HostPath: filepath.Join(stateDir, "timeslice", "GPU-h0", "node"), ContainerPath: "/run/gpumux/limiter/node", ReadOnly: false},
	}
	if p.NodeDir(s) != filepath.Join(stateDir, "timeslice", "GPU-h0", "node") {
		t.Errorf("NodeDir %s", p.NodeDir(s))
	}
	checkStateDir(t, p.NodeDir(s))
	if fmt.Sprint(e.Mounts) != fmt.Sprint(wantMounts) {
		t.Errorf("mounts\n got %+v\nwant %+v", e.Mounts, wantMounts)
	}
	if len(e.DeviceNodes) != 0 {
		t.Errorf("device nodes %+v: the node core's, not the provider's", e.DeviceNodes)
	}
	wantLimits := fmt.Sprintf("version=1\nshare=GPU-h0/timeslice/1\nmemory_bytes=%d\ncompute_percent=25\npolicy=cap\n", uint64(143771/4)<<20)
	checkLimits(t, dir, wantLimits)
	checkStateDir(t, filepath.Join(dir, "state"))

	// Again, for the next task of the replica: the same edits, and the
	// limits file is left as it is (a running container's bind mount
	// holds its inode).
	before, _ := os.Stat(filepath.Join(dir, "limits"))
	if err := os.Chmod(filepath.Join(dir, "state"), 0o700); err != nil { // as a restored backup might leave it
		t.Fatal(err)
	}
	again, err := edits(p, s)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(again) != fmt.Sprint(e) {
		t.Errorf("a second Edits of the same replica\n got %+v\nwant %+v", again, e)
	}
	if after, _ := os.Stat(filepath.Join(dir, "limits")); !os.SameFile(before, after) {
		t.Error("the same limits were written again")
	}
	checkLimits(t, dir, wantLimits)
	checkStateDir(t, filepath.Join(dir, "state"))

	// New limits (the layout changed the replica's size or limit): the
	// file is replaced whole, never left half-written.
	s.MemoryMiB, s.TimePercent, s.Limit = 143771/2, 50, share.LimitShare
	if _, err := edits(p, s); err != nil {
		t.Fatal(err)
	}
	checkLimits(t, dir, fmt.Sprintf("version=1\nshare=GPU-h0/timeslice/1\nmemory_bytes=%d\ncompute_percent=50\npolicy=share\n", uint64(143771/2)<<20))

	// A replica of a MIG instance lives under the instance's UUID; its
	// compute_percent is its part of the instance.
	c := catalogOf(t, p, share.GPURule{Match: "3", Mechanism: share.TimeSlice, Replicas: 2})
	m, err := c.Lookup("MIG-big/timeslice/1")
	if err != nil {
		t.Fatal(err)
	}
	e, err = edits(p, m...)
	if err != nil {
		t.Fatal(err)
	}
	migDir := filepath.Join(stateDir, "timeslice", "MIG-big", "1")
	if len(e.Mounts) != 4 || e.Mounts[2].HostPath != filepath.Join(migDir, "limits") || e.Mounts[1].HostPath != filepath.Join(migDir, "state") ||
		e.Mounts[3].HostPath != filepath.Join(stateDir, "timeslice", "MIG-big", "node") {
		t.Errorf("MIG replica mounts %+v, want them under %s", e.Mounts, migDir)
	}
	checkLimits(t, migDir, fmt.Sprintf("version=1\nshare=MIG-big/timeslice/1\nmemory_bytes=%d\ncompute_percent=50\npolicy=cap\n", uint64(71424/2)<<20))
}

// checkLimits checks a replica directory's limits file: its content, its
// mode (readable by the container's user, whoever that is), and that no
// temporary file is left beside it.
func checkLimits(t *testing.T, dir, want string) {
	t.Helper()
	path := filepath.Join(dir, "limits")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != want {
		t.Errorf("limits file\n got %q\nwant %q", b, want)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o644 {
		t.Errorf("limits file mode %v, want a regular file, -rw-r--r--", fi.Mode())
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "limits state" {
		t.Errorf("replica directory holds %v, want limits and state only", names)
	}
}

// stickyStateDir says whether checkStateDir insists on the sticky bit of
// mode 1777. It is off while provider.go's os.Chmod(state, 0o1777) sets
// 0777 only: Go's os.FileMode keeps the sticky bit in os.ModeSticky, and
// os.Chmod ignores the 0o1000 bit. Turn it on with that fix.
const stickyStateDir = true

// checkStateDir checks the accounting directory is writable by every user
// (the container's, whoever that is), sticky as /tmp is.
func checkStateDir(t *testing.T, path string) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.IsDir() || fi.Mode().Perm() != 0o777 {
		t.Errorf("state directory mode %v, want drwxrwxrwt (1777)", fi.Mode())
	}
	if stickyStateDir && fi.Mode()&fs.ModeSticky == 0 {
		t.Errorf("state directory mode %v, want drwxrwxrwt (1777): not sticky", fi.Mode())
	}
}

func TestEditsRefusals(t *testing.T) {
	stateDir := t.TempDir()
	p := timeslice.New(stateDir, stubLimiter(t))
	other := replica(2, share.LimitCap)
	other.ID, other.GPU.UUID = "GPU-h1/timeslice/2", "GPU-h1"
	whole := share.Share{ID: "GPU-h1", Mechanism: share.Exclusive, GPU: share.GPURef{UUID: "GPU-h1"}}
	mpsShare := share.Share{ID: "GPU-h1/mps/0", Mechanism: share.MPS, GPU: share.GPURef{UUID: "GPU-h1"}}
	for _, tc := range []struct {
		name   string
		shares []share.Share
		want   []string
	}{
		{"two limited replicas of one GPU", []share.Share{replica(0, share.LimitCap), replica(1, share.LimitCap)},
			[]string{"GPU-h0/timeslice/0 GPU-h0/timeslice/1", "a limited time-slice replica is alone in its task", `limit = "off"`}},
		{"two limited replicas of two GPUs", []share.Share{replica(0, share.LimitShare), other},
			[]string{"GPU-h0/timeslice/0 GPU-h1/timeslice/2", "a limited time-slice replica is alone in its task"}},
		{"a limited replica and a whole GPU", []share.Share{replica(0, share.LimitCap), whole},
			[]string{"alone in its task", "limiter replaces libcuda.so.1"}},
		{"a whole GPU and a limited replica", []share.Share{whole, replica(0, share.LimitCap)},
			[]string{"alone in its task"}},
		{"a limited replica and an MPS share", []share.Share{replica(3, share.LimitCap), mpsShare},
			[]string{"alone in its task"}},
		{"a limited replica and an unlimited one", []share.Share{replica(0, share.LimitCap), replica(1, share.LimitOff)},
			[]string{"alone in its task"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := edits(p, tc.shares...)
			if err == nil {
				t.Fatalf("no error; edits %+v", e)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if len(e.Mounts) != 0 || len(e.Env) != 1 {
				t.Errorf("a refused task got edits %+v", e)
			}
		})
	}
	if entries, _ := os.ReadDir(stateDir); len(entries) != 0 {
		t.Errorf("refused tasks left %v in the state directory", entries)
	}

	// With limit = "off" replicas are what they were: several in one task,
	// and with other mechanisms, with no edits of their own.
	off0, off1 := replica(0, share.LimitOff), replica(1, share.LimitOff)
	for _, shares := range [][]share.Share{{off0, off1}, {off0, whole}, {whole, off1, mpsShare}} {
		e, err := edits(p, shares...)
		if err != nil || len(e.Env) != 1 || len(e.Mounts) != 0 {
			t.Errorf("unlimited replicas %v: %v, edits %+v", share.SortedIDs(shares), err, e)
		}
	}
}

// TestEditsWithoutLimiter: a limited replica is refused while the limiter
// is not installed, the error naming the file looked for and the remedies.
func TestEditsWithoutLimiter(t *testing.T) {
	stateDir, limiter := t.TempDir(), t.TempDir()
	p := timeslice.New(stateDir, limiter)
	s := replica(0, share.LimitCap)
	e, err := edits(p, s)
	lib := filepath.Join(limiter, "libcuda.so.1")
	if err == nil {
		t.Fatalf("no error; edits %+v", e)
	}
	for _, want := range []string{"share GPU-h0/timeslice/0", "limiter " + lib, "no such file", "install gpumux's limiter there", "limiter_dir", `limit = "off"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
	if len(e.Mounts) != 0 || len(e.Env) != 1 {
		t.Errorf("edits %+v", e)
	}
	if entries, _ := os.ReadDir(stateDir); len(entries) != 0 {
		t.Errorf("a refused replica left %v in the state directory", entries)
	}
	// A directory where the library should be is no limiter either.
	if err := os.Mkdir(lib, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := edits(p, s); err == nil || !strings.Contains(err.Error(), lib+" is not a regular file") {
		t.Errorf("libcuda.so.1 a directory: %v", err)
	}
	// Unlimited replicas need no limiter.
	if e, err := edits(p, replica(0, share.LimitOff)); err != nil || len(e.Mounts) != 0 {
		t.Errorf("limit off without a limiter: %v, %+v", err, e)
	}
}

func TestHealth(t *testing.T) {
	limiter := t.TempDir()
	p := timeslice.New(t.TempDir(), limiter)
	lib := filepath.Join(limiter, "libcuda.so.1")
	for _, l := range []share.Limit{share.LimitCap, share.LimitShare} {
		ok, why := p.Health(replica(0, l))
		if ok || !strings.Contains(why, "limiter "+lib) || !strings.Contains(why, "limiter_dir") {
			t.Errorf("limit %s without the limiter: healthy %v, %q", l, ok, why)
		}
	}
	if ok, why := p.Health(replica(0, share.LimitOff)); !ok {
		t.Errorf("limit off without the limiter: %s", why)
	}
	// Installed: healthy, with no restart.
	if err := os.WriteFile(lib, []byte("stand-in"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, l := range share.Limits {
		if ok, why := p.Health(replica(0, l)); !ok {
			t.Errorf("limit %s with the limiter: %s", l, why)
		}
	}
	// Removed again: unhealthy again.
	if err := os.Remove(lib); err != nil {
		t.Fatal(err)
	}
	if ok, _ := p.Health(replica(0, share.LimitCap)); ok {
		t.Error("healthy after the limiter was removed")
	}
}
