package gpu_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gpumux/gpumux/gpu"
)

// h200Profiles is what a real H200 reports (driver 580.159.04), from
// shared/fixtures/nvidia-h200 (nvidia-smi mig -lgip / -lgipp and NVML).
// The simulated dgxh200 and the real card are both checked against it.
var h200Profiles = []struct {
	name      string
	id        int
	sms       int
	memoryMiB uint64
	max       int
	place     string
}{
	{"1g.18gb", 19, 16, 16384, 7, "0:1 1:1 2:1 3:1 4:1 5:1 6:1"},
	{"1g.18gb+me", 20, 16, 16384, 1, "0:1 1:1 2:1 3:1 4:1 5:1 6:1"},
	{"1g.35gb", 15, 26, 33280, 4, "0:2 2:2 4:2 6:2"},
	{"2g.35gb", 14, 32, 33280, 3, "0:2 2:2 4:2"},
	{"3g.71gb", 9, 60, 71424, 2, "0:4 4:4"},
	{"4g.71gb", 5, 64, 71424, 1, "0:4"},
	{"7g.141gb", 0, 132, 143360, 1, "0:8"},
}

// checkH200 compares a GPU with the real H200's readings.
func checkH200(t *testing.T, g gpu.GPU) {
	t.Helper()
	if g.Model != "NVIDIA H200" || g.SMCount != 132 || g.MemoryMiB != 143771 || g.ComputeCapability != "9.0" || !g.MIGCapable {
		t.Errorf("GPU %d: model %q, %d SMs, %d MiB, CC %s, MIG capable %v; want NVIDIA H200, 132 SMs, 143771 MiB, CC 9.0, MIG capable",
			g.Index, g.Model, g.SMCount, g.MemoryMiB, g.ComputeCapability, g.MIGCapable)
	}
	// Fixed by the card (and its default power limit): nvidia-smi -q of the H200.
	hw := g.Hardware
	if hw.BAR1MiB != 262144 || hw.MaxCoresClockMHz != 1980 || hw.MaxMemoryClockMHz != 3201 || hw.PCIeGeneration != 5 || hw.PCIeWidth != 16 || hw.PowerLimitW != 700 {
		t.Errorf("GPU %d: BAR1 %d MiB, max clocks %d/%d MHz, PCIe gen %d x%d, power limit %d W; want 262144 MiB, 1980/3201 MHz, gen 5 x16, 700 W",
			g.Index, hw.BAR1MiB, hw.MaxCoresClockMHz, hw.MaxMemoryClockMHz, hw.PCIeGeneration, hw.PCIeWidth, hw.PowerLimitW)
	}
	if !strings.HasPrefix(g.UUID, "GPU-") || g.PCIBusID == "" {
		t.Errorf("GPU %d: UUID %q, PCI bus %q", g.Index, g.UUID, g.PCIBusID)
	}
	if len(g.MIGProfiles) != len(h200Profiles) {
		t.Errorf("GPU %d has %d MIG profiles %v, want %d", g.Index, len(g.MIGProfiles), g.ProfileNames(), len(h200Profiles))
	}
	for _, w := range h200Profiles {
		p, ok := g.Profile(w.name)
		if !ok {
			t.Errorf("GPU %d: no profile %s (have %v)", g.Index, w.name, g.ProfileNames())
			continue
		}
		var place []string
		for _, pl := range p.Placements {
			place = append(place, pl.String())
		}
		got := fmt.Sprintf("id %d, %d SMs, %d MiB, max %d, at %s", p.GIProfileID, p.SMCount, p.MemoryMiB, p.MaxCount, strings.Join(place, " "))
		want := fmt.Sprintf("id %d, %d SMs, %d MiB, max %d, at %s", w.id, w.sms, w.memoryMiB, w.max, w.place)
		if got != want {
			t.Errorf("GPU %d profile %s: %s; want %s", g.Index, w.name, got, want)
		}
	}
}

// deref is *p, or nil, for printing.
func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}
