package procstat

import (
	"errors"
	"os"
	"testing"
)

func TestParse(t *testing.T) {
	tail := " 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 4242 0 0" // fields 7-21 (15), starttime, 23-24
	for _, tc := range []struct {
		name, stat string
		want       Stat
		err        bool
	}{
		{"a process", "123 (runc:[2:INIT]) S 77 123 77" + tail, Stat{State: 'S', PPID: 77, Start: 4242}, false},
		{"a name with spaces and parentheses", "9 (a) b) (c ) Z 1 9 9" + tail, Stat{State: 'Z', PPID: 1, Start: 4242}, false},
		{"no command name", "123 runc S 77", Stat{}, true},
		{"cut short", "123 (runc) S 77 123 77 0 0", Stat{}, true},
		{"a parent that is no number", "123 (runc) S x 123 77" + tail, Stat{}, true},
		{"a state of two letters", "123 (runc) SS 77 123 77" + tail, Stat{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse([]byte(tc.stat))
			if (err != nil) != tc.err || got != tc.want {
				t.Errorf("Parse(%q) = %+v, %v; want %+v, error %v", tc.stat, got, err, tc.want, tc.err)
			}
			if err != nil && !errors.Is(err, ErrMalformed) {
				t.Errorf("error %v is not ErrMalformed", err)
			}
		})
	}
}

// TestRead reads this process's stat file: running, its parent this
// process's, started.
func TestRead(t *testing.T) {
	s, err := Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if s.Gone() || s.PPID != os.Getppid() || s.Start == 0 {
		t.Errorf("this process's stat: %+v; want it running, its parent %d, a start time", s, os.Getppid())
	}
	if _, err := Read(-1); err == nil {
		t.Error("the stat of PID -1 was read")
	}
}
