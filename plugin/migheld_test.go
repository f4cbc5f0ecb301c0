package plugin_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/gpumux/gpumux/node/lease"
)

// TestMIGApplyAtStartKeepsHeldInstances: a layout in the plugin config that
// would destroy an instance a gpumux-runtime container holds is refused
// for that GPU at start (it keeps its instances in service); other GPUs
// take the layout.
func TestMIGApplyAtStartKeepsHeldInstances(t *testing.T) {
	stateDir := t.TempDir()
	_, groups, cancel, _ := startPlugin(t, stateDir)
	cancel()
	held := groupsByName(groups)["H200-mig-2g.35gb"].Devices[0].ID

	st, err := lease.Open(lease.PathIn(stateDir))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Acquire(context.Background(), "c1", func(map[string]string) ([]string, error) {
		return []string{held}, nil
	}); err != nil {
		t.Fatal(err)
	}
	st.Close()

	cfg := strings.Replace(nodeConfig, `    "3g.71gb" = 1
    "2g.35gb" = 2`, `    "1g.18gb" = 7`, 1)
	_, groups, _ = fingerprintWith(t, dialPlugin(t), pluginConfig(cfg, stateDir, stubLimiter(t)))
	byName := groupsByName(groups)
	var ids []string
	if g := byName["H200-mig-2g.35gb"]; g != nil {
		for _, d := range g.Devices {
			ids = append(ids, d.ID)
		}
	}
	if !slices.Contains(ids, held) {
		t.Fatalf("the held 2g.35gb %s is gone: 2g.35gb now %v", held, ids)
	}
	if g := byName["H200-mig-1g.18gb"]; g == nil || len(g.Devices) != 7 {
		t.Fatalf("the GPU nobody holds should carry 7× 1g.18gb: %v", names(groups))
	}
}
