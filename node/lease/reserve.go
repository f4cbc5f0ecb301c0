package lease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
)

// ErrNoReservation means a container presented a reservation token the node
// does not hold (never made, already claimed, expired) or one that names other
// shares.
var ErrNoReservation = errors.New("no such reservation")

// FileName is the lease store's file in a node's state directory.
const FileName = "leases.db"

// PathIn returns the lease store's path in state directory dir.
func PathIn(dir string) string { return filepath.Join(dir, FileName) }

// bucketReservations maps a reservation token to its reservation (JSON).
var bucketReservations = []byte("reservations")

// reservation is what the Nomad plugin's Reserve records for a task.
type reservation struct {
	Version int       `json:"version"`
	Shares  []string  `json:"shares"`
	Expires time.Time `json:"expires"`
}

// Reserve records that shares were reserved for whoever presents token,
// until ttl has passed, and drops expired reservations. The Nomad plugin
// reserves; gpumux-runtime claims, for containers started with the
// reservation's GPUMUX_SHARES and GPUMUX_RESERVATION.
func (s *Store) Reserve(ctx context.Context, token string, shares []string, ttl time.Duration) error {
	if len(token) < 16 || len(token) > 128 || len(shares) == 0 {
		return fmt.Errorf("reservation: want a token of 16 to 128 bytes and at least one share")
	}
	now := s.now()
	b, err := json.Marshal(reservation{Version: RecordVersion, Shares: slices.Sorted(slices.Values(shares)), Expires: now.Add(ttl).UTC()})
	if err != nil {
		return err
	}
	return s.update(ctx, func(tx *bolt.Tx) error {
		res := tx.Bucket(bucketReservations)
		var expired [][]byte
		res.ForEach(func(k, v []byte) error {
			var r reservation
			if json.Unmarshal(v, &r) != nil || now.After(r.Expires) {
				expired = append(expired, slices.Clone(k))
			}
			return nil
		})
		for _, k := range expired {
			if err := res.Delete(k); err != nil {
				return err
			}
		}
		return res.Put([]byte(token), b)
	})
}

// Claim leases shares to container if token names a live reservation of
// exactly those shares; the reservation is consumed, so a token works once.
// Shares another container holds are refused as Acquire refuses them.
func (s *Store) Claim(ctx context.Context, container, token string, shares []string, opts ...AcquireOption) ([]string, error) {
	if err := checkContainer(container); err != nil {
		return nil, err
	}
	want := slices.Sorted(slices.Values(shares))
	var ids []string
	err := s.update(ctx, func(tx *bolt.Tx) (err error) {
		res := tx.Bucket(bucketReservations)
		var r reservation
		raw := res.Get([]byte(token))
		if raw == nil || json.Unmarshal(raw, &r) != nil {
			return fmt.Errorf("%w: the token is unknown to this node, or was used already", ErrNoReservation)
		}
		if s.now().After(r.Expires) {
			return fmt.Errorf("%w: the reservation expired at %s", ErrNoReservation, r.Expires.Format(time.RFC3339))
		}
		if !slices.Equal(r.Shares, want) {
			return fmt.Errorf("%w: the token reserved %v, not %v", ErrNoReservation, r.Shares, want)
		}
		if err := res.Delete([]byte(token)); err != nil {
			return err
		}
		ids, err = s.acquire(tx, container, func(map[string]string) ([]string, error) { return want, nil }, opts...)
		return err
	})
	if err != nil {
		return nil, err
	}
	return ids, nil
}
