package server_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gpumux/gpumux/remote/fakecuda"
	"github.com/gpumux/gpumux/remote/proto"
)

// handshaken opens a raw connection past the handshake.
func (e *env) handshaken(t *testing.T, tok, identity string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c := e.raw(t)
	c.Write(proto.AppendFrame(nil, proto.Header{Op: proto.OpHello}, proto.Hello{Version: proto.Version, Token: tok, Identity: identity}.Encode()))
	br := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, p, err := proto.ReadFrame(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if w, err := proto.DecodeWelcome(p); err != nil || w.Result != proto.Success {
		t.Fatalf("handshake: %+v %v", w, err)
	}
	return c, br
}

func u64(v ...uint64) []byte {
	var b []byte
	for _, x := range v {
		b = binary.LittleEndian.AppendUint64(b, x)
	}
	return b
}

// TestMalformedFrameClosesOnlyThatConnection: a protocol error closes the
// connection that made it, frees what it held and is logged with the
// client's identity; another client keeps working.
func TestMalformedFrameClosesOnlyThatConnection(t *testing.T) {
	e := start(t, envConfig{})
	tok := e.token(t, "job", 0)
	good := e.dial(t, tok)
	gctx := primary(t, good)
	gp := alloc(t, good, gctx, 1024)
	upload(t, good, gctx, gp, []byte("still here"))

	frame := func(op proto.Op, flags uint16, seq uint32, ctx proto.Handle, p []byte) []byte {
		return proto.AppendFrame(nil, proto.Header{Op: op, Flags: flags, Seq: seq, Ctx: ctx}, p)
	}
	header := func(length uint32) []byte {
		return binary.LittleEndian.AppendUint32(nil, length)
	}
	tests := []struct {
		name string
		send func(ctx proto.Handle) []byte
		// closeWrite ends the client's side after send: the frame is
		// truncated only once nothing more can come.
		closeWrite bool
	}{
		{name: "oversized frame", send: func(proto.Handle) []byte {
			return append(header(proto.MaxPayload+proto.HeaderSize), make([]byte, 16)...)
		}},
		{name: "length shorter than the header", send: func(proto.Handle) []byte { return append(header(3), make([]byte, 16)...) }},
		{name: "truncated payload", closeWrite: true, send: func(ctx proto.Handle) []byte {
			return frame(proto.OpMemAllocV2, 0, 9, ctx, u64(16))[:25]
		}},
		{name: "truncated data", closeWrite: true, send: func(ctx proto.Handle) []byte {
			return append(frame(proto.OpMemcpyHtoDV2, 0, 9, ctx, u64(0x7f0000000000, 4, 4)),
				frame(proto.OpMemcpyHtoDV2, proto.FlagData, 9, ctx, []byte{1, 2, 3, 4})[:22]...)
		}},
		{name: "short payload", send: func(ctx proto.Handle) []byte { return frame(proto.OpMemAllocV2, 0, 9, ctx, []byte{1, 2, 3}) }},
		{name: "trailing bytes", send: func(ctx proto.Handle) []byte { return frame(proto.OpMemAllocV2, 0, 9, ctx, append(u64(16), 0)) }},
		{name: "unknown op", send: func(ctx proto.Handle) []byte { return frame(999, 0, 9, ctx, nil) }},
		{name: "a sync call sent async", send: func(ctx proto.Handle) []byte { return frame(proto.OpMemAllocV2, proto.FlagAsync, 9, ctx, u64(16)) }},
		{name: "an async call sent sync", send: func(ctx proto.Handle) []byte {
			return frame(proto.OpMemsetD8V2, 0, 9, ctx, append(append(u64(0), 0, 0, 0, 0), u64(0)...))
		}},
		{name: "data without a call", send: func(ctx proto.Handle) []byte { return frame(proto.OpMemcpyHtoDV2, proto.FlagData, 9, ctx, []byte{1}) }},
		{name: "a reply from the client", send: func(ctx proto.Handle) []byte { return frame(proto.OpMemAllocV2, proto.FlagReply, 9, ctx, u64(16)) }},
		{name: "data of another call", send: func(ctx proto.Handle) []byte {
			return append(frame(proto.OpMemcpyHtoDV2, 0, 9, ctx, u64(0x7f0000000000, 4, 4)),
				frame(proto.OpMemcpyHtoDV2, proto.FlagData, 8, ctx, []byte{1, 2, 3, 4})...)
		}},
		{name: "data with another op", send: func(ctx proto.Handle) []byte {
			return append(frame(proto.OpMemcpyHtoDV2, 0, 9, ctx, u64(0x7f0000000000, 4, 4)),
				frame(proto.OpMemcpyDtoHV2, proto.FlagData, 9, ctx, []byte{1, 2, 3, 4})...)
		}},
		{name: "more data than announced", send: func(ctx proto.Handle) []byte {
			return append(frame(proto.OpMemcpyHtoDV2, 0, 9, ctx, u64(0x7f0000000000, 4, 4)),
				frame(proto.OpMemcpyHtoDV2, proto.FlagData, 9, ctx, []byte{1, 2, 3, 4, 5})...)
		}},
		{name: "a call instead of data", send: func(ctx proto.Handle) []byte {
			return append(frame(proto.OpMemcpyHtoDV2, 0, 9, ctx, u64(0x7f0000000000, 4, 4)),
				frame(proto.OpCtxSynchronize, 0, 10, ctx, nil)...)
		}},
		{name: "copy sizes that disagree", send: func(ctx proto.Handle) []byte {
			return frame(proto.OpMemcpyDtoHV2, 0, 9, ctx, u64(8, 0x7f0000000000, 4))
		}},
		{name: "a string past MaxString", send: func(ctx proto.Handle) []byte {
			p := binary.LittleEndian.AppendUint64(nil, 0x1001)
			p = binary.LittleEndian.AppendUint32(p, proto.MaxString+1)
			return frame(proto.OpModuleGetFunction, 0, 9, ctx, append(p, make([]byte, proto.MaxString+1)...))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := e.fake.Stats().Allocations
			identity := "bad-client-" + strings.ReplaceAll(tt.name, " ", "-")
			c, br := e.handshaken(t, tok, identity)
			// A context and an allocation, to be freed when it goes.
			var ctx proto.Handle
			{
				c.Write(frame(proto.OpDevicePrimaryCtxRetain, 0, 1, 0, []byte{0, 0, 0, 0}))
				_, p, err := proto.ReadFrame(br, nil)
				if err != nil || binary.LittleEndian.Uint32(p) != 0 {
					t.Fatalf("retain: %v %x", err, p)
				}
				ctx = proto.Handle(binary.LittleEndian.Uint64(p[4:]))
				c.Write(frame(proto.OpMemAllocV2, 0, 2, ctx, u64(100)))
				if _, _, err := proto.ReadFrame(br, nil); err != nil {
					t.Fatal(err)
				}
			}
			if got := e.fake.Stats().Allocations; got != before+1 {
				t.Fatalf("allocations %d, want %d", got, before+1)
			}
			c.Write(tt.send(ctx))
			if tt.closeWrite {
				c.(*net.UnixConn).CloseWrite()
			}
			if err := closedByPeer(c); err != nil {
				t.Fatal(err)
			}
			eventually(t, "its allocation to be freed", func() bool { return e.fake.Stats().Allocations == before })
			eventually(t, "a log line naming the client", func() bool {
				for l := range strings.Lines(e.logs.String()) {
					if strings.Contains(l, "closing the connection") && strings.Contains(l, "identity="+identity) {
						return true
					}
				}
				return false
			})

			// The other client is untouched.
			if got := download(t, good, gctx, gp, 10); string(got) != "still here" {
				t.Errorf("the good client's memory holds %q", got)
			}
			ok(t, "the good client's next call")(good.CtxSynchronize(gctx))
		})
	}
}

// TestDisconnectFreesEverything: a client that goes without cleaning up
// leaves nothing behind.
func TestDisconnectFreesEverything(t *testing.T) {
	e := start(t, envConfig{fake: fakeDevices(2), srv: insecure()})
	cl := e.dial(t, "")
	ctx := primary(t, cl)
	c2, r, err := cl.CtxCreateV2(0, 0, 1)
	ok(t, "cuCtxCreate")(r, err)
	for _, x := range []proto.Handle{ctx, c2} {
		for range 3 {
			alloc(t, cl, x, 5000)
		}
		m, _ := module(t, cl, x)
		_, _, r, err := cl.ModuleGetGlobalV2(x, m, "counter")
		ok(t, "cuModuleGetGlobal")(r, err)
		_, r, err = cl.StreamCreate(x, 1)
		ok(t, "cuStreamCreate")(r, err)
		_, r, err = cl.EventCreate(x, 0)
		ok(t, "cuEventCreate")(r, err)
	}
	st := e.fake.Stats()
	if st.Contexts != 2 || st.Allocations != 6 || st.Modules != 2 || st.Streams != 2 || st.Events != 2 {
		t.Fatalf("before the disconnect: %+v", st)
	}
	cl.Close()
	e.waitClean(t)
	eventually(t, "the summary line", func() bool {
		l := e.logs.String()
		return strings.Contains(l, "client gone") && strings.Contains(l, "freed_allocations=6") &&
			strings.Contains(l, "freed_bytes=30000") && strings.Contains(l, "destroyed_contexts=2")
	})
}

// TestServerStop: ending Serve's context closes every client promptly and
// frees their objects.
func TestServerStop(t *testing.T) {
	e := start(t, envConfig{})
	clients := []*proto.Client{e.dial(t, e.token(t, "a", 0)), e.dial(t, e.token(t, "b", 0))}
	ctxs := make([]proto.Handle, len(clients))
	for i, cl := range clients {
		ctxs[i] = primary(t, cl)
		alloc(t, cl, ctxs[i], 1<<20)
	}
	t0 := time.Now()
	e.stop(t)
	if d := time.Since(t0); d > 3*time.Second {
		t.Errorf("Serve took %v to stop", d)
	}
	e.waitClean(t)
	for i, cl := range clients {
		t0 := time.Now()
		_, r, err := cl.MemAllocV2(ctxs[i], 16)
		if err == nil {
			t.Errorf("client %d: a call after the server stopped: %v, no error", i, r)
		}
		if d := time.Since(t0); d > 2*time.Second {
			t.Errorf("client %d: the call took %v to fail", i, d)
		}
	}
	// The listener is gone: new clients are refused at once.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := proto.Dial(ctx, e.network, e.addr, proto.Hello{}, time.Second); err == nil {
		t.Error("a new client connected after the server stopped")
	}
}

// TestConcurrentClients: many clients at once, each on its own data.
func TestConcurrentClients(t *testing.T) {
	e := start(t, envConfig{fake: []fakecuda.Option{fakecuda.WithMemory(1 << 30)}})
	const clients = 8
	errs := make(chan error, clients)
	for i := range clients {
		cl := e.dial(t, e.token(t, "job", 0))
		go func() {
			errs <- func() error {
				ctx, r, err := cl.DevicePrimaryCtxRetain(0, 0)
				if err != nil || r != proto.Success {
					return err
				}
				data := random(300<<10, uint64(i))
				for range 5 {
					p, r, err := cl.MemAllocV2(ctx, uint64(len(data)))
					if err != nil || r != proto.Success {
						return err
					}
					if r, err := cl.MemcpyHtoDV2(ctx, p, data, uint64(len(data))); err != nil || r != proto.Success {
						return err
					}
					got := make([]byte, len(data))
					if r, err := cl.MemcpyDtoHV2(ctx, got, p, uint64(len(got))); err != nil || r != proto.Success {
						return err
					}
					if string(got) != string(data) {
						return errMismatch
					}
					if r, err := cl.MemFreeV2(ctx, p); err != nil || r != proto.Success {
						return err
					}
				}
				return nil
			}()
		}()
	}
	for range clients {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

var errMismatch = errorString("data mismatch")

type errorString string

func (e errorString) Error() string { return string(e) }
