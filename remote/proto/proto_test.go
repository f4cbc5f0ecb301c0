package proto

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestCodecRoundTrip(t *testing.T) {
	var e Encoder
	e.U32(7)
	e.I32(-3)
	e.U64(1 << 40)
	e.F32(2.5)
	e.Str("kernel")
	e.Bytes([]byte{1, 2, 3})
	e.UUID([16]byte{15: 9})
	d := NewDecoder(e.Payload())
	if d.U32() != 7 || d.I32() != -3 || d.U64() != 1<<40 || d.F32() != 2.5 ||
		d.Str(10) != "kernel" || !bytes.Equal(d.Bytes(10), []byte{1, 2, 3}) || d.UUID()[15] != 9 {
		t.Fatal("values changed in a round trip")
	}
	if err := d.Finish(); err != nil {
		t.Fatal(err)
	}
}

func TestDecoderErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    []byte
		read func(*Decoder)
	}{
		{"short u32", []byte{1, 2}, func(d *Decoder) { d.U32() }},
		{"short u64", []byte{1, 2, 3, 4}, func(d *Decoder) { d.U64() }},
		{"string over max", append([]byte{5, 0, 0, 0}, "hello"...), func(d *Decoder) { d.Str(4) }},
		{"string past end", []byte{9, 0, 0, 0, 'a'}, func(d *Decoder) { d.Str(100) }},
		{"trailing", []byte{1, 0, 0, 0, 0}, func(d *Decoder) { d.U32() }},
		{"huge length", []byte{0xff, 0xff, 0xff, 0xff}, func(d *Decoder) { d.Bytes(MaxBlob) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := NewDecoder(tc.p)
			tc.read(d)
			if err := d.Finish(); !errors.Is(err, ErrMalformed) {
				t.Fatalf("Finish = %v, want ErrMalformed", err)
			}
		})
	}
}

func TestReadFrameLimits(t *testing.T) {
	good := AppendFrame(nil, Header{Op: 5, Flags: FlagAsync, Seq: 9, Ctx: 0x1000}, []byte("abc"))
	h, p, err := ReadFrame(bytes.NewReader(good), nil)
	if err != nil || h != (Header{Op: 5, Flags: FlagAsync, Seq: 9, Ctx: 0x1000}) || string(p) != "abc" {
		t.Fatalf("ReadFrame = %+v %q %v", h, p, err)
	}
	big := append([]byte{}, good...)
	big[0], big[1], big[2], big[3] = 0xff, 0xff, 0xff, 0x7f
	if _, _, err := ReadFrame(bytes.NewReader(big), nil); !errors.Is(err, ErrTooLarge) {
		t.Errorf("oversized: %v, want ErrTooLarge", err)
	}
	short := append([]byte{}, good...)
	short[0], short[1], short[2], short[3] = 3, 0, 0, 0
	if _, _, err := ReadFrame(bytes.NewReader(short), nil); !errors.Is(err, ErrMalformed) {
		t.Errorf("length under the header: %v, want ErrMalformed", err)
	}
	if _, _, err := ReadFrame(bytes.NewReader(good[:len(good)-1]), nil); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("truncated: %v, want io.ErrUnexpectedEOF", err)
	}
}

// TestReadFrameMax: a frame announcing more than the bound is refused
// once its header is read: nothing of its payload is read, and no room is
// made for it.
func TestReadFrameMax(t *testing.T) {
	tests := []struct {
		name     string
		announce int // payload bytes the header announces
		wantErr  error
	}{
		{"at the bound", MaxHello, nil},
		{"one byte past", MaxHello + 1, ErrTooLarge},
		{"a chunk", ChunkSize, ErrTooLarge},
		{"a whole frame", MaxPayload, ErrTooLarge},
		{"past any frame", 1 << 30, ErrTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hdr := AppendHeader(nil, Header{Op: OpHello}, 0)
			binary.LittleEndian.PutUint32(hdr, uint32(HeaderSize-4+tt.announce))
			const sent = 64 // of the payload, or of what follows the header
			r := bytes.NewReader(append(hdr, make([]byte, min(tt.announce, sent))...))
			var stats runtime.MemStats
			runtime.ReadMemStats(&stats)
			before := stats.TotalAlloc
			_, _, err := ReadFrameMax(r, nil, MaxHello)
			runtime.ReadMemStats(&stats)
			if !errors.Is(err, tt.wantErr) && !(tt.wantErr == nil && errors.Is(err, io.ErrUnexpectedEOF)) {
				t.Fatalf("ReadFrameMax: %v, want %v", err, tt.wantErr)
			}
			if tt.wantErr == nil {
				return
			}
			if r.Len() != min(tt.announce, sent) {
				t.Errorf("read %d bytes of the payload, want none", min(tt.announce, sent)-r.Len())
			}
			if got := stats.TotalAlloc - before; got > 4<<10 {
				t.Errorf("allocated %d bytes refusing a frame, want next to none", got)
			}
		})
	}
	// A handshake with the longest token and identity fits.
	h := Hello{Version: Version, Token: strings.Repeat("t", MaxString), Identity: strings.Repeat("i", MaxString)}
	if n := len(h.Encode()); n != MaxHello {
		t.Errorf("the largest handshake takes %d bytes, MaxHello is %d", n, MaxHello)
	}
}

func FuzzReadFrame(f *testing.F) {
	f.Add(AppendFrame(nil, Header{Op: 1, Seq: 1}, []byte{0, 0, 0, 0}))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, p, err := ReadFrame(bytes.NewReader(b), nil)
		if err != nil {
			return
		}
		again := AppendFrame(nil, h, p)
		if !bytes.Equal(again, b[:len(again)]) {
			t.Fatalf("frame %x re-encodes as %x", b[:len(again)], again)
		}
	})
}

// memHandler is a tiny device: one buffer, to test the generated code's
// streams, outputs and deferred errors end to end over a pipe.
type memHandler struct {
	Handler // calls not overridden panic: the test uses only these
	mem     []byte
}

func (m *memHandler) MemAllocV2(c *Call, n uint64) (DevPtr, Result) {
	m.mem = make([]byte, n)
	return 0x1000, Success
}

func (m *memHandler) MemcpyHtoDV2(c *Call, dst DevPtr, src *HostIn, n uint64) Result {
	off := int(dst - 0x1000)
	for {
		p, err := src.Next()
		if err == io.EOF {
			return Success
		}
		if err != nil {
			return ErrUnknown
		}
		off += copy(m.mem[off:], p)
	}
}

func (m *memHandler) MemcpyDtoHV2(c *Call, dst *HostOut, src DevPtr, n uint64) Result {
	if _, err := dst.Write(m.mem[src-0x1000 : uint64(src-0x1000)+n]); err != nil {
		return ErrUnknown
	}
	return Success
}

func (m *memHandler) LaunchKernel(c *Call, f Handle, gx, gy, gz, bx, by, bz, shm uint32, s Handle, params []byte) Result {
	if f == 0xbad {
		return ErrIllegalAddress
	}
	return Success
}

func (m *memHandler) CtxSynchronize(c *Call) Result { return Success }

func (m *memHandler) DeviceGetName(c *Call, length int32, dev int32) (string, Result) {
	return "pipe GPU", Success
}

// pipeTransport is the server side of a net.Pipe, the way a server feeds
// Dispatch.
type pipeTransport struct {
	r   *bufio.Reader
	w   net.Conn
	seq uint32
}

func (p *pipeTransport) ReadData() ([]byte, error) {
	h, b, err := ReadFrame(p.r, nil)
	if err != nil {
		return nil, err
	}
	if h.Flags&FlagData == 0 || h.Seq != p.seq {
		return nil, ErrMalformed
	}
	return b, nil
}

func (p *pipeTransport) WriteData(seq uint32, b []byte) error {
	_, err := p.w.Write(AppendFrame(nil, Header{Flags: FlagData, Seq: seq, Op: OpMemcpyDtoHV2}, b))
	return err
}

func (p *pipeTransport) WriteReply(op Op, seq uint32, b []byte) error {
	_, err := p.w.Write(AppendFrame(nil, Header{Op: op, Flags: FlagReply, Seq: seq}, b))
	return err
}

func serve(t *testing.T, conn net.Conn, h Handler) {
	defer conn.Close()
	tr := &pipeTransport{r: bufio.NewReader(conn), w: conn}
	if _, _, err := ReadFrame(tr.r, nil); err != nil {
		return
	}
	tr.WriteReply(OpHello, 0, Welcome{Quota: 42}.Encode())
	var deferred Result
	for {
		hd, p, err := ReadFrame(tr.r, nil)
		if err != nil {
			return
		}
		tr.seq = hd.Seq
		c := &Call{Op: hd.Op, Seq: hd.Seq, Ctx: hd.Ctx, T: tr, Deferred: &deferred}
		if err := Dispatch(h, c, p); err != nil {
			t.Errorf("Dispatch: %v", err)
			return
		}
	}
}

func TestClientDispatch(t *testing.T) {
	a, b := net.Pipe()
	go serve(t, b, &memHandler{})
	cl, err := NewClient(a, Hello{Token: "t", Identity: "test"}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if cl.Welcome.Quota != 42 {
		t.Fatalf("welcome quota %d", cl.Welcome.Quota)
	}
	const n = 5<<20 + 3 // several data frames and a short last one
	p, r, err := cl.MemAllocV2(0, n)
	if err != nil || r != Success {
		t.Fatal(r, err)
	}
	src := make([]byte, n)
	for i := range src {
		src[i] = byte(i * 7)
	}
	if r, err := cl.MemcpyHtoDV2(0, p, src, n); r != Success || err != nil {
		t.Fatal(r, err)
	}
	dst := make([]byte, n)
	if r, err := cl.MemcpyDtoHV2(0, dst, p, n); r != Success || err != nil {
		t.Fatal(r, err)
	}
	if !bytes.Equal(src, dst) {
		t.Fatal("data changed in the round trip")
	}

	// An async failure surfaces at the next call that waits, once.
	if r, err := cl.LaunchKernel(0, 0xbad, 1, 1, 1, 1, 1, 1, 0, 0, nil); r != Success || err != nil {
		t.Fatalf("async launch returned %v %v", r, err)
	}
	if r, _ := cl.CtxSynchronize(0); r != ErrIllegalAddress {
		t.Fatalf("next sync call = %v, want the deferred %v", r, ErrIllegalAddress)
	}
	if r, _ := cl.CtxSynchronize(0); r != Success {
		t.Fatalf("the call after = %v, want Success", r)
	}

	// Cached calls are answered once by the server.
	for range 3 {
		name, r, err := cl.DeviceGetName(0, 64, 0)
		if name != "pipe GPU" || r != Success || err != nil {
			t.Fatalf("DeviceGetName = %q %v %v", name, r, err)
		}
	}
	if len(cl.cache) != 1 {
		t.Fatalf("cache has %d entries, want 1", len(cl.cache))
	}
}

// FuzzMigrationFrames: the first frames and answers of migration never
// panic their decoders, and what decodes encodes back to itself.
func FuzzMigrationFrames(f *testing.F) {
	f.Add(Control{Version: Version, Token: "gmxc.a.b", Kind: ControlMigrate, Tenant: "job", Target: "h:1"}.Encode())
	f.Add(Control{Version: Version, Token: "gmxc.a.b", Kind: ControlRestore, Client: Hello{Version: Version, Token: "t", Identity: "vm/1"}}.Encode())
	f.Add(Resume{Hello: Hello{Version: Version, Token: "t"}, Ticket: make([]byte, TicketSize)}.Encode())
	f.Add(MovedTo{Addr: "h:1", Ticket: make([]byte, TicketSize)}.Encode())
	f.Add(ControlReply{Result: Success, Moved: []uint64{1, 2}}.Encode())
	f.Fuzz(func(t *testing.T, p []byte) {
		if c, err := DecodeControl(p); err == nil {
			if again, err := DecodeControl(c.Encode()); err != nil || again != c {
				t.Fatalf("control: %+v, then %+v, %v", c, again, err)
			}
		}
		if r, err := DecodeResume(p); err == nil {
			if again, err := DecodeResume(r.Encode()); err != nil || again.Hello != r.Hello || !bytes.Equal(again.Ticket, r.Ticket) {
				t.Fatalf("resume: %+v, then %+v, %v", r, again, err)
			}
		}
		if m, err := DecodeMovedTo(p); err == nil && (len(m.Ticket) != TicketSize || m.Addr == "") {
			t.Fatalf("moved: %+v", m)
		}
		if r, err := DecodeControlReply(p); err == nil {
			if again, err := DecodeControlReply(r.Encode()); err != nil || len(again.Moved) != len(r.Moved) {
				t.Fatalf("control reply: %+v, then %+v, %v", r, again, err)
			}
		}
	})
}
