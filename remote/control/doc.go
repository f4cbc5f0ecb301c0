// Package control is the client side of control connections: what
// gpumux remote migrate and a server moving a session to another open
// (proto.Control). Dial mints the control token from the pool's secret,
// connects and sends the request; Conn reads the server's replies and
// sends data frames. The server side, and what the data frames carry,
// are package server's.
//
// It is a package of its own so that the CLI, which only asks a server to
// move sessions, does not link the server.
package control
