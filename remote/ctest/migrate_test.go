package ctest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpumux/gpumux/internal/syncbuf"
	"github.com/gpumux/gpumux/remote/proto"
	"github.com/gpumux/gpumux/remote/server"
)

// migrating is the C program migrate running against a session that the
// test moves: its stdout is read all the while (a full pipe would stop
// the program, and with it the move, which waits for its next call).
type migrating struct {
	*background
	out   syncbuf.Buffer // stdout past READY, but for the ROUND lines
	round atomic.Int64   // the last ROUND line's number, -1 before one
	done  chan struct{}  // closed at the end of stdout
}

func startMigrating(t *testing.T, addr, tok string) *migrating {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	// GPUMUX_REMOTE_DEBUG logs each move followed, and any call that
	// fails (there must be none).
	b, _ := program{name: "migrate", addr: addr, token: tok, env: []string{"GPUMUX_REMOTE_DEBUG=1"}}.start(ctx, t, "READY")
	m := &migrating{background: b, done: make(chan struct{})}
	m.round.Store(-1)
	go func() {
		defer close(m.done)
		for b.sc.Scan() {
			line := b.sc.Text()
			if n, ok := strings.CutPrefix(line, "ROUND "); ok {
				if v, err := strconv.Atoi(n); err == nil {
					m.round.Store(int64(v))
				}
				continue // thousands of them
			}
			m.out.Write([]byte(line + "\n"))
		}
	}()
	return m
}

// rounds waits until the program has finished n more rounds (each checks
// everything) than when it was called.
func (m *migrating) rounds(t *testing.T, n int64) {
	t.Helper()
	want := m.round.Load() + n
	deadline := time.Now().Add(30 * time.Second)
	for m.round.Load() < want {
		select {
		case <-m.done:
			t.Fatalf("migrate ended early:\n%s\nstderr:\n%s", m.out.String(), m.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("migrate is stuck at round %d:\n%s\nstderr:\n%s", m.round.Load(), m.out.String(), m.stderr.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// finish ends the program's rounds; it must exit cleanly having checked
// every one, and have followed moves moves.
func (m *migrating) finish(t *testing.T, moves int) {
	t.Helper()
	m.stdin.Write([]byte("stop\n"))
	m.stdin.Close()
	<-m.done
	err := m.cmd.Wait()
	out, stderr := m.out.String(), m.stderr.String()
	if err != nil || !strings.Contains(out, "migrate: ok") {
		t.Fatalf("migrate: %v\n%s\nstderr:\n%s", err, out, stderr)
	}
	if got := strings.Count(stderr, "gpumux: debug: the session moved from "); got != moves {
		t.Errorf("the program followed %d moves, want %d:\n%s", got, moves, stderr)
	}
	// Nothing else: a failing call or a lost connection would be logged
	// (but for the launches' probing of a kernel's parameters, which ends
	// with CUDA_ERROR_INVALID_VALUE past the last).
	if rest := strings.TrimSpace(strings.Join(withoutPrefixes(strings.Split(stderr, "\n"),
		"gpumux: debug: the session moved from ", "gpumux: debug: cuFuncGetParamInfo returned 1"), "\n")); rest != "" {
		t.Errorf("unexpected messages:\n%s", rest)
	}
	if m.round.Load() < 1 {
		t.Errorf("only %d rounds", m.round.Load()+1)
	}
}

// withoutPrefixes returns the lines that start with none of prefixes.
func withoutPrefixes(lines []string, prefixes ...string) []string {
	var out []string
next:
	for _, l := range lines {
		for _, p := range prefixes {
			if strings.HasPrefix(l, p) {
				continue next
			}
		}
		out = append(out, l)
	}
	return out
}

// migrationPair is two servers of one pool (one secret), on fake GPUs of
// their own, that move sessions.
func migrationPair(t *testing.T, opts0, opts1 []server.Option) [2]*env {
	return [2]*env{
		startServer(t, append([]server.Option{server.WithMigration()}, opts0...)...),
		startServer(t, append([]server.Option{server.WithMigration()}, opts1...)...),
	}
}

// eventually waits until cond holds, failing the test with what() if it
// does not within d.
func eventually(t *testing.T, d time.Duration, cond func() bool, what func() string) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal(what())
		}
	}
}

// jobs returns how many sessions of the job e serves.
func jobs(e *env) int { return len(e.srv.Sessions()["job"]) }

// fakeEmpty waits until e's fake GPU holds nothing of a session.
func fakeEmpty(t *testing.T, e *env) {
	t.Helper()
	eventually(t, 5*time.Second, func() bool {
		st := e.fake.Stats()
		return st.Contexts == 0 && st.Reservations == 0 && st.Physical == 0 && st.Modules == 0
	}, func() string { return fmt.Sprintf("the server the session left still holds %+v", e.fake.Stats()) })
}

// movedTo waits until the job's session is on to and not on from: the
// program has followed the move (its held call has been sent again).
func movedTo(t *testing.T, from, to *env) {
	t.Helper()
	eventually(t, 10*time.Second, func() bool { return jobs(from) == 0 && jobs(to) == 1 }, func() string {
		return fmt.Sprintf("the session is on the source: %v, on the target: %v", from.srv.Sessions(), to.srv.Sessions())
	})
}

// move moves the job's session from one server to the other while the
// program runs, over the address the target listens on.
func move(t *testing.T, from *env, target string) error {
	t.Helper()
	ids := from.srv.Sessions()["job"]
	if len(ids) != 1 {
		t.Fatalf("the job has %d sessions on the source, want 1", len(ids))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return from.srv.Move(ctx, ids[0], target)
}

// TestMigrateInterposer moves a running C program's session back and
// forth between two servers, over TCP and unix sockets, starting on
// either: after each move the program checks every byte it wrote and
// every handle it holds, and it never sees an error.
func TestMigrateInterposer(t *testing.T) {
	for _, start := range []string{"tcp", "unix"} {
		t.Run(start, func(t *testing.T) {
			envs := migrationPair(t, nil, nil)
			addr := envs[0].tcp
			if start == "unix" {
				addr = envs[0].unix
			}
			m := startMigrating(t, addr, mint(t, "job", 0))
			m.rounds(t, 2)
			const moves = 6
			for i := range moves {
				from, to := envs[i%2], envs[(i+1)%2]
				target := to.tcp
				if (i/2)%2 == 1 {
					target = to.unix
				}
				if err := move(t, from, target); err != nil {
					t.Fatalf("move %d to %s: %v\nprogram:\n%s\nstderr:\n%s", i, target, err, m.out.String(), m.stderr.String())
				}
				movedTo(t, from, to)
				fakeEmpty(t, from)
				m.rounds(t, 2)
			}
			m.finish(t, moves)
		})
	}
}

// TestMigrateInterposerRefused: a move the target refuses (a failure
// injected in its restore) leaves the program running on the source,
// seeing nothing; the next move goes through.
func TestMigrateInterposerRefused(t *testing.T) {
	var failing atomic.Bool
	failing.Store(true)
	hook := server.WithMigrationHook(func(step string) error {
		if step == server.StepRestore && failing.Load() {
			return errors.New("injected")
		}
		return nil
	})
	envs := migrationPair(t, nil, []server.Option{hook})
	m := startMigrating(t, envs[0].tcp, mint(t, "job", 0))
	m.rounds(t, 2)
	err := move(t, envs[0], envs[1].tcp)
	if !errors.Is(err, server.ErrMigration) {
		t.Fatalf("a move the target refuses: %v", err)
	}
	if jobs(envs[0]) != 1 || jobs(envs[1]) != 0 {
		t.Fatal("the session left the source")
	}
	fakeEmpty(t, envs[1])
	m.rounds(t, 2)
	failing.Store(false)
	if err := move(t, envs[0], envs[1].tcp); err != nil {
		t.Fatalf("the next move: %v", err)
	}
	movedTo(t, envs[0], envs[1])
	m.rounds(t, 2)
	m.finish(t, 1)
}

// hostCopy reads a cuMemcpyHtoD_v2 call's data frames (after its call
// frame, payload p) and returns the bytes.
func hostCopy(br *bufio.Reader, p []byte) ([]byte, error) {
	if len(p) != 24 {
		return nil, fmt.Errorf("a cuMemcpyHtoD_v2 payload of %d bytes", len(p))
	}
	n := binary.LittleEndian.Uint64(p[8:])
	var got []byte
	for uint64(len(got)) < n {
		h, d, err := proto.ReadFrame(br, nil)
		if err != nil {
			return nil, err
		}
		if h.Flags != proto.FlagData || h.Op != proto.OpMemcpyHtoDV2 {
			return nil, fmt.Errorf("op %d flags %#x among the data", h.Op, h.Flags)
		}
		got = append(got, d...)
	}
	return got, nil
}

// movingStub is a server that admits a client, answers its first call (a
// host-to-device copy) Moved, and then writes after the reply what
// movedTo returns (a MovedTo frame, or something else). It returns its
// address and the seq of the call it moved.
func movingStub(t *testing.T, movedTo func(h proto.Header) []byte) (string, <-chan uint32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln.Addr().String(), serveMoving(t, ln, movedTo)
}

// movingStubUnix is movingStub on a unix socket (never TLS).
func movingStubUnix(t *testing.T, movedTo func(h proto.Header) []byte) string {
	t.Helper()
	path := filepath.Join(shortTempDir(t), "src.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	serveMoving(t, ln, movedTo)
	return "unix:" + path
}

func serveMoving(t *testing.T, ln net.Listener, movedTo func(h proto.Header) []byte) <-chan uint32 {
	seqs := make(chan uint32, 1)
	serveOne(t, ln, func(c net.Conn, br *bufio.Reader, h proto.Header, p []byte) {
		if hello, err := proto.DecodeHello(p); err != nil || h.Op != proto.OpHello || hello.Version != proto.Version {
			t.Errorf("the interposer's handshake: op %d, %+v, %v; want protocol %d", h.Op, hello, err, proto.Version)
		}
		welcome(c)
		h, p, err := proto.ReadFrame(br, nil)
		if err != nil {
			return
		}
		if _, err := hostCopy(br, p); err != nil {
			t.Errorf("the moved call: %v", err)
			return
		}
		seqs <- h.Seq
		c.Write(reply(h, proto.Moved))
		c.Write(movedTo(h))
		io.Copy(io.Discard, br)
	})
	return seqs
}

// TestMigrateInterposerResend: a held call with host data is sent again,
// every byte of it, where the session went, after a Resume with the
// client's token and the ticket; the calls after it go there too.
func TestMigrateInterposerResend(t *testing.T) {
	ticket := bytes.Repeat([]byte{0x5a}, proto.TicketSize)
	tok := mint(t, "job", 0)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var resent []byte
	var resentSeq uint32
	var mu sync.Mutex // the target's goroutine writes them
	serveOne(t, ln, func(c net.Conn, br *bufio.Reader, h proto.Header, p []byte) {
		res, err := proto.DecodeResume(p)
		if h.Op != proto.OpResume || err != nil || !bytes.Equal(res.Ticket, ticket) || res.Hello.Token != tok || res.Hello.Version != proto.Version {
			t.Errorf("the target got op %d: %+v, %v", h.Op, res, err)
			return
		}
		welcome(c)
		for {
			h, p, err := proto.ReadFrame(br, nil)
			if err != nil {
				return
			}
			if h.Op != proto.OpMemcpyHtoDV2 {
				c.Write(reply(h, proto.Success, 12080))
				continue
			}
			got, err := hostCopy(br, p)
			if err != nil {
				t.Errorf("the call sent again: %v", err)
				return
			}
			mu.Lock()
			resent, resentSeq = got, h.Seq
			mu.Unlock()
			c.Write(reply(h, proto.Success))
		}
	})
	target := ln.Addr().String()
	src, seqs := movingStub(t, func(h proto.Header) []byte {
		return proto.AppendFrame(nil, proto.Header{Op: proto.OpMoved, Flags: proto.FlagReply, Seq: h.Seq},
			proto.MovedTo{Addr: target, Ticket: ticket}.Encode())
	})
	_, stderr := program{name: "migrate", args: []string{"once"}, addr: src, token: tok, env: []string{"GPUMUX_REMOTE_DEBUG=1"}}.run(t)
	mu.Lock()
	defer mu.Unlock()
	n := (1 << 20) + 5
	want := make([]byte, n)
	for i := range want {
		want[i] = byte(i*13 + 1)
	}
	if !bytes.Equal(resent, want) {
		t.Errorf("the target got %d bytes, not the %d the program copied", len(resent), n)
	}
	if seq := <-seqs; resentSeq <= seq {
		t.Errorf("the call went again as seq %d, after seq %d", resentSeq, seq)
	}
	if want := "gpumux: debug: the session moved from " + src + " to " + target + " (move 1)"; !strings.Contains(stderr, want) {
		t.Errorf("stderr does not say %q:\n%s", want, stderr)
	}
}

// TestMigrateInterposerTLS: with GPUMUX_REMOTE_TLS_CA set, the interposer
// follows a move to a TCP target over TLS, checking its certificate, as
// it would connect there first (the source here is a unix socket, which
// never uses TLS). The TLS server has no session for the ticket: its
// refusal, read over TLS, is the proof that the Resume went through.
func TestMigrateInterposerTLS(t *testing.T) {
	e := startTLS(t, "")
	src := movingStubUnix(t, func(h proto.Header) []byte {
		return proto.AppendFrame(nil, proto.Header{Op: proto.OpMoved, Flags: proto.FlagReply, Seq: h.Seq},
			proto.MovedTo{Addr: e.tcp, Ticket: make([]byte, proto.TicketSize)}.Encode())
	})
	_, stderr := program{name: "migrate", args: []string{"lost"}, addr: src, token: mint(t, "job", 0), env: caEnv(e.ca)}.run(t)
	want := "gpumux: lost the connection to gpumux-remoted at " + src + ": the session moved to " + e.tcp +
		", but resuming it there failed: the server refused the connection (CUDA_ERROR_NOT_PERMITTED): no migrated session for this ticket and token"
	if strings.Count(stderr, want) != 1 {
		t.Errorf("stderr does not say %q once:\n%s", want, stderr)
	}
}

// TestMigrateInterposerLost: a move the interposer cannot follow (a
// malformed MovedTo, a target it cannot reach or that refuses it) loses
// the connection: the held call and every later one fail with
// CUDA_ERROR_UNKNOWN, and the log says why, naming the target.
func TestMigrateInterposerLost(t *testing.T) {
	ticket := bytes.Repeat([]byte{1}, proto.TicketSize)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := closed.Addr().String()
	closed.Close()
	refusing := startServer(t, server.WithMigration())
	movedTo := func(addr string, ticket []byte) func(h proto.Header) []byte {
		return func(h proto.Header) []byte {
			return proto.AppendFrame(nil, proto.Header{Op: proto.OpMoved, Flags: proto.FlagReply, Seq: h.Seq},
				proto.MovedTo{Addr: addr, Ticket: ticket}.Encode())
		}
	}
	for _, tc := range []struct {
		name  string
		frame func(h proto.Header) []byte
		why   string
	}{
		{"unreachable", movedTo(gone, ticket), "the session moved to " + gone + ", but connecting there failed: connect: Connection refused"},
		{"refused", movedTo(refusing.tcp, ticket), "the session moved to " + refusing.tcp +
			", but resuming it there failed: the server refused the connection (CUDA_ERROR_NOT_PERMITTED): no migrated session for this ticket and token"},
		{"unix", movedTo("/nonexistent/gm.sock", ticket), "the session moved to unix:/nonexistent/gm.sock, but connecting there failed: connect: No such file or directory"},
		{"ticket", movedTo(gone, ticket[1:]), "protocol error: a malformed MovedTo (54 bytes)"},
		{"address", movedTo("", ticket), "protocol error: a malformed MovedTo (40 bytes)"},
		{"long", movedTo(strings.Repeat("h", 300)+":1", ticket), "protocol error: the session moved to an address of 302 bytes (at most 255, no NUL)"},
		{"op", func(h proto.Header) []byte {
			return proto.AppendFrame(nil, proto.Header{Op: h.Op, Flags: proto.FlagReply, Seq: h.Seq}, proto.MovedTo{Addr: gone, Ticket: ticket}.Encode())
		}, "protocol error: op 43 flags 0x1 seq 1 after a Moved reply to seq 1"},
		{"none", func(proto.Header) []byte { return nil }, "reading where the session moved: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, _ := movingStub(t, tc.frame)
			var stderr string
			if tc.name == "none" {
				// The stub closes the connection once the program has
				// given up waiting.
				_, stderr = program{name: "migrate", args: []string{"lost"}, addr: src, token: mint(t, "job", 0), timeout: "1"}.run(t)
			} else {
				_, stderr = program{name: "migrate", args: []string{"lost"}, addr: src, token: mint(t, "job", 0)}.run(t)
			}
			want := "gpumux: lost the connection to gpumux-remoted at " + src + ": " + tc.why
			if strings.Count(stderr, want) != 1 {
				t.Errorf("stderr does not say %q once:\n%s", want, stderr)
			}
		})
	}
}
