package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/gpumux/gpumux/node/lease"
)

// Leases is a node's lease store, opened for each operation: runtime and
// hook processes are short-lived, and bbolt's file lock orders them with
// the long-lived agent.
type Leases struct{ Path string }

// LeasesIn is the lease store of a node whose state directory is dir.
func LeasesIn(dir string) Leases { return Leases{Path: lease.PathIn(dir)} }

func (l Leases) open() (*lease.Store, error) {
	s, err := lease.Open(l.Path)
	if err != nil {
		return nil, fmt.Errorf("opening the lease store %s: %w", l.Path, err)
	}
	return s, nil
}

// acquire leases what choose picks, in one transaction, after reclaiming
// stale leases (see reclaimThen).
func (l Leases) acquire(ctx context.Context, container string, alive func(lease.Record) (bool, error), choose func(map[string]string) ([]string, error), warn io.Writer, opts ...lease.AcquireOption) ([]string, error) {
	return l.reclaimThen(ctx, alive, warn, func(s *lease.Store) ([]string, error) { return s.Acquire(ctx, container, choose, opts...) })
}

// claim leases the shares a reservation token names, consuming it, after
// reclaiming stale leases (see reclaimThen).
func (l Leases) claim(ctx context.Context, container, token string, shares []string, alive func(lease.Record) (bool, error), warn io.Writer, opts ...lease.AcquireOption) ([]string, error) {
	return l.reclaimThen(ctx, alive, warn, func(s *lease.Store) ([]string, error) { return s.Claim(ctx, container, token, shares, opts...) })
}

// reclaimThen opens the store, releases the leases of containers runc no
// longer knows (a crashed container or a killed runtime loses nothing), then
// runs do. A container whose state runc cannot tell keeps its leases;
// that is reported to warn, not fatal.
func (l Leases) reclaimThen(ctx context.Context, alive func(lease.Record) (bool, error), warn io.Writer, do func(*lease.Store) ([]string, error)) ([]string, error) {
	s, err := l.open()
	if err != nil {
		return nil, err
	}
	defer s.Close()
	if _, err := s.Reclaim(ctx, alive); err != nil {
		fmt.Fprintf(warn, "gpumux: some stale leases were kept: %v\n", err)
	}
	return do(s)
}

// Release gives back the shares leased to container and returns their IDs.
func (l Leases) Release(ctx context.Context, container string) ([]string, error) {
	s, err := l.open()
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return s.Release(ctx, container)
}

// Held returns the share IDs leased to container.
func (l Leases) Held(ctx context.Context, container string) ([]string, error) {
	s, err := l.open()
	if err != nil {
		return nil, err
	}
	defer s.Close()
	all, err := s.Leases(ctx)
	if err != nil {
		return nil, err
	}
	var ids []string
	for id, c := range all {
		if c == container {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// Records returns the store's leases, one record per container.
func (l Leases) Records(ctx context.Context) ([]lease.Record, error) {
	s, err := l.open()
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return s.Records(ctx)
}

// Reclaim releases the leases of containers that are gone (see
// lease.Store.Reclaim) and returns the share IDs it released. A store not
// made yet has none, and is not made.
func (l Leases) Reclaim(ctx context.Context, alive func(lease.Record) (bool, error)) ([]string, error) {
	if _, err := os.Lstat(l.Path); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	s, err := l.open()
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return s.Reclaim(ctx, alive)
}
