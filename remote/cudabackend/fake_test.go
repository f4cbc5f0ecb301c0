package cudabackend

import (
	"bytes"
	_ "embed"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"unsafe"

	"github.com/gpumux/gpumux/remote/proto"
)

// fakeState mirrors struct fake_state in testdata/fakecuda.c field for
// field: what the fake driver saw.
type fakeState struct {
	Magic, Size                                                            uint64
	InitCalls, InitFlags                                                   uint64
	DeviceGets, LastDevice                                                 uint64
	CtxCreates, CtxCreateFlags, CtxDestroys, CtxPushes, CtxPops, CtxSyncs  uint64
	LastCtx                                                                uint64
	Allocs, Frees, LiveAllocs                                              uint64
	HostAllocs, HostFrees, LiveHost                                        uint64
	HtoD, HtoDAsync, DtoH, DtoHAsync, DtoD, DtoDAsync, Memsets, MemsetsAsy uint64
	LastDst, LastSrc, LastN, LastStream, LastValue                         uint64
	LastSrcPinned, LastDstPinned                                           uint64
	EventCreates, EventDestroys, EventRecords, EventSyncs, LastEventFlags  uint64
	StreamCreates, StreamDestroys, StreamSyncs, StreamWaits                uint64
	LastStreamFlags                                                        uint64
	Enqueued, Ran                                                          uint64
	ModuleLoads, ModuleUnloads, ModuleImageLen                             uint64
	Launches, LaunchFn                                                     uint64
	LaunchGrid, LaunchBlock                                                [3]uint64
	LaunchShmem, LaunchStream                                              uint64
	LaunchKernelParams, LaunchExtraKeys, LaunchSize                        uint64
	ElapsedVersion, UUIDVersion                                            uint64
	LastName                                                               [64]byte
	ModuleHead                                                             [64]byte
	LaunchBuf                                                              [4096]byte
	VMMCalls                                                               uint64
	LastProp                                                               [7]uint64
	LastSize, LastAlign, LastAddr, LastFlags, LastHandle, LastOffset       uint64
	LastAccess                                                             [6]uint64
	LastAccessCount                                                        uint64
	LastPoolProps                                                          [6]uint64
	LastAttr, LastAttrValue                                                uint64
	LastLimit, LastLimitValue                                              uint64
	PeerQueries, LastPeerDev, LastPeerAttr                                 uint64
	PeerEnables, PeerDisables, LastPeerCtx, LastPeerFlags                  uint64
	PeerCopies, PeerCopiesAsync, LastDstCtx, LastSrcCtx                    uint64
	// Stream capture and graphs.
	CaptureBegins, CaptureMode, CaptureStream, CaptureEnds                     uint64
	UpdateN, UpdateFlags, UpdateFirst, UpdateEdge0                             uint64
	GraphsCreated, GraphsDestroyed, GraphClones                                uint64
	NodeAdds, NodeNdeps, NodeFirstDep, NodeCtx, NodeEvent, NodeWait            uint64
	MemsetDst, MemsetPitch, MemsetValue, MemsetElem, MemsetWidth, MemsetHeight uint64
	MemcpyTypes                                                                uint64
	MemcpyF                                                                    [15]uint64
	DepAdds, DepN, DepEdge0                                                    uint64
	Instantiates, InstantiateFlags, ExecDestroys, GraphLaunches, GraphUploads  uint64
	GraphStream, ExecParamSets, ExecParamNode                                  uint64
}

const fakeMagic = 0x616475636b6166

// fakeSource is embedded so that a test binary built here (go test -c)
// builds the fake driver from any directory.
//
//go:embed testdata/fakecuda.c
var fakeSource []byte

func cstring(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// compiler returns the C compiler, or skips the test: the fake driver is
// built from testdata/fakecuda.c.
func compiler(t *testing.T) string {
	t.Helper()
	for _, c := range []string{os.Getenv("CC"), "cc", "gcc", "clang"} {
		if c == "" {
			continue
		}
		if p, err := exec.LookPath(strings.Fields(c)[0]); err == nil {
			return p
		}
	}
	t.Skip("SKIP: no C compiler (cc, gcc, clang) on PATH: cannot build the fake libcuda.so.1")
	return ""
}

// buildFake compiles the fake driver with extra flags into a fresh
// directory and returns its path (always named libcuda.so.1).
func buildFake(t *testing.T, flags ...string) string {
	t.Helper()
	cc := compiler(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "fakecuda.c")
	if err := os.WriteFile(src, fakeSource, 0o644); err != nil {
		t.Fatal(err)
	}
	lib := filepath.Join(dir, "libcuda.so.1")
	args := append([]string{"-shared", "-fPIC", "-O1", "-Wall", "-pthread", "-o", lib}, flags...)
	args = append(args, src)
	if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("building the fake driver: %s %s: %v\n%s", cc, strings.Join(args, " "), err, out)
	}
	return lib
}

// mapState makes the file the fake driver keeps its state in and maps it.
func mapState(t *testing.T) *fakeState {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state")
	size := int(unsafe.Sizeof(fakeState{}))
	if err := os.WriteFile(path, make([]byte, size), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	// The library stays loaded (and may write) for the process's life.
	t.Setenv("FAKECUDA_STATE", path)
	return (*fakeState)(unsafe.Pointer(&m[0]))
}

// openFake builds the fake driver with flags and opens a Backend on it.
func openFake(t *testing.T, flags ...string) (*Backend, *fakeState) {
	t.Helper()
	lib := buildFake(t, flags...)
	st := mapState(t)
	b, err := Open(lib)
	if err != nil {
		t.Fatalf("Open(%s): %v", lib, err)
	}
	if st.Magic != fakeMagic || st.Size != uint64(unsafe.Sizeof(fakeState{})) {
		t.Fatalf("fake state: magic %#x size %d, want %#x %d (fakeState out of step with fakecuda.c)",
			st.Magic, st.Size, fakeMagic, unsafe.Sizeof(fakeState{}))
	}
	return b, st
}

func ok(t *testing.T, what string, r proto.Result) {
	t.Helper()
	if r != proto.Success {
		t.Fatalf("%s: %v", what, r)
	}
}

func want(t *testing.T, what string, r, w proto.Result) {
	t.Helper()
	if r != w {
		t.Fatalf("%s: %v, want %v", what, r, w)
	}
}

func eq[T comparable](t *testing.T, what string, got, w T) {
	t.Helper()
	if got != w {
		t.Fatalf("%s = %v, want %v", what, got, w)
	}
}

func addr(p []byte) uint64 { return uint64(uintptr(unsafe.Pointer(&p[0]))) }

func pattern(n int, seed byte) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i*7) + seed + byte(i>>12)
	}
	return p
}

// withContext runs f as a server session runs: on the test's goroutine,
// locked to its OS thread, with a new context current on device 0.
func withContext(t *testing.T, b *Backend, f func(ctx uintptr)) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ctx, r := b.CtxCreate(0, 0)
	ok(t, "CtxCreate", r)
	if ctx == 0 {
		t.Fatal("CtxCreate: null context")
	}
	ok(t, "CtxSetCurrent", b.CtxSetCurrent(ctx))
	f(ctx)
}

// TestOpenNoDriver is the machine without a driver: Open("") fails with
// ErrNoDriver and names the library.
func TestOpenNoDriver(t *testing.T) {
	b, err := Open("")
	var ie *InitError
	switch {
	case err == nil:
		t.Skipf("SKIP: %s loads here (a driver is installed): no error to check", b.Library())
	case errors.As(err, &ie):
		t.Skipf("SKIP: %s loads here but cuInit fails (%v): no missing driver to check", DefaultLibrary, ie.Result)
	}
	if !errors.Is(err, ErrNoDriver) {
		t.Fatalf("Open(\"\"): %v, want an error wrapping ErrNoDriver", err)
	}
	if errors.Is(err, ErrMissingSymbol) {
		t.Fatalf("Open(\"\"): %v also wraps ErrMissingSymbol", err)
	}
	if !strings.Contains(err.Error(), "libcuda.so.1") {
		t.Fatalf("Open(\"\"): %q does not name libcuda.so.1", err)
	}
	t.Logf("Open(\"\"): %v", err)
}

func TestOpenMissingPath(t *testing.T) {
	lib := filepath.Join(t.TempDir(), "nowhere", "libcuda.so.1")
	_, err := Open(lib)
	if !errors.Is(err, ErrNoDriver) {
		t.Fatalf("Open(%s): %v, want ErrNoDriver", lib, err)
	}
	// The path twice: ours, and in dlerror's text.
	if strings.Count(err.Error(), lib) < 2 {
		t.Fatalf("Open(%s): %q lacks the path or dlerror's text", lib, err)
	}
}

func TestOpenNotALibrary(t *testing.T) {
	lib := filepath.Join(t.TempDir(), "libcuda.so.1")
	if err := os.WriteFile(lib, []byte("not an ELF file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Open(lib)
	if !errors.Is(err, ErrNoDriver) {
		t.Fatalf("Open(%s): %v, want ErrNoDriver", lib, err)
	}
}

func TestFakeMissingSymbol(t *testing.T) {
	lib := buildFake(t, "-DFAKE_OMIT_MEMALLOC")
	st := mapState(t)
	_, err := Open(lib)
	if !errors.Is(err, ErrMissingSymbol) || errors.Is(err, ErrNoDriver) {
		t.Fatalf("Open: %v, want ErrMissingSymbol alone", err)
	}
	if !strings.Contains(err.Error(), "cuMemAlloc_v2") || !strings.Contains(err.Error(), lib) {
		t.Fatalf("Open: %q does not name cuMemAlloc_v2 and %s", err, lib)
	}
	eq(t, "cuInit calls", st.InitCalls, 0)
}

func TestFakeInitFails(t *testing.T) {
	lib := buildFake(t, "-DFAKE_INIT_RESULT=100")
	mapState(t)
	_, err := Open(lib)
	var ie *InitError
	if !errors.As(err, &ie) || ie.Result != proto.ErrNoDevice {
		t.Fatalf("Open: %v, want an InitError with CUDA_ERROR_NO_DEVICE", err)
	}
	if !strings.Contains(err.Error(), "CUDA_ERROR_NO_DEVICE") || !strings.Contains(err.Error(), lib) {
		t.Fatalf("Open: %q", err)
	}
}

func TestFakeDevice(t *testing.T) {
	b, st := openFake(t)
	eq(t, "cuInit calls", st.InitCalls, 1)
	eq(t, "cuInit flags", st.InitFlags, 0)
	ok(t, "Init", b.Init())
	eq(t, "cuInit calls", st.InitCalls, 2)

	v, r := b.DriverVersion()
	ok(t, "DriverVersion", r)
	eq(t, "DriverVersion", v, 12080)
	n, r := b.DeviceCount()
	ok(t, "DeviceCount", r)
	eq(t, "DeviceCount", n, 2)

	name, r := b.DeviceName(1)
	ok(t, "DeviceName", r)
	eq(t, "DeviceName(1)", name, "Fake GPU 1")
	eq(t, "CUdevice for ordinal 1", st.LastDevice, 101)
	mem, r := b.DeviceTotalMem(0)
	ok(t, "DeviceTotalMem", r)
	eq(t, "DeviceTotalMem", mem, 80<<30)
	eq(t, "CUdevice for ordinal 0", st.LastDevice, 100)
	for _, c := range []struct{ attr, want int32 }{{75, 9}, {76, 0}, {16, 132}} {
		v, r := b.DeviceAttribute(c.attr, 0)
		ok(t, "DeviceAttribute", r)
		eq(t, "DeviceAttribute", v, c.want)
	}
	_, r = b.DeviceAttribute(1234, 0)
	want(t, "DeviceAttribute(1234)", r, proto.ErrInvalidValue)
	_, r = b.DeviceAttribute(75, 7)
	want(t, "DeviceAttribute(dev 7)", r, proto.ErrInvalidDevice)
	_, r = b.DeviceName(-1)
	want(t, "DeviceName(-1)", r, proto.ErrInvalidDevice)

	u, r := b.DeviceUUID(0)
	ok(t, "DeviceUUID", r)
	eq(t, "cuDeviceGetUuid version", st.UUIDVersion, 2)
	for i, c := range u {
		eq(t, "uuid byte", c, byte(0xa0+i))
	}
}

func TestFakeMemory(t *testing.T) {
	b, st := openFake(t)
	withContext(t, b, func(ctx uintptr) {
		const size = 5 << 20
		d, r := b.MemAlloc(size)
		ok(t, "MemAlloc", r)
		d2, r := b.MemAlloc(size)
		ok(t, "MemAlloc", r)
		eq(t, "live allocations", st.LiveAllocs, 2)
		free, total, r := b.MemGetInfo()
		ok(t, "MemGetInfo", r)
		eq(t, "free", free, 79<<30)
		eq(t, "total", total, 80<<30)

		// Synchronous copies pass Go memory straight through.
		src := pattern(size, 1)
		ok(t, "MemcpyHtoD", b.MemcpyHtoD(d, src, 0, false))
		eq(t, "cuMemcpyHtoD_v2 calls", st.HtoD, 1)
		eq(t, "HtoD src", st.LastSrc, addr(src))
		eq(t, "HtoD dst", st.LastDst, uint64(d))
		eq(t, "HtoD n", st.LastN, size)
		ok(t, "MemcpyDtoD", b.MemcpyDtoD(d2, d, size, 0, false))
		eq(t, "cuMemcpyDtoD_v2 calls", st.DtoD, 1)
		eq(t, "DtoD n", st.LastN, size)
		dst := make([]byte, size)
		ok(t, "MemcpyDtoH", b.MemcpyDtoH(dst, d2, 0))
		eq(t, "cuMemcpyDtoH_v2 calls", st.DtoH, 1)
		eq(t, "DtoH dst", st.LastDst, addr(dst))
		if !bytes.Equal(dst, src) {
			t.Fatal("HtoD, DtoD, DtoH round trip differs")
		}

		// Memsets: n counts elements.
		ok(t, "MemsetD32", b.MemsetD32(d, 0xdeadbeef, 1000, 0, false))
		eq(t, "cuMemsetD32_v2 calls", st.Memsets, 1)
		eq(t, "memset n", st.LastN, 1000)
		eq(t, "memset value", st.LastValue, 0xdeadbeef)
		ok(t, "MemsetD8", b.MemsetD8(d+4000, 0x5a, 96, 0, false))
		ok(t, "MemcpyDtoH", b.MemcpyDtoH(dst[:4200], d, 0))
		for i := 0; i < 4000; i += 4 {
			eq(t, "word", binary.LittleEndian.Uint32(dst[i:]), 0xdeadbeef)
		}
		for i := 4000; i < 4096; i++ {
			eq(t, "byte", dst[i], 0x5a)
		}
		eq(t, "byte past the memset", dst[4096], src[4096])

		// Asynchronous ones on a stream.
		s, r := b.StreamCreate(1)
		ok(t, "StreamCreate", r)
		eq(t, "stream flags", st.LastStreamFlags, 1)
		ok(t, "MemsetD32 async", b.MemsetD32(d2, 7, 4, s, true))
		eq(t, "cuMemsetD32Async calls", st.MemsetsAsy, 1)
		eq(t, "memset stream", st.LastStream, uint64(s))
		ok(t, "MemsetD8 async", b.MemsetD8(d2+16, 9, 4, s, true))
		eq(t, "cuMemsetD8Async calls", st.MemsetsAsy, 2)
		ok(t, "MemcpyDtoD async", b.MemcpyDtoD(d, d2, 32, s, true))
		eq(t, "cuMemcpyDtoDAsync_v2 calls", st.DtoDAsync, 1)
		eq(t, "DtoD stream", st.LastStream, uint64(s))
		eq(t, "DtoD n", st.LastN, 32)
		ok(t, "StreamSynchronize", b.StreamSynchronize(s))
		ok(t, "MemcpyDtoH", b.MemcpyDtoH(dst[:20], d, 0))
		eq(t, "async result", binary.LittleEndian.Uint32(dst[12:]), 7)
		eq(t, "async result", binary.LittleEndian.Uint32(dst[16:]), 0x09090909)

		ok(t, "CtxSynchronize", b.CtxSynchronize())
		eq(t, "cuCtxSynchronize calls", st.CtxSyncs, 1)
		ok(t, "StreamDestroy", b.StreamDestroy(s))
		ok(t, "MemFree", b.MemFree(d))
		ok(t, "MemFree", b.MemFree(d2))
		want(t, "MemFree(freed)", b.MemFree(d), proto.ErrInvalidValue)
		want(t, "MemFree(bogus)", b.MemFree(0x1234), proto.ErrInvalidValue)
		eq(t, "live allocations", st.LiveAllocs, 0)
		ok(t, "CtxDestroy", b.CtxDestroy(ctx))
		eq(t, "destroyed context", st.LastCtx, uint64(ctx))
		// No staged copy: no pinned memory, nothing to push.
		eq(t, "pinned allocations", st.HostAllocs, 0)
		eq(t, "context pushes", st.CtxPushes, 0)
		_, r = b.MemAlloc(16)
		want(t, "MemAlloc with no context", r, proto.ErrInvalidContext)
	})
}

// TestFakePeers: the peer calls reach the driver with device handles for
// ordinals and the backend's own contexts; peer copies run synchronously
// or queued on the stream.
func TestFakePeers(t *testing.T) {
	b, st := openFake(t)
	can, r := b.DeviceCanAccessPeer(0, 1)
	ok(t, "DeviceCanAccessPeer", r)
	eq(t, "can access", can, 1)
	eq(t, "peer device handle", st.LastPeerDev, 101)
	can, r = b.DeviceCanAccessPeer(1, 1)
	ok(t, "DeviceCanAccessPeer itself", r)
	eq(t, "can access itself", can, 0)
	_, r = b.DeviceCanAccessPeer(0, 2)
	want(t, "DeviceCanAccessPeer of a device not there", r, proto.ErrInvalidDevice)
	v, r := b.DeviceP2PAttribute(2, 1, 0)
	ok(t, "DeviceP2PAttribute", r)
	eq(t, "access supported", v, 1)
	eq(t, "attribute passed", st.LastPeerAttr, 2)
	eq(t, "destination device handle", st.LastPeerDev, 100)
	_, r = b.DeviceP2PAttribute(2, 1, 1)
	want(t, "DeviceP2PAttribute of one device", r, proto.ErrInvalidDevice)

	withContext(t, b, func(ctx0 uintptr) {
		ctx1, r := b.CtxCreate(1, 0)
		ok(t, "CtxCreate(1)", r)
		ok(t, "CtxSetCurrent", b.CtxSetCurrent(ctx0))
		ok(t, "CtxEnablePeerAccess", b.CtxEnablePeerAccess(ctx1, 0))
		eq(t, "peer context", st.LastPeerCtx, uint64(ctx1))
		want(t, "CtxEnablePeerAccess with flags", b.CtxEnablePeerAccess(ctx1, 1), proto.ErrInvalidValue)
		eq(t, "flags passed", st.LastPeerFlags, 1)
		ok(t, "CtxDisablePeerAccess", b.CtxDisablePeerAccess(ctx1))
		eq(t, "cuCtxDisablePeerAccess calls", st.PeerDisables, 1)

		const size = 1 << 20
		d0, r := b.MemAlloc(size)
		ok(t, "MemAlloc", r)
		d1, r := b.MemAlloc(size)
		ok(t, "MemAlloc", r)
		src := pattern(size, 3)
		ok(t, "MemcpyHtoD", b.MemcpyHtoD(d0, src, 0, false))
		ok(t, "MemcpyPeer", b.MemcpyPeer(d1, ctx1, d0, ctx0, size, 0, false))
		eq(t, "cuMemcpyPeer calls", st.PeerCopies, 1)
		eq(t, "destination context", st.LastDstCtx, uint64(ctx1))
		eq(t, "source context", st.LastSrcCtx, uint64(ctx0))
		eq(t, "peer copy n", st.LastN, size)
		got := make([]byte, size)
		ok(t, "MemcpyDtoH", b.MemcpyDtoH(got, d1, 0))
		if !bytes.Equal(got, src) {
			t.Fatal("cuMemcpyPeer copied other bytes")
		}
		s, r := b.StreamCreate(0)
		ok(t, "StreamCreate", r)
		ok(t, "MemsetD8", b.MemsetD8(d0, 0, size, 0, false))
		ran := st.Ran
		ok(t, "MemcpyPeer async", b.MemcpyPeer(d0, ctx0, d1, ctx1, size, s, true))
		eq(t, "cuMemcpyPeerAsync calls", st.PeerCopiesAsync, 1)
		eq(t, "peer copy stream", st.LastStream, uint64(s))
		eq(t, "the async copy waits for the stream", st.Ran, ran)
		ok(t, "StreamSynchronize", b.StreamSynchronize(s))
		ok(t, "MemcpyDtoH", b.MemcpyDtoH(got, d0, 0))
		if !bytes.Equal(got, src) {
			t.Fatal("cuMemcpyPeerAsync copied other bytes")
		}
		ok(t, "StreamDestroy", b.StreamDestroy(s))
		ok(t, "MemFree", b.MemFree(d0))
		ok(t, "MemFree", b.MemFree(d1))
		ok(t, "CtxDestroy", b.CtxDestroy(ctx1))
		ok(t, "CtxDestroy", b.CtxDestroy(ctx0))
	})
}

// TestFakeStaging proves the staging ring: asynchronous host-to-device
// copies go through pinned buffers (the caller's memory may change at
// once), a buffer is reused only after its copy ran, and a stream's
// device-to-host copy is synchronized before it is copied out. The fake
// runs asynchronous work only when something waits for it.
func TestFakeStaging(t *testing.T) {
	b, st := openFake(t)
	withContext(t, b, func(ctx uintptr) {
		const size = 5<<20 + 123 // six pieces over a ring of four
		d, r := b.MemAlloc(size)
		ok(t, "MemAlloc", r)
		s, r := b.StreamCreate(0)
		ok(t, "StreamCreate", r)

		src := pattern(size, 3)
		orig := bytes.Clone(src)
		ok(t, "MemcpyHtoD async", b.MemcpyHtoD(d, src, s, true))
		clear(src) // the backend must have staged it
		eq(t, "cuMemcpyHtoDAsync_v2 calls", st.HtoDAsync, 6)
		eq(t, "last piece size", st.LastN, 123)
		eq(t, "last piece dst", st.LastDst, uint64(d)+5<<20)
		eq(t, "last piece stream", st.LastStream, uint64(s))
		eq(t, "last piece from pinned memory", st.LastSrcPinned, 1)
		eq(t, "pinned buffers", st.HostAllocs, StagingSlots)
		eq(t, "staging events", st.EventCreates, StagingSlots)
		eq(t, "staging event flags (CU_EVENT_DISABLE_TIMING)", st.LastEventFlags, 2)
		eq(t, "events recorded", st.EventRecords, 6)
		eq(t, "events waited on (slots reused)", st.EventSyncs, 2)
		if st.Enqueued-st.Ran == 0 {
			t.Fatal("no copy left pending: the fake should defer them")
		}

		dst := make([]byte, size)
		ok(t, "MemcpyDtoH on a stream", b.MemcpyDtoH(dst, d, s))
		eq(t, "cuMemcpyDtoHAsync_v2 calls", st.DtoHAsync, 6)
		eq(t, "DtoH into pinned memory", st.LastDstPinned, 1)
		eq(t, "DtoH stream", st.LastStream, uint64(s))
		eq(t, "stream synchronizations", st.StreamSyncs, 6)
		if !bytes.Equal(dst, orig) {
			t.Fatal("staged round trip differs")
		}

		// A small copy into an offset, on the legacy stream (0).
		ok(t, "MemcpyHtoD async", b.MemcpyHtoD(d+10, []byte{1, 2, 3}, 0, true))
		eq(t, "stream", st.LastStream, 0)
		ok(t, "MemcpyDtoH", b.MemcpyDtoH(dst[:16], d, 0))
		if !bytes.Equal(dst[8:15], []byte{orig[8], orig[9], 1, 2, 3, orig[13], orig[14]}) {
			t.Fatalf("small staged copy: % x", dst[8:15])
		}
		ok(t, "MemcpyHtoD async of nothing", b.MemcpyHtoD(d, nil, s, true))
		ok(t, "MemcpyDtoH of nothing", b.MemcpyDtoH(nil, d, s))

		pushes := st.CtxPushes
		ok(t, "StreamDestroy", b.StreamDestroy(s))
		ok(t, "MemFree", b.MemFree(d))
		ok(t, "CtxDestroy", b.CtxDestroy(ctx))
		eq(t, "pinned buffers freed", st.HostFrees, StagingSlots)
		eq(t, "pinned buffers live", st.LiveHost, 0)
		eq(t, "staging events destroyed", st.EventDestroys, StagingSlots)
		eq(t, "context pushed to free staging", st.CtxPushes, pushes+1)
		eq(t, "context popped", st.CtxPops, st.CtxPushes)
		eq(t, "contexts known", len(b.ctxs), 0)

		// The context is gone from this thread.
		want(t, "staged copy with no context", b.MemcpyHtoD(d, src[:8], s, true), proto.ErrInvalidContext)
		want(t, "staged DtoH with no context", b.MemcpyDtoH(dst[:8], d, 1), proto.ErrInvalidContext)
	})
}

func TestFakeModuleAndLaunch(t *testing.T) {
	b, st := openFake(t)
	withContext(t, b, func(ctx uintptr) {
		// No trailing NUL: the backend adds one.
		ptx := []byte(".version 8.0\n.target sm_90\n.address_size 64\n")
		mod, r := b.ModuleLoadData(ptx)
		ok(t, "ModuleLoadData", r)
		eq(t, "image length the driver read", st.ModuleImageLen, uint64(len(ptx)))
		eq(t, "image", cstring(st.ModuleHead[:]), string(ptx))
		withNUL := append(bytes.Clone(ptx), 0)
		mod2, r := b.ModuleLoadData(withNUL)
		ok(t, "ModuleLoadData (NUL-terminated)", r)
		eq(t, "image length the driver read", st.ModuleImageLen, uint64(len(ptx)))
		_, r = b.ModuleLoadData([]byte("bad image"))
		want(t, "ModuleLoadData(bad)", r, proto.ErrInvalidPTX)
		_, r = b.ModuleLoadData(nil)
		want(t, "ModuleLoadData(nil)", r, proto.ErrInvalidValue)

		fn, r := b.ModuleGetFunction(mod, "fill")
		ok(t, "ModuleGetFunction", r)
		eq(t, "name", cstring(st.LastName[:]), "fill")
		_, r = b.ModuleGetFunction(mod, "nope")
		want(t, "ModuleGetFunction(nope)", r, proto.ErrNotFound)
		long := strings.Repeat("x", 2000) // past the wrapper's stack buffer
		_, r = b.ModuleGetFunction(mod, long)
		want(t, "ModuleGetFunction(long)", r, proto.ErrNotFound)
		eq(t, "long name", cstring(st.LastName[:]), long[:63])
		p, n, r := b.ModuleGetGlobal(mod, "counter")
		ok(t, "ModuleGetGlobal", r)
		eq(t, "global size", n, 4)
		if p == 0 {
			t.Fatal("ModuleGetGlobal: null pointer")
		}
		_, _, r = b.ModuleGetGlobal(mod, "")
		want(t, "ModuleGetGlobal(\"\")", r, proto.ErrNotFound)

		for i, w := range [][2]uint64{{0, 8}, {8, 4}, {12, 4}} {
			off, size, r := b.FuncParamInfo(fn, uint64(i))
			ok(t, "FuncParamInfo", r)
			eq(t, "param", [2]uint64{off, size}, w)
		}
		_, _, r = b.FuncParamInfo(fn, 3)
		want(t, "FuncParamInfo(3)", r, proto.ErrInvalidValue)
		v, r := b.FuncGetAttribute(0, fn)
		ok(t, "FuncGetAttribute", r)
		eq(t, "max threads", v, 1024)

		s, r := b.StreamCreate(0)
		ok(t, "StreamCreate", r)
		params := make([]byte, 16)
		binary.LittleEndian.PutUint64(params[0:], 0x1122334455667788)
		binary.LittleEndian.PutUint32(params[8:], 0xcafef00d)
		binary.LittleEndian.PutUint32(params[12:], 1<<20)
		ok(t, "LaunchKernel", b.LaunchKernel(fn, [3]uint32{2, 3, 4}, [3]uint32{32, 8, 1}, 256, s, params))
		eq(t, "launches", st.Launches, 1)
		eq(t, "grid", st.LaunchGrid, [3]uint64{2, 3, 4})
		eq(t, "block", st.LaunchBlock, [3]uint64{32, 8, 1})
		eq(t, "shared memory", st.LaunchShmem, 256)
		eq(t, "stream", st.LaunchStream, uint64(s))
		eq(t, "kernelParams given", st.LaunchKernelParams, 0)
		eq(t, "extra keys (BUFFER_POINTER, BUFFER_SIZE)", st.LaunchExtraKeys, 12)
		eq(t, "buffer size", st.LaunchSize, 16)
		if !bytes.Equal(st.LaunchBuf[:16], params) {
			t.Fatalf("launch buffer % x, want % x", st.LaunchBuf[:16], params)
		}
		ok(t, "LaunchKernel (no params, legacy stream)", b.LaunchKernel(fn, [3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 0, 0, nil))
		eq(t, "extra keys", st.LaunchExtraKeys, 0)
		eq(t, "stream", st.LaunchStream, 0)
		big := pattern(4096, 9)
		ok(t, "LaunchKernel (4 KiB params)", b.LaunchKernel(fn, [3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 0, s, big))
		if !bytes.Equal(st.LaunchBuf[:], big) {
			t.Fatal("4 KiB launch buffer differs")
		}
		want(t, "LaunchKernel(bad function)", b.LaunchKernel(fn+1, [3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 0, s, nil), proto.ErrInvalidHandle)

		ok(t, "ModuleUnload", b.ModuleUnload(mod))
		ok(t, "ModuleUnload", b.ModuleUnload(mod2))
		eq(t, "unloads", st.ModuleUnloads, 2)
		ok(t, "StreamDestroy", b.StreamDestroy(s))
		ok(t, "CtxDestroy", b.CtxDestroy(ctx))
	})
}

func TestFakeStreamsAndEvents(t *testing.T) {
	b, st := openFake(t)
	withContext(t, b, func(ctx uintptr) {
		d, r := b.MemAlloc(64)
		ok(t, "MemAlloc", r)
		s, r := b.StreamCreate(0)
		ok(t, "StreamCreate", r)
		start, r := b.EventCreate(0)
		ok(t, "EventCreate", r)
		end, r := b.EventCreate(0)
		ok(t, "EventCreate", r)
		eq(t, "event flags", st.LastEventFlags, 0)

		ok(t, "EventRecord", b.EventRecord(start, s))
		ok(t, "MemsetD8 async", b.MemsetD8(d, 1, 64, s, true))
		ok(t, "EventRecord", b.EventRecord(end, s))
		eq(t, "records", st.EventRecords, 2)
		ok(t, "EventQuery(start)", b.EventQuery(start))
		want(t, "EventQuery(end)", b.EventQuery(end), proto.ErrNotReady)
		want(t, "StreamQuery", b.StreamQuery(s), proto.ErrNotReady)
		ok(t, "StreamWaitEvent", b.StreamWaitEvent(s, end, 0))
		eq(t, "waits", st.StreamWaits, 1)
		ok(t, "EventSynchronize", b.EventSynchronize(end))
		ok(t, "EventQuery(end)", b.EventQuery(end))
		ok(t, "StreamQuery", b.StreamQuery(s))
		ms, r := b.EventElapsedTime(start, end)
		ok(t, "EventElapsedTime", r)
		eq(t, "elapsed", ms, 2.5)
		eq(t, "cuEventElapsedTime version", st.ElapsedVersion, 2)

		ok(t, "EventDestroy", b.EventDestroy(start))
		ok(t, "EventDestroy", b.EventDestroy(end))
		want(t, "EventDestroy(0)", b.EventDestroy(0), proto.ErrInvalidHandle)
		ok(t, "StreamDestroy", b.StreamDestroy(s))
		want(t, "StreamDestroy(0)", b.StreamDestroy(0), proto.ErrInvalidHandle)
		ok(t, "MemFree", b.MemFree(d))
		ok(t, "CtxDestroy", b.CtxDestroy(ctx))
		want(t, "CtxDestroy(0)", b.CtxDestroy(0), proto.ErrInvalidContext)
	})
}

// TestFakeOptionalSymbols is a driver older than CUDA 12.4/12.8: no
// cuFuncGetParamInfo, cuEventElapsedTime_v2 or cuDeviceGetUuid_v2.
func TestFakeOptionalSymbols(t *testing.T) {
	b, st := openFake(t, "-DFAKE_OMIT_OPTIONAL")
	u, r := b.DeviceUUID(1)
	ok(t, "DeviceUUID", r)
	eq(t, "cuDeviceGetUuid version", st.UUIDVersion, 1)
	eq(t, "uuid[0]", u[0], 0x10)
	withContext(t, b, func(ctx uintptr) {
		mod, r := b.ModuleLoadData([]byte("ptx"))
		ok(t, "ModuleLoadData", r)
		fn, r := b.ModuleGetFunction(mod, "fill")
		ok(t, "ModuleGetFunction", r)
		_, _, r = b.FuncParamInfo(fn, 0)
		want(t, "FuncParamInfo", r, proto.ErrNotSupported)
		e, r := b.EventCreate(0)
		ok(t, "EventCreate", r)
		ms, r := b.EventElapsedTime(e, e)
		ok(t, "EventElapsedTime", r)
		eq(t, "elapsed", ms, 1.5)
		eq(t, "cuEventElapsedTime version", st.ElapsedVersion, 1)
		// The fake driver has none of the calls PyTorch added: each
		// degrades to CUDA_ERROR_NOT_SUPPORTED.
		_, _, r = b.CtxStreamPriorityRange()
		want(t, "CtxStreamPriorityRange", r, proto.ErrNotSupported)
		_, r = b.StreamCreateWithPriority(0, -1)
		want(t, "StreamCreateWithPriority", r, proto.ErrNotSupported)
		_, r = b.StreamPriority(0)
		want(t, "StreamPriority", r, proto.ErrNotSupported)
		_, r = b.StreamFlags(0)
		want(t, "StreamFlags", r, proto.ErrNotSupported)
		_, r = b.StreamIsCapturing(0)
		want(t, "StreamIsCapturing", r, proto.ErrNotSupported)
		want(t, "EventRecordWithFlags", b.EventRecordWithFlags(e, 0, 0), proto.ErrNotSupported)
		want(t, "FuncSetAttribute", b.FuncSetAttribute(fn, 8, 0), proto.ErrNotSupported)
		_, r = b.OccupancyMaxActiveBlocks(fn, 128, 0, 0)
		want(t, "OccupancyMaxActiveBlocks", r, proto.ErrNotSupported)
		_, r = b.OccupancyAvailableDynamicSMem(fn, 1, 128)
		want(t, "OccupancyAvailableDynamicSMem", r, proto.ErrNotSupported)
		// Nor those cuBLAS added (cluster launches, limits).
		one := [3]uint32{1, 1, 1}
		cluster := []proto.LaunchAttr{{ID: proto.LaunchAttrClusterDimension}}
		want(t, "LaunchKernelEx", b.LaunchKernelEx(fn, one, one, 0, 0, cluster, make([]byte, 16)), proto.ErrNotSupported)
		_, r = b.OccupancyMaxActiveClusters(fn, one, one, 0, 0, cluster)
		want(t, "OccupancyMaxActiveClusters", r, proto.ErrNotSupported)
		_, r = b.OccupancyMaxPotentialClusterSize(fn, one, one, 0, 0, nil)
		want(t, "OccupancyMaxPotentialClusterSize", r, proto.ErrNotSupported)
		_, r = b.CtxGetLimit(0)
		want(t, "CtxGetLimit", r, proto.ErrNotSupported)
		// Nor virtual memory management, pools or cuCtxSetLimit.
		prop := proto.MemProp{Type: 1, LocType: 1}
		rw := []proto.MemAccessDesc{{LocType: 1, Flags: 3}}
		_, r = b.MemGetAllocationGranularity(prop, 0)
		want(t, "MemGetAllocationGranularity", r, proto.ErrNotSupported)
		_, r = b.MemAddressReserve(2<<20, 0, 0, 0)
		want(t, "MemAddressReserve", r, proto.ErrNotSupported)
		_, r = b.MemCreate(2<<20, prop, 0)
		want(t, "MemCreate", r, proto.ErrNotSupported)
		want(t, "MemMap", b.MemMap(1<<40, 2<<20, 0, 1, 0), proto.ErrNotSupported)
		want(t, "MemSetAccess", b.MemSetAccess(1<<40, 2<<20, rw), proto.ErrNotSupported)
		want(t, "MemUnmap", b.MemUnmap(1<<40, 2<<20), proto.ErrNotSupported)
		want(t, "MemRelease", b.MemRelease(1), proto.ErrNotSupported)
		want(t, "MemAddressFree", b.MemAddressFree(1<<40, 2<<20), proto.ErrNotSupported)
		_, r = b.MemPoolCreate(proto.MemPoolProps{AllocType: 1, LocType: 1})
		want(t, "MemPoolCreate", r, proto.ErrNotSupported)
		_, r = b.MemAllocFromPoolAsync(1, 1, 0)
		want(t, "MemAllocFromPoolAsync", r, proto.ErrNotSupported)
		want(t, "MemFreeAsync", b.MemFreeAsync(1, 0), proto.ErrNotSupported)
		want(t, "CtxSetLimit", b.CtxSetLimit(2, 1<<20), proto.ErrNotSupported)
		// Nor the peer calls.
		_, r = b.DeviceCanAccessPeer(0, 1)
		want(t, "DeviceCanAccessPeer", r, proto.ErrNotSupported)
		_, r = b.DeviceP2PAttribute(2, 0, 1)
		want(t, "DeviceP2PAttribute", r, proto.ErrNotSupported)
		want(t, "CtxEnablePeerAccess", b.CtxEnablePeerAccess(ctx, 0), proto.ErrNotSupported)
		want(t, "CtxDisablePeerAccess", b.CtxDisablePeerAccess(ctx), proto.ErrNotSupported)
		want(t, "MemcpyPeer", b.MemcpyPeer(0, ctx, 0, ctx, 8, 0, false), proto.ErrNotSupported)
		want(t, "MemcpyPeerAsync", b.MemcpyPeer(0, ctx, 0, ctx, 8, 0, true), proto.ErrNotSupported)
		_, r = b.OccupancyMaxActiveClusters(fn, one, one, 0, 0, make([]proto.LaunchAttr, proto.MaxLaunchAttrs+1))
		want(t, "OccupancyMaxActiveClusters with too many attributes", r, proto.ErrInvalidValue)
		// Nor stream capture and graphs (CUDA 10 to 12.3).
		want(t, "StreamBeginCapture", b.StreamBeginCapture(0, 1), proto.ErrNotSupported)
		_, r = b.StreamEndCapture(0)
		want(t, "StreamEndCapture", r, proto.ErrNotSupported)
		_, _, _, _, _, r = b.StreamCaptureInfo(0)
		want(t, "StreamCaptureInfo", r, proto.ErrNotSupported)
		_, r = b.ThreadExchangeStreamCaptureMode(2)
		want(t, "ThreadExchangeStreamCaptureMode", r, proto.ErrNotSupported)
		_, r = b.GraphCreate(0)
		want(t, "GraphCreate", r, proto.ErrNotSupported)
		_, r = b.GraphNodes(1, false)
		want(t, "GraphNodes", r, proto.ErrNotSupported)
		_, r = b.GraphAddKernelNode(1, nil, fn, one, one, 0, nil)
		want(t, "GraphAddKernelNode", r, proto.ErrNotSupported)
		want(t, "GraphAddDependencies", b.GraphAddDependencies(1, []uintptr{1}, []uintptr{2}, nil), proto.ErrNotSupported)
		_, r = b.GraphInstantiate(1, 0)
		want(t, "GraphInstantiate", r, proto.ErrNotSupported)
		want(t, "GraphLaunch", b.GraphLaunch(1, 0), proto.ErrNotSupported)
		ok(t, "CtxDestroy", b.CtxDestroy(ctx))
	})
}

// TestFakeVirtualMemoryAndPools: the glue of the virtual memory, pool and
// limit calls hands the driver CUDA's structs, with the server's fields in
// place, and widens the pool attributes by their size.
func TestFakeVirtualMemoryAndPools(t *testing.T) {
	b, st := openFake(t)
	withContext(t, b, func(ctx uintptr) {
		prop := proto.MemProp{Type: 1, LocType: 1, LocID: 1, GPUDirectRDMA: 1}
		g, r := b.MemGetAllocationGranularity(prop, proto.MemGranularityRecommended)
		ok(t, "MemGetAllocationGranularity", r)
		eq(t, "granularity", g, 2<<20)
		eq(t, "prop", st.LastProp, [7]uint64{1, 0, 1, 1, 0, 1, 0})
		p, r := b.MemAddressReserve(8<<20, 2<<20, 0x1234, 0)
		ok(t, "MemAddressReserve", r)
		eq(t, "reserved size, alignment, hint", [3]uint64{st.LastSize, st.LastAlign, st.LastAddr}, [3]uint64{8 << 20, 2 << 20, 0x1234})
		h, r := b.MemCreate(2<<20, proto.MemProp{Type: 1, LocType: 1, LocID: 0, Usage: 0}, 0)
		ok(t, "MemCreate", r)
		eq(t, "created prop", st.LastProp, [7]uint64{1, 0, 1, 0, 0, 0, 0})
		ok(t, "MemMap", b.MemMap(p+2<<20, 2<<20, 0, h, 0))
		eq(t, "mapped at, handle", [2]uint64{st.LastAddr, st.LastHandle}, [2]uint64{uint64(p) + 2<<20, h})
		descs := []proto.MemAccessDesc{{LocType: 1, LocID: 0, Flags: 3}, {LocType: 1, LocID: 1, Flags: 1}}
		ok(t, "MemSetAccess", b.MemSetAccess(p, 4<<20, descs))
		eq(t, "access", st.LastAccess, [6]uint64{1, 0, 3, 1, 1, 1})
		eq(t, "descriptors", st.LastAccessCount, 2)
		want(t, "MemSetAccess without descriptors", b.MemSetAccess(p, 4<<20, nil), proto.ErrInvalidValue)
		want(t, "MemSetAccess with too many", b.MemSetAccess(p, 4<<20, make([]proto.MemAccessDesc, proto.MaxMemAccessDescs+1)), proto.ErrInvalidValue)
		f, r := b.MemGetAccess(1, 1, p)
		ok(t, "MemGetAccess", r)
		eq(t, "access flags", f, 3)
		eq(t, "asked location", [2]uint64{st.LastAccess[0], st.LastAccess[1]}, [2]uint64{1, 1})
		ok(t, "MemUnmap", b.MemUnmap(p+2<<20, 2<<20))
		ok(t, "MemRelease", b.MemRelease(h))
		eq(t, "released", st.LastHandle, h)
		ok(t, "MemAddressFree", b.MemAddressFree(p, 8<<20))

		pool, r := b.MemPoolCreate(proto.MemPoolProps{AllocType: 1, LocType: 1, LocID: 1, MaxSize: 64 << 20})
		ok(t, "MemPoolCreate", r)
		eq(t, "pool props", st.LastPoolProps, [6]uint64{1, 0, 1, 1, 64 << 20, 0})
		_, r = b.MemPoolCreate(proto.MemPoolProps{AllocType: 1, LocType: 1, HandleTypes: 1})
		want(t, "MemPoolCreate with a shareable handle", r, proto.ErrInvalidValue)
		s, r := b.StreamCreate(0)
		ok(t, "StreamCreate", r)
		d, r := b.MemAllocFromPoolAsync(4096, pool, s)
		ok(t, "MemAllocFromPoolAsync", r)
		eq(t, "allocated on", st.LastStream, uint64(s))
		ok(t, "MemFreeAsync", b.MemFreeAsync(d, s))
		eq(t, "freed", st.LastAddr, uint64(d))
		ok(t, "MemPoolSetAttribute (int)", b.MemPoolSetAttribute(pool, proto.MemPoolReuseAllowOpportunistic, 0))
		eq(t, "int attribute", [2]uint64{st.LastAttr, st.LastAttrValue}, [2]uint64{2, 0})
		ok(t, "MemPoolSetAttribute (u64)", b.MemPoolSetAttribute(pool, proto.MemPoolReleaseThreshold, 1<<40))
		eq(t, "u64 attribute", st.LastAttrValue, 1<<40)
		v, r := b.MemPoolGetAttribute(pool, proto.MemPoolReuseFollowEventDependencies)
		ok(t, "MemPoolGetAttribute (int)", r)
		eq(t, "int attribute read", v, 1)
		v, r = b.MemPoolGetAttribute(pool, proto.MemPoolUsedMemHigh)
		ok(t, "MemPoolGetAttribute (u64)", r)
		eq(t, "u64 attribute read", v, 0x123456789)
		ok(t, "MemPoolTrimTo", b.MemPoolTrimTo(pool, 77))
		eq(t, "kept", st.LastSize, 77)
		ok(t, "MemPoolSetAccess", b.MemPoolSetAccess(pool, descs[1:]))
		eq(t, "pool access", [3]uint64{st.LastAccess[0], st.LastAccess[1], st.LastAccess[2]}, [3]uint64{1, 1, 1})
		pf, r := b.MemPoolGetAccess(pool, 1, 0)
		ok(t, "MemPoolGetAccess", r)
		eq(t, "pool access flags", pf, 1)
		ok(t, "MemPoolDestroy", b.MemPoolDestroy(pool))
		ok(t, "StreamDestroy", b.StreamDestroy(s))

		ok(t, "CtxSetLimit", b.CtxSetLimit(2, 32<<20))
		eq(t, "limit", [2]uint64{st.LastLimit, st.LastLimitValue}, [2]uint64{2, 32 << 20})
		ok(t, "CtxDestroy", b.CtxDestroy(ctx))
	})
}

// TestFakeNoAllocs holds the hot path to no Go allocation per call.
func TestFakeNoAllocs(t *testing.T) {
	b, _ := openFake(t)
	withContext(t, b, func(ctx uintptr) {
		d, r := b.MemAlloc(1 << 20)
		ok(t, "MemAlloc", r)
		mod, r := b.ModuleLoadData([]byte("ptx"))
		ok(t, "ModuleLoadData", r)
		fn, r := b.ModuleGetFunction(mod, "fill")
		ok(t, "ModuleGetFunction", r)
		s, r := b.StreamCreate(0)
		ok(t, "StreamCreate", r)
		buf := make([]byte, 64<<10)
		params := make([]byte, 16)
		var failed proto.Result
		check := func(r proto.Result) {
			if r != proto.Success && failed == proto.Success {
				failed = r
			}
		}
		allocs := testing.AllocsPerRun(50, func() {
			check(b.MemcpyHtoD(d, buf, s, true))
			check(b.MemcpyHtoD(d, buf, 0, false))
			check(b.LaunchKernel(fn, [3]uint32{1, 1, 1}, [3]uint32{32, 1, 1}, 0, s, params))
			check(b.MemcpyDtoD(d+1024, d, 1024, s, true))
			check(b.MemsetD32(d, 1, 256, s, true))
			ev, r := b.EventCreate(0)
			check(r)
			check(b.EventRecord(ev, s))
			if r := b.EventQuery(ev); r != proto.ErrNotReady {
				check(r)
			}
			check(b.StreamWaitEvent(s, ev, 0))
			check(b.EventDestroy(ev))
			check(b.MemcpyDtoH(buf, d, s))
			check(b.MemcpyDtoH(buf, d, 0))
			_, _, r = b.FuncParamInfo(fn, 1)
			check(r)
		})
		ok(t, "hot path", failed)
		if allocs != 0 {
			t.Fatalf("%v Go allocations per round of hot-path calls, want 0", allocs)
		}
		ok(t, "CtxDestroy", b.CtxDestroy(ctx))
	})
}

// TestFakeConcurrentSessions runs several sessions at once, each on its own
// locked thread and context, as the server does.
func TestFakeConcurrentSessions(t *testing.T) {
	b, st := openFake(t)
	const sessions, rounds, size = 4, 20, 3<<20 + 17
	var wg sync.WaitGroup
	errs := make(chan string, sessions)
	for i := range sessions {
		wg.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			fail := func(what string, r proto.Result) { errs <- what + ": " + r.String() }
			ctx, r := b.CtxCreate(int32(i%2), 0)
			if r != proto.Success {
				fail("CtxCreate", r)
				return
			}
			d, r := b.MemAlloc(size)
			if r != proto.Success {
				fail("MemAlloc", r)
				return
			}
			s, r := b.StreamCreate(0)
			if r != proto.Success {
				fail("StreamCreate", r)
				return
			}
			src := pattern(size, byte(i))
			dst := make([]byte, size)
			for range rounds {
				if r := b.MemcpyHtoD(d, src, s, true); r != proto.Success {
					fail("MemcpyHtoD", r)
					return
				}
				if r := b.MemcpyDtoH(dst, d, s); r != proto.Success {
					fail("MemcpyDtoH", r)
					return
				}
				if !bytes.Equal(dst, src) {
					errs <- "round trip differs"
					return
				}
			}
			b.StreamDestroy(s)
			b.MemFree(d)
			if r := b.CtxDestroy(ctx); r != proto.Success {
				fail("CtxDestroy", r)
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	eq(t, "pinned buffers live", st.LiveHost, 0)
	eq(t, "pinned buffers", st.HostAllocs, sessions*StagingSlots)
	eq(t, "contexts known", len(b.ctxs), 0)
}

// TestFakeGraphs checks the capture and graph glue: arguments reach the
// driver in its structures (kernel parameters as extra's buffer, memset and
// CUDA_MEMCPY3D fields, node arrays, edge data), and what it returns comes
// back (more dependencies than the first guess, edge data).
func TestFakeGraphs(t *testing.T) {
	b, st := openFake(t)
	withContext(t, b, func(ctx uintptr) {
		s, r := b.StreamCreate(0)
		ok(t, "StreamCreate", r)
		ok(t, "StreamBeginCapture", b.StreamBeginCapture(s, 1))
		eq(t, "capture mode", st.CaptureMode, 1)
		eq(t, "capture stream", st.CaptureStream, uint64(s))
		status, id, g, deps, edges, r := b.StreamCaptureInfo(s)
		ok(t, "StreamCaptureInfo", r)
		eq(t, "status", status, 1)
		eq(t, "capture ID", id, 77)
		if g == 0 || len(deps) != 20 || deps[1]-deps[0] != 1 || len(edges) != 20*proto.EdgeDataSize {
			t.Fatalf("capture info: graph %#x, %d deps, %d bytes of edges", g, len(deps), len(edges))
		}
		eq(t, "the last edge's type", edges[19*proto.EdgeDataSize+2], 1)
		ok(t, "StreamUpdateCaptureDependencies", b.StreamUpdateCaptureDependencies(s, deps[:1], edges[152:160], 1))
		eq(t, "dependencies set", st.UpdateN, 1)
		eq(t, "flags", st.UpdateFlags, 1)
		eq(t, "first dependency", st.UpdateFirst, uint64(deps[0]))
		eq(t, "edge data passed", st.UpdateEdge0, 2)
		prev, r := b.ThreadExchangeStreamCaptureMode(2)
		ok(t, "ThreadExchangeStreamCaptureMode", r)
		eq(t, "previous mode", prev, 0)
		prev, _ = b.ThreadExchangeStreamCaptureMode(0)
		eq(t, "previous mode", prev, 2)
		cg, r := b.StreamEndCapture(s)
		ok(t, "StreamEndCapture", r)
		status, _, _, _, _, r = b.StreamCaptureInfo(s)
		ok(t, "StreamCaptureInfo after the end", r)
		eq(t, "status", status, 0)

		nodes, r := b.GraphNodes(cg, false)
		ok(t, "GraphNodes", r)
		roots, r := b.GraphNodes(cg, true)
		ok(t, "GraphNodes(roots)", r)
		if len(nodes) != 3 || len(roots) != 1 || roots[0] != nodes[0] {
			t.Fatalf("nodes %v roots %v", nodes, roots)
		}

		mod, r := b.ModuleLoadData([]byte("ptx"))
		ok(t, "ModuleLoadData", r)
		fn, r := b.ModuleGetFunction(mod, "fill")
		ok(t, "ModuleGetFunction", r)
		params := pattern(16, 4)
		kn, r := b.GraphAddKernelNode(cg, nodes[:2], fn, [3]uint32{2, 1, 1}, [3]uint32{64, 1, 1}, 128, params)
		ok(t, "GraphAddKernelNode", r)
		eq(t, "dependencies", st.NodeNdeps, 2)
		eq(t, "first dependency", st.NodeFirstDep, uint64(nodes[0]))
		eq(t, "grid", st.LaunchGrid, [3]uint64{2, 1, 1})
		eq(t, "shared memory", st.LaunchShmem, 128)
		eq(t, "extra keys (BUFFER_POINTER, BUFFER_SIZE)", st.LaunchExtraKeys, 12)
		if !bytes.Equal(st.LaunchBuf[:16], params) {
			t.Fatalf("node parameters % x, want % x", st.LaunchBuf[:16], params)
		}
		_, r = b.GraphAddMemsetNode(cg, nil, 0x1000, 256, 0xabcd, 2, 64, 3)
		ok(t, "GraphAddMemsetNode", r)
		eq(t, "memset", [6]uint64{st.MemsetDst, st.MemsetPitch, st.MemsetValue, st.MemsetElem, st.MemsetWidth, st.MemsetHeight},
			[6]uint64{0x1000, 256, 0xabcd, 2, 64, 3})
		eq(t, "memset node's context", st.NodeCtx, uint64(ctx))
		c := proto.Copy3D{Src: 1, SrcX: 2, SrcY: 3, SrcZ: 4, SrcPitch: 5, SrcHeight: 6, Dst: 7, DstX: 8, DstY: 9, DstZ: 10,
			DstPitch: 11, DstHeight: 12, Width: 13, Height: 14, Depth: 15}
		_, r = b.GraphAddMemcpyNode(cg, nil, c)
		ok(t, "GraphAddMemcpyNode", r)
		eq(t, "memory types (device, device)", st.MemcpyTypes, 22)
		eq(t, "CUDA_MEMCPY3D", st.MemcpyF, [15]uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})
		_, r = b.GraphAddEmptyNode(cg, nil)
		ok(t, "GraphAddEmptyNode", r)
		ev, r := b.EventCreate(0)
		ok(t, "EventCreate", r)
		_, r = b.GraphAddEventNode(cg, nodes[2:], ev, true)
		ok(t, "GraphAddEventNode", r)
		eq(t, "event", st.NodeEvent, uint64(ev))
		eq(t, "wait", st.NodeWait, 1)
		ok(t, "GraphAddDependencies", b.GraphAddDependencies(cg, nodes[:1], nodes[1:2], []byte{5, 0, 0, 0, 0, 0, 0, 0}))
		eq(t, "edges", st.DepN, 1)
		eq(t, "edge data passed", st.DepEdge0, 6)
		want(t, "GraphAddDependencies(3 from, 2 to)", b.GraphAddDependencies(cg, nodes, nodes[:2], nil), proto.ErrInvalidValue)

		e, r := b.GraphInstantiate(cg, 1)
		ok(t, "GraphInstantiate", r)
		eq(t, "instantiate flags", st.InstantiateFlags, 1)
		ok(t, "GraphUpload", b.GraphUpload(e, s))
		ok(t, "GraphLaunch", b.GraphLaunch(e, s))
		eq(t, "uploads", st.GraphUploads, 1)
		eq(t, "launches", st.GraphLaunches, 1)
		eq(t, "launch stream", st.GraphStream, uint64(s))
		ok(t, "GraphExecKernelNodeSetParams", b.GraphExecKernelNodeSetParams(e, kn, fn, [3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 0, params[:8]))
		eq(t, "node", st.ExecParamNode, uint64(kn))
		eq(t, "new parameter size", st.LaunchSize, 8)
		clone, r := b.GraphClone(cg)
		ok(t, "GraphClone", r)
		ok(t, "GraphExecDestroy", b.GraphExecDestroy(e))
		ok(t, "GraphDestroy", b.GraphDestroy(clone))
		ok(t, "GraphDestroy", b.GraphDestroy(cg))
		want(t, "GraphDestroy(destroyed)", b.GraphDestroy(cg), proto.ErrInvalidHandle)
		eq(t, "graphs destroyed", st.GraphsDestroyed, 2)
		ok(t, "CtxDestroy", b.CtxDestroy(ctx))
	})
}
