package runtimehook

import (
	"context"
	"fmt"
	"io"

	"github.com/gpumux/gpumux/node/lease"
)

// leases is the node's lease store, opened for each operation: runtime and
// hook processes are short-lived, and bbolt's file lock orders them.
type leases struct{ path string }

func (r *Runtime) store() leases {
	return leases{path: lease.PathIn(r.cfg.StateDir)}
}

func (l leases) open() (*lease.Store, error) {
	s, err := lease.Open(l.path)
	if err != nil {
		return nil, fmt.Errorf("opening the lease store %s: %w", l.path, err)
	}
	return s, nil
}

// acquire leases what choose picks, in one transaction, after reclaiming
// stale leases (see reclaimThen).
func (l leases) acquire(ctx context.Context, container string, alive func(lease.Record) (bool, error), choose func(map[string]string) ([]string, error), warn io.Writer, opts ...lease.AcquireOption) ([]string, error) {
	return l.reclaimThen(ctx, alive, warn, func(s *lease.Store) ([]string, error) { return s.Acquire(ctx, container, choose, opts...) })
}

// claim leases the shares a reservation token names, consuming it, after
// reclaiming stale leases (see reclaimThen).
func (l leases) claim(ctx context.Context, container, token string, shares []string, alive func(lease.Record) (bool, error), warn io.Writer, opts ...lease.AcquireOption) ([]string, error) {
	return l.reclaimThen(ctx, alive, warn, func(s *lease.Store) ([]string, error) { return s.Claim(ctx, container, token, shares, opts...) })
}

// reclaimThen opens the store, releases the leases of containers runc no
// longer knows (a crashed container or a killed runtime loses nothing), then
// runs do. A container whose state runc cannot tell keeps its leases;
// that is reported to warn, not fatal.
func (l leases) reclaimThen(ctx context.Context, alive func(lease.Record) (bool, error), warn io.Writer, do func(*lease.Store) ([]string, error)) ([]string, error) {
	s, err := l.open()
	if err != nil {
		return nil, err
	}
	defer s.Close()
	if _, err := s.Reclaim(ctx, alive); err != nil {
		fmt.Fprintf(warn, "gpumux-runtime: some stale leases were kept: %v\n", err)
	}
	return do(s)
}

func (l leases) release(ctx context.Context, container string) ([]string, error) {
	s, err := l.open()
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return s.Release(ctx, container)
}

// held returns the share IDs leased to container.
func (l leases) held(ctx context.Context, container string) ([]string, error) {
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
