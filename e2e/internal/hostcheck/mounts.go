package hostcheck

import (
	"os"
	"slices"
	"strconv"
	"strings"
)

// Mount is one line of /proc/self/mountinfo.
type Mount struct {
	// Point is the mount point, its octal escapes decoded.
	Point string
	// FSType is the filesystem type (the field after the "-" separator);
	// "" when the line has none.
	FSType string
	// ReadOnly says the mount itself is read-only ("ro" among its
	// per-mount options).
	ReadOnly bool
}

// ParseMountinfo returns the mounts of a mountinfo file's contents, in
// order; lines with fewer than five fields are passed over.
func ParseMountinfo(b []byte) []Mount {
	var out []Mount
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		typ := ""
		for i := 5; i < len(f)-1; i++ {
			if f[i] == "-" {
				typ = f[i+1]
				break
			}
		}
		ro := len(f) > 5 && slices.Contains(strings.Split(f[5], ","), "ro")
		out = append(out, Mount{Point: UnescapeMountPath(f[4]), FSType: typ, ReadOnly: ro})
	}
	return out
}

// Mounts returns the mounts of /proc/self/mountinfo, in order.
func Mounts() ([]Mount, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	return ParseMountinfo(b), nil
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

// UnescapeMountPath decodes the octal escapes (\040 etc.) of mountinfo.
func UnescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
