// Package filever tells versions of a file apart without reading it: its
// inode, size and modification and change times, from fstat. A file
// rewritten in place changes its times (ctime whatever the writer does to
// mtime); a file replaced is another inode. Caches of what was read from
// a file (a library's SONAME, a node config's decoding) key on it.
package filever
