package server_test

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumux/gpumux/internal/tlstest"
	"github.com/gpumux/gpumux/remote/proto"
	"github.com/gpumux/gpumux/remote/server"
)

// tlsSetup is a CA with a server certificate for 127.0.0.1 and localhost,
// and the server's TLS files (with clientCA for mutual TLS, if set).
type tlsSetup struct {
	ca     *tlstest.CA
	server tlstest.Pair
	files  *server.TLSFiles
}

func newTLS(t *testing.T, key tlstest.KeyType, clientCA string) tlsSetup {
	t.Helper()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "ca")
	pair := ca.Server(t, "server", []string{"127.0.0.1", "localhost"}, tlstest.Options{Key: key})
	files, err := server.LoadTLS(server.TLSPaths{Cert: pair.CertFile, Key: pair.KeyFile, ClientCA: clientCA}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tlsSetup{ca: ca, server: pair, files: files}
}

// TestTLS: a client that trusts the server's CA works over TLS, with the
// server's connections in-process or in tenant workers (relayed), with an
// ECDSA or an RSA certificate, over TLS 1.3 and 1.2; with 1.2 the suite is
// forward-secret AEAD.
func TestTLS(t *testing.T) {
	for _, mode := range []struct {
		name string
		srv  []server.Option
	}{{"in-process", nil}, {"tenant processes", tenantOpts()}} {
		for _, key := range []tlstest.KeyType{tlstest.ECDSA, tlstest.RSA} {
			for _, version := range []uint16{tls.VersionTLS13, tls.VersionTLS12} {
				t.Run(fmt.Sprintf("%s/key %d/%s", mode.name, key, tls.VersionName(version)), func(t *testing.T) {
					s := newTLS(t, key, "")
					client := s.ca.ClientConfig(t, "127.0.0.1", nil)
					client.MaxVersion = version
					e := start(t, envConfig{tcp: true, srv: mode.srv, tls: s.files.Config(), clientTLS: client})
					cl := e.dial(t, e.token(t, "job", 8<<20))
					ctx := primary(t, cl)
					p := alloc(t, cl, ctx, 3<<20)
					data := bytes.Repeat([]byte("over TLS "), 3<<20/9) // past a 1 MiB chunk
					upload(t, cl, ctx, p, data)
					if got := download(t, cl, ctx, p, len(data)); !bytes.Equal(got, data) {
						t.Fatal("data changed over TLS")
					}
					st := tlsState(t, e)
					if st.Version != version {
						t.Errorf("TLS version %s, want %s", tls.VersionName(st.Version), tls.VersionName(version))
					}
					if version == tls.VersionTLS12 && !strings.Contains(tls.CipherSuiteName(st.CipherSuite), "ECDHE") {
						t.Errorf("suite %s", tls.CipherSuiteName(st.CipherSuite))
					}
				})
			}
		}
	}
}

// tlsState is the state of a fresh TLS connection to e.
func tlsState(t *testing.T, e *env) tls.ConnectionState {
	t.Helper()
	c, err := tls.Dial("tcp", e.addr, e.clientTLS)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.ConnectionState()
}

// TestTLSRefusals: what the server refuses at the TLS handshake, and what
// each client learns. A client without TLS gets a refusal it can read
// saying so. None of it disturbs the clients served.
func TestTLSRefusals(t *testing.T) {
	s := newTLS(t, tlstest.ECDSA, "")
	good := s.ca.ClientConfig(t, "127.0.0.1", nil)
	e := start(t, envConfig{tcp: true, tls: s.files.Config(), clientTLS: good})
	served := e.dial(t, e.token(t, "job", 1<<20))
	ctx := primary(t, served)

	other := tlstest.NewCA(t, t.TempDir(), "other")
	cbcOnly := s.ca.ClientConfig(t, "127.0.0.1", nil)
	cbcOnly.MaxVersion = tls.VersionTLS12
	cbcOnly.CipherSuites = []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA}
	tls11 := s.ca.ClientConfig(t, "127.0.0.1", nil)
	tls11.MinVersion, tls11.MaxVersion = tls.VersionTLS10, tls.VersionTLS11
	tests := []struct {
		name   string
		config *tls.Config
		want   string // in the client's error
	}{
		{"another CA", other.ClientConfig(t, "127.0.0.1", nil), "certificate signed by unknown authority"},
		{"another name", s.ca.ClientConfig(t, "gpu.example.com", nil), "not gpu.example.com"},
		{"CBC suites only", cbcOnly, "handshake failure"},
		{"TLS 1.1", tls11, "protocol version"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := tls.Dial("tcp", e.addr, tt.config)
			if err == nil {
				c.Close()
				t.Fatal("the handshake succeeded")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("client error %v, want %q", err, tt.want)
			}
		})
	}

	t.Run("a client without TLS", func(t *testing.T) {
		_, err := proto.Dial(t.Context(), "tcp", e.addr, proto.Hello{Token: e.token(t, "job", 1<<20)}, 5*time.Second)
		if !errors.Is(err, proto.ErrRefused) || !strings.Contains(err.Error(), "speaks TLS") || !strings.Contains(err.Error(), "GPUMUX_REMOTE_TLS_CA") {
			t.Errorf("plaintext handshake: %v, want a refusal that names TLS and GPUMUX_REMOTE_TLS_CA", err)
		}
		// Garbage gets nothing back but a close.
		c := e.raw(t)
		c.Write([]byte("GET / HTTP/1.1\r\nHost: gpumux\r\n\r\n"))
		if err := closedByPeer(c); err != nil {
			t.Error(err)
		}
	})

	eventually(t, "the refusals to be counted", func() bool {
		// The four TLS clients above (two of which refused the server),
		// the plaintext Hello and the garbage.
		return e.srv.Stats().Refused["tls"] == 6
	})
	if !strings.Contains(e.logs.String(), "crossed the network in clear") {
		t.Errorf("no log line says the plaintext client's token crossed in clear:\n%s", e.logs.String())
	}
	ok(t, "cuCtxSynchronize after the refusals")(served.CtxSynchronize(ctx))
}

// TestMutualTLS: with a client CA, only clients with a certificate it
// signed get in.
func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	clientCA := tlstest.NewCA(t, dir, "clients")
	s := newTLS(t, tlstest.ECDSA, clientCA.CertFile)
	e := start(t, envConfig{tcp: true, srv: tenantOpts(), tls: s.files.Config()})
	mine := clientCA.Client(t, "node-1", tlstest.Options{})
	stranger := tlstest.NewCA(t, dir, "stranger").Client(t, "node-x", tlstest.Options{})
	for _, tt := range []struct {
		name string
		pair *tlstest.Pair
		ok   bool
	}{
		{"no client certificate", nil, false},
		{"a certificate of another CA", &stranger, false},
		{"a certificate of the client CA", &mine, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e.clientTLS = s.ca.ClientConfig(t, "localhost", tt.pair)
			cl, err := e.tryDial(e.token(t, "job", 0))
			if !tt.ok {
				if err == nil {
					cl.Close()
					t.Fatal("admitted")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			primary(t, cl)
		})
	}
	eventually(t, "two refusals counted as tls", func() bool { return e.srv.Stats().Refused["tls"] == 2 })
}

// TestTLSHandshakeBounds: a connection that stalls inside the TLS
// handshake is bounded like any handshake: by the timeout, and past the
// per-peer bound the oldest is closed; a client still gets in.
func TestTLSHandshakeBounds(t *testing.T) {
	s := newTLS(t, tlstest.ECDSA, "")
	// The start of a ClientHello record that announces 512 bytes.
	partial := []byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03}

	t.Run("timeout", func(t *testing.T) {
		e := start(t, envConfig{tcp: true, tls: s.files.Config(), clientTLS: s.ca.ClientConfig(t, "127.0.0.1", nil),
			srv: []server.Option{server.WithSecret(testSecret), server.WithHandshakeTimeout(200 * time.Millisecond)}})
		begin := time.Now()
		for _, send := range [][]byte{nil, partial} {
			if err := closedByPeer(stallFrom(t, e, nil, send)); err != nil {
				t.Error(err)
			}
		}
		if d := time.Since(begin); d > 2*time.Second {
			t.Errorf("two stalled TLS handshakes took %v to be closed, want about 2×200ms", d)
		}
		eventually(t, "two refusals counted as timeout", func() bool { return e.srv.Stats().Refused["timeout"] == 2 })
		primary(t, e.dial(t, e.token(t, "job", 0)))
	})

	t.Run("per peer", func(t *testing.T) {
		e := start(t, envConfig{tcp: true, tls: s.files.Config(), clientTLS: s.ca.ClientConfig(t, "127.0.0.1", nil),
			srv: []server.Option{server.WithSecret(testSecret), server.WithHandshakeTimeout(time.Minute), server.WithMaxHandshakesPerPeer(4)}})
		var conns []net.Conn
		for range 10 {
			conns = append(conns, stallFrom(t, e, loopback(0), partial))
		}
		want := []int{0, 1, 2, 3, 4, 5}
		eventually(t, "the oldest TLS handshakes to be closed", func() bool { return slices.Equal(closed(conns), want) })
		if got := e.srv.Stats().Refused["evicted"]; got != uint64(len(want)) {
			t.Errorf("%d evicted, want %d", got, len(want))
		}
		primary(t, e.dial(t, e.token(t, "job", 0)))
	})
}

// TestTLSReload: new certificate files are served from the next handshake
// on, whether found changed or reloaded on demand; files that do not load
// leave the old ones in use.
func TestTLSReload(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "ca")
	first := ca.Server(t, "first", []string{"127.0.0.1"}, tlstest.Options{})
	cert, key := dir+"/live.pem", dir+"/live-key.pem"
	install := func(p tlstest.Pair) {
		for src, dst := range map[string]string{p.CertFile: cert, p.KeyFile: key} {
			b, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(dst+".tmp", b, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(dst+".tmp", dst); err != nil { // a new inode, as a rotation makes
				t.Fatal(err)
			}
		}
	}
	install(first)
	logs := &syncBuffer{}
	files, err := server.LoadTLS(server.TLSPaths{Cert: cert, Key: key}, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	e := start(t, envConfig{tcp: true, tls: files.Config(), clientTLS: ca.ClientConfig(t, "127.0.0.1", nil)})
	served := func() string { return tlsState(t, e).PeerCertificates[0].Subject.CommonName }
	if got := served(); got != "first" {
		t.Fatalf("serving %q, want first", got)
	}

	install(ca.Server(t, "second", []string{"127.0.0.1"}, tlstest.Options{}))
	eventually(t, "the changed files to be served", func() bool { return served() == "second" })

	install(ca.Server(t, "third", []string{"127.0.0.1"}, tlstest.Options{}))
	if err := files.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := served(); got != "third" {
		t.Errorf("after Reload serving %q, want third", got)
	}

	if err := os.WriteFile(key, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := files.Reload(); err == nil || !strings.Contains(err.Error(), key) {
		t.Errorf("Reload of a broken key: %v, want an error naming %s", err, key)
	}
	if got := served(); got != "third" {
		t.Errorf("after a failed reload serving %q, want third", got)
	}
	cl := e.dial(t, e.token(t, "job", 0))
	primary(t, cl)
	if strings.Contains(logs.String(), "level=ERROR") {
		// The broken key was stamped by the failed Reload: not reported again.
		t.Errorf("the broken files were reported again:\n%s", logs.String())
	}
}

// TestLoadTLSErrors: each unusable file is named.
func TestLoadTLSErrors(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, dir, "ca")
	good := ca.Server(t, "server", []string{"127.0.0.1"}, tlstest.Options{})
	expired := ca.Server(t, "expired", []string{"127.0.0.1"}, tlstest.Options{NotAfter: time.Now().Add(-time.Minute)})
	notPEM := dir + "/not.pem"
	os.WriteFile(notPEM, []byte("hello"), 0o600)
	for _, tt := range []struct {
		name string
		p    server.TLSPaths
		want string
	}{
		{"no key", server.TLSPaths{Cert: good.CertFile}, "needs a certificate and its key"},
		{"missing cert", server.TLSPaths{Cert: dir + "/none.pem", Key: good.KeyFile}, dir + "/none.pem"},
		{"key of another cert", server.TLSPaths{Cert: good.CertFile, Key: expired.KeyFile}, "does not match"},
		{"expired", server.TLSPaths{Cert: expired.CertFile, Key: expired.KeyFile}, "expired at"},
		{"client CA not PEM", server.TLSPaths{Cert: good.CertFile, Key: good.KeyFile, ClientCA: notPEM}, notPEM + ": no PEM certificate"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := server.LoadTLS(tt.p, nil); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("LoadTLS: %v, want %q", err, tt.want)
			}
		})
	}
}

// A plaintext server refuses a TLS client without harm, as any garbage.
func TestTLSClientToPlaintextServer(t *testing.T) {
	s := newTLS(t, tlstest.ECDSA, "")
	e := start(t, envConfig{tcp: true})
	c, err := tls.Dial("tcp", e.addr, s.ca.ClientConfig(t, "127.0.0.1", nil))
	if err == nil {
		c.Close()
		t.Fatal("a TLS handshake with a plaintext server succeeded")
	}
	primary(t, e.dial(t, e.token(t, "job", 0)))
}
