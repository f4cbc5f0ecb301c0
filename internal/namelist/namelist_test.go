package namelist

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadFile: the lists' syntax.
func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ src, want, err string }{
		{"# c\ncuA\n\n  cuB # why\n", "cuA,cuB", ""},
		{"cuA\ncuA\n", "", "already listed on line 1"},
		{"cu A\n", "", "not a C identifier"},
	} {
		p := filepath.Join(dir, "list")
		if err := os.WriteFile(p, []byte(tc.src), 0o644); err != nil {
			t.Fatal(err)
		}
		names, err := ReadFile(p)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ReadFile(%q) = %v, want an error containing %q", tc.src, err, tc.err)
			}
			continue
		}
		if err != nil || strings.Join(names, ",") != tc.want {
			t.Errorf("ReadFile(%q) = %v, %v; want %s", tc.src, names, err, tc.want)
		}
	}
	if _, err := ReadFile(filepath.Join(dir, "absent")); err == nil {
		t.Error("ReadFile of a missing file: no error")
	}
}
