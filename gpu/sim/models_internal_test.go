package sim

import (
	"slices"
	"testing"
)

// TestModelTables checks the tables for typos: placements inside the 8
// memory slots and aligned, distinct GI ids per placement, instance counts
// that fit, and CI profiles with a full-size CI.
func TestModelTables(t *testing.T) {
	for name, m := range models {
		if len(m.giProfiles) != 7 || len(m.busNumbers) != 8 {
			t.Errorf("%s: %d profiles, %d buses", name, len(m.giProfiles), len(m.busNumbers))
		}
		for _, p := range m.giProfiles {
			if p.info.InstanceCount > uint32(len(p.starts)) {
				t.Errorf("%s %s: %d instances but %d placements", name, p.name, p.info.InstanceCount, len(p.starts))
			}
			if !slices.IsSorted(p.starts) {
				t.Errorf("%s %s: unsorted placements", name, p.name)
			}
			ids := map[uint32]bool{}
			for _, s := range p.starts {
				if s%p.size != 0 || s+p.size > memorySlots {
					t.Errorf("%s %s: placement %d:%d", name, p.name, s, p.size)
				}
				ids[giIDFor(s, p.size)] = true
			}
			if len(ids) != len(p.starts) {
				t.Errorf("%s %s: GI ids collide", name, p.name)
			}
			cis := m.ciProfiles(&p)
			full := cis[len(cis)-1]
			if full.size != p.info.SliceCount || full.info.MultiprocessorCount != p.info.MultiprocessorCount || full.name != p.name {
				t.Errorf("%s %s: full CI %+v", name, p.name, full)
			}
			if p.info.MemorySizeMB*mib > m.memoryBytes || p.info.MultiprocessorCount > m.smCount {
				t.Errorf("%s %s: bigger than the GPU", name, p.name)
			}
		}
	}
}
