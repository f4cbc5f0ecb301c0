package proto

import (
	"fmt"
	"io"
)

// Transport is what Dispatch needs from the server's side of a connection.
type Transport interface {
	// ReadData returns the payload of the next frame, which must be a data
	// frame of the current call; the slice is valid until the next read.
	ReadData() ([]byte, error)
	// WriteData sends a data frame with p.
	WriteData(seq uint32, p []byte) error
	// WriteReply sends the reply frame of call op/seq.
	WriteReply(op Op, seq uint32, payload []byte) error
}

// Call is one forwarded call on the server: its frame header and the
// connection it came on.
type Call struct {
	Op  Op
	Seq uint32
	// Ctx is the handle of the calling thread's current context (0: none).
	Ctx Handle
	T   Transport
	// Deferred holds the first failure of an async call since the last
	// reply; the next sync call returns it instead of running. Shared by
	// every call of one connection.
	Deferred *Result
}

func (c *Call) takeDeferred() Result {
	if c.Deferred == nil {
		return Success
	}
	r := *c.Deferred
	*c.Deferred = Success
	return r
}

func (c *Call) deferResult(r Result) {
	if c.Deferred != nil && r != Success && *c.Deferred == Success {
		*c.Deferred = r
	}
}

func (c *Call) reply(r Result, e *Encoder) error {
	var out Encoder
	out.I32(int32(r))
	if e != nil && r == Success {
		out.b = append(out.b, e.b...)
	}
	return c.T.WriteReply(c.Op, c.Seq, out.b)
}

// HostIn is host memory the client streams to the server after a call's
// frame: N bytes in data frames of at most ChunkSize.
type HostIn struct {
	N    uint64
	read uint64
	c    *Call
}

func (c *Call) hostIn(n uint64) *HostIn { return &HostIn{N: n, c: c} }

// Next returns the next chunk, or io.EOF after N bytes.
func (in *HostIn) Next() ([]byte, error) {
	if in.read >= in.N {
		return nil, io.EOF
	}
	p, err := in.c.T.ReadData()
	if err != nil {
		return nil, err
	}
	left := in.N - in.read
	if len(p) == 0 || uint64(len(p)) > left || len(p) > ChunkSize {
		return nil, fmt.Errorf("%w: a data frame of %d bytes with %d left", ErrMalformed, len(p), left)
	}
	in.read += uint64(len(p))
	return p, nil
}

// drain reads what the handler left, keeping the stream in step.
func (in *HostIn) drain() error {
	for {
		if _, err := in.Next(); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
	}
}

// HostOut is host memory the server streams back before a call's reply:
// exactly N bytes on success.
type HostOut struct {
	N    uint64
	sent uint64
	err  error
	c    *Call
}

func (c *Call) hostOut(n uint64) *HostOut { return &HostOut{N: n, c: c} }

// Write sends p (split into ChunkSize frames). Writing past N is an error.
func (out *HostOut) Write(p []byte) (int, error) {
	if out.err != nil {
		return 0, out.err
	}
	if uint64(len(p)) > out.N-out.sent {
		return 0, fmt.Errorf("proto: %d bytes written, %d left of %d", len(p), out.N-out.sent, out.N)
	}
	written := 0
	for len(p) > 0 {
		n := min(len(p), ChunkSize)
		if err := out.c.T.WriteData(out.c.Seq, p[:n]); err != nil {
			out.err = err
			return written, err
		}
		out.sent += uint64(n)
		written += n
		p = p[n:]
	}
	return written, nil
}

// finish checks that a successful handler sent all N bytes.
func (out *HostOut) finish(r Result) (Result, error) {
	if out.err != nil {
		return r, out.err
	}
	if r == Success && out.sent != out.N {
		return ErrUnknown, nil
	}
	return r, nil
}

// readImage reads a whole streamed module image. One over MaxImage is
// drained and refused.
func (c *Call) readImage(n uint64) ([]byte, Result, error) {
	in := c.hostIn(n)
	if n > MaxImage {
		return nil, ErrInvalidImage, in.drain()
	}
	// Grow with the data: n is the client's claim, not yet bytes received.
	img := make([]byte, 0, min(n, ChunkSize))
	for {
		p, err := in.Next()
		if err == io.EOF {
			return img, Success, nil
		}
		if err != nil {
			return nil, Success, err
		}
		img = append(img, p...)
	}
}
