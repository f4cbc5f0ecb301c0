package sim

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestStampAfter checks that state file versions get strictly increasing
// mtimes, even when the previous one is ahead of the clock.
func TestStampAfter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, prev := range []int64{0, time.Now().UnixNano(), time.Now().Add(time.Hour).UnixNano()} {
		if err := stampAfter(path, prev); err != nil {
			t.Fatal(err)
		}
		ver, err := statVersion(path)
		if err != nil {
			t.Fatal(err)
		}
		if ver.mtime <= prev {
			t.Errorf("stampAfter(%d): mtime %d", prev, ver.mtime)
		}
	}
}
