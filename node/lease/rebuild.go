package lease

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Check opens the store at path, which must exist, and closes it: nil when
// it is sound, an error wrapping ErrDamaged when it is damaged (see Open),
// another error when it cannot be told (locked, unreadable).
func Check(path string, opts ...Option) error {
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("lease store %s: %w", path, err)
	}
	s, err := Open(path, opts...)
	if err != nil {
		return err
	}
	return s.Close()
}

// Rebuild replaces the store at path with a new one that holds exactly the
// leases of recs (their Container, Shares, Bundle and Root), and returns
// where it kept the file that was there ("" if there was none): path plus
// ".damaged-<UTC time>". The new store is built beside path and renamed
// over it, so that an opener of path sees either file whole, never none.
//
// A record whose shares another record already took is not written; those
// refusals are returned, joined, in skipped, and the rest is rebuilt.
// Reservations are not rebuilt: their tokens are random and were only in
// the store.
func Rebuild(ctx context.Context, path string, recs []Record) (aside string, skipped error, err error) {
	fresh := fmt.Sprintf("%s.rebuild-%d", path, os.Getpid())
	os.Remove(fresh) // a leftover of a repair that was killed
	defer os.Remove(fresh)
	s, err := Open(fresh)
	if err != nil {
		return "", nil, err
	}
	var refused []error
	for _, r := range recs {
		opts := []AcquireOption{WithBundle(r.Bundle), WithRuncRoot(r.Root)}
		if _, err := s.Acquire(ctx, r.Container, exactly(r.Shares), opts...); err != nil {
			if ctx.Err() != nil {
				s.Close()
				return "", nil, ctx.Err()
			}
			refused = append(refused, fmt.Errorf("container %s: %w", r.Container, err))
		}
	}
	if err := s.Close(); err != nil {
		return "", nil, err
	}
	if _, err := os.Lstat(path); err == nil {
		aside = path + ".damaged-" + time.Now().UTC().Format("20060102T150405.000Z")
		if err := os.Link(path, aside); err != nil {
			return "", nil, fmt.Errorf("keeping %s as %s: %w", path, filepath.Base(aside), err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", nil, err
	}
	if err := os.Rename(fresh, path); err != nil {
		return "", nil, fmt.Errorf("putting the rebuilt store in place of %s: %w", path, err)
	}
	return aside, errors.Join(refused...), nil
}

// exactly chooses ids.
func exactly(ids []string) func(map[string]string) ([]string, error) {
	return func(map[string]string) ([]string, error) { return ids, nil }
}
