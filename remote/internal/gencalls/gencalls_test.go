package main

import (
	"go/format"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseLineErrors(t *testing.T) {
	for _, tc := range []struct{ line, want string }{
		{"cuInit sync : in u32 Flags", "want `<op> <name>"},
		{"0 cuInit sync : in u32 Flags", "want 1..32767"},
		{"1 cuInit sync,async : in u32 Flags", "exactly one of sync and async"},
		{"1 cuInit export : in u32 Flags", "exactly one of sync and async"},
		{"1 cuInit sync,fast : in u32 Flags", `flag "fast"`},
		{"1 cuInit sync : in float Flags", `kind "float" is not an input kind`},
		{"1 cuInit sync : out hostin x", `kind "hostin" is not an output kind`},
		{"1 cuInit sync : up u32 Flags", `direction "up"`},
		{"1 cuInit sync : in u32 1x", "not a C identifier"},
		{"1 cuInit sync : in u32 a; in u32 a", "listed twice"},
		{"1 cuX async : out i32 a", "async call has no outputs"},
		{"1 cuX sync : in hostin p", "needs size="},
		{"1 cuX sync : in hostin p size=n; in u32 n", "needs size="},
		{"1 cuX sync : out str s", "needs len="},
		{"1 cuX sync : in u32 n size=m", "takes no size="},
		{"1 cuX sync : in u32 n color=red", `attribute "color=red"`},
		{"1 cuX sync : in image a; in image b", "at most one streamed"},
		{"1 cuX async,cache : in u32 n", "cannot be cached"},
		{"1 cuX async,uncache : in mod m", "uncache needs a sync call"},
		{"1 cuX sync,cache,uncache : in mod m", "uncache needs a sync call"},
		{"1 cuX sync,fast : in mod m", `flag "fast"`},
	} {
		if _, err := parseLine(tc.line); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseLine(%q) = %v, want an error containing %q", tc.line, err, tc.want)
		}
	}
}

func TestParseSpecDuplicates(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"1 cuA sync :\n1 cuB sync :\n", "op 1 is already cuA"},
		{"1 cuA sync :\n2 cuA sync :\n", "cuA is listed twice"},
		{"# nothing\n", "no calls"},
	} {
		if _, err := parseSpec("t.def", strings.NewReader(tc.src)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseSpec(%q) = %v, want %q", tc.src, err, tc.want)
		}
	}
}

// TestGeneratedUpToDate fails when calls.def changed without
// `go generate ./remote/proto`: the checked-in Go and C must be exactly
// what the generator makes of the checked-in list.
func TestGeneratedUpToDate(t *testing.T) {
	f, err := os.Open("../../proto/calls.def")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	calls, err := parseSpec("calls.def", f)
	if err != nil {
		t.Fatal(err)
	}
	goSrc, err := format.Source([]byte(genGo(calls)))
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		"../../proto/zz_calls.go":     string(goSrc),
		"../../interposer/zz_calls.c": genC(calls),
		"../../interposer/zz_calls.h": genCHeader(calls),
	} {
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("%s is stale: run `go generate ./remote/proto`", filepath.Clean(path))
		}
	}
}
