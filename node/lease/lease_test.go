package lease

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/gpumux/gpumux/share"
)

var ctx = context.Background()

func open(t *testing.T, path string, opts ...Option) *Store {
	t.Helper()
	s, err := Open(path, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// pick returns a choose function that takes the first n free shares of pool.
func pick(pool []string, n int) func(map[string]string) ([]string, error) {
	return func(leased map[string]string) ([]string, error) {
		var out []string
		for _, id := range pool {
			if leased[id] == "" {
				out = append(out, id)
				if len(out) == n {
					return out, nil
				}
			}
		}
		return nil, fmt.Errorf("%w: %d free of %d", share.ErrNoFit, len(out), n)
	}
}

func fixed(ids ...string) func(map[string]string) ([]string, error) {
	return func(map[string]string) ([]string, error) { return ids, nil }
}

func poolOf(n int) []string {
	p := make([]string, n)
	for i := range p {
		p[i] = fmt.Sprintf("GPU-%02d", i)
	}
	return p
}

func wantLeases(t *testing.T, s *Store, want map[string]string) {
	t.Helper()
	got, err := s.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("leases %v, want %v", got, want)
	}
}

func TestAcquireRelease(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "state", "leases.db"))
	pool := poolOf(4)
	before := time.Now().UTC()
	got, err := s.Acquire(ctx, "c1", pick(pool, 2), WithBundle("/run/c1"))
	if err != nil || strings.Join(got, ",") != "GPU-00,GPU-01" {
		t.Fatalf("Acquire = %v, %v", got, err)
	}
	var seen map[string]string
	if _, err := s.Acquire(ctx, "c2", func(leased map[string]string) ([]string, error) {
		seen = leased
		leased["GPU-03"] = "scribbled" // a copy: changes nothing
		return []string{"GPU-03"}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(seen) != "map[GPU-00:c1 GPU-01:c1 GPU-03:scribbled]" {
		t.Errorf("choose saw %v", seen)
	}
	wantLeases(t, s, map[string]string{"GPU-00": "c1", "GPU-01": "c1", "GPU-03": "c2"})

	recs, err := s.Records(ctx)
	if err != nil || len(recs) != 2 {
		t.Fatalf("Records = %+v, %v", recs, err)
	}
	r := recs[0]
	if r.Version != RecordVersion || r.Container != "c1" || strings.Join(r.Shares, ",") != "GPU-00,GPU-01" || r.Bundle != "/run/c1" ||
		r.Acquired.Before(before.Add(-time.Second)) || r.Acquired.After(time.Now().Add(time.Second)) || r.Seq == 0 || r.Seq == recs[1].Seq {
		t.Errorf("record %+v", r)
	}
	if r.Owner == nil || r.Owner.PID != os.Getpid() || r.Owner.Start == 0 || r.Owner.BootID == "" || r.Owner.PIDNamespace == "" {
		t.Errorf("owner %+v", r.Owner)
	}

	// A container holding leases gets an error, and choose is not called.
	_, err = s.Acquire(ctx, "c1", func(map[string]string) ([]string, error) { t.Error("choose called"); return nil, nil })
	if !errors.Is(err, ErrAlreadyLeased) || err.Error() != "container already holds leases: c1 holds GPU-00, GPU-01" {
		t.Errorf("second Acquire: %v", err)
	}
	// choose's error comes back as it is; nothing is written.
	_, err = s.Acquire(ctx, "c3", pick(pool, 2))
	if !errors.Is(err, share.ErrNoFit) || err.Error() != "no share fits: 1 free of 2" {
		t.Errorf("exhausted: %v", err)
	}
	for _, tt := range []struct {
		container string
		choose    func(map[string]string) ([]string, error)
		want      string
	}{
		{"c3", fixed(), "lease for c3: no shares chosen"},
		{"c3", fixed("GPU-02", ""), "lease for c3: an empty share ID was chosen"},
		{"c3", fixed("GPU-02", "GPU-02"), "lease for c3: share GPU-02 was chosen twice"},
		{"c3", fixed("GPU-02", "GPU-03"), "lease for c3: share GPU-03 was chosen, but c2 holds it"},
		{"", fixed("GPU-02"), "lease: empty container ID"},
		{strings.Repeat("c", MaxContainerID+1), fixed("GPU-02"), "lease: container ID of 1025 bytes; at most 1024"},
	} {
		if _, err := s.Acquire(ctx, tt.container, tt.choose); err == nil || err.Error() != tt.want {
			t.Errorf("Acquire(%.10s…) = %v, want %s", tt.container, err, tt.want)
		}
	}
	wantLeases(t, s, map[string]string{"GPU-00": "c1", "GPU-01": "c1", "GPU-03": "c2"})

	// Release is idempotent.
	for i, want := range []string{"GPU-00,GPU-01", ""} {
		got, err := s.Release(ctx, "c1")
		if err != nil || strings.Join(got, ",") != want {
			t.Errorf("Release %d = %v, %v; want %s", i, got, err, want)
		}
	}
	if got, err := s.Release(ctx, "never"); err != nil || len(got) != 0 {
		t.Errorf("Release(never) = %v, %v", got, err)
	}
	wantLeases(t, s, map[string]string{"GPU-03": "c2"})
	if got, err := s.Acquire(ctx, "c1", pick(pool, 3)); err != nil || strings.Join(got, ",") != "GPU-00,GPU-01,GPU-02" {
		t.Errorf("Acquire after Release = %v, %v", got, err)
	}

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Leases(cancelled); !errors.Is(err, context.Canceled) {
		t.Errorf("Leases with a cancelled context: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := s.Leases(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("Leases after Close: %v", err)
	}
}

func TestPersistsAndSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leases.db")
	s := open(t, path)
	if _, err := s.Acquire(ctx, "c1", fixed("GPU-00")); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = open(t, path)
	wantLeases(t, s, map[string]string{"GPU-00": "c1"})
	s.Close()

	for _, tt := range []struct{ schema, want string }{
		{"2", "schema 2 was written by a newer gpumux; this one knows schema 1 and leaves it alone"},
		{"x", `schema "x" is not a version: not a gpumux lease store?`},
	} {
		setSchema(t, path, tt.schema)
		if _, err := Open(path); err == nil || err.Error() != "lease store "+path+": "+tt.want {
			t.Errorf("schema %s: %v", tt.schema, err)
		}
	}
	setSchema(t, path, "1")
	s = open(t, path)
	wantLeases(t, s, map[string]string{"GPU-00": "c1"})
}

// Opening a store that is ready writes nothing (its check is a read: an
// empty commit costs two fdatasyncs on every create), and a store that
// lacks a bucket (an older layout) gets it.
func TestOpenWritesOnlyWhatIsMissing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leases.db")
	open(t, path).Close()
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	open(t, path).Close()
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Error("opening a ready store changed its file")
	}

	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket(bucketReservations) }); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s := open(t, path)
	if err := s.Reserve(ctx, "token-0123456789abcdef", []string{"GPU-00"}, time.Minute); err != nil {
		t.Errorf("a store opened without its reservations bucket: %v", err)
	}
}

func setSchema(t *testing.T, path, v string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keySchema, []byte(v)) }); err != nil {
		t.Fatal(err)
	}
}

// Records are read leniently: a later version with more fields, or a record
// that cannot be read at all, still tells which container holds what.
func TestLenientRecords(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "leases.db"))
	err := s.db.Update(func(tx *bolt.Tx) error {
		sh, cs := tx.Bucket(bucketShares), tx.Bucket(bucketContainers)
		sh.Put([]byte("GPU-00"), []byte("future"))
		sh.Put([]byte("GPU-01"), []byte("broken"))
		sh.Put([]byte("GPU-02"), []byte("norecord"))
		cs.Put([]byte("future"), []byte(`{"v":7,"container":"future","shares":["GPU-00"],"bundle":"/b","seq":9,"acquired":"2025-01-02T03:04:05Z","cgroup":"/x","owner":{"pid":1,"start":2,"boot_id":"b","pid_namespace":"pid:[1]","uid":0}}`))
		cs.Put([]byte("broken"), []byte(`{"v":1,`))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := s.Records(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(recs)
	want := `[{"v":0,"container":"broken","shares":["GPU-01"],"acquired":"0001-01-01T00:00:00Z","seq":0},` +
		`{"v":7,"container":"future","shares":["GPU-00"],"acquired":"2025-01-02T03:04:05Z","bundle":"/b","seq":9,"owner":{"pid":1,"start":2,"boot_id":"b","pid_namespace":"pid:[1]"}},` +
		`{"v":0,"container":"norecord","shares":["GPU-02"],"acquired":"0001-01-01T00:00:00Z","seq":0}]`
	if string(b) != want {
		t.Errorf("records\n got %s\nwant %s", b, want)
	}
	for _, c := range []string{"broken", "future", "norecord"} {
		if _, err := s.Release(ctx, c); err != nil {
			t.Error(err)
		}
	}
	wantLeases(t, s, map[string]string{})
}

func TestReclaim(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "leases.db"), WithReclaimGrace(time.Minute))
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	s.now = func() time.Time { return now }
	// Owners by PID: 1 runs, 2 is gone, 3 cannot be checked.
	s.running = func(o *Owner) (bool, bool) {
		if o == nil {
			return false, false
		}
		return o.PID == 1, o.PID != 3
	}
	acquire := func(c string, pid int, age time.Duration, ids ...string) {
		t.Helper()
		s.self = &Owner{PID: pid}
		s.now = func() time.Time { return now.Add(-age) }
		if _, err := s.Acquire(ctx, c, fixed(ids...)); err != nil {
			t.Fatal(err)
		}
		s.now = func() time.Time { return now }
	}
	acquire("running-owner", 1, time.Hour, "GPU-00")
	acquire("gone-dead", 2, time.Hour, "GPU-01", "GPU-02")
	acquire("gone-alive", 2, time.Hour, "GPU-03")
	acquire("unknown-fresh", 3, 30*time.Second, "GPU-04")
	acquire("unknown-old-dead", 3, 2*time.Minute, "GPU-05")
	acquire("check-fails", 2, time.Hour, "GPU-06")
	acquire("gone-dead-2", 2, 0, "GPU-07")

	var asked []string
	released, err := s.Reclaim(ctx, func(r Record) (bool, error) {
		c := r.Container
		asked = append(asked, c)
		switch c {
		case "gone-alive":
			return true, nil
		case "check-fails":
			return false, errors.New("runc state: permission denied")
		}
		return false, nil
	})
	if err == nil || err.Error() != "container check-fails: runc state: permission denied" {
		t.Errorf("Reclaim error %v", err)
	}
	if strings.Join(released, ",") != "GPU-01,GPU-02,GPU-05,GPU-07" {
		t.Errorf("released %v", released)
	}
	if strings.Join(asked, ",") != "check-fails,gone-alive,gone-dead,gone-dead-2,unknown-old-dead" {
		t.Errorf("alive asked about %v", asked)
	}
	wantLeases(t, s, map[string]string{"GPU-00": "running-owner", "GPU-03": "gone-alive", "GPU-04": "unknown-fresh", "GPU-06": "check-fails"})

	// A container released and leased again while alive was asked about it
	// keeps its new lease.
	released, err = s.Reclaim(ctx, func(r Record) (bool, error) {
		c := r.Container
		if c == "gone-alive" {
			if _, err := s.Release(ctx, c); err != nil {
				return false, err
			}
			s.self = &Owner{PID: 2}
			if _, err := s.Acquire(ctx, c, fixed("GPU-09")); err != nil {
				return false, err
			}
		}
		return c != "gone-alive", nil // gone, but it was leased again
	})
	if err != nil || len(released) != 0 {
		t.Errorf("Reclaim = %v, %v", released, err)
	}
	wantLeases(t, s, map[string]string{"GPU-00": "running-owner", "GPU-04": "unknown-fresh", "GPU-06": "check-fails", "GPU-09": "gone-alive"})

	if released, err := s.Reclaim(ctx, func(Record) (bool, error) { return true, nil }); err != nil || len(released) != 0 {
		t.Errorf("Reclaim with all alive = %v, %v", released, err)
	}
}

func TestProcessRunning(t *testing.T) {
	self := selfOwner()
	if self == nil {
		t.Skip("no /proc")
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	gone := *self
	gone.PID = cmd.Process.Pid
	reused := *self
	reused.Start++
	rebooted := *self
	rebooted.BootID = "other"
	otherNS := *self
	otherNS.PIDNamespace = "pid:[1]"
	for _, tt := range []struct {
		name           string
		o              *Owner
		running, known bool
	}{
		{"self", self, true, true},
		{"exited", &gone, false, true},
		{"pid reused", &reused, false, true},
		{"rebooted", &rebooted, false, true},
		{"other pid namespace", &otherNS, false, false},
		{"no owner", nil, false, false},
	} {
		for range 2 { // the second time an ended owner is remembered
			if r, k := processRunning(tt.o); r != tt.running || k != tt.known {
				t.Errorf("%s: running %v known %v, want %v %v", tt.name, r, k, tt.running, tt.known)
			}
		}
	}
	if !endedBefore(gone) || !endedBefore(reused) || endedBefore(*self) {
		t.Errorf("remembered as ended: exited %v, pid reused %v, self %v; want the first two only", endedBefore(gone), endedBefore(reused), endedBefore(*self))
	}
	if o := ownerOf(os.Getpid()); o == nil || *o != *self {
		t.Errorf("ownerOf(self) = %+v, want %+v", o, self)
	}
}

func TestOpenWaitsForTheLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leases.db")
	s := open(t, path)
	start := time.Now()
	_, err := Open(path, WithTimeout(200*time.Millisecond))
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), path+" still held after 200ms") {
		t.Errorf("Open while held: %v", err)
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Errorf("gave up after %s", d)
	}
	done := make(chan error)
	go func() {
		s2, err := Open(path, WithTimeout(5*time.Second))
		if err == nil {
			s2.Close()
		}
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	s.Close()
	if err := <-done; err != nil {
		t.Errorf("Open after Close: %v", err)
	}
}

// TestGoroutinesShareOneStore: many goroutines acquire from a pool through
// one Store; each share is leased once, the rest fail with the choose error.
func TestGoroutinesShareOneStore(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "leases.db"))
	pool := poolOf(20)
	var mu sync.Mutex
	got := map[string]string{}
	var wg sync.WaitGroup
	for g := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := fmt.Sprintf("c%d", g)
			ids, err := s.Acquire(ctx, c, pick(pool, 1))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				if prev, dup := got[ids[0]]; dup {
					t.Errorf("%s leased to %s and %s", ids[0], prev, c)
				}
				got[ids[0]] = c
			case !errors.Is(err, share.ErrNoFit):
				t.Errorf("%s: %v", c, err)
			}
		}()
	}
	wg.Wait()
	if len(got) != len(pool) {
		t.Errorf("%d leases from a pool of %d", len(got), len(pool))
	}
	wantLeases(t, s, got)
}

// TestConcurrentProcesses: this process and two others (this test binary,
// run again) race for a pool of shares, each from several goroutines that
// open the store for every acquisition, as runtime processes do. No share is
// leased twice; exactly the pool is leased; every other attempt fails with
// the choose function's ErrNoFit.
func TestConcurrentProcesses(t *testing.T) {
	const (
		poolSize   = 20
		goroutines = 6
		rounds     = 3
	)
	if dir := os.Getenv("LEASE_CHILD_DIR"); dir != "" {
		name := os.Getenv("LEASE_CHILD_NAME")
		os.WriteFile(filepath.Join(dir, name+".ready"), nil, 0o644)
		for i := 0; ; i++ {
			if _, err := os.Stat(filepath.Join(dir, "go")); err == nil {
				break
			}
			if i > 2000 {
				t.Fatal("never told to go")
			}
			time.Sleep(5 * time.Millisecond)
		}
		lines := race(filepath.Join(dir, "leases.db"), name, poolOf(poolSize), goroutines, rounds)
		if err := os.WriteFile(filepath.Join(dir, name+".out"), []byte(strings.Join(lines, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	dir := t.TempDir()
	var cmds []*exec.Cmd
	for _, name := range []string{"p1", "p2"} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestConcurrentProcesses$")
		cmd.Env = append(os.Environ(), "LEASE_CHILD_DIR="+dir, "LEASE_CHILD_NAME="+name)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	for _, name := range []string{"p1", "p2"} {
		for i := 0; ; i++ {
			if _, err := os.Stat(filepath.Join(dir, name+".ready")); err == nil {
				break
			}
			if i > 2000 {
				t.Fatalf("child %s not ready", name)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	os.WriteFile(filepath.Join(dir, "go"), nil, 0o644)
	lines := race(filepath.Join(dir, "leases.db"), "p0", poolOf(poolSize), goroutines, rounds)
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("child %d: %v", i+1, err)
		}
	}
	for _, name := range []string{"p1", "p2"} {
		b, err := os.ReadFile(filepath.Join(dir, name+".out"))
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, strings.Split(string(b), "\n")...)
	}

	leased := map[string]string{}
	perProcess := map[string]int{}
	failures := 0
	for _, l := range lines {
		c, result, _ := strings.Cut(l, " ")
		switch {
		case strings.HasPrefix(result, "GPU-"):
			if prev, dup := leased[result]; dup {
				t.Errorf("%s leased to %s and %s", result, prev, c)
			}
			leased[result] = c
			perProcess[strings.SplitN(c, "-", 2)[0]]++
		case result == "nofit":
			failures++
		default:
			t.Errorf("%s", l)
		}
	}
	if attempts := 3 * goroutines * rounds; len(leased) != poolSize || failures != attempts-poolSize {
		t.Errorf("%d leased and %d refused of %d attempts, want %d and %d", len(leased), failures, attempts, poolSize, attempts-poolSize)
	}
	t.Logf("shares leased per process: %v", perProcess)
	s := open(t, filepath.Join(dir, "leases.db"))
	wantLeases(t, s, leased)
}

// race runs goroutines that each acquire one share rounds times, opening the
// store each time, and returns "<container> <share>" or "<container> nofit"
// lines (or the error).
func race(path, proc string, pool []string, goroutines, rounds int) []string {
	var mu sync.Mutex
	var lines []string
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				c := fmt.Sprintf("%s-g%d-r%d", proc, g, r)
				line := acquireOnce(path, c, pool)
				mu.Lock()
				lines = append(lines, c+" "+line)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return lines
}

func acquireOnce(path, c string, pool []string) string {
	s, err := Open(path, WithTimeout(time.Minute))
	if err != nil {
		return "open: " + err.Error()
	}
	defer s.Close()
	ids, err := s.Acquire(ctx, c, pick(pool, 1))
	switch {
	case errors.Is(err, share.ErrNoFit):
		return "nofit"
	case err != nil:
		return "acquire: " + err.Error()
	}
	return ids[0]
}

// TestKilledRuntime: a process that took a lease and is killed (holding the
// store open, even) loses nothing: its lock goes with it, and Reclaim gives
// its lease back once runc does not know its container.
func TestKilledRuntime(t *testing.T) {
	if dir := os.Getenv("LEASE_HOLD_DIR"); dir != "" {
		s, err := Open(filepath.Join(dir, "leases.db"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Acquire(ctx, "doomed", fixed("GPU-00", "GPU-01")); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, "ready"), nil, 0o644)
		time.Sleep(time.Minute) // killed long before
		return
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "leases.db")
	s := open(t, path)
	if _, err := s.Acquire(ctx, "survivor", fixed("GPU-02")); err != nil {
		t.Fatal(err)
	}
	s.Close()

	cmd := exec.Command(os.Args[0], "-test.run=^TestKilledRuntime$")
	cmd.Env = append(os.Environ(), "LEASE_HOLD_DIR="+dir)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if _, err := os.Stat(filepath.Join(dir, "ready")); err == nil {
			break
		}
		if i > 2000 {
			t.Fatal("child not ready")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := Open(path, WithTimeout(100*time.Millisecond)); !errors.Is(err, ErrLocked) {
		t.Errorf("Open while the child holds the store: %v", err)
	}
	cmd.Process.Kill()
	cmd.Wait()

	s = open(t, path, WithTimeout(time.Second))
	wantLeases(t, s, map[string]string{"GPU-00": "doomed", "GPU-01": "doomed", "GPU-02": "survivor"})
	var asked []string
	released, err := s.Reclaim(ctx, func(r Record) (bool, error) {
		c := r.Container
		asked = append(asked, c)
		return false, nil // runc knows neither
	})
	// The survivor's owner is this process, which runs: it is spared
	// without asking runc.
	if err != nil || strings.Join(released, ",") != "GPU-00,GPU-01" || strings.Join(asked, ",") != "doomed" {
		t.Errorf("Reclaim = %v, %v; asked about %v", released, err, asked)
	}
	wantLeases(t, s, map[string]string{"GPU-02": "survivor"})
}

func TestProcessStartParsesOddNames(t *testing.T) {
	// A command name with spaces and parentheses does not shift the fields.
	dir := t.TempDir()
	exe := filepath.Join(dir, "a b) (c")
	if err := os.Symlink("/bin/sleep", exe); err != nil {
		t.Skip(err)
	}
	cmd := exec.Command(exe, "5")
	if err := cmd.Start(); err != nil {
		t.Skip(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	start, err := processStart(cmd.Process.Pid)
	self, _ := processStart(os.Getpid())
	if err != nil || start < self {
		t.Errorf("processStart = %d, %v (this process: %d)", start, err, self)
	}
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
	if !strings.Contains(string(b), "(a b) (c)") {
		t.Errorf("the test process is not named as meant: %s", b)
	}
}

// BenchmarkOpenFromGoroutines opens and closes one store from several
// goroutines of one process at once, as an agent's creates and hooks do:
// each waits for the others in the process, not in bbolt's file-lock
// retry (50 ms a round).
func BenchmarkOpenFromGoroutines(b *testing.B) {
	path := filepath.Join(b.TempDir(), "leases.db")
	s, err := Open(path)
	if err != nil {
		b.Fatal(err)
	}
	s.Close()
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			s, err := Open(path)
			if err != nil {
				b.Error(err)
				return
			}
			if _, err := s.Leases(ctx); err != nil {
				b.Error(err)
			}
			s.Close()
		}
	})
}

// BenchmarkLeaseCycle is one container's life in the store as gpumux agent
// lives it: opened, a share acquired, closed (the create); opened, released,
// closed (runc's delete). Each commit is bbolt's two fdatasyncs, so the
// figure is mostly the disk's: point TMPDIR at the file system that holds
// the node's state directory to measure that one.
func BenchmarkLeaseCycle(b *testing.B) {
	path := filepath.Join(b.TempDir(), "leases.db")
	choose := func(map[string]string) ([]string, error) { return []string{"gpu-0"}, nil }
	for b.Loop() {
		s, err := Open(path)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Acquire(ctx, "c1", choose); err != nil {
			b.Fatal(err)
		}
		s.Close()
		if s, err = Open(path); err != nil {
			b.Fatal(err)
		}
		if ids, err := s.Release(ctx, "c1"); err != nil || len(ids) != 1 {
			b.Fatalf("release: %v %v", ids, err)
		}
		s.Close()
	}
}
