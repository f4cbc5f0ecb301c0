package hostcheck

import (
	"strings"

	"github.com/gpumux/gpumux/internal/mountinfo"
)

// Mounts returns the mounts of /proc/self/mountinfo, in order.
func Mounts() ([]mountinfo.Mount, error) {
	return mountinfo.Read("/proc/self/mountinfo")
}

// MountsUnder returns the mount points at or under dir, in mountinfo order.
func MountsUnder(dir string) ([]string, error) {
	mounts, err := Mounts()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range mounts {
		if Under(m.Point, dir) {
			out = append(out, m.Point)
		}
	}
	return out, nil
}

// CgroupMounts returns the mount points of the cgroup (v1) and cgroup2
// hierarchies, each once, in mountinfo order.
func CgroupMounts() ([]string, error) {
	mounts, err := Mounts()
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	for _, m := range mounts {
		if (m.FSType == "cgroup" || m.FSType == "cgroup2") && !seen[m.Point] {
			seen[m.Point] = true
			out = append(out, m.Point)
		}
	}
	return out, nil
}

// Under says whether path p is dir or below it.
func Under(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+"/")
}
