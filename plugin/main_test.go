package plugin_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	fakeOnce sync.Once
	fakePath string
	fakeErr  error
	fakeOut  []byte
)

// fakeMPS returns gpumux's stand-in MPS control daemon, built once for the
// tests that use it (GPU machines run only the real-GPU tests, without Go).
func fakeMPS(t *testing.T) string {
	t.Helper()
	fakeOnce.Do(func() {
		dir, err := os.MkdirTemp("", "gpumux-plugin-test-")
		if err != nil {
			fakeErr = err
			return
		}
		fakePath = filepath.Join(dir, "gpumux-fake-mps-control")
		fakeOut, fakeErr = exec.Command("go", "build", "-o", fakePath, "github.com/gpumux/gpumux/cmd/gpumux-fake-mps-control").CombinedOutput()
	})
	if fakeErr != nil {
		t.Fatalf("building the stand-in MPS control daemon: %v\n%s", fakeErr, fakeOut)
	}
	return fakePath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if fakePath != "" {
		os.RemoveAll(filepath.Dir(fakePath))
	}
	os.Exit(code)
}
