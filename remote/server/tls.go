package server

import (
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/gpumux/gpumux/remote/pool"
	"github.com/gpumux/gpumux/remote/proto"
)

// TLS. A TCP listener served with ServeTLS wraps every connection in
// crypto/tls: TLS 1.2 with ECDHE and AEAD suites only (AES-GCM,
// ChaCha20-Poly1305), or TLS 1.3; records of 16 KiB from the first byte.
// The TLS handshake is part of the connection's handshake: it counts
// against the same bounds (limits.go) and must end, with the Hello read,
// within WithHandshakeTimeout. With tenant processes the front keeps the
// TLS connection and relays its plaintext to the worker over a socket pair
// (tenant.go): the worker cannot take over a TLS session.
//
// TLSFiles loads the certificate, key and client CAs from PEM files and
// reloads them when they change (checked at most every tlsCheckInterval,
// at a handshake) or on Reload (gpumux-remoted calls it on SIGHUP); a
// reload that fails keeps the files read before and is logged.

// tlsCheckInterval is how often a handshake looks at the files' times.
const tlsCheckInterval = 2 * time.Second

// tlsSuites are the TLS 1.2 suites offered: forward-secret AEAD only. (TLS
// 1.3's are all AEAD and not configurable.)
var tlsSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// TLSPaths names a server's TLS files (PEM).
type TLSPaths struct {
	// Cert is the server's certificate chain, leaf first; Key its key.
	Cert, Key string
	// ClientCA, if set, holds the CAs whose client certificates are
	// accepted: every client must present one (mutual TLS).
	ClientCA string
}

// TLSFiles is a server's TLS configuration read from files, reloaded when
// they change.
type TLSFiles struct {
	paths TLSPaths
	log   *slog.Logger
	now   func() time.Time

	mu      sync.Mutex
	cur     *tls.Config // the base config with the files read last
	stamps  []fileStamp // of the files read last
	checked time.Time
}

// fileStamp tells whether a file changed.
type fileStamp struct {
	mod  time.Time
	size int64
	ino  uint64
}

// LoadTLS reads the files named by p. Errors name the file.
func LoadTLS(p TLSPaths, log *slog.Logger) (*TLSFiles, error) {
	if p.Cert == "" || p.Key == "" {
		return nil, fmt.Errorf("%w: TLS needs a certificate and its key", ErrConfig)
	}
	if log == nil {
		log = slog.Default()
	}
	f := &TLSFiles{paths: p, log: log, now: time.Now}
	if err := f.Reload(); err != nil {
		return nil, err
	}
	return f, nil
}

// Reload reads the files again. On an error the files read before stay in
// use.
func (f *TLSFiles) Reload() error {
	stamps := f.stampFiles()
	cfg, err := readTLS(f.paths)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.checked = f.now()
	if err != nil {
		if f.cur != nil {
			f.stamps = stamps // the same broken files are not read again until they change
		}
		return err
	}
	f.cur, f.stamps = cfg, stamps
	return nil
}

// Config is the tls.Config to serve with: each handshake gets the files'
// latest contents.
func (f *TLSFiles) Config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return f.current(), nil
		},
	}
}

// current returns the config of the files read last, reading them again
// first if they changed.
func (f *TLSFiles) current() *tls.Config {
	f.mu.Lock()
	due := f.now().Sub(f.checked) >= tlsCheckInterval
	if due {
		f.checked = f.now()
	}
	old := f.stamps
	f.mu.Unlock()
	if due && !stampsEqual(old, f.stampFiles()) {
		if err := f.Reload(); err != nil {
			f.log.Error("TLS files changed but cannot be used; serving with those read before", "err", err)
		} else {
			f.log.Info("TLS files reloaded", "cert", f.paths.Cert, "client_ca", f.paths.ClientCA)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cur
}

// stampFiles stamps the files (a missing file stamps as zero).
func (f *TLSFiles) stampFiles() []fileStamp {
	var out []fileStamp
	for _, p := range []string{f.paths.Cert, f.paths.Key, f.paths.ClientCA} {
		var s fileStamp
		if p != "" {
			if fi, err := os.Stat(p); err == nil {
				s = fileStamp{mod: fi.ModTime(), size: fi.Size(), ino: inode(fi)}
			}
		}
		out = append(out, s)
	}
	return out
}

func inode(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}

func stampsEqual(a, b []fileStamp) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].mod.Equal(b[i].mod) || a[i].size != b[i].size || a[i].ino != b[i].ino {
			return false
		}
	}
	return true
}

// readTLS builds the config of one reading of the files.
func readTLS(p TLSPaths) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(p.Cert, p.Key)
	if err != nil {
		return nil, fmt.Errorf("TLS certificate %s and key %s: %w", p.Cert, p.Key, err)
	}
	if cert.Leaf != nil && time.Now().After(cert.Leaf.NotAfter) {
		return nil, fmt.Errorf("TLS certificate %s expired at %s", p.Cert, cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	cfg := &tls.Config{
		MinVersion:                  tls.VersionTLS12,
		CipherSuites:                tlsSuites,
		Certificates:                []tls.Certificate{cert},
		DynamicRecordSizingDisabled: true, // full 16 KiB records: copies are the bulk
		SessionTicketsDisabled:      true, // one long connection per process
	}
	if p.ClientCA != "" {
		roots, err := pool.ReadCAs(p.ClientCA)
		if err != nil {
			return nil, fmt.Errorf("TLS client CA: %w", err)
		}
		cfg.ClientCAs = roots
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// tlsHandshake runs a connection's TLS handshake, under the deadline and
// the bounds of its handshake (Server.handshake).
func (s *Server) tlsHandshake(tc *tls.Conn, hs *handshaking) error {
	err := tc.Handshake()
	if err == nil {
		return nil
	}
	var rhe tls.RecordHeaderError
	plaintext := errors.As(err, &rhe) && rhe.Conn != nil
	if plaintext {
		refusePlaintext(rhe) // still a handshake: bounded as one
	} else {
		drain(tc.NetConn()) // so that the client reads the alert crypto/tls sent
	}
	if s.endHandshake(hs) {
		s.counts.refused[refusedEvicted].Add(1)
		return fmt.Errorf("TLS handshake: %w", errEvicted)
	}
	if plaintext {
		s.counts.refused[refusedTLS].Add(1)
		return fmt.Errorf("%w: TLS handshake: %v (a client without TLS; its token, if it sent one, crossed the network in clear)", errRefused, err)
	}
	s.counts.refused[tlsRefusal(err)].Add(1)
	return fmt.Errorf("TLS handshake: %w", err)
}

// tlsRefusal classifies a failed TLS handshake.
func tlsRefusal(err error) refusal {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return refusedTimeout
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed), errors.Is(err, syscall.ECONNRESET):
		return refusedClosed
	default:
		return refusedTLS
	}
}

// plaintextRefusal is the answer to a client that does not speak TLS.
const plaintextRefusal = "this gpumux-remoted port speaks TLS: give the client the CA certificate that signed the server's (GPUMUX_REMOTE_TLS_CA)"

// refusePlaintext answers, in clear, a client that sent a gpumux Hello to
// a TLS port, so that it can say what it lacks; anything else gets no
// answer. crypto/tls read the frame's first 5 bytes as a record header
// (and maybe more of it).
func refusePlaintext(rhe tls.RecordHeaderError) {
	h := rhe.RecordHeader
	n := binary.LittleEndian.Uint32(h[:4]) // the frame's length after its length field
	if n < proto.HeaderSize-4 || int(n)-(proto.HeaderSize-4) > proto.MaxHello || h[4] != byte(proto.OpHello) {
		return
	}
	w := proto.Welcome{Result: proto.ErrNotPermitted, Message: plaintextRefusal}
	if _, err := rhe.Conn.Write(proto.AppendFrame(nil, proto.Header{Op: proto.OpHello, Flags: proto.FlagReply}, w.Encode())); err != nil {
		return
	}
	drain(rhe.Conn)
}

// drain shuts the server's side of a refused connection and reads what
// the client sends (some of a handshake at most) until it closes, or the
// handshake's deadline: closing a socket with unread data resets the
// connection, and the client might lose what the server said last (an
// alert, a refusal) before reading it.
func drain(conn net.Conn) {
	if cw, ok := conn.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	io.Copy(io.Discard, io.LimitReader(conn, 64<<10))
}
