//go:build gpu

// The backend on a real GPU (an H200 in gpumux's runs). Build the test
// binary here and run it where the GPU is (no Go needed there):
//
//	go test -c -tags gpu -o .devbin/cudabackend.test ./remote/cudabackend/
//	.devbin/cudabackend.test -test.v -test.run GPU
//
// GPUMUX_LIBCUDA names another driver library than libcuda.so.1.

package cudabackend

import (
	"bytes"
	"encoding/binary"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/gpumux/gpumux/remote/proto"
)

// fillPTX is fill(u32 *p, u32 v, u32 n): p[i] = v for i < n, and each
// thread that stores adds 1 to the global counter.
const fillPTX = `.version 8.0
.target sm_90
.address_size 64

.visible .global .align 4 .u32 counter;

.visible .entry fill(
	.param .u64 fill_param_p,
	.param .u32 fill_param_v,
	.param .u32 fill_param_n
)
{
	.reg .pred %p<2>;
	.reg .b32 %r<6>;
	.reg .b64 %rd<5>;

	ld.param.u64 %rd1, [fill_param_p];
	ld.param.u32 %r1, [fill_param_v];
	ld.param.u32 %r2, [fill_param_n];
	mov.u32 %r3, %ctaid.x;
	mov.u32 %r4, %ntid.x;
	mov.u32 %r5, %tid.x;
	mad.lo.s32 %r3, %r3, %r4, %r5;
	setp.ge.u32 %p1, %r3, %r2;
	@%p1 bra DONE;
	cvta.to.global.u64 %rd2, %rd1;
	mul.wide.u32 %rd3, %r3, 4;
	add.s64 %rd4, %rd2, %rd3;
	st.global.u32 [%rd4], %r1;
	mov.u32 %r0, 1;
	red.global.add.u32 [counter], %r0;
DONE:
	ret;
}
`

func openGPU(t *testing.T) *Backend {
	t.Helper()
	b, err := Open(os.Getenv("GPUMUX_LIBCUDA"))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return b
}

// onGPUThread runs f as a server session runs: on the test's goroutine,
// locked to its OS thread, with a new context on device 0 set current; it
// destroys the context after f.
func onGPUThread(t *testing.T, b *Backend, f func(ctx uintptr)) {
	t.Helper()
	withContext(t, b, func(ctx uintptr) {
		f(ctx)
		ok(t, "CtxDestroy", b.CtxDestroy(ctx))
	})
}

func params(p proto.DevPtr, v, n uint32) []byte {
	b := make([]byte, 16)
	binary.LittleEndian.PutUint64(b[0:], uint64(p))
	binary.LittleEndian.PutUint32(b[8:], v)
	binary.LittleEndian.PutUint32(b[12:], n)
	return b
}

func TestGPUDevice(t *testing.T) {
	b := openGPU(t)
	v, r := b.DriverVersion()
	ok(t, "DriverVersion", r)
	n, r := b.DeviceCount()
	ok(t, "DeviceCount", r)
	if n < 1 {
		t.Fatalf("DeviceCount = %d", n)
	}
	name, r := b.DeviceName(0)
	ok(t, "DeviceName", r)
	if name == "" {
		t.Fatal("DeviceName: empty")
	}
	mem, r := b.DeviceTotalMem(0)
	ok(t, "DeviceTotalMem", r)
	major, r := b.DeviceAttribute(75, 0)
	ok(t, "DeviceAttribute(COMPUTE_CAPABILITY_MAJOR)", r)
	minor, r := b.DeviceAttribute(76, 0)
	ok(t, "DeviceAttribute(COMPUTE_CAPABILITY_MINOR)", r)
	sms, r := b.DeviceAttribute(16, 0)
	ok(t, "DeviceAttribute(MULTIPROCESSOR_COUNT)", r)
	u, r := b.DeviceUUID(0)
	ok(t, "DeviceUUID", r)
	t.Logf("driver %d, %d device(s); 0: %q, %d MiB, sm_%d%d, %d SMs, uuid GPU-%x-%x-%x-%x-%x",
		v, n, name, mem>>20, major, minor, sms, u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
	if mem < 1<<30 || sms < 1 || major < 1 || u == [16]byte{} {
		t.Fatal("implausible device properties")
	}
	if strings.Contains(name, "H200") || strings.Contains(name, "H100") {
		eq(t, "compute capability", [2]int32{major, minor}, [2]int32{9, 0})
		eq(t, "SM count", sms, 132)
	}
	_, r = b.DeviceName(n)
	want(t, "DeviceName(past the last)", r, proto.ErrInvalidDevice)
}

func TestGPUMemory(t *testing.T) {
	b := openGPU(t)
	onGPUThread(t, b, func(ctx uintptr) {
		free, total, r := b.MemGetInfo()
		ok(t, "MemGetInfo", r)
		if free == 0 || free > total {
			t.Fatalf("MemGetInfo: free %d of %d", free, total)
		}
		const size = 5 << 20
		d1, r := b.MemAlloc(size)
		ok(t, "MemAlloc", r)
		d2, r := b.MemAlloc(size)
		ok(t, "MemAlloc", r)
		src := pattern(size, 11)
		dst := make([]byte, size)

		// Synchronous: Go memory straight to the driver.
		ok(t, "MemcpyHtoD", b.MemcpyHtoD(d1, src, 0, false))
		ok(t, "MemcpyDtoD", b.MemcpyDtoD(d2, d1, size, 0, false))
		ok(t, "MemcpyDtoH", b.MemcpyDtoH(dst, d2, 0))
		if !bytes.Equal(dst, src) {
			t.Fatal("synchronous round trip differs")
		}

		// Asynchronous through the staging ring, on a stream.
		s, r := b.StreamCreate(1) // CU_STREAM_NON_BLOCKING
		ok(t, "StreamCreate", r)
		src2 := pattern(size, 77)
		orig := bytes.Clone(src2)
		ok(t, "MemcpyHtoD async", b.MemcpyHtoD(d1, src2, s, true))
		clear(src2)
		ok(t, "MemcpyDtoD async", b.MemcpyDtoD(d2, d1, size, s, true))
		clear(dst)
		ok(t, "MemcpyDtoH on a stream", b.MemcpyDtoH(dst, d2, s))
		if !bytes.Equal(dst, orig) {
			t.Fatal("staged round trip differs")
		}

		// Memsets.
		ok(t, "MemsetD32", b.MemsetD32(d1, 0xdeadbeef, size/4, 0, false))
		ok(t, "MemsetD8 async", b.MemsetD8(d1+100, 0x5a, 28, s, true))
		ok(t, "MemsetD32 async", b.MemsetD32(d1+size-8, 7, 2, s, true))
		ok(t, "MemcpyDtoH on a stream", b.MemcpyDtoH(dst, d1, s))
		for i := 0; i < size; i += 4 {
			w := uint32(0xdeadbeef)
			switch {
			case i >= 100 && i < 128:
				w = 0x5a5a5a5a
			case i >= size-8:
				w = 7
			}
			if got := binary.LittleEndian.Uint32(dst[i:]); got != w {
				t.Fatalf("word at %d = %#x, want %#x", i, got, w)
			}
		}

		ok(t, "StreamDestroy", b.StreamDestroy(s))
		ok(t, "MemFree", b.MemFree(d1))
		ok(t, "MemFree", b.MemFree(d2))
		if r := b.MemFree(d1); r == proto.Success {
			t.Fatal("MemFree of a freed pointer succeeded")
		}
		r = b.MemFree(0xdead0000)
		if r == proto.Success {
			t.Fatal("MemFree of a bad pointer succeeded")
		}
		t.Logf("MemFree(bad): %v", r)
		ok(t, "CtxSynchronize", b.CtxSynchronize())
	})
}

func TestGPUKernel(t *testing.T) {
	b := openGPU(t)
	onGPUThread(t, b, func(ctx uintptr) {
		mod, r := b.ModuleLoadData([]byte(fillPTX)) // no NUL: the backend adds it
		ok(t, "ModuleLoadData", r)
		fn, r := b.ModuleGetFunction(mod, "fill")
		ok(t, "ModuleGetFunction", r)
		_, r = b.ModuleGetFunction(mod, "nope")
		want(t, "ModuleGetFunction(nope)", r, proto.ErrNotFound)
		for i, w := range [][2]uint64{{0, 8}, {8, 4}, {12, 4}} {
			off, size, r := b.FuncParamInfo(fn, uint64(i))
			ok(t, "FuncParamInfo", r)
			eq(t, "param (offset, size)", [2]uint64{off, size}, w)
		}
		_, _, r = b.FuncParamInfo(fn, 3)
		want(t, "FuncParamInfo(3)", r, proto.ErrInvalidValue)
		maxThreads, r := b.FuncGetAttribute(0, fn)
		ok(t, "FuncGetAttribute(MAX_THREADS_PER_BLOCK)", r)
		regs, r := b.FuncGetAttribute(4, fn)
		ok(t, "FuncGetAttribute(NUM_REGS)", r)
		t.Logf("fill: %d threads/block at most, %d registers", maxThreads, regs)
		counter, csize, r := b.ModuleGetGlobal(mod, "counter")
		ok(t, "ModuleGetGlobal", r)
		eq(t, "counter size", csize, 4)

		const size = 5 << 20
		const words = size / 4
		d, r := b.MemAlloc(size)
		ok(t, "MemAlloc", r)
		ok(t, "MemsetD32", b.MemsetD32(d, 0, words, 0, false))
		ok(t, "MemsetD32(counter)", b.MemsetD32(counter, 0, 1, 0, false))
		s, r := b.StreamCreate(0)
		ok(t, "StreamCreate", r)
		start, r := b.EventCreate(0)
		ok(t, "EventCreate", r)
		end, r := b.EventCreate(0)
		ok(t, "EventCreate", r)

		const n = words - 1000 // the last 1000 words stay 0
		ok(t, "EventRecord", b.EventRecord(start, s))
		ok(t, "LaunchKernel", b.LaunchKernel(fn, [3]uint32{(n + 255) / 256, 1, 1}, [3]uint32{256, 1, 1}, 0, s, params(d, 0x12345678, n)))
		ok(t, "EventRecord", b.EventRecord(end, s))
		ok(t, "EventSynchronize", b.EventSynchronize(end))
		ok(t, "EventQuery", b.EventQuery(end))
		ok(t, "StreamQuery", b.StreamQuery(s))
		ms, r := b.EventElapsedTime(start, end)
		ok(t, "EventElapsedTime", r)
		if ms < 0 {
			t.Fatalf("EventElapsedTime = %v", ms)
		}
		t.Logf("fill of %d words: %.3f ms", n, ms)

		dst := make([]byte, size)
		ok(t, "MemcpyDtoH on a stream", b.MemcpyDtoH(dst, d, s))
		for i := range words {
			w := uint32(0x12345678)
			if i >= n {
				w = 0
			}
			if got := binary.LittleEndian.Uint32(dst[4*i:]); got != w {
				t.Fatalf("word %d = %#x, want %#x", i, got, w)
			}
		}
		var c [4]byte
		ok(t, "MemcpyDtoH(counter)", b.MemcpyDtoH(c[:], counter, 0))
		eq(t, "counter", binary.LittleEndian.Uint32(c[:]), n)

		// A second stream waits on an event of the first.
		s2, r := b.StreamCreate(1)
		ok(t, "StreamCreate", r)
		ok(t, "LaunchKernel", b.LaunchKernel(fn, [3]uint32{(n + 255) / 256, 1, 1}, [3]uint32{256, 1, 1}, 0, s, params(d, 0xabcdef01, n)))
		ok(t, "EventRecord", b.EventRecord(end, s))
		ok(t, "StreamWaitEvent", b.StreamWaitEvent(s2, end, 0))
		ok(t, "MemcpyDtoH on the waiting stream", b.MemcpyDtoH(dst[:16], d, s2))
		eq(t, "word 0 after the second launch", binary.LittleEndian.Uint32(dst), 0xabcdef01)

		// Bad launches fail without spoiling the context.
		r = b.LaunchKernel(fn, [3]uint32{1, 1, 1}, [3]uint32{4096, 1, 1}, 0, s, params(d, 1, 1))
		if r == proto.Success {
			t.Fatal("a launch of 4096 threads per block succeeded")
		}
		t.Logf("launch of 4096 threads/block: %v", r)
		_, r = b.ModuleLoadData([]byte("this is not PTX"))
		if r == proto.Success {
			t.Fatal("ModuleLoadData of garbage succeeded")
		}
		t.Logf("ModuleLoadData(garbage): %v", r)
		ok(t, "CtxSynchronize", b.CtxSynchronize())

		ok(t, "EventDestroy", b.EventDestroy(start))
		ok(t, "EventDestroy", b.EventDestroy(end))
		ok(t, "StreamDestroy", b.StreamDestroy(s))
		ok(t, "StreamDestroy", b.StreamDestroy(s2))
		ok(t, "MemFree", b.MemFree(d))
		ok(t, "ModuleUnload", b.ModuleUnload(mod))
	})
}

// TestGPUSessions runs sessions at once, each on its own locked thread and
// context, with staged copies and launches.
func TestGPUSessions(t *testing.T) {
	b := openGPU(t)
	const sessions, rounds, size = 4, 10, 3<<20 + 4
	var wg sync.WaitGroup
	for i := range sessions {
		wg.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			fail := func(what string, r proto.Result) bool {
				if r != proto.Success {
					t.Errorf("session %d: %s: %v", i, what, r)
					return true
				}
				return false
			}
			ctx, r := b.CtxCreate(0, 0)
			if fail("CtxCreate", r) || fail("CtxSetCurrent", b.CtxSetCurrent(ctx)) {
				return
			}
			defer func() { fail("CtxDestroy", b.CtxDestroy(ctx)) }()
			mod, r := b.ModuleLoadData([]byte(fillPTX))
			if fail("ModuleLoadData", r) {
				return
			}
			defer func() { fail("ModuleUnload", b.ModuleUnload(mod)) }()
			fn, r := b.ModuleGetFunction(mod, "fill")
			if fail("ModuleGetFunction", r) {
				return
			}
			d, r := b.MemAlloc(size)
			if fail("MemAlloc", r) {
				return
			}
			defer func() { fail("MemFree", b.MemFree(d)) }()
			s, r := b.StreamCreate(1)
			if fail("StreamCreate", r) {
				return
			}
			defer func() { fail("StreamDestroy", b.StreamDestroy(s)) }()
			src := pattern(size, byte(i))
			dst := make([]byte, size)
			for k := range rounds {
				v := uint32(i<<16 | k)
				if fail("MemcpyHtoD async", b.MemcpyHtoD(d, src, s, true)) ||
					fail("LaunchKernel", b.LaunchKernel(fn, [3]uint32{1, 1, 1}, [3]uint32{64, 1, 1}, 0, s, params(d, v, 64))) ||
					fail("MemcpyDtoH", b.MemcpyDtoH(dst, d, s)) {
					return
				}
				for j := range 64 {
					if got := binary.LittleEndian.Uint32(dst[4*j:]); got != v {
						t.Errorf("session %d round %d: word %d = %#x, want %#x", i, k, j, got, v)
						return
					}
				}
				if !bytes.Equal(dst[256:], src[256:]) {
					t.Errorf("session %d round %d: data differs", i, k)
					return
				}
			}
		})
	}
	wg.Wait()
	b.mu.RLock()
	left := len(b.ctxs)
	b.mu.RUnlock()
	eq(t, "contexts known", left, 0)
}

// TestGPUVirtualMemoryAndPools: the expandable-segment and stream-ordered
// sequences on the driver, a pool's maximum size honoured, and what
// raising each limit costs in device memory against gpumux's estimate
// (remote/server/ctxlimit.go), logged for docs/remote.md.
func TestGPUVirtualMemoryAndPools(t *testing.T) {
	b := openGPU(t)
	onGPUThread(t, b, func(ctx uintptr) {
		prop := proto.MemProp{Type: proto.MemAllocationTypePinned, LocType: proto.MemLocationTypeDevice}
		g, r := b.MemGetAllocationGranularity(prop, proto.MemGranularityRecommended)
		ok(t, "MemGetAllocationGranularity", r)
		t.Logf("granularity %d", g)
		va, r := b.MemAddressReserve(8*g, 0, 0, 0)
		ok(t, "MemAddressReserve", r)
		var hs []uint64
		for i := range 2 {
			h, r := b.MemCreate(g, prop, 0)
			ok(t, "MemCreate", r)
			ok(t, "MemMap", b.MemMap(va+proto.DevPtr(uint64(i)*g), g, 0, h, 0))
			hs = append(hs, h)
		}
		rw := []proto.MemAccessDesc{{LocType: proto.MemLocationTypeDevice, Flags: proto.MemAccessReadWrite}}
		ok(t, "MemSetAccess", b.MemSetAccess(va, 2*g, rw))
		f, r := b.MemGetAccess(proto.MemLocationTypeDevice, 0, va)
		ok(t, "MemGetAccess", r)
		eq(t, "access", f, uint64(proto.MemAccessReadWrite))
		// A copy across the two mappings, and a kernel on them.
		src := pattern(1<<20, 5)
		dst := make([]byte, len(src))
		at := va + proto.DevPtr(g) - 1<<19
		ok(t, "MemcpyHtoD", b.MemcpyHtoD(at, src, 0, false))
		ok(t, "MemcpyDtoH", b.MemcpyDtoH(dst, at, 0))
		if !bytes.Equal(dst, src) {
			t.Fatal("a round trip across mappings differs")
		}
		mod, r := b.ModuleLoadData([]byte(fillPTX))
		ok(t, "ModuleLoadData", r)
		fn, r := b.ModuleGetFunction(mod, "fill")
		ok(t, "ModuleGetFunction", r)
		ok(t, "LaunchKernel on mappings", b.LaunchKernel(fn, [3]uint32{4, 1, 1}, [3]uint32{256, 1, 1}, 0, 0, params(at, 9, 1024)))
		ok(t, "CtxSynchronize", b.CtxSynchronize())
		ok(t, "MemcpyDtoH", b.MemcpyDtoH(dst[:4096], at, 0))
		eq(t, "word written by the kernel", binary.LittleEndian.Uint32(dst[4092:]), 9)
		ok(t, "ModuleUnload", b.ModuleUnload(mod))
		ok(t, "MemUnmap of both", b.MemUnmap(va, 2*g))
		for _, h := range hs {
			ok(t, "MemRelease", b.MemRelease(h))
		}
		ok(t, "MemAddressFree", b.MemAddressFree(va, 8*g))

		// A pool of at most 64 MiB.
		pool, r := b.MemPoolCreate(proto.MemPoolProps{AllocType: 1, LocType: 1, MaxSize: 64 << 20})
		ok(t, "MemPoolCreate", r)
		s, r := b.StreamCreate(1)
		ok(t, "StreamCreate", r)
		d, r := b.MemAllocFromPoolAsync(48<<20, pool, s)
		ok(t, "MemAllocFromPoolAsync", r)
		_, r = b.MemAllocFromPoolAsync(32<<20, pool, s)
		t.Logf("an allocation past the pool's maximum size: %v", r)
		if r == proto.Success {
			t.Error("the pool's maximum size is not honoured")
		}
		ok(t, "MemPoolSetAttribute(release threshold)", b.MemPoolSetAttribute(pool, proto.MemPoolReleaseThreshold, 1<<40))
		ok(t, "MemFreeAsync", b.MemFreeAsync(d, s))
		ok(t, "StreamSynchronize", b.StreamSynchronize(s))
		res, r := b.MemPoolGetAttribute(pool, proto.MemPoolReservedMemCurrent)
		ok(t, "MemPoolGetAttribute(reserved)", r)
		ok(t, "MemPoolTrimTo", b.MemPoolTrimTo(pool, 0))
		after, r := b.MemPoolGetAttribute(pool, proto.MemPoolReservedMemCurrent)
		ok(t, "MemPoolGetAttribute(reserved)", r)
		t.Logf("pool reserved %d after the free, %d after trimming", res, after)
		reuse, r := b.MemPoolGetAttribute(pool, proto.MemPoolReuseAllowOpportunistic)
		ok(t, "MemPoolGetAttribute(reuse)", r)
		eq(t, "reuse opportunistic", reuse, 1)
		ok(t, "StreamDestroy", b.StreamDestroy(s))
		ok(t, "MemPoolDestroy", b.MemPoolDestroy(pool))

		// What each limit costs: the drop in free memory.
		for _, l := range []struct {
			limit uint32
			name  string
			value uint64
		}{{0, "stack size", 4096}, {1, "printf FIFO", 64 << 20}, {2, "malloc heap", 256 << 20}, {4, "pending launches", 32768}} {
			before, _, r := b.MemGetInfo()
			ok(t, "MemGetInfo", r)
			old, r := b.CtxGetLimit(l.limit)
			ok(t, "CtxGetLimit", r)
			ok(t, "CtxSetLimit "+l.name, b.CtxSetLimit(l.limit, l.value))
			free, _, r := b.MemGetInfo()
			ok(t, "MemGetInfo", r)
			t.Logf("%s %d -> %d: free memory %d -> %d (%d MiB)", l.name, old, l.value, before, free, (int64(before)-int64(free))>>20)
			ok(t, "CtxSetLimit back", b.CtxSetLimit(l.limit, old))
		}
	})
}

// TestGPUPeers needs two GPUs (skipped with one): the peer calls on
// contexts of devices 0 and 1, peer copies both ways with the data
// compared, and a kernel of device 0 writing device 1's memory once peer
// access is on (where the pair supports it). It logs what the driver says
// of a plain cuMemcpyDtoD between the devices, which the server never
// sends (it sends cuMemcpyPeer).
func TestGPUPeers(t *testing.T) {
	b := openGPU(t)
	n, r := b.DeviceCount()
	ok(t, "DeviceCount", r)
	if n < 2 {
		t.Skipf("SKIP: %d GPU(s); this test needs two", n)
	}
	can, r := b.DeviceCanAccessPeer(0, 1)
	ok(t, "DeviceCanAccessPeer(0, 1)", r)
	self, r := b.DeviceCanAccessPeer(0, 0)
	ok(t, "DeviceCanAccessPeer(0, 0)", r)
	eq(t, "a device as its own peer", self, 0)
	rank, r := b.DeviceP2PAttribute(1, 0, 1)
	ok(t, "DeviceP2PAttribute(PERFORMANCE_RANK)", r)
	access, r := b.DeviceP2PAttribute(2, 0, 1)
	ok(t, "DeviceP2PAttribute(ACCESS_SUPPORTED)", r)
	atomics, r := b.DeviceP2PAttribute(3, 0, 1)
	ok(t, "DeviceP2PAttribute(NATIVE_ATOMIC_SUPPORTED)", r)
	_, r = b.DeviceP2PAttribute(2, 1, 1)
	t.Logf("GPU 0 → 1: can access %d, rank %d, access %d, atomics %d; P2P attribute of one device: %v", can, rank, access, atomics, r)
	if r == proto.Success {
		t.Error("DeviceP2PAttribute of a device with itself succeeded")
	}

	onGPUThread(t, b, func(ctx0 uintptr) {
		ctx1, r := b.CtxCreate(1, 0)
		ok(t, "CtxCreate(1)", r)
		defer func() { ok(t, "CtxDestroy(1)", b.CtxDestroy(ctx1)) }()
		const size = 5 << 20
		ok(t, "CtxSetCurrent(1)", b.CtxSetCurrent(ctx1))
		d1, r := b.MemAlloc(size)
		ok(t, "MemAlloc on 1", r)
		ok(t, "CtxSetCurrent(0)", b.CtxSetCurrent(ctx0))
		d0, r := b.MemAlloc(size)
		ok(t, "MemAlloc on 0", r)

		src := pattern(size, 5)
		got := make([]byte, size)
		ok(t, "MemcpyHtoD", b.MemcpyHtoD(d0, src, 0, false))
		ok(t, "MemcpyPeer 0→1", b.MemcpyPeer(d1, ctx1, d0, ctx0, size, 0, false))
		ok(t, "MemsetD8", b.MemsetD8(d0, 0, size, 0, false))
		s, r := b.StreamCreate(1)
		ok(t, "StreamCreate", r)
		ok(t, "MemcpyPeer async 1→0", b.MemcpyPeer(d0, ctx0, d1, ctx1, size, s, true))
		ok(t, "StreamSynchronize", b.StreamSynchronize(s))
		ok(t, "MemcpyDtoH", b.MemcpyDtoH(got, d0, 0))
		if !bytes.Equal(got, src) {
			t.Fatal("peer copies there and back differ")
		}
		t.Logf("cuMemcpyDtoD from GPU 0 to GPU 1 (not used by the server): %v", b.MemcpyDtoD(d1, d0, 4096, 0, false))

		if can == 1 {
			ok(t, "CtxEnablePeerAccess", b.CtxEnablePeerAccess(ctx1, 0))
			want(t, "CtxEnablePeerAccess again", b.CtxEnablePeerAccess(ctx1, 0), proto.ErrPeerAccessAlreadyEnabled)
			mod, r := b.ModuleLoadData([]byte(fillPTX))
			ok(t, "ModuleLoadData", r)
			fn, r := b.ModuleGetFunction(mod, "fill")
			ok(t, "ModuleGetFunction", r)
			ok(t, "LaunchKernel on 0 into 1's memory", b.LaunchKernel(fn, [3]uint32{4, 1, 1}, [3]uint32{256, 1, 1}, 0, s, params(d1, 0xfeedf00d, 1024)))
			ok(t, "StreamSynchronize", b.StreamSynchronize(s))
			ok(t, "MemcpyPeer 1→0", b.MemcpyPeer(d0, ctx0, d1, ctx1, 4096, 0, false))
			ok(t, "MemcpyDtoH", b.MemcpyDtoH(got[:4096], d0, 0))
			for i := 0; i < 4096; i += 4 {
				if w := binary.LittleEndian.Uint32(got[i:]); w != 0xfeedf00d {
					t.Fatalf("word %d of GPU 1's memory after the kernel of GPU 0: %#x", i/4, w)
				}
			}
			ok(t, "ModuleUnload", b.ModuleUnload(mod))
			ok(t, "CtxDisablePeerAccess", b.CtxDisablePeerAccess(ctx1))
			want(t, "CtxDisablePeerAccess again", b.CtxDisablePeerAccess(ctx1), proto.ErrPeerAccessNotEnabled)
		}
		ok(t, "StreamDestroy", b.StreamDestroy(s))
		ok(t, "MemFree on 0", b.MemFree(d0))
		ok(t, "CtxSetCurrent(1)", b.CtxSetCurrent(ctx1))
		ok(t, "MemFree on 1", b.MemFree(d1))
		ok(t, "CtxSetCurrent(0)", b.CtxSetCurrent(ctx0))
	})
}

// TestGPUGraphs: a capture of a kernel, a memset and a device copy,
// replayed with new input; an explicit graph; and what the server relies
// on: a query of a capturing stream invalidates the capture (how it
// invalidates one after refusing a host copy), and a thread-local capture
// leaves another thread's allocations alone.
func TestGPUGraphs(t *testing.T) {
	b := openGPU(t)
	onGPUThread(t, b, func(ctx uintptr) {
		mod, r := b.ModuleLoadData([]byte(fillPTX))
		ok(t, "ModuleLoadData", r)
		fn, r := b.ModuleGetFunction(mod, "fill")
		ok(t, "ModuleGetFunction", r)
		const words = 1 << 16
		d, r := b.MemAlloc(4 * words)
		ok(t, "MemAlloc", r)
		out, r := b.MemAlloc(4 * words)
		ok(t, "MemAlloc", r)
		s, r := b.StreamCreate(1)
		ok(t, "StreamCreate", r)

		ok(t, "StreamBeginCapture", b.StreamBeginCapture(s, proto.CaptureModeThreadLocal))
		ok(t, "captured LaunchKernel", b.LaunchKernel(fn, [3]uint32{words / 256, 1, 1}, [3]uint32{256, 1, 1}, 0, s, params(d, 7, words/2)))
		ok(t, "captured MemsetD32", b.MemsetD32(d+4*(words/2), 9, words/2, s, true))
		ok(t, "captured MemcpyDtoD", b.MemcpyDtoD(out, d, 4*words, s, true))
		status, id, g, deps, _, r := b.StreamCaptureInfo(s)
		ok(t, "StreamCaptureInfo", r)
		if status != proto.CaptureActive || id == 0 || g == 0 || len(deps) != 1 {
			t.Fatalf("capture info: status %d id %d graph %#x %d deps", status, id, g, len(deps))
		}
		// Another thread allocates while this one captures thread-locally.
		var wg sync.WaitGroup
		wg.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			if r := b.CtxSetCurrent(ctx); r != proto.Success {
				t.Errorf("CtxSetCurrent on another thread: %v", r)
				return
			}
			p, r := b.MemAlloc(256)
			if r != proto.Success {
				t.Errorf("another thread's MemAlloc during a thread-local capture: %v", r)
				return
			}
			b.MemFree(p)
		})
		wg.Wait()
		eg, r := b.StreamEndCapture(s)
		ok(t, "StreamEndCapture", r)
		eq(t, "the capture's graph", eg, g)
		nodes, r := b.GraphNodes(g, false)
		ok(t, "GraphNodes", r)
		eq(t, "captured nodes", len(nodes), 3)
		e, r := b.GraphInstantiate(g, proto.GraphInstantiateAutoFreeOnLaunch)
		ok(t, "GraphInstantiate", r)
		got := make([]byte, 4*words)
		for round := range 3 {
			ok(t, "MemsetD32 (new input)", b.MemsetD32(d, uint32(round), words, 0, false))
			if round == 2 {
				ok(t, "GraphExecKernelNodeSetParams", b.GraphExecKernelNodeSetParams(e, nodes[0], fn, [3]uint32{words / 256, 1, 1}, [3]uint32{256, 1, 1}, 0, params(d, 8, words/2)))
			}
			ok(t, "GraphLaunch", b.GraphLaunch(e, s))
			ok(t, "StreamSynchronize", b.StreamSynchronize(s))
			ok(t, "MemcpyDtoH", b.MemcpyDtoH(got, out, 0))
			want := uint32(7)
			if round == 2 {
				want = 8
			}
			eq(t, "replayed kernel's word", binary.LittleEndian.Uint32(got[0:]), want)
			eq(t, "replayed memset's word", binary.LittleEndian.Uint32(got[4*words-4:]), 9)
		}
		ok(t, "GraphExecDestroy", b.GraphExecDestroy(e))
		ok(t, "GraphDestroy", b.GraphDestroy(g))

		// Querying a capturing stream invalidates its capture.
		ok(t, "StreamBeginCapture", b.StreamBeginCapture(s, proto.CaptureModeThreadLocal))
		ok(t, "captured MemsetD32", b.MemsetD32(d, 1, words, s, true))
		r = b.StreamQuery(s)
		t.Logf("StreamQuery of a capturing stream: %v", r)
		status, r = b.StreamIsCapturing(s)
		ok(t, "StreamIsCapturing", r)
		eq(t, "status after the query (2: invalidated)", status, proto.CaptureInvalidated)
		_, r = b.StreamEndCapture(s)
		want(t, "StreamEndCapture of an invalidated capture", r, proto.ErrStreamCaptureInvalidated)

		// An explicit graph: memset → kernel → 2D copy, an event record.
		g, r = b.GraphCreate(0)
		ok(t, "GraphCreate", r)
		ms, r := b.GraphAddMemsetNode(g, nil, out, 0, 0x55, 1, 1024, 1)
		ok(t, "GraphAddMemsetNode", r)
		kn, r := b.GraphAddKernelNode(g, []uintptr{ms}, fn, [3]uint32{1, 1, 1}, [3]uint32{128, 1, 1}, 0, params(d, 3, 128))
		ok(t, "GraphAddKernelNode", r)
		c := proto.Copy3D{Src: uint64(d), SrcPitch: 256, Dst: uint64(out), DstX: 64, DstPitch: 512, Width: 16, Height: 2, Depth: 1}
		_, r = b.GraphAddMemcpyNode(g, []uintptr{kn}, c)
		ok(t, "GraphAddMemcpyNode", r)
		ev, r := b.EventCreate(0)
		ok(t, "EventCreate", r)
		_, r = b.GraphAddEventNode(g, []uintptr{kn}, ev, false)
		ok(t, "GraphAddEventNode", r)
		roots, r := b.GraphNodes(g, true)
		ok(t, "GraphNodes(roots)", r)
		eq(t, "roots", len(roots), 1)
		e, r = b.GraphInstantiate(g, 0)
		ok(t, "GraphInstantiate", r)
		ok(t, "GraphUpload", b.GraphUpload(e, s))
		ok(t, "GraphLaunch", b.GraphLaunch(e, s))
		ok(t, "StreamSynchronize", b.StreamSynchronize(s))
		ok(t, "EventQuery", b.EventQuery(ev))
		ok(t, "MemcpyDtoH", b.MemcpyDtoH(got[:1024], out, 0))
		eq(t, "memset byte", got[0], 0x55)
		eq(t, "copied row 0", binary.LittleEndian.Uint32(got[64:]), 3)
		eq(t, "copied row 1", binary.LittleEndian.Uint32(got[512+64:]), 3)
		eq(t, "past the copy", got[80], 0x55)
		ok(t, "GraphExecDestroy", b.GraphExecDestroy(e))
		ok(t, "GraphDestroy", b.GraphDestroy(g))
		ok(t, "EventDestroy", b.EventDestroy(ev))
		ok(t, "StreamDestroy", b.StreamDestroy(s))
	})
}
