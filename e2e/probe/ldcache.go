package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// ldCacheEntry is one library of the linker cache: the name programs ask
// for and the file the loader opens.
type ldCacheEntry struct{ name, path string }

// The linker cache's format since glibc 2.32 (ldconfig's default there;
// sysdeps/generic/dl-cache.h): a 48-byte header, then 24-byte entries whose
// name and path are offsets of NUL-terminated strings from the header.
const (
	ldCacheMagic     = "glibc-ld.so.cache1.1"
	ldCacheHeader    = 48
	ldCacheEntrySize = 24
)

// parseLdCache reads /etc/ld.so.cache in glibc's current format.
func parseLdCache(b []byte) ([]ldCacheEntry, error) {
	if !bytes.HasPrefix(b, []byte(ldCacheMagic)) {
		return nil, errors.New("not a glibc 2.32+ linker cache (want " + ldCacheMagic + ")")
	}
	if len(b) < ldCacheHeader {
		return nil, errors.New("truncated header")
	}
	n := int(binary.LittleEndian.Uint32(b[20:]))
	if n < 0 || ldCacheHeader+n*ldCacheEntrySize > len(b) {
		return nil, fmt.Errorf("%d entries do not fit in %d bytes", n, len(b))
	}
	str := func(off uint32) (string, error) {
		if int(off) >= len(b) {
			return "", fmt.Errorf("string offset %d past the end", off)
		}
		end := bytes.IndexByte(b[off:], 0)
		if end < 0 {
			return "", fmt.Errorf("string at %d not terminated", off)
		}
		return string(b[off : int(off)+end]), nil
	}
	out := make([]ldCacheEntry, 0, n)
	for i := range n {
		e := b[ldCacheHeader+i*ldCacheEntrySize:]
		name, err := str(binary.LittleEndian.Uint32(e[4:]))
		if err != nil {
			return nil, err
		}
		path, err := str(binary.LittleEndian.Uint32(e[8:]))
		if err != nil {
			return nil, err
		}
		out = append(out, ldCacheEntry{name, path})
	}
	return out, nil
}
