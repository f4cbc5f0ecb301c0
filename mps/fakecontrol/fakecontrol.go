package fakecontrol

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gpumux/gpumux/mps"
)

const (
	defaultPipeDir = "/tmp/nvidia-mps"
	defaultLogDir  = "/var/log/nvidia-mps"
	socketName     = "control"
	pidFileName    = "nvidia-cuda-mps-control.pid"
	// readyEnv names the descriptor on which a daemon started by -d reports
	// "ready" or why it could not start.
	readyEnv = "GPUMUX_FAKE_MPS_READY_FD"
	// firstServerPID is above the largest pid Linux hands out (2^22).
	firstServerPID = 1<<22 + 1

	msgNoDaemon = "Cannot find MPS control daemon process"
	msgRunning  = "An instance of this daemon is already running"
)

// Main runs the program with args (without the program's name) and returns
// its exit status.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 0:
		return client(stdin, stdout, stderr)
	case len(args) == 1 && args[0] == "-d":
		return daemonize(stderr)
	case len(args) == 1 && args[0] == "-f":
		return foreground(stderr)
	}
	fmt.Fprintln(stderr, "usage: gpumux-fake-mps-control [-d | -f]  (a stand-in for nvidia-cuda-mps-control, for tests and demos only)")
	return 2
}

func dirFromEnv(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func socketPath() string {
	return filepath.Join(dirFromEnv("CUDA_MPS_PIPE_DIRECTORY", defaultPipeDir), socketName)
}

// answering reports whether a daemon accepts connections on sock.
func answering(sock string) bool {
	c, err := net.DialTimeout("unix", sock, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// client sends stdin's lines to the daemon, one command each, and prints
// the replies.
func client(stdin io.Reader, stdout, stderr io.Writer) int {
	conn, err := net.DialTimeout("unix", socketPath(), 2*time.Second)
	if err != nil {
		fmt.Fprintln(stderr, msgNoDaemon)
		return 1
	}
	defer conn.Close()
	replies := bufio.NewReader(conn)
	lines := bufio.NewScanner(stdin)
	for lines.Scan() {
		if _, err := fmt.Fprintln(conn, lines.Text()); err != nil {
			fmt.Fprintln(stderr, msgNoDaemon)
			return 1
		}
		raw, err := replies.ReadBytes('\n')
		if err != nil {
			if errors.Is(err, io.EOF) && len(raw) == 0 {
				return 0 // the daemon quit
			}
			fmt.Fprintf(stderr, "lost the MPS control daemon: %v\n", err)
			return 1
		}
		var reply string
		if err := json.Unmarshal(raw, &reply); err != nil {
			fmt.Fprintf(stderr, "bad reply from the MPS control daemon: %v\n", err)
			return 1
		}
		fmt.Fprint(stdout, reply)
	}
	return 0
}

// daemonize starts the daemon in a new session, detached from the caller's
// terminal and descriptors, and returns once it listens.
func daemonize(stderr io.Writer) int {
	if answering(socketPath()) {
		fmt.Fprintln(stderr, msgRunning)
		return 1
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	r, w, err := os.Pipe()
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	cmd := exec.Command(exe, "-f")
	cmd.Args[0] = os.Args[0]
	cmd.Env = append(os.Environ(), readyEnv+"=3")
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Dir = "/"
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	w.Close()
	msg, _ := io.ReadAll(io.LimitReader(r, 4096))
	r.Close()
	if strings.TrimSpace(string(msg)) == "ready" {
		cmd.Process.Release()
		return 0
	}
	cmd.Wait()
	if s := strings.TrimSpace(string(msg)); s != "" {
		fmt.Fprintln(stderr, s)
	} else {
		fmt.Fprintln(stderr, "the MPS control daemon exited before it was ready")
	}
	return 1
}

// foreground runs the daemon until quit or a signal.
func foreground(stderr io.Writer) int {
	var ready io.WriteCloser = nopCloser{io.Discard}
	if fd, err := strconv.Atoi(os.Getenv(readyEnv)); err == nil {
		ready = os.NewFile(uintptr(fd), "ready")
		os.Unsetenv(readyEnv)
	}
	fail := func(format string, args ...any) int {
		msg := fmt.Sprintf(format, args...)
		fmt.Fprintln(ready, msg)
		ready.Close()
		fmt.Fprintln(stderr, msg)
		return 1
	}
	pipeDir := dirFromEnv("CUDA_MPS_PIPE_DIRECTORY", defaultPipeDir)
	logDir := dirFromEnv("CUDA_MPS_LOG_DIRECTORY", defaultLogDir)
	sock := filepath.Join(pipeDir, socketName)
	if answering(sock) {
		return fail(msgRunning)
	}
	for _, dir := range []string{pipeDir, logDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fail("%v", err)
		}
	}
	logFile, err := os.OpenFile(filepath.Join(logDir, "control.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fail("%v", err)
	}
	defer logFile.Close()
	_ = os.Remove(sock) // a dead daemon's
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return fail("%v", err)
	}
	if err := os.Chmod(sock, 0o666); err != nil {
		return fail("%v", err)
	}
	pidFile := filepath.Join(pipeDir, pidFileName)
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return fail("%v", err)
	}
	d := &daemon{
		log:     log.New(logFile, "", 0),
		thread:  100,
		pinned:  map[string]uint64{},
		servers: map[int]*server{},
		next:    firstServerPID,
		ln:      ln,
	}
	d.logf("Starting control daemon using socket %s (gpumux-fake-mps-control: a stand-in for tests, not MPS)", sock)
	d.logf("To connect CUDA applications to this daemon, set env CUDA_MPS_PIPE_DIRECTORY=%s", pipeDir)
	d.logf("CUDA_VISIBLE_DEVICES=%s", os.Getenv("CUDA_VISIBLE_DEVICES"))
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	fmt.Fprintln(ready, "ready")
	ready.Close()
	go func() {
		s := <-signals
		d.logf("Received %v, exiting", s)
		ln.Close()
	}()
	d.serve()
	os.Remove(sock)
	os.Remove(pidFile)
	d.logf("Exit")
	return 0
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

type server struct {
	clients []int
	thread  float64
	pinned  map[string]uint64
}

type daemon struct {
	log *log.Logger
	ln  net.Listener

	mu      sync.Mutex
	thread  float64
	pinned  map[string]uint64 // device → bytes
	servers map[int]*server
	next    int
}

func (d *daemon) logf(format string, args ...any) {
	d.log.Printf("[%s Control %5d] %s", time.Now().Format("2006-01-02 15:04:05.000"), os.Getpid(), fmt.Sprintf(format, args...))
}

// serve accepts connections until quit or a signal closes the listener;
// sessions still open then end with the process.
func (d *daemon) serve() {
	for {
		conn, err := d.ln.Accept()
		if err != nil {
			return
		}
		go d.session(conn)
	}
}

// session serves one client invocation: a command per line, a JSON string
// per reply.
func (d *daemon) session(conn net.Conn) {
	defer conn.Close()
	d.logf("NEW UI")
	defer d.logf("UI closed")
	lines := bufio.NewScanner(conn)
	for lines.Scan() {
		line := lines.Text()
		d.logf("Cmd:%s", line)
		reply, quit := d.handle(line)
		b, _ := json.Marshal(reply)
		_, err := conn.Write(append(b, '\n'))
		if quit {
			// Even when the caller gave up waiting, as the real daemon does.
			d.ln.Close()
			return
		}
		if err != nil {
			return
		}
	}
}

// handle runs one command and returns its reply.
func (d *daemon) handle(line string) (reply string, quit bool) {
	f := strings.Fields(line)
	if len(f) == 0 {
		return fmt.Sprintf("Unknown command %q\n", line), false
	}
	arg := func(i int) string {
		if i < len(f) {
			return f[i]
		}
		return ""
	}
	switch f[0] {
	case "quit":
		d.waitNoClients()
		return "", true
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	switch f[0] {
	case "get_server_list":
		var b strings.Builder
		for _, pid := range sortedKeys(d.servers) {
			fmt.Fprintf(&b, "%d\n", pid)
		}
		return b.String(), false
	case "get_client_list", "get_server_status", "get_active_thread_percentage":
		pid, _ := strconv.Atoi(arg(1))
		s, ok := d.servers[pid]
		switch {
		case !ok:
			return fmt.Sprintf("Server %s not found\n", arg(1)), false
		case f[0] == "get_server_status":
			return "ACTIVE\n", false
		case f[0] == "get_active_thread_percentage":
			return fmt.Sprintf("%.1f\n", s.thread), false
		}
		var b strings.Builder
		for _, c := range s.clients {
			fmt.Fprintf(&b, "%d\n", c)
		}
		return b.String(), false
	case "set_default_active_thread_percentage":
		v, err := strconv.ParseFloat(arg(1), 64)
		if err != nil || v <= 0 || v > 100 {
			d.logf("Invalid percentage, expected between (0.0, 100.0]")
		} else {
			d.thread = v
		}
		d.logf("%.1f", d.thread)
		return fmt.Sprintf("%.1f\n", d.thread), false
	case "get_default_active_thread_percentage":
		return fmt.Sprintf("%.1f\n", d.thread), false
	case "set_default_device_pinned_mem_limit":
		if len(f) < 3 {
			d.logf("Invalid command format.")
			return "", false
		}
		d.pinned[f[1]] = mps.ParseMemLimit(f[2]) // never refused, as by the real one
		d.logf("%s %s %s.", f[0], f[1], f[2])
		return "", false
	case "get_default_device_pinned_mem_limit":
		if d.pinned[arg(1)] == 0 {
			d.logf("No default pinned memory limit set for the device!")
			return "", false
		}
		return mps.DisplayMemLimit(d.pinned[arg(1)]) + "\n", false
	case "fake_add_client":
		pid, err := strconv.Atoi(arg(1))
		if err != nil || pid <= 0 {
			return fmt.Sprintf("Invalid client pid %q\n", arg(1)), false
		}
		if len(d.servers) == 0 {
			d.servers[d.next] = &server{thread: d.thread, pinned: clone(d.pinned)}
			d.logf("Starting new server %d (fake)", d.next)
			d.next++
		}
		s := d.servers[sortedKeys(d.servers)[0]]
		s.clients = append(s.clients, pid)
		d.logf("NEW CLIENT %d (fake)", pid)
		return "", false
	case "fake_remove_client":
		pid, _ := strconv.Atoi(arg(1))
		for _, s := range d.servers {
			if i := slices.Index(s.clients, pid); i >= 0 {
				s.clients = slices.Delete(s.clients, i, i+1)
				d.logf("Client %d disconnected (fake)", pid)
				return "", false
			}
		}
		return fmt.Sprintf("Client %s not found\n", arg(1)), false
	}
	return fmt.Sprintf("Unknown command %q\n", line), false
}

// waitNoClients blocks while any server has a client, as the real quit does.
func (d *daemon) waitNoClients() {
	logged := -1
	for {
		d.mu.Lock()
		n := 0
		for _, s := range d.servers {
			n += len(s.clients)
		}
		d.mu.Unlock()
		if n == 0 {
			return
		}
		if n != logged {
			d.logf("quit waits for %d client(s)", n)
			logged = n
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func sortedKeys[V any](m map[int]V) []int {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func clone(m map[string]uint64) map[string]uint64 {
	c := make(map[string]uint64, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}
