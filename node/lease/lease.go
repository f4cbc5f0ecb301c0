package lease

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/gpumux/gpumux/internal/bounded"
	"github.com/gpumux/gpumux/internal/procstat"
)

// Schema is the version of the store's layout this package reads and writes.
const Schema = 1

// RecordVersion is the version of the Records this package writes.
const RecordVersion = 1

// DefaultTimeout is how long Open waits for another process to close the store.
const DefaultTimeout = 10 * time.Second

// DefaultReclaimGrace is how long Reclaim leaves a lease alone after it was
// taken when it cannot tell whether the process that took it still runs.
const DefaultReclaimGrace = time.Minute

// MaxContainerID bounds the length of a container ID.
const MaxContainerID = 1024

// Errors of the store.
var (
	// ErrLocked: another process kept the store open past the timeout.
	ErrLocked = errors.New("lease store locked by another process")
	// ErrAlreadyLeased: Acquire for a container that already holds leases.
	ErrAlreadyLeased = errors.New("container already holds leases")
	// ErrClosed: the Store was closed.
	ErrClosed = errors.New("lease store closed")
	// ErrDamaged: the store's file is damaged (empty, garbled pages). The
	// store is never reset over it: that would hand out again the shares
	// running containers hold. `gpumux repair` rebuilds it.
	ErrDamaged = errors.New("lease store damaged")
)

// DamagedError is the error for a store whose file is damaged; it matches
// ErrDamaged (errors.Is) and says what to do.
type DamagedError struct {
	Path string // the store's file
	Why  string // what is wrong with it
}

func (e *DamagedError) Error() string {
	return fmt.Sprintf("%v: %s: %s; gpumux does not start a new store over it, since that would hand out again the shares running containers hold: run 'gpumux repair' to rebuild it from the containers runc and Nomad still run (it keeps the damaged file beside it)", ErrDamaged, e.Path, e.Why)
}

// Is makes a DamagedError match ErrDamaged.
func (e *DamagedError) Is(target error) bool { return target == ErrDamaged }

func damaged(path string, why any) error { return &DamagedError{Path: path, Why: fmt.Sprint(why)} }

var (
	bucketMeta       = []byte("meta")
	bucketShares     = []byte("shares")
	bucketContainers = []byte("containers")
	keySchema        = []byte("schema")
)

// Record is what the store keeps about one container's leases.
type Record struct {
	Version   int       `json:"v"`
	Container string    `json:"container"`
	Shares    []string  `json:"shares"`
	Acquired  time.Time `json:"acquired"`
	Bundle    string    `json:"bundle,omitempty"`
	// Root is runc's state directory (runc --root) the container was
	// created under: where a node agent asks runc whether it still runs.
	Root string `json:"root,omitempty"`
	// Seq tells two leases of one container ID apart (a bbolt sequence).
	Seq uint64 `json:"seq"`
	// Owner is the process that took the lease, while it runs it protects
	// the lease from Reclaim (runc has no state for the container until
	// `runc create` is done).
	Owner *Owner `json:"owner,omitempty"`
}

// Owner identifies a process across PID reuse and reboots.
type Owner struct {
	PID          int    `json:"pid"`
	Start        uint64 `json:"start"`         // clock ticks since boot, /proc/<pid>/stat field 22
	BootID       string `json:"boot_id"`       // /proc/sys/kernel/random/boot_id
	PIDNamespace string `json:"pid_namespace"` // readlink /proc/self/ns/pid
}

// Store is an open lease store.
type Store struct {
	db    *bolt.DB
	path  string
	grace time.Duration
	now   func() time.Time
	self  *Owner
	// running reports whether o still runs, and whether it could tell.
	running func(o *Owner) (running, known bool)

	mu     sync.RWMutex // guards closed against Close during an operation
	closed bool
	unlock func() // gives this process's slot of the store back (lockInProcess)
}

type options struct {
	timeout time.Duration
	grace   time.Duration
}

// Option configures Open.
type Option func(*options)

// WithTimeout sets how long Open waits for another process to close the
// store (default DefaultTimeout; 0 means the default, not forever).
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithReclaimGrace sets how long Reclaim spares a fresh lease whose taking
// process it cannot check (default DefaultReclaimGrace).
func WithReclaimGrace(d time.Duration) Option { return func(o *options) { o.grace = d } }

// Open opens the store at path, creating it (and its directory) if needed.
// It waits for other processes that hold it open, up to the timeout, then
// fails with ErrLocked.
func Open(path string, opts ...Option) (*Store, error) {
	o := options{timeout: DefaultTimeout, grace: DefaultReclaimGrace}
	for _, opt := range opts {
		opt(&o)
	}
	if o.timeout <= 0 {
		o.timeout = DefaultTimeout
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("lease store %s: %w", path, err)
	}
	deadline := time.Now().Add(o.timeout)
	unlock, err := lockInProcess(path, o.timeout)
	if err != nil {
		return nil, err
	}
	// What is left of the timeout for the file lock (bbolt takes 0 as
	// "wait forever").
	left := max(time.Until(deadline), time.Millisecond)
	err = create(path, left)
	var db *bolt.DB
	if err == nil {
		db, err = openChecked(path, left)
	}
	if err != nil {
		unlock()
		return nil, err
	}
	err = guard(path, func() error {
		// A store made before needs no write: its check is a read, and an
		// empty commit would still cost two fdatasyncs on every open.
		var ready bool
		if err := db.View(func(tx *bolt.Tx) (err error) { ready, err = initialized(tx); return err }); err != nil || ready {
			return err
		}
		return db.Update(initialize)
	})
	if err != nil {
		db.Close()
		unlock()
		if errors.Is(err, ErrDamaged) {
			return nil, err
		}
		return nil, fmt.Errorf("lease store %s: %w", path, err)
	}
	return &Store{db: db, path: path, grace: o.grace, now: time.Now, self: selfOwner(), running: processRunning, unlock: unlock}, nil
}

// inProcess holds, per store path, a one-slot channel that this process's
// open Store of it fills. bbolt's file lock is taken per open file, so
// two goroutines of one process (an agent's creates and hooks) would
// otherwise wait for each other in bbolt's lock retry, 50 ms a round.
var inProcess sync.Map

// lockInProcess waits up to timeout for this process's other open Store
// of path to close, and returns what gives the slot back.
func lockInProcess(path string, timeout time.Duration) (func(), error) {
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	v, _ := inProcess.LoadOrStore(path, make(chan struct{}, 1))
	slot := v.(chan struct{})
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case slot <- struct{}{}:
		return sync.OnceFunc(func() { <-slot }), nil
	case <-t.C:
		return nil, fmt.Errorf("%w: %s still held after %s (by this process)", ErrLocked, path, timeout)
	}
}

// create makes a new, initialized store at path if there is no file there.
// It builds it beside path and links it into place, so that path is never
// an empty file that another process could take for a store: bbolt starts
// a new database in an empty file, and an empty leases.db is damage.
func create(path string, timeout time.Duration) error {
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		return nil // there is a file (or an error that opening will report)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.new")
	if err != nil {
		return fmt.Errorf("lease store %s: %w", path, err)
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	if err := os.Remove(tmp.Name()); err != nil { // bbolt initializes only a new or empty file
		return fmt.Errorf("lease store %s: %w", path, err)
	}
	db, err := bolt.Open(tmp.Name(), 0o600, &bolt.Options{Timeout: timeout})
	if err != nil {
		return fmt.Errorf("lease store %s: creating it: %w", path, err)
	}
	err = db.Update(initialize)
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("lease store %s: creating it: %w", path, err)
	}
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("lease store %s: %w", path, err)
	}
	return nil // made here, or by another process meanwhile
}

// openChecked opens the bbolt file at path and checks every page of it
// (Tx.Check; the store is a few pages), so that a damaged file is an error
// naming it rather than a panic in some later read. bbolt panics on some
// garbled pages; openChecked turns those into errors too.
func openChecked(path string, timeout time.Duration) (*bolt.DB, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("lease store %s: %w", path, err)
	}
	if fi.Size() == 0 {
		return nil, damaged(path, "the file is empty (0 bytes)")
	}
	var db *bolt.DB
	err = guard(path, func() (err error) {
		db, err = bolt.Open(path, 0o600, &bolt.Options{Timeout: timeout})
		return err
	})
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return nil, fmt.Errorf("%w: %s still held after %s (another gpumux-runtime or hook is using it)", ErrLocked, path, timeout)
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrChecksum), errors.Is(err, berrors.ErrVersionMismatch), errors.Is(err, berrors.ErrInvalidMapping):
		return nil, damaged(path, err)
	case err != nil:
		return nil, fmt.Errorf("lease store %s: %w", path, err)
	}
	err = guard(path, func() error {
		return db.View(func(tx *bolt.Tx) error {
			var errs []error
			for err := range tx.Check() {
				if len(errs) < 3 { // the first few say enough
					errs = append(errs, err)
				}
			}
			if len(errs) > 0 {
				return damaged(path, errors.Join(errs...))
			}
			return nil
		})
	})
	if err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// guard runs fn, turning a panic of bbolt's (it panics on some garbled
// pages) into an error saying the store at path is damaged.
func guard(path string, fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = damaged(path, fmt.Sprintf("reading it failed: %v", r))
		}
	}()
	return fn()
}

// initialize checks the store's schema, writing it into a new store, and
// makes the buckets.
func initialize(tx *bolt.Tx) error {
	meta, err := tx.CreateBucketIfNotExists(bucketMeta)
	if err != nil {
		return err
	}
	if v := meta.Get(keySchema); v != nil {
		if err := checkSchema(v); err != nil {
			return err
		}
	} else if err := meta.Put(keySchema, []byte(strconv.Itoa(Schema))); err != nil {
		return err
	}
	for _, b := range dataBuckets {
		if _, err := tx.CreateBucketIfNotExists(b); err != nil {
			return err
		}
	}
	return nil
}

// dataBuckets are the buckets besides meta that initialize makes.
var dataBuckets = [][]byte{bucketShares, bucketContainers, bucketReservations}

// initialized says, reading only, whether initialize would change nothing:
// the schema is written and known, and every bucket is there. A schema
// this package must not use is the same error initialize returns.
func initialized(tx *bolt.Tx) (bool, error) {
	meta := tx.Bucket(bucketMeta)
	if meta == nil {
		return false, nil
	}
	v := meta.Get(keySchema)
	if v == nil {
		return false, nil
	}
	if err := checkSchema(v); err != nil {
		return false, err
	}
	for _, b := range dataBuckets {
		if tx.Bucket(b) == nil {
			return false, nil
		}
	}
	return true, nil
}

// checkSchema refuses a schema version that is not one, or is newer than
// this package's.
func checkSchema(v []byte) error {
	n, err := strconv.Atoi(string(v))
	switch {
	case err != nil || n < 1:
		return fmt.Errorf("schema %q is not a version: not a gpumux lease store?", v)
	case n > Schema:
		return fmt.Errorf("schema %d was written by a newer gpumux; this one knows schema %d and leaves it alone", n, Schema)
	}
	return nil
}

// Close closes the store, releasing its file lock for other processes.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	defer s.unlock()
	return s.db.Close()
}

// Path is the store's file.
func (s *Store) Path() string { return s.path }

// view and update run fn in a read or write transaction of the open store.
func (s *Store) view(ctx context.Context, fn func(*bolt.Tx) error) error {
	return s.tx(ctx, false, fn)
}

func (s *Store) update(ctx context.Context, fn func(*bolt.Tx) error) error {
	return s.tx(ctx, true, fn)
}

func (s *Store) tx(ctx context.Context, write bool, fn func(*bolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	return guard(s.path, func() error {
		if write {
			return s.db.Update(fn)
		}
		return s.db.View(fn)
	})
}

// AcquireOption adds to the record of an Acquire.
type AcquireOption func(*Record)

// WithBundle records the container's bundle directory.
func WithBundle(path string) AcquireOption { return func(r *Record) { r.Bundle = path } }

// WithRuncRoot records runc's state directory (runc --root; "" for runc's
// default).
func WithRuncRoot(path string) AcquireOption { return func(r *Record) { r.Root = path } }

// WithOwner records process pid, not the store's, as the lease's owner:
// a node agent that leases for another process (gpumux-runtime asking it
// over its socket, which then becomes runc) names that process, so that
// the lease is protected while it runs and reclaimable once it is gone
// without a container. A process /proc cannot describe leaves no owner
// (the reclaim grace protects the lease then).
func WithOwner(pid int) AcquireOption { return func(r *Record) { r.Owner = ownerOf(pid) } }

// Acquire leases shares to container in one write transaction: it calls
// choose with the current leases (share ID → container ID, a copy) and
// records the share IDs it returns. If choose fails, its error is returned
// as it is (so errors.Is(err, share.ErrNoFit) works) and nothing is written.
// choose runs while the store is locked: keep it quick.
//
// A container that already holds leases is refused with ErrAlreadyLeased,
// naming them, without calling choose: its request may differ from the one
// its leases were chosen for, and a container ID is used once by runc. Its
// leases go with Release, or with Reclaim once it is gone.
//
// What choose returns must be non-empty share IDs, none twice, none leased.
func (s *Store) Acquire(ctx context.Context, container string, choose func(leased map[string]string) ([]string, error), opts ...AcquireOption) ([]string, error) {
	if err := checkContainer(container); err != nil {
		return nil, err
	}
	var ids []string
	err := s.update(ctx, func(tx *bolt.Tx) (err error) {
		ids, err = s.acquire(tx, container, choose, opts...)
		return err
	})
	if err != nil {
		return nil, err
	}
	return ids, nil
}

// acquire is Acquire inside a write transaction.
func (s *Store) acquire(tx *bolt.Tx, container string, choose func(leased map[string]string) ([]string, error), opts ...AcquireOption) (ids []string, err error) {
	{
		shares, containers := tx.Bucket(bucketShares), tx.Bucket(bucketContainers)
		leased := map[string]string{}
		var held []string
		err := shares.ForEach(func(k, v []byte) error {
			leased[string(k)] = string(v)
			if string(v) == container {
				held = append(held, string(k))
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		if len(held) > 0 {
			sort.Strings(held)
			return nil, fmt.Errorf("%w: %s holds %s", ErrAlreadyLeased, container, strings.Join(held, ", "))
		}
		chosen, err := choose(copyMap(leased))
		if err != nil {
			return nil, err
		}
		if len(chosen) == 0 {
			return nil, fmt.Errorf("lease for %s: no shares chosen", container)
		}
		seen := map[string]bool{}
		for _, id := range chosen {
			switch {
			case id == "":
				return nil, fmt.Errorf("lease for %s: an empty share ID was chosen", container)
			case seen[id]:
				return nil, fmt.Errorf("lease for %s: share %s was chosen twice", container, id)
			case leased[id] != "":
				return nil, fmt.Errorf("lease for %s: share %s was chosen, but %s holds it", container, id, leased[id])
			}
			seen[id] = true
		}
		seq, err := containers.NextSequence()
		if err != nil {
			return nil, err
		}
		rec := Record{Version: RecordVersion, Container: container, Shares: slices.Clone(chosen), Acquired: s.now().UTC(), Seq: seq, Owner: s.self}
		for _, o := range opts {
			o(&rec)
		}
		b, err := json.Marshal(rec)
		if err != nil {
			return nil, err
		}
		if err := containers.Put([]byte(container), b); err != nil {
			return nil, err
		}
		for _, id := range chosen {
			if err := shares.Put([]byte(id), []byte(container)); err != nil {
				return nil, err
			}
		}
		return rec.Shares, nil
	}
}

// Release gives back every share container holds and returns their IDs,
// sorted. Releasing a container that holds nothing is not an error.
func (s *Store) Release(ctx context.Context, container string) ([]string, error) {
	var released []string
	err := s.update(ctx, func(tx *bolt.Tx) error {
		var err error
		released, err = release(tx, container)
		return err
	})
	if err != nil {
		return nil, err
	}
	return released, nil
}

// release deletes container's leases and record.
func release(tx *bolt.Tx, container string) ([]string, error) {
	shares := tx.Bucket(bucketShares)
	var ids []string
	err := shares.ForEach(func(k, v []byte) error {
		if string(v) == container {
			ids = append(ids, string(k))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		if err := shares.Delete([]byte(id)); err != nil {
			return nil, err
		}
	}
	if err := tx.Bucket(bucketContainers).Delete([]byte(container)); err != nil {
		return nil, err
	}
	sort.Strings(ids)
	return ids, nil
}

// Leases returns every lease: share ID → container ID.
func (s *Store) Leases(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	err := s.view(ctx, func(tx *bolt.Tx) error {
		return tx.Bucket(bucketShares).ForEach(func(k, v []byte) error {
			out[string(k)] = string(v)
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Records returns one Record per container holding leases, sorted by
// container ID. Shares come from the leases themselves; the other fields from
// the stored record, when it is readable (a record that is not is reported
// with only Container and Shares).
func (s *Store) Records(ctx context.Context) ([]Record, error) {
	var out []Record
	err := s.view(ctx, func(tx *bolt.Tx) error {
		out = records(tx)
		return nil
	})
	return out, err
}

func records(tx *bolt.Tx) []Record {
	byContainer := map[string][]string{}
	tx.Bucket(bucketShares).ForEach(func(k, v []byte) error {
		byContainer[string(v)] = append(byContainer[string(v)], string(k))
		return nil
	})
	containers := tx.Bucket(bucketContainers)
	out := make([]Record, 0, len(byContainer))
	for c, ids := range byContainer {
		rec, _ := decodeRecord(containers.Get([]byte(c)))
		rec.Container = c
		sort.Strings(ids)
		rec.Shares = ids
		out = append(out, rec)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Container < out[j].Container })
	return out
}

// decodeRecord reads a record leniently: unknown fields are ignored, and a
// record of a later version is read for the fields this version knows.
func decodeRecord(b []byte) (Record, error) {
	var r Record
	if b == nil {
		return r, errors.New("no record")
	}
	err := json.Unmarshal(b, &r)
	return r, err
}

// Reclaim releases the leases of containers that are gone, so that a crashed
// container or a killed runtime loses nothing, and returns the share IDs it
// released, sorted.
//
// A lease is spared while the process that took it still runs (runc knows
// the container only once `runc create` is done), and, when that cannot be
// checked (no record of it, another PID namespace), for the grace period
// after it was taken. Other containers' records are given to alive, outside
// the store's transactions; those it reports gone are released unless they
// were released and leased again meanwhile. A container whose check fails
// keeps its leases; the errors are returned, joined, with what was released.
func (s *Store) Reclaim(ctx context.Context, alive func(Record) (bool, error)) ([]string, error) {
	var recs []Record
	if err := s.view(ctx, func(tx *bolt.Tx) error {
		recs = records(tx)
		return nil
	}); err != nil {
		return nil, err
	}
	now := s.now()
	var gone []Record
	var errs []error
	for _, r := range recs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if running, known := s.running(r.Owner); running {
			continue
		} else if !known && !r.Acquired.IsZero() && now.Sub(r.Acquired) < s.grace {
			continue
		}
		ok, err := alive(r)
		if err != nil {
			errs = append(errs, fmt.Errorf("container %s: %w", r.Container, err))
			continue
		}
		if !ok {
			gone = append(gone, r)
		}
	}
	var released []string
	if len(gone) > 0 {
		err := s.update(ctx, func(tx *bolt.Tx) error {
			released = nil
			containers := tx.Bucket(bucketContainers)
			for _, r := range gone {
				// Leased again since it was read? Then it is not the lease
				// that was checked.
				if cur, _ := decodeRecord(containers.Get([]byte(r.Container))); cur.Seq != r.Seq {
					continue
				}
				ids, err := release(tx, r.Container)
				if err != nil {
					return err
				}
				released = append(released, ids...)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	sort.Strings(released)
	return released, errors.Join(errs...)
}

func copyMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func checkContainer(c string) error {
	if c == "" {
		return errors.New("lease: empty container ID")
	}
	if len(c) > MaxContainerID {
		return fmt.Errorf("lease: container ID of %d bytes; at most %d", len(c), MaxContainerID)
	}
	return nil
}

// selfOwner describes this process, or is nil where /proc cannot tell;
// read once (a long-lived agent opens the store for every create).
var selfOwner = sync.OnceValue(func() *Owner {
	pid := os.Getpid()
	start, err := processStart(pid)
	if err != nil {
		return nil
	}
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return nil
	}
	ns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return nil
	}
	return &Owner{PID: pid, Start: start, BootID: string(bytes.TrimSpace(boot)), PIDNamespace: ns}
})

// ownerOf describes process pid (of this process's PID namespace), or is
// nil where /proc cannot tell: its start, and this process's boot and PID
// namespace (read once).
func ownerOf(pid int) *Owner {
	self := selfOwner()
	if self == nil {
		return nil
	}
	start, err := processStart(pid)
	if err != nil {
		return nil
	}
	return &Owner{PID: pid, Start: start, BootID: self.BootID, PIDNamespace: self.PIDNamespace}
}

// ended remembers owners seen gone: a process that has ended never runs
// again (another process of its PID has another start time), and a
// long-lived agent checks the owner of every lease at every create. A node
// runs a few thousand containers at most.
var ended = bounded.New[Owner, struct{}](8192)

func endedBefore(o Owner) bool {
	_, ok := ended.Get(o)
	return ok
}

// processRunning reports whether o still runs, and whether that could be
// told: not for a missing owner, nor across PID namespaces.
func processRunning(o *Owner) (running, known bool) {
	self := selfOwner()
	if o == nil || self == nil || o.BootID == "" {
		return false, false
	}
	if o.BootID != self.BootID {
		return false, true // the node rebooted since
	}
	if o.PIDNamespace != self.PIDNamespace {
		return false, false
	}
	if endedBefore(*o) {
		return false, true
	}
	start, err := processStart(o.PID)
	switch {
	case errors.Is(err, os.ErrNotExist), err == nil && start != o.Start:
		ended.Put(*o, struct{}{})
		return false, true
	case err != nil:
		return false, false
	}
	return true, true
}

// processStart reads a process's start time (clock ticks after boot) from
// /proc/<pid>/stat.
func processStart(pid int) (uint64, error) {
	st, err := procstat.Read(pid)
	return st.Start, err
}
