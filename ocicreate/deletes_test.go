package ocicreate

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gpumux/gpumux/node"
	"github.com/gpumux/gpumux/node/lease"
	"github.com/gpumux/gpumux/node/lease/leasetest"
)

// createUnder asks s to prepare container id of a new bundle that asks for
// a time-slice replica (or mechanism[0]), runc's root being root, from a
// process that exits then, as runc create does; it returns the bundle.
func (s *server) createUnder(t *testing.T, root, id string, mechanism ...string) string {
	t.Helper()
	b := bundle(t, map[string]string{node.AnnotationMechanism: append(mechanism, "timeslice")[0]})
	if got, _ := s.askFromAnotherProcess(t, encodeRequest(s.config, "", "/usr/bin/gpumux-runtime", "--root", root, "create", "--bundle", b, id)); got != answerRunc {
		t.Fatalf("create %s: answer %q", id, got)
	}
	return b
}

// waitLeases waits until s's leases are of the containers named, and
// fails the test if they are not within a while.
func (s *server) waitLeases(t *testing.T, containers ...string) {
	t.Helper()
	var got []string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		got = got[:0]
		for _, r := range s.records(t) {
			got = append(got, r.Container)
		}
		slices.Sort(got)
		if slices.Equal(got, containers) {
			return
		}
	}
	t.Fatalf("leases of %q; want %q", got, containers)
}

// TestReleaseAtRuncDelete: a create the server prepares under a runc root
// it can watch has no poststop hook; its shares go back when runc removes
// the container's state directory (its delete), and no other directory's
// removal touches them. A root that does not exist yet is made and
// watched; with runc's default root (no --root: which runc it is, the
// agent cannot tell) the hook stays.
func TestReleaseAtRuncDelete(t *testing.T) {
	s := newServer(t)
	root := t.TempDir()
	b := s.createUnder(t, root, "c1")
	if spec := readSpec(t, b); spec.Hooks != nil && len(spec.Hooks.Poststop) > 0 || !node.LeasedBy(b, s.state) {
		t.Errorf("hooks %+v, marked %v; want no poststop hook, and the bundle marked leased for repair (the server watches runc's root)", spec.Hooks, node.LeasedBy(b, s.state))
	}
	for _, d := range []string{"c1", "other"} { // as runc create makes them
		if err := os.Mkdir(filepath.Join(root, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(filepath.Join(root, "other")); err != nil {
		t.Fatal(err)
	}
	s.createUnder(t, root, "c0") // its create reads the events queued
	s.waitLeases(t, "c0", "c1")
	if err := os.Remove(filepath.Join(root, "c1")); err != nil { // runc delete
		t.Fatal(err)
	}
	s.waitLeases(t, "c0")
	// c0's runc create never made its state directory: its lease is the
	// reclaim's, not gone with a delete never seen.
	b0 := bundle(t, nil)
	if got := s.ask(t, encodeRequest(s.config, "", "/usr/bin/gpumux-runtime", "--root", root, "create", "--bundle", b0, "x")); got != answerRunc {
		t.Fatalf("create x: answer %q", got)
	}
	s.waitLeases(t, "c0")

	notYet := filepath.Join(root, "not", "yet")
	b = s.createUnder(t, notYet, "c2")
	if spec := readSpec(t, b); spec.Hooks != nil && len(spec.Hooks.Poststop) > 0 {
		t.Errorf("poststop hooks %+v; want none (runc's root made and watched)", spec.Hooks.Poststop)
	}
	if fi, err := os.Stat(notYet); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("runc's root: %v (%v); want a directory made 0700, as runc makes it", fi, err)
	}
	if err := os.Mkdir(filepath.Join(notYet, "c2"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(notYet, "c2")); err != nil {
		t.Fatal(err)
	}
	s.waitLeases(t, "c0")

	b = bundle(t, map[string]string{node.AnnotationMechanism: "timeslice"})
	if got := s.ask(t, encodeRequest(s.config, "", "/usr/bin/gpumux-runtime", "create", "--bundle", b, "c3")); got != answerRunc {
		t.Fatalf("create c3: answer %q", got)
	}
	if spec := readSpec(t, b); spec.Hooks == nil || len(spec.Hooks.Poststop) != 1 {
		t.Errorf("hooks %+v; want the poststop hook (runc's default root)", spec.Hooks)
	}
}

// TestCreateAfterRuncDeleteOfTheSameID: a create of a container ID whose
// delete the server has not acted on yet (Docker's restart reuses the ID)
// acts on it first, so the old container's release neither refuses the
// new lease nor gives it back. The watching is held back here until
// after the second create: what the kernel queued is read by the create.
func TestCreateAfterRuncDeleteOfTheSameID(t *testing.T) {
	hold := make(chan struct{})
	s := newServerMatching(t, timesliceNode, false, func(s *Server) { s.holdDeletes = hold })
	root := t.TempDir()
	s.createUnder(t, root, "c1")
	dir := filepath.Join(root, "c1")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	second := s.createUnder(t, root, "c1")
	close(hold)
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	if recs := s.records(t); len(recs) != 1 || recs[0].Bundle != second {
		t.Errorf("leases after the second create: %+v; want the new c1's (bundle %s)", recs, second)
	}
}

// TestReleaseAtRuncDeleteAfterARestart: an agent started again watches
// the containers of the leases it finds that it prepared without a
// poststop hook (their bundles marked) and whose state runc still has,
// and gives them back as runc deletes them; one with a hook (here: its
// mark gone) is left to its hook.
func TestReleaseAtRuncDeleteAfterARestart(t *testing.T) {
	s := newServer(t)
	root := t.TempDir()
	s.createUnder(t, root, "c1")
	s.createUnder(t, root, "c2")
	hooked := s.createUnder(t, root, "c3", "exclusive")
	if err := os.Remove(filepath.Join(hooked, node.LeasedMarker)); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"c1", "c3"} { // runc's state of each
		leasetest.RuncState(t, root, id)
	}
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	// c2's runc create never made its state: the reclaim's to give back.
	s.serve(t, false)
	for _, id := range []string{"c1", "c3"} {
		if err := os.RemoveAll(filepath.Join(root, id)); err != nil {
			t.Fatal(err)
		}
	}
	s.createUnder(t, root, "c4", "exclusive") // reads the events queued
	s.waitLeases(t, "c2", "c3", "c4")
}

// event is an inotify event of watch wd with mask and no name.
func event(wd int32, mask uint32) []byte {
	b := make([]byte, unix.SizeofInotifyEvent)
	ev := (*unix.InotifyEvent)(unsafe.Pointer(&b[0]))
	ev.Wd, ev.Mask = wd, mask
	return b
}

// TestDeletesLostEvents: where events are lost (the queue overflowed) or
// a root's watch ends, each container expected there whose state
// directory was seen and is gone is told, and no other: not one runc has
// not made yet, nor one still there.
func TestDeletesLostEvents(t *testing.T) {
	var gone []string
	d, err := newDeletes(func(id string) { gone = append(gone, id) })
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	root := t.TempDir()
	wd, err := d.watch(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"kept", "lost", "not-yet"} {
		d.expect(wd, id, false)
	}
	for _, id := range []string{"kept", "lost"} { // runc create
		if err := os.Mkdir(filepath.Join(root, id), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	d.sync() // their IN_CREATE: seen
	if err := os.Remove(filepath.Join(root, "lost")); err != nil {
		t.Fatal(err)
	}
	d.mu.Lock()
	if n, err := unix.Read(d.fd, d.buf); n <= 0 || err != nil { // the delete's event, lost in an overflow
		t.Fatalf("reading the delete's event: %d, %v", n, err)
	}
	d.handleLocked(event(0, unix.IN_Q_OVERFLOW))
	d.mu.Unlock()
	if !slices.Equal(gone, []string{"lost"}) {
		t.Fatalf("told of %q after an overflow; want [lost]", gone)
	}

	// The root's watch ends (an unmount): "kept" is still there, and
	// left to the reclaim; "not-yet" too.
	gone = nil
	d.mu.Lock()
	d.handleLocked(event(wd, unix.IN_IGNORED))
	d.mu.Unlock()
	if len(gone) != 0 || len(d.want) != 0 || len(d.roots) != 0 || len(d.byRoot) != 0 {
		t.Fatalf("told of %q, still expecting %v, watching %v; want nothing told and nothing left", gone, d.want, d.roots)
	}
	// The same path watched again is a new watch once it is another
	// directory.
	again, err := d.watch(root)
	if err != nil {
		t.Fatal(err)
	}
	other := root + ".moved"
	if err := os.Rename(root, other); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(root, 0o700); err != nil {
		t.Fatal(err)
	}
	if third, err := d.watch(root); err != nil || third == again {
		t.Errorf("watching the root made again: watch %d (%v); want a new one", third, err)
	}
	os.RemoveAll(other)
}

// TestRuncDeleteSeenLateKeepsTheNextLease: a release after runc's delete
// that comes late (a delete seen twice: two servers, a restart) leaves
// the lease of the ID's next container, whether runc has made it (its
// state directory there) or its create is still under way (the asking
// process running).
func TestRuncDeleteSeenLateKeepsTheNextLease(t *testing.T) {
	s := newServer(t)
	root := t.TempDir()
	late := func() []string {
		t.Helper()
		ids, err := node.LeasesIn(s.state).Reclaim(context.Background(), deletedByRunc("c1"))
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	s.createUnder(t, root, "c1") // its runc create made its state: the next container's
	if err := os.Mkdir(filepath.Join(root, "c1"), 0o700); err != nil {
		t.Fatal(err)
	}
	if got := late(); len(got) != 0 {
		t.Errorf("a late release gave back %q of a container runc has", got)
	}
	if err := os.Remove(filepath.Join(root, "c1")); err != nil {
		t.Fatal(err)
	}
	s.waitLeases(t)
	// Asked from this process, which keeps running: a create under way.
	b := bundle(t, map[string]string{node.AnnotationMechanism: "timeslice"})
	if got := s.ask(t, encodeRequest(s.config, "", "/usr/bin/gpumux-runtime", "--root", root, "create", "--bundle", b, "c1")); got != answerRunc {
		t.Fatalf("create: %q", got)
	}
	if got := late(); len(got) != 0 {
		t.Errorf("a late release gave back %q of a create under way", got)
	}
	s.waitLeases(t, "c1")
}

// TestReclaimTrustsWatchedContainers: a create's reclaim asks nothing of
// runc about a container the server watches and saw runc make; one it
// does not watch is asked about as before.
func TestReclaimTrustsWatchedContainers(t *testing.T) {
	var mu sync.Mutex
	asked := map[string]int{}
	s := newServerMatching(t, timesliceNode, false, func(s *Server) {
		inner := s.alive
		s.alive = func(r lease.Record) (bool, error) {
			mu.Lock()
			asked[r.Container]++
			mu.Unlock()
			return inner(r)
		}
	})
	root := t.TempDir()
	s.createUnder(t, root, "watched")
	if err := os.Mkdir(filepath.Join(root, "watched"), 0o700); err != nil {
		t.Fatal(err)
	}
	b := bundle(t, map[string]string{node.AnnotationMechanism: "exclusive"})
	if got, _ := s.askFromAnotherProcess(t, encodeRequest(s.config, "", "/usr/bin/gpumux-runtime", "create", "--bundle", b, "unwatched")); got != answerRunc {
		t.Fatalf("create unwatched: %q", got)
	}
	s.createUnder(t, root, "third", "exclusive")
	mu.Lock()
	defer mu.Unlock()
	if asked["watched"] != 0 || asked["unwatched"] == 0 {
		t.Errorf("runc asked about %v; want never about the watched container, at least once about the unwatched one", asked)
	}
}
