package procstat

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
)

// Stat is what gpumux reads of a process's stat file.
type Stat struct {
	State byte   // R, S, D, Z (zombie), X (dead), ...
	PPID  int    // the parent's PID
	Start uint64 // the start time, in clock ticks after boot
}

// Gone says whether the process has exited: a zombie or dead.
func (s Stat) Gone() bool { return s.State == 'Z' || s.State == 'X' || s.State == 'x' }

// Read reads /proc/PID/stat.
func Read(pid int) (Stat, error) {
	return ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
}

// ReadFile reads a stat file: a process's, or a thread's
// (/proc/PID/task/TID/stat).
func ReadFile(path string) (Stat, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Stat{}, err
	}
	s, err := Parse(b)
	if err != nil {
		return Stat{}, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// ErrMalformed is a stat file that does not read as one.
var ErrMalformed = errors.New("malformed stat file")

// Parse reads the fields of a stat file's contents.
func Parse(b []byte) (Stat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return Stat{}, fmt.Errorf("%w: no command name", ErrMalformed)
	}
	// Fields 3 on: state, ppid, ... starttime (22).
	f := bytes.Fields(b[i+1:])
	const ppidField, startField = 4 - 3, 22 - 3
	if len(f) <= startField || len(f[0]) != 1 {
		return Stat{}, fmt.Errorf("%w: %d fields after the command name", ErrMalformed, len(f))
	}
	ppid, err := strconv.Atoi(string(f[ppidField]))
	if err != nil {
		return Stat{}, fmt.Errorf("%w: parent %q", ErrMalformed, f[ppidField])
	}
	start, err := strconv.ParseUint(string(f[startField]), 10, 64)
	if err != nil {
		return Stat{}, fmt.Errorf("%w: start time %q", ErrMalformed, f[startField])
	}
	return Stat{State: f[0][0], PPID: ppid, Start: start}, nil
}
