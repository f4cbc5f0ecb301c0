package proto

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// Client is the Go side of the protocol's client: what the C interposer
// does, for tests, benchmarks and tools. Its per-call methods are generated
// (zz_calls.go). Safe for concurrent use; calls go out one at a time.
type Client struct {
	mu      sync.Mutex
	conn    net.Conn
	bw      *bufio.Writer
	br      *bufio.Reader
	seq     uint32
	buf     []byte
	timeout time.Duration
	cache   map[string][]byte
	// objCache holds the cached replies about modules and functions
	// (Request.CacheObject), which an Uncache call forgets.
	objCache map[string][]byte
	broken   error

	// Welcome is the server's answer to the handshake.
	Welcome Welcome
}

// Request is one call as the generated methods build it.
type Request struct {
	Op    Op
	Ctx   Handle
	Async bool
	Cache bool
	// CacheObject: the cached reply is about a module or function the
	// call takes, forgotten by an Uncache call's success.
	CacheObject bool
	Uncache     bool
	Payload     []byte
	In          []byte // streamed after the call frame
	Out         []byte // filled from the data frames before the reply
}

// ErrRefused means the server refused the handshake.
var ErrRefused = errors.New("refused by the server")

// Dial connects to a server ("tcp" host:port or "unix" path) and shakes
// hands. timeout bounds every wait for the server (0: none).
func Dial(ctx context.Context, network, addr string, hello Hello, timeout time.Duration) (*Client, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	c, err := NewClient(conn, hello, timeout)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return c, nil
}

// NewClient shakes hands over conn.
func NewClient(conn net.Conn, hello Hello, timeout time.Duration) (*Client, error) {
	c := &Client{
		conn:     conn,
		bw:       bufio.NewWriterSize(conn, 64<<10),
		br:       bufio.NewReaderSize(conn, 64<<10),
		timeout:  timeout,
		cache:    map[string][]byte{},
		objCache: map[string][]byte{},
	}
	if hello.Version == 0 {
		hello.Version = Version
	}
	c.buf = AppendFrame(c.buf[:0], Header{Op: OpHello}, hello.Encode())
	if err := c.send(c.buf); err != nil {
		return nil, fmt.Errorf("handshake: %w", err)
	}
	if err := c.bw.Flush(); err != nil {
		return nil, fmt.Errorf("handshake: %w", err)
	}
	h, p, err := c.read()
	if err != nil {
		return nil, fmt.Errorf("handshake: %w", err)
	}
	if h.Op != OpHello || h.Flags&FlagReply == 0 {
		return nil, fmt.Errorf("%w: handshake answered with op %d flags %#x", ErrMalformed, h.Op, h.Flags)
	}
	if c.Welcome, err = DecodeWelcome(p); err != nil {
		return nil, fmt.Errorf("handshake: %w", err)
	}
	if c.Welcome.Result != Success {
		return nil, fmt.Errorf("%w: %v: %s", ErrRefused, c.Welcome.Result, c.Welcome.Message)
	}
	return c, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

func (c *Client) send(p []byte) error {
	if c.timeout > 0 {
		c.conn.SetWriteDeadline(time.Now().Add(c.timeout))
	}
	_, err := c.bw.Write(p)
	return err
}

func (c *Client) read() (Header, []byte, error) {
	if c.timeout > 0 {
		c.conn.SetReadDeadline(time.Now().Add(c.timeout))
	}
	h, p, err := ReadFrame(c.br, c.buf)
	if err == nil {
		c.buf = p[:0]
	}
	return h, p, err
}

// Do sends a request and, unless it is async, waits for its reply. A
// transport error breaks the client: later calls fail at once.
func (c *Client) Do(req Request) (*Decoder, Result, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.broken != nil {
		return nil, ErrUnknown, c.broken
	}
	key := ""
	cache := c.cache
	if req.CacheObject {
		cache = c.objCache
	}
	if req.Cache {
		key = string(rune(req.Op)) + string(req.Payload)
		if rep, ok := cache[key]; ok {
			return NewDecoder(rep), Success, nil
		}
	}
	d, r, err := c.do(req)
	if err != nil {
		c.broken = err
		c.conn.Close()
		return nil, ErrUnknown, err
	}
	if req.Cache && r == Success {
		cache[key] = append([]byte(nil), d.b...)
	}
	if req.Uncache && r == Success {
		clear(c.objCache)
	}
	return d, r, nil
}

func (c *Client) do(req Request) (*Decoder, Result, error) {
	c.seq++
	h := Header{Op: req.Op, Seq: c.seq, Ctx: req.Ctx}
	if req.Async {
		h.Flags |= FlagAsync
	}
	if err := c.send(AppendFrame(nil, h, req.Payload)); err != nil {
		return nil, 0, err
	}
	for in := req.In; len(in) > 0; {
		n := min(len(in), ChunkSize)
		if err := c.send(AppendFrame(nil, Header{Op: req.Op, Flags: FlagData, Seq: c.seq}, in[:n])); err != nil {
			return nil, 0, err
		}
		in = in[n:]
	}
	if err := c.bw.Flush(); err != nil {
		return nil, 0, err
	}
	if req.Async {
		return nil, Success, nil
	}
	got := 0
	for {
		rh, p, err := c.read()
		if err != nil {
			return nil, 0, err
		}
		if rh.Seq != c.seq || rh.Op != req.Op {
			return nil, 0, fmt.Errorf("%w: got op %d seq %d waiting for op %d seq %d", ErrMalformed, rh.Op, rh.Seq, req.Op, c.seq)
		}
		switch {
		case rh.Flags&FlagData != 0:
			if len(p) > len(req.Out)-got {
				return nil, 0, fmt.Errorf("%w: %d bytes of data past the %d asked for", ErrMalformed, got+len(p), len(req.Out))
			}
			got += copy(req.Out[got:], p)
		case rh.Flags&FlagReply != 0:
			d := NewDecoder(append([]byte(nil), p...))
			r := Result(d.I32())
			if d.err != nil {
				return nil, 0, d.err
			}
			return d, r, nil
		default:
			return nil, 0, fmt.Errorf("%w: flags %#x waiting for a reply", ErrMalformed, rh.Flags)
		}
	}
}
