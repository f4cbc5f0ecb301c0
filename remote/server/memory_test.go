package server_test

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gpumux/gpumux/remote/proto"
)

func random(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// TestCopiesRoundTrip sends data through H2D, D2D and D2H, synchronous and
// on a stream, in sizes around the chunk boundaries.
func TestCopiesRoundTrip(t *testing.T) {
	e := start(t, envConfig{})
	cl := e.dial(t, e.token(t, "job", 0))
	ctx := primary(t, cl)
	st, r, err := cl.StreamCreate(ctx, 0)
	ok(t, "cuStreamCreate")(r, err)

	for _, n := range []int{1, 255, proto.ChunkSize - 1, proto.ChunkSize, proto.ChunkSize + 1, 5<<20 + 3} {
		data := random(n, uint64(n))
		src, dst := alloc(t, cl, ctx, uint64(n)), alloc(t, cl, ctx, uint64(n))
		t.Run("sync", func(t *testing.T) {
			upload(t, cl, ctx, src, data)
			ok(t, "cuMemcpyDtoD")(cl.MemcpyDtoDV2(ctx, dst, src, uint64(n)))
			if got := download(t, cl, ctx, dst, n); !bytes.Equal(got, data) {
				t.Errorf("%d bytes: the round trip changed the data", n)
			}
		})
		t.Run("stream", func(t *testing.T) {
			data := random(n, uint64(n)+1)
			ok(t, "cuMemcpyHtoDAsync")(cl.MemcpyHtoDAsyncV2(ctx, src, data, uint64(n), st))
			ok(t, "cuMemcpyDtoDAsync")(cl.MemcpyDtoDAsyncV2(ctx, dst, src, uint64(n), st))
			got := make([]byte, n)
			ok(t, "cuMemcpyDtoHAsync")(cl.MemcpyDtoHAsyncV2(ctx, got, dst, uint64(n), st))
			if !bytes.Equal(got, data) {
				t.Errorf("%d bytes: the round trip on a stream changed the data", n)
			}
		})
		ok(t, "cuMemFree")(cl.MemFreeV2(ctx, src))
		ok(t, "cuMemFree")(cl.MemFreeV2(ctx, dst))
	}

	// Copies inside an allocation, at offsets.
	p := alloc(t, cl, ctx, 1000)
	upload(t, cl, ctx, p, bytes.Repeat([]byte{7}, 1000))
	ok(t, "upload at an offset")(cl.MemcpyHtoDV2(ctx, p+990, []byte("0123456789"), 10))
	ok(t, "cuMemcpyDtoD within")(cl.MemcpyDtoDV2(ctx, p, p+990, 10))
	got := download(t, cl, ctx, p, 1000)
	if string(got[:10]) != "0123456789" || string(got[990:]) != "0123456789" || got[10] != 7 {
		t.Errorf("offsets: got %q...%q", got[:11], got[989:])
	}
	is(t, "a copy ending one byte past", proto.ErrInvalidValue)(cl.MemcpyHtoDV2(ctx, p+991, make([]byte, 10), 10))
	ok(t, "a copy of nothing")(cl.MemcpyHtoDV2(ctx, p, nil, 0))
	base, size, r, err := cl.MemGetAddressRangeV2(ctx, p+500)
	ok(t, "cuMemGetAddressRange")(r, err)
	if base != p || size != 1000 {
		t.Errorf("address range of p+500: %#x+%d, want %#x+1000", base, size, p)
	}
	ok(t, "cuMemFree")(cl.MemFreeV2(ctx, p))
	is(t, "a double free", proto.ErrInvalidValue)(cl.MemFreeV2(ctx, p))
	ok(t, "cuMemFree(0), a no-op as in CUDA")(cl.MemFreeV2(ctx, 0))
	is(t, "cuMemFree(0) without a context", proto.ErrInvalidContext)(cl.MemFreeV2(0, 0))
	is(t, "a read after free", proto.ErrInvalidValue)(cl.MemcpyDtoHV2(ctx, make([]byte, 1), p, 1))
}

func TestMemset(t *testing.T) {
	e := start(t, envConfig{})
	cl := e.dial(t, e.token(t, "job", 0))
	ctx := primary(t, cl)
	st, r, err := cl.StreamCreate(ctx, 0)
	ok(t, "cuStreamCreate")(r, err)
	const n = 3<<20 + 5
	p := alloc(t, cl, ctx, n)

	// model is what the memory should hold.
	model := make([]byte, n)
	set := func(off, count int, v uint32, width int) {
		for i := range count * width {
			if width == 1 {
				model[off+i] = byte(v)
			} else {
				model[off+i] = byteOf(v, i)
			}
		}
	}
	tests := []struct {
		name  string
		call  func() (proto.Result, error)
		apply func()
	}{
		{"D8", func() (proto.Result, error) { return cl.MemsetD8V2(ctx, p, 0xab, n) },
			func() { set(0, n, 0xab, 1) }},
		{"D8 in the middle", func() (proto.Result, error) { return cl.MemsetD8Async(ctx, p+1, 0x11, n-2, st) },
			func() { set(1, n-2, 0x11, 1) }},
		{"D32", func() (proto.Result, error) { return cl.MemsetD32V2(ctx, p, 0xdeadbeef, n/4) },
			func() { set(0, n/4, 0xdeadbeef, 4) }},
		{"D32 on a stream", func() (proto.Result, error) { return cl.MemsetD32Async(ctx, p+4, 0x01020304, 2, st) },
			func() { set(4, 2, 0x01020304, 4) }},
	}
	for _, tt := range tests {
		ok(t, tt.name+" (sent)")(tt.call())
		ok(t, tt.name+" (done)")(cl.CtxSynchronize(ctx))
		tt.apply()
		got := download(t, cl, ctx, p, n)
		for i := range got {
			if got[i] != model[i] {
				t.Fatalf("%s: byte %d is %#x, want %#x", tt.name, i, got[i], model[i])
			}
		}
	}

	refused := []struct {
		name string
		call func() (proto.Result, error)
	}{
		{"D32 misaligned", func() (proto.Result, error) { return cl.MemsetD32V2(ctx, p+2, 0, 1) }},
		{"D32 past the end", func() (proto.Result, error) { return cl.MemsetD32V2(ctx, p, 0, n/4+1) }},
		{"D8 past the end", func() (proto.Result, error) { return cl.MemsetD8V2(ctx, p, 0, n+1) }},
		{"D8 of a value over a byte", func() (proto.Result, error) { return cl.MemsetD8V2(ctx, p, 0x100, 1) }},
		{"D32 of 2^62 words", func() (proto.Result, error) { return cl.MemsetD32V2(ctx, p, 0, 1<<62) }},
	}
	for _, tt := range refused {
		ok(t, tt.name+" (sent)")(tt.call())
		is(t, tt.name, proto.ErrInvalidValue)(cl.CtxSynchronize(ctx))
	}
}

// TestQuotaShared: connections with one token ID share its quota.
func TestQuotaShared(t *testing.T) {
	const quota = 1 << 20
	e := start(t, envConfig{})
	tok := e.token(t, "job-q", quota)
	c1, c2 := e.dial(t, tok), e.dial(t, tok)
	other := e.dial(t, e.token(t, "job-other", quota))
	x1, x2, xo := primary(t, c1), primary(t, c2), primary(t, other)

	total, r, err := c1.DeviceTotalMemV2(x1, 0)
	ok(t, "cuDeviceTotalMem")(r, err)
	if total != quota {
		t.Errorf("cuDeviceTotalMem: %d, want the quota %d", total, quota)
	}
	p1 := alloc(t, c1, x1, 600<<10)
	_, r, err = c2.MemAllocV2(x2, 600<<10)
	is(t, "the second connection past the shared quota", proto.ErrOutOfMemory)(r, err)
	alloc(t, c2, x2, 400<<10)
	free, total, r, err := c2.MemGetInfoV2(x2)
	ok(t, "cuMemGetInfo")(r, err)
	if free != quota-1000<<10 || total != quota {
		t.Errorf("cuMemGetInfo: free %d total %d, want %d and %d", free, total, quota-1000<<10, quota)
	}
	if got := e.srv.QuotaUsed("job-q"); got != 1000<<10 {
		t.Errorf("QuotaUsed: %d, want %d", got, 1000<<10)
	}
	alloc(t, other, xo, 1<<20) // another token's quota is its own

	ok(t, "cuMemFree")(c1.MemFreeV2(x1, p1))
	alloc(t, c2, x2, 624<<10) // exactly full
	_, r, err = c1.MemAllocV2(x1, 1)
	is(t, "a byte past the quota", proto.ErrOutOfMemory)(r, err)

	// The memory of a connection that goes comes back to the others.
	c2.Close()
	eventually(t, "c2's memory to come back", func() bool { return e.srv.QuotaUsed("job-q") == 0 })
	alloc(t, c1, x1, quota)
}

// TestTokensOfOneIDCombine: connections presenting tokens of one ID share
// a pool, the largest of the tokens' quotas, and each token's holders also
// stay within that token's own quota: a later 1 MiB token of an ID first
// seen with 2 MiB cannot allocate 2 MiB (docs/remote.md, "How tokens of
// one ID combine").
func TestTokensOfOneIDCombine(t *testing.T) {
	const mib = 1 << 20
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			e := start(t, envConfig{srv: withMode(mode.srv)})
			big := e.dial(t, e.token(t, "job", 2*mib))
			small := e.dial(t, e.token(t, "job", mib))
			xb, xs := primary(t, big), primary(t, small)
			limits := func(what string, cl *proto.Client, ctx proto.Handle, wantFree, wantTotal uint64) {
				t.Helper()
				free, total, r, err := cl.MemGetInfoV2(ctx)
				ok(t, what+": cuMemGetInfo")(r, err)
				devTotal, r, err := cl.DeviceTotalMemV2(ctx, 0)
				ok(t, what+": cuDeviceTotalMem")(r, err)
				if free != wantFree || total != wantTotal || devTotal != wantTotal {
					t.Errorf("%s: cuMemGetInfo %d of %d, cuDeviceTotalMem %d; want %d of %d", what, free, total, devTotal, wantFree, wantTotal)
				}
			}

			limits("the 1 MiB token", small, xs, mib, mib)
			alloc(t, small, xs, mib/2)
			_, r, err := small.MemAllocV2(xs, mib/2+1)
			is(t, "the 1 MiB token past its quota", proto.ErrOutOfMemory)(r, err)
			alloc(t, small, xs, mib/2) // its quota, exactly
			limits("the 1 MiB token, full", small, xs, 0, mib)
			_, r, err = small.MemAllocV2(xs, 1)
			is(t, "a byte past the 1 MiB token's quota", proto.ErrOutOfMemory)(r, err)

			// The 2 MiB token has what is left of the pool.
			limits("the 2 MiB token", big, xb, mib, 2*mib)
			_, r, err = big.MemAllocV2(xb, mib+1)
			is(t, "the 2 MiB token past the pool", proto.ErrOutOfMemory)(r, err)
			alloc(t, big, xb, mib)

			// A later 3 MiB token raises the pool to 3 MiB; the others stay
			// within their own quotas.
			large := e.dial(t, e.token(t, "job", 3*mib))
			xl := primary(t, large)
			limits("the 3 MiB token", large, xl, mib, 3*mib)
			_, r, err = small.MemAllocV2(xs, 1)
			is(t, "the full 1 MiB token, with room in the raised pool", proto.ErrOutOfMemory)(r, err)
			p := alloc(t, large, xl, mib)
			_, r, err = large.MemAllocV2(xl, 1)
			is(t, "a byte past the pool", proto.ErrOutOfMemory)(r, err)
			ok(t, "cuMemFree")(large.MemFreeV2(xl, p))

			// A connection's memory comes back to its token and the pool.
			small.Close()
			eventually(t, "the 1 MiB token's memory to come back", func() bool {
				_, r, err := large.MemAllocV2(xl, 2*mib)
				return err == nil && r == proto.Success
			})
		})
	}
}

// TestQuotaUnlimited: quota 0 reports the device.
func TestQuotaUnlimited(t *testing.T) {
	e := start(t, envConfig{})
	cl := e.dial(t, e.token(t, "job", 0))
	ctx := primary(t, cl)
	free, total, r, err := cl.MemGetInfoV2(ctx)
	ok(t, "cuMemGetInfo")(r, err)
	if total != 16<<30 || free != total {
		t.Errorf("cuMemGetInfo: %d of %d, want the fake device's 16 GiB", free, total)
	}
	_, r, err = cl.MemAllocV2(ctx, 0)
	is(t, "cuMemAlloc(0)", proto.ErrInvalidValue)(r, err)
}

func TestModuleGlobals(t *testing.T) {
	e := start(t, envConfig{})
	cl := e.dial(t, e.token(t, "job", 0))
	ctx := primary(t, cl)
	m, _ := module(t, cl, ctx)
	g, size, r, err := cl.ModuleGetGlobalV2(ctx, m, "counter")
	ok(t, "cuModuleGetGlobal")(r, err)
	if size != 64 {
		t.Errorf("global size %d, want 64", size)
	}
	upload(t, cl, ctx, g, []byte("global!"))
	if got := download(t, cl, ctx, g, 7); string(got) != "global!" {
		t.Errorf("global holds %q", got)
	}
	is(t, "freeing a global", proto.ErrInvalidValue)(cl.MemFreeV2(ctx, g))
	_, _, r, err = cl.ModuleGetGlobalV2(ctx, m, "nope")
	is(t, "a missing global", proto.ErrNotFound)(r, err)
	ok(t, "cuModuleUnload")(cl.ModuleUnload(ctx, m))
	is(t, "a global of an unloaded module", proto.ErrInvalidValue)(cl.MemcpyHtoDV2(ctx, g, []byte{1}, 1))
}

func TestEventsTime(t *testing.T) {
	e := start(t, envConfig{})
	cl := e.dial(t, e.token(t, "job", 0))
	ctx := primary(t, cl)
	start, r, err := cl.EventCreate(ctx, 0)
	ok(t, "cuEventCreate")(r, err)
	end, r, err := cl.EventCreate(ctx, 0)
	ok(t, "cuEventCreate")(r, err)
	ok(t, "cuEventRecord")(cl.EventRecord(ctx, start, 0))
	time.Sleep(20 * time.Millisecond)
	ok(t, "cuEventRecord")(cl.EventRecord(ctx, end, 0))
	ok(t, "cuEventSynchronize")(cl.EventSynchronize(ctx, end))
	ms, r, err := cl.EventElapsedTime(ctx, start, end)
	ok(t, "cuEventElapsedTime")(r, err)
	if ms < 15 || ms > 5000 {
		t.Errorf("elapsed %v ms, want about 20", ms)
	}
}

// byteOf is byte i of memory filled with 32-bit little-endian v.
func byteOf(v uint32, i int) byte {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], v)
	return b[i%4]
}
