package proto

import "fmt"

// MaxHello bounds a handshake's payload: its magic, its version, and a
// token and an identity of at most MaxString bytes each. A server reads
// nothing larger before the handshake is through.
const MaxHello = 4 + 4 + 2*(4+MaxString)

// Hello is the client's handshake, the first frame of every connection.
type Hello struct {
	Version  uint16
	Token    string
	Identity string // the client program, for the server's logs: "host/pid/exe"
}

// Encode returns the handshake payload.
func (h Hello) Encode() []byte {
	var e Encoder
	e.U32(Magic)
	e.U32(uint32(h.Version))
	e.Str(h.Token)
	e.Str(h.Identity)
	return e.Payload()
}

// DecodeHello reads a handshake payload.
func DecodeHello(p []byte) (Hello, error) {
	d := NewDecoder(p)
	if m := d.U32(); d.err == nil && m != Magic {
		return Hello{}, fmt.Errorf("%w: handshake magic %#x, want %#x", ErrMalformed, m, Magic)
	}
	v := d.U32()
	h := Hello{Token: d.Str(MaxString), Identity: d.Str(MaxString)}
	if err := d.Finish(); err != nil {
		return Hello{}, fmt.Errorf("handshake: %w", err)
	}
	if v > 0xffff {
		return Hello{}, fmt.Errorf("%w: handshake version %d", ErrMalformed, v)
	}
	h.Version = uint16(v)
	return h, nil
}

// Welcome is the server's answer to Hello.
type Welcome struct {
	Result  Result // Success, or why the connection is refused
	Message string
	// Quota is the client's device memory limit in bytes (0: none).
	Quota uint64
}

// Encode returns the answer's payload.
func (w Welcome) Encode() []byte {
	var e Encoder
	e.I32(int32(w.Result))
	e.Str(w.Message)
	e.U64(w.Quota)
	return e.Payload()
}

// DecodeWelcome reads the server's answer.
func DecodeWelcome(p []byte) (Welcome, error) {
	d := NewDecoder(p)
	w := Welcome{Result: Result(d.I32()), Message: d.Str(MaxString), Quota: d.U64()}
	return w, d.Finish()
}
