package server

import (
	"bufio"
	"io"
	"os"
	"strconv"
	"strings"
)

// addressUsers names what this process has mapped in [lo, hi): the lines
// of /proc/self/maps that overlap it, for a log line that says why a
// migrated window's base was not free. Nothing when it cannot be read.
func addressUsers(lo, hi uint64) []string {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return nil
	}
	defer f.Close()
	return overlapping(f, lo, hi)
}

// overlapping returns the lines of a maps file whose ranges overlap [lo, hi).
func overlapping(r io.Reader, lo, hi uint64) []string {
	var out []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		rng, _, _ := strings.Cut(line, " ")
		a, b, ok := strings.Cut(rng, "-")
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(a, 16, 64)
		end, err2 := strconv.ParseUint(b, 16, 64)
		if err1 == nil && err2 == nil && start < hi && end > lo {
			out = append(out, strings.Join(strings.Fields(line), " "))
		}
	}
	return out
}
