package hostcheck

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Proc is a process found by Procs.
type Proc struct {
	PID     int
	Cmdline string
	// Why says how it was attributed to the owner.
	Why string
}

func (p Proc) String() string { return fmt.Sprintf("pid %d (%s): %s", p.PID, p.Why, p.Cmdline) }

// ProcType is Proc and the harnesses' own process types of the same fields
// (nomadagent.Proc, ctrd.Proc), which Procs and KillProcs work on.
type ProcType interface {
	~struct {
		PID     int
		Cmdline string
		Why     string
	}
}

// Owner says which processes belong to a daemon under test and how Why
// words each reason.
type Owner struct {
	// PID is the daemon's process: it (Why Name) and the members of its
	// process group (Why "<Name> process group") belong.
	PID int
	// Name names the daemon in Why, e.g. "agent" or "containerd".
	Name string
	// Dir: a process whose command line names Dir (Why "command line names
	// <DirName>"), or whose root or cwd is at or under Dir (Why "root
	// <path>", "cwd <path>"), belongs.
	Dir     string
	DirName string
	// Marker is the KEY=VALUE entry the daemon's environment carries: a
	// process whose environment holds it belongs (Why "inherited <Name>
	// environment").
	Marker string
	// NetNS: a process in the network namespace bound at this path (e.g.
	// /run/netns/NAME) belongs (Why "in network namespace <path>"): every
	// process of an agent started in a namespace of its own, its tasks
	// included, whatever their environment or process group.
	NetNS string
	// Descendants: the live descendants of the processes found belong too
	// (Why "child of pid <ppid>"), e.g. container processes, which have
	// their own root and a clean environment, under their shim.
	Descendants bool
}

// Procs lists the live (not zombie) processes, other than this one, that
// belong to o, in /proc order.
func Procs[P ProcType](o Owner) ([]P, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	self := os.Getpid()
	var netns uint64
	if o.NetNS != "" {
		if netns, err = NetNSInode(o.NetNS); err != nil {
			return nil, err
		}
	}
	type proc struct {
		Proc
		ppid int
	}
	var all []proc
	found := map[int]bool{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // gone
		}
		state, ppid, pgid := ParseStat(stat)
		if dead(state) {
			continue // zombies hold no resources
		}
		cl := Cmdline(pid)
		why := o.why(pid, pgid, cl)
		if why == "" && netns != 0 && procNetNS(pid) == netns {
			why = "in network namespace " + o.NetNS
		}
		all = append(all, proc{Proc{PID: pid, Cmdline: cl, Why: why}, ppid})
		if why != "" {
			found[pid] = true
		}
	}
	for changed := o.Descendants; changed; {
		changed = false
		for i := range all {
			if !found[all[i].PID] && found[all[i].ppid] {
				all[i].Why = fmt.Sprintf("child of pid %d", all[i].ppid)
				found[all[i].PID] = true
				changed = true
			}
		}
	}
	var out []P
	for _, p := range all {
		if found[p.PID] {
			out = append(out, P(p.Proc))
		}
	}
	return out, nil
}

// why says how process pid (of process group pgid, command line cl)
// belongs to o by its PID, Dir and Marker (those set), "" when it does
// not.
func (o Owner) why(pid, pgid int, cl string) string {
	switch {
	case o.PID > 0 && pid == o.PID:
		return o.Name
	case o.PID > 0 && pgid == o.PID:
		return o.Name + " process group"
	case o.Dir != "" && strings.Contains(cl, o.Dir):
		return "command line names " + o.DirName
	}
	dir := filepath.Join("/proc", strconv.Itoa(pid))
	if o.Marker != "" {
		marker := []byte(o.Marker + "\x00")
		if env, err := os.ReadFile(filepath.Join(dir, "environ")); err == nil &&
			(bytes.Contains(env, marker) || bytes.HasSuffix(env, marker[:len(marker)-1])) {
			return "inherited " + o.Name + " environment"
		}
	}
	if o.Dir == "" {
		return ""
	}
	for _, l := range []string{"root", "cwd"} {
		if p, err := os.Readlink(filepath.Join(dir, l)); err == nil && Under(p, o.Dir) {
			return l + " " + p
		}
	}
	return ""
}

// ParseStat returns the state, parent and process group from
// /proc/PID/stat.
func ParseStat(b []byte) (state string, ppid, pgid int) {
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "", 0, 0
	}
	f := strings.Fields(s[i+1:])
	// fields after comm: state ppid pgrp ...
	if len(f) < 3 {
		return "", 0, 0
	}
	ppid, _ = strconv.Atoi(f[1])
	pgid, _ = strconv.Atoi(f[2])
	return f[0], ppid, pgid
}

// dead says whether a process in this state (from ParseStat) is a zombie
// or gone.
func dead(state string) bool { return state == "Z" || state == "X" }

// Cmdline returns the command line of process pid, its arguments joined by
// spaces; "" when it cannot be read.
func Cmdline(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
}

// WaitGone waits until none of pids is a live (non-zombie) process, or
// timeout.
func WaitGone(pids []int, timeout time.Duration) {
	for end := time.Now().Add(timeout); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		alive := false
		for _, pid := range pids {
			if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
				if st, _, _ := ParseStat(b); !dead(st) {
					alive = true
					break
				}
			}
		}
		if !alive {
			return
		}
	}
}
