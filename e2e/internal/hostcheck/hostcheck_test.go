package hostcheck

import (
	"os"
	"reflect"
	"testing"
)

func TestUnescapeMountPath(t *testing.T) {
	for in, want := range map[string]string{
		`/a/b`:         "/a/b",
		`/a\040b`:      "/a b",
		`/a\011b\134c`: "/a\tb\\c",
		`/trailing\04`: `/trailing\04`,
		`/x\0401\040`:  "/x 1 ",
	} {
		if got := UnescapeMountPath(in); got != want {
			t.Errorf("UnescapeMountPath(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseMountinfo(t *testing.T) {
	mi := `22 1 0:21 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
35 22 0:30 / /sys/fs/cgroup rw,nosuid shared:9 - cgroup2 cgroup2 rw
36 22 0:31 / /tmp/x\040y rw - tmpfs tmpfs rw
37 22 0:21 /lib/libcuda.so.1 /usr/lib/libcuda.so.1 ro,nosuid,nodev,relatime - ext4 /dev/sda1 rw
short line
`
	want := []Mount{{"/", "ext4", false}, {"/sys/fs/cgroup", "cgroup2", false}, {"/tmp/x y", "tmpfs", false}, {"/usr/lib/libcuda.so.1", "ext4", true}}
	if got := ParseMountinfo([]byte(mi)); !reflect.DeepEqual(got, want) {
		t.Errorf("ParseMountinfo = %+v, want %+v", got, want)
	}
}

func TestParseStat(t *testing.T) {
	state, ppid, pgid := ParseStat([]byte("42 (a) b (c)) S 7 42 42 0 -1 4194560"))
	if state != "S" || ppid != 7 || pgid != 42 {
		t.Errorf("ParseStat = %q, %d, %d, want \"S\", 7, 42", state, ppid, pgid)
	}
	if state, ppid, pgid := ParseStat([]byte("42 (trunc")); state != "" || ppid != 0 || pgid != 0 {
		t.Errorf("ParseStat of a truncated line = %q, %d, %d, want zeros", state, ppid, pgid)
	}
}

// TestOwnerUnsetFields: an owner known by its network namespace alone
// (netns.Network's) claims no process by pid, process group, command line,
// environment, root or cwd: not the kernel's threads of process group 0,
// not this process.
func TestOwnerUnsetFields(t *testing.T) {
	o := Owner{NetNS: "/run/netns/none"}
	for _, tc := range []struct{ pid, pgid int }{{2, 0}, {os.Getpid(), os.Getpid()}} {
		if why := o.why(tc.pid, tc.pgid, "anything"); why != "" {
			t.Errorf("why(%d, %d) = %q, want none", tc.pid, tc.pgid, why)
		}
	}
	if _, err := Procs[Proc](o); err == nil {
		t.Error("Procs of an owner whose namespace does not exist: no error")
	}
}
