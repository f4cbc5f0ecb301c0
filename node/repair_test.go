package node_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/runtime-spec/specs-go"
	bolt "go.etcd.io/bbolt"

	"github.com/gpumux/gpumux/node"
	"github.com/gpumux/gpumux/node/lease"
)

// runcNode is a state directory with a lease store, bundles of containers
// and a fake runc whose `list` reports them, as the real one does
// (runc --root ROOT list --format json).
type runcNode struct {
	stateDir, root, runc string
	list                 []map[string]any
}

func newRuncNode(t *testing.T) *runcNode {
	t.Helper()
	dir := t.TempDir()
	n := &runcNode{stateDir: filepath.Join(dir, "state"), root: filepath.Join(dir, "runc-root"), runc: filepath.Join(dir, "runc")}
	os.MkdirAll(n.root, 0o755)
	// The fake answers only what Repair asks; anything else is a failure.
	script := `#!/bin/sh
[ "$1" = --root ] && [ "$3" = list ] && [ "$4" = --format ] && [ "$5" = json ] || { echo "unexpected: $*" >&2; exit 2; }
cat "$2/list.json"
`
	if err := os.WriteFile(n.runc, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return n
}

// How a container's spec says gpumux-runtime prepared it.
type preparedBy int

const (
	notPrepared       preparedBy = iota
	preparedHook                 // its poststop hook
	preparedAgent                // node.LeasedMarker of its node: the agent watches runc's delete
	preparedElsewhere            // node.LeasedMarker of another node's state directory
	forged                       // what its user can set: the marker's name as an annotation
)

// container adds a container runc knows, with a bundle whose spec has env
// and what prepared says; no env leaves the bundle out (a container whose
// spec cannot be read).
func (n *runcNode) container(t *testing.T, id string, prepared preparedBy, env ...string) {
	t.Helper()
	bundle := filepath.Join(filepath.Dir(n.root), "bundles", id)
	spec := specs.Spec{Version: specs.Version, Process: &specs.Process{Args: []string{"/probe"}, Env: append([]string{"PATH=/bin"}, env...)}}
	switch prepared {
	case preparedHook:
		spec.Hooks = &specs.Hooks{Poststop: []specs.Hook{{Path: "/usr/bin/gpumux-runtime", Args: []string{"gpumux-runtime", "hook", "poststop"}}}}
	case forged:
		spec.Annotations = map[string]string{node.LeasedMarker: n.stateDir, "io.gpumux.leased": n.stateDir}
	}
	if env != nil {
		os.MkdirAll(bundle, 0o755)
		b, _ := json.Marshal(spec)
		if err := os.WriteFile(filepath.Join(bundle, "config.json"), b, 0o600); err != nil {
			t.Fatal(err)
		}
		marker := map[preparedBy]string{preparedAgent: n.stateDir, preparedElsewhere: n.stateDir + "-other"}[prepared]
		if marker != "" {
			if err := os.WriteFile(filepath.Join(bundle, node.LeasedMarker), []byte(marker), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	n.list = append(n.list, map[string]any{"ociVersion": "1.0.2", "id": id, "pid": 1234, "status": "running", "bundle": bundle, "created": "2026-01-01T00:00:00Z", "owner": "root"})
	b, _ := json.Marshal(n.list)
	if err := os.WriteFile(filepath.Join(n.root, "list.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// leases writes leases (share → container) into a new store.
func (n *runcNode) leases(t *testing.T, held map[string]string) string {
	t.Helper()
	path := lease.PathIn(n.stateDir)
	s, err := lease.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	byContainer := map[string][]string{}
	for id, c := range held {
		byContainer[c] = append(byContainer[c], id)
	}
	for _, c := range slices.Sorted(maps.Keys(byContainer)) {
		if _, err := s.Acquire(context.Background(), c, func(map[string]string) ([]string, error) { return byContainer[c], nil }); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

// usedPageOffset is where in the bbolt file at path the root page of its
// largest bucket is (a page every read of the store goes through).
func usedPageOffset(t *testing.T, path string) int64 {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var root, most int
	err = db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(_ []byte, b *bolt.Bucket) error {
			if n := b.Stats().KeyN; n > most && b.Root() != 0 {
				root, most = int(b.Root()), n
			}
			return nil
		})
	})
	if err != nil || root == 0 {
		t.Fatalf("no bucket of its own pages in %s: %v", path, err)
	}
	return int64(root) * int64(db.Info().PageSize)
}

func (n *runcNode) repair(t *testing.T, dryRun bool) *node.RepairReport {
	t.Helper()
	rep, err := node.Repair(context.Background(), n.stateDir, node.RepairOptions{Runc: n.runc, Roots: []string{n.root}, DryRun: dryRun})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// TestRepairRebuildsFromRunc damages a store with leases in the two ways
// seen (emptied; 4 KiB of garbage in the middle) and repairs it: a dry run
// reports and changes nothing; the repair keeps the damaged file, and the
// new store holds exactly the leases of the containers runc still runs
// that gpumux-runtime prepared.
func TestRepairRebuildsFromRunc(t *testing.T) {
	damage := map[string]func(t *testing.T, path string){
		"empty": func(t *testing.T, path string) {
			if err := os.Truncate(path, 0); err != nil {
				t.Fatal(err)
			}
		},
		"4 KiB of garbage in the middle": func(t *testing.T, path string) {
			// On a page the store uses: the middle of the file may be a
			// page it freed, whose garbage nothing reads.
			at := usedPageOffset(t, path)
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt(bytes.Repeat([]byte{0xA5, 0x17, 0xFF, 0x00}, 1024), at); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, damage := range damage {
		t.Run(name, func(t *testing.T) {
			n := newRuncNode(t)
			n.container(t, "web-1", preparedHook, "GPUMUX_SHARES=MIG-aaaa::0,MIG-aaaa::1", "NVIDIA_VISIBLE_DEVICES=MIG-aaaa")
			n.container(t, "train", preparedHook, "GPUMUX_SHARES=GPU-bbbb")
			n.container(t, "infer", preparedAgent, "GPUMUX_SHARES=GPU-eeee/timeslice/1")
			n.container(t, "other-node", preparedElsewhere, "GPUMUX_SHARES=GPU-ffff") // another node's: no lease here
			n.container(t, "forger", forged, "GPUMUX_SHARES=GPU-bbbb")                // asks, names train's share: no lease
			n.container(t, "asks-only", notPrepared, "GPUMUX_SHARES=GPU-cccc")        // not prepared: no lease
			n.container(t, "no-gpu", preparedHook, "PATH=/usr/bin")                   // prepared hooks, no shares
			n.container(t, "bundle-gone", preparedHook)                               // its spec cannot be read
			held := map[string]string{"MIG-aaaa::0": "web-1", "MIG-aaaa::1": "web-1", "GPU-bbbb": "train", "GPU-eeee/timeslice/1": "infer", "GPU-dddd": "exited-long-ago"}
			for i := range 60 { // enough leases for a store of several pages
				held["GPU-filler-"+strings.Repeat("f", 40)+string(rune('A'+i))] = "gone-" + strings.Repeat("g", 50) + string(rune('A'+i))
			}
			path := n.leases(t, held)
			damage(t, path)
			if _, err := lease.ReadIn(context.Background(), n.stateDir); !errors.Is(err, lease.ErrDamaged) {
				t.Fatalf("the damaged store reads: %v", err)
			}
			before, _ := os.ReadFile(path)

			rep := n.repair(t, true)
			if rep.Damage == "" || rep.Rebuilt || rep.Aside != "" {
				t.Errorf("dry run: %+v", rep)
			}
			if after, _ := os.ReadFile(path); !bytes.Equal(after, before) {
				t.Error("the dry run changed the store")
			}
			if m, _ := filepath.Glob(path + ".*"); len(m) > 0 {
				t.Errorf("the dry run left %v", m)
			}

			rep = n.repair(t, false)
			if !rep.Rebuilt || rep.Aside == "" || len(rep.Skipped) > 0 {
				t.Fatalf("repair: %+v", rep)
			}
			if kept, err := os.ReadFile(rep.Aside); err != nil || !bytes.Equal(kept, before) {
				t.Errorf("the damaged file was not kept as %s: %v", rep.Aside, err)
			}
			if len(rep.Unreadable) != 1 || !strings.Contains(rep.Unreadable[0], "bundle-gone") {
				t.Errorf("unreadable: %q, want bundle-gone", rep.Unreadable)
			}
			got, err := lease.ReadIn(context.Background(), n.stateDir)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]string{"MIG-aaaa::0": "web-1", "MIG-aaaa::1": "web-1", "GPU-bbbb": "train", "GPU-eeee/timeslice/1": "infer"}
			if !maps.Equal(got, want) {
				t.Errorf("rebuilt leases %v, want %v", got, want)
			}
			s, err := lease.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			recs, _ := s.Records(context.Background())
			s.Close()
			for _, r := range recs {
				if r.Root != n.root || !strings.HasSuffix(r.Bundle, "/"+r.Container) {
					t.Errorf("record %+v: want runc root %s and its bundle", r, n.root)
				}
			}

			// The store is sound now: a second repair leaves it alone.
			if rep := n.repair(t, false); rep.Damage != "" || rep.Rebuilt {
				t.Errorf("repair of a sound store: %+v", rep)
			}
		})
	}
}

// TestRepairReportsConflicts checks that two containers naming one share
// are reported, and the first one keeps it.
func TestRepairReportsConflicts(t *testing.T) {
	n := newRuncNode(t)
	n.container(t, "a", preparedHook, "GPUMUX_SHARES=GPU-x")
	n.container(t, "b", preparedHook, "GPUMUX_SHARES=GPU-x")
	rep := n.repair(t, false) // there is no store at all: built from runc
	if rep.Damage != "there is no lease store" || len(rep.Skipped) != 1 || !strings.Contains(rep.Skipped[0], "container b") {
		t.Fatalf("repair: %+v", rep)
	}
	got, err := lease.ReadIn(context.Background(), n.stateDir)
	if err != nil || !maps.Equal(got, map[string]string{"GPU-x": "a"}) {
		t.Errorf("leases %v, %v", got, err)
	}
}
