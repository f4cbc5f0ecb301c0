package filever

import (
	"io/fs"
	"os"
	"syscall"
	"time"
)

// Version is a file's version.
type Version struct {
	dev, ino, size   uint64
	mtimeNs, ctimeNs int64
}

// Of is the version of an open regular file; false for anything else, or
// where fstat cannot tell.
func Of(f *os.File) (Version, bool) {
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return Version{}, false
	}
	return OfInfo(fi)
}

// OfInfo is the version of what fi describes (a regular file, or a
// directory: adding, removing or renaming an entry changes its times);
// false where fi does not tell.
func OfInfo(fi fs.FileInfo) (Version, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return Version{}, false
	}
	return Version{uint64(st.Dev), uint64(st.Ino), uint64(st.Size), st.Mtim.Nano(), st.Ctim.Nano()}, true
}

// Changed is when the file last changed (its ctime).
func (v Version) Changed() time.Time { return time.Unix(0, v.ctimeNs) }
