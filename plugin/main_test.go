package plugin_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// fakeMPSControl is gpumux's stand-in MPS control daemon, built for the tests.
var fakeMPSControl string

func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "gpumux-plugin-test-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		fakeMPSControl = filepath.Join(dir, "gpumux-fake-mps-control")
		out, err := exec.Command("go", "build", "-o", fakeMPSControl, "github.com/gpumux/gpumux/cmd/gpumux-fake-mps-control").CombinedOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "building the stand-in MPS control daemon: %v\n%s", err, out)
			return 1
		}
		return m.Run()
	}())
}
