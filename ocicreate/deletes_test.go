package ocicreate

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gpumux/gpumux/node"
)

// createUnder asks s to prepare container id of a new bundle that asks for
// a time-slice replica, runc's root being root; it returns the bundle.
func (s *server) createUnder(t *testing.T, root, id string) string {
	t.Helper()
	b := bundle(t, map[string]string{node.AnnotationMechanism: "timeslice"})
	if got := s.ask(t, encodeRequest(s.config, "", "/usr/bin/gpumux-runtime", "--root", root, "create", "--bundle", b, id)); got != answerRunc {
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
	if spec := readSpec(t, b); spec.Hooks != nil && len(spec.Hooks.Poststop) > 0 || spec.Annotations[node.AnnotationLeased] != s.state {
		t.Errorf("hooks %+v, annotations %v; want no poststop hook, and the spec marked leased for repair (the server watches runc's root)", spec.Hooks, spec.Annotations)
	}
	for _, d := range []string{"c1", "other"} { // as runc create makes them
		if err := os.Mkdir(filepath.Join(root, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(filepath.Join(root, "other")); err != nil {
		t.Fatal(err)
	}
	s.waitLeases(t, "c1")
	if err := os.Remove(filepath.Join(root, "c1")); err != nil { // runc delete
		t.Fatal(err)
	}
	s.waitLeases(t)

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
	s.waitLeases(t)

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
// the containers of the leases it finds whose state directories exist,
// and gives them back as runc deletes them.
func TestReleaseAtRuncDeleteAfterARestart(t *testing.T) {
	s := newServer(t)
	root := t.TempDir()
	s.createUnder(t, root, "c1")
	s.createUnder(t, root, "c2")
	if err := os.Mkdir(filepath.Join(root, "c1"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	// c2's runc create never made its state: the reclaim's to give back.
	s.serve(t, false)
	if err := os.Remove(filepath.Join(root, "c1")); err != nil {
		t.Fatal(err)
	}
	s.waitLeases(t, "c2")
}

// TestDeletesLostEvents: where events are lost (the queue overflowed) or
// a root goes, each container expected there whose state directory is
// gone is told, and no other.
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
	for _, id := range []string{"kept", "lost"} {
		d.expect(wd, id)
	}
	if err := os.Mkdir(filepath.Join(root, "kept"), 0o700); err != nil {
		t.Fatal(err)
	}
	overflow := make([]byte, unix.SizeofInotifyEvent)
	(*unix.InotifyEvent)(unsafe.Pointer(&overflow[0])).Mask = unix.IN_Q_OVERFLOW
	d.mu.Lock()
	d.handleLocked(overflow)
	d.mu.Unlock()
	if !slices.Equal(gone, []string{"lost"}) {
		t.Fatalf("told of %q after an overflow; want [lost]", gone)
	}

	// The root removed: "kept" goes with it (its own event, and the
	// root's watch ends); the root made again is watched anew.
	gone = nil
	if err := os.RemoveAll(root); err != nil {
		t.Fatal(err)
	}
	d.sync()
	if !slices.Equal(gone, []string{"kept"}) || len(d.want) != 0 || len(d.roots) != 0 || len(d.byRoot) != 0 {
		t.Fatalf("told of %q, still expecting %v, watching %v; want [kept] told and nothing left", gone, d.want, d.roots)
	}
	if err := os.Mkdir(root, 0o700); err != nil {
		t.Fatal(err)
	}
	if again, err := d.watch(root); err != nil || again == wd {
		t.Errorf("watching the root made again: watch %d (%v); want a new one", again, err)
	}
}
