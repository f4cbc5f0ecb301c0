package share_test

import (
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"testing"

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

func TestWithRemote(t *testing.T) {
	node := testNode(t)
	local := catalogOf(t, node, share.GPURule{Match: "4", Mechanism: share.MPS, Shares: 2})
	// GPU-dup is GPU 3 of this node, served back to it by a server on the node.
	gpus := append(slices.Clone(remoteGPUs),
		share.RemoteGPU{Addr: "127.0.0.1:7070", Index: 0, UUID: node.GPUs[3].UUID, Model: "NVIDIA H200", MemoryMiB: 143771, SMCount: 132},
		share.RemoteGPU{Addr: "10.0.0.7:7070", Index: 0, UUID: "GPU-r5-0", Model: "NVIDIA H200", MemoryMiB: 143771, SMCount: 132}, // seen twice
		share.RemoteGPU{Addr: "10.0.0.8:7070", Index: 0, UUID: "GPU-r8-0", Model: "NVIDIA H200", MemoryMiB: 97871, SMCount: 132, ComputeCapability: "9.0", CUDAVersion: "13.0"},
	)
	c, skipped, err := local.WithRemote(gpus, 4)
	if err != nil {
		t.Fatal(err)
	}
	var sk []string
	for _, g := range skipped {
		sk = append(sk, g.Addr+"="+g.UUID)
	}
	if want := []string{"10.0.0.7:7070=GPU-r5-0", "127.0.0.1:7070=" + node.GPUs[3].UUID}; !slices.Equal(sk, want) {
		t.Errorf("skipped %v, want %v", sk, want)
	}
	if local.Len() != 12 || c.Len() != 12+4*5 {
		t.Errorf("local catalog has %d shares (changed?), the merged one %d", local.Len(), c.Len())
	}
	got := map[string]string{}
	for _, g := range c.Groups {
		if g.Mechanism != share.Remote {
			continue
		}
		a := g.Attrs
		got[g.Name] = fmt.Sprintf("%d× %d MiB %d%% %d SMs %s fault=%v cc=%s cuda=%s parent=%s addr=%s",
			len(g.Shares), a.MemoryMiB, a.ComputePercent, a.SMCount, a.MemoryIsolation, a.FaultIsolation, a.CUDAComputeCapability, a.CUDAVersion, a.ParentUUID, a.RemoteAddr)
	}
	want := map[string]string{
		// The smaller H200 variant sorts first and gets the plain name.
		"H200-remote-4x":           "4× 24467 MiB 25% 132 SMs hard fault=false cc=9.0 cuda=13.0 parent=GPU-r8-0 addr=10.0.0.8:7070",
		"H200-remote-4x-2":         "12× 35942 MiB 25% 132 SMs hard fault=false cc=9.0 cuda=13.0 parent= addr=",
		"H100-80GB-HBM3-remote-4x": "4× 20389 MiB 25% 132 SMs hard fault=false cc=9.0 cuda=13.0 parent=GPU-r6-1 addr=10.0.0.6:7070",
	}
	if len(got) != len(want) {
		t.Errorf("remote groups %v", got)
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: %s, want %s", name, got[name], w)
		}
	}
	s, err := c.Lookup("GPU-r5-1/remote/3")
	if err != nil {
		t.Fatal(err)
	}
	r := s[0]
	if r.Mechanism != share.Remote || r.Parent() != "GPU-r5-1" || r.Remote == nil || r.Remote.Addr != "10.0.0.5:7070" || r.Remote.Index != 1 || r.GPU.Index != 1 || r.MemoryMiB != 35942 {
		t.Errorf("share %+v (remote %+v)", r, r.Remote)
	}
	if !share.IsRemoteID(r.ID) || share.IsRemoteID(node.GPUs[4].UUID+"/mps/0") {
		t.Error("IsRemoteID")
	}
	// The order of discovery does not change IDs, groups or names.
	rev := slices.Clone(gpus)
	slices.Reverse(rev)
	c2, _, err := local.WithRemote(rev, 4)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range c.Groups {
		if ids := share.SortedIDs(g.Shares); len(ids) > 0 {
			s2, err := c2.Lookup(ids...)
			if err != nil || len(s2) != len(ids) {
				t.Errorf("group %s: %v", g.Name, err)
			}
		}
	}
	if n1, n2 := groupNames(c), groupNames(c2); !slices.Equal(n1, n2) {
		t.Errorf("group names depend on discovery order: %v vs %v", n1, n2)
	}

	for _, bad := range []int{0, 49} {
		if _, _, err := local.WithRemote(gpus, bad); err == nil || !strings.Contains(err.Error(), "1 to 48") {
			t.Errorf("shares %d: %v", bad, err)
		}
	}
	// A node without GPUs of its own.
	only, _, err := (*share.Catalog)(nil).WithRemote(remoteGPUs[:1], 2)
	if err != nil || only.Len() != 2 || len(only.Groups) != 1 || only.Groups[0].Name != "H200-remote-2x" {
		t.Errorf("remote only: %v %+v", err, only)
	}
}

func groupNames(c *share.Catalog) []string {
	var out []string
	for _, g := range c.Groups {
		out = append(out, g.Name)
	}
	return out
}

// remotePaths is a front door that records the tokens it mints.
type remotePaths struct {
	testPaths
	minted *[]string
}

func (remotePaths) InterposerDir() string { return "/usr/lib/gpumux/remote" }

func (p remotePaths) RemoteToken(g share.RemoteGPU, quotaMiB uint64) (string, error) {
	tok := fmt.Sprintf("tok:%s:%d:%d", g.Addr, g.Index, quotaMiB)
	*p.minted = append(*p.minted, tok)
	return tok, nil
}

func TestRemoteEdits(t *testing.T) {
	c, _, err := catalogOf(t, testNode(t)).WithRemote(remoteGPUs, 4)
	if err != nil {
		t.Fatal(err)
	}
	var minted []string
	paths := remotePaths{minted: &minted}
	two, err := c.Lookup("GPU-r5-1/remote/0", "GPU-r5-1/remote/2")
	if err != nil {
		t.Fatal(err)
	}
	e, err := share.EditsFor(two, paths)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"GPUMUX_SHARES":       "GPU-r5-1/remote/0,GPU-r5-1/remote/2",
		"GPUMUX_REMOTE_ADDR":  "10.0.0.5:7070",
		"GPUMUX_REMOTE_TOKEN": "tok:10.0.0.5:7070:1:71884", // two shares' memory, GPU 1 of the server
		"LD_LIBRARY_PATH":     "/run/gpumux/remote",
	}
	if len(e.Env) != len(want) {
		t.Errorf("env %v, want %v", e.Env, want)
	}
	for k, v := range want {
		if e.Env[k] != v {
			t.Errorf("env %s = %q, want %q", k, e.Env[k], v)
		}
	}
	if len(e.DeviceNodes) != 0 {
		t.Errorf("a remote share got device nodes %v", e.DeviceNodes)
	}
	if len(e.Mounts) != 1 || e.Mounts[0] != (share.Mount{HostPath: "/usr/lib/gpumux/remote", ContainerPath: "/run/gpumux/remote", ReadOnly: true}) {
		t.Errorf("mounts %+v", e.Mounts)
	}

	local, _ := c.Lookup(c.Groups[0].Shares[0].ID)
	for _, tc := range []struct {
		name string
		ids  []string
		with []share.Share
		p    share.Paths
		want string
	}{
		{"two GPUs", []string{"GPU-r5-1/remote/0", "GPU-r5-0/remote/0"}, nil, paths, "must come from one GPU"},
		{"mixed with local", []string{"GPU-r5-1/remote/0"}, local, paths, "cannot be combined with exclusive shares"},
		{"a front door that cannot mint", []string{"GPU-r5-1/remote/0"}, nil, testPaths{}, "cannot mint"},
	} {
		ss, err := c.Lookup(tc.ids...)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := share.EditsFor(append(ss, tc.with...), tc.p); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

func TestChooseRemote(t *testing.T) {
	base := policyCatalog(t)
	c, _, err := base.WithRemote(remoteGPUs, 4)
	if err != nil {
		t.Fatal(err)
	}
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
			err: "no free share for isolation standard (tried mps, mig, exclusive, remote) with ≥ 150 GiB (153600 MiB); free: 2× H200, 6× H200-mps-25pct, 1× H200-mps-50pct, 2× H200-mig-3g.71gb, 2× H200-mig-1g.18gb, 2× H200-mig-2g.35gb, 1× Tesla-T4, 4× H100-80GB-HBM3-remote-4x, 12× H200-remote-4x", noFit: true},
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
	base := policyCatalog(t)
	c, _, err := base.WithRemote(remoteGPUs, 4)
	if err != nil {
		t.Fatal(err)
	}
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
