package inotify

import (
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Event is one event record: the watch it is of, what happened, and the
// name of the file it happened to in the watched directory ("" for the
// directory itself).
type Event struct {
	Wd   int32
	Mask uint32
	Name string
}

// BufSize is the size of a read buffer that holds n events of the
// longest names (a read returns whole records only).
func BufSize(n int) int { return n * (unix.SizeofInotifyEvent + unix.NAME_MAX + 1) }

// Each calls fn on each event record of b, what one read of an inotify
// instance returned, in order; a record cut short ends the walk.
func Each(b []byte, fn func(Event)) {
	for len(b) >= unix.SizeofInotifyEvent {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&b[0]))
		end := unix.SizeofInotifyEvent + int(ev.Len)
		if end > len(b) {
			return
		}
		fn(Event{Wd: ev.Wd, Mask: ev.Mask, Name: strings.TrimRight(string(b[unix.SizeofInotifyEvent:end]), "\x00")})
		b = b[end:]
	}
}
