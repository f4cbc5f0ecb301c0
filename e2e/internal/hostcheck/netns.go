package hostcheck

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// NetNSDir is where `ip netns` binds its named network namespaces.
const NetNSDir = "/run/netns"

// NetNSInode returns the inode that identifies a network namespace, from a
// file that refers to it: a name bound by `ip netns add` (/run/netns/NAME)
// or /proc/PID/ns/net.
func NetNSInode(path string) (uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0, fmt.Errorf("network namespace %s: %w", path, err)
	}
	return st.Ino, nil
}

// procNetNS returns the inode of process pid's network namespace, from the
// link /proc/PID/ns/net ("net:[4026532281]"); 0 when it cannot be read.
func procNetNS(pid int) uint64 {
	l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		return 0
	}
	var ino uint64
	if _, err := fmt.Sscanf(l, "net:[%d]", &ino); err != nil {
		return 0
	}
	return ino
}

// NetNSes returns the named network namespaces (in NetNSDir) whose names
// begin with prefix, sorted.
func NetNSes(prefix string) ([]string, error) {
	ents, err := os.ReadDir(NetNSDir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix) {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out, nil
}

// Links returns the network interfaces of this process's network
// namespace whose names begin with prefix, sorted.
func Links(prefix string) ([]string, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("listing network interfaces: %w", err)
	}
	var out []string
	for _, i := range ifs {
		if strings.HasPrefix(i.Name, prefix) {
			out = append(out, i.Name)
		}
	}
	sort.Strings(out)
	return out, nil
}

// NetNSMounts returns the mount points in NetNSDir (the bindings of named
// network namespaces) whose names begin with prefix, in mountinfo order.
func NetNSMounts(prefix string) ([]string, error) {
	mounts, err := MountsUnder(NetNSDir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range mounts {
		if m != NetNSDir && strings.HasPrefix(filepath.Base(m), prefix) {
			out = append(out, m)
		}
	}
	return out, nil
}
