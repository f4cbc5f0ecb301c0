package ctest

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumux/gpumux/internal/syncbuf"
	"github.com/gpumux/gpumux/internal/tlstest"
	"github.com/gpumux/gpumux/remote/server"
)

// tlsEnv is a server whose TCP listener speaks TLS with a certificate for
// 127.0.0.1 and localhost, signed by ca.
type tlsEnv struct {
	*env
	ca  *tlstest.CA
	dir string
}

// startTLS starts a TLS server; with clientCA, a mutual TLS one.
func startTLS(t *testing.T, clientCA string) tlsEnv {
	t.Helper()
	dir := shortTempDir(t)
	ca := tlstest.NewCA(t, dir, "ca")
	pair := ca.Server(t, "server", []string{"127.0.0.1", "localhost"}, tlstest.Options{})
	files, err := server.LoadTLS(server.TLSPaths{Cert: pair.CertFile, Key: pair.KeyFile, ClientCA: clientCA}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tlsEnv{env: startServerTLS(t, files.Config()), ca: ca, dir: dir}
}

// caEnv is the environment that makes the interposer trust ca.
func caEnv(ca *tlstest.CA, more ...string) []string {
	return append([]string{"GPUMUX_REMOTE_TLS_CA=" + ca.CertFile}, more...)
}

// checkLog fails the test on any interposer message.
func checkLog(t *testing.T, stderr string) {
	t.Helper()
	for _, line := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(line, "gpumux: ") {
			t.Errorf("unexpected interposer message: %s", line)
		}
	}
}

// TestTLSPrograms: the programs run over TLS, to the server by IP address
// and by DNS name; a unix socket stays plain with the CA set.
func TestTLSPrograms(t *testing.T) {
	e := startTLS(t, "")
	_, port, _ := net.SplitHostPort(e.tcp)
	for _, tc := range []struct {
		name, addr string
		env        []string
	}{
		{"by IP", e.tcp, nil},
		{"by name", "localhost:" + port, nil},
		{"by IP, named", e.tcp, []string{"GPUMUX_REMOTE_TLS_SERVER_NAME=localhost"}},
		{"unix", e.unix, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, name := range []string{"basic", "mem", "threads", "fork"} {
				t.Run(name, func(t *testing.T) {
					_, stderr := program{name: name, addr: tc.addr, token: mint(t, "tls-"+name, 0), env: caEnv(e.ca, tc.env...)}.run(t)
					checkLog(t, stderr)
				})
			}
		})
	}
	if n := e.srv.Stats().Refused["tls"]; n != 0 {
		t.Errorf("%d TLS handshakes refused", n)
	}
}

// TestMutualTLSPrograms: with a client CA, a program gets in with a
// certificate (ECDSA or RSA key) the CA signed.
func TestMutualTLSPrograms(t *testing.T) {
	dir := shortTempDir(t)
	clients := tlstest.NewCA(t, dir, "clients")
	e := startTLS(t, clients.CertFile)
	for _, key := range []tlstest.KeyType{tlstest.ECDSA, tlstest.RSA} {
		pair := clients.Client(t, "node-"+strconv.Itoa(int(key)), tlstest.Options{Key: key})
		_, stderr := program{name: "basic", addr: e.tcp, token: mint(t, "mtls", 0),
			env: caEnv(e.ca, "GPUMUX_REMOTE_TLS_CERT="+pair.CertFile, "GPUMUX_REMOTE_TLS_KEY="+pair.KeyFile)}.run(t)
		checkLog(t, stderr)
	}
}

// TestTLSFailures: every way TLS can fail makes cuInit return
// CUDA_ERROR_NO_DEVICE and logs one line naming the cause.
func TestTLSFailures(t *testing.T) {
	e := startTLS(t, "")
	clients := tlstest.NewCA(t, e.dir, "clients")
	mutual := startTLS(t, clients.CertFile)
	plain := startServer(t)
	other := tlstest.NewCA(t, e.dir, "other")
	stranger := other.Client(t, "stranger", tlstest.Options{})
	mine := clients.Client(t, "mine", tlstest.Options{})

	// A server whose certificate expired (LoadTLS refuses to serve one).
	expired := e.ca.Server(t, "expired", []string{"127.0.0.1"}, tlstest.Options{NotAfter: time.Now().Add(-time.Minute)})
	cert, err := tls.LoadX509KeyPair(expired.CertFile, expired.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	old := startServerTLS(t, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})

	notPEM := e.dir + "/not.pem"
	os.WriteFile(notPEM, []byte("hello\n"), 0o600)
	for _, tc := range []struct {
		name, addr string
		env        []string
		why        string
	}{
		{"another CA", e.tcp, caEnv(other), "TLS: the server's certificate is not signed by a CA of GPUMUX_REMOTE_TLS_CA=" + other.CertFile},
		{"a DNS name the certificate lacks", e.tcp, caEnv(e.ca, "GPUMUX_REMOTE_TLS_SERVER_NAME=gpu.example.com"),
			"TLS: the server's certificate does not name gpu.example.com"},
		{"an IP address the certificate lacks", e.tcp, caEnv(e.ca, "GPUMUX_REMOTE_TLS_SERVER_NAME=10.0.0.1"),
			"TLS: the server's certificate does not name 10.0.0.1"},
		{"an expired certificate", old.tcp, caEnv(e.ca), "TLS: the server's certificate, or a CA's in its chain, is expired"},
		{"no CA file", e.tcp, []string{"GPUMUX_REMOTE_TLS_CA=" + e.dir + "/none.pem"},
			"GPUMUX_REMOTE_TLS_CA=" + e.dir + "/none.pem: No such file or directory"},
		{"a CA file without a certificate", e.tcp, []string{"GPUMUX_REMOTE_TLS_CA=" + notPEM}, "GPUMUX_REMOTE_TLS_CA=" + notPEM + ": no certificate in it"},
		{"a plaintext server", plain.tcp, caEnv(e.ca), "during the TLS handshake (is TLS served on this port?"},
		{"a TLS server, no CA", e.tcp, nil, "refused the connection (CUDA_ERROR_NOT_PERMITTED): this gpumux-remoted port speaks TLS"},
		{"no client certificate", mutual.tcp, caEnv(mutual.ca),
			"alert 40 (handshake failure); it may want a client certificate (GPUMUX_REMOTE_TLS_CERT, GPUMUX_REMOTE_TLS_KEY)"},
		{"a client certificate of another CA", mutual.tcp,
			caEnv(mutual.ca, "GPUMUX_REMOTE_TLS_CERT="+stranger.CertFile, "GPUMUX_REMOTE_TLS_KEY="+stranger.KeyFile),
			"alert 48 (unknown CA); it may not accept this client's certificate (GPUMUX_REMOTE_TLS_CERT)"},
		{"a client certificate without its key", mutual.tcp, caEnv(mutual.ca, "GPUMUX_REMOTE_TLS_CERT="+mine.CertFile),
			"GPUMUX_REMOTE_TLS_CERT and GPUMUX_REMOTE_TLS_KEY go together"},
		{"a client key that is not one", mutual.tcp,
			caEnv(mutual.ca, "GPUMUX_REMOTE_TLS_CERT="+mine.CertFile, "GPUMUX_REMOTE_TLS_KEY="+mine.CertFile),
			"GPUMUX_REMOTE_TLS_KEY=" + mine.CertFile + ": no unencrypted RSA or EC private key in it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr := program{name: "unreachable", args: []string{"nodevice", "3"}, addr: tc.addr,
				token: mint(t, "tls", 0), timeout: "2", env: tc.env}.run(t)
			if !strings.Contains(stderr, tc.why) || strings.Count(stderr, "gpumux: ") != 1 {
				t.Errorf("stderr does not say %q in its one line:\n%s", tc.why, stderr)
			}
		})
	}
	// Nothing of it disturbed the server.
	_, stderr := program{name: "basic", addr: e.tcp, token: mint(t, "after", 0), env: caEnv(e.ca)}.run(t)
	checkLog(t, stderr)
}

// recorder is a TCP proxy to a server that keeps every byte it passes.
type recorder struct {
	addr string
	seen syncbuf.Buffer
}

func record(t *testing.T, target string) *recorder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{addr: ln.Addr().String()}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			for _, d := range [][2]net.Conn{{c, s}, {s, c}} {
				wg.Go(func() {
					io.Copy(io.MultiWriter(d[1], &r.seen), d[0])
					c.Close()
					s.Close()
				})
			}
		}
	})
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return r
}

// TestTLSKeepsTokensOffTheWire: through a recording proxy, a program's
// token and its copies' data cross in clear without TLS, and not with it.
func TestTLSKeepsTokensOffTheWire(t *testing.T) {
	e := startTLS(t, "")
	plain := startServer(t)
	for _, tc := range []struct {
		name   string
		target string
		env    []string
		clear  bool
	}{
		{"plain TCP", plain.tcp, nil, true},
		{"TLS", e.tcp, caEnv(e.ca), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := record(t, tc.target)
			tok := mint(t, "wire-"+strings.ReplaceAll(tc.name, " ", "-"), 0)
			_, stderr := program{name: "wirebench", args: []string{"2", "2"}, addr: r.addr, token: tok, env: tc.env}.run(t)
			checkLog(t, stderr)
			seen := []byte(r.seen.String())
			if len(seen) < 10<<20 {
				t.Fatalf("the proxy saw %d bytes, want the copies' 10 MiB and more", len(seen))
			}
			for _, secret := range []string{tok, tok[len(tok)-16:], "gpumux-plaintext-marker"} {
				if got := bytes.Contains(seen, []byte(secret)); got != tc.clear {
					t.Errorf("%q on the wire: %v, want %v", secret, got, tc.clear)
				}
			}
			if isTLS := seen[0] == 0x16 && seen[1] == 3; isTLS == tc.clear {
				t.Errorf("the wire starts with % x", seen[:8])
			}
		})
	}
}

// TestTLSSpeed measures round trips and copies over loopback TCP with and
// without TLS, with tenant processes (the front relays TLS to the worker)
// and without, in one run, with GM_CTEST_BENCH=1 (docs/benchmarks.md):
//
//	GM_CTEST_BENCH=1 go test ./remote/ctest -run TLSSpeed -v -count=1
func TestTLSSpeed(t *testing.T) {
	if os.Getenv("GM_CTEST_BENCH") == "" {
		t.Skip("a measurement: set GM_CTEST_BENCH=1")
	}
	dir := shortTempDir(t)
	ca := tlstest.NewCA(t, dir, "ca")
	pair := ca.Server(t, "server", []string{"127.0.0.1"}, tlstest.Options{})
	files, err := server.LoadTLS(server.TLSPaths{Cert: pair.CertFile, Key: pair.KeyFile}, nil)
	if err != nil {
		t.Fatal(err)
	}
	type setup struct {
		name, addr string
		env        []string
	}
	var setups []setup
	for _, procs := range []bool{false, true} {
		var opts []server.Option
		suffix := ""
		if procs {
			opts, suffix = []server.Option{tenantProcesses()}, ", tenant processes"
		}
		plain, tls := startServer(t, opts...), startServerTLS(t, files.Config(), opts...)
		setups = append(setups, setup{"TCP" + suffix, plain.tcp, nil}, setup{"TLS" + suffix, tls.tcp, caEnv(ca)})
	}
	best := map[string]map[string]float64{} // of three rounds: the lowest time, the highest rate
	for range 3 {
		for _, s := range setups {
			out, _ := program{name: "wirebench", args: []string{"64", "8"}, addr: s.addr, token: mint(t, "speed", 0), env: s.env}.run(t)
			if best[s.name] == nil {
				best[s.name] = map[string]float64{}
			}
			for _, line := range strings.Fields(out) {
				k, v, ok := strings.Cut(line, "=")
				f, err := strconv.ParseFloat(v, 64)
				if !ok || err != nil {
					continue
				}
				if old, seen := best[s.name][k]; !seen || (k == "sync_rtt_us") == (f < old) {
					best[s.name][k] = f
				}
			}
		}
	}
	for i := 0; i < len(setups); i += 2 {
		p, s := best[setups[i].name], best[setups[i+1].name]
		t.Logf("%s vs %s: sync round trip %.1f vs %.1f µs (%.2f×), host→device %.2f vs %.2f GB/s (%.2f), device→host %.2f vs %.2f GB/s (%.2f)",
			setups[i+1].name, setups[i].name, s["sync_rtt_us"], p["sync_rtt_us"], s["sync_rtt_us"]/p["sync_rtt_us"],
			s["h2d_gbps"], p["h2d_gbps"], s["h2d_gbps"]/p["h2d_gbps"], s["d2h_gbps"], p["d2h_gbps"], s["d2h_gbps"]/p["d2h_gbps"])
	}
}
