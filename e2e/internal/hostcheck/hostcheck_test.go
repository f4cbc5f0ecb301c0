package hostcheck

import (
	"os"
	"testing"
)

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
