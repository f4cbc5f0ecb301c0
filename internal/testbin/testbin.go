package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	once sync.Once
	dir  string
	path string
	err  error
	out  []byte
)

// FakeMPS returns gpumux-fake-mps-control (see BuildFakeMPS), or fails
// the test.
func FakeMPS(tb testing.TB) string {
	tb.Helper()
	bin, err := BuildFakeMPS()
	if err != nil {
		tb.Fatal(err)
	}
	return bin
}

// BuildFakeMPS returns gpumux-fake-mps-control: $GPUMUX_FAKE_MPS_CONTROL
// when set (a prebuilt one, for machines without Go: make gpu-bin), else
// one built from this module the first time it is asked for.
func BuildFakeMPS() (string, error) {
	if prebuilt := os.Getenv("GPUMUX_FAKE_MPS_CONTROL"); prebuilt != "" {
		return prebuilt, nil
	}
	once.Do(func() {
		if dir, err = os.MkdirTemp("", "gpumux-testbin-"); err != nil {
			return
		}
		path = filepath.Join(dir, "gpumux-fake-mps-control")
		out, err = exec.Command("go", "build", "-o", path, "github.com/gpumux/gpumux/cmd/gpumux-fake-mps-control").CombinedOutput()
	})
	if err != nil {
		return "", fmt.Errorf("building the stand-in MPS control daemon: %w\n%s", err, out)
	}
	return path, nil
}

// Main runs the tests, then removes what FakeMPS built, and returns the
// exit code.
func Main(m *testing.M) int {
	code := m.Run()
	if dir != "" {
		os.RemoveAll(dir)
	}
	return code
}

// RuncInitName is the name runc's init process gives itself: its comm.
const RuncInitName = "runc:[2:INIT]"

// RuncInit writes into dir a stand-in of runc's init and returns its path:
// a script whose process has runc's init's name (RuncInitName, its comm,
// which is the script's name) and runs its arguments as a child, as
// runc's init runs a createContainer hook.
func RuncInit(dir string) (string, error) {
	p := filepath.Join(dir, RuncInitName)
	return p, os.WriteFile(p, []byte("#!/bin/sh\n\"$@\"\nexit $?\n"), 0o755)
}
