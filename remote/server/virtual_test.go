package server_test

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/gpumux/gpumux/remote/fakecuda"
	"github.com/gpumux/gpumux/remote/proto"
)

const (
	mib  = 1 << 20
	gran = fakecuda.Granularity
)

// devProp is pinned memory on the client's device dev.
func devProp(dev int32) proto.MemProp {
	return proto.MemProp{Type: proto.MemAllocationTypePinned, LocType: proto.MemLocationTypeDevice, LocID: dev}
}

// rw is read-write access for the client's device dev.
func rw(dev int32) []byte {
	return proto.EncodeMemAccessDescs([]proto.MemAccessDesc{{LocType: proto.MemLocationTypeDevice, LocID: dev, Flags: proto.MemAccessReadWrite}})
}

// segment is what PyTorch's expandable segments do: a reservation, with n
// physical allocations of gran bytes mapped at its start, read-write for
// device 0.
type segment struct {
	base    proto.DevPtr
	size    uint64
	handles []proto.Handle
}

func expandable(t *testing.T, cl *proto.Client, ctx proto.Handle, reserve uint64, n int) segment {
	t.Helper()
	base, r, err := cl.MemAddressReserve(ctx, reserve, 0, 0, 0)
	ok(t, "cuMemAddressReserve")(r, err)
	s := segment{base: base, size: reserve}
	for i := range n {
		h, r, err := cl.MemCreate(ctx, gran, devProp(0), 0)
		ok(t, "cuMemCreate")(r, err)
		ok(t, "cuMemMap")(cl.MemMap(ctx, base+proto.DevPtr(i*gran), gran, 0, h, 0))
		s.handles = append(s.handles, h)
	}
	ok(t, "cuMemSetAccess")(cl.MemSetAccess(ctx, base, uint64(n)*gran, rw(0)))
	return s
}

// TestVirtualMemory: an expandable segment's life, its memory charged once
// per physical allocation and usable like any other by copies, memsets and
// kernels, across mappings too.
func TestVirtualMemory(t *testing.T) {
	e := start(t, envConfig{})
	cl := e.dial(t, e.token(t, "job", 64*mib))
	ctx := primary(t, cl)

	g, r, err := cl.MemGetAllocationGranularity(ctx, devProp(0), proto.MemGranularityRecommended)
	ok(t, "cuMemGetAllocationGranularity")(r, err)
	if g != gran {
		t.Errorf("granularity %d, want %d", g, gran)
	}
	seg := expandable(t, cl, ctx, 8*gran, 2)
	if used := e.srv.QuotaUsed("job"); used != 2*gran {
		t.Errorf("QuotaUsed %d after two cuMemCreate of %d, want %d (reserved addresses cost nothing)", used, gran, 2*gran)
	}

	// Memsets and copies across the two mappings.
	ok(t, "cuMemsetD32 across the mappings")(cl.MemsetD32V2(ctx, seg.base+gran-8, 0xabcdef01, 4))
	want := bytes.Repeat([]byte{0x01, 0xef, 0xcd, 0xab}, 4)
	if got := download(t, cl, ctx, seg.base+gran-8, 16); !bytes.Equal(got, want) {
		t.Errorf("memset across the mappings: % x, want % x", got, want)
	}
	data := random(4096, 1)
	at := seg.base + gran - 2048
	upload(t, cl, ctx, at, data)
	if got := download(t, cl, ctx, at, len(data)); !bytes.Equal(got, data) {
		t.Error("a copy across two mappings changed the data")
	}
	plain := alloc(t, cl, ctx, 4096)
	ok(t, "cuMemcpyDtoD into a mapping")(cl.MemcpyDtoDV2(ctx, plain, at, 4096))
	if got := download(t, cl, ctx, plain, 4096); !bytes.Equal(got, data) {
		t.Error("a device copy out of the mappings changed the data")
	}
	// A kernel writes a mapping.
	_, fns := module(t, cl, ctx)
	ok(t, "fill_u32 on a mapping")(launch1(cl, ctx, fns["fill_u32"], 0, fillParams(seg.base+gran+4096, 7, 16)))
	ok(t, "cuCtxSynchronize")(cl.CtxSynchronize(ctx))
	if got := download(t, cl, ctx, seg.base+gran+4096+60, 4); binary.LittleEndian.Uint32(got) != 7 {
		t.Errorf("fill_u32 wrote %x, want 7", got)
	}
	base, size, r, err := cl.MemGetAddressRangeV2(ctx, seg.base+gran+100)
	ok(t, "cuMemGetAddressRange of a mapping")(r, err)
	if base != seg.base+gran || size != gran {
		t.Errorf("address range %#x+%d, want the mapping %#x+%d", base, size, seg.base+gran, gran)
	}
	flags, r, err := cl.MemGetAccess(ctx, proto.MemLocationTypeDevice, 0, seg.base)
	ok(t, "cuMemGetAccess")(r, err)
	if flags != uint64(proto.MemAccessReadWrite) {
		t.Errorf("cuMemGetAccess: %d, want read-write", flags)
	}
	prop, r, err := cl.MemGetAllocationPropertiesFromHandle(ctx, seg.handles[0])
	ok(t, "cuMemGetAllocationPropertiesFromHandle")(r, err)
	if prop != devProp(0) {
		t.Errorf("properties %+v, want %+v", prop, devProp(0))
	}

	// Released while mapped: the memory stays, and so does its charge;
	// a retain from its address gives the handle back.
	ok(t, "cuMemRelease while mapped")(cl.MemRelease(ctx, seg.handles[0]))
	is(t, "a released handle's properties", proto.ErrInvalidValue)(func() (proto.Result, error) {
		_, r, err := cl.MemGetAllocationPropertiesFromHandle(ctx, seg.handles[0])
		return r, err
	}())
	if got := download(t, cl, ctx, at, len(data)); !bytes.Equal(got, data) {
		t.Error("released but mapped memory lost its data")
	}
	h, r, err := cl.MemRetainAllocationHandle(ctx, seg.base+123)
	ok(t, "cuMemRetainAllocationHandle")(r, err)
	if h != seg.handles[0] {
		t.Errorf("retained handle %#x, want %#x", h, seg.handles[0])
	}
	// Both mappings go in one call; the retained one is released after.
	ok(t, "cuMemUnmap of both mappings")(cl.MemUnmap(ctx, seg.base, 2*gran))
	is(t, "a copy to unmapped addresses", proto.ErrInvalidValue)(cl.MemcpyHtoDV2(ctx, at, data, 4096))
	if used := e.srv.QuotaUsed("job"); used != 2*gran+4096 {
		t.Errorf("QuotaUsed %d with two allocations still referenced, want %d", used, 2*gran+4096)
	}
	ok(t, "cuMemRelease of the retain")(cl.MemRelease(ctx, h))
	ok(t, "cuMemRelease")(cl.MemRelease(ctx, seg.handles[1]))
	is(t, "a second release", proto.ErrInvalidValue)(cl.MemRelease(ctx, seg.handles[1]))
	if used := e.srv.QuotaUsed("job"); used != 4096 {
		t.Errorf("QuotaUsed %d after the last release, want the plain allocation's 4096", used)
	}
	ok(t, "cuMemAddressFree")(cl.MemAddressFree(ctx, seg.base, seg.size))
	if st := e.fake.Stats(); st.Physical != 0 || st.Mappings != 0 || st.Reservations != 0 {
		t.Errorf("the backend still holds %+v", st)
	}
}

// TestVirtualMemoryQuota: physical memory is charged before the driver is
// asked, and reserved addresses are bounded by 16 times the quota.
func TestVirtualMemoryQuota(t *testing.T) {
	e := start(t, envConfig{})
	const quota = 8 * mib
	cl := e.dial(t, e.token(t, "job", quota))
	ctx := primary(t, cl)
	for range quota / gran {
		_, r, err := cl.MemCreate(ctx, gran, devProp(0), 0)
		ok(t, "cuMemCreate within the quota")(r, err)
	}
	_, r, err := cl.MemCreate(ctx, gran, devProp(0), 0)
	is(t, "cuMemCreate past the quota", proto.ErrOutOfMemory)(r, err)
	if st := e.fake.Stats(); st.Physical != quota/gran {
		t.Errorf("the backend holds %d physical allocations, want %d: it was asked past the quota", st.Physical, quota/gran)
	}
	_, r, err = cl.MemAllocV2(ctx, 1)
	is(t, "cuMemAlloc beside full physical memory", proto.ErrOutOfMemory)(r, err)

	_, r, err = cl.MemAddressReserve(ctx, 16*quota+gran, 0, 0, 0)
	is(t, "reserving past 16 times the quota", proto.ErrOutOfMemory)(r, err)
	p, r, err := cl.MemAddressReserve(ctx, 16*quota-gran, 0, 0, 0)
	ok(t, "reserving within 16 times the quota")(r, err)
	_, r, err = cl.MemAddressReserve(ctx, 2*gran, 0, 0, 0)
	is(t, "reserving past the bound in two steps", proto.ErrOutOfMemory)(r, err)
	ok(t, "cuMemAddressFree")(cl.MemAddressFree(ctx, p, 16*quota-gran))
	_, r, err = cl.MemAddressReserve(ctx, 2*gran, 0, 0, 0)
	ok(t, "reserving again after a free")(r, err)
	if !strings.Contains(e.logs.String(), "cuMemAddressReserve refused") {
		t.Error("the refused reservation is not logged")
	}
}

// TestVirtualMemoryRefusals: what the server checks before the driver.
func TestVirtualMemoryRefusals(t *testing.T) {
	e := start(t, envConfig{fake: fakeDevices(2), srv: insecure()})
	cl := e.dial(t, "")
	ctx := primary(t, cl)
	seg := expandable(t, cl, ctx, 4*gran, 1)
	spare, r, err := cl.MemCreate(ctx, gran, devProp(0), 0)
	ok(t, "cuMemCreate")(r, err)

	props := []struct {
		name string
		edit func(*proto.MemProp)
		want proto.Result
	}{
		{"managed memory", func(p *proto.MemProp) { p.Type = proto.MemAllocationTypeManaged }, proto.ErrNotSupported},
		{"an invalid type", func(p *proto.MemProp) { p.Type = 0 }, proto.ErrInvalidValue},
		{"host memory", func(p *proto.MemProp) { p.LocType = proto.MemLocationTypeHost }, proto.ErrNotSupported},
		{"an unknown location type", func(p *proto.MemProp) { p.LocType = 99 }, proto.ErrInvalidValue},
		{"a device the client does not have", func(p *proto.MemProp) { p.LocID = 2 }, proto.ErrInvalidDevice},
		{"a negative device", func(p *proto.MemProp) { p.LocID = -1 }, proto.ErrInvalidDevice},
		{"a fabric handle", func(p *proto.MemProp) { p.HandleTypes = proto.MemHandleTypeFabric }, proto.ErrNotSupported},
		{"a Windows handle", func(p *proto.MemProp) { p.HandleTypes = proto.MemHandleTypeWin32 }, proto.ErrNotSupported},
		{"an unknown handle type", func(p *proto.MemProp) { p.HandleTypes = 0x100 }, proto.ErrInvalidValue},
		{"compression", func(p *proto.MemProp) { p.Compression = 1 }, proto.ErrNotSupported},
		{"a tile pool", func(p *proto.MemProp) { p.Usage = 1 }, proto.ErrNotSupported},
		{"a usage past 16 bits", func(p *proto.MemProp) { p.Usage = 1 << 16 }, proto.ErrInvalidValue},
		{"a POSIX file descriptor (made without one)", func(p *proto.MemProp) { p.HandleTypes = proto.MemHandleTypePosixFD }, proto.Success},
		{"the second device", func(p *proto.MemProp) { p.LocID = 1 }, proto.Success},
	}
	for _, tt := range props {
		prop := devProp(0)
		tt.edit(&prop)
		h, r, err := cl.MemCreate(ctx, gran, prop, 0)
		is(t, "cuMemCreate of "+tt.name, tt.want)(r, err)
		if r == proto.Success {
			ok(t, "cuMemRelease")(cl.MemRelease(ctx, h))
		}
	}
	if !strings.Contains(e.logs.String(), "shareable handles other than none") {
		t.Error("a refused handle type is not logged")
	}
	_, r, err = cl.MemCreate(ctx, gran, devProp(0), 1)
	is(t, "cuMemCreate with flags", proto.ErrInvalidValue)(r, err)

	end := seg.base + proto.DevPtr(seg.size)
	calls := []struct {
		name string
		r    proto.Result
		err  error
		want proto.Result
	}{}
	add := func(name string, want proto.Result, r proto.Result, err error) {
		calls = append(calls, struct {
			name string
			r    proto.Result
			err  error
			want proto.Result
		}{name, r, err, want})
	}
	r, err = cl.MemMap(ctx, seg.base, gran, 0, spare, 0)
	add("mapping over a mapping", proto.ErrInvalidValue, r, err)
	r, err = cl.MemMap(ctx, end-gran/2, gran, 0, spare, 0)
	add("mapping past the reservation's end", proto.ErrInvalidValue, r, err)
	r, err = cl.MemMap(ctx, end, gran, 0, spare, 0)
	add("mapping outside any reservation", proto.ErrInvalidValue, r, err)
	r, err = cl.MemMap(ctx, seg.base+gran, gran, gran, spare, 0)
	add("mapping at an offset", proto.ErrInvalidValue, r, err)
	r, err = cl.MemMap(ctx, seg.base+gran, 2*gran, 0, spare, 0)
	add("mapping more than the allocation", proto.ErrInvalidValue, r, err)
	r, err = cl.MemMap(ctx, seg.base+gran, gran, 0, 0x7777, 0)
	add("mapping an unknown handle", proto.ErrInvalidValue, r, err)
	r, err = cl.MemUnmap(ctx, seg.base, gran/2)
	add("unmapping part of a mapping", proto.ErrInvalidValue, r, err)
	r, err = cl.MemUnmap(ctx, seg.base, 2*gran)
	add("unmapping past the mappings", proto.ErrInvalidValue, r, err)
	r, err = cl.MemSetAccess(ctx, seg.base, 2*gran, rw(0))
	add("access past the mappings", proto.ErrInvalidValue, r, err)
	r, err = cl.MemSetAccess(ctx, seg.base, gran, rw(2))
	add("access for a device the client does not have", proto.ErrInvalidDevice, r, err)
	r, err = cl.MemSetAccess(ctx, seg.base, gran, proto.EncodeMemAccessDescs([]proto.MemAccessDesc{{LocType: 1, Flags: 2}}))
	add("access flags 2", proto.ErrInvalidValue, r, err)
	r, err = cl.MemSetAccess(ctx, seg.base, gran, nil)
	add("access without descriptors", proto.ErrInvalidValue, r, err)
	r, err = cl.MemSetAccess(ctx, seg.base, gran, []byte{1, 0, 0})
	add("a torn descriptor", proto.ErrInvalidValue, r, err)
	r, err = cl.MemAddressFree(ctx, seg.base, seg.size)
	add("freeing a reservation with a mapping", proto.ErrInvalidValue, r, err)
	r, err = cl.MemAddressFree(ctx, seg.base, gran)
	add("freeing part of a reservation", proto.ErrInvalidValue, r, err)
	r, err = cl.MemFreeV2(ctx, seg.base)
	add("cuMemFree of a mapping", proto.ErrInvalidValue, r, err)
	r, err = cl.MemcpyHtoDV2(ctx, seg.base+gran, []byte{1}, 1)
	add("a copy to reserved, unmapped addresses", proto.ErrInvalidValue, r, err)
	_, r, err = cl.MemRetainAllocationHandle(ctx, seg.base+gran)
	add("a retain of unmapped addresses", proto.ErrInvalidValue, r, err)
	_, r, err = cl.MemAddressReserve(ctx, gran, 0, 0, 1)
	add("a reservation with flags", proto.ErrInvalidValue, r, err)
	_, r, err = cl.MemGetAllocationGranularity(ctx, devProp(0), 2)
	add("an unknown granularity option", proto.ErrInvalidValue, r, err)
	_, r, err = cl.MemGetAccess(ctx, proto.MemLocationTypeDevice, 0, end)
	add("the access of unreserved addresses", proto.ErrInvalidValue, r, err)
	for _, c := range calls {
		is(t, c.name, c.want)(c.r, c.err)
	}
	if st := e.fake.Stats(); st.Mappings != 1 || st.Physical != 2 || st.Reservations != 1 {
		t.Errorf("the backend holds %+v after refusals, want 1 mapping, 2 physical, 1 reservation", st)
	}
}

// TestVirtualMemoryIsOwn: another client can use none of a client's
// handles, reservations or mappings, and its memory comes back to the
// quota when it goes.
func TestVirtualMemoryIsOwn(t *testing.T) {
	e := start(t, envConfig{})
	const quota = 16 * mib
	tok := e.token(t, "job-a", quota)
	a, a2 := e.dial(t, tok), e.dial(t, tok)
	b := e.dial(t, e.token(t, "job-b", 0))
	actx, a2ctx, bctx := primary(t, a), primary(t, a2), primary(t, b)
	// B's handles start at 0x1000 too: B makes some of its own, so that
	// the numbers of A's objects name nothing of B's.
	seg := expandable(t, a, actx, 4*gran, 2)
	spare, r, err := a.MemCreate(actx, gran, devProp(0), 0)
	ok(t, "A cuMemCreate")(r, err)
	upload(t, a, actx, seg.base, []byte("A's secret"))

	bseg := expandable(t, b, bctx, 4*gran, 1)
	is(t, "B maps A's handle", proto.ErrInvalidValue)(b.MemMap(bctx, bseg.base+gran, gran, 0, spare, 0))
	is(t, "B maps into A's reservation", proto.ErrInvalidValue)(b.MemMap(bctx, seg.base+2*gran, gran, 0, bseg.handles[0], 0))
	is(t, "B releases A's handle", proto.ErrInvalidValue)(b.MemRelease(bctx, spare))
	is(t, "B unmaps A's mapping", proto.ErrInvalidValue)(b.MemUnmap(bctx, seg.base, gran))
	is(t, "B sets access to A's mapping", proto.ErrInvalidValue)(b.MemSetAccess(bctx, seg.base, gran, rw(0)))
	is(t, "B frees A's reservation", proto.ErrInvalidValue)(b.MemAddressFree(bctx, seg.base, seg.size))
	is(t, "B reads A's mapping", proto.ErrInvalidValue)(b.MemcpyDtoHV2(bctx, make([]byte, 10), seg.base, 10))
	is(t, "B writes A's mapping", proto.ErrInvalidValue)(b.MemcpyHtoDV2(bctx, seg.base, make([]byte, 10), 10))
	is(t, "B copies A's mapping into its own", proto.ErrInvalidValue)(b.MemcpyDtoDV2(bctx, bseg.base, seg.base, 10))
	_, r, err = b.MemRetainAllocationHandle(bctx, seg.base)
	is(t, "B retains A's memory", proto.ErrInvalidValue)(r, err)
	_, r, err = b.MemGetAllocationPropertiesFromHandle(bctx, spare)
	is(t, "B asks about A's handle", proto.ErrInvalidValue)(r, err)
	// A kernel of B on A's mapping faults (the fake models tenant
	// processes: only the mapping context's kernels see it).
	_, bfns := module(t, b, bctx)
	ok(t, "B launches on A's mapping (sent)")(launch1(b, bctx, bfns["fill_u32"], 0, fillParams(seg.base, 0, 1)))
	is(t, "B's kernel on A's mapping", proto.ErrIllegalAddress)(b.CtxSynchronize(bctx))
	if got := download(t, a, actx, seg.base, 10); string(got) != "A's secret" {
		t.Errorf("A's mapping holds %q", got)
	}

	// A's second connection shares the quota: it is full until A goes.
	_, r, err = a2.MemAllocV2(a2ctx, quota-2*gran)
	is(t, "A's other connection past the shared quota", proto.ErrOutOfMemory)(r, err)
	a.Close()
	eventually(t, "A's memory to come back", func() bool { return e.srv.QuotaUsed("job-a") == 0 })
	alloc(t, a2, a2ctx, quota)
	b.Close()
	a2.Close()
	e.waitClean(t)
	if st := e.fake.Stats(); st.Physical != 0 || st.Mappings != 0 || st.Reservations != 0 {
		t.Errorf("after the clients went the backend holds %+v", st)
	}
}
