package server_test

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumux/gpumux/remote/fakecuda"
	"github.com/gpumux/gpumux/remote/proto"
	"github.com/gpumux/gpumux/remote/server"
)

// noDevice is a backend whose cuInit finds no GPU.
type noDevice struct{ *fakecuda.Backend }

func (noDevice) Init() proto.Result { return proto.ErrNoDevice }

// TestHealth: a server is healthy only while a listener accepts on an
// initialised backend; before, after, and with a backend that did not
// initialise it says why not.
func TestHealth(t *testing.T) {
	fake, err := fakecuda.New()
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(fake, server.WithInsecureNoAuth())
	if err := srv.Health(); err == nil || !strings.Contains(err.Error(), "no listener is accepting") {
		t.Fatalf("Health before Serve = %v, want not serving", err)
	}
	ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "s"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	// Serve starts accepting in its own time: wait for it, then dial to
	// prove the healthy server really takes connections.
	for srv.Health() != nil {
		select {
		case err := <-done:
			t.Fatalf("Serve returned early: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	c, err := proto.Dial(t.Context(), "unix", ln.Addr().String(), proto.Hello{}, 5*time.Second)
	if err != nil {
		t.Fatalf("healthy server refuses a client: %v", err)
	}
	c.Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if err := srv.Health(); err == nil {
		t.Fatal("Health after Serve returned = nil, want not serving")
	}

	broken := server.New(noDevice{fake}, server.WithInsecureNoAuth())
	ln, err = net.Listen("unix", filepath.Join(t.TempDir(), "s"))
	if err != nil {
		t.Fatal(err)
	}
	if err := broken.Serve(t.Context(), ln); err == nil {
		t.Fatal("Serve on a backend without a device = nil")
	}
	if err := broken.Health(); err == nil || !strings.Contains(err.Error(), "cuInit") || !strings.Contains(err.Error(), proto.ErrNoDevice.String()) {
		t.Fatalf("Health after a failed cuInit = %v, want the cuInit error", err)
	}
}
