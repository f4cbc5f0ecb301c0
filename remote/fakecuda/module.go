package fakecuda

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/gpumux/gpumux/remote/proto"
)

// Magic is the first line of a fake module image.
const Magic = "gpumux-fake-module 1"

// Limits of the fake module format.
const (
	maxParamSize  = 4096
	maxParamBytes = 32764 // CUDA's limit on a kernel's parameters
	maxGlobalSize = 1 << 30
	maxName       = 255
)

// Kernel declares a kernel of a fake module.
type Kernel struct {
	Name string
	// Sizes are its parameters' byte sizes.
	Sizes []uint64
}

// Global declares a module global.
type Global struct {
	Name string
	Size uint64
}

// The kernels with behaviour, and their parameter sizes.
var (
	FillU32   = Kernel{Name: "fill_u32", Sizes: []uint64{8, 4, 8}}
	VecAddF32 = Kernel{Name: "vecadd_f32", Sizes: []uint64{8, 8, 8, 4}}
	Fault     = Kernel{Name: "fault"}
)

// ModuleImage returns the image of a module with these kernels and
// globals, NUL-terminated as the interposer sends it.
func ModuleImage(kernels []Kernel, globals []Global) []byte {
	var b strings.Builder
	b.WriteString(Magic + "\n")
	for _, k := range kernels {
		s := make([]string, len(k.Sizes))
		for i, n := range k.Sizes {
			s[i] = strconv.FormatUint(n, 10)
		}
		fmt.Fprintf(&b, "kernel %s %s\n", k.Name, strings.Join(s, ","))
	}
	for _, g := range globals {
		fmt.Fprintf(&b, "global %s %d\n", g.Name, g.Size)
	}
	return append([]byte(b.String()), 0)
}

type param struct{ offset, size uint64 }

type kernelDef struct {
	name   string
	params []param
}

type moduleDef struct {
	kernels []kernelDef
	globals []Global
}

// align is a parameter's alignment: the largest of 8, 4, 2, 1 dividing
// its size.
func align(size uint64) uint64 {
	for _, a := range []uint64{8, 4, 2} {
		if size%a == 0 {
			return a
		}
	}
	return 1
}

// layout places parameters of these sizes.
func layout(sizes []uint64) []param {
	var ps []param
	off := uint64(0)
	for _, n := range sizes {
		a := align(n)
		off = (off + a - 1) &^ (a - 1)
		ps = append(ps, param{off, n})
		off += n
	}
	return ps
}

func packedSize(ps []param) uint64 {
	if len(ps) == 0 {
		return 0
	}
	last := ps[len(ps)-1]
	return last.offset + last.size
}

// parseModule reads a fake module image.
func parseModule(img []byte) (*moduleDef, error) {
	img = bytes.TrimRight(img, "\x00")
	if bytes.IndexByte(img, 0) >= 0 {
		return nil, fmt.Errorf("a NUL byte inside the image")
	}
	lines := strings.Split(string(img), "\n")
	if strings.TrimRight(lines[0], "\r") != Magic {
		return nil, fmt.Errorf("the first line is not %q", Magic)
	}
	m := &moduleDef{}
	seen := map[string]bool{}
	for i, line := range lines[1:] {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		where := fmt.Sprintf("line %d", i+2)
		if len(f) < 2 || len(f[1]) > maxName {
			return nil, fmt.Errorf("%s: want \"kernel NAME [SIZES]\" or \"global NAME SIZE\"", where)
		}
		name := f[1]
		if seen[name] {
			return nil, fmt.Errorf("%s: %s declared twice", where, name)
		}
		seen[name] = true
		switch {
		case f[0] == "kernel" && len(f) <= 3:
			var sizes []uint64
			if len(f) == 3 {
				for s := range strings.SplitSeq(f[2], ",") {
					n, err := strconv.ParseUint(s, 10, 64)
					if err != nil || n == 0 || n > maxParamSize {
						return nil, fmt.Errorf("%s: parameter size %q: want 1 to %d", where, s, maxParamSize)
					}
					sizes = append(sizes, n)
				}
			}
			ps := layout(sizes)
			if packedSize(ps) > maxParamBytes {
				return nil, fmt.Errorf("%s: %d bytes of parameters, at most %d", where, packedSize(ps), maxParamBytes)
			}
			for _, k := range []Kernel{FillU32, VecAddF32} {
				if name == k.Name && !equal(sizes, k.Sizes) {
					return nil, fmt.Errorf("%s: %s takes parameters of sizes %v", where, name, k.Sizes)
				}
			}
			m.kernels = append(m.kernels, kernelDef{name: name, params: ps})
		case f[0] == "global" && len(f) == 3:
			n, err := strconv.ParseUint(f[2], 10, 64)
			if err != nil || n == 0 || n > maxGlobalSize {
				return nil, fmt.Errorf("%s: global size %q: want 1 to %d", where, f[2], maxGlobalSize)
			}
			m.globals = append(m.globals, Global{Name: name, Size: n})
		default:
			return nil, fmt.Errorf("%s: want \"kernel NAME [SIZES]\" or \"global NAME SIZE\"", where)
		}
	}
	return m, nil
}

func equal(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

type module struct {
	id      uintptr
	ctx     *context
	funcs   map[string]uintptr
	globals map[string]*allocation
}

type function struct {
	id  uintptr
	mod *module
	def kernelDef
	// set holds the attributes set with FuncSetAttribute.
	set map[int32]int32
}

// The settable function attributes and their bounds.
const (
	attrMaxDynamicShared  = 8      // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
	attrCarveout          = 9      // CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT
	maxDynamicSharedLimit = 232448 // an H200's shared memory per block, opt-in
)

// FuncSetAttribute sets CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
// (0 to an H200's 227 KiB) or PREFERRED_SHARED_MEMORY_CARVEOUT (-1 to 100);
// other attributes are CUDA_ERROR_INVALID_VALUE.
func (b *Backend) FuncSetAttribute(fn uintptr, attr, value int32) proto.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	f, _, r := b.function(fn)
	if r != proto.Success {
		return r
	}
	switch {
	case attr == attrMaxDynamicShared && value >= 0 && value <= maxDynamicSharedLimit:
	case attr == attrCarveout && value >= -1 && value <= 100:
	default:
		return proto.ErrInvalidValue
	}
	if f.set == nil {
		f.set = map[int32]int32{}
	}
	f.set[attr] = value
	return proto.Success
}

// OccupancyMaxActiveBlocks is 2048 threads per multiprocessor over the
// block size (at most 32 blocks), 0 when the block or the dynamic shared
// memory cannot fit.
func (b *Backend) OccupancyMaxActiveBlocks(fn uintptr, blockSize int32, dynamicSMem uint64, flags uint32) (int32, proto.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, _, r := b.function(fn); r != proto.Success {
		return 0, r
	}
	if blockSize <= 0 || flags > 1 {
		return 0, proto.ErrInvalidValue
	}
	if blockSize > 1024 || dynamicSMem > maxDynamicSharedLimit {
		return 0, proto.Success
	}
	return min(2048/blockSize, 32), proto.Success
}

// OccupancyAvailableDynamicSMem is an H200's 228 KiB of shared memory per
// multiprocessor (1 KiB reserved per block) shared by numBlocks blocks, at
// most the opt-in limit per block; 0 when the blocks cannot fit.
func (b *Backend) OccupancyAvailableDynamicSMem(fn uintptr, numBlocks, blockSize int32) (uint64, proto.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, _, r := b.function(fn); r != proto.Success {
		return 0, r
	}
	if numBlocks <= 0 || blockSize <= 0 {
		return 0, proto.ErrInvalidValue
	}
	if blockSize > 1024 || numBlocks*blockSize > 2048 {
		return 0, proto.Success
	}
	return min(uint64(233472/numBlocks-1024), maxDynamicSharedLimit), proto.Success
}

// ModuleLoadData loads a fake module image (see the package doc) into the
// current context; any other image is CUDA_ERROR_INVALID_IMAGE.
func (b *Backend) ModuleLoadData(image []byte) (uintptr, proto.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c, r := b.cur()
	if r != proto.Success {
		return 0, r
	}
	def, err := parseModule(image)
	if err != nil {
		return 0, proto.ErrInvalidImage
	}
	var need uint64
	for _, g := range def.globals {
		need += g.Size
	}
	if need > c.dev.total-c.dev.used {
		return 0, proto.ErrOutOfMemory
	}
	m := &module{id: b.newID(), ctx: c, funcs: map[string]uintptr{}, globals: map[string]*allocation{}}
	for _, g := range def.globals {
		a, ok := b.mem.add(g.Size, c, m)
		if !ok {
			b.unloadLocked(m.id, m)
			return 0, proto.ErrOutOfMemory
		}
		c.dev.used += g.Size
		m.globals[g.Name] = a
	}
	for _, k := range def.kernels {
		f := &function{id: b.newID(), mod: m, def: k}
		b.funcs[f.id] = f
		m.funcs[k.name] = f.id
	}
	b.mods[m.id] = m
	return m.id, proto.Success
}

// unloadLocked drops a module, its functions and globals.
func (b *Backend) unloadLocked(id uintptr, m *module) {
	for _, f := range m.funcs {
		delete(b.funcs, f)
	}
	for _, a := range m.globals {
		b.mem.remove(a)
		m.ctx.dev.used -= a.size
	}
	delete(b.mods, id)
}

// module returns a module of the current context; the caller holds mu.
func (b *Backend) module(id uintptr) (*module, proto.Result) {
	c, r := b.cur()
	if r != proto.Success {
		return nil, r
	}
	m := b.mods[id]
	if m == nil {
		return nil, proto.ErrInvalidHandle
	}
	if m.ctx != c {
		return nil, proto.ErrInvalidContext
	}
	return m, proto.Success
}

// ModuleUnload unloads a module of the current context.
func (b *Backend) ModuleUnload(id uintptr) proto.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	m, r := b.module(id)
	if r != proto.Success {
		return r
	}
	b.unloadLocked(id, m)
	return proto.Success
}

// ModuleGetFunction finds a kernel.
func (b *Backend) ModuleGetFunction(id uintptr, name string) (uintptr, proto.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	m, r := b.module(id)
	if r != proto.Success {
		return 0, r
	}
	f, ok := m.funcs[name]
	if !ok {
		return 0, proto.ErrNotFound
	}
	return f, proto.Success
}

// ModuleGetGlobal finds a global.
func (b *Backend) ModuleGetGlobal(id uintptr, name string) (proto.DevPtr, uint64, proto.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	m, r := b.module(id)
	if r != proto.Success {
		return 0, 0, r
	}
	a, ok := m.globals[name]
	if !ok {
		return 0, 0, proto.ErrNotFound
	}
	return proto.DevPtr(a.base), a.size, proto.Success
}

// function returns a function of the current context; the caller holds mu.
func (b *Backend) function(id uintptr) (*function, *context, proto.Result) {
	c, r := b.cur()
	if r != proto.Success {
		return nil, nil, r
	}
	f := b.funcs[id]
	if f == nil {
		return nil, nil, proto.ErrInvalidHandle
	}
	if f.mod.ctx != c {
		return nil, nil, proto.ErrInvalidContext
	}
	return f, c, proto.Success
}

// FuncParamInfo reports a kernel parameter's offset and size.
func (b *Backend) FuncParamInfo(fn uintptr, index uint64) (offset, size uint64, r proto.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f, _, r := b.function(fn)
	if r != proto.Success {
		return 0, 0, r
	}
	if index >= uint64(len(f.def.params)) {
		return 0, 0, proto.ErrInvalidValue
	}
	p := f.def.params[index]
	return p.offset, p.size, proto.Success
}

// FuncGetAttribute reports a CUfunction_attribute.
func (b *Backend) FuncGetAttribute(attr int32, fn uintptr) (int32, proto.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f, _, r := b.function(fn)
	if r != proto.Success {
		return 0, r
	}
	if v, set := f.set[attr]; set {
		return v, proto.Success
	}
	v, ok := map[int32]int32{
		0: 1024,  // MAX_THREADS_PER_BLOCK
		1: 0,     // SHARED_SIZE_BYTES
		2: 0,     // CONST_SIZE_BYTES
		3: 0,     // LOCAL_SIZE_BYTES
		4: 32,    // NUM_REGS
		5: 90,    // PTX_VERSION
		6: 90,    // BINARY_VERSION
		7: 0,     // CACHE_MODE_CA
		8: 49152, // MAX_DYNAMIC_SHARED_SIZE_BYTES
		9: -1,    // PREFERRED_SHARED_MEMORY_CARVEOUT
	}[attr]
	if !ok {
		return 0, proto.ErrInvalidValue
	}
	return v, proto.Success
}

// Launch records one kernel launch.
type Launch struct {
	Kernel      string
	Ctx         uintptr
	Grid, Block [3]uint32
	SharedMem   uint32
	Stream      uintptr
	Params      []byte
	// Attrs are a cuLaunchKernelEx's launch attributes (nil for
	// cuLaunchKernel).
	Attrs  []proto.LaunchAttr
	Result proto.Result
}

// Launches returns the launches so far, oldest first.
func (b *Backend) Launches() []Launch {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Launch(nil), b.launches...)
}

// maxLaunches bounds the launch record; older launches are dropped.
const maxLaunches = 4096

// LaunchKernel runs (or records) a kernel of the current context.
func (b *Backend) LaunchKernel(fn uintptr, grid, block [3]uint32, sharedMem uint32, stream uintptr, params []byte) proto.Result {
	return b.launch(fn, grid, block, sharedMem, stream, nil, params)
}

// LaunchKernelEx is LaunchKernel with launch attributes, checked as
// checkLaunchAttrs does.
func (b *Backend) LaunchKernelEx(fn uintptr, grid, block [3]uint32, sharedMem uint32, stream uintptr, attrs []proto.LaunchAttr, params []byte) proto.Result {
	if attrs == nil {
		attrs = []proto.LaunchAttr{}
	}
	return b.launch(fn, grid, block, sharedMem, stream, attrs, params)
}

func (b *Backend) launch(fn uintptr, grid, block [3]uint32, sharedMem uint32, stream uintptr, attrs []proto.LaunchAttr, params []byte) proto.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	f, c, r := b.function(fn)
	if r != proto.Success {
		return r
	}
	if r := b.checkStream(c, stream); r != proto.Success {
		return r
	}
	for i := range 3 {
		if grid[i] == 0 || block[i] == 0 {
			return proto.ErrInvalidValue
		}
	}
	if uint64(block[0])*uint64(block[1])*uint64(block[2]) > 1024 || block[2] > 64 {
		return proto.ErrInvalidValue
	}
	if uint64(len(params)) != packedSize(f.def.params) {
		return proto.ErrInvalidValue
	}
	if _, r := b.checkLaunchAttrs(grid, attrs); r != proto.Success {
		return r
	}
	sc, r := b.capturing(c, stream)
	if r != proto.Success {
		return r
	}
	if sc != nil {
		return b.record(sc, op{kind: opKernel, fn: f, grid: grid, block: block, shared: sharedMem,
			params: append([]byte(nil), params...), attrs: attrs})
	}
	r = b.run(c, f.def, params)
	b.recordLaunch(Launch{
		Kernel: f.def.name, Ctx: c.id, Grid: grid, Block: block, SharedMem: sharedMem,
		Stream: stream, Params: append([]byte(nil), params...), Attrs: attrs, Result: r,
	})
	return r
}

// recordLaunch adds a launch that ran to the record; the caller holds mu.
func (b *Backend) recordLaunch(l Launch) {
	if len(b.launches) == maxLaunches {
		b.launches = append(b.launches[:0], b.launches[1:]...)
	}
	b.launches = append(b.launches, l)
}

// maxClusterSize is CUDA's portable cluster size limit.
const maxClusterSize = 8

// checkLaunchAttrs checks launch attributes as an H200 would and returns
// the cluster size they ask for (1 without a cluster dimension): a cluster
// dimension must divide the grid and hold at most maxClusterSize blocks;
// cooperative and programmatic serialization are 0 or 1, a scheduling
// policy 0 to 2, a memory sync domain 0 or 1; an event must be one of the
// current context's. Any other attribute is CUDA_ERROR_INVALID_VALUE (the
// server passes on no other). The caller holds mu.
func (b *Backend) checkLaunchAttrs(grid [3]uint32, attrs []proto.LaunchAttr) (uint32, proto.Result) {
	size := uint32(1)
	for i := range attrs {
		a := &attrs[i]
		switch a.ID {
		case proto.LaunchAttrClusterDimension:
			d := a.ClusterDim()
			n := uint64(1)
			for j := range 3 {
				if d[j] == 0 || grid[j]%d[j] != 0 {
					return 0, proto.ErrInvalidValue
				}
				n *= uint64(d[j])
			}
			if n > maxClusterSize {
				return 0, proto.ErrInvalidValue
			}
			size = uint32(n)
		case proto.LaunchAttrCooperative, proto.LaunchAttrProgrammaticStreamSerialization, proto.LaunchAttrMemSyncDomain:
			if a.U32(0) > 1 {
				return 0, proto.ErrInvalidValue
			}
		case proto.LaunchAttrClusterSchedulingPolicy:
			if a.U32(0) > 2 {
				return 0, proto.ErrInvalidValue
			}
		case proto.LaunchAttrPriority, proto.LaunchAttrMemSyncDomainMap, proto.LaunchAttrPreferredSharedMemoryCarveout:
		case proto.LaunchAttrProgrammaticEvent, proto.LaunchAttrLaunchCompletionEvent:
			if _, _, r := b.ownEvent(uintptr(a.U64())); r != proto.Success {
				return 0, r
			}
		default:
			return 0, proto.ErrInvalidValue
		}
	}
	return size, proto.Success
}

// fakeSMs is an H200's multiprocessor count (attrs.go).
const fakeSMs = 132

// OccupancyMaxActiveClusters is the multiprocessors' blocks (as
// OccupancyMaxActiveBlocks counts them per multiprocessor) over the cluster
// size the attributes ask for; 0 when a block cannot fit.
func (b *Backend) OccupancyMaxActiveClusters(fn uintptr, grid, block [3]uint32, sharedMem uint32, stream uintptr, attrs []proto.LaunchAttr) (int32, proto.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, c, r := b.function(fn)
	if r != proto.Success {
		return 0, r
	}
	if r := b.checkStream(c, stream); r != proto.Success {
		return 0, r
	}
	size, r := b.checkLaunchAttrs(grid, attrs)
	if r != proto.Success {
		return 0, r
	}
	threads := uint64(block[0]) * uint64(block[1]) * uint64(block[2])
	if threads == 0 {
		return 0, proto.ErrInvalidValue
	}
	if threads > 1024 || sharedMem > maxDynamicSharedLimit {
		return 0, proto.Success
	}
	perSM := min(2048/int32(threads), 32)
	return fakeSMs / int32(size) * perSM, proto.Success
}

// OccupancyMaxPotentialClusterSize is the portable limit, 8, for a block
// that fits (0 otherwise).
func (b *Backend) OccupancyMaxPotentialClusterSize(fn uintptr, grid, block [3]uint32, sharedMem uint32, stream uintptr, attrs []proto.LaunchAttr) (int32, proto.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, c, r := b.function(fn)
	if r != proto.Success {
		return 0, r
	}
	if r := b.checkStream(c, stream); r != proto.Success {
		return 0, r
	}
	if _, r := b.checkLaunchAttrs(grid, attrs); r != proto.Success {
		return 0, r
	}
	threads := uint64(block[0]) * uint64(block[1]) * uint64(block[2])
	if threads == 0 {
		return 0, proto.ErrInvalidValue
	}
	if threads > 1024 || sharedMem > maxDynamicSharedLimit {
		return 0, proto.Success
	}
	return maxClusterSize, proto.Success
}

// run executes the kernels with behaviour; the caller holds mu.
func (b *Backend) run(c *context, k kernelDef, params []byte) proto.Result {
	arg := func(i int) uint64 {
		p := k.params[i]
		v := make([]byte, 8)
		copy(v, params[p.offset:p.offset+p.size])
		return binary.LittleEndian.Uint64(v)
	}
	// span returns the bytes [p, p+n) that c's kernels may access with
	// need: each piece lies in memory of c or of a peer whose access c
	// enabled (allocations and mappings alike), and mappings grant c's
	// device need (cuMemSetAccess).
	span := func(p, n uint64, need uint32) (region, bool) {
		reg, ok := b.mem.region(p, n)
		if !ok || !reg.allows(c.dev.index, need) {
			return nil, false
		}
		for _, pc := range reg {
			if !c.canReach(pc.a.ctx) {
				return nil, false
			}
		}
		return reg, true
	}
	switch k.name {
	case Fault.Name:
		return proto.ErrIllegalAddress
	case FillU32.Name:
		dst, v, n := arg(0), uint32(arg(1)), arg(2)
		if n > math.MaxUint64/4 {
			return proto.ErrIllegalAddress
		}
		reg, ok := span(dst, 4*n, accessReadWrite)
		if !ok || dst%4 != 0 {
			return proto.ErrIllegalAddress
		}
		reg.fill([4]byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)})
	case VecAddF32.Name:
		n := arg(3) & 0xffffffff
		pa, pb, pc := arg(0), arg(1), arg(2)
		aa, ok1 := span(pa, 4*n, accessRead)
		ba, ok2 := span(pb, 4*n, accessRead)
		ca, ok3 := span(pc, 4*n, accessReadWrite)
		if !ok1 || !ok2 || !ok3 || (pa|pb|pc)%4 != 0 {
			return proto.ErrIllegalAddress
		}
		const chunk = 16 << 10
		x, y := make([]byte, 4*chunk), make([]byte, 4*chunk)
		for i := uint64(0); i < n; i += chunk {
			m := min(n-i, chunk)
			aa.readAt(4*i, x[:4*m])
			ba.readAt(4*i, y[:4*m])
			for j := range m {
				s := math.Float32frombits(binary.LittleEndian.Uint32(x[4*j:])) +
					math.Float32frombits(binary.LittleEndian.Uint32(y[4*j:]))
				binary.LittleEndian.PutUint32(x[4*j:], math.Float32bits(s))
			}
			ca.writeAt(4*i, x[:4*m])
		}
	}
	return proto.Success
}

// Limits are an H200's defaults by CUlimit: stack size, printf FIFO,
// malloc heap, device runtime sync depth, pending launches, L2 fetch
// granularity, persisting L2 cache size.
var Limits = map[uint32]uint64{0: 1024, 1: 1 << 20, 2: 8 << 20, 3: 2, 4: 2048, 5: 64, 6: 0}

// CtxGetLimit answers the current context's value: what CtxSetLimit set,
// else Limits; another limit is CUDA_ERROR_INVALID_VALUE (CUDA's
// CUDA_ERROR_UNSUPPORTED_LIMIT is 215).
func (b *Backend) CtxGetLimit(limit uint32) (uint64, proto.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c, r := b.cur()
	if r != proto.Success {
		return 0, r
	}
	if v, set := c.limits[limit]; set {
		return v, proto.Success
	}
	v, ok := Limits[limit]
	if !ok {
		return 0, proto.ErrInvalidValue
	}
	return v, proto.Success
}

// CtxSetLimit sets a limit of the current context: any of Limits but the
// device runtime's sync depth (3), which CUDA 12's device runtime no
// longer has (CUDA_ERROR_UNSUPPORTED_LIMIT). The stack size is rounded up
// to 16 bytes, as drivers round it.
func (b *Backend) CtxSetLimit(limit uint32, value uint64) proto.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	c, r := b.cur()
	if r != proto.Success {
		return r
	}
	if _, ok := Limits[limit]; !ok || limit == 3 {
		return proto.ErrUnsupportedLimit
	}
	if limit == 0 {
		value = (value + 15) &^ 15
	}
	if c.limits == nil {
		c.limits = map[uint32]uint64{}
	}
	c.limits[limit] = value
	return proto.Success
}
