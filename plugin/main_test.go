package plugin_test

import (
	"os"
	"testing"

	"github.com/gpumux/gpumux/internal/testbin"
)

// fakeMPS returns gpumux's stand-in MPS control daemon, built once for the
// tests that use it (GPU machines run only the real-GPU tests, without Go).
func fakeMPS(t *testing.T) string { return testbin.FakeMPS(t) }

func TestMain(m *testing.M) { os.Exit(testbin.Main(m)) }
