// Package namelist reads the repository's lists of C names (the real
// drivers' exported symbols, the entry points the limiter intercepts, the
// ones the remote interposer does not forward): one name a line, '#'
// starts a comment, blank lines are skipped, and a name listed twice or
// one that is not a name is an error naming the file and line.
package namelist
