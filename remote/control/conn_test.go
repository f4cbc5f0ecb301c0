package control_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumux/gpumux/remote/control"
	"github.com/gpumux/gpumux/remote/proto"
	"github.com/gpumux/gpumux/remote/token"
)

var secret = []byte("a-pool-secret-of-thirty-two-bytes!")

// serveOnce listens on a unix socket, hands the first connection to
// serve, and returns the address to dial.
func serveOnce(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		conn, err := l.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		serve(conn)
	}()
	t.Cleanup(func() { l.Close(); <-done })
	return "unix:" + path
}

func dial(t *testing.T, addr string, req proto.Control) *control.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := control.Dial(ctx, addr, secret, req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestDial: the request goes out first, with the protocol version and a
// control token the pool's secret signed; data frames follow it.
func TestDial(t *testing.T) {
	type got struct {
		req  proto.Control
		data []byte
		err  error
	}
	gots := make(chan got, 1)
	addr := serveOnce(t, func(conn net.Conn) {
		var g got
		defer func() { gots <- g }()
		br := bufio.NewReader(conn)
		h, p, err := proto.ReadFrame(br, nil)
		if err == nil && (h.Op != proto.OpControl || h.Flags != 0) {
			err = errors.New("the first frame is not a control request")
		}
		if err == nil {
			g.req, err = proto.DecodeControl(p)
		}
		if err == nil {
			err = token.CheckControl(secret, g.req.Token, time.Now())
		}
		if err == nil {
			h, g.data, err = proto.ReadFrame(br, nil)
			if err == nil && (h.Op != proto.OpControl || h.Flags != proto.FlagData) {
				err = errors.New("the second frame is not a data frame")
			}
		}
		g.err = err
	})
	want := proto.Control{Kind: proto.ControlMigrate, Tenant: "job", Target: "unix:/elsewhere"}
	c := dial(t, addr, want)
	if err := c.SendData([]byte("snapshot")); err != nil {
		t.Fatal(err)
	}
	g := <-gots
	if g.err != nil {
		t.Fatal(g.err)
	}
	if g.req.Version != proto.Version || g.req.Kind != want.Kind || g.req.Tenant != want.Tenant || g.req.Target != want.Target {
		t.Errorf("the server read %+v, want %+v at version %d", g.req, want, proto.Version)
	}
	if string(g.data) != "snapshot" {
		t.Errorf("data frame %q, want %q", g.data, "snapshot")
	}
}

// TestReply: only a control reply frame is an answer.
func TestReply(t *testing.T) {
	ok := proto.ControlReply{Result: proto.ErrNotPermitted, Message: "no", Moved: []uint64{3, 4}}
	tests := []struct {
		name    string
		frame   []byte // nil: the server hangs up
		want    proto.ControlReply
		wantErr error
	}{
		{"reply", proto.AppendFrame(nil, proto.Header{Op: proto.OpControl, Flags: proto.FlagReply}, ok.Encode()), ok, nil},
		{"data frame", proto.AppendFrame(nil, proto.Header{Op: proto.OpControl, Flags: proto.FlagData}, ok.Encode()), proto.ControlReply{}, proto.ErrMalformed},
		{"another op", proto.AppendFrame(nil, proto.Header{Op: proto.OpMoved, Flags: proto.FlagReply}, ok.Encode()), proto.ControlReply{}, proto.ErrMalformed},
		{"bad payload", proto.AppendFrame(nil, proto.Header{Op: proto.OpControl, Flags: proto.FlagReply}, []byte{1, 2}), proto.ControlReply{}, proto.ErrMalformed},
		{"hang-up", nil, proto.ControlReply{}, io.EOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := serveOnce(t, func(conn net.Conn) {
				proto.ReadFrame(conn, nil) // the request
				conn.Write(tt.frame)
			})
			rep, err := dial(t, addr, proto.Control{Kind: proto.ControlRestore}).Reply()
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Reply: %v, want %v", err, tt.wantErr)
			}
			if rep.Result != tt.want.Result || rep.Message != tt.want.Message || !slices.Equal(rep.Moved, tt.want.Moved) {
				t.Errorf("Reply: %+v, want %+v", rep, tt.want)
			}
		})
	}
}

// TestDialFails: a secret too short to sign with, and no server.
func TestDialFails(t *testing.T) {
	ctx := context.Background()
	if _, err := control.Dial(ctx, "unix:/nonexistent", []byte("short"), proto.Control{Kind: proto.ControlRestore}); err == nil || !strings.Contains(err.Error(), "token secret") {
		t.Errorf("a short secret: %v", err)
	}
	addr := "unix:" + filepath.Join(t.TempDir(), "none")
	if _, err := control.Dial(ctx, addr, secret, proto.Control{Kind: proto.ControlRestore}); err == nil || !strings.Contains(err.Error(), "connecting to "+addr) {
		t.Errorf("no server: %v", err)
	}
}
