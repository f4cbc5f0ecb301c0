package sim

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"syscall"

	"golang.org/x/sys/unix"
)

// Device numbers as on the real H200 machine (ls -l /dev/nvidia*). The uvm
// and caps majors are allocated dynamically by the kernel; these are the
// values seen there.
const (
	nvidiaMajor    = 195
	nvidiactlMinor = 255
	uvmMajor       = 238
	capsMajor      = 241
	capConfig      = 1 // nvidia-cap1: mig/config
	capMonitor     = 2 // nvidia-cap2: mig/monitor
)

// ErrMknodNotPermitted is wrapped by EnsureDeviceNodes when the process may
// not create device nodes (it needs root / CAP_MKNOD).
var ErrMknodNotPermitted = errors.New("mknod not permitted: creating device nodes needs root / CAP_MKNOD")

// DevRoot is <stateDir>/sim/<name>/dev, where EnsureDeviceNodes creates the
// device nodes (nvidia0, nvidiactl, nvidia-uvm, nvidia-caps/nvidia-capN, ...).
func (n *Node) DevRoot() string { return filepath.Join(n.dir, "dev") }

// MigMinorsPath is <stateDir>/sim/<name>/proc/driver/nvidia-caps/mig-minors,
// the node's copy of /proc/driver/nvidia-caps/mig-minors.
func (n *Node) MigMinorsPath() string {
	return filepath.Join(n.dir, "proc", "driver", "nvidia-caps", "mig-minors")
}

type devNode struct {
	path         string
	major, minor uint32
	mode         uint32
}

// EnsureDeviceNodes creates (idempotently) the character devices under
// DevRoot with the real major:minor numbers: nvidia<minor> 195:<minor> for
// every GPU, nvidiactl 195:255, nvidia-uvm 238:0, nvidia-uvm-tools 238:1, and
// nvidia-caps/nvidia-cap<N> (major 241) for config (1), monitor (2) and the
// access minor of every existing GPU and compute instance. Like the real
// driver it does not remove the cap nodes of destroyed instances. It also
// writes the mig-minors file. Without root / CAP_MKNOD the error wraps
// ErrMknodNotPermitted.
func (n *Node) EnsureDeviceNodes() error {
	n.mu.Lock()
	err := n.refreshLocked()
	var nodes []devNode
	if err == nil {
		nodes = n.deviceNodesLocked()
	}
	n.mu.Unlock()
	if err != nil {
		return err
	}
	for _, dir := range []string{n.DevRoot(), filepath.Join(n.DevRoot(), "nvidia-caps")} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("sim: %w", err)
		}
	}
	for _, d := range nodes {
		if err := ensureCharDev(d); err != nil {
			return err
		}
	}
	return n.writeMigMinors()
}

func (n *Node) deviceNodesLocked() []devNode {
	root, caps := n.DevRoot(), filepath.Join(n.DevRoot(), "nvidia-caps")
	capNode := func(minor int, mode uint32) devNode {
		return devNode{filepath.Join(caps, fmt.Sprintf("nvidia-cap%d", minor)), capsMajor, uint32(minor), mode}
	}
	nodes := []devNode{
		{filepath.Join(root, "nvidiactl"), nvidiaMajor, nvidiactlMinor, 0o666},
		{filepath.Join(root, "nvidia-uvm"), uvmMajor, 0, 0o666},
		{filepath.Join(root, "nvidia-uvm-tools"), uvmMajor, 1, 0o666},
		capNode(capConfig, 0o400),
		capNode(capMonitor, 0o444),
	}
	for _, g := range n.st.GPUs {
		nodes = append(nodes, devNode{filepath.Join(root, fmt.Sprintf("nvidia%d", g.Minor)), nvidiaMajor, uint32(g.Minor), 0o666})
		for _, gi := range g.GIs {
			nodes = append(nodes, capNode(giAccessMinor(g.Minor, gi.ID), 0o444))
			for _, ci := range gi.CIs {
				nodes = append(nodes, capNode(ciAccessMinor(g.Minor, gi.ID, ci.ID), 0o444))
			}
		}
	}
	return nodes
}

func ensureCharDev(d devNode) error {
	if fi, err := os.Lstat(d.path); err == nil {
		st, ok := fi.Sys().(*syscall.Stat_t)
		if ok && fi.Mode()&os.ModeCharDevice != 0 &&
			unix.Major(uint64(st.Rdev)) == d.major && unix.Minor(uint64(st.Rdev)) == d.minor {
			if fi.Mode().Perm() != os.FileMode(d.mode) {
				return os.Chmod(d.path, os.FileMode(d.mode))
			}
			return nil
		}
		if err := os.Remove(d.path); err != nil {
			return fmt.Errorf("sim: %w", err)
		}
	}
	dev := unix.Mkdev(d.major, d.minor)
	if err := unix.Mknod(d.path, unix.S_IFCHR|d.mode, int(dev)); err != nil {
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			return fmt.Errorf("sim: mknod %s %d:%d: %w (%w)", d.path, d.major, d.minor, ErrMknodNotPermitted, err)
		}
		return fmt.Errorf("sim: mknod %s %d:%d: %w", d.path, d.major, d.minor, err)
	}
	// mknod applies the umask; set the intended mode.
	if err := os.Chmod(d.path, os.FileMode(d.mode)); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	return nil
}

// migMinors renders /proc/driver/nvidia-caps/mig-minors for GPUs with the
// given device minors: "config 1", "monitor 2", then for each GPU (by minor)
// gpu<m>/gi<G>/access and gpu<m>/gi<G>/ci<C>/access for G in 0..14, C in 0..7.
func migMinors(minors []int) []byte {
	sorted := append([]int(nil), minors...)
	sort.Ints(sorted)
	var b bytes.Buffer
	fmt.Fprintf(&b, "config %d\nmonitor %d\n", capConfig, capMonitor)
	for _, m := range sorted {
		for gi := uint32(0); gi < maxGIPerGPU; gi++ {
			fmt.Fprintf(&b, "gpu%d/gi%d/access %d\n", m, gi, giAccessMinor(m, gi))
			for ci := uint32(0); ci < maxCIPerGI; ci++ {
				fmt.Fprintf(&b, "gpu%d/gi%d/ci%d/access %d\n", m, gi, ci, ciAccessMinor(m, gi, ci))
			}
		}
	}
	return b.Bytes()
}

// writeMigMinors writes the mig-minors file if it is missing or differs.
func (n *Node) writeMigMinors() error {
	n.mu.Lock()
	var minors []int
	for _, g := range n.st.GPUs {
		minors = append(minors, g.Minor)
	}
	n.mu.Unlock()
	want := migMinors(minors)
	path := n.MigMinorsPath()
	if have, err := os.ReadFile(path); err == nil && bytes.Equal(have, want) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	return writeFileAtomic(path, want, 0o444, nil)
}
