package fakecuda

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"

	"github.com/gpumux/gpumux/remote/proto"
)

// DriverVersion is the CUDA version the fake driver reports (12.8).
const DriverVersion = 12080

// Defaults of New.
const (
	DefaultDevices = 1
	DefaultMemory  = 16 << 30
	DefaultName    = "gpumux fake GPU"
)

// Option configures New.
type Option func(*config)

type config struct {
	devices    int
	devicesSet bool // WithDevices was given
	memory     uint64
	name       string
	uuids      []string
}

// WithDevices sets the number of fake devices (at least 1).
func WithDevices(n int) Option { return func(c *config) { c.devices, c.devicesSet = n, true } }

// WithMemory sets each device's memory in bytes.
func WithMemory(bytes uint64) Option { return func(c *config) { c.memory = bytes } }

// WithName sets the devices' name (cuDeviceGetName).
func WithName(name string) Option { return func(c *config) { c.name = name } }

// WithUUIDs gives the devices these UUIDs, written as NVML writes them
// (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx), one per device in order,
// instead of UUIDs derived from the device index: fake servers standing in
// for different GPUs (a server per simulated GPU node) then tell their GPUs
// apart, as real ones do. With WithDevices the counts must agree; without
// it, the list sets the number of devices.
func WithUUIDs(uuids ...string) Option { return func(c *config) { c.uuids = uuids } }

// parseUUID reads a UUID as NVML writes it: "GPU-" and 32 hex digits in
// groups of 8-4-4-4-12.
func parseUUID(s string) ([16]byte, error) {
	var u [16]byte
	groups := strings.Split(strings.TrimPrefix(s, "GPU-"), "-")
	if !strings.HasPrefix(s, "GPU-") || len(groups) != 5 || len(groups[0]) != 8 || len(groups[1]) != 4 ||
		len(groups[2]) != 4 || len(groups[3]) != 4 || len(groups[4]) != 12 {
		return u, fmt.Errorf("fakecuda: UUID %q: want GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (hex digits)", s)
	}
	if _, err := hex.Decode(u[:], []byte(strings.Join(groups, ""))); err != nil {
		return u, fmt.Errorf("fakecuda: UUID %q: want GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (hex digits): %w", s, err)
	}
	return u, nil
}

// Backend is the fake driver. The zero value is not usable: call New.
type Backend struct {
	mu sync.Mutex

	initialized bool
	devs        []*device
	// current is each OS thread's current context (absent: none).
	current map[int]uintptr

	ctxs    map[uintptr]*context
	mods    map[uintptr]*module
	funcs   map[uintptr]*function
	streams map[uintptr]*stream
	events  map[uintptr]*event
	nextID  uintptr

	mem      addressSpace
	reserved map[uint64]*reservation // by base
	phys     map[uint64]*physical
	pools    map[uintptr]*pool
	launches []Launch
	implicit int

	// Stream capture and graphs (graph.go).
	graphs      map[uintptr]*graph
	nodes       map[uintptr]*node
	execs       map[uintptr]*exec
	captures    map[streamKey]*streamCapture // the streams taking part in a capture
	live        map[uint64]*capture          // the captures not ended, by ID
	nextCapture uint64
	modes       map[int]int32 // threads' capture interaction modes, by tid (absent: global)
}

type device struct {
	index int32
	name  string
	total uint64
	used  uint64
	uuid  [16]byte
}

type context struct {
	id     uintptr
	dev    *device
	flags  uint32
	limits map[uint32]uint64 // CtxSetLimit's values
	// peers are the contexts whose memory this one's kernels may access
	// (CtxEnablePeerAccess).
	peers map[*context]bool
}

// New returns a fake driver with its devices. It is not initialised: call
// Init first, as with CUDA.
func New(opts ...Option) (*Backend, error) {
	cfg := config{devices: DefaultDevices, memory: DefaultMemory, name: DefaultName}
	for _, o := range opts {
		o(&cfg)
	}
	uuids := make([][16]byte, len(cfg.uuids))
	seen := map[[16]byte]bool{}
	for i, s := range cfg.uuids {
		u, err := parseUUID(s)
		if err != nil {
			return nil, err
		}
		if seen[u] {
			return nil, fmt.Errorf("fakecuda: UUID %q given twice: each device needs its own", s)
		}
		seen[u] = true
		uuids[i] = u
	}
	switch {
	case len(uuids) > 0 && !cfg.devicesSet:
		cfg.devices = len(uuids)
	case len(uuids) > 0 && len(uuids) != cfg.devices:
		return nil, fmt.Errorf("fakecuda: %d UUIDs for %d devices: give one per device", len(uuids), cfg.devices)
	}
	if cfg.devices < 1 || cfg.devices > 64 {
		return nil, fmt.Errorf("fakecuda: %d devices, want 1 to 64", cfg.devices)
	}
	if cfg.memory < 1<<20 {
		return nil, fmt.Errorf("fakecuda: %d bytes of device memory, want at least 1 MiB", cfg.memory)
	}
	if cfg.name == "" || len(cfg.name) > 255 {
		return nil, fmt.Errorf("fakecuda: device name %q: want 1 to 255 bytes", cfg.name)
	}
	b := &Backend{
		current:  map[int]uintptr{},
		ctxs:     map[uintptr]*context{},
		mods:     map[uintptr]*module{},
		funcs:    map[uintptr]*function{},
		streams:  map[uintptr]*stream{},
		events:   map[uintptr]*event{},
		graphs:   map[uintptr]*graph{},
		nodes:    map[uintptr]*node{},
		execs:    map[uintptr]*exec{},
		captures: map[streamKey]*streamCapture{},
		live:     map[uint64]*capture{},
		modes:    map[int]int32{},
		// Raw object values look nothing like the server's handles
		// (0x1000...), so a test notices one leaking through.
		nextID:   0x5eed_0000_0000,
		mem:      newAddressSpace(),
		reserved: map[uint64]*reservation{},
		phys:     map[uint64]*physical{},
		pools:    map[uintptr]*pool{},
	}
	for i := range cfg.devices {
		var u [16]byte
		if len(uuids) > 0 {
			u = uuids[i]
		} else {
			sum := sha256.Sum256(fmt.Appendf(nil, "gpumux-fakecuda/device/%d", i))
			copy(u[:], sum[:16])
			u[6] = u[6]&0x0f | 0x40 // an RFC 4122 version 4 layout
			u[8] = u[8]&0x3f | 0x80
		}
		b.devs = append(b.devs, &device{index: int32(i), name: cfg.name, total: cfg.memory, uuid: u})
	}
	return b, nil
}

func (b *Backend) newID() uintptr {
	b.nextID += 0x10
	return b.nextID
}

// dev returns device d; the caller holds mu.
func (b *Backend) dev(d int32) (*device, proto.Result) {
	if !b.initialized {
		return nil, proto.ErrNotInitialized
	}
	if d < 0 || int(d) >= len(b.devs) {
		return nil, proto.ErrInvalidDevice
	}
	return b.devs[d], proto.Success
}

// cur returns the calling thread's current context; the caller holds mu.
func (b *Backend) cur() (*context, proto.Result) {
	if !b.initialized {
		return nil, proto.ErrNotInitialized
	}
	c := b.ctxs[b.current[gettid()]]
	if c == nil {
		return nil, proto.ErrInvalidContext
	}
	return c, proto.Success
}

// Init initialises the driver.
func (b *Backend) Init() proto.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.initialized = true
	return proto.Success
}

// DriverVersion reports DriverVersion.
func (b *Backend) DriverVersion() (int32, proto.Result) { return DriverVersion, proto.Success }

// DeviceCount reports the number of fake devices.
func (b *Backend) DeviceCount() (int32, proto.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.initialized {
		return 0, proto.ErrNotInitialized
	}
	return int32(len(b.devs)), proto.Success
}

// DeviceName reports a device's name.
func (b *Backend) DeviceName(d int32) (string, proto.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	dev, r := b.dev(d)
	if r != proto.Success {
		return "", r
	}
	return dev.name, proto.Success
}

// DeviceTotalMem reports a device's memory.
func (b *Backend) DeviceTotalMem(d int32) (uint64, proto.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	dev, r := b.dev(d)
	if r != proto.Success {
		return 0, r
	}
	return dev.total, proto.Success
}

// DeviceAttribute reports a CUdevice_attribute (see attrs.go).
func (b *Backend) DeviceAttribute(attr, d int32) (int32, proto.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	dev, r := b.dev(d)
	if r != proto.Success {
		return 0, r
	}
	return attribute(attr, dev)
}

// DeviceUUID reports a device's stable UUID.
func (b *Backend) DeviceUUID(d int32) ([16]byte, proto.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	dev, r := b.dev(d)
	if r != proto.Success {
		return [16]byte{}, r
	}
	return dev.uuid, proto.Success
}

// CtxCreate makes a context on device d. Unlike cuCtxCreate it does not
// make it current: the server sets contexts explicitly.
func (b *Backend) CtxCreate(d int32, flags uint32) (uintptr, proto.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	dev, r := b.dev(d)
	if r != proto.Success {
		return 0, r
	}
	if flags > 0xff {
		return 0, proto.ErrInvalidValue
	}
	c := &context{id: b.newID(), dev: dev, flags: flags}
	b.ctxs[c.id] = c
	return c.id, proto.Success
}

// CtxDestroy destroys a context and what is left in it (counted in
// Stats.ImplicitFrees). A thread that had it current has none after.
func (b *Backend) CtxDestroy(ctx uintptr) proto.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.initialized {
		return proto.ErrNotInitialized
	}
	c := b.ctxs[ctx]
	if c == nil {
		return proto.ErrInvalidContext
	}
	for _, a := range b.mem.owned(c) {
		switch {
		case a.phys != nil: // a mapping: the device's, not the context's
			continue
		case a.pool != nil:
			b.implicit++
			b.poolFree(a)
			continue
		case a.module == nil:
			b.implicit++
		}
		b.mem.remove(a)
		c.dev.used -= a.size
	}
	for id, m := range b.mods {
		if m.ctx == c {
			b.implicit++
			b.unloadLocked(id, m)
		}
	}
	for id, s := range b.streams {
		if s.ctx == c {
			b.implicit++
			delete(b.streams, id)
		}
	}
	for id, e := range b.events {
		if e.ctx == c {
			b.implicit++
			delete(b.events, id)
		}
	}
	b.dropContextGraphs(c)
	for tid, cur := range b.current {
		if cur == ctx {
			delete(b.current, tid)
		}
	}
	for _, o := range b.ctxs {
		delete(o.peers, c)
	}
	delete(b.ctxs, ctx)
	return proto.Success
}

// CtxSetCurrent makes ctx the calling thread's current context (0: none).
func (b *Backend) CtxSetCurrent(ctx uintptr) proto.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.initialized {
		return proto.ErrNotInitialized
	}
	tid := gettid()
	if ctx == 0 {
		delete(b.current, tid)
		return proto.Success
	}
	if b.ctxs[ctx] == nil {
		return proto.ErrInvalidContext
	}
	b.current[tid] = ctx
	return proto.Success
}

// CtxSynchronize waits for nothing: everything the fake does is
// synchronous. It still needs a current context, and none of its streams
// may be capturing (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, which
// invalidates the captures).
func (b *Backend) CtxSynchronize() proto.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	c, r := b.cur()
	if r != proto.Success {
		return r
	}
	for k, sc := range b.captures {
		if k.ctx == c {
			b.invalidate(sc.cap)
			r = proto.ErrStreamCaptureUnsupported
		}
	}
	return r
}

// Stats counts the fake's live objects.
type Stats struct {
	Contexts, Allocations, Modules, Functions, Streams, Events int
	// AllocatedBytes is the size of the live MemAlloc and pool allocations
	// (module globals and mappings excluded).
	AllocatedBytes uint64
	// Virtual memory: reservations, physical allocations (and their
	// bytes) and mappings.
	Reservations, Physical, Mappings int
	PhysicalBytes                    uint64
	// Pools counts the live pools (destroyed ones with live allocations
	// included).
	Pools int
	// ImplicitFrees counts the allocations, modules, streams and events
	// that CtxDestroy freed because they were still alive.
	ImplicitFrees int
	// ThreadsWithContext counts the OS threads with a current context.
	ThreadsWithContext int
	// Graphs, GraphExecs and Captures count the live graphs (a capture's
	// included), executable graphs and captures not ended.
	Graphs, GraphExecs, Captures int
}

// Stats returns the live object counts.
func (b *Backend) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := Stats{
		Contexts:           len(b.ctxs),
		Modules:            len(b.mods),
		Functions:          len(b.funcs),
		Streams:            len(b.streams),
		Events:             len(b.events),
		ImplicitFrees:      b.implicit,
		ThreadsWithContext: len(b.current),
		Graphs:             len(b.graphs),
		GraphExecs:         len(b.execs),
		Captures:           len(b.live),
	}
	s.Reservations, s.Physical, s.Pools = len(b.reserved), len(b.phys), len(b.pools)
	for _, ph := range b.phys {
		s.PhysicalBytes += ph.size
	}
	dying := map[*pool]bool{}
	for _, a := range b.mem.allocs {
		switch {
		case a.phys != nil:
			s.Mappings++
		case a.module == nil:
			s.Allocations++
			s.AllocatedBytes += a.size
			if a.pool != nil && a.pool.destroyed && !dying[a.pool] {
				dying[a.pool] = true
				s.Pools++
			}
		}
	}
	return s
}
