package control

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/gpumux/gpumux/remote/proto"
	"github.com/gpumux/gpumux/remote/token"
)

// tokenLife is how long the control token Dial mints is valid.
const tokenLife = time.Minute

// Conn is a control connection a server or the CLI opened.
type Conn struct {
	conn net.Conn
	bw   *bufio.Writer
	br   *bufio.Reader
	buf  []byte
}

// Option configures Dial.
type Option func(*options)

type options struct{ tls *tls.Config }

// WithTLS reaches a TCP address over TLS with config (its ServerName, if
// empty, is the address's host), as a pool whose servers serve TLS needs;
// unix sockets stay plain.
func WithTLS(config *tls.Config) Option { return func(o *options) { o.tls = config } }

// Dial opens a control connection to the server at addr ("host:port" or
// "unix:" and a path) with a control token signed by secret, and sends
// req. A deadline of ctx bounds the connection's whole life.
func Dial(ctx context.Context, addr string, secret []byte, req proto.Control, opts ...Option) (*Conn, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	tok, err := token.MintControl(secret, time.Now().Add(tokenLife))
	if err != nil {
		return nil, err
	}
	conn, err := proto.DialAddr(ctx, addr, o.tls)
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", addr, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	c := &Conn{conn: conn, bw: bufio.NewWriterSize(conn, 64<<10), br: bufio.NewReaderSize(conn, 64<<10)}
	req.Version, req.Token = proto.Version, tok
	if err := c.send(proto.Header{Op: proto.OpControl}, req.Encode()); err != nil {
		conn.Close()
		return nil, fmt.Errorf("%s: %w", addr, err)
	}
	return c, nil
}

// SendData sends p as one control data frame (at most proto.ChunkSize
// bytes).
func (c *Conn) SendData(p []byte) error {
	return c.send(proto.Header{Op: proto.OpControl, Flags: proto.FlagData}, p)
}

func (c *Conn) send(h proto.Header, p []byte) error {
	c.buf = proto.AppendFrame(c.buf[:0], h, p)
	if _, err := c.bw.Write(c.buf); err != nil {
		return err
	}
	return c.bw.Flush()
}

// Reply reads the server's next answer.
func (c *Conn) Reply() (proto.ControlReply, error) { return ReadReply(c.br) }

// ReadReply reads a control reply frame from r.
func ReadReply(r *bufio.Reader) (proto.ControlReply, error) {
	h, p, err := proto.ReadFrame(r, nil)
	if err != nil {
		return proto.ControlReply{}, err
	}
	if h.Op != proto.OpControl || h.Flags != proto.FlagReply {
		return proto.ControlReply{}, fmt.Errorf("%w: op %d flags %#x where a control reply was expected", proto.ErrMalformed, h.Op, h.Flags)
	}
	return proto.DecodeControlReply(p)
}

// Close closes the connection.
func (c *Conn) Close() error { return c.conn.Close() }
