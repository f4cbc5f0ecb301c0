package proto

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Encoder builds a payload. The zero value is ready to use.
type Encoder struct{ b []byte }

// Payload returns the payload so far.
func (e *Encoder) Payload() []byte { return e.b }

// U32 appends v.
func (e *Encoder) U32(v uint32) { e.b = binary.LittleEndian.AppendUint32(e.b, v) }

// I32 appends v.
func (e *Encoder) I32(v int32) { e.U32(uint32(v)) }

// U64 appends v.
func (e *Encoder) U64(v uint64) { e.b = binary.LittleEndian.AppendUint64(e.b, v) }

// F32 appends v.
func (e *Encoder) F32(v float32) { e.U32(math.Float32bits(v)) }

// Str appends a length-prefixed string.
func (e *Encoder) Str(s string) {
	e.U32(uint32(len(s)))
	e.b = append(e.b, s...)
}

// Bytes appends length-prefixed bytes.
func (e *Encoder) Bytes(p []byte) {
	e.U32(uint32(len(p)))
	e.b = append(e.b, p...)
}

// UUID appends 16 raw bytes.
func (e *Encoder) UUID(u [16]byte) { e.b = append(e.b, u[:]...) }

// Decoder reads a payload. The first error sticks: later reads return zero
// values and Finish reports it, so decoding code reads straight through.
type Decoder struct {
	b   []byte
	err error
}

// NewDecoder reads p.
func NewDecoder(p []byte) *Decoder { return &Decoder{b: p} }

func (d *Decoder) take(n int, what string) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || len(d.b) < n {
		d.err = fmt.Errorf("%w: %s needs %d bytes, %d left", ErrMalformed, what, n, len(d.b))
		return nil
	}
	p := d.b[:n]
	d.b = d.b[n:]
	return p
}

// U32 reads a u32.
func (d *Decoder) U32() uint32 {
	if p := d.take(4, "u32"); p != nil {
		return binary.LittleEndian.Uint32(p)
	}
	return 0
}

// I32 reads an i32.
func (d *Decoder) I32() int32 { return int32(d.U32()) }

// U64 reads a u64.
func (d *Decoder) U64() uint64 {
	if p := d.take(8, "u64"); p != nil {
		return binary.LittleEndian.Uint64(p)
	}
	return 0
}

// F32 reads an f32.
func (d *Decoder) F32() float32 { return math.Float32frombits(d.U32()) }

// Str reads a string of at most max bytes.
func (d *Decoder) Str(max int) string { return string(d.Bytes(max)) }

// Bytes reads length-prefixed bytes, at most max of them. The result
// aliases the payload.
func (d *Decoder) Bytes(max int) []byte {
	n := d.U32()
	if d.err == nil && n > uint32(max) {
		d.err = fmt.Errorf("%w: %d bytes, at most %d", ErrMalformed, n, max)
	}
	return d.take(int(n), "bytes")
}

// UUID reads 16 raw bytes.
func (d *Decoder) UUID() (u [16]byte) {
	copy(u[:], d.take(16, "uuid"))
	return u
}

// Finish reports the first error, or trailing bytes.
func (d *Decoder) Finish() error {
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%w: %d trailing bytes", ErrMalformed, len(d.b))
	}
	return d.err
}

// Len returns the bytes left to read.
func (d *Decoder) Len() int { return len(d.b) }

// Fail makes the decoding fail with what, unless it has already failed.
func (d *Decoder) Fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrMalformed, what)
	}
}
