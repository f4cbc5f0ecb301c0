package proto

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Version is the protocol version; the handshake refuses one past it or
// before MinVersion. Bump it whenever calls.def or the frame layout
// changes incompatibly, or clients learn something a server must know of
// (version 2: following a move, migrate.go).
const Version = 2

// Magic opens every handshake: "GMUX" little-endian.
const Magic uint32 = 0x584d5547

// Frame layout, little-endian:
//
//	u32 length   bytes after this field: 16 + payload
//	u16 op       the call (OpHello for the handshake)
//	u16 flags    FlagReply, FlagData, FlagAsync
//	u32 seq      the request's sequence number; replies and data echo it
//	u64 ctx      the calling thread's current context handle (0: none)
//	payload
const (
	HeaderSize = 20
	// ChunkSize is the most host data one data frame carries: large copies
	// stream as many frames and never sit whole in a buffer.
	ChunkSize = 1 << 20
	// MaxPayload bounds every frame; a longer one closes the connection.
	MaxPayload = ChunkSize + 64<<10
	// MaxString bounds a string argument (symbol names, tokens).
	MaxString = 4096
	// MaxBlob bounds a blob argument (packed kernel parameters: CUDA
	// allows 32764 bytes).
	MaxBlob = 32 << 10
	// MaxImage bounds a module image.
	MaxImage = 512 << 20
)

// Frame flags.
const (
	FlagReply uint16 = 1 << iota // a reply to the request with the same seq
	FlagData                     // a chunk of streamed host data
	FlagAsync                    // the sender does not wait for a reply
)

// OpHello is the handshake; call numbers start at 1.
const OpHello Op = 0

// Op is a call's wire number (see calls.def).
type Op uint16

// Handle is a client's name for a server-side object (context, module,
// function, stream, event). Handles are per client: the server maps them to
// its own objects and refuses another client's.
type Handle uint64

// DevPtr is a device address.
type DevPtr uint64

// CallInfo describes a forwarded call.
type CallInfo struct {
	Name  string
	Async bool
	Cache bool
}

var (
	// ErrMalformed means a frame or payload broke the protocol; the
	// connection is closed.
	ErrMalformed = errors.New("malformed frame")
	// ErrTooLarge means a frame announced more than MaxPayload bytes.
	ErrTooLarge = errors.New("frame too large")
	// ErrUnknownOp means a call number this side does not know.
	ErrUnknownOp = errors.New("unknown call")
)

// Header is a frame's fixed part.
type Header struct {
	Op    Op
	Flags uint16
	Seq   uint32
	Ctx   Handle
}

// ReadFrame reads one frame into buf (grown as needed) and returns its
// header and payload, which aliases buf.
func ReadFrame(r io.Reader, buf []byte) (Header, []byte, error) {
	return ReadFrameMax(r, buf, MaxPayload)
}

// ReadFrameMax is ReadFrame for frames of at most max payload bytes (at
// most MaxPayload): a longer one is ErrTooLarge as soon as its header is
// read, before anything of its payload is read or room made for it.
func ReadFrameMax(r io.Reader, buf []byte, max int) (Header, []byte, error) {
	max = min(max, MaxPayload)
	var hb [HeaderSize]byte
	if _, err := io.ReadFull(r, hb[:]); err != nil {
		return Header{}, nil, err
	}
	n := binary.LittleEndian.Uint32(hb[0:])
	if n < HeaderSize-4 {
		return Header{}, nil, fmt.Errorf("%w: length %d is shorter than the header", ErrMalformed, n)
	}
	size := int(n) - (HeaderSize - 4)
	if size > max {
		return Header{}, nil, fmt.Errorf("%w: %d bytes, at most %d", ErrTooLarge, size, max)
	}
	h := Header{
		Op:    Op(binary.LittleEndian.Uint16(hb[4:])),
		Flags: binary.LittleEndian.Uint16(hb[6:]),
		Seq:   binary.LittleEndian.Uint32(hb[8:]),
		Ctx:   Handle(binary.LittleEndian.Uint64(hb[12:])),
	}
	if cap(buf) < size {
		buf = make([]byte, size)
	}
	buf = buf[:size]
	if _, err := io.ReadFull(r, buf); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return Header{}, nil, err
	}
	return h, buf, nil
}

// AppendFrame appends a frame with header h and payload p to dst.
func AppendFrame(dst []byte, h Header, p []byte) []byte {
	return append(AppendHeader(dst, h, len(p)), p...)
}

// AppendHeader appends the header of a frame whose payload of n bytes the
// caller writes after it.
func AppendHeader(dst []byte, h Header, n int) []byte {
	if n > MaxPayload {
		panic("proto: payload over MaxPayload")
	}
	dst = binary.LittleEndian.AppendUint32(dst, uint32(HeaderSize-4+n))
	dst = binary.LittleEndian.AppendUint16(dst, uint16(h.Op))
	dst = binary.LittleEndian.AppendUint16(dst, h.Flags)
	dst = binary.LittleEndian.AppendUint32(dst, h.Seq)
	return binary.LittleEndian.AppendUint64(dst, uint64(h.Ctx))
}
