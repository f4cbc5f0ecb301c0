package conformance_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/gpumux/gpumux/gpu"
)

func TestScratch(t *testing.T) {
	for _, name := range []string{"dgxa100", "dgxh100", "dgxh200"} {
		h, err := gpu.OpenSimulated(name, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		inv, _ := h.Inventory(context.Background())
		for _, g := range inv.GPUs {
			fmt.Println(name, g.Index, g.UUID, g.Minor, g.Model, g.MIGCapable, g.MIGEnabled, len(g.MIGInstances))
			if g.Index == 0 {
				for _, p := range g.MIGProfiles {
					fmt.Printf("   %s slices=%d max=%d mem=%d\n", p.Name, p.Slices, p.MaxCount, p.MemoryMiB)
				}
			}
		}
		h.Close()
	}
}
