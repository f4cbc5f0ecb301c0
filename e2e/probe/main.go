// Command probe runs inside the containers of the e2e tests (e2e/ctrd) and
// prints what the container was given, one fact per line:
//
//	ENV <key>=<value>           environment variables starting with NVIDIA_, CUDA_ or GPUMUX_
//	DEV <path> <major>:<minor>  every character device under /dev (recursively,
//	                            without following symlinks)
//	MOUNT <mountpoint> ro|rw    every mount in /proc/self/mountinfo
//	LDCACHE <name> <path>       every library in the linker cache, /etc/ld.so.cache
//	                            (none when the container has no cache)
//	PROGRAM <name> <path>       the file nvidia-smi and nvidia-debugdump are, found on
//	                            PATH (Docker's default PATH where the container has
//	                            none) with every link resolved (none where not found)
//
// then exits 0. ENV and DEV lines are sorted, MOUNT and LDCACHE lines keep
// their file's order. Problems reading /dev, mountinfo or the cache go to
// stderr as "ERR ..." lines and make the exit status 1. With the argument "-sleep" it then sleeps
// until it is killed, for tests that need a running container.
//
// It must be a static binary (the test rootfs has no libc):
//
//	CGO_ENABLED=0 go build -o rootfs/probe ./e2e/probe
package main

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/gpumux/gpumux/internal/mountinfo"
)

func main() {
	w := bufio.NewWriter(os.Stdout)
	failed := false
	fail := func(format string, args ...any) {
		failed = true
		fmt.Fprintf(os.Stderr, "ERR "+format+"\n", args...)
	}

	var env []string
	for _, kv := range os.Environ() {
		for _, p := range []string{"NVIDIA_", "CUDA_", "GPUMUX_"} {
			if strings.HasPrefix(kv, p) {
				env = append(env, kv)
				break
			}
		}
	}
	sort.Strings(env)
	for _, kv := range env {
		fmt.Fprintf(w, "ENV %s\n", kv)
	}

	var devs []string
	err := filepath.WalkDir("/dev", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			fail("walk %s: %v", path, err)
			if d != nil && d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.Type()&fs.ModeCharDevice == 0 {
			return nil
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(path, &st); err != nil {
			fail("stat %s: %v", path, err)
			return nil
		}
		devs = append(devs, fmt.Sprintf("DEV %s %d:%d", path, major(st.Rdev), minor(st.Rdev)))
		return nil
	})
	if err != nil {
		fail("walk /dev: %v", err)
	}
	sort.Strings(devs)
	for _, l := range devs {
		fmt.Fprintln(w, l)
	}

	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		fail("%v", err)
	}
	for _, m := range mountinfo.Parse(mi) {
		mode := "rw"
		if m.ReadOnly {
			mode = "ro"
		}
		fmt.Fprintf(w, "MOUNT %s %s\n", m.Point, mode)
	}

	switch cache, err := os.ReadFile("/etc/ld.so.cache"); {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		fail("%v", err)
	default:
		entries, err := parseLdCache(cache)
		if err != nil {
			fail("/etc/ld.so.cache: %v", err)
		}
		for _, e := range entries {
			fmt.Fprintf(w, "LDCACHE %s %s\n", e.name, e.path)
		}
	}

	if os.Getenv("PATH") == "" {
		os.Setenv("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	}
	for _, name := range []string{"nvidia-smi", "nvidia-debugdump"} {
		if path, err := exec.LookPath(name); err == nil {
			if real, err := filepath.EvalSymlinks(path); err == nil {
				fmt.Fprintf(w, "PROGRAM %s %s\n", name, real)
			}
		}
	}

	if err := w.Flush(); err != nil {
		fail("stdout: %v", err)
	}
	if failed {
		os.Exit(1)
	}
	if len(os.Args) > 1 && os.Args[1] == "-sleep" {
		for {
			time.Sleep(time.Hour)
		}
	}
}

// major and minor decode a Linux dev_t (as glibc's gnu_dev_major/minor).
func major(dev uint64) uint64 { return (dev>>8)&0xfff | (dev>>32)&^0xfff }
func minor(dev uint64) uint64 { return dev&0xff | (dev>>12)&^0xff }
