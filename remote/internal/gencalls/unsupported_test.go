package main

import (
	"os"
	"strings"
	"testing"
)

func TestParseUnsupported(t *testing.T) {
	calls := []Call{{Op: 1, Name: "cuInit"}}
	names, err := parseUnsupported("u.list", strings.NewReader("# c\ncuA\n\n  cuB # why\n"), calls)
	if err != nil || strings.Join(names, ",") != "cuA,cuB" {
		t.Fatalf("parseUnsupported = %v, %v; want [cuA cuB]", names, err)
	}
	for _, tc := range []struct{ src, want string }{
		{"cuInit\n", "cuInit is forwarded"},
		{"cuA\ncuA\n", "already listed on line 1"},
		{"cuA b\n", "not a CUDA driver entry point"},
		{"memcpy\n", "not a CUDA driver entry point"},
	} {
		if _, err := parseUnsupported("u.list", strings.NewReader(tc.src), calls); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseUnsupported(%q) = %v, want an error containing %q", tc.src, err, tc.want)
		}
	}
}

// TestUnsupportedUpToDate fails when unsupported.list changed without
// `go generate ./remote/ctest`.
func TestUnsupportedUpToDate(t *testing.T) {
	f, err := os.Open("../../proto/calls.def")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	calls, err := parseSpec("calls.def", f)
	if err != nil {
		t.Fatal(err)
	}
	u, err := os.Open("../../interposer/unsupported.list")
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	names, err := parseUnsupported("unsupported.list", u, calls)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../../interposer/zz_unsupported.c")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != genUnsupported(names) {
		t.Error("remote/interposer/zz_unsupported.c is stale: run `go generate ./remote/ctest`")
	}
}
