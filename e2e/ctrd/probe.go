package ctrd

import (
	"bufio"
	"strings"
)

// Probe is what the probe program (e2e/probe) printed.
type Probe struct {
	// Env holds the NVIDIA_*, CUDA_* and GPUMUX_* environment variables.
	Env map[string]string
	// Devices maps each character device under /dev to "major:minor".
	Devices map[string]string
	// Mounts are the mount points, in mountinfo order.
	Mounts []string
	// ReadOnly holds the mount points that are read-only.
	ReadOnly map[string]bool
	// LdCache maps each library name in the container's linker cache to
	// the file it names (the first entry of a name, as the loader takes).
	LdCache map[string]string
	// Programs maps nvidia-smi and nvidia-debugdump, where PATH has them,
	// to the file each is (links resolved).
	Programs map[string]string
	// Other holds lines that are none of the above.
	Other []string
}

// ParseProbe parses the probe's stdout.
func ParseProbe(stdout string) Probe {
	p := Probe{Env: map[string]string{}, Devices: map[string]string{}, ReadOnly: map[string]bool{}, LdCache: map[string]string{}, Programs: map[string]string{}}
	sc := bufio.NewScanner(strings.NewReader(stdout))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		kind, rest, _ := strings.Cut(line, " ")
		switch kind {
		case "ENV":
			k, v, _ := strings.Cut(rest, "=")
			p.Env[k] = v
			continue
		case "DEV":
			if i := strings.LastIndexByte(rest, ' '); i > 0 {
				p.Devices[rest[:i]] = rest[i+1:]
				continue
			}
		case "MOUNT":
			point, mode, _ := cutLast(rest)
			p.Mounts = append(p.Mounts, point)
			p.ReadOnly[point] = mode == "ro"
			continue
		case "PROGRAM":
			if name, path, ok := strings.Cut(rest, " "); ok {
				p.Programs[name] = path
				continue
			}
		case "LDCACHE":
			name, path, ok := strings.Cut(rest, " ")
			if _, seen := p.LdCache[name]; ok && !seen {
				p.LdCache[name] = path
			}
			continue
		}
		if line != "" {
			p.Other = append(p.Other, line)
		}
	}
	return p
}

// cutLast cuts s around its last space.
func cutLast(s string) (before, after string, found bool) {
	if i := strings.LastIndexByte(s, ' '); i >= 0 {
		return s[:i], s[i+1:], true
	}
	return s, "", false
}

// HasMount says whether mountpoint is among the mounts.
func (p Probe) HasMount(mountpoint string) bool {
	for _, m := range p.Mounts {
		if m == mountpoint {
			return true
		}
	}
	return false
}
