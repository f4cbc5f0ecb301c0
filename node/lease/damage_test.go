package lease

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// storeWithLeases makes a store at dir/leases.db with leases of 40
// containers (enough records for several pages) and closes it.
func storeWithLeases(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, FileName)
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		id := fmt.Sprintf("MIG-%032d::%d", i, i)
		if _, err := s.Acquire(ctx, fmt.Sprintf("container-%02d-%s", i, strings.Repeat("x", 60)), fixed(id), WithBundle("/run/containerd/io.containerd.runtime.v2.task/default/c"+strings.Repeat("b", 40))); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// garble overwrites 4 KiB in the middle of the file at path with random
// bytes (seeded, so a failure can be replayed).
func garble(t *testing.T, path string, seed uint64) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	junk := make([]byte, 4096)
	r := rand.New(rand.NewPCG(seed, seed))
	for i := range junk {
		junk[i] = byte(r.Uint32())
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(junk, fi.Size()/2-2048); err != nil {
		t.Fatal(err)
	}
}

// TestEmptyStoreIsDamage checks that an empty leases.db (0 bytes) is an
// error naming the file and gpumux repair, and is left as it is: bbolt
// would start a new database in it, forgetting every lease.
func TestEmptyStoreIsDamage(t *testing.T) {
	path := storeWithLeases(t, t.TempDir())
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	for _, what := range []string{"Open", "ReadIn"} {
		var err error
		if what == "Open" {
			var s *Store
			if s, err = Open(path); err == nil {
				s.Close()
			}
		} else {
			_, err = ReadIn(ctx, filepath.Dir(path))
		}
		if !errors.Is(err, ErrDamaged) {
			t.Fatalf("%s of an empty store: %v, want ErrDamaged", what, err)
		}
		for _, want := range []string{path, "empty (0 bytes)", "gpumux repair"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %q does not say %q", what, err, want)
			}
		}
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != 0 {
		t.Errorf("the empty store was changed: %v, %v", fi, err)
	}
}

// TestGarbledStoreIsDamage overwrites 4 KiB in the middle of a store with
// leases, with several seeds: opening it and reading it must either work
// (the damage hit a free page) or fail with ErrDamaged naming the file,
// never panic.
func TestGarbledStoreIsDamage(t *testing.T) {
	damagedSeen := 0
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			path := storeWithLeases(t, t.TempDir())
			garble(t, path, seed)
			err := func() error {
				s, err := Open(path)
				if err != nil {
					return err
				}
				defer s.Close()
				if _, err := s.Leases(ctx); err != nil {
					return err
				}
				if _, err := s.Records(ctx); err != nil {
					return err
				}
				_, err = s.Acquire(ctx, "another", fixed("GPU-new"))
				return err
			}()
			if err == nil {
				return
			}
			if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "gpumux repair") {
				t.Fatalf("error %v: want ErrDamaged naming %s and gpumux repair", err, path)
			}
			damagedSeen++
		})
	}
	if damagedSeen == 0 {
		t.Error("no seed damaged the store: the test damages nothing that matters")
	}
}

// TestConcurrentCreateMakesOneStore opens a new store from many goroutines
// at once (separate Opens, as separate processes would): none may see the
// file half-made (empty) and fail.
func TestConcurrentCreateMakesOneStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	errs := make(chan error, 16)
	for range 16 {
		go func() {
			s, err := Open(path)
			if err == nil {
				s.Close()
			}
			errs <- err
		}()
	}
	for range 16 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
