package server

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"testing"

	"github.com/gpumux/gpumux/remote/fakecuda"
	"github.com/gpumux/gpumux/remote/proto"
)

// FuzzReadFrame: the session's reader (readFrames, over proto.ReadFrame)
// never panics, bounds every frame, and hands the worker exactly the
// frames on the wire, in order.
func FuzzReadFrame(f *testing.F) {
	f.Add(proto.AppendFrame(nil, proto.Header{Op: proto.OpHello}, proto.Hello{Version: 1, Token: "t"}.Encode()))
	f.Add(append(proto.AppendFrame(nil, proto.Header{Op: 43, Seq: 7, Ctx: 0x1000}, make([]byte, 24)),
		proto.AppendFrame(nil, proto.Header{Op: 43, Flags: proto.FlagData, Seq: 7}, bytes.Repeat([]byte{1}, smallFrame+1))...))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1, 2})
	f.Add([]byte{16, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		// What proto.ReadFrame makes of b, frame by frame.
		var want []frame
		var wantErr error
		for r := bytes.NewReader(b); ; {
			h, p, err := proto.ReadFrame(r, nil)
			if err != nil {
				wantErr = err
				break
			}
			if len(p) > proto.MaxPayload {
				t.Fatalf("a payload of %d bytes", len(p))
			}
			if re := proto.AppendFrame(nil, h, p); !bytes.Equal(re, b[len(b)-r.Len()-len(re):len(b)-r.Len()]) {
				t.Fatal("a frame does not re-encode to its bytes")
			}
			want = append(want, frame{h: h, p: slices.Clone(p)})
		}
		in := make(chan frame, len(want)+1)
		var readErr error
		readFrames(bytes.NewReader(b), in, &readErr, make(chan struct{}))
		var got []frame
		for fr := range in {
			got = append(got, fr)
		}
		if len(got) != len(want) {
			t.Fatalf("the reader queued %d frames, want %d", len(got), len(want))
		}
		for i := range got {
			if got[i].h != want[i].h || !bytes.Equal(got[i].p, want[i].p) {
				t.Fatalf("frame %d: %+v, want %+v", i, got[i].h, want[i].h)
			}
			got[i].release()
		}
		if (readErr == nil) != (wantErr == nil) || (wantErr != nil && readErr.Error() != wantErr.Error()) {
			t.Fatalf("reader error %v, want %v", readErr, wantErr)
		}
	})
}

// The fuzz program's field tags (see prog.payload).
const (
	tagEnd = iota
	tagU32
	tagU64
	tagHandle
	tagPtr
	tagSize
	tagName
	tagImage
	tagBlob
	tagSmall
	tagNodes
	tagGranules // a size of 0 to 3 granules of 2 MiB
	tagMemProp  // a CUmemAllocationProp, mostly plausible
	tagAccess   // access descriptors
	tagCount
)

var fuzzNames = []string{"fill_u32", "vecadd_f32", "fault", "noop", "counter", "missing"}

var fuzzImage = fakecuda.ModuleImage(
	[]fakecuda.Kernel{fakecuda.FillU32, fakecuda.VecAddF32, fakecuda.Fault, {Name: "noop"}},
	[]fakecuda.Global{{Name: "counter", Size: 64}})

// prog decodes a fuzz input into calls on a live session, picking handles
// and pointers the session holds so the calls get past the checks.
type prog struct {
	b []byte
	s *session
	// lastSize is the last size field, which auto data frames follow.
	lastSize uint64
	image    bool
	seq      uint32
}

func (p *prog) u8() byte {
	if len(p.b) == 0 {
		return 0
	}
	v := p.b[0]
	p.b = p.b[1:]
	return v
}

func (p *prog) u16() uint16 { return uint16(p.u8()) | uint16(p.u8())<<8 }
func (p *prog) u32() uint32 { return uint32(p.u16()) | uint32(p.u16())<<16 }
func (p *prog) u64() uint64 { return uint64(p.u32()) | uint64(p.u32())<<32 }

func (p *prog) handles() []proto.Handle {
	var hs []proto.Handle
	hs = append(hs, sortedHandles(p.s.ctxs)...)
	hs = append(hs, sortedHandles(p.s.mods)...)
	hs = append(hs, sortedHandles(p.s.funcs)...)
	hs = append(hs, sortedHandles(p.s.streams)...)
	hs = append(hs, sortedHandles(p.s.events)...)
	hs = append(hs, sortedHandles(p.s.graphs)...)
	hs = append(hs, sortedHandles(p.s.execs)...)
	hs = append(hs, sortedHandles(p.s.nodes)...)
	hs = append(hs, sortedHandles(p.s.virtual.phys)...)
	hs = append(hs, sortedHandles(p.s.pools.byHandle)...)
	return hs
}

func (p *prog) handle() proto.Handle {
	k := p.u8()
	if hs := p.handles(); k < 0xf0 && len(hs) > 0 {
		return hs[int(k)%len(hs)]
	}
	return proto.Handle(k & 0xf) // default streams, stale or unknown handles
}

// ptr picks an address in one of the session's allocations or
// reservations (an offset in units of 4 KiB from 0x8000 on, so that a
// reservation's later granules are reached), or a stray one.
func (p *prog) ptr() uint64 {
	k, off := p.u8(), uint64(p.u16())
	if off >= 0x8000 {
		off = (off - 0x8000) << 12
	}
	n := len(p.s.allocs) + len(p.s.virtual.reserved)
	if n == 0 || k >= 0xf0 {
		return 0x7f00_0000_0000 + off
	}
	if i := int(k) % n; i >= len(p.s.allocs) {
		r := p.s.virtual.reserved[i-len(p.s.allocs)]
		return uint64(r.base) + off%(r.size+2)
	}
	a := p.s.allocs[int(k)%n]
	return uint64(a.base) + off%(a.size+2)
}

// payload appends fields until tagEnd.
func (p *prog) payload() []byte {
	var e proto.Encoder
	for range 16 {
		switch p.u8() % tagCount {
		case tagEnd:
			return e.Payload()
		case tagU32:
			e.U32(p.u32())
		case tagU64:
			e.U64(p.u64())
		case tagHandle:
			e.U64(uint64(p.handle()))
		case tagPtr:
			e.U64(p.ptr())
		case tagSize:
			p.lastSize = uint64(p.u16())
			e.U64(p.lastSize)
		case tagName:
			k := p.u8()
			if k < 0xf0 {
				e.Str(fuzzNames[int(k)%len(fuzzNames)])
			} else {
				e.Str(string(p.b[:min(len(p.b), int(k&0xf))]))
			}
		case tagImage:
			p.lastSize, p.image = uint64(len(fuzzImage)), true
			e.U64(p.lastSize)
		case tagBlob:
			var blob []byte
			for n := p.u8() % 8; n > 0; n-- {
				if k := p.u8(); k%2 == 1 {
					blob = binary.LittleEndian.AppendUint64(blob, p.ptr())
				} else {
					blob = binary.LittleEndian.AppendUint32(blob, uint32(k>>1))
				}
			}
			e.Bytes(blob)
		case tagSmall:
			e.U32(uint32(p.u8() % 4))
		case tagNodes: // a list of node handles (or stale ones)
			var hs []proto.Handle
			nodes := sortedHandles(p.s.nodes)
			for n := p.u8() % 4; n > 0; n-- {
				if k := p.u8(); k < 0xf0 && len(nodes) > 0 {
					hs = append(hs, nodes[int(k)%len(nodes)])
				} else {
					hs = append(hs, proto.Handle(k))
				}
			}
			e.Bytes(proto.EncodeHandles(hs))
		case tagGranules:
			e.U64(uint64(p.u8()%4) << 21)
		case tagMemProp:
			e.MemProp(proto.MemProp{Type: uint32(p.u8() % 3), HandleTypes: uint32(p.u8() % 3), LocType: uint32(p.u8() % 3),
				LocID: int32(p.u8()%3) - 1, Compression: uint32(p.u8() % 2), GPUDirectRDMA: uint32(p.u8() % 3)})
		case tagAccess:
			var ds []proto.MemAccessDesc
			for n := p.u8() % 3; n > 0; n-- {
				ds = append(ds, proto.MemAccessDesc{LocType: uint32(p.u8() % 3), LocID: int32(p.u8() % 3), Flags: uint32(p.u8() % 4)})
			}
			e.Bytes(proto.EncodeMemAccessDescs(ds))
		}
	}
	return e.Payload()
}

// next decodes one call frame and the data frames sent after it.
func (p *prog) next() (frame, []frame) {
	ops := slices.Sorted(func(yield func(proto.Op) bool) {
		for op := range proto.Calls {
			if !yield(op) {
				return
			}
		}
	})
	p.seq++
	var h proto.Header
	if k := int(p.u8()); k < len(ops) || len(p.b) == 0 {
		h.Op = ops[k%len(ops)]
	} else {
		h.Op = proto.Op(p.u16())
	}
	if fl := p.u8(); fl < 0xf0 {
		if proto.Calls[h.Op].Async {
			h.Flags = proto.FlagAsync
		}
	} else {
		h.Flags = uint16(fl & 0x7)
	}
	if k := p.u8(); k < 0xf0 && len(p.s.ctxs) > 0 {
		cs := sortedHandles(p.s.ctxs)
		h.Ctx = cs[int(k)%len(cs)]
	} else {
		h.Ctx = proto.Handle(k & 0xf)
	}
	h.Seq = p.seq
	p.lastSize, p.image = 0, false
	call := frame{h: h, p: p.payload()}

	var data []frame
	dh := proto.Header{Op: h.Op, Flags: proto.FlagData, Seq: h.Seq}
	streams := h.Op == proto.OpMemcpyHtoDV2 || h.Op == proto.OpMemcpyHtoDAsyncV2 || h.Op == proto.OpModuleLoadData
	switch mode := p.u8(); {
	case mode < 0xc0 && streams: // data for the last size field, as a client sends it
		src := bytes.Repeat([]byte{mode}, int(p.lastSize))
		if p.image {
			src = fuzzImage
		}
		chunk := proto.ChunkSize
		if mode > 0 {
			chunk = int(mode)*97 + 1
		}
		for len(src) > 0 {
			n := min(len(src), chunk)
			data = append(data, frame{h: dh, p: src[:n]})
			src = src[n:]
		}
	case mode >= 0xc0: // arbitrary frames
		for n := mode % 4; n > 0; n-- {
			fh := dh
			if k := p.u8(); k >= 0xe0 {
				fh.Flags, fh.Seq = uint16(k&0x7), fh.Seq+uint32(k&0x10)
			}
			data = append(data, frame{h: fh, p: bytes.Repeat([]byte{mode}, int(p.u16())%(3*smallFrame))})
		}
	}
	return call, data
}

// check verifies that the session's tables agree with each other, with the
// quota and with the backend.
func (s *session) check(t *testing.T, fake *fakecuda.Backend) {
	t.Helper()
	var used uint64
	plain, mappings := 0, 0
	for i, a := range s.allocs {
		if i > 0 && uint64(s.allocs[i-1].base)+s.allocs[i-1].size > uint64(a.base) {
			t.Fatalf("allocations overlap or are out of order at %#x", a.base)
		}
		if a.phys != nil {
			if s.virtual.phys[a.phys.h] != a.phys || a.ctx != nil || !slices.Contains(s.virtual.reserved, a.res) {
				t.Fatalf("mapping %#x of released memory or outside a reservation", a.base)
			}
			mappings++
			continue
		}
		if s.ctxs[a.ctx.h] != a.ctx {
			t.Fatalf("allocation %#x of a dead context", a.base)
		}
		if a.mod != nil {
			if s.mods[a.mod.h] != a.mod {
				t.Fatalf("global %#x of an unloaded module", a.base)
			}
			continue
		}
		used += a.size
		plain++
	}
	for _, ph := range s.virtual.phys {
		used += ph.size
	}
	for _, ctx := range s.ctxs {
		for _, lc := range ctx.limits {
			used += lc.charged
		}
	}
	if s.quota.q.used != used || s.quota.g.used != used || s.inUse != used {
		t.Fatalf("quota used %d, token's grant %d, allocations %d", s.quota.q.used, s.quota.g.used, used)
	}
	for _, f := range s.funcs {
		if s.mods[f.mod.h] != f.mod {
			t.Fatal("a function of an unloaded module")
		}
	}
	for _, m := range s.mods {
		if s.ctxs[m.ctx.h] != m.ctx {
			t.Fatal("a module of a dead context")
		}
	}
	for _, st := range s.streams {
		if s.ctxs[st.ctx.h] != st.ctx {
			t.Fatal("a stream of a dead context")
		}
	}
	for _, e := range s.events {
		if s.ctxs[e.ctx.h] != e.ctx {
			t.Fatal("an event of a dead context")
		}
	}
	for _, g := range s.graphs {
		if s.ctxs[g.ctx.h] != g.ctx || s.graphsByRaw[g.raw] != g {
			t.Fatal("a graph of a dead context, or not known by its raw value")
		}
		for raw, n := range g.nodes {
			if s.nodes[n.h] != n || n.graph != g || n.raw != raw {
				t.Fatal("a graph's node out of step with the node table")
			}
		}
	}
	for _, n := range s.nodes {
		if s.graphs[n.graph.h] != n.graph {
			t.Fatal("a node of a destroyed graph")
		}
	}
	for _, e := range s.execs {
		if s.ctxs[e.ctx.h] != e.ctx {
			t.Fatal("an exec of a dead context")
		}
	}
	for key, cp := range s.captureOrigins {
		if s.ctxs[key.ctx.h] != key.ctx || s.captures[cp.raw] != cp {
			t.Fatal("a capture of a dead context, or not known by its ID")
		}
	}
	for dev, p := range s.primary {
		if p.ctx != nil && (s.ctxs[p.ctx.h] != p.ctx || p.refs < 1 || p.ctx.dev != dev) {
			t.Fatalf("primary context of device %d: %+v", dev, p)
		}
	}
	st := fake.Stats()
	if st.Allocations != plain || st.Contexts != len(s.ctxs) || st.Modules != len(s.mods) ||
		st.Streams != len(s.streams) || st.Events != len(s.events) || st.ImplicitFrees != 0 ||
		st.Mappings != mappings || st.Physical != len(s.virtual.phys) || st.Reservations != len(s.virtual.reserved) ||
		st.Pools < len(s.pools.byHandle) {
		t.Fatalf("the backend holds %+v; the session %d allocations, %d contexts, %d modules, %d streams, %d events, "+
			"%d mappings, %d physical, %d reservations, %d pools",
			st, plain, len(s.ctxs), len(s.mods), len(s.streams), len(s.events),
			mappings, len(s.virtual.phys), len(s.virtual.reserved), len(s.pools.byHandle))
	}
	owned := 0 // graphs the client owns: not a capture's
	for _, g := range s.graphs {
		if g.capture == nil {
			owned++
		}
	}
	if st.GraphExecs != len(s.execs) || st.Graphs-st.Captures != owned || st.Captures != len(s.captures) {
		t.Fatalf("the backend holds %+v; the session %d execs, %d graphs of its own, %d captures",
			st, len(s.execs), owned, len(s.captures))
	}
}

// checkOutput verifies what a call wrote: nothing for an async call, else
// data frames of the call and one reply.
func checkOutput(t *testing.T, call frame, out []byte) {
	t.Helper()
	r := bytes.NewReader(out)
	var frames []proto.Header
	for {
		h, _, err := proto.ReadFrame(r, nil)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("the server wrote a bad frame: %v", err)
		}
		frames = append(frames, h)
	}
	if proto.Calls[call.h.Op].Async {
		if len(frames) != 0 {
			t.Fatalf("async %v answered with %d frames", call.h.Op, len(frames))
		}
		return
	}
	if len(frames) == 0 {
		t.Fatalf("sync op %d got no reply", call.h.Op)
	}
	for i, h := range frames {
		wantFlags := proto.FlagData
		if i == len(frames)-1 {
			wantFlags = proto.FlagReply
		}
		if h.Op != call.h.Op || h.Seq != call.h.Seq || h.Flags != wantFlags {
			t.Fatalf("frame %d of op %d seq %d: %+v", i, call.h.Op, call.h.Seq, h)
		}
	}
}

// FuzzDispatch runs fuzz programs of calls and data frames through a
// session on the fake backend: no panic, every sync call answered once,
// the session's tables consistent with the backend after every call, and
// nothing left once the session ends.
func FuzzDispatch(f *testing.F) {
	for _, seed := range fuzzSeeds() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		fake, err := fakecuda.New(fakecuda.WithDevices(2), fakecuda.WithMemory(64<<20))
		if err != nil {
			t.Fatal(err)
		}
		fake.Init()
		log := slog.New(slog.DiscardHandler)
		srv := New(fake, WithInsecureNoAuth(), WithLogger(log))
		q := &share{q: &quota{limit: 4 << 20, refs: 1}, g: &grant{limit: 3 << 20, refs: 1}}
		s := newSession(srv, q, []int32{0, 1}, log)
		var out bytes.Buffer
		var readErr error
		s.wire = wire{readErr: &readErr, bw: bufio.NewWriter(&out)}
		p := &prog{b: b, s: s}
		for step := 0; step < 64 && len(p.b) > 0; step++ {
			call, data := p.next()
			in := make(chan frame, len(data))
			for _, d := range data {
				in <- d
			}
			close(in)
			s.wire.in = in
			out.Reset()
			err := s.call(call)
			s.wire.bw.Flush()
			if err != nil {
				break // the connection would close
			}
			s.check(t, fake)
			if len(in) > 0 {
				break // data where a call is due: the connection would close
			}
			checkOutput(t, call, out.Bytes())
		}
		s.cleanup()
		if st := fake.Stats(); st != (fakecuda.Stats{}) || q.q.used != 0 || q.g.used != 0 {
			t.Fatalf("after cleanup the backend holds %+v, the quota %d, the grant %d", st, q.q.used, q.g.used)
		}
	})
}

// asm builds fuzz programs for the seeds.
type asm struct{ b []byte }

func (a *asm) call(op proto.Op, fields ...[]byte) *asm { return a.callIn(0, op, fields...) }

// callIn is call with the k-th of the session's contexts (by handle)
// current.
func (a *asm) callIn(k byte, op proto.Op, fields ...[]byte) *asm {
	ops := slices.Sorted(func(yield func(proto.Op) bool) {
		for op := range proto.Calls {
			if !yield(op) {
				return
			}
		}
	})
	a.b = append(a.b, byte(slices.Index(ops, op)), 0, k)
	for _, f := range fields {
		a.b = append(a.b, f...)
	}
	a.b = append(a.b, tagEnd, 0) // auto data
	return a
}

func small(v byte) []byte    { return []byte{tagSmall, v} }
func granules(n byte) []byte { return []byte{tagGranules, n} }

// memProp is pinned memory on device 0 (the tagMemProp field bytes).
func memProp() []byte { return []byte{tagMemProp, 1, 0, 1, 1, 0, 0} }

// access is read-write access for device 0.
func access() []byte         { return []byte{tagAccess, 1, 1, 0, 3} }
func handleOf(k byte) []byte { return []byte{tagHandle, k} }
func ptrOf(k byte, off uint16) []byte {
	return []byte{tagPtr, k, byte(off), byte(off >> 8)}
}
func size(n uint16) []byte { return []byte{tagSize, byte(n), byte(n >> 8)} }
func name(k byte) []byte   { return []byte{tagName, k} }
func u32f(v uint32) []byte { return binary.LittleEndian.AppendUint32([]byte{tagU32}, v) }
func image() []byte        { return []byte{tagImage} }

// blob is a blob of slots: slotPtr and slotU32.
func blob(slots ...[]byte) []byte {
	b := []byte{tagBlob, byte(len(slots))}
	for _, s := range slots {
		b = append(b, s...)
	}
	return b
}

func slotPtr(k byte, off uint16) []byte { return []byte{1, k, byte(off), byte(off >> 8)} }
func slotU32(v byte) []byte             { return []byte{v << 1} }

func fuzzSeeds() [][]byte {
	var seeds [][]byte
	// Device queries.
	a := &asm{}
	a.call(proto.OpInit, u32f(0)).call(proto.OpDeviceGetCount).call(proto.OpDeviceGetName, u32f(64), small(1)).
		call(proto.OpDeviceGetAttribute, u32f(16), small(0)).call(proto.OpDeviceGetUuidV2, small(1))
	seeds = append(seeds, a.b)
	// Memory: retain, alloc, upload, copy, memset, download, free.
	a = &asm{}
	a.call(proto.OpDevicePrimaryCtxRetain, small(0)).
		call(proto.OpMemAllocV2, size(4096)).call(proto.OpMemAllocV2, size(4096)).
		call(proto.OpMemcpyHtoDV2, ptrOf(0, 0), size(4096), size(4096)).
		call(proto.OpMemcpyDtoDV2, ptrOf(1, 0), ptrOf(0, 0), size(4096)).
		call(proto.OpMemsetD32V2, ptrOf(1, 8), u32f(7), size(8)).
		call(proto.OpMemcpyDtoHV2, size(100), ptrOf(1, 0), size(100)).
		call(proto.OpMemGetAddressRangeV2, ptrOf(0, 10)).
		call(proto.OpMemFreeV2, ptrOf(0, 0)).call(proto.OpMemGetInfoV2)
	seeds = append(seeds, a.b)
	// Modules and launches.
	a = &asm{}
	a.call(proto.OpDevicePrimaryCtxRetain, small(0)).call(proto.OpMemAllocV2, size(4096)).
		call(proto.OpModuleLoadData, image()).
		call(proto.OpModuleGetFunction, handleOf(1), name(0)).
		call(proto.OpModuleGetGlobalV2, handleOf(1), name(4)).
		call(proto.OpFuncGetParamInfo, handleOf(2), size(1)).
		call(proto.OpLaunchKernel, handleOf(2), u32f(1), u32f(1), u32f(1), u32f(1), u32f(1), u32f(1), u32f(0),
			handleOf(0xf0), blob(slotPtr(0, 0), slotU32(5), slotU32(0), slotU32(4), slotU32(0))).
		call(proto.OpCtxSynchronize).call(proto.OpModuleUnload, handleOf(1))
	seeds = append(seeds, a.b)
	// Streams, events, contexts.
	a = &asm{}
	a.call(proto.OpCtxCreateV2, u32f(0), small(1)).call(proto.OpStreamCreate, u32f(0)).
		call(proto.OpEventCreate, u32f(0)).call(proto.OpEventRecord, handleOf(2), handleOf(1)).
		call(proto.OpStreamWaitEvent, handleOf(1), handleOf(2), u32f(0)).
		call(proto.OpEventElapsedTime, handleOf(2), handleOf(2)).
		call(proto.OpDevicePrimaryCtxRetain, small(0)).call(proto.OpDevicePrimaryCtxResetV2, small(0)).
		call(proto.OpCtxDestroyV2, handleOf(0))
	seeds = append(seeds, a.b)
	// Virtual memory: reserve, create, map, set access, copy, unmap,
	// release, free.
	a = &asm{}
	a.call(proto.OpDevicePrimaryCtxRetain, small(0)).
		call(proto.OpMemGetAllocationGranularity, memProp(), u32f(0)).
		call(proto.OpMemAddressReserve, granules(2), size(0), size(0), size(0)).
		call(proto.OpMemCreate, granules(1), memProp(), size(0)).
		call(proto.OpMemMap, ptrOf(0, 0), granules(1), size(0), handleOf(1), size(0)).
		call(proto.OpMemSetAccess, ptrOf(0, 0), granules(1), access()).
		call(proto.OpMemcpyHtoDV2, ptrOf(0, 100), size(4096), size(4096)).
		call(proto.OpMemsetD8V2, ptrOf(0, 0), small(3), size(100)).
		call(proto.OpMemRetainAllocationHandle, ptrOf(0, 10)).
		call(proto.OpMemRelease, handleOf(1)).
		call(proto.OpMemGetAccess, small(1), small(0), ptrOf(0, 0)).
		call(proto.OpMemUnmap, ptrOf(0, 0), granules(1)).
		call(proto.OpMemRelease, handleOf(1)).
		call(proto.OpMemAddressFree, ptrOf(0, 0), granules(2))
	seeds = append(seeds, a.b)
	// Pools and limits.
	a = &asm{}
	a.call(proto.OpDevicePrimaryCtxRetain, small(0)).call(proto.OpStreamCreate, u32f(0)).
		call(proto.OpDeviceGetDefaultMemPool, small(0)).
		call(proto.OpMemAllocAsync, size(4096), handleOf(1)).
		call(proto.OpMemPoolSetAttribute, handleOf(2), u32f(4), size(0xffff)).
		call(proto.OpMemPoolCreate, u32f(1), u32f(0), u32f(1), u32f(0), size(0), u32f(0)).
		call(proto.OpDeviceSetMemPool, small(0), handleOf(3)).
		call(proto.OpMemAllocFromPoolAsync, size(8192), handleOf(3), handleOf(1)).
		call(proto.OpMemcpyHtoDV2, ptrOf(1, 0), size(100), size(100)).
		call(proto.OpMemFreeAsync, ptrOf(0, 0), handleOf(1)).
		call(proto.OpMemPoolGetAttribute, handleOf(2), u32f(7)).
		call(proto.OpMemPoolTrimTo, handleOf(2), size(0)).
		call(proto.OpMemPoolDestroy, handleOf(3)).
		call(proto.OpCtxSetLimit, u32f(2), size(0xffff)).
		call(proto.OpCtxSetLimit, u32f(0), size(2048))
	seeds = append(seeds, a.b)
	// Two devices: a primary context and memory on each, peer queries,
	// access and copies both ways, a device-to-device copy between them.
	a = &asm{}
	a.call(proto.OpDevicePrimaryCtxRetain, small(0)).call(proto.OpDevicePrimaryCtxRetain, small(1)).
		call(proto.OpMemAllocV2, size(4096)).callIn(1, proto.OpMemAllocV2, size(4096)).
		call(proto.OpDeviceCanAccessPeer, small(0), small(1)).
		call(proto.OpDeviceGetP2PAttribute, u32f(2), small(1), small(0)).
		call(proto.OpCtxEnablePeerAccess, handleOf(1), u32f(0)).
		call(proto.OpMemcpyPeer, ptrOf(1, 0), handleOf(1), ptrOf(0, 0), handleOf(0), size(4096)).
		callIn(1, proto.OpMemcpyPeerAsync, ptrOf(0, 8), handleOf(0), ptrOf(1, 0), handleOf(1), size(100), handleOf(0xf0)).
		call(proto.OpMemcpyDtoDV2, ptrOf(1, 0), ptrOf(0, 0), size(4096)).
		call(proto.OpPointerGetAttributes, ptrOf(1, 10)).
		call(proto.OpCtxDisablePeerAccess, handleOf(1)).
		call(proto.OpDevicePrimaryCtxReleaseV2, small(1))
	seeds = append(seeds, a.b)
	// Capture and replay; explicit graph nodes.
	a = &asm{}
	a.call(proto.OpDevicePrimaryCtxRetain, small(0)).call(proto.OpMemAllocV2, size(4096)).
		call(proto.OpModuleLoadData, image()).
		call(proto.OpModuleGetFunction, handleOf(1), name(0)).
		call(proto.OpStreamCreate, u32f(1)).
		call(proto.OpStreamBeginCaptureV2, handleOf(3), small(0)).
		call(proto.OpLaunchKernel, handleOf(2), u32f(1), u32f(1), u32f(1), u32f(1), u32f(1), u32f(1), u32f(0),
			handleOf(3), blob(slotPtr(0, 0), slotU32(5), slotU32(0), slotU32(4), slotU32(0))).
		call(proto.OpMemsetD32Async, ptrOf(0, 64), u32f(9), size(4), handleOf(3)).
		call(proto.OpStreamGetCaptureInfoV3, handleOf(3), u32f(16)).
		call(proto.OpMemcpyHtoDAsyncV2, ptrOf(0, 0), size(16), size(16), handleOf(3)).
		call(proto.OpStreamIsCapturing, handleOf(3)). // answers the refused copy
		call(proto.OpStreamEndCapture, handleOf(3)).
		call(proto.OpStreamBeginCaptureV2, handleOf(3), small(2)).
		call(proto.OpMemcpyDtoDAsyncV2, ptrOf(0, 128), ptrOf(0, 0), size(16), handleOf(3)).
		call(proto.OpStreamEndCapture, handleOf(3)).
		call(proto.OpGraphGetNodes, handleOf(4), size(0), size(8)).
		call(proto.OpGraphInstantiateWithFlags, handleOf(4), u32f(0), u32f(0)).
		call(proto.OpGraphLaunch, handleOf(5), handleOf(3)).
		call(proto.OpGraphCreate, u32f(0)).
		call(proto.OpGraphAddEmptyNode, handleOf(5), []byte{tagNodes, 0}).
		call(proto.OpGraphAddMemsetNode, handleOf(5), []byte{tagNodes, 1, 1}, ptrOf(0, 0), size(0), u32f(1), u32f(4), size(8), size(1)).
		call(proto.OpGraphClone, handleOf(5)).
		call(proto.OpStreamBeginCaptureV2, handleOf(3), small(1)).
		call(proto.OpStreamDestroyV2, handleOf(3))
	seeds = append(seeds, a.b)
	return seeds
}
