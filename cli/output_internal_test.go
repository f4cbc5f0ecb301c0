package cli

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// openTerminal opens a pseudo-terminal and returns its terminal side.
func openTerminal(t *testing.T) *os.File {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { ptmx.Close() })
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	tty, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tty.Close() })
	return tty
}

// TestColorsOnlyOnATerminal: colours where the output is a terminal and
// NO_COLOR is unset or empty; never in a pipe, a file or a buffer.
func TestColorsOnlyOnATerminal(t *testing.T) {
	tty := openTerminal(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	tests := []struct {
		name    string
		out     io.Writer
		noColor string
		want    bool
	}{
		{"terminal", tty, "", true},
		{"terminal, NO_COLOR", tty, "1", false},
		{"pipe", w, "", false},
		{"buffer", &bytes.Buffer{}, "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("NO_COLOR", tc.noColor)
			c := colorsFor(tc.out)
			if c.on != tc.want {
				t.Errorf("colours on: %v, want %v", c.on, tc.want)
			}
			painted := c.red("busy")
			if (painted != "busy") != tc.want {
				t.Errorf("red(busy) = %q", painted)
			}
		})
	}
}
