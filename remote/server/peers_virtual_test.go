package server_test

import (
	"bytes"
	"testing"

	"github.com/gpumux/gpumux/remote/proto"
)

// TestPeerVirtualMemory: virtual memory and pools on a client of two
// devices. Physical memory of device 1, mapped while device 0's context is
// current, answers cuPointerGetAttributes with the mapping, no context and
// device 1; a device-to-device copy between it and device 0's memory is a
// peer copy, both ways, the data checked; cuMemcpyPeer must name a context
// of device 1 for it; a kernel on device 0 reaches it only once
// cuMemSetAccess grants device 0 access. cuMemAlloc, cuMemCreate and pool
// allocations on either device count against the one quota.
func TestPeerVirtualMemory(t *testing.T) {
	e := start(t, envConfig{fake: fakeDevices(2)})
	p := twoDevices(t, e, twoGPUs(t, "job", 3*gran, 0, 1))
	cl := p.cl

	base, r, err := cl.MemAddressReserve(p.ctx0, 2*gran, 0, 0, 0)
	ok(t, "cuMemAddressReserve")(r, err)
	h, r, err := cl.MemCreate(p.ctx0, gran, devProp(1), 0)
	ok(t, "cuMemCreate on device 1")(r, err)
	ok(t, "cuMemMap")(cl.MemMap(p.ctx0, base, gran, 0, h, 0))
	ok(t, "cuMemSetAccess for device 1")(cl.MemSetAccess(p.ctx0, base, gran, rw(1)))

	mb, size, ctx, dev, r, err := cl.PointerGetAttributes(p.ctx0, base+100)
	ok(t, "cuPointerGetAttributes of a mapping")(r, err)
	if mb != base || size != gran || ctx != 0 || dev != 1 {
		t.Errorf("pointer record of the mapping: base %#x size %d ctx %#x device %d; want %#x %d no context, device 1",
			mb, size, ctx, dev, base, uint64(gran))
	}

	a0 := alloc(t, cl, p.ctx0, gran)
	data := pattern(3, 8192)
	upload(t, cl, p.ctx1, base+4096, data)
	ok(t, "cuMemcpyDtoD mapping on 1 → device 0")(cl.MemcpyDtoDV2(p.ctx0, a0, base+4096, 8192))
	if got := download(t, cl, p.ctx0, a0, 8192); !bytes.Equal(got, data) {
		t.Error("device 0's memory after a copy from a mapping on device 1 differs")
	}
	back := pattern(77, 8192)
	upload(t, cl, p.ctx0, a0, back)
	ok(t, "cuMemcpyDtoDAsync device 0 → mapping on 1")(cl.MemcpyDtoDAsyncV2(p.ctx1, base, a0, 8192, 0))
	if got := download(t, cl, p.ctx1, base, 8192); !bytes.Equal(got, back) {
		t.Error("the mapping after a copy from device 0 differs")
	}
	ok(t, "cuMemcpyPeer naming device 1's context for the mapping")(cl.MemcpyPeer(p.ctx0, a0, p.ctx0, base, p.ctx1, 64))
	is(t, "cuMemcpyPeer naming device 0's context for the mapping", proto.ErrInvalidValue)(
		cl.MemcpyPeer(p.ctx0, a0, p.ctx0, base, p.ctx0, 64))

	_, fns := module(t, cl, p.ctx0)
	fill := func() (proto.Result, error) { return fillSync(cl, p.ctx0, fns["fill_u32"], base, 5, 16) }
	is(t, "a kernel on device 0 writing the mapping without access", proto.ErrIllegalAddress)(fill())
	ok(t, "cuMemSetAccess for device 0")(cl.MemSetAccess(p.ctx0, base, gran, rw(0)))
	ok(t, "the kernel with access")(fill())
	if got := download(t, cl, p.ctx1, base+60, 4); !bytes.Equal(got, []byte{5, 0, 0, 0}) {
		t.Errorf("the mapping after the kernel: % x, want 05 00 00 00", got)
	}

	// One quota: the mapping's physical memory, a0, and a pool allocation
	// on device 1 fill it; more on either device is refused.
	_, r, err = cl.MemAllocAsync(p.ctx1, gran, 0)
	ok(t, "cuMemAllocAsync on device 1")(r, err)
	if used := e.srv.QuotaUsed("job"); used != 3*gran {
		t.Errorf("QuotaUsed %d, want %d over both devices and all three kinds of memory", used, 3*gran)
	}
	_, r, err = cl.MemCreate(p.ctx0, gran, devProp(0), 0)
	is(t, "cuMemCreate on device 0 past the quota", proto.ErrOutOfMemory)(r, err)
	_, r, err = cl.MemAllocAsync(p.ctx0, 4096, 0)
	is(t, "cuMemAllocAsync on device 0 past the quota", proto.ErrOutOfMemory)(r, err)
	_, r, err = cl.MemAllocV2(p.ctx1, 4096)
	is(t, "cuMemAlloc on device 1 past the quota", proto.ErrOutOfMemory)(r, err)

	cl.Close()
	e.waitClean(t)
}
