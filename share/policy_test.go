package share_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"testing"

	"github.com/gpumux/gpumux/gpu"
	"github.com/gpumux/gpumux/mig"
	"github.com/gpumux/gpumux/share"
)

// policyCatalog is a simulated 8×H200 node plus a T4 (GPU 8), laid out as:
//
//	GPU 0, 1  whole (H200, 143771 MiB)     GPU 8  whole (Tesla-T4, 15360 MiB)
//	GPU 2, 3  H200-timeslice-4x  (35942 MiB, 25%)
//	GPU 4     H200-mps-25pct ×4  (35942 MiB, 25%)
//	GPU 5     H200-mps-50pct, H200-mps-25pct ×2
//	GPU 6     H200-mig-1g.18gb ×2 (16384 MiB, 12%), H200-mig-3g.71gb (71424 MiB, 45%)
//	GPU 7     H200-mig-3g.71gb, H200-mig-2g.35gb ×2 (33280 MiB, 24%)
//
// The node core builds it from each mechanism's provider, so its groups come
// in the providers' order (exclusive, mig, mps, timeslice) and carry the
// spread each provider sets.
func policyCatalog(t testing.TB) *share.Catalog {
	t.Helper()
	_, c := policyNode(t)
	return c
}

// policyNode is policyCatalog with the inventory it was built from.
func policyNode(t testing.TB) (*gpu.Node, *share.Catalog) {
	t.Helper()
	ctx := context.Background()
	h, err := gpu.OpenSimulated("dgxh200", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for idx, layout := range map[int]map[string]int{6: {"1g.18gb": 2, "3g.71gb": 1}, 7: {"3g.71gb": 1, "2g.35gb": 2}} {
		if _, err := mig.Apply(ctx, h, idx, layout, nil); err != nil {
			t.Fatal(err)
		}
	}
	inv, err := h.Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Stable UUIDs (the simulation draws them at random), so that ties between
	// equal shares, broken by ID, go to the lower GPU index.
	for i := range inv.GPUs {
		g := &inv.GPUs[i]
		g.UUID = fmt.Sprintf("GPU-%08d-0000-0000-0000-000000000000", g.Index)
		for k := range g.MIGInstances {
			g.MIGInstances[k].UUID = fmt.Sprintf("MIG-%08d-%04d-0000-0000-000000000000", g.Index, k)
		}
	}
	inv.GPUs = append(inv.GPUs, gpu.GPU{Index: 8, UUID: "GPU-t4", Minor: 8, Model: "Tesla T4", MemoryMiB: 15360, SMCount: 40, ComputeCapability: "7.5"})
	c := catalogOf(t, inv,
		share.GPURule{Match: "2-3", Mechanism: share.TimeSlice, Replicas: 4},
		share.GPURule{Match: "4", Mechanism: share.MPS, Shares: 4},
		share.GPURule{Match: "5", Mechanism: share.MPS, ShareSizes: []string{"50%", "25%", "25%"}},
	)
	return inv, c
}

// TestChooseUnlimitedReplicasOnDistinctGPUs: replicas without the limiter
// (limit = "off") serve a request for several, each from another GPU.
func TestChooseUnlimitedReplicasOnDistinctGPUs(t *testing.T) {
	inv, _ := policyNode(t)
	c := catalogOf(t, inv, share.GPURule{Match: "2-3", Mechanism: share.TimeSlice, Replicas: 4, Limit: share.LimitOff})
	free := func(share.Share) bool { return true }
	got, err := share.Choose(c, free, share.Request{Mechanism: share.TimeSlice, Count: 2})
	if err != nil || len(got) != 2 || got[0].GPU.Index == got[1].GPU.Index {
		t.Errorf("count 2: %v, %v; want replicas of GPUs 2 and 3", labels(c, got), err)
	}
	_, err = share.Choose(c, free, share.Request{Mechanism: share.TimeSlice, Count: 3})
	if err == nil || err.Error() != "no 3 free timeslice replicas on distinct GPUs; free: 8× H200-timeslice-4x-off" {
		t.Errorf("count 3: %v", err)
	}
	got, err = share.Choose(c, free, share.Request{Isolation: share.LevelNone, Count: 2})
	if err != nil || len(got) != 2 || got[0].Mechanism != share.TimeSlice {
		t.Errorf("auto none count 2: %v, %v; want two unlimited replicas", labels(c, got), err)
	}
}

// label names a share by group and GPU index: "H200-mig-1g.18gb@6".
func label(c *share.Catalog, s share.Share) string {
	for _, g := range c.Groups {
		for _, x := range g.Shares {
			if x.ID == s.ID {
				return fmt.Sprintf("%s@%d", g.Name, s.GPU.Index)
			}
		}
	}
	return "?" + s.ID
}

// busy marks shares taken: whole groups by name, or single shares as
// "<group>@<gpu>#<n>" (the n-th share of that group on that GPU, 0-based).
func busy(c *share.Catalog, spec ...string) func(share.Share) bool {
	taken := map[string]bool{}
	for _, g := range c.Groups {
		seen := map[int]int{}
		for _, s := range g.Shares {
			n := seen[s.GPU.Index]
			seen[s.GPU.Index]++
			for _, b := range spec {
				if b == g.Name || b == fmt.Sprintf("%s@%d#%d", g.Name, s.GPU.Index, n) || b == fmt.Sprintf("@%d", s.GPU.Index) {
					taken[s.ID] = true
				}
			}
		}
	}
	return func(s share.Share) bool { return !taken[s.ID] }
}

const gib = 1024

func TestChoose(t *testing.T) {
	c := policyCatalog(t)
	allMIG := []string{"H200-mig-1g.18gb", "H200-mig-2g.35gb", "H200-mig-3g.71gb"}
	allMPS := []string{"H200-mps-25pct", "H200-mps-50pct"}
	tests := []struct {
		name  string
		req   share.Request
		busy  []string
		want  []string // labels, or
		err   string   // the whole error text
		noFit bool     // whether err wraps ErrNoFit
	}{
		// auto, strict (the default): smallest MIG instance, else a whole GPU.
		{name: "auto is strict: smallest MIG instance", req: share.Request{}, want: []string{"H200-mig-1g.18gb@6"}},
		{name: "strict 20 GiB", req: share.Request{Isolation: share.LevelStrict, MemoryMiB: 20 * gib}, want: []string{"H200-mig-2g.35gb@7"}},
		{name: "strict 40 GiB: lower ID of two 3g", req: share.Request{MemoryMiB: 40 * gib}, want: []string{"H200-mig-3g.71gb@6"}},
		{name: "strict 100 GiB: whole GPU, not the T4", req: share.Request{MemoryMiB: 100 * gib}, want: []string{"H200@0"}},
		{name: "strict, MIG all busy: smallest whole GPU", req: share.Request{}, busy: allMIG, want: []string{"Tesla-T4@8"}},
		{name: "strict 50% compute: no MIG is that large", req: share.Request{ComputePercent: 50}, want: []string{"Tesla-T4@8"}},
		{name: "strict 20 GiB and 50%", req: share.Request{ComputePercent: 50, MemoryMiB: 20 * gib}, want: []string{"H200@0"}},
		{name: "strict count 2", req: share.Request{MemoryMiB: 20 * gib, Count: 2}, want: []string{"H200-mig-2g.35gb@7", "H200-mig-2g.35gb@7"}},
		{name: "strict count 3 mixes MIG sizes", req: share.Request{MemoryMiB: 20 * gib, Count: 3}, want: []string{"H200-mig-2g.35gb@7", "H200-mig-2g.35gb@7", "H200-mig-3g.71gb@6"}},
		{name: "strict count 5: never mixes mechanisms", req: share.Request{MemoryMiB: 20 * gib, Count: 5}, busy: []string{"Tesla-T4"},
			err: "no 5 free shares of one mechanism for isolation strict (tried mig, exclusive) with ≥ 20 GiB (20480 MiB); free: 2× H200, 2× H200-mig-3g.71gb, 2× H200-mig-1g.18gb, 2× H200-mig-2g.35gb", noFit: true},
		{name: "strict, nothing free", req: share.Request{}, busy: []string{"@0", "@1", "@2", "@3", "@4", "@5", "@6", "@7", "@8"},
			err: "no free share for isolation strict (tried mig, exclusive); free: none", noFit: true},
		{name: "strict, only replicas free", req: share.Request{}, busy: []string{"@0", "@1", "@4", "@5", "@6", "@7", "@8"},
			err: "no free share for isolation strict (tried mig, exclusive); free: no mig or exclusive shares (other free shares: 8× H200-timeslice-4x)", noFit: true},
		{name: "strict 200 GiB", req: share.Request{MemoryMiB: 200 * gib}, busy: []string{"@1", "@6", "@7"},
			err: "no free share for isolation strict (tried mig, exclusive) with ≥ 200 GiB (204800 MiB); free: 1× H200, 1× Tesla-T4", noFit: true},

		// auto, standard: an MPS share, else strict's choice.
		{name: "standard: smallest mps share", req: share.Request{Isolation: share.LevelStandard}, want: []string{"H200-mps-25pct@4"}},
		{name: "standard 40 GiB: the 50% share", req: share.Request{Isolation: share.LevelStandard, MemoryMiB: 40 * gib}, want: []string{"H200-mps-50pct@5"}},
		{name: "standard 60%: no mps, no MIG, a whole GPU", req: share.Request{Isolation: share.LevelStandard, ComputePercent: 60}, want: []string{"Tesla-T4@8"}},
		{name: "standard, mps busy: MIG", req: share.Request{Isolation: share.LevelStandard, MemoryMiB: 20 * gib}, busy: allMPS, want: []string{"H200-mig-2g.35gb@7"}},
		{name: "standard count 2: one device", req: share.Request{Isolation: share.LevelStandard, Count: 2}, busy: []string{"H200-mps-25pct@4#0"},
			want: []string{"H200-mps-25pct@4", "H200-mps-25pct@4"}},

		// auto, none: a replica, else standard's choice.
		{name: "none: a replica", req: share.Request{Isolation: share.LevelNone}, want: []string{"H200-timeslice-4x@2"}},
		{name: "none 40 GiB: replicas too small, mps", req: share.Request{Isolation: share.LevelNone, MemoryMiB: 40 * gib}, want: []string{"H200-mps-50pct@5"}},
		{name: "none, replicas and mps busy: MIG", req: share.Request{Isolation: share.LevelNone}, busy: append([]string{"H200-timeslice-4x"}, allMPS...), want: []string{"H200-mig-1g.18gb@6"}},
		{name: "none count 2: a limited replica is alone in its task, so MPS", req: share.Request{Isolation: share.LevelNone, Count: 2}, want: []string{"H200-mps-25pct@4", "H200-mps-25pct@4"}},
		{name: "none count 3: replicas span only 2 GPUs, so mps", req: share.Request{Isolation: share.LevelNone, Count: 3}, want: []string{"H200-mps-25pct@4", "H200-mps-25pct@4", "H200-mps-25pct@4"}},

		// explicit mechanisms.
		{name: "mig 30 GiB", req: share.Request{Mechanism: share.MIG, MemoryMiB: 30 * gib}, want: []string{"H200-mig-2g.35gb@7"}},
		{name: "mig 40 GiB, 3g busy", req: share.Request{Mechanism: share.MIG, MemoryMiB: 40 * gib}, busy: []string{"H200-mig-3g.71gb"},
			err: "no free MIG instance with ≥ 40 GiB (40960 MiB); free: 2× H200-mig-1g.18gb, 2× H200-mig-2g.35gb", noFit: true},
		{name: "mig 30 GiB, only 1g left", req: share.Request{Mechanism: share.MIG, MemoryMiB: 30 * gib}, busy: []string{"H200-mig-3g.71gb", "H200-mig-2g.35gb"},
			err: "no free MIG instance with ≥ 30 GiB (30720 MiB); free: 2× H200-mig-1g.18gb", noFit: true},
		{name: "mig, none left", req: share.Request{Mechanism: share.MIG}, busy: allMIG,
			err: "no free MIG instance; free: no MIG instances (other free shares: 2× H200, 1× Tesla-T4, 6× H200-mps-25pct, 1× H200-mps-50pct, 8× H200-timeslice-4x)", noFit: true},
		{name: "mig count 2", req: share.Request{Mechanism: share.MIG, Count: 2}, want: []string{"H200-mig-1g.18gb@6", "H200-mig-1g.18gb@6"}},
		{name: "mps 40%, 50% busy", req: share.Request{Mechanism: share.MPS, ComputePercent: 40}, busy: []string{"H200-mps-50pct", "H200-mps-25pct@4#0"},
			err: "no free mps share with ≥ 40% compute; free: 5× H200-mps-25pct", noFit: true},
		{name: "mps count 2: equal totals, lower device ID", req: share.Request{Mechanism: share.MPS, Count: 2}, want: []string{"H200-mps-25pct@4", "H200-mps-25pct@4"}},
		{name: "mps count 3: the device that has 3", req: share.Request{Mechanism: share.MPS, Count: 3}, busy: []string{"H200-mps-25pct@4#0", "H200-mps-25pct@4#1"},
			want: []string{"H200-mps-25pct@5", "H200-mps-25pct@5", "H200-mps-50pct@5"}},
		{name: "mps count 4: no device has 4", req: share.Request{Mechanism: share.MPS, Count: 4}, busy: []string{"H200-mps-25pct@4#0"},
			err: "no 4 free mps shares on one device; free: 5× H200-mps-25pct, 1× H200-mps-50pct", noFit: true},
		{name: "timeslice count 2", req: share.Request{Mechanism: share.TimeSlice, Count: 2}, busy: []string{"H200-timeslice-4x@2#0"},
			err: "no 2 free timeslice replicas (a limited one is alone in its task); free: 7× H200-timeslice-4x", noFit: true},
		{name: "timeslice 30%", req: share.Request{Mechanism: share.TimeSlice, ComputePercent: 30},
			err: "no free timeslice replica with ≥ 30% compute; free: 8× H200-timeslice-4x", noFit: true},
		{name: "exclusive count 2: smallest first", req: share.Request{Mechanism: share.Exclusive, Count: 2}, want: []string{"Tesla-T4@8", "H200@0"}},
		{name: "exclusive count 3 over 100 GiB", req: share.Request{Mechanism: share.Exclusive, Count: 3, MemoryMiB: 100 * gib},
			err: "no 3 free exclusive GPUs with ≥ 100 GiB (102400 MiB); free: 2× H200, 1× Tesla-T4", noFit: true},
		{name: "odd memory is written in MiB", req: share.Request{Mechanism: share.Exclusive, MemoryMiB: 150000},
			err: "no free exclusive GPU with ≥ 150000 MiB; free: 2× H200, 1× Tesla-T4", noFit: true},

		// malformed requests: not ErrNoFit.
		{name: "remote on a node without remote GPUs", req: share.Request{Mechanism: share.Remote}, busy: allMIG,
			err: "no free remote share; free: no remote shares (other free shares: 2× H200, 1× Tesla-T4, 6× H200-mps-25pct, 1× H200-mps-50pct, 8× H200-timeslice-4x)", noFit: true},
		{name: "unknown mechanism", req: share.Request{Mechanism: "vgpu"}, err: `invalid request: unknown mechanism "vgpu" (valid: exclusive, mig, mps, timeslice, remote)`},
		{name: "isolation with a mechanism", req: share.Request{Mechanism: share.MIG, Isolation: share.LevelStrict},
			err: `invalid request: isolation "strict" steers mechanism auto only; mechanism "mig" was asked for`},
		{name: "unknown level", req: share.Request{Isolation: "paranoid"}, err: `invalid request: unknown isolation level "paranoid" (valid: strict, standard, none)`},
		{name: "negative count", req: share.Request{Count: -1}, err: "invalid request: count -1: want at least 1"},
		{name: "compute over 100", req: share.Request{ComputePercent: 101}, err: "invalid request: compute 101%: want 0 (any) to 100"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := share.Choose(c, busy(c, tt.busy...), tt.req)
			if tt.err != "" {
				if err == nil {
					t.Fatalf("got %v, want error %q", labels(c, got), tt.err)
				}
				if err.Error() != tt.err {
					t.Errorf("error\n got %s\nwant %s", err, tt.err)
				}
				if errors.Is(err, share.ErrNoFit) != tt.noFit {
					t.Errorf("errors.Is(ErrNoFit) = %v, want %v", !tt.noFit, tt.noFit)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if l := labels(c, got); !slices.Equal(l, tt.want) {
				t.Errorf("got %v, want %v", l, tt.want)
			}
		})
	}
}

func labels(c *share.Catalog, ss []share.Share) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = label(c, s)
	}
	return out
}

func TestChooseNilCatalog(t *testing.T) {
	_, err := share.Choose(nil, func(share.Share) bool { return true }, share.Request{Mechanism: share.MPS})
	if !errors.Is(err, share.ErrNoFit) || err.Error() != "no free mps share; free: none" {
		t.Errorf("error %v", err)
	}
}

func TestAutoMechanisms(t *testing.T) {
	for l, want := range map[share.Level]string{"": "mig,exclusive", share.LevelStrict: "mig,exclusive", share.LevelStandard: "mps,mig,exclusive",
		share.LevelNone: "timeslice,mps,mig,exclusive", "x": ""} {
		var got []string
		for _, m := range share.AutoMechanisms(l) {
			got = append(got, string(m))
		}
		if strings.Join(got, ",") != want {
			t.Errorf("AutoMechanisms(%q) = %v, want %s", l, got, want)
		}
	}
	share.AutoMechanisms(share.LevelNone)[0] = share.Remote // a copy
	if share.AutoMechanisms(share.LevelNone)[0] != share.TimeSlice {
		t.Error("AutoMechanisms returned the policy table itself")
	}
}

// TestChooseProperties checks random requests against random free sets: what
// Choose returns is free, fits, is of one mechanism, is the first mechanism
// of the policy that can serve the request, does not depend on catalog order,
// and keeps MPS shares on one device and replicas on distinct GPUs.
func TestChooseProperties(t *testing.T) {
	c := policyCatalog(t)
	rev := reversed(c)
	var all []share.Share
	for _, g := range c.Groups {
		all = append(all, g.Shares...)
	}
	mechs := []share.Mechanism{"", share.Exclusive, share.MIG, share.MPS, share.TimeSlice}
	levels := []share.Level{"", share.LevelStrict, share.LevelStandard, share.LevelNone}
	mems := []uint64{0, 1, 15360, 16384, 20 * gib, 35942, 40 * gib, 71424, 100 * gib, 143771, 143772}
	rng := rand.New(rand.NewSource(1))
	served := 0
	for i := 0; i < 5000; i++ {
		taken := map[string]bool{}
		p := rng.Float64()
		for _, s := range all {
			if rng.Float64() < p {
				taken[s.ID] = true
			}
		}
		free := func(s share.Share) bool { return !taken[s.ID] }
		req := share.Request{
			Mechanism:      mechs[rng.Intn(len(mechs))],
			MemoryMiB:      mems[rng.Intn(len(mems))],
			ComputePercent: []int{0, 0, 10, 25, 26, 45, 50, 100}[rng.Intn(8)],
			Count:          rng.Intn(5),
		}
		if req.Mechanism == "" {
			req.Isolation = levels[rng.Intn(len(levels))]
		}
		got, err := share.Choose(c, free, req)
		got2, err2 := share.Choose(rev, free, req)
		if (err == nil) != (err2 == nil) || !slices.Equal(share.SortedIDs(got), share.SortedIDs(got2)) {
			t.Fatalf("%+v: catalog order changed the choice: %v (%v) vs %v (%v)", req, labels(c, got), err, labels(c, got2), err2)
		}
		order := share.AutoMechanisms(req.Isolation)
		if req.Mechanism != "" {
			order = []share.Mechanism{req.Mechanism}
		}
		if err != nil {
			if !errors.Is(err, share.ErrNoFit) {
				t.Fatalf("%+v: %v does not wrap ErrNoFit", req, err)
			}
			continue
		}
		served++
		want := max(req.Count, 1)
		if len(got) != want {
			t.Fatalf("%+v: %d shares", req, len(got))
		}
		ids := map[string]bool{}
		parents := map[string]bool{}
		for _, s := range got {
			if taken[s.ID] || ids[s.ID] || s.MemoryMiB < req.MemoryMiB || s.ComputePercent < req.ComputePercent || s.Mechanism != got[0].Mechanism {
				t.Fatalf("%+v: got %v", req, labels(c, got))
			}
			ids[s.ID] = true
			parents[s.Parent()] = true
		}
		m := got[0].Mechanism
		if m == share.MPS && len(parents) != 1 || m == share.TimeSlice && len(parents) != len(got) {
			t.Fatalf("%+v: %v spread wrongly", req, labels(c, got))
		}
		// Every mechanism the policy tries before m cannot serve the request.
		idx := slices.Index(order, m)
		if idx < 0 {
			t.Fatalf("%+v: mechanism %s is not in the policy %v", req, m, order)
		}
		for _, earlier := range order[:idx] {
			r := req
			r.Mechanism, r.Isolation = earlier, ""
			if got, err := share.Choose(c, free, r); err == nil {
				t.Fatalf("%+v: chose %s, but %s could serve it: %v", req, m, earlier, labels(c, got))
			}
		}
	}
	if served < 1000 {
		t.Errorf("only %d of 5000 random requests were served; the test is too weak", served)
	}
}

// reversed is c with its groups and their shares in reverse order.
func reversed(c *share.Catalog) *share.Catalog {
	r := &share.Catalog{}
	for i := len(c.Groups) - 1; i >= 0; i-- {
		g := c.Groups[i]
		g.Shares = slices.Clone(g.Shares)
		slices.Reverse(g.Shares)
		r.Groups = append(r.Groups, g)
	}
	return r
}

// TestChooseSpreadComesFromGroups: how a request for several shares takes
// them is the spread of the mechanism's groups, whatever the mechanism.
func TestChooseSpreadComesFromGroups(t *testing.T) {
	catalog := func(spread share.Spread) *share.Catalog {
		var offers []share.Offer
		for _, s := range []struct {
			gpu string
			n   int
			mib uint64
		}{{"GPU-a", 0, 10 * gib}, {"GPU-a", 1, 10 * gib}, {"GPU-a", 2, 30 * gib}, {"GPU-b", 0, 15 * gib}, {"GPU-b", 1, 15 * gib}} {
			offers = append(offers, share.Offer{
				Group: fmt.Sprintf("H200-mps-%dgib", s.mib/gib), Spread: spread,
				Share: share.Share{ID: share.SubID(s.gpu, share.MPS, s.n), Mechanism: share.MPS, GPU: share.GPURef{UUID: s.gpu, Model: "NVIDIA H200"}, MemoryMiB: s.mib},
			})
		}
		c, err := share.NewCatalog(offers)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	all := func(share.Share) bool { return true }
	for _, tc := range []struct {
		spread share.Spread
		want   []string
		err    string
	}{
		{share.SpreadAny, []string{"GPU-a/mps/0", "GPU-a/mps/1", "GPU-b/mps/0"}, ""},
		{share.SpreadOneDevice, []string{"GPU-a/mps/0", "GPU-a/mps/1", "GPU-a/mps/2"}, ""},
		{share.SpreadDistinctGPUs, nil, "no 3 free mps shares on distinct GPUs; free: 2× H200-mps-10gib, 1× H200-mps-30gib, 2× H200-mps-15gib"},
	} {
		c := catalog(tc.spread)
		got, err := share.Choose(c, all, share.Request{Mechanism: share.MPS, Count: 3})
		if tc.err != "" {
			if err == nil || err.Error() != tc.err || !errors.Is(err, share.ErrNoFit) {
				t.Errorf("spread %d: got %v, %v; want error %q", tc.spread, share.SortedIDs(got), err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(share.SortedIDs(got), tc.want) {
			t.Errorf("spread %d: got %v, %v; want %v", tc.spread, share.SortedIDs(got), err, tc.want)
		}
	}
	// Two free of each GPU: one device takes the smaller pair.
	c := catalog(share.SpreadOneDevice)
	got, err := share.Choose(c, func(s share.Share) bool { return s.ID != "GPU-a/mps/0" }, share.Request{Mechanism: share.MPS, Count: 2})
	if err != nil || !slices.Equal(share.SortedIDs(got), []string{"GPU-b/mps/0", "GPU-b/mps/1"}) {
		t.Errorf("one device, a's 10 GiB share busy: got %v, %v; want b's two 15 GiB shares (30 GiB, not 10+30)", share.SortedIDs(got), err)
	}
}
