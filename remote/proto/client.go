package proto

import (
	"bufio"
	"context"
	"crypto/tls"
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
	// TLS, if set before the first call, is how the client follows its
	// session to a TCP address over TLS when it moves (DialAddr);
	// otherwise it connects there in clear.
	TLS *tls.Config

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
	// hello is the handshake, sent again when the session moves.
	hello Hello
	moves int

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
		timeout:  timeout,
		cache:    map[string][]byte{},
		objCache: map[string][]byte{},
	}
	if hello.Version == 0 {
		hello.Version = Version
	}
	c.hello = hello
	if err := c.shake(conn, OpHello, hello.Encode()); err != nil {
		return nil, err
	}
	return c, nil
}

// shake opens conn with a first frame (a Hello or a Resume) and reads the
// server's Welcome.
func (c *Client) shake(conn net.Conn, op Op, first []byte) error {
	c.conn, c.bw, c.br = conn, bufio.NewWriterSize(conn, 64<<10), bufio.NewReaderSize(conn, 64<<10)
	c.buf = AppendFrame(c.buf[:0], Header{Op: op}, first)
	if err := c.send(c.buf); err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	if err := c.bw.Flush(); err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	h, p, err := c.read()
	if err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	if h.Op != OpHello || h.Flags&FlagReply == 0 {
		return fmt.Errorf("%w: handshake answered with op %d flags %#x", ErrMalformed, h.Op, h.Flags)
	}
	if c.Welcome, err = DecodeWelcome(p); err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	if c.Welcome.Result != Success {
		return fmt.Errorf("%w: %v: %s", ErrRefused, c.Welcome.Result, c.Welcome.Message)
	}
	return nil
}

// Moves reports how many times the client's session moved to another
// server.
func (c *Client) Moves() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.moves
}

// follow reads where the session moved after a Moved reply, connects
// there and resumes it.
func (c *Client) follow() error {
	h, p, err := c.read()
	if err != nil {
		return fmt.Errorf("reading where the session moved: %w", err)
	}
	if h.Op != OpMoved || h.Flags != FlagReply || h.Seq != c.seq {
		return fmt.Errorf("%w: op %d flags %#x after a Moved reply", ErrMalformed, h.Op, h.Flags)
	}
	to, err := DecodeMovedTo(p)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), max(c.timeout, 10*time.Second))
	defer cancel()
	conn, err := DialAddr(ctx, to.Addr, c.TLS)
	if err != nil {
		return fmt.Errorf("following the session to %s: %w", to.Addr, err)
	}
	c.conn.Close()
	if err := c.shake(conn, OpResume, Resume{Hello: c.hello, Ticket: to.Ticket}.Encode()); err != nil {
		conn.Close()
		return fmt.Errorf("resuming the session at %s: %w", to.Addr, err)
	}
	c.moves++
	return nil
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
			if r == Moved {
				// The call did not run: send it again where the session is.
				if err := c.follow(); err != nil {
					return nil, 0, err
				}
				return c.do(req)
			}
			return d, r, nil
		default:
			return nil, 0, fmt.Errorf("%w: flags %#x waiting for a reply", ErrMalformed, rh.Flags)
		}
	}
}
