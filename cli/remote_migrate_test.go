package cli

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpumux/gpumux/internal/tlstest"
	"github.com/gpumux/gpumux/remote/fakecuda"
	"github.com/gpumux/gpumux/remote/proto"
	"github.com/gpumux/gpumux/remote/server"
	"github.com/gpumux/gpumux/remote/token"
)

// migratingServer serves a fake GPU with migration on a loopback port.
func migratingServer(t *testing.T, secret []byte) string {
	t.Helper()
	fake, err := fakecuda.New()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		server.New(fake, server.WithSecret(secret), server.WithMigration()).Serve(ctx, ln)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return ln.Addr().String()
}

// TestRemoteMigrate moves a running client's session with gpumux remote
// migrate, and checks the command's refusals and failures.
func TestRemoteMigrate(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	dir := t.TempDir()
	keyFile, otherKey := filepath.Join(dir, "pool.key"), filepath.Join(dir, "other.key")
	if err := os.WriteFile(keyFile, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(otherKey, []byte("another pool's secret, 32 bytes"), 0o600); err != nil {
		t.Fatal(err)
	}
	caFile := tlstest.NewCA(t, dir, "ca").CertFile
	a, b := migratingServer(t, secret), migratingServer(t, secret)
	tok, err := token.Mint(secret, token.Claims{ID: "job", Quota: 64 << 20, Expires: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := proto.Dial(context.Background(), "tcp", a, proto.Hello{Token: tok}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	cctx, r, err := cl.DevicePrimaryCtxRetain(0, 0)
	if err != nil || r != proto.Success {
		t.Fatalf("cuDevicePrimaryCtxRetain: %v %v", r, err)
	}

	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no --to", []string{"--from", a, "--tenant", "job", "--secret-file", keyFile}, ExitUsage, "are required"},
		{"both a session and a tenant", []string{"--from", a, "--to", b, "--session", "1", "--tenant", "job", "--secret-file", keyFile}, ExitUsage, "one of --session and --tenant"},
		{"another pool's secret", []string{"--from", a, "--to", b, "--tenant", "job", "--secret-file", otherKey}, ExitError, "CUDA_ERROR_NOT_PERMITTED"},
		{"no such tenant", []string{"--from", a, "--to", b, "--tenant", "nobody", "--secret-file", keyFile}, ExitError, "no session"},
		{"a CA file without certificates", []string{"--from", a, "--to", b, "--tenant", "job", "--secret-file", keyFile, "--tls-ca-file", keyFile}, ExitUsage, "--tls-ca-file: " + keyFile + ": no PEM certificate in it"},
		{"TLS to a server in clear", []string{"--from", a, "--to", b, "--tenant", "job", "--secret-file", keyFile, "--tls-ca-file", caFile}, ExitError, "TLS with " + a},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := Run(context.Background(), append([]string{"remote", "migrate"}, tc.args...), &out, &errb); code != tc.code || !strings.Contains(errb.String(), tc.want) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, errb.String(), tc.code, tc.want)
			}
		})
	}

	var stop atomic.Bool
	calls := make(chan error, 1)
	go func() { // the program keeps calling while it moves
		for !stop.Load() {
			if r, err := cl.CtxSynchronize(cctx); err != nil || r != proto.Success {
				calls <- err
				return
			}
		}
		calls <- nil
	}()
	var out, errb bytes.Buffer
	code := Run(context.Background(), []string{"remote", "migrate", "--from", a, "--to", b, "--tenant", "job", "--secret-file", keyFile}, &out, &errb)
	stop.Store(true)
	if err := <-calls; err != nil {
		t.Fatalf("the client's calls failed across the move: %v", err)
	}
	if code != ExitOK || !strings.Contains(out.String(), "moved session 1 from "+a+" to "+b) {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
	if cl.Moves() != 1 {
		t.Errorf("the client followed %d moves", cl.Moves())
	}
}
