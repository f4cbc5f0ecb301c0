package server

import (
	"slices"
	"strings"
	"testing"
)

func TestOverlapping(t *testing.T) {
	maps := strings.Join([]string{
		"204c00000-300200000 ---p 00000000 00:00 0",
		"390000000000-390000200000 rw-s 00000000 00:05 1234   /dev/nvidiactl",
		"3900ffe00000-391000000000 ---p 00000000 00:00 0",
		"7fb1faddf000-7fb400000000 ---p 00000000 00:00 0",
		"garbage",
	}, "\n")
	for _, tc := range []struct {
		name   string
		lo, hi uint64
		want   []int
	}{
		{"the window", 0x3900_0000_0000, 0x3a00_0000_0000, []int{1, 2}},
		{"ends where it starts", 0x3800_0000_0000, 0x3900_0000_0000, nil},
		{"starts where it ends", 0x3910_0000_0000, 0x3a00_0000_0000, nil},
		{"inside one", 0x3900_0010_0000, 0x3900_0010_1000, []int{1}},
		{"everything low", 0, 0x1000_0000_0000, []int{0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lines := strings.Split(maps, "\n")
			var want []string
			for _, i := range tc.want {
				want = append(want, strings.Join(strings.Fields(lines[i]), " "))
			}
			if got := overlapping(strings.NewReader(maps), tc.lo, tc.hi); !slices.Equal(got, want) {
				t.Errorf("overlapping(%#x, %#x) = %q, want %q", tc.lo, tc.hi, got, want)
			}
		})
	}
}
