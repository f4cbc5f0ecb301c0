package sim

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"golang.org/x/sys/unix"
)

const stateVersion = 1

// state is the persisted state of a node (state.json). Decoding ignores
// unknown fields, so that a field added later does not break readers, but
// refuses a version other than stateVersion and duplicate UUIDs.
type state struct {
	Version    int         `json:"version"`
	Node       string      `json:"node"`
	Generation uint64      `json:"generation"`
	GPUs       []*gpuState `json:"gpus"`
	// Events is the log of injected events, oldest first (at most maxEvents).
	Events       []event `json:"events,omitempty"`
	NextEventSeq uint64  `json:"nextEventSeq"`
	NextSerial   uint64  `json:"nextSerial"`
	// FailCreateCountdown > 0 makes the FailCreateCountdown-th next GPU
	// instance create fail with ERROR_INSUFFICIENT_RESOURCES; 0 disables.
	FailCreateCountdown int `json:"failCreateCountdown,omitempty"`
	// Fault is a fault injected at a later NVML call that changes state
	// (FailMutation, KillAtMutation); nil for none.
	Fault *mutationFault `json:"fault,omitempty"`

	forceSave bool // save even though the transaction failed
}

type gpuState struct {
	Index      int        `json:"index"`
	UUID       string     `json:"uuid"`
	PciBusID   string     `json:"pciBusId"`
	Minor      int        `json:"minor"`
	MigCurrent int        `json:"migCurrent"`
	MigPending int        `json:"migPending"`
	GIs        []*giState `json:"gpuInstances,omitempty"` // sorted by ID
	Processes  []uint32   `json:"processes,omitempty"`    // processes on the whole GPU (MIG disabled)
	Telemetry  Telemetry  `json:"telemetry"`
	// ResetForModeChange makes a MIG mode change wait for a reset
	// (RequireResetForModeChange); Resets counts ResetGPU calls.
	ResetForModeChange bool `json:"resetForModeChange,omitempty"`
	Resets             int  `json:"resets,omitempty"`
}

type giState struct {
	ID        uint32     `json:"id"`
	ProfileID uint32     `json:"profileId"`
	Start     uint32     `json:"start"`
	Size      uint32     `json:"size"`
	Serial    uint64     `json:"serial"`                     // unique per node: tells handles of a recreated GI apart
	CIs       []*ciState `json:"computeInstances,omitempty"` // sorted by ID
}

type ciState struct {
	ID        uint32   `json:"id"`
	ProfileID uint32   `json:"profileId"`
	Start     uint32   `json:"start"`
	Size      uint32   `json:"size"`
	UUID      string   `json:"uuid"` // MIG-<uuid> of the MIG device (GI + CI)
	Processes []uint32 `json:"processes,omitempty"`
}

type event struct {
	Seq  uint64    `json:"seq"`
	GPU  int       `json:"gpu"`
	GI   uint32    `json:"gi"`
	CI   uint32    `json:"ci"`
	Type uint64    `json:"type"`
	Data uint64    `json:"data"`
	Time time.Time `json:"time"`
}

const maxEvents = 256

// Telemetry holds the numbers a simulated GPU reports through
// GetUtilizationRates, GetTemperature and GetPowerUsage.
type Telemetry struct {
	GPUUtil         uint32 `json:"gpuUtil"`    // percent
	MemoryUtil      uint32 `json:"memoryUtil"` // percent
	TemperatureC    uint32 `json:"temperatureC"`
	PowerMilliwatts uint32 `json:"powerMilliwatts"`
}

func (st *state) gpu(index int) *gpuState {
	if index < 0 || index >= len(st.GPUs) {
		return nil
	}
	return st.GPUs[index]
}

func (g *gpuState) gi(id uint32) *giState {
	for _, gi := range g.GIs {
		if gi.ID == id {
			return gi
		}
	}
	return nil
}

func (gi *giState) ci(id uint32) *ciState {
	for _, ci := range gi.CIs {
		if ci.ID == id {
			return ci
		}
	}
	return nil
}

// migRef is one MIG device (a compute instance inside a GPU instance).
type migRef struct {
	gi *giState
	ci *ciState
}

// migDevices lists the MIG devices of a GPU ordered by GI id, then CI id:
// the order of GetMigDeviceHandleByIndex.
func (g *gpuState) migDevices() []migRef {
	var out []migRef
	for _, gi := range g.GIs {
		for _, ci := range gi.CIs {
			out = append(out, migRef{gi, ci})
		}
	}
	return out
}

// findMig finds a MIG device by its UUID.
func (st *state) findMig(uuid string) (*gpuState, *giState, *ciState) {
	for _, g := range st.GPUs {
		for _, gi := range g.GIs {
			for _, ci := range gi.CIs {
				if ci.UUID == uuid {
					return g, gi, ci
				}
			}
		}
	}
	return nil, nil, nil
}

// Option configures Open.
type Option func(*options)

type options struct {
	gpuCount  int
	minors    []int
	firstFree bool
}

// WithGPUCount makes a newly created node have n GPUs (1..8) instead of 8.
// Opening an existing node with a different count fails.
func WithGPUCount(n int) Option { return func(o *options) { o.gpuCount = n } }

// WithMinors gives the GPUs of a newly created node these device minor
// numbers (one per GPU, in index order) instead of 0..n-1, to test code that
// must not confuse the NVML index with the device minor. Opening an existing
// node with different minors fails.
func WithMinors(minors ...int) Option {
	return func(o *options) { o.minors = append([]int(nil), minors...) }
}

// By default CreateGpuInstance (without a placement) chooses the free
// placement that blocks the fewest other still-possible placements (ties:
// lowest start), which reproduces what current drivers do (e.g. a first 3g on
// an empty H100 lands on 4:4, and seven 1g creates land on slots
// 6,4,5,0,1,2,3). WithFirstFreePlacement makes it take the first free
// placement instead, as older simulations did. This is a per-process
// setting, not persisted.
func WithFirstFreePlacement() Option { return func(o *options) { o.firstFree = true } }

// Node is an opened simulated node. It is safe for concurrent use.
type Node struct {
	name    string
	dir     string
	model   *model
	bestFit bool

	gpus []*gpu // full-GPU handles, fixed at Open
	lib  *library

	statePath string // <dir>/state.json
	lockPath  string // <dir>/state.lock

	mu        sync.Mutex // guards everything below
	initCount int
	st        *state
	ver       fileVersion // the version of the state file st was read from
	gis       map[uint64]*gpuInstance
	cis       map[string]*computeInstance
	migs      map[string]*migDevice
}

// Open opens (creating on first use) the simulated node name, whose state
// persists in <stateDir>/sim/<name>/state.json.
func Open(name, stateDir string, opts ...Option) (*Node, error) {
	m, ok := models[name]
	if !ok {
		return nil, fmt.Errorf("sim: unknown simulated node %q (valid: %s)", name, strings.Join(Names(), ", "))
	}
	if stateDir == "" {
		return nil, errors.New("sim: empty state directory")
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.gpuCount < 0 || o.gpuCount > len(m.busNumbers) {
		return nil, fmt.Errorf("sim: WithGPUCount(%d): a %s has 1..%d GPUs", o.gpuCount, name, len(m.busNumbers))
	}
	if o.minors != nil {
		if o.gpuCount == 0 {
			o.gpuCount = len(m.busNumbers)
		}
		if err := checkMinors(o.minors, o.gpuCount); err != nil {
			return nil, err
		}
	}

	dir := filepath.Join(stateDir, "sim", name)
	n := &Node{
		name:      name,
		dir:       dir,
		model:     m,
		bestFit:   !o.firstFree,
		statePath: filepath.Join(dir, "state.json"),
		lockPath:  filepath.Join(dir, "state.lock"),
		gis:       map[uint64]*gpuInstance{},
		cis:       map[string]*computeInstance{},
		migs:      map[string]*migDevice{},
	}
	if err := os.MkdirAll(n.dir, 0o755); err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	if err := n.createOrCheck(o); err != nil {
		return nil, err
	}
	for i := range n.st.GPUs {
		n.gpus = append(n.gpus, newGPU(n, i))
	}
	n.lib = newLibrary(n)
	if err := n.writeMigMinors(); err != nil {
		return nil, err
	}
	return n, nil
}

func checkMinors(minors []int, count int) error {
	if len(minors) != count {
		return fmt.Errorf("sim: WithMinors got %d minors for %d GPUs", len(minors), count)
	}
	seen := map[int]bool{}
	for _, m := range minors {
		if m < 0 || m > 254 || seen[m] {
			return fmt.Errorf("sim: WithMinors(%v): minors must be distinct and in 0..254", minors)
		}
		seen[m] = true
	}
	return nil
}

// Name is the node's name ("dgxh200", ...).
func (n *Node) Name() string { return n.name }

// NVML returns the node's strict, stateful nvml.Interface.
func (n *Node) NVML() nvml.Interface { return n.lib }

// Dir is <stateDir>/sim/<name>, the directory holding the node's files.
func (n *Node) Dir() string { return n.dir }

// createOrCheck creates the state file on first use, or loads and checks it.
func (n *Node) createOrCheck(o options) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	unlock, err := lockFile(n.lockPath)
	if err != nil {
		return err
	}
	defer unlock()

	raw, ver, err := readState(n.statePath)
	if errors.Is(err, fs.ErrNotExist) {
		st, err := n.newState(o)
		if err != nil {
			return err
		}
		return n.saveLocked(st, fileVersion{})
	}
	if err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	st, err := decodeState(raw)
	if err != nil {
		return fmt.Errorf("sim: %s: %w", n.statePath, err)
	}
	if st.Node != n.name || len(st.GPUs) == 0 {
		return fmt.Errorf("sim: %s holds node %q with %d GPUs, not a %s", n.statePath, st.Node, len(st.GPUs), n.name)
	}
	if o.gpuCount != 0 && o.gpuCount != len(st.GPUs) {
		return fmt.Errorf("sim: %s already has %d GPUs; WithGPUCount(%d) only applies to a new node", n.dir, len(st.GPUs), o.gpuCount)
	}
	for i, m := range o.minors {
		if st.GPUs[i].Minor != m {
			return fmt.Errorf("sim: %s already exists with other minors; WithMinors only applies to a new node", n.dir)
		}
	}
	n.st, n.ver = st, ver
	return nil
}

func (n *Node) newState(o options) (*state, error) {
	count := o.gpuCount
	if count == 0 {
		count = len(n.model.busNumbers)
	}
	st := &state{Version: stateVersion, Node: n.name, NextEventSeq: 1, NextSerial: 1}
	for i := 0; i < count; i++ {
		u, err := newUUID()
		if err != nil {
			return nil, err
		}
		minor := i
		if o.minors != nil {
			minor = o.minors[i]
		}
		st.GPUs = append(st.GPUs, &gpuState{
			Index:     i,
			UUID:      "GPU-" + u,
			PciBusID:  fmt.Sprintf("00000000:%02X:00.0", n.model.busNumbers[i]),
			Minor:     minor,
			Telemetry: n.model.idle,
		})
	}
	return st, nil
}

// decodeState reads a state file and checks what every reader relies on:
// a version this package knows and UUIDs that name one device each. Errors
// name the field and the value; callers add the file.
func decodeState(raw []byte) (*state, error) {
	var st state
	if err := json.Unmarshal(raw, &st); err != nil {
		return nil, err
	}
	if st.Version != stateVersion {
		return nil, fmt.Errorf("version: %d: this gpumux reads simulated node state of version %d only (written by another gpumux?); remove the node's directory to start a fresh node", st.Version, stateVersion)
	}
	seen := map[string]string{} // UUID → where it was seen
	for i, g := range st.GPUs {
		if g == nil {
			return nil, fmt.Errorf("gpus[%d]: null: want a GPU", i)
		}
		field := fmt.Sprintf("gpus[%d].uuid", i)
		if prev, dup := seen[g.UUID]; dup {
			return nil, fmt.Errorf("%s: %q: %s has that UUID too; each GPU and MIG device has a UUID of its own", field, g.UUID, prev)
		}
		seen[g.UUID] = field
		for j, gi := range g.GIs {
			if gi == nil {
				return nil, fmt.Errorf("gpus[%d].gpuInstances[%d]: null: want a GPU instance", i, j)
			}
			for k, ci := range gi.CIs {
				field := fmt.Sprintf("gpus[%d].gpuInstances[%d].computeInstances[%d].uuid", i, j, k)
				if ci == nil {
					return nil, fmt.Errorf("%s: null: want a compute instance", strings.TrimSuffix(field, ".uuid"))
				}
				if prev, dup := seen[ci.UUID]; dup {
					return nil, fmt.Errorf("%s: %q: %s has that UUID too; each GPU and MIG device has a UUID of its own", field, ci.UUID, prev)
				}
				seen[ci.UUID] = field
			}
		}
	}
	return &st, nil
}

// Reads are cheap: every NVML call stats the state file and rereads it only
// when its version changed. A version is the file's (device, inode, size,
// mtime, ctime). Writers never modify the file in place: they write a new
// file and rename it over the old one (a new inode), and stamp it with an
// mtime strictly after the mtime of the version it replaces (stampAfter), so
// two versions never look the same even when an inode number is reused and
// the size is unchanged.

// fileVersion identifies one version of the state file.
type fileVersion struct {
	dev, ino     uint64
	size         int64
	mtime, ctime int64 // nanoseconds since the epoch
}

func versionOf(s *unix.Stat_t) fileVersion {
	return fileVersion{
		dev:   uint64(s.Dev),
		ino:   uint64(s.Ino),
		size:  int64(s.Size),
		mtime: s.Mtim.Nano(),
		ctime: s.Ctim.Nano(),
	}
}

// statVersion returns the version of the file at path.
func statVersion(path string) (fileVersion, error) {
	var s unix.Stat_t
	err := unix.Stat(path, &s)
	for err == unix.EINTR {
		err = unix.Stat(path, &s)
	}
	if err != nil {
		return fileVersion{}, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	return versionOf(&s), nil
}

// readState reads the state file and the version it read (from the open
// file, so the two match).
func readState(path string) ([]byte, fileVersion, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fileVersion{}, err
	}
	defer f.Close()
	var s unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &s); err != nil {
		return nil, fileVersion{}, &fs.PathError{Op: "fstat", Path: path, Err: err}
	}
	var buf bytes.Buffer
	buf.Grow(int(s.Size) + 512)
	if _, err := buf.ReadFrom(f); err != nil {
		return nil, fileVersion{}, err
	}
	return buf.Bytes(), versionOf(&s), nil
}

// refreshLocked reloads the state when the file changed. n.mu must be held.
func (n *Node) refreshLocked() error {
	ver, err := statVersion(n.statePath)
	if err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	if n.st != nil && ver == n.ver {
		return nil
	}
	raw, ver, err := readState(n.statePath)
	if err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	st, err := decodeState(raw)
	if err != nil {
		return fmt.Errorf("sim: %s: %w", n.statePath, err)
	}
	n.st, n.ver = st, ver
	n.pruneHandlesLocked()
	return nil
}

// saveLocked writes st atomically (temp file + rename) as the version after
// prev and makes it the cached state. n.mu and the file lock must be held.
func (n *Node) saveLocked(st *state, prev fileVersion) error {
	st.Generation++
	raw, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	raw = append(raw, '\n')
	stamp := func(tmp string) error { return stampAfter(tmp, prev.mtime) }
	if err := writeFileAtomic(n.statePath, raw, 0o644, stamp); err != nil {
		return err
	}
	ver, err := statVersion(n.statePath)
	if err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	n.st, n.ver = st, ver
	n.pruneHandlesLocked()
	return nil
}

// transact runs fn on a fresh copy of the state under the node's mutex and
// the exclusive file lock (lock, reload, mutate, save). The state is saved
// when fn succeeds, or when fn set st.forceSave.
func (n *Node) transact(fn func(st *state) error) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.transactLocked(fn)
}

func (n *Node) transactLocked(fn func(st *state) error) error {
	unlock, err := lockFile(n.lockPath)
	if err != nil {
		return err
	}
	defer unlock()
	raw, ver, err := readState(n.statePath)
	if err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	st, err := decodeState(raw)
	if err != nil {
		return fmt.Errorf("sim: %s: %w", n.statePath, err)
	}
	ferr := fn(st)
	if ferr == nil || st.forceSave {
		if err := n.saveLocked(st, ver); err != nil {
			return err
		}
		return ferr
	}
	// fn failed and may have half-changed st: keep the file's version.
	if ver != n.ver {
		if fresh, err := decodeState(raw); err == nil {
			n.st, n.ver = fresh, ver
			n.pruneHandlesLocked()
		}
	}
	return ferr
}

// nvmlError carries an NVML return code through transact.
type nvmlError nvml.Return

func (e nvmlError) Error() string { return nvml.Return(e).Error() }

// update is transact for NVML calls that change state: fn returns an NVML
// code, I/O errors become ERROR_UNKNOWN, and the library must be
// initialized. An injected fault (mutationFault) fires here, before fn.
func (n *Node) update(fn func(st *state) nvml.Return) nvml.Return {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.initCount == 0 {
		return nvml.ERROR_UNINITIALIZED
	}
	kill := false
	err := n.transactLocked(func(st *state) error {
		if f := st.Fault; f != nil {
			st.forceSave = true // the countdown is saved whatever fn does
			if f.Skip > 0 {
				f.Skip--
			} else {
				st.Fault = nil // fires once
				if f.Kill {
					kill = true
					return errKilled
				}
				return nvmlError(f.Return)
			}
		}
		if ret := fn(st); ret != nvml.SUCCESS {
			return nvmlError(ret)
		}
		return nil
	})
	if kill && errors.Is(err, errKilled) {
		// As a crash or kill -9 would: nothing after this call happens.
		unix.Kill(os.Getpid(), unix.SIGKILL)
		select {} // SIGKILL cannot be caught; wait for it to land
	}
	var ne nvmlError
	switch {
	case err == nil:
		return nvml.SUCCESS
	case errors.As(err, &ne):
		return nvml.Return(ne)
	default:
		return nvml.ERROR_UNKNOWN
	}
}

// view runs fn on the current state (reloaded if the file changed) for
// read-only NVML calls.
func (n *Node) view(fn func(st *state) nvml.Return) nvml.Return {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.initCount == 0 {
		return nvml.ERROR_UNINITIALIZED
	}
	if err := n.refreshLocked(); err != nil {
		return nvml.ERROR_UNKNOWN
	}
	return fn(n.st)
}

// pruneHandlesLocked forgets cached handles of instances that no longer
// exist (handles held by callers stay valid objects and report errors).
func (n *Node) pruneHandlesLocked() {
	serials := map[uint64]bool{}
	uuids := map[string]bool{}
	for _, g := range n.st.GPUs {
		for _, gi := range g.GIs {
			serials[gi.Serial] = true
			for _, ci := range gi.CIs {
				uuids[ci.UUID] = true
			}
		}
	}
	for s := range n.gis {
		if !serials[s] {
			delete(n.gis, s)
		}
	}
	for u := range n.cis {
		if !uuids[u] {
			delete(n.cis, u)
		}
	}
	for u := range n.migs {
		if !uuids[u] {
			delete(n.migs, u)
		}
	}
}

// lockFile takes an exclusive flock on path (per open file description, so
// it also excludes other Nodes of the same process) and returns its release.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("sim: flock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}

// writeFileAtomic writes data to a temp file in path's directory, calls
// prepare (if not nil) on the temp file, and renames it over path.
func writeFileAtomic(path string, data []byte, perm os.FileMode, prepare func(tmp string) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	cerr := f.Close()
	err = errors.Join(werr, cerr, os.Chmod(tmp, perm))
	if err == nil && prepare != nil {
		err = prepare(tmp)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("sim: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("sim: %w", err)
	}
	return nil
}

// stampAfter sets the mtime of the file at path to the current time, or to
// just after prevMtime (nanoseconds) if the clock is not past it, so that
// mtimes of successive state file versions strictly increase. On a file
// system that stores coarser timestamps than it was given, it moves the
// mtime to 2s after prevMtime's second instead.
func stampAfter(path string, prevMtime int64) error {
	t := time.Now()
	if t.UnixNano() <= prevMtime {
		t = time.Unix(0, prevMtime+1)
	}
	if err := os.Chtimes(path, t, t); err != nil {
		return err
	}
	fi, err := os.Stat(path)
	if err != nil || fi.ModTime().UnixNano() > prevMtime {
		return err
	}
	t = time.Unix(0, prevMtime).Truncate(time.Second).Add(2 * time.Second)
	return os.Chtimes(path, t, t)
}

// newUUID returns a random (version 4) UUID in canonical form.
func newUUID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("sim: %w", err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]), nil
}
