package server_test

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumux/gpumux/remote/server"
)

func TestListenUnix(t *testing.T) {
	dir, err := os.MkdirTemp("", "gmxl")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)

	// A stale socket (its listener gone without removing it) is replaced.
	stale := filepath.Join(dir, "stale")
	ln, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	ln, err = server.ListenUnix(stale, 0o660)
	if err != nil {
		t.Fatalf("over a stale socket: %v", err)
	}
	if fi, err := os.Stat(stale); err != nil || fi.Mode().Perm() != 0o660 {
		t.Errorf("mode %v %v, want 0660", fi.Mode(), err)
	}

	// A live one is not.
	if _, err := server.ListenUnix(stale, 0o660); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("over a live socket: %v, want in use", err)
	}
	ln.Close()
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("closing the listener left the socket: %v", err)
	}

	// Nor is another file.
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o600)
	if _, err := server.ListenUnix(file, 0o660); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("over a file: %v, want not a socket", err)
	}
	if _, err := os.Stat(file); err != nil {
		t.Errorf("the file is gone: %v", err)
	}
}
