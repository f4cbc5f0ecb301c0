package sim_test

import (
	"testing"

	"github.com/gpumux/gpumux/gpu/sim"
)

// TestSeesEveryChange checks that a reader notices changes that keep the
// state file's size (two-digit telemetry), made by another Node (process) in
// quick succession, one or two writes between reads: reads only stat the
// file, so a new version must never look like the cached one even if the
// file system reuses an inode number within one timestamp tick.
func TestSeesEveryChange(t *testing.T) {
	dir := t.TempDir()
	_, lib := open(t, "dgxh100", dir, sim.WithGPUCount(1))
	other, err := sim.Open("dgxh100", dir)
	if err != nil {
		t.Fatal(err)
	}
	d := device(t, lib, 0)
	for i := 0; i < 300; i++ {
		writes := 1 + i%2
		var want uint32
		for w := 0; w < writes; w++ {
			want = uint32(10 + (i*2+w)%90)
			if err := other.SetTelemetry(0, sim.Telemetry{GPUUtil: want, MemoryUtil: 50, TemperatureC: 40, PowerMilliwatts: 100000}); err != nil {
				t.Fatal(err)
			}
		}
		u, ret := d.GetUtilizationRates()
		check(t, ret, "GetUtilizationRates")
		if u.Gpu != want {
			t.Fatalf("iteration %d: read GPU utilization %d, want %d (a change was missed)", i, u.Gpu, want)
		}
	}
}
