package fakecuda

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/gpumux/gpumux/remote/proto"
)

func TestParseModule(t *testing.T) {
	tests := []struct {
		name, img string
		want      string // the error, "" for none
	}{
		{"empty", "", "first line"},
		{"other format", "\x7fELF...", "first line"},
		{"magic only", Magic, ""},
		{"with NULs", Magic + "\nkernel k\n\x00\x00", ""},
		{"CRLF and comments", Magic + "\r\n# c\r\n\r\nkernel k 4\r\nglobal g 8\r\n", ""},
		{"a NUL inside", Magic + "\nkernel k\x00\nkernel j\n", "NUL"},
		{"unknown line", Magic + "\nbogus line\n", "line 2"},
		{"kernel without name", Magic + "\nkernel\n", "line 2"},
		{"size zero", Magic + "\nkernel k 4,0\n", `size "0"`},
		{"size not a number", Magic + "\nkernel k 4,x\n", `size "x"`},
		{"size too big", Magic + "\nkernel k 4097\n", "4097"},
		{"too many bytes", Magic + "\nkernel k " + strings.Repeat("4096,", 8) + "4096\n", "bytes of parameters"},
		{"extra field", Magic + "\nkernel k 4 8\n", "line 2"},
		{"twice", Magic + "\nkernel k\nglobal k 4\n", "declared twice"},
		{"global without size", Magic + "\nglobal g\n", "line 2"},
		{"global of zero", Magic + "\nglobal g 0\n", `global size "0"`},
		{"fill_u32 of other sizes", Magic + "\nkernel fill_u32 8,4,4\n", "fill_u32 takes"},
		{"vecadd_f32 without parameters", Magic + "\nkernel vecadd_f32\n", "vecadd_f32 takes"},
		{"fault with any", Magic + "\nkernel fault 1,2,3\n", ""},
		{"wrong version", "gpumux-fake-module 2\n", "first line"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseModule([]byte(tt.img))
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("parseModule: %v, want %q", err, tt.want)
			}
		})
	}
}

func TestLayout(t *testing.T) {
	tests := []struct {
		sizes []uint64
		want  []param
		total uint64
	}{
		{nil, nil, 0},
		{[]uint64{8, 4, 8}, []param{{0, 8}, {8, 4}, {16, 8}}, 24},
		{[]uint64{8, 8, 8, 4}, []param{{0, 8}, {8, 8}, {16, 8}, {24, 4}}, 28},
		{[]uint64{1, 8, 2, 4}, []param{{0, 1}, {8, 8}, {16, 2}, {20, 4}}, 24},
		{[]uint64{1, 3, 12, 16}, []param{{0, 1}, {1, 3}, {4, 12}, {16, 16}}, 32},
	}
	for _, tt := range tests {
		got := layout(tt.sizes)
		if len(got) != len(tt.want) || packedSize(got) != tt.total {
			t.Errorf("layout(%v) = %v (%d bytes), want %v (%d)", tt.sizes, got, packedSize(got), tt.want, tt.total)
			continue
		}
		for i := range got {
			if got[i] != tt.want[i] {
				t.Errorf("layout(%v) = %v, want %v", tt.sizes, got, tt.want)
			}
		}
	}
}

// locked runs f on a goroutine locked to its own OS thread.
func locked(f func()) {
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer close(done)
		f()
	}()
	<-done
}

func newFake(t *testing.T, opts ...Option) *Backend {
	t.Helper()
	b, err := New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	if r := b.Init(); r != proto.Success {
		t.Fatal(r)
	}
	return b
}

func must[T any](t *testing.T, what string) func(T, proto.Result) T {
	return func(v T, r proto.Result) T {
		t.Helper()
		if r != proto.Success {
			t.Fatalf("%s: %v", what, r)
		}
		return v
	}
}

func TestNew(t *testing.T) {
	for _, opts := range [][]Option{{WithDevices(0)}, {WithDevices(65)}, {WithMemory(1 << 19)}, {WithName("")}} {
		if _, err := New(opts...); err == nil {
			t.Errorf("New accepted %d options it should refuse", len(opts))
		}
	}
	b, err := New(WithDevices(2), WithName("x"))
	if err != nil {
		t.Fatal(err)
	}
	if _, r := b.DeviceCount(); r != proto.ErrNotInitialized {
		t.Errorf("before Init: %v", r)
	}
	b.Init()
	u0 := must[[16]byte](t, "uuid")(b.DeviceUUID(0))
	u1 := must[[16]byte](t, "uuid")(b.DeviceUUID(1))
	again, _ := New(WithDevices(2))
	again.Init()
	if u0 == u1 || u0 != must[[16]byte](t, "uuid")(again.DeviceUUID(0)) {
		t.Error("UUIDs are not distinct per device and stable across fakes")
	}
	for attr, want := range map[int32]int32{75: 9, 76: 0, 16: 132, 10: 32} {
		if v := must[int32](t, "attribute")(b.DeviceAttribute(attr, 1)); v != want {
			t.Errorf("attribute %d = %d, want %d", attr, v, want)
		}
	}
	if _, r := b.DeviceAttribute(0, 0); r != proto.ErrInvalidValue {
		t.Errorf("attribute 0: %v", r)
	}
	if _, r := b.DeviceName(2); r != proto.ErrInvalidDevice {
		t.Errorf("device 2: %v", r)
	}
}

func TestNewWithUUIDs(t *testing.T) {
	const a, b = "GPU-0a1b2c3d-4e5f-4a6b-8c7d-0123456789ab", "GPU-ffffffff-0000-4000-8000-000000000001"
	for _, tc := range []struct {
		opts []Option
		err  string // "" when New must accept them
	}{
		{[]Option{WithUUIDs(a, b)}, ""},
		{[]Option{WithUUIDs(a, b), WithDevices(2)}, ""},
		{[]Option{WithUUIDs(a), WithDevices(2)}, "1 UUIDs for 2 devices"},
		{[]Option{WithUUIDs(a, a)}, `UUID "` + a + `" given twice`},
		{[]Option{WithUUIDs("0a1b2c3d-4e5f-4a6b-8c7d-0123456789ab")}, "want GPU-xxxxxxxx"},
		{[]Option{WithUUIDs("GPU-0a1b2c3d4e5f4a6b8c7d0123456789ab")}, "want GPU-xxxxxxxx"},
		{[]Option{WithUUIDs("GPU-0a1b2c3d-4e5f-4a6b-8c7d-0123456789zz")}, "hex digits"},
	} {
		be, err := New(tc.opts...)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("New(%d options): error %v, want one containing %q", len(tc.opts), err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		be.Init()
		if n := must[int32](t, "count")(be.DeviceCount()); n != 2 {
			t.Errorf("%d devices, want 2", n)
		}
		for i, want := range []string{a, b} {
			u := must[[16]byte](t, "uuid")(be.DeviceUUID(int32(i)))
			if got := fmt.Sprintf("GPU-%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:]); got != want {
				t.Errorf("device %d: UUID %s, want %s", i, got, want)
			}
		}
	}
}

func TestContextsPerThread(t *testing.T) {
	b := newFake(t)
	c1 := must[uintptr](t, "ctx")(b.CtxCreate(0, 0))
	c2 := must[uintptr](t, "ctx")(b.CtxCreate(0, 0))
	var p1, p2 proto.DevPtr
	locked(func() {
		if _, r := b.MemAlloc(1); r != proto.ErrInvalidContext {
			t.Errorf("alloc without a context: %v", r)
		}
		b.CtxSetCurrent(c1)
		p1 = must[proto.DevPtr](t, "alloc")(b.MemAlloc(100))
		locked(func() {
			b.CtxSetCurrent(c2)
			p2 = must[proto.DevPtr](t, "alloc")(b.MemAlloc(100))
			if r := b.MemFree(p1); r != proto.ErrInvalidContext {
				t.Errorf("freeing another context's memory: %v", r)
			}
			b.CtxSetCurrent(0)
		})
		// This thread still has c1.
		if r := b.MemFree(p1); r != proto.Success {
			t.Errorf("free on the first thread: %v", r)
		}
		b.CtxSetCurrent(0)
	})
	if p1%256 != 0 || p2%256 != 0 || p2 < p1+100+addrGap {
		t.Errorf("allocations at %#x and %#x: want 256-aligned with a gap", p1, p2)
	}
	if st := b.Stats(); st.Allocations != 1 || st.ThreadsWithContext != 0 {
		t.Errorf("stats %+v", st)
	}
	b.CtxDestroy(c2)
	if st := b.Stats(); st.Allocations != 0 || st.ImplicitFrees != 1 || st.Contexts != 1 {
		t.Errorf("after destroying a context with an allocation: %+v", st)
	}
}

func TestMemory(t *testing.T) {
	b := newFake(t, WithMemory(1<<40)) // a terabyte costs nothing until written
	locked(func() {
		ctx := must[uintptr](t, "ctx")(b.CtxCreate(0, 0))
		b.CtxSetCurrent(ctx)
		defer b.CtxSetCurrent(0)
		big := must[proto.DevPtr](t, "alloc")(b.MemAlloc(1 << 39))
		end := big + 1<<39 - 8
		must[struct{}](t, "write at the end")(struct{}{}, b.MemcpyHtoD(end, []byte("12345678"), 0, false))
		got := make([]byte, 16)
		if r := b.MemcpyDtoH(got, end-8, 0); r != proto.Success || string(got) != "\x00\x00\x00\x00\x00\x00\x00\x0012345678" {
			t.Errorf("read back %q %v", got, r)
		}
		if r := b.MemcpyDtoH(got, end, 0); r != proto.ErrInvalidValue {
			t.Errorf("a read past the end: %v", r)
		}
		if _, r := b.MemAlloc(1 << 40); r != proto.ErrOutOfMemory {
			t.Errorf("past the device: %v", r)
		}
		free, total, _ := b.MemGetInfo()
		if total != 1<<40 || free != 1<<39 {
			t.Errorf("free %d of %d", free, total)
		}
		// Fills across a page boundary.
		p := must[proto.DevPtr](t, "alloc")(b.MemAlloc(3 * pageSize))
		if r := b.MemsetD32(p+pageSize-8, 0x01020304, 4, 0, false); r != proto.Success {
			t.Fatal(r)
		}
		got = make([]byte, 16)
		b.MemcpyDtoH(got, p+pageSize-8, 0)
		for i := range got {
			if want := byte(4 - i%4); got[i] != want {
				t.Fatalf("byte %d = %d, want %d", i, got[i], want)
			}
		}
		if r := b.MemsetD32(p+2, 0, 1, 0, false); r != proto.ErrInvalidValue {
			t.Errorf("misaligned D32: %v", r)
		}
		if r := b.MemcpyDtoD(p, p+pageSize-8, 16, 0, false); r != proto.Success {
			t.Error(r)
		}
		b.MemcpyDtoH(got, p, 0)
		if got[0] != 4 || got[15] != 1 {
			t.Errorf("D2D: %v", got)
		}
		if r := b.MemcpyHtoD(p, []byte{1}, 0x99, false); r != proto.ErrInvalidHandle {
			t.Errorf("an unknown stream: %v", r)
		}
	})
}

func TestKernels(t *testing.T) {
	b := newFake(t)
	img := ModuleImage([]Kernel{FillU32, VecAddF32, Fault, {Name: "noop"}}, []Global{{Name: "g", Size: 16}})
	other := must[uintptr](t, "ctx")(b.CtxCreate(0, 0))
	var foreign proto.DevPtr
	locked(func() {
		b.CtxSetCurrent(other)
		foreign = must[proto.DevPtr](t, "alloc")(b.MemAlloc(64))
		b.CtxSetCurrent(0)
	})
	locked(func() {
		ctx := must[uintptr](t, "ctx")(b.CtxCreate(0, 0))
		b.CtxSetCurrent(ctx)
		defer b.CtxSetCurrent(0)
		m := must[uintptr](t, "load")(b.ModuleLoadData(img))
		fill := must[uintptr](t, "fill")(b.ModuleGetFunction(m, "fill_u32"))
		add := must[uintptr](t, "vecadd")(b.ModuleGetFunction(m, "vecadd_f32"))
		fault := must[uintptr](t, "fault")(b.ModuleGetFunction(m, "fault"))
		if _, r := b.ModuleGetFunction(m, "nope"); r != proto.ErrNotFound {
			t.Errorf("a missing kernel: %v", r)
		}
		g, size, r := b.ModuleGetGlobal(m, "g")
		if r != proto.Success || size != 16 {
			t.Fatalf("global: %v %d", r, size)
		}
		one := [3]uint32{1, 1, 1}
		fillp := func(dst proto.DevPtr, v uint32, n uint64) []byte {
			p := make([]byte, 24)
			binary.LittleEndian.PutUint64(p, uint64(dst))
			binary.LittleEndian.PutUint32(p[8:], v)
			binary.LittleEndian.PutUint64(p[16:], n)
			return p
		}
		if r := b.LaunchKernel(fill, one, one, 0, 0, fillp(g, 0x3f800000, 4)); r != proto.Success { // 1.0f
			t.Fatal(r)
		}
		c := must[proto.DevPtr](t, "alloc")(b.MemAlloc(16))
		vp := make([]byte, 28)
		binary.LittleEndian.PutUint64(vp, uint64(g))
		binary.LittleEndian.PutUint64(vp[8:], uint64(g))
		binary.LittleEndian.PutUint64(vp[16:], uint64(c))
		binary.LittleEndian.PutUint32(vp[24:], 4)
		if r := b.LaunchKernel(add, one, one, 0, 0, vp); r != proto.Success {
			t.Fatal(r)
		}
		got := make([]byte, 16)
		b.MemcpyDtoH(got, c, 0)
		for i := range 4 {
			if v := binary.LittleEndian.Uint32(got[4*i:]); v != 0x40000000 { // 2.0f
				t.Errorf("c[%d] = %#x, want 2.0", i, v)
			}
		}
		for _, tt := range []struct {
			name   string
			fn     uintptr
			params []byte
			want   proto.Result
		}{
			{"fault", fault, nil, proto.ErrIllegalAddress},
			{"another context's memory", fill, fillp(foreign, 1, 1), proto.ErrIllegalAddress},
			{"past the end", fill, fillp(c, 1, 5), proto.ErrIllegalAddress},
			{"n overflowing", fill, fillp(c, 1, 1<<62), proto.ErrIllegalAddress},
			{"short params", fill, make([]byte, 23), proto.ErrInvalidValue},
		} {
			if r := b.LaunchKernel(tt.fn, one, one, 0, 0, tt.params); r != tt.want {
				t.Errorf("%s: %v, want %v", tt.name, r, tt.want)
			}
		}
		if r := b.LaunchKernel(fill, [3]uint32{1, 1, 0}, one, 0, 0, fillp(c, 1, 1)); r != proto.ErrInvalidValue {
			t.Errorf("an empty grid: %v", r)
		}
		ls := b.Launches()
		if len(ls) != 6 || ls[0].Kernel != "fill_u32" || ls[2].Result != proto.ErrIllegalAddress {
			t.Errorf("launches: %+v", ls)
		}
		b.ModuleUnload(m)
		if r := b.MemcpyHtoD(g, []byte{1}, 0, false); r != proto.ErrInvalidValue {
			t.Errorf("a global after unload: %v", r)
		}
		b.MemFree(c)
		b.CtxSetCurrent(0)
		b.CtxDestroy(ctx)
	})
	if st := b.Stats(); st.Modules != 0 || st.Functions != 0 || st.Allocations != 1 || st.ImplicitFrees != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestStreamsAndEvents(t *testing.T) {
	b := newFake(t)
	locked(func() {
		ctx := must[uintptr](t, "ctx")(b.CtxCreate(0, 0))
		b.CtxSetCurrent(ctx)
		defer b.CtxSetCurrent(0)
		s := must[uintptr](t, "stream")(b.StreamCreate(1))
		if _, r := b.StreamCreate(2); r != proto.ErrInvalidValue {
			t.Errorf("stream flags 2: %v", r)
		}
		e1 := must[uintptr](t, "event")(b.EventCreate(0))
		e2 := must[uintptr](t, "event")(b.EventCreate(eventDisableTiming))
		if _, r := b.EventElapsedTime(e1, e1); r != proto.ErrInvalidHandle {
			t.Errorf("elapsed of an unrecorded event: %v", r)
		}
		for _, st := range []uintptr{0, 1, 2, s} {
			if r := b.EventRecord(e1, st); r != proto.Success {
				t.Errorf("record on %#x: %v", st, r)
			}
		}
		b.EventRecord(e2, s)
		if _, r := b.EventElapsedTime(e1, e2); r != proto.ErrInvalidHandle {
			t.Errorf("elapsed with timing disabled: %v", r)
		}
		if ms, r := b.EventElapsedTime(e1, e1); r != proto.Success || ms != 0 {
			t.Errorf("elapsed e1-e1: %v %v", ms, r)
		}
		if r := b.StreamWaitEvent(s, e2, 0); r != proto.Success {
			t.Error(r)
		}
		for _, r := range []proto.Result{b.StreamDestroy(s), b.EventDestroy(e1), b.EventDestroy(e2)} {
			if r != proto.Success {
				t.Error(r)
			}
		}
		if r := b.StreamSynchronize(s); r != proto.ErrInvalidHandle {
			t.Errorf("a destroyed stream: %v", r)
		}
	})
}

// TestVirtualMemoryAliases: two mappings of one physical allocation share
// its bytes; memory without read-write access is refused to copies; the
// memory goes with the last of its release and its mappings.
func TestVirtualMemoryAliases(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b, err := New(WithMemory(64 << 20))
	if err != nil {
		t.Fatal(err)
	}
	b.Init()
	ctx, _ := b.CtxCreate(0, 0)
	b.CtxSetCurrent(ctx)
	must := func(what string, r proto.Result) {
		t.Helper()
		if r != proto.Success {
			t.Fatalf("%s: %v", what, r)
		}
	}
	prop := proto.MemProp{Type: proto.MemAllocationTypePinned, LocType: proto.MemLocationTypeDevice}
	va, r := b.MemAddressReserve(4*Granularity, 0, 0, 0)
	must("MemAddressReserve", r)
	h, r := b.MemCreate(Granularity, prop, 0)
	must("MemCreate", r)
	must("MemMap", b.MemMap(va, Granularity, 0, h, 0))
	must("MemMap again", b.MemMap(va+2*Granularity, Granularity, 0, h, 0))
	if r := b.MemcpyHtoD(va+8, []byte("x"), 0, false); r != proto.ErrInvalidValue {
		t.Errorf("a copy before access was set: %v", r)
	}
	rw := []proto.MemAccessDesc{{LocType: proto.MemLocationTypeDevice, Flags: accessReadWrite}}
	ro := []proto.MemAccessDesc{{LocType: proto.MemLocationTypeDevice, Flags: accessRead}}
	must("MemSetAccess", b.MemSetAccess(va, Granularity, rw))
	must("MemSetAccess read-only", b.MemSetAccess(va+2*Granularity, Granularity, ro))
	must("MemcpyHtoD", b.MemcpyHtoD(va+8, []byte("shared"), 0, false))
	got := make([]byte, 6)
	must("MemcpyDtoH through the other mapping", b.MemcpyDtoH(got, va+2*Granularity+8, 0))
	if string(got) != "shared" {
		t.Errorf("the second mapping reads %q", got)
	}
	if r := b.MemcpyHtoD(va+2*Granularity, []byte("x"), 0, false); r != proto.ErrInvalidValue {
		t.Errorf("a write through a read-only mapping: %v", r)
	}
	if r := b.MemMap(va+Granularity, 2*Granularity, 0, h, 0); r != proto.ErrInvalidValue {
		t.Errorf("a mapping larger than the allocation: %v", r)
	}
	must("MemRelease", b.MemRelease(h))
	if st := b.Stats(); st.Physical != 1 || st.Mappings != 2 {
		t.Errorf("after the release %+v, want the memory kept for its mappings", st)
	}
	must("MemUnmap", b.MemUnmap(va, Granularity))
	must("MemUnmap", b.MemUnmap(va+2*Granularity, Granularity))
	if st := b.Stats(); st.Physical != 0 || st.Mappings != 0 {
		t.Errorf("after the last unmap %+v", st)
	}
	if free, total, _ := b.MemGetInfo(); free != total {
		t.Errorf("free %d of %d after everything went", free, total)
	}
	must("MemAddressFree", b.MemAddressFree(va, 4*Granularity))
	must("CtxDestroy", b.CtxDestroy(ctx))
}

// TestPoolReleaseThreshold: a pool keeps freed memory up to its release
// threshold, within its maximum size, and trims on demand.
func TestPoolReleaseThreshold(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b, err := New(WithMemory(64 << 20))
	if err != nil {
		t.Fatal(err)
	}
	b.Init()
	ctx, _ := b.CtxCreate(0, 0)
	b.CtxSetCurrent(ctx)
	pool, r := b.MemPoolCreate(proto.MemPoolProps{AllocType: 1, LocType: 1, MaxSize: 8 << 20})
	if r != proto.Success {
		t.Fatal(r)
	}
	attr := func(a uint32) uint64 {
		v, r := b.MemPoolGetAttribute(pool, a)
		if r != proto.Success {
			t.Fatal(r)
		}
		return v
	}
	p, r := b.MemAllocFromPoolAsync(3<<20, pool, 0)
	if r != proto.Success {
		t.Fatal(r)
	}
	if _, r := b.MemAllocFromPoolAsync(6<<20, pool, 0); r != proto.ErrOutOfMemory {
		t.Errorf("past the pool's maximum size: %v", r)
	}
	b.MemFreeAsync(p, 0)
	if got := attr(proto.MemPoolReservedMemCurrent); got != 0 {
		t.Errorf("reserved %d after a free with no threshold, want 0", got)
	}
	b.MemPoolSetAttribute(pool, proto.MemPoolReleaseThreshold, 1<<40)
	p, _ = b.MemAllocFromPoolAsync(3<<20, pool, 0)
	b.MemFreeAsync(p, 0)
	if got := attr(proto.MemPoolReservedMemCurrent); got != 4<<20 {
		t.Errorf("reserved %d after a free under a threshold, want 4 MiB kept", got)
	}
	if got := attr(proto.MemPoolUsedMemHigh); got != 3<<20 {
		t.Errorf("used high-water mark %d, want 3 MiB", got)
	}
	b.MemPoolTrimTo(pool, 0)
	if got := attr(proto.MemPoolReservedMemCurrent); got != 0 {
		t.Errorf("reserved %d after trimming, want 0", got)
	}
	if r := b.MemPoolDestroy(pool); r != proto.Success {
		t.Fatal(r)
	}
	if st := b.Stats(); st.Pools != 0 {
		t.Errorf("%d pools after the destroy", st.Pools)
	}
	b.CtxDestroy(ctx)
}

// TestMemAddressReserveHint checks that a reservation gets the address it
// asks for when that range is free, as the driver's does, and another one
// when the range overlaps an allocation or a reservation or is misaligned.
func TestMemAddressReserveHint(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b := newFake(t)
	{
		ctx := must[uintptr](t, "CtxCreate")(b.CtxCreate(0, 0))
		must[struct{}](t, "CtxSetCurrent")(struct{}{}, b.CtxSetCurrent(ctx))
		taken := must[proto.DevPtr](t, "MemAddressReserve")(b.MemAddressReserve(4*Granularity, 0, 0, 0))
		alloc := must[proto.DevPtr](t, "MemAlloc")(b.MemAlloc(1 << 20))
		far := proto.DevPtr(addrBase + 1<<36)
		for _, tc := range []struct {
			name  string
			hint  proto.DevPtr
			exact bool
		}{
			{"free range far ahead", far, true},
			{"free range below the next address", taken - 8*Granularity, true}, // below addrBase, above hintBase: a migratable server's window
			{"below hintBase: outside the space", hintBase - 8*Granularity, false},
			{"inside a reservation", taken + Granularity, false},
			{"overlapping the reservation just placed", far + Granularity, false},
			{"over an allocation", alloc &^ (Granularity - 1), false},
			{"misaligned", far + 64*Granularity + 4096, false},
			{"past the address space", addrLimit, false},
			{"free range below one taken", far - 2*Granularity, true},
		} {
			p, r := b.MemAddressReserve(2*Granularity, 0, tc.hint, 0)
			if r != proto.Success {
				t.Fatalf("%s: %v", tc.name, r)
			}
			if (p == tc.hint) != tc.exact {
				t.Errorf("%s: reserved at %#x for the hint %#x, want exact=%v", tc.name, p, tc.hint, tc.exact)
			}
		}
		// What is handed out afterwards lies past the chosen range.
		next := must[proto.DevPtr](t, "MemAlloc")(b.MemAlloc(1 << 20))
		if next < far+4*Granularity {
			t.Errorf("an allocation at %#x after a reservation at %#x", next, far)
		}
	}
}
