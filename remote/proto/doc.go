// Package proto is the remote GPU protocol between a client (the C
// interposer, or Client here) and gpumux-remoted: frames, each a Header
// (op, flags, sequence number, the current context) and a bounded payload
// (frame.go); the handshake, Hello answered by a Welcome (hello.go); the
// CUDA driver calls, one op each with its arguments encoded in order,
// generated from calls.def (`go generate` writes zz_calls.go, the Go
// client's calls and the server's Dispatch, and the interposer's C stubs),
// and their results (result.go); bulk data streamed in data frames after a
// call; and live migration's Moved/MovedTo/Resume frames and control
// connections (migrate.go). Version names the protocol a peer speaks; a
// server admits MinVersion to Version.
package proto
