package mountinfo

import (
	"reflect"
	"testing"
)

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{
		`/a/b`:          "/a/b",
		`/a\040b`:       "/a b",
		`/a\011b\134c`:  "/a\tb\\c",
		`/nl\012x`:      "/nl\nx",
		`/trailing\04`:  `/trailing\04`,
		`/x\0401\040`:   "/x 1 ",
		`/not\999octal`: `/not\999octal`,
		`/end\`:         `/end\`,
	} {
		if got := Unescape(in); got != want {
			t.Errorf("Unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParse(t *testing.T) {
	mi := `22 1 0:21 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
35 22 0:30 / /sys/fs/cgroup rw,nosuid shared:9 - cgroup2 cgroup2 rw
36 22 0:31 / /tmp/x\040y rw - tmpfs tmpfs rw
37 22 0:21 /lib/libcuda.so.1 /usr/lib/libcuda.so.1 ro,nosuid,nodev,relatime - ext4 /dev/sda1 rw
38 22 8:2 /state\040dir/driver/x /usr/local/nvidia ro - ext4 /dev/sda2 rw
short line
`
	want := []Mount{
		{"0:21", "/", "/", "ext4", false},
		{"0:30", "/", "/sys/fs/cgroup", "cgroup2", false},
		{"0:31", "/", "/tmp/x y", "tmpfs", false},
		{"0:21", "/lib/libcuda.so.1", "/usr/lib/libcuda.so.1", "ext4", true},
		{"8:2", "/state dir/driver/x", "/usr/local/nvidia", "ext4", true},
	}
	if got := Parse([]byte(mi)); !reflect.DeepEqual(got, want) {
		t.Errorf("Parse = %+v, want %+v", got, want)
	}
}
