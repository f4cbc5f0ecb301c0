package node

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumux/gpumux/node/lease"
	"github.com/gpumux/gpumux/node/lease/leasetest"
)

// TestRuncAliveReadsTheStateFile: a container with runc's state file under
// its root is alive without running runc; every other case asks runc, whose
// answer stands.
func TestRuncAliveReadsTheStateFile(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	calls := filepath.Join(dir, "calls")
	runc := filepath.Join(dir, "runc")
	// The fake runc knows only container "known"; it logs every call.
	script := "#!/bin/sh\necho \"$@\" >> " + calls + "\n" +
		"for a; do id=$a; done\n" +
		"[ \"$id\" = known ] && exit 0\n" +
		"echo \"container does not exist\" >&2; exit 1\n"
	if err := os.WriteFile(runc, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "half-made"), 0o755); err != nil {
		t.Fatal(err)
	}
	leasetest.RuncState(t, root, "running")
	for _, tc := range []struct {
		name      string
		rec       lease.Record
		root      string // RuncAlive's default root
		want      bool
		wantCalls string // runc's arguments, "" when it must not run
	}{
		{"a state file", lease.Record{Container: "running", Root: root}, "", true, ""},
		{"a state file under the default root", lease.Record{Container: "running"}, root, true, ""},
		{"a directory without a state file", lease.Record{Container: "half-made", Root: root}, "", false, "--root " + root + " state half-made"},
		{"gone", lease.Record{Container: "gone", Root: root}, "", false, "--root " + root + " state gone"},
		{"no root: runc's own", lease.Record{Container: "known"}, "", true, "state known"},
		{"an ID runc refuses", lease.Record{Container: "../root/running", Root: root}, "", false, "--root " + root + " state ../root/running"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.Remove(calls)
			got, err := RuncAlive(context.Background(), runc, tc.root)(tc.rec)
			if err != nil || got != tc.want {
				t.Errorf("alive = %v, %v; want %v", got, err, tc.want)
			}
			b, _ := os.ReadFile(calls)
			if strings.TrimSpace(string(b)) != tc.wantCalls {
				t.Errorf("runc was called with %q, want %q", b, tc.wantCalls)
			}
		})
	}
}

// BenchmarkRuncAlive is the cost of one lease's check in Reclaim, which
// every create pays for each other container holding a lease: a state file
// read, against a `runc state` (the real runc, of a container it does not
// know).
func BenchmarkRuncAlive(b *testing.B) {
	runc, err := exec.LookPath("runc")
	if err != nil {
		b.Skip(err)
	}
	root := b.TempDir()
	leasetest.RuncState(b, root, "running")
	alive := RuncAlive(context.Background(), runc, root)
	for _, bc := range []struct {
		name, id string
		want     bool
	}{{"state file", "running", true}, {"runc state", "gone", false}} {
		b.Run(bc.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if got, err := alive(lease.Record{Container: bc.id}); err != nil || got != bc.want {
					b.Fatalf("alive = %v, %v", got, err)
				}
			}
		})
	}
}
