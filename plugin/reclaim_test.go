package plugin_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/gpumux/gpumux/node"
	"github.com/gpumux/gpumux/node/lease"
	"github.com/gpumux/gpumux/node/lease/leasetest"
	"github.com/gpumux/gpumux/plugin"
)

// TestPeriodicReclaim: every fingerprint period the plugin gives back the
// leases of containers runc no longer knows, as gpumux agent does, not
// only at the next create; a container runc still has keeps its lease.
func TestPeriodicReclaim(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	// Removed last, and again while the plugin's loop may still be
	// reclaiming in it: the loop ends after the stream does, not with it.
	stateDir, err := os.MkdirTemp("", "gmx-reclaim")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for end := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if err := os.RemoveAll(stateDir); err == nil || time.Now().After(end) {
				if err != nil {
					t.Errorf("removing %s: %v", stateDir, err)
				}
				return
			}
		}
	})
	// A runc that knows no container: "gone" is asked about and is not
	// there; "running" has runc's state file, which is enough.
	runc := filepath.Join(t.TempDir(), "runc")
	if err := os.WriteFile(runc, []byte("#!/bin/sh\necho \"container does not exist\" >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	leasetest.RuncState(t, root, "running")
	// Both taken by a process that has ended (a running one is spared).
	taker := leasetest.EndedOwner(t)
	st, err := lease.Open(lease.PathIn(stateDir))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"gone", "running"} {
		choose := func(map[string]string) ([]string, error) { return []string{"share-of-" + id}, nil }
		if _, err := st.Acquire(ctx, id, choose, lease.WithRuncRoot(root), taker); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()

	fingerprintWith(t, dialPlugin(t, plugin.WithRunc(runc)), pluginConfig(nodeConfig, stateDir, stubLimiter(t)))
	leases := node.LeasesIn(stateDir)
	for end := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		held, err := leases.Held(ctx, "gone")
		if err != nil {
			t.Fatal(err)
		}
		if len(held) == 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("20s of 1s fingerprint periods later, gone still holds %v", held)
		}
	}
	if held, err := leases.Held(ctx, "running"); err != nil || !slices.Equal(held, []string{"share-of-running"}) {
		t.Fatalf("running holds %v (%v); want its share kept", held, err)
	}
}
