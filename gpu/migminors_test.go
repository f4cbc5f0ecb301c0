package gpu

import (
	"errors"
	"strings"
	"testing"
)

// The first lines of a real H200's /proc/driver/nvidia-caps/mig-minors.
const realMigMinors = `config 1
monitor 2
gpu0/gi0/access 3
gpu0/gi0/ci0/access 4
gpu0/gi0/ci1/access 5
gpu0/gi1/access 12
gpu0/gi1/ci0/access 13
`

func TestParseMigMinors(t *testing.T) {
	m, err := parseMigMinors(strings.NewReader(realMigMinors))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		gpu, gi, ci    int
		wantGI, wantCI int
		wantErr        error
	}{
		{0, 0, 0, 3, 4, nil},
		{0, 0, 1, 3, 5, nil},
		{0, 1, 0, 12, 13, nil},
		{1, 0, 0, -1, -1, ErrNotFound},
		{0, 1, 5, -1, -1, ErrNotFound},
	}
	for _, tc := range tests {
		gi, ci, err := m.lookup(tc.gpu, tc.gi, tc.ci)
		if gi != tc.wantGI || ci != tc.wantCI || !errors.Is(err, tc.wantErr) {
			t.Errorf("lookup(%d,%d,%d) = %d, %d, %v; want %d, %d, %v", tc.gpu, tc.gi, tc.ci, gi, ci, err, tc.wantGI, tc.wantCI, tc.wantErr)
		}
	}
	if _, _, err := migMinors(nil).lookup(0, 0, 0); !errors.Is(err, errNoMigMinors) {
		t.Errorf("lookup without a table: %v", err)
	}
}

func TestParseMigMinorsRejectsGarbage(t *testing.T) {
	for _, in := range []string{"config", "gpu0/gi0/access x", "a b c", "gpu0/gi0/access -1", "gpu0/gi0/access 99999999999"} {
		if _, err := parseMigMinors(strings.NewReader(in)); err == nil || !strings.Contains(err.Error(), "line 1") {
			t.Errorf("parse(%q) = %v, want an error naming line 1", in, err)
		}
	}
}

func FuzzParseMigMinors(f *testing.F) {
	f.Add(realMigMinors)
	f.Add("gpu0/gi0/access 3\n\n  \ngpu7/gi14/ci7/access 1079")
	f.Fuzz(func(t *testing.T, in string) {
		m, err := parseMigMinors(strings.NewReader(in))
		if err != nil {
			return
		}
		for k, v := range m {
			if v < 0 || strings.ContainsAny(k, " \t\n") {
				t.Fatalf("accepted entry %q = %d", k, v)
			}
		}
	})
}
