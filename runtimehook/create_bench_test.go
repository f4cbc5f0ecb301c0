package runtimehook

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpumux/gpumux/internal/ociruntime"
	"github.com/gpumux/gpumux/node"
	"github.com/gpumux/gpumux/nodeconfig"
)

// BenchmarkCreateDecision measures what gpumux-runtime-core does for the
// create of a container that asks for a share, as one process does it: read
// the node config file, open the simulated node, build the catalog, lease in
// the lease store (reclaim, choose, acquire), check health, compute the
// edits and rewrite config.json; runc is not run, and the lease is released
// after each iteration. Profile it with
//
//	go test -run '^$' -bench CreateDecision -cpuprofile /tmp/create.prof ./runtimehook/
//	go tool pprof -top -cum /tmp/create.prof
func BenchmarkCreateDecision(b *testing.B) {
	layout := `gpu {
  match     = "0-1"
  mechanism = "timeslice"
  replicas  = 4
  limit     = "off"
}
`
	for _, bc := range []struct {
		name string
		ann  map[string]string
	}{
		{"exclusive", map[string]string{node.AnnotationMechanism: "exclusive"}},
		{"timeslice", map[string]string{node.AnnotationMechanism: "timeslice"}},
		{"auto", map[string]string{node.AnnotationMemory: "16Gi"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			f := newFixture(b, layout, 0)
			path := filepath.Join(filepath.Dir(f.stateDir), "node.hcl")
			body := "simulate = \"dgxh200\"\nstate_dir = \"" + f.stateDir + "\"\n" + layout
			if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
				b.Fatal(err)
			}
			load := func() (*nodeconfig.Config, error) { return loadConfig(path) }
			ctx := context.Background()
			inv := entryCreate(f.bundle, "c1")
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				f.writeSpec(b, bc.ann)
				b.StartTimer()
				r := New(load, WithRunc(f.rt.runc), WithSelf(f.rt.self), WithStderr(&f.stderr))
				if leased, err := r.prepare(ctx, inv); err != nil || !leased {
					b.Fatalf("leased %v: %v", leased, err)
				}
				if _, err := r.store().Release(ctx, "c1"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// entryCreate is the invocation of `runc create --bundle bundle id`.
func entryCreate(bundle, id string) ociruntime.Invocation {
	return ociruntime.ParseInvocation([]string{"--root", "/nonexistent-runc-root", "create", "--bundle", bundle, id})
}
