package main

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestParseLdCache reads this machine's linker cache and finds what
// ldconfig -p lists in it.
func TestParseLdCache(t *testing.T) {
	b, err := os.ReadFile("/etc/ld.so.cache")
	if err != nil {
		t.Skip(err)
	}
	out, err := exec.Command("ldconfig", "-p").Output()
	if err != nil {
		t.Skip("ldconfig -p:", err)
	}
	entries, err := parseLdCache(b)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.name+" "+e.path)
	}
	line := regexp.MustCompile(`^\s+(\S+) \(.*\) => (\S+)$`)
	var want []string
	for _, l := range strings.Split(string(out), "\n") {
		if m := line.FindStringSubmatch(l); m != nil {
			want = append(want, m[1]+" "+m[2])
		}
	}
	if len(want) == 0 || !slices.Equal(got, want) {
		t.Errorf("parsed %d entries, ldconfig -p lists %d:\n got %v\nwant %v", len(got), len(want), got, want)
	}
	if _, err := parseLdCache(b[:30]); err == nil {
		t.Error("a truncated cache parsed")
	}
	if _, err := parseLdCache([]byte("ld.so-1.7.0\x00\x00\x00")); err == nil {
		t.Error("the old format parsed")
	}
}
