package leasetest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/gpumux/gpumux/node/lease"
)

// EndedOwner returns what records a process that has run and ended as a
// lease's owner (a lease the reclaim no longer spares for its taker). It
// fails tb where /proc cannot describe the process.
func EndedOwner(tb testing.TB) lease.AcquireOption {
	tb.Helper()
	p := exec.Command("true")
	if err := p.Start(); err != nil {
		tb.Fatal(err)
	}
	var r lease.Record
	lease.WithOwner(p.Process.Pid)(&r) // read before it is reaped
	if err := p.Wait(); err != nil || r.Owner == nil {
		tb.Fatalf("the ended owner: %v, owner %v", err, r.Owner)
	}
	return func(rec *lease.Record) { rec.Owner = r.Owner }
}

// RuncState makes runc's state file of container id under runc root root
// (ROOT/ID/state.json), as runc keeps it for a container it has.
func RuncState(tb testing.TB, root, id string) {
	tb.Helper()
	if err := os.MkdirAll(filepath.Join(root, id), 0o700); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, id, "state.json"), []byte("{}"), 0o600); err != nil {
		tb.Fatal(err)
	}
}
