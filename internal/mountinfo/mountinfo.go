package mountinfo

import (
	"os"
	"slices"
	"strconv"
	"strings"
)

// Mount is one line of a mountinfo file.
type Mount struct {
	// Dev is the file system's device, "major:minor" (a bind mount has
	// the device of what it binds).
	Dev string
	// Root is the directory of the file system that the mount shows ("/"
	// for a whole file system; a bind mount's source within it).
	Root string
	// Point is the mount point.
	Point string
	// FSType is the file system type (the field after the "-"
	// separator); "" when the line has none.
	FSType string
	// ReadOnly says the mount itself is read-only ("ro" among its
	// per-mount options).
	ReadOnly bool
}

// Parse returns the mounts of a mountinfo file's contents, in order;
// lines with fewer than five fields are passed over.
func Parse(b []byte) []Mount {
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
		out = append(out, Mount{Dev: f[2], Root: Unescape(f[3]), Point: Unescape(f[4]), FSType: typ, ReadOnly: ro})
	}
	return out
}

// Read returns the mounts of the mountinfo file at path
// ("/proc/self/mountinfo").
func Read(path string) ([]Mount, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(b), nil
}

// Unescape decodes mountinfo's octal escapes (\040 for a space, \011,
// \012, \134) of a path.
func Unescape(s string) string {
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
