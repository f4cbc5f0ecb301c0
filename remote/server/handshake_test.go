package server_test

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gpumux/gpumux/remote/proto"
	"github.com/gpumux/gpumux/remote/server"
	"github.com/gpumux/gpumux/remote/token"
)

func mint(t *testing.T, secret []byte, c token.Claims) string {
	t.Helper()
	tok, err := token.Mint(secret, c)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestHandshakeRefusals(t *testing.T) {
	e := start(t, envConfig{tcp: true, fake: nil, srv: []server.Option{
		server.WithSecret(testSecret), server.WithHandshakeTimeout(300 * time.Millisecond)}})
	hour := time.Now().Add(time.Hour)
	good := token.Claims{ID: "job", Quota: 1 << 20, Expires: hour}
	helloFrame := func(h proto.Hello) []byte {
		return proto.AppendFrame(nil, proto.Header{Op: proto.OpHello}, h.Encode())
	}
	tests := []struct {
		name string
		send []byte // written raw; nil: nothing
		// wantMsg is in the refusal; "" means the server closes without
		// answering.
		wantMsg string
	}{
		{"no token", helloFrame(proto.Hello{Version: proto.Version}), "no token"},
		{"wrong secret", helloFrame(proto.Hello{Version: proto.Version,
			Token: mint(t, []byte("another-secret-of-the-pool!"), good)}), "bad signature"},
		{"expired", helloFrame(proto.Hello{Version: proto.Version,
			Token: mint(t, testSecret, token.Claims{ID: "job", Expires: time.Now().Add(-time.Minute)})}), "expired"},
		{"garbled token", helloFrame(proto.Hello{Version: proto.Version, Token: "gmx1.AAAA.BBBB"}), "invalid token"},
		{"bad version", helloFrame(proto.Hello{Version: proto.Version + 1, Token: mint(t, testSecret, good)}), "protocol version"},
		{"device out of range", helloFrame(proto.Hello{Version: proto.Version,
			Token: mint(t, testSecret, token.Claims{ID: "job", Device: 3, Expires: hour})}), "GPU 3"},
		{"a call before the handshake", proto.AppendFrame(nil, proto.Header{Op: proto.OpMemAllocV2, Seq: 1}, make([]byte, 8)), "first frame"},
		{"bad magic", proto.AppendFrame(nil, proto.Header{Op: proto.OpHello}, make([]byte, 16)), "magic"},
		{"garbage", []byte("GET / HTTP/1.1\r\nHost: gpumux\r\n\r\n"), ""},
		{"oversized frame", []byte{0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, ""},
		{"silence", nil, ""},
		{"truncated", helloFrame(proto.Hello{Version: proto.Version, Token: mint(t, testSecret, good)})[:30], ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := e.raw(t)
			if tt.send != nil {
				if _, err := c.Write(tt.send); err != nil {
					t.Fatal(err)
				}
			}
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			br := bufio.NewReader(c)
			h, p, err := proto.ReadFrame(br, nil)
			if tt.wantMsg == "" {
				if err == nil {
					t.Fatalf("got a frame (op %d), want the connection closed", h.Op)
				}
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					t.Fatal("the server kept the connection open")
				}
				return
			}
			if err != nil {
				t.Fatalf("reading the answer: %v", err)
			}
			w, err := proto.DecodeWelcome(p)
			if err != nil || h.Op != proto.OpHello || h.Flags != proto.FlagReply {
				t.Fatalf("answer: op %d flags %#x %+v %v", h.Op, h.Flags, w, err)
			}
			if w.Result != proto.ErrNotPermitted || !strings.Contains(w.Message, tt.wantMsg) {
				t.Errorf("answer %v %q, want %v and %q", w.Result, w.Message, proto.ErrNotPermitted, tt.wantMsg)
			}
			if _, err := br.Peek(1); err == nil {
				t.Error("the server sent more after refusing")
			}
			if err := closedByPeer(c); err != nil {
				t.Error(err)
			}
		})
	}

	t.Run("admitted", func(t *testing.T) {
		cl := e.dial(t, mint(t, testSecret, good))
		if cl.Welcome.Result != proto.Success || cl.Welcome.Quota != 1<<20 {
			t.Errorf("welcome %+v, want success with quota 1 MiB", cl.Welcome)
		}
		n, r, err := cl.DeviceGetCount(0)
		ok(t, "cuDeviceGetCount")(r, err)
		if n != 1 {
			t.Errorf("a token client sees %d devices, want 1", n)
		}
	})
	if !strings.Contains(e.logs.String(), "handshake refused") {
		t.Error("refusals are not logged")
	}
}

func TestServeRefusesUnusableOptions(t *testing.T) {
	tests := []struct {
		name string
		opts []server.Option
		want string
	}{
		{"no secret", nil, "no token secret"},
		{"short secret", []server.Option{server.WithSecret([]byte("short"))}, "at least 16"},
		{"no clients", []server.Option{server.WithInsecureNoAuth(), server.WithMaxClients(0)}, "max clients"},
		{"no handshake time", []server.Option{server.WithInsecureNoAuth(), server.WithHandshakeTimeout(0)}, "handshake timeout"},
		{"no tenant connections", []server.Option{server.WithInsecureNoAuth(), server.WithMaxTenantConnections(0)}, "max tenant connections 0"},
		{"no handshakes", []server.Option{server.WithInsecureNoAuth(), server.WithMaxHandshakes(0)}, "max handshakes 0"},
		{"negative busy poll", []server.Option{server.WithInsecureNoAuth(), server.WithBusyPoll(-time.Microsecond)}, "busy poll -1µs, want 0 to 10ms"},
		{"long busy poll", []server.Option{server.WithInsecureNoAuth(), server.WithBusyPoll(time.Second)}, "busy poll 1s, want 0 to 10ms"},
		{"no handshakes per peer", []server.Option{server.WithInsecureNoAuth(), server.WithMaxHandshakesPerPeer(0)}, "max handshakes per peer 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := start(t, envConfig{})
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			err = server.New(e.fake, tt.opts...).Serve(t.Context(), ln)
			if !errors.Is(err, server.ErrConfig) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Serve: %v, want a configuration error about %q", err, tt.want)
			}
		})
	}
}

func TestInsecureSeesEveryDevice(t *testing.T) {
	e := start(t, envConfig{fake: fakeDevices(3), srv: []server.Option{server.WithInsecureNoAuth()}})
	cl := e.dial(t, "")
	n, r, err := cl.DeviceGetCount(0)
	ok(t, "cuDeviceGetCount")(r, err)
	if n != 3 {
		t.Errorf("%d devices, want 3", n)
	}
}

func TestTokenDeviceIsOrdinalZero(t *testing.T) {
	e := start(t, envConfig{fake: fakeDevices(3)})
	e.fake.Init()
	want, r := e.fake.DeviceUUID(2)
	if r != proto.Success {
		t.Fatal(r)
	}
	cl := e.dial(t, mint(t, testSecret, token.Claims{ID: "job", Device: 2, Expires: time.Now().Add(time.Hour)}))
	got, r, err := cl.DeviceGetUuidV2(0, 0)
	ok(t, "cuDeviceGetUuid_v2")(r, err)
	if got != want {
		t.Errorf("device 0 has UUID %x, want GPU 2's %x", got, want)
	}
	_, r, err = cl.DeviceGetUuidV2(0, 1)
	is(t, "cuDeviceGetUuid_v2 of device 1", proto.ErrInvalidDevice)(r, err)
	_, r, err = cl.DeviceGet(0, 1)
	is(t, "cuDeviceGet(1)", proto.ErrInvalidDevice)(r, err)
	name, r, err := cl.DeviceGetName(0, 5, 0)
	ok(t, "cuDeviceGetName")(r, err)
	if name != "gpum" {
		t.Errorf("name truncated to 5 bytes with its NUL: %q, want %q", name, "gpum")
	}
}

// TestPreLoginFrameBound: before the handshake is through the server reads
// no frame larger than a handshake. One announcing more is refused when
// its header arrives (counted as malformed, logged as too large), without
// the server waiting for its payload or making room for it: 64 of them
// cost it next to no memory.
func TestPreLoginFrameBound(t *testing.T) {
	e := start(t, envConfig{tcp: true, srv: []server.Option{server.WithSecret(testSecret), server.WithHandshakeTimeout(time.Minute)}})
	header := func(announce int) []byte {
		h := proto.AppendHeader(nil, proto.Header{Op: proto.OpHello}, 0)
		binary.LittleEndian.PutUint32(h, uint32(proto.HeaderSize-4+announce))
		return h
	}
	sizes := []int{proto.MaxHello + 1, 64 << 10, proto.ChunkSize, proto.MaxPayload, 1 << 30}
	for _, n := range sizes {
		t.Run(fmt.Sprintf("%d bytes", n), func(t *testing.T) {
			if err := closedByPeer(stallFrom(t, e, nil, header(n))); err != nil {
				t.Fatal(err)
			}
		})
	}
	if got := e.srv.Stats().Refused["malformed"]; got != uint64(len(sizes)) {
		t.Errorf("%d handshakes refused as malformed, want %d", got, len(sizes))
	}
	if got := strings.Count(e.logs.String(), "frame too large"); got != len(sizes) {
		t.Errorf("%d refusals logged as a frame too large, want %d:\n%s", got, len(sizes), e.logs)
	}

	const conns = 64
	var stats runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&stats)
	before := stats.TotalAlloc
	cs := make([]net.Conn, conns)
	for i := range cs {
		cs[i] = stallFrom(t, e, loopback(i), header(proto.MaxPayload))
	}
	for _, c := range cs {
		if err := closedByPeer(c); err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&stats)
	t.Logf("%d connections announcing a %d-byte frame: %d KiB allocated", conns, proto.MaxPayload, (stats.TotalAlloc-before)>>10)
	if got := stats.TotalAlloc - before; got > conns*16<<10 {
		t.Errorf("%d connections announcing a %d-byte frame cost the server %d KiB, want under 16 KiB each",
			conns, proto.MaxPayload, got>>10)
	}
}
