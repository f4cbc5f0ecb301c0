package share_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/gpumux/gpumux/share"
)

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

// offer is a hand-made offer of group g: a share id on GPU gpu (of a
// server at addr when addr is set).
func offer(g, id, gpu, addr string, spread share.Spread) share.Offer {
	s := share.Share{ID: id, Mechanism: share.TimeSlice, GPU: share.GPURef{UUID: gpu, Model: "NVIDIA H200"}, MemoryMiB: 1024}
	if addr != "" {
		s.Mechanism = share.Remote
		s.Remote = &share.RemoteGPU{Addr: addr, UUID: gpu}
	}
	return share.Offer{Group: g, Profile: "2x", Attrs: share.Attributes{Mechanism: s.Mechanism, MemoryMiB: 1024}, Spread: spread, Share: s}
}

func TestNewCatalog(t *testing.T) {
	c, err := share.NewCatalog([]share.Offer{
		offer("H200-timeslice-2x", "GPU-a/timeslice/0", "GPU-a", "", share.SpreadDistinctGPUs),
		offer("H200-remote-2x", "GPU-r/remote/0", "GPU-r", "10.0.0.5:7070", share.SpreadOneDevice),
		offer("H200-timeslice-2x", "GPU-a/timeslice/1", "GPU-a", "", share.SpreadDistinctGPUs),
		offer("H200-timeslice-2x", "GPU-b/timeslice/0", "GPU-b", "", share.SpreadDistinctGPUs),
		offer("H200-remote-2x", "GPU-r/remote/1", "GPU-r", "10.0.0.5:7070", share.SpreadOneDevice),
		offer("H200-remote-2x-2", "GPU-s/remote/0", "GPU-s", "10.0.0.6:7070", share.SpreadOneDevice),
		offer("H200-remote-2x-2", "GPU-t/remote/0", "GPU-t", "10.0.0.7:7070", share.SpreadOneDevice),
	})
	if err != nil {
		t.Fatal(err)
	}
	// Groups in the order their names first appear, shares in offer order.
	if got, want := groupNames(c), []string{"H200-timeslice-2x", "H200-remote-2x", "H200-remote-2x-2"}; !slices.Equal(got, want) {
		t.Fatalf("groups %v, want %v", got, want)
	}
	type want struct {
		ids            []string
		mech           share.Mechanism
		spread         share.Spread
		parent, addr   string
		model, profile string
	}
	for i, w := range []want{
		{[]string{"GPU-a/timeslice/0", "GPU-a/timeslice/1", "GPU-b/timeslice/0"}, share.TimeSlice, share.SpreadDistinctGPUs, "", "", "NVIDIA H200", "2x"},
		{[]string{"GPU-r/remote/0", "GPU-r/remote/1"}, share.Remote, share.SpreadOneDevice, "GPU-r", "10.0.0.5:7070", "NVIDIA H200", "2x"},
		{[]string{"GPU-s/remote/0", "GPU-t/remote/0"}, share.Remote, share.SpreadOneDevice, "", "", "NVIDIA H200", "2x"},
	} {
		g := c.Groups[i]
		var ids []string
		for _, s := range g.Shares {
			ids = append(ids, s.ID)
		}
		if !slices.Equal(ids, w.ids) || g.Mechanism != w.mech || g.Spread != w.spread || g.Attrs.ParentUUID != w.parent || g.Attrs.RemoteAddr != w.addr || g.Model != w.model || g.Profile != w.profile {
			t.Errorf("group %s: shares %v, %s, spread %d, parent %q, addr %q, model %q, profile %q; want %+v",
				g.Name, ids, g.Mechanism, g.Spread, g.Attrs.ParentUUID, g.Attrs.RemoteAddr, g.Model, g.Profile, w)
		}
	}
	if c.Len() != 7 || len(c.Shares()) != 7 || c.Shares()[3].ID != "GPU-r/remote/0" {
		t.Errorf("Len %d, Shares %v", c.Len(), share.SortedIDs(c.Shares()))
	}
	if got, err := c.Lookup("GPU-t/remote/0", "GPU-a/timeslice/1"); err != nil || got[0].Remote.Addr != "10.0.0.7:7070" || got[1].GPU.UUID != "GPU-a" {
		t.Errorf("Lookup: %+v, %v", got, err)
	}

	// A share offered twice, even in two groups, is an error.
	_, err = share.NewCatalog([]share.Offer{
		offer("H200-timeslice-2x", "GPU-a/timeslice/0", "GPU-a", "", share.SpreadDistinctGPUs),
		offer("H200-timeslice-2x-2", "GPU-a/timeslice/0", "GPU-a", "", share.SpreadDistinctGPUs),
	})
	if err == nil || !strings.Contains(err.Error(), "GPU-a/timeslice/0 is offered twice") {
		t.Errorf("a share offered twice: %v", err)
	}

	// No offers: an empty catalog.
	empty, err := share.NewCatalog(nil)
	if err != nil || empty.Len() != 0 || len(empty.Groups) != 0 {
		t.Errorf("no offers: %+v, %v", empty, err)
	}
	if _, err := empty.Lookup("GPU-a"); !errors.Is(err, share.ErrUnknownShare) {
		t.Errorf("Lookup in an empty catalog: %v", err)
	}
}

func TestGroupName(t *testing.T) {
	for _, tc := range []struct {
		model string
		parts []string
		want  string
	}{
		{"NVIDIA H200", nil, "H200"},
		{"NVIDIA H200", []string{"mig", "3g.71gb"}, "H200-mig-3g.71gb"},
		{"NVIDIA H100 80GB HBM3", []string{"remote", "4x"}, "H100-80GB-HBM3-remote-4x"},
		{"Tesla T4", []string{"timeslice", ""}, "Tesla-T4-timeslice"},
	} {
		if got := share.GroupName(tc.model, tc.parts...); got != tc.want {
			t.Errorf("GroupName(%q, %q) = %q, want %q", tc.model, tc.parts, got, tc.want)
		}
	}
}

func TestPercentOf(t *testing.T) {
	for _, tc := range []struct{ part, whole, want int }{{60, 132, 45}, {132, 132, 100}, {5, 0, 0}, {5, -1, 0}} {
		if got := share.PercentOf(tc.part, tc.whole); got != tc.want {
			t.Errorf("PercentOf(%d, %d) = %d, want %d", tc.part, tc.whole, got, tc.want)
		}
	}
}
