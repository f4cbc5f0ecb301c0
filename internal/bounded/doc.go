// Package bounded is a map that holds at most a given number of entries,
// for what a long-lived process remembers so as not to read it again (a
// library's ELF header, a directory's scan, a process seen ended): safe
// for concurrent use, and emptied when full, since whatever it held can
// always be read again.
package bounded
