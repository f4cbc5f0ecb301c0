// Package ldcache reads and writes glibc's dynamic linker cache
// (/etc/ld.so.cache), so that the update-ldcache hook can add the driver's
// libraries to a container's cache without running ldconfig over every
// library of the image.
//
// Parse reads the formats ldconfig writes: the new format alone (glibc 2.32
// and later by default) and the compat one (the old format with the new
// hidden in its string table, glibc 2.31 and before), extensions included
// (the generator string, glibc-hwcaps subdirectories). Scan reads a
// directory as ldconfig's search_dir does: the libraries it would cache and
// under which names. Cache.Add puts them in as `ldconfig DIR...` would on
// top of the image's configuration (the directories' entries first among
// those of one name), and Marshal writes the new format, which every glibc
// since 2.2 reads.
//
// What it does not take on is ErrUnsupported (a cache of the old format
// alone, of the other byte order, with an extension it does not know, a
// damaged one; a directory with subdirectories ldconfig would descend into;
// a library of an architecture it has no flags for): the caller runs
// ldconfig, which rebuilds the cache from the image's configuration.
// Every file read crosses a trust boundary (the image's cache, the
// container's files): sizes and offsets are checked before use, and
// FuzzParse holds the parser to it.
package ldcache
