//go:build e2e

package netns

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpumux/gpumux/e2e/internal/hostcheck"
)

// helperEnv makes the test binary act as a network helper in a namespace
// (TestHelper): "serve ADDR" answers each connection with one line,
// "dial ADDR" prints the line it gets.
const helperEnv = "GPUMUX_NETNS_HELPER"

// TestHelper is not a test: it is what the other tests run in a node's
// namespace (helperEnv), since the namespaces hold no server or client
// program of their own.
func TestHelper(t *testing.T) {
	verb, addr, ok := strings.Cut(os.Getenv(helperEnv), " ")
	if !ok {
		t.Skip("run by the other tests in a network namespace")
	}
	switch verb {
	case "serve":
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			fmt.Println("ERR", err)
			os.Exit(1)
		}
		fmt.Println("LISTENING")
		for {
			conn, err := ln.Accept()
			if err != nil {
				os.Exit(1)
			}
			fmt.Fprintf(conn, "hello from %s\n", addr)
			conn.Close()
		}
	case "dial":
		conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			fmt.Println("ERR", err)
			os.Exit(1)
		}
		line, _ := bufio.NewReader(conn).ReadString('\n')
		fmt.Print(line)
		os.Exit(0)
	}
	os.Exit(2)
}

func helper(node *Node, verb, addr string) *exec.Cmd {
	cmd := node.Command(os.Args[0], "-test.run=^TestHelper$")
	cmd.Env = append(os.Environ(), helperEnv+"="+verb+" "+addr)
	return cmd
}

func dialLine(t *testing.T, addr string) string {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dialing %s: %v", addr, err)
	}
	defer conn.Close()
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		t.Fatalf("reading from %s: %v", addr, err)
	}
	return line
}

// TestNetwork builds a network of two nodes and checks that the test
// reaches a node, a node reaches another and the test's own address, that
// a process in a node is attributed to its namespace, and that Close
// removes a process left running (reporting it) and everything of the
// network.
func TestNetwork(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := New(ctx, t, "t", "10.214.0.0/28")
	a := n.AddNode(ctx, "a")
	b := n.AddNode(ctx, "b")
	if a.Addr.String() != "10.214.0.10" || b.Addr.String() != "10.214.0.11" || n.HostAddr.String() != "10.214.0.1" {
		t.Fatalf("addresses: host %s, a %s, b %s", n.HostAddr, a.Addr, b.Addr)
	}

	serveAddr := net.JoinHostPort(a.Addr.String(), "7000")
	server := helper(a, "serve", serveAddr)
	out, err := server.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	var waitOnce sync.Once
	wait := func() { waitOnce.Do(func() { server.Wait() }) }
	t.Cleanup(func() { server.Process.Kill(); wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "LISTENING\n" {
		t.Fatalf("the server in node a: %q %v", line, err)
	}

	if got := dialLine(t, serveAddr); got != "hello from "+serveAddr+"\n" {
		t.Errorf("from the root namespace: %q", got)
	}
	if got, err := helper(b, "dial", serveAddr).Output(); err != nil || string(got) != "hello from "+serveAddr+"\n" {
		t.Errorf("from node b: %q %v", got, err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(n.HostAddr.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if conn, err := ln.Accept(); err == nil {
			fmt.Fprintln(conn, "hello from the root namespace")
			conn.Close()
		}
	}()
	if got, err := helper(b, "dial", ln.Addr().String()).Output(); err != nil || string(got) != "hello from the root namespace\n" {
		t.Errorf("node b to the root namespace: %q %v", got, err)
	}
	// Node b does not share node a's loopback.
	if got, err := helper(b, "dial", "127.0.0.1:7000").Output(); err == nil {
		t.Errorf("node b reached node a's port on its own loopback: %q", got)
	}

	procs, err := hostcheck.Procs[hostcheck.Proc](hostcheck.Owner{NetNS: a.Path})
	if err != nil {
		t.Fatal(err)
	}
	if len(procs) != 1 || procs[0].PID != server.Process.Pid || procs[0].Why != "in network namespace "+a.Path {
		t.Errorf("processes in node a: %v, want the server (pid %d)", procs, server.Process.Pid)
	}

	// Close with the server still running: it is killed and reported.
	err = n.Close()
	if err == nil || !strings.Contains(err.Error(), "namespace "+a.NS+": 1 process(es) left behind") {
		t.Errorf("Close with a process left in node a: %v", err)
	}
	wait()
	if st, ok := server.ProcessState.Sys().(syscall.WaitStatus); !ok || st.Signal() != syscall.SIGKILL {
		t.Errorf("the server ended with %v, want SIGKILL", server.ProcessState)
	}
	namespaces, bindings, links, err := n.Leftovers()
	if err != nil || len(namespaces)+len(bindings)+len(links) > 0 {
		t.Errorf("after Close: namespaces %v, bindings %v, links %v (%v)", namespaces, bindings, links, err)
	}
}

// logRecorder records a test's log lines.
type logRecorder struct {
	testing.TB
	mu   sync.Mutex
	logs []string
}

func (r *logRecorder) Logf(format string, args ...any) {
	r.TB.Helper()
	r.mu.Lock()
	r.logs = append(r.logs, fmt.Sprintf(format, args...))
	r.mu.Unlock()
	r.TB.Logf(format, args...)
}

// TestNewRemovesStale leaves what a killed run leaves (the network's
// namespaces, the root namespace's link and a process in a node), then
// checks that New removes it all, logging it, and builds the network anew.
func TestNewRemovesStale(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, args := range [][]string{
		{"netns", "add", Prefix + "s-net"},
		{"netns", "add", Prefix + "s-x"},
		{"link", "add", Prefix + "s", "type", "veth", "peer", "name", "host", "netns", Prefix + "s-net"},
	} {
		if err := ipCmd(ctx, args...); err != nil {
			t.Fatal(err)
		}
	}
	stale := (&Node{Path: hostcheck.NetNSDir + "/" + Prefix + "s-x"}).Command("sleep", "300")
	if err := stale.Start(); err != nil {
		t.Fatal(err)
	}
	// nsenter enters the namespace after it starts: New looks for what
	// runs there, so wait until the process is in it.
	var ns syscall.Stat_t
	if err := syscall.Stat(hostcheck.NetNSDir+"/"+Prefix+"s-x", &ns); err != nil {
		t.Fatal(err)
	}
	for in := fmt.Sprintf("net:[%d]", ns.Ino); ; time.Sleep(5 * time.Millisecond) {
		if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", stale.Process.Pid)); l == in {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the process never entered the stale namespace")
		}
	}
	done := make(chan error, 1)
	go func() { done <- stale.Wait() }()
	t.Cleanup(func() { stale.Process.Kill() })

	rec := &logRecorder{TB: t}
	n := New(ctx, rec, "s", "10.214.0.16/28")
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Error("the process in the stale namespace still runs")
	}
	logged := strings.Join(rec.logs, "\n")
	for _, want := range []string{"an earlier run left namespaces [" + Prefix + "s-net " + Prefix + "s-x]", "links [" + Prefix + "s]", "pid " + fmt.Sprint(stale.Process.Pid)} {
		if !strings.Contains(logged, want) {
			t.Errorf("the log lacks %q:\n%s", want, logged)
		}
	}
	if _, err := os.Stat(hostcheck.NetNSDir + "/" + Prefix + "s-x"); !os.IsNotExist(err) {
		t.Errorf("the stale node's namespace is still there: %v", err)
	}
	x := n.AddNode(ctx, "x")
	if got, err := helper(x, "dial", net.JoinHostPort(n.HostAddr.String(), "1")).CombinedOutput(); err == nil || !strings.Contains(string(got), "connection refused") {
		t.Errorf("the rebuilt node x does not reach the root namespace (want connection refused on port 1): %q %v", got, err)
	}
}
