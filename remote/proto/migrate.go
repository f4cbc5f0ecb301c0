package proto

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strings"
)

// Live migration (docs/design.md). A session moves from one server to
// another of its pool at a synchronous call: the source answers that call
// with Moved, without running it, and sends a MovedTo frame after the
// reply; the client connects to the target, opens with a Resume frame
// instead of a Hello, and sends the call again. Only clients of protocol
// version 2 or later follow a move: a server never moves a version 1
// client's session.
//
// Servers and the operator's CLI talk over control connections, which
// open with a Control frame carrying a control token (package token)
// signed with the pool's secret.

// MinVersion is the oldest protocol version a server admits; version 2
// added following a move.
const MinVersion = 1

// MovesVersion is the first protocol version whose clients follow a move.
const MovesVersion = 2

// Moved is the result a source server answers the held call with: not a
// CUresult, and never returned to the program.
const Moved Result = 0x474d0001

// First frames other than OpHello, and the frame that follows a Moved
// reply. Call numbers stay far below them.
const (
	// OpMoved follows a reply with result Moved: where the session went.
	OpMoved Op = 0xfff0 + iota
	// OpResume opens a connection that resumes a moved session.
	OpResume
	// OpControl opens a control connection (migration requests between
	// servers and from the CLI).
	OpControl
)

// TicketSize is the length of a resume ticket.
const TicketSize = 32

// MaxFirst bounds the payload of any first frame (Hello, Resume,
// Control): what a server reads before it has checked a token.
const MaxFirst = MaxHello + 4 + TicketSize + 4 + 8 + 3*(4+MaxString)

// MovedTo says where a moved session went: the target's address and the
// ticket that resumes it there.
type MovedTo struct {
	Addr   string // "host:port", or "unix:" and a socket path
	Ticket []byte
}

// Encode returns the payload.
func (m MovedTo) Encode() []byte {
	var e Encoder
	e.Str(m.Addr)
	e.Bytes(m.Ticket)
	return e.Payload()
}

// DecodeMovedTo reads a MovedTo payload.
func DecodeMovedTo(p []byte) (MovedTo, error) {
	d := NewDecoder(p)
	m := MovedTo{Addr: d.Str(MaxString), Ticket: d.Bytes(TicketSize)}
	if err := d.Finish(); err != nil {
		return MovedTo{}, fmt.Errorf("moved: %w", err)
	}
	if len(m.Ticket) != TicketSize || m.Addr == "" {
		return MovedTo{}, fmt.Errorf("%w: moved: address %q, ticket of %d bytes", ErrMalformed, m.Addr, len(m.Ticket))
	}
	return m, nil
}

// Resume opens a connection that resumes a moved session: the client's
// handshake, with the same token it presented to the source, and the
// ticket.
type Resume struct {
	Hello  Hello
	Ticket []byte
}

// Encode returns the payload.
func (r Resume) Encode() []byte {
	var e Encoder
	e.Bytes(r.Hello.Encode())
	e.Bytes(r.Ticket)
	return e.Payload()
}

// DecodeResume reads a Resume payload.
func DecodeResume(p []byte) (Resume, error) {
	d := NewDecoder(p)
	hb, t := d.Bytes(MaxHello), d.Bytes(TicketSize)
	if err := d.Finish(); err != nil {
		return Resume{}, fmt.Errorf("resume: %w", err)
	}
	h, err := DecodeHello(hb)
	if err != nil {
		return Resume{}, fmt.Errorf("resume: %w", err)
	}
	if len(t) != TicketSize {
		return Resume{}, fmt.Errorf("%w: resume ticket of %d bytes, want %d", ErrMalformed, len(t), TicketSize)
	}
	return Resume{Hello: h, Ticket: t}, nil
}

// ControlKind says what a control connection asks for.
type ControlKind uint32

const (
	// ControlMigrate asks a server to move sessions (Session, or every
	// session of Tenant) to the server at Target. From the CLI.
	ControlMigrate ControlKind = 1 + iota
	// ControlRestore offers a server a session's snapshot: data frames
	// follow (migrate.go in package server). From the source server.
	ControlRestore
)

// Control opens a control connection.
type Control struct {
	Version uint16
	Token   string // a control token (token.MintControl)
	Kind    ControlKind
	Session uint64 // ControlMigrate: the session (its connection number), or 0
	Tenant  string // ControlMigrate: every session of this token ID, if Session is 0
	Target  string // ControlMigrate: the target's address
	// Client is, for ControlRestore, the handshake of the session's
	// client (its version, token and identity, as the snapshot carries
	// them): the target checks, counts and admits it as it would the
	// client's own before it takes the snapshot.
	Client Hello
}

// Encode returns the payload.
func (c Control) Encode() []byte {
	var e Encoder
	e.U32(Magic)
	e.U32(uint32(c.Version))
	e.Str(c.Token)
	e.U32(uint32(c.Kind))
	e.U64(c.Session)
	e.Str(c.Tenant)
	e.Str(c.Target)
	if c.Kind == ControlRestore {
		e.Bytes(c.Client.Encode())
	}
	return e.Payload()
}

// DecodeControl reads a Control payload.
func DecodeControl(p []byte) (Control, error) {
	d := NewDecoder(p)
	if m := d.U32(); d.err == nil && m != Magic {
		return Control{}, fmt.Errorf("%w: control magic %#x, want %#x", ErrMalformed, m, Magic)
	}
	v := d.U32()
	c := Control{Token: d.Str(MaxString), Kind: ControlKind(d.U32()), Session: d.U64(), Tenant: d.Str(MaxString), Target: d.Str(MaxString)}
	var client []byte
	if c.Kind == ControlRestore {
		client = d.Bytes(MaxHello)
	}
	if err := d.Finish(); err != nil {
		return Control{}, fmt.Errorf("control: %w", err)
	}
	if v > 0xffff {
		return Control{}, fmt.Errorf("%w: control version %d", ErrMalformed, v)
	}
	c.Version = uint16(v)
	switch c.Kind {
	case ControlMigrate:
		if c.Target == "" || (c.Session == 0) == (c.Tenant == "") {
			return Control{}, fmt.Errorf("%w: a migration names a target and a session or a tenant", ErrMalformed)
		}
	case ControlRestore:
		h, err := DecodeHello(client)
		if err != nil {
			return Control{}, fmt.Errorf("control: the restored session's client: %w", err)
		}
		c.Client = h
	default:
		return Control{}, fmt.Errorf("%w: control kind %d", ErrMalformed, c.Kind)
	}
	return c, nil
}

// ControlReply answers a control request: Success, or why not (with a
// message); for a migration, the sessions moved; for a restore, the
// ticket.
type ControlReply struct {
	Result  Result
	Message string
	Moved   []uint64
	Ticket  []byte
}

// maxMovedList bounds the sessions one reply lists.
const maxMovedList = 1 << 16

// Encode returns the payload.
func (r ControlReply) Encode() []byte {
	var e Encoder
	e.I32(int32(r.Result))
	e.Str(r.Message)
	e.U32(uint32(len(r.Moved)))
	for _, id := range r.Moved {
		e.U64(id)
	}
	e.Bytes(r.Ticket)
	return e.Payload()
}

// DecodeControlReply reads a ControlReply payload.
func DecodeControlReply(p []byte) (ControlReply, error) {
	d := NewDecoder(p)
	r := ControlReply{Result: Result(d.I32()), Message: d.Str(MaxString)}
	n := d.U32()
	if n > maxMovedList || int(n)*8 > len(d.b) {
		return ControlReply{}, fmt.Errorf("%w: control reply lists %d sessions", ErrMalformed, n)
	}
	for range n {
		r.Moved = append(r.Moved, d.U64())
	}
	r.Ticket = d.Bytes(TicketSize)
	if err := d.Finish(); err != nil {
		return ControlReply{}, fmt.Errorf("control reply: %w", err)
	}
	return r, nil
}

// SplitAddr splits a server address into a network and an address:
// "unix:PATH" or a path starting with "/" is a unix socket, anything else
// TCP.
func SplitAddr(addr string) (network, address string) {
	if p, ok := strings.CutPrefix(addr, "unix:"); ok {
		return "unix", p
	}
	if strings.HasPrefix(addr, "/") {
		return "unix", addr
	}
	return "tcp", addr
}

// DialAddr connects to a server address (SplitAddr's forms). A TCP
// connection runs TLS first when config is set, checking the name in
// config.ServerName or else the address's host; a unix socket stays plain.
// ctx bounds the connection and the TLS handshake.
func DialAddr(ctx context.Context, addr string, config *tls.Config) (net.Conn, error) {
	network, address := SplitAddr(addr)
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	if config == nil || network != "tcp" {
		return conn, nil
	}
	c := config.Clone()
	if c.ServerName == "" {
		c.ServerName, _, _ = net.SplitHostPort(address)
	}
	tc := tls.Client(conn, c)
	if err := tc.HandshakeContext(ctx); err != nil {
		conn.Close()
		return nil, fmt.Errorf("TLS with %s: %w", addr, err)
	}
	return tc, nil
}
