package ldcache

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"path"
	"runtime"
	"slices"
	"sort"
	"strings"
)

// ErrUnsupported marks a cache or a directory this package does not
// rewrite; ldconfig's to rebuild.
var ErrUnsupported = errors.New("not rewritten without ldconfig")

const (
	oldMagic = "ld.so-1.7.0"
	newMagic = "glibc-ld.so.cache1.1"

	oldHeaderSize = 16 // magic, padding, nlibs
	oldEntrySize  = 12 // flags, key, value
	newHeaderSize = 48
	newEntrySize  = 24 // flags, key, value, osversion, hwcap

	// The header's flags: the byte order of the file.
	endianUnset  = 0
	endianLittle = 2
	endianMask   = 3

	extensionMagic   = 0xeaa42174 // (uint32)-358342284
	sectionHeader    = 16         // tag, flags, offset, size
	tagGenerator     = 0
	tagGlibcHWCaps   = 1
	hwcapExtension   = uint64(1) << 62
	hwcapISALevelMsk = uint64(1)<<10 - 1
)

// The flags ldconfig gives a library: its C library and its architecture
// (glibc's ldconfig.h).
const (
	FlagELFLibc6     = 0x0003
	FlagX8664Lib64   = 0x0300
	FlagPowerPCLib64 = 0x0500
	FlagAArch64Lib64 = 0x0a00
)

// Entry is one library in the cache.
type Entry struct {
	Key       string // the name a program asks for: a SONAME, or a link's own name
	Value     string // the file the dynamic linker opens
	Flags     int32
	OSVersion uint32
	// HWCap is the entry's hwcap word as written, for an entry of a
	// glibc-hwcaps subdirectory without its index (HWCaps names it).
	HWCap  uint64
	HWCaps string
}

// Cache is a parsed ld.so.cache.
type Cache struct {
	Entries []Entry
	// Generator is the generator extension's text (ldconfig's version),
	// kept as read; HasGenerator says whether there was one.
	Generator    string
	HasGenerator bool
}

// Parse reads an ld.so.cache. Whatever it cannot read whole and exactly is
// ErrUnsupported.
func Parse(b []byte) (*Cache, error) {
	base, err := newFormatOffset(b)
	if err != nil {
		return nil, err
	}
	le := binary.LittleEndian
	h := b[base:]
	nlibs := uint64(le.Uint32(h[20:]))
	if flags := h[28]; flags != endianUnset && flags&endianMask != endianLittle {
		return nil, fmt.Errorf("%w: the cache's byte order (flags %#x) is not this package's", ErrUnsupported, h[28])
	}
	if nlibs > uint64(len(h)-newHeaderSize)/newEntrySize {
		return nil, fmt.Errorf("%w: %d entries do not fit in %d bytes", ErrUnsupported, nlibs, len(h))
	}
	str := func(off uint32) (string, error) {
		if uint64(off) >= uint64(len(h)) {
			return "", fmt.Errorf("%w: string offset %d beyond the cache's end", ErrUnsupported, off)
		}
		s := h[off:]
		n := bytes.IndexByte(s, 0)
		if n < 0 {
			return "", fmt.Errorf("%w: string at %d not terminated", ErrUnsupported, off)
		}
		return string(s[:n]), nil
	}
	c := &Cache{Entries: make([]Entry, 0, nlibs)}
	hwcaps, err := c.extensions(b, le.Uint32(h[32:]), str)
	if err != nil {
		return nil, err
	}
	for i := range nlibs {
		e := h[newHeaderSize+i*newEntrySize:]
		key, err := str(le.Uint32(e[4:]))
		if err != nil {
			return nil, err
		}
		value, err := str(le.Uint32(e[8:]))
		if err != nil {
			return nil, err
		}
		entry := Entry{Key: key, Value: value, Flags: int32(le.Uint32(e[0:])), OSVersion: le.Uint32(e[12:]), HWCap: le.Uint64(e[16:])}
		if isExtension(entry.HWCap) {
			idx := entry.HWCap & 0xffffffff
			if idx >= uint64(len(hwcaps)) {
				return nil, fmt.Errorf("%w: entry %s names glibc-hwcaps subdirectory %d of %d", ErrUnsupported, key, idx, len(hwcaps))
			}
			entry.HWCaps = hwcaps[idx]
			entry.HWCap &^= 0xffffffff
		}
		c.Entries = append(c.Entries, entry)
	}
	return c, nil
}

// newFormatOffset finds the new format's header: at the start, or after
// the old format's entries in a compat cache.
func newFormatOffset(b []byte) (int, error) {
	base := 0
	if bytes.HasPrefix(b, []byte(oldMagic)) {
		if len(b) < oldHeaderSize {
			return 0, fmt.Errorf("%w: %d bytes are no cache", ErrUnsupported, len(b))
		}
		n := uint64(binary.LittleEndian.Uint32(b[12:]))
		if n > uint64(len(b)-oldHeaderSize)/oldEntrySize {
			return 0, fmt.Errorf("%w: %d old entries do not fit in %d bytes", ErrUnsupported, n, len(b))
		}
		base = int((oldHeaderSize + n*oldEntrySize + 7) &^ 7)
	}
	if len(b)-base < newHeaderSize || !bytes.HasPrefix(b[base:], []byte(newMagic)) {
		return 0, fmt.Errorf("%w: no %s header (a cache of the old format alone, or none)", ErrUnsupported, newMagic)
	}
	return base, nil
}

// extensions reads the extension directory: the generator into c, and the
// glibc-hwcaps subdirectories' names, returned.
func (c *Cache) extensions(b []byte, off uint32, str func(uint32) (string, error)) ([]string, error) {
	if off == 0 {
		return nil, nil
	}
	le := binary.LittleEndian
	size := uint64(len(b))
	if off%4 != 0 || uint64(off)+8 > size || le.Uint32(b[off:]) != extensionMagic {
		return nil, fmt.Errorf("%w: no extension directory at %d", ErrUnsupported, off)
	}
	count := uint64(le.Uint32(b[off+4:]))
	if count > (size-uint64(off)-8)/sectionHeader {
		return nil, fmt.Errorf("%w: %d extension sections do not fit", ErrUnsupported, count)
	}
	var hwcaps []string
	seen := map[uint32]bool{}
	for i := range count {
		s := b[uint64(off)+8+i*sectionHeader:]
		tag, flags, at, n := le.Uint32(s), le.Uint32(s[4:]), uint64(le.Uint32(s[8:])), uint64(le.Uint32(s[12:]))
		if at+n > size {
			return nil, fmt.Errorf("%w: extension section %d beyond the cache's end", ErrUnsupported, tag)
		}
		if seen[tag] || flags != 0 {
			return nil, fmt.Errorf("%w: extension section %d (flags %#x) repeated or flagged", ErrUnsupported, tag, flags)
		}
		seen[tag] = true
		data := b[at : at+n]
		switch tag {
		case tagGenerator:
			c.Generator, c.HasGenerator = string(data), true
		case tagGlibcHWCaps:
			if n == 0 || n%4 != 0 || at%4 != 0 {
				return nil, fmt.Errorf("%w: a glibc-hwcaps section of %d bytes at %d", ErrUnsupported, n, at)
			}
			for j := uint64(0); j < n; j += 4 {
				name, err := str(le.Uint32(data[j:]))
				if err != nil {
					return nil, err
				}
				if name == "" {
					return nil, fmt.Errorf("%w: a glibc-hwcaps subdirectory without a name", ErrUnsupported)
				}
				hwcaps = append(hwcaps, name)
			}
		default:
			return nil, fmt.Errorf("%w: extension section of unknown tag %d", ErrUnsupported, tag)
		}
	}
	return hwcaps, nil
}

// isExtension says whether an hwcap word indexes the glibc-hwcaps
// subdirectories (only the extension bit set above the index, ISA level
// bits aside), as glibc's dl_cache_hwcap_extension.
func isExtension(hwcap uint64) bool {
	return (hwcap>>32)&^hwcapISALevelMsk == hwcapExtension>>32
}

// Add puts libs, the libraries Scan found in dirs, into the cache as
// `ldconfig DIR...` would have on top of the image's configuration: the
// entries of those directories that were there go, and each new one goes
// in its sorted place, before the entries it ties with (ldconfig reads the
// directories of its command line first).
func (c *Cache) Add(dirs []string, libs []Entry) {
	kept := slices.DeleteFunc(c.Entries, func(e Entry) bool {
		return e.HWCaps == "" && slices.Contains(dirs, path.Dir(e.Value))
	})
	add := slices.Clone(libs)
	sort.SliceStable(add, func(i, j int) bool { return compare(add[i], add[j]) < 0 })
	merged := make([]Entry, 0, len(kept)+len(add))
	for len(kept) > 0 || len(add) > 0 {
		if len(add) > 0 && (len(kept) == 0 || compare(add[0], kept[0]) <= 0) {
			merged, add = append(merged, add[0]), add[1:]
		} else {
			merged, kept = append(merged, kept[0]), kept[1:]
		}
	}
	c.Entries = merged
}

// compare orders entries as ldconfig does (glibc's cache.c): names in
// descending _dl_cache_libcmp order, then higher flags, glibc-hwcaps
// entries (by subdirectory name), more specific hwcaps and higher OS
// versions first.
func compare(a, b Entry) int {
	if r := libcmp(b.Key, a.Key); r != 0 {
		return r
	}
	switch {
	case a.Flags != b.Flags:
		return cmpDesc(uint64(uint32(a.Flags)), uint64(uint32(b.Flags)))
	case a.HWCaps != "" && b.HWCaps == "":
		return -1
	case a.HWCaps == "" && b.HWCaps != "":
		return 1
	case a.HWCaps != "":
		if r := strings.Compare(a.HWCaps, b.HWCaps); r != 0 {
			return r
		}
		return cmpDesc(uint64(a.OSVersion), uint64(b.OSVersion))
	}
	if r := cmpDesc(uint64(bits.OnesCount64(a.HWCap)), uint64(bits.OnesCount64(b.HWCap))); r != 0 {
		return r
	}
	if r := cmpDesc(a.HWCap, b.HWCap); r != 0 {
		return r
	}
	return cmpDesc(uint64(a.OSVersion), uint64(b.OSVersion))
}

// cmpDesc orders the higher first.
func cmpDesc(a, b uint64) int {
	switch {
	case a > b:
		return -1
	case a < b:
		return 1
	}
	return 0
}

// signedChar: C's char is signed on x86, which decides how glibc orders
// names with bytes above 0x7f there.
var signedChar = runtime.GOARCH == "amd64" || runtime.GOARCH == "386"

// libcmp is glibc's _dl_cache_libcmp: strings compared byte by byte, runs
// of digits as numbers (in a C int, as there).
func libcmp(p1, p2 string) int {
	at := func(s string, i int) int32 {
		if i >= len(s) {
			return 0
		}
		if signedChar {
			return int32(int8(s[i]))
		}
		return int32(s[i])
	}
	digit := func(c int32) bool { return c >= '0' && c <= '9' }
	i, j := 0, 0
	for at(p1, i) != 0 {
		c1, c2 := at(p1, i), at(p2, j)
		switch {
		case digit(c1) && digit(c2):
			var v1, v2 int32
			for ; digit(at(p1, i)); i++ {
				v1 = v1*10 + at(p1, i) - '0'
			}
			for ; digit(at(p2, j)); j++ {
				v2 = v2*10 + at(p2, j) - '0'
			}
			if v1 != v2 {
				return sign(v1 - v2)
			}
		case digit(c1):
			return 1
		case digit(c2):
			return -1
		case c1 != c2:
			return sign(c1 - c2)
		default:
			i, j = i+1, j+1
		}
	}
	return sign(at(p1, i) - at(p2, j))
}

func sign(v int32) int {
	switch {
	case v < 0:
		return -1
	case v > 0:
		return 1
	}
	return 0
}

// Marshal writes the cache in the new format (little-endian), with its
// generator and glibc-hwcaps subdirectories as extensions.
func (c *Cache) Marshal() []byte {
	le := binary.LittleEndian
	var names []string
	for _, e := range c.Entries {
		if e.HWCaps != "" && !slices.Contains(names, e.HWCaps) {
			names = append(names, e.HWCaps)
		}
	}
	slices.Sort(names)

	strOff := map[string]uint32{}
	var strs []byte
	stringsStart := uint32(newHeaderSize + newEntrySize*len(c.Entries))
	intern := func(s string) uint32 {
		if off, ok := strOff[s]; ok {
			return off
		}
		off := stringsStart + uint32(len(strs))
		strOff[s] = off
		strs = append(append(strs, s...), 0)
		return off
	}
	out := make([]byte, stringsStart)
	copy(out, newMagic)
	le.PutUint32(out[20:], uint32(len(c.Entries)))
	out[28] = endianLittle
	for i, e := range c.Entries {
		b := out[newHeaderSize+i*newEntrySize:]
		le.PutUint32(b[0:], uint32(e.Flags))
		le.PutUint32(b[4:], intern(e.Key))
		le.PutUint32(b[8:], intern(e.Value))
		le.PutUint32(b[12:], e.OSVersion)
		hw := e.HWCap
		if e.HWCaps != "" {
			hw = hw&^0xffffffff | uint64(slices.Index(names, e.HWCaps))
		}
		le.PutUint64(b[16:], hw)
	}
	nameOffs := make([]uint32, len(names))
	for i, n := range names {
		nameOffs[i] = intern(n)
	}
	le.PutUint32(out[24:], uint32(len(strs)))
	out = append(out, strs...)
	for len(out)%4 != 0 {
		out = append(out, 0)
	}
	if !c.HasGenerator && len(names) == 0 {
		return out
	}
	ext := uint32(len(out))
	le.PutUint32(out[32:], ext)
	var sections [][2]uint32 // tag, size
	if c.HasGenerator {
		sections = append(sections, [2]uint32{tagGenerator, uint32(len(c.Generator))})
	}
	if len(names) > 0 {
		sections = append(sections, [2]uint32{tagGlibcHWCaps, uint32(4 * len(names))})
	}
	out = le.AppendUint32(out, extensionMagic)
	out = le.AppendUint32(out, uint32(len(sections)))
	data := ext + 8 + sectionHeader*uint32(len(sections))
	// The hwcaps array (4-byte aligned) goes first, the generator's text
	// after it.
	hwcapsAt, generatorAt := data, data+4*uint32(len(names))
	for _, s := range sections {
		at := generatorAt
		if s[0] == tagGlibcHWCaps {
			at = hwcapsAt
		}
		out = le.AppendUint32(out, s[0])
		out = le.AppendUint32(out, 0)
		out = le.AppendUint32(out, at)
		out = le.AppendUint32(out, s[1])
	}
	for _, off := range nameOffs {
		out = le.AppendUint32(out, off)
	}
	return append(out, c.Generator...)
}
