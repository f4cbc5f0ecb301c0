// Package procstat reads the fields gpumux needs of a process's
// /proc/PID/stat: its state, its parent and its start time. The command
// name, the second field, is in parentheses and may hold anything, spaces
// and parentheses included: the fields after it are read from the last
// ')'. PIDs are those of the PID namespace the /proc mount belongs to.
package procstat
