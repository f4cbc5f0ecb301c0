package share_test

import (
	"errors"
	"math/rand"
	"slices"
	"strings"
	"testing"

	"github.com/gpumux/gpumux/gpu"
	"github.com/gpumux/gpumux/remote"
	"github.com/gpumux/gpumux/share"
)

// remoteGPUs are two servers' GPUs: two H200 on a, one on b, and an H100 on
// b whose UUID collides with nothing.
var remoteGPUs = []share.RemoteGPU{
	{Addr: "10.0.0.6:7070", Index: 0, UUID: "GPU-r6-0", Model: "NVIDIA H200", MemoryMiB: 143771, SMCount: 132, ComputeCapability: "9.0", CUDAVersion: "13.0"},
	{Addr: "10.0.0.5:7070", Index: 1, UUID: "GPU-r5-1", Model: "NVIDIA H200", MemoryMiB: 143771, SMCount: 132, ComputeCapability: "9.0", CUDAVersion: "13.0"},
	{Addr: "10.0.0.5:7070", Index: 0, UUID: "GPU-r5-0", Model: "NVIDIA H200", MemoryMiB: 143771, SMCount: 132, ComputeCapability: "9.0", CUDAVersion: "13.0"},
	{Addr: "10.0.0.6:7070", Index: 1, UUID: "GPU-r6-1", Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, SMCount: 132, ComputeCapability: "9.0", CUDAVersion: "13.0"},
}

// withRemote is the catalog c of the node inv with the remote GPUs' shares
// added, as the remote provider offers them (remote.OffersOf).
func withRemote(t testing.TB, c *share.Catalog, inv *gpu.Node, gpus []share.RemoteGPU, shares int) *share.Catalog {
	t.Helper()
	offers, _, err := remote.OffersOf(gpus, inv, shares)
	if err != nil {
		t.Fatal(err)
	}
	out, err := share.NewCatalog(append(offersOf(c), offers...))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestChooseRemote(t *testing.T) {
	inv, base := policyNode(t)
	c := withRemote(t, base, inv, remoteGPUs, 4)
	allLocal := groupNames(base)
	tests := []struct {
		name  string
		c     *share.Catalog
		req   share.Request
		busy  []string
		want  []string // share IDs, or
		err   string
		noFit bool
	}{
		{name: "explicit: the smallest remote share", c: c, req: share.Request{Mechanism: share.Remote}, want: []string{"GPU-r6-1/remote/0"}},
		{name: "explicit 30 GiB: an H200 share", c: c, req: share.Request{Mechanism: share.Remote, MemoryMiB: 30 * gib}, want: []string{"GPU-r5-0/remote/0"}},
		{name: "explicit count 2: one GPU", c: c, req: share.Request{Mechanism: share.Remote, Count: 2, MemoryMiB: 30 * gib}, want: []string{"GPU-r5-0/remote/0", "GPU-r5-0/remote/1"}},
		{name: "explicit count 5: no GPU has 5", c: c, req: share.Request{Mechanism: share.Remote, Count: 5},
			err: "no 5 free remote shares on one device; free: 4× H100-80GB-HBM3-remote-4x, 12× H200-remote-4x", noFit: true},
		{name: "standard: local first", c: c, req: share.Request{Isolation: share.LevelStandard}, want: []string{"GPU-00000004-0000-0000-0000-000000000000/mps/0"}},
		{name: "standard, nothing local free: remote", c: c, req: share.Request{Isolation: share.LevelStandard}, busy: allLocal, want: []string{"GPU-r6-1/remote/0"}},
		{name: "standard 150 GiB: no local GPU is that large, nor remote", c: c, req: share.Request{Isolation: share.LevelStandard, MemoryMiB: 150 * gib},
			err: "no free share for isolation standard (tried mps, mig, exclusive, remote) with ≥ 150 GiB (153600 MiB); free: 2× H200, 1× Tesla-T4, 2× H200-mig-3g.71gb, 2× H200-mig-1g.18gb, 2× H200-mig-2g.35gb, 6× H200-mps-25pct, 1× H200-mps-50pct, 4× H100-80GB-HBM3-remote-4x, 12× H200-remote-4x", noFit: true},
		{name: "none, local busy: remote", c: c, req: share.Request{Isolation: share.LevelNone, MemoryMiB: 30 * gib}, busy: allLocal, want: []string{"GPU-r5-0/remote/0"}},
		{name: "strict never goes remote", c: c, req: share.Request{Isolation: share.LevelStrict}, busy: allLocal,
			err: "no free share for isolation strict (tried mig, exclusive); free: no mig or exclusive shares (other free shares: 4× H100-80GB-HBM3-remote-4x, 12× H200-remote-4x)", noFit: true},
		{name: "without remote GPUs auto does not name remote", c: base, req: share.Request{Isolation: share.LevelStandard}, busy: allLocal,
			err: "no free share for isolation standard (tried mps, mig, exclusive); free: none", noFit: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := share.Choose(tt.c, busy(tt.c, tt.busy...), tt.req)
			if tt.err != "" {
				if err == nil || err.Error() != tt.err {
					t.Fatalf("error\n got %v\nwant %s", err, tt.err)
				}
				if errors.Is(err, share.ErrNoFit) != tt.noFit {
					t.Errorf("errors.Is(ErrNoFit) = %v, want %v", !tt.noFit, tt.noFit)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, s := range got {
				ids = append(ids, s.ID)
			}
			if !slices.Equal(ids, tt.want) {
				t.Errorf("got %v, want %v", ids, tt.want)
			}
		})
	}
}

func TestAutoFallback(t *testing.T) {
	for l, want := range map[share.Level]string{"": "", share.LevelStrict: "", share.LevelStandard: "remote", share.LevelNone: "remote", "x": ""} {
		var got []string
		for _, m := range share.AutoFallback(l) {
			got = append(got, string(m))
		}
		if strings.Join(got, ",") != want {
			t.Errorf("AutoFallback(%q) = %v, want %s", l, got, want)
		}
	}
}

// TestChooseRemoteProperties: with remote shares in the catalog, auto picks
// remote only when no local mechanism of its level can serve the request,
// and remote shares of one request are of one GPU.
func TestChooseRemoteProperties(t *testing.T) {
	inv, base := policyNode(t)
	c := withRemote(t, base, inv, remoteGPUs, 4)
	var all []share.Share
	for _, g := range c.Groups {
		all = append(all, g.Shares...)
	}
	rng := rand.New(rand.NewSource(2))
	remote := 0
	for i := 0; i < 3000; i++ {
		// Local shares mostly busy, so that some requests go remote.
		taken := map[string]bool{}
		pLocal, pRemote := 0.7+0.3*rng.Float64(), rng.Float64()
		for _, s := range all {
			if p := map[bool]float64{true: pRemote, false: pLocal}[s.Mechanism == share.Remote]; rng.Float64() < p {
				taken[s.ID] = true
			}
		}
		free := func(s share.Share) bool { return !taken[s.ID] }
		req := share.Request{
			Isolation: []share.Level{"", share.LevelStrict, share.LevelStandard, share.LevelNone}[rng.Intn(4)],
			MemoryMiB: []uint64{0, 16384, 30 * gib, 40 * gib, 100 * gib}[rng.Intn(5)],
			Count:     rng.Intn(3),
		}
		got, err := share.Choose(c, free, req)
		if err != nil || got[0].Mechanism != share.Remote {
			continue
		}
		remote++
		if !slices.Contains(share.AutoFallback(req.Isolation), share.Remote) {
			t.Fatalf("%+v: remote chosen at a level that does not allow it", req)
		}
		for _, m := range share.AutoMechanisms(req.Isolation) {
			r := req
			r.Mechanism, r.Isolation = m, ""
			if got, err := share.Choose(c, free, r); err == nil {
				t.Fatalf("%+v: chose remote, but %s could serve it: %v", req, m, share.SortedIDs(got))
			}
		}
		for _, s := range got {
			if s.Parent() != got[0].Parent() || taken[s.ID] || s.MemoryMiB < req.MemoryMiB {
				t.Fatalf("%+v: got %v", req, share.SortedIDs(got))
			}
		}
	}
	if remote < 150 {
		t.Errorf("only %d requests went remote; the test is too weak", remote)
	}
}
