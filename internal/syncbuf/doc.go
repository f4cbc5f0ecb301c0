// Package syncbuf provides a bytes.Buffer that goroutines may write and
// read at once: the sink for a child process's output or a logger that a
// test reads while the writer runs.
package syncbuf
