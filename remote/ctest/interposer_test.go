package ctest

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpumux/gpumux/remote/fakecuda"
	"github.com/gpumux/gpumux/remote/proto"
	"github.com/gpumux/gpumux/remote/token"
)

// TestUnit runs the C unit tests of the interposer's internals.
func TestUnit(t *testing.T) {
	_, stderr := program{name: "unit"}.run(t)
	if strings.Count(stderr, "GPUMUX_REMOTE_ADDR is not set") != 1 {
		t.Errorf("want the missing address logged once, stderr:\n%s", stderr)
	}
}

// The interposer's messages the programs cause on purpose.
var expectedLog = map[string]bool{
	"dark: gpumux: cuGetExportTable(5a5a5a5a-5a5a-5a5a-5a5a-5a5a5a5a5a5a) is not supported by gpumux's remote CUDA; it returns CUDA_ERROR_NOT_SUPPORTED":                                                      true,
	"dark: gpumux: private table cudart slot 3 (cuGetExportTable) is not supported by gpumux's remote CUDA; it returns CUDA_ERROR_NOT_SUPPORTED":                                                              true,
	"ctx: gpumux: cuCtxCreate_v3 with execution affinity parameters is not supported; it returns CUDA_ERROR_NOT_SUPPORTED":                                                                                    true,
	"ctx: gpumux: cuCtxCreate_v4 with CUctxCreateParams is not supported; it returns CUDA_ERROR_NOT_SUPPORTED":                                                                                                true,
	"launchex: gpumux: a launch configuration with 33 attributes (gpumux forwards at most 32)":                                                                                                                true,
	"graphs: gpumux: cuGraphAddMemcpyNode with host memory or an array (the remote GPU cannot reach them) is not supported by gpumux's remote CUDA; it returns CUDA_ERROR_NOT_SUPPORTED":                      true,
	"graphs: gpumux: cuGraphDebugDotPrint is not supported by gpumux's remote CUDA; it returns CUDA_ERROR_NOT_SUPPORTED":                                                                                      true,
	"torchcalls: gpumux: cuMemHostGetDevicePointer: a remote GPU cannot map this process's host memory (zero-copy); it returns CUDA_ERROR_NOT_SUPPORTED":                                                      true,
	"torchcalls: gpumux: cuPointerGetAttribute of a device address for host memory, or of a P2P, IPC, pool or handle attribute is not supported by gpumux's remote CUDA; it returns CUDA_ERROR_NOT_SUPPORTED": true,
}

// TestPrograms runs the functional test programs over both transports.
func TestPrograms(t *testing.T) {
	e := startServer(t)
	for _, tr := range []struct{ name, addr string }{{"unix", e.unix}, {"tcp", e.tcp}} {
		t.Run(tr.name, func(t *testing.T) {
			for _, name := range []string{"basic", "ctx", "mem", "module", "dark", "threads", "fork", "torchcalls", "launchex", "graphs"} {
				t.Run(name, func(t *testing.T) {
					_, stderr := program{name: name, addr: tr.addr, token: mint(t, "ctest-"+name, 0)}.run(t)
					for _, line := range strings.Split(stderr, "\n") {
						if strings.HasPrefix(line, "gpumux: ") && !expectedLog[name+": "+line] {
							t.Errorf("unexpected interposer message: %s", line)
						}
					}
				})
			}
		})
	}
	// module's "mixed" kernel: parameters of 1, 8, 2 and 4 bytes packed
	// at offsets 0, 8, 16 and 20 by the layout cuFuncGetParamInfo gives.
	want := make([]byte, 24)
	want[0] = 0xAB
	binary.LittleEndian.PutUint64(want[8:], 0x1122334455667788)
	binary.LittleEndian.PutUint16(want[16:], 0xBEEF)
	binary.LittleEndian.PutUint32(want[20:], 0xCAFEF00D)
	n := 0
	for _, l := range e.fake.Launches() {
		if l.Kernel != "mixed" {
			continue
		}
		n++
		if !bytes.Equal(l.Params, want) {
			t.Errorf("mixed got parameters % x, want % x", l.Params, want)
		}
	}
	if n != 2 {
		t.Errorf("mixed launched %d times, want 2 (once per transport)", n)
	}
}

// TestGraphsCleanup: the graphs program leaves a graph, its exec and the
// event their event node names alive at exit; the server destroys them
// itself (no implicit frees when the context goes) and the backend ends up
// holding nothing.
func TestGraphsCleanup(t *testing.T) {
	e := startServer(t)
	program{name: "graphs", addr: e.unix, token: mint(t, "ctest-graphs-cleanup", 0)}.run(t)
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := e.fake.Stats()
		if st.Contexts == 0 && st.Graphs == 0 && st.GraphExecs == 0 && st.Events == 0 && st.Captures == 0 {
			if st.ImplicitFrees != 0 {
				t.Errorf("the backend freed %d objects with their context: the server left them", st.ImplicitFrees)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the client left the backend holds %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if launches := e.fake.Launches(); len(launches) < 8 {
		t.Errorf("%d kernel launches ran, want the replays' (at least 8)", len(launches))
	}
}

// TestUnsupported: unsupported calls answer NOT_SUPPORTED and log their
// name once per process; cuGetProcAddress hands out the stubs.
func TestUnsupported(t *testing.T) {
	_, stderr := program{name: "unsupported"}.run(t)
	for _, line := range []string{
		"gpumux: cuGraphAddHostNode is not supported",
		"gpumux: cuMemAlloc is not supported",
		"gpumux: cuLibraryLoadFromFile is not supported",
		// Export tables are logged once per table, by UUID.
		"gpumux: cuGetExportTable(00000000-0000-0000-0000-000000000000) is not supported",
	} {
		if n := strings.Count(stderr, line); n != 1 {
			t.Errorf("%q logged %d times, want once; stderr:\n%s", line, n, stderr)
		}
	}
	if strings.Contains(stderr, "cannot use gpumux-remoted") {
		t.Errorf("local calls tried to connect; stderr:\n%s", stderr)
	}
}

// TestQuota: the token's quota caps allocations.
func TestQuota(t *testing.T) {
	e := startServer(t)
	const quota = 64 << 20
	program{name: "quota", addr: e.unix, token: mint(t, "ctest-quota", quota),
		env: []string{fmt.Sprintf("GM_TEST_QUOTA=%d", quota)}}.run(t)
}

// TestAllocators: PyTorch's expandable segments and cudaMallocAsync
// sequences, and cuCtxSetLimit, within the token's quota, over both
// transports; nothing is left on the backend after.
func TestAllocators(t *testing.T) {
	e := startServer(t)
	const quota = 64 << 20
	for _, addr := range []string{e.unix, e.tcp} {
		_, stderr := program{name: "allocators", addr: addr, token: mint(t, "ctest-allocators", quota),
			env: []string{fmt.Sprintf("GM_TEST_QUOTA=%d", quota)}}.run(t)
		if strings.Contains(stderr, "gpumux: ") {
			t.Errorf("unexpected interposer messages:\n%s", stderr)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := e.fake.Stats()
		if st.Physical == 0 && st.Mappings == 0 && st.Reservations == 0 && st.Pools == 0 && st.Allocations == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the program the backend holds %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTwoDevices: a program using two GPUs as a two-GPU PyTorch program
// does (tests/peer.c), with a token of both GPUs and one quota over them,
// over both transports; the server holds nothing of it afterwards.
func TestTwoDevices(t *testing.T) {
	e := startServerOn(t, 2, nil)
	const quota = 8 << 20
	tok, err := token.Mint(secret, token.Claims{ID: "ctest-peer", Quota: quota, Device: 0, MoreDevices: []int{1},
		Expires: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{e.unix, e.tcp} {
		_, stderr := program{name: "peer", args: []string{fmt.Sprint(quota)}, addr: addr, token: tok}.run(t)
		if strings.Contains(stderr, "gpumux: ") {
			t.Errorf("unexpected interposer messages:\n%s", stderr)
		}
	}
	var st fakecuda.Stats
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if st = e.fake.Stats(); st.Contexts == 0 && st.Allocations == 0 {
			break
		}
	}
	if st.Contexts != 0 || st.Allocations != 0 || st.ImplicitFrees != 0 {
		t.Errorf("after the programs: %+v; want nothing left and nothing freed implicitly", st)
	}
}

// TestLibraryTwoDevices: one library, one CUkernel, launched on two GPUs
// as the CUDA runtime does (tests/libctx.c): a module in each context, and
// none left on the server once the library is unloaded while both contexts
// live, nothing at all after the program.
func TestLibraryTwoDevices(t *testing.T) {
	e := startServerOn(t, 2, nil)
	tok, err := token.Mint(secret, token.Claims{ID: "ctest-libctx", Device: 0, MoreDevices: []int{1},
		Expires: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	bg, _ := program{name: "libctx", addr: e.unix, token: tok}.start(ctx, t, "UNLOADED ")
	if st := e.fake.Stats(); st.Modules != 0 || st.Functions != 0 || st.Contexts != 2 || st.ImplicitFrees != 0 {
		t.Errorf("after cuLibraryUnload: %+v; want no module or function in the 2 live contexts", st)
	}
	bg.finish(t)
	if strings.Contains(bg.stderr.String(), "gpumux: ") {
		t.Errorf("unexpected interposer messages:\n%s", bg.stderr.String())
	}
	var st fakecuda.Stats
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if st = e.fake.Stats(); st.Contexts == 0 {
			break
		}
	}
	if st.Contexts != 0 || st.Modules != 0 || st.Allocations != 0 || st.ImplicitFrees != 0 {
		t.Errorf("after the program: %+v; want nothing left and nothing freed implicitly", st)
	}
}

// TestCrossClient: a second process given the first's device pointer can
// neither read, write nor free it.
func TestCrossClient(t *testing.T) {
	e := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	owner := program{name: "cross", args: []string{"owner"}, addr: e.tcp, token: mint(t, "ctest-owner", 0)}
	bg, ptr := owner.start(ctx, t, "PTR ")
	// Another client with another token, and one with the same token.
	program{name: "cross", args: []string{"intruder", ptr}, addr: e.unix, token: mint(t, "ctest-intruder", 0)}.run(t)
	program{name: "cross", args: []string{"intruder", ptr}, addr: e.tcp, token: owner.token}.run(t)
	bg.finish(t)
}

// TestUnreachable: without a usable server cuInit and every forwarded
// call return CUDA_ERROR_NO_DEVICE, quickly, and the reason is logged
// once.
func TestUnreachable(t *testing.T) {
	e := startServer(t)
	expired, err := mintExpired()
	if err != nil {
		t.Fatal(err)
	}
	dir := shortTempDir(t)
	for _, tc := range []struct {
		name, addr, token, why string
	}{
		{"no address", "", "", "GPUMUX_REMOTE_ADDR is not set"},
		{"bad address", "nocolon", "", "want host:port"},
		{"no socket", "unix:" + filepath.Join(dir, "none.sock"), "", "connect: No such file or directory"},
		{"tcp refused", closedPort(t), "", "connect: Connection refused"},
		{"no token", e.unix, "", "refused the connection (CUDA_ERROR_NOT_PERMITTED): no token"},
		{"bad token", e.tcp, "gmx1.bogus.token", "refused the connection (CUDA_ERROR_NOT_PERMITTED): token"},
		{"expired token", e.unix, expired, "token expired"},
		{"silent server", stubServer(t, false), "", "no answer within 1.000 s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr := program{name: "unreachable", args: []string{"nodevice", "3"}, addr: tc.addr,
				token: tc.token, timeout: "1"}.run(t)
			if !strings.Contains(stderr, tc.why) || strings.Count(stderr, "gpumux: cannot use gpumux-remoted") != 1 {
				t.Errorf("stderr does not say %q once:\n%s", tc.why, stderr)
			}
		})
	}
}

// TestStalledServer: a server that admits the client and then never
// answers: the call fails after GPUMUX_REMOTE_TIMEOUT, the one waiting
// behind it too, and the connection is given up.
func TestStalledServer(t *testing.T) {
	addr := stubServer(t, true)
	_, stderr := program{name: "unreachable", args: []string{"stall", "3"}, addr: addr, timeout: "1"}.run(t)
	want := "gpumux: lost the connection to gpumux-remoted at " + addr + ": no answer within 1.000 s"
	if strings.Count(stderr, want) != 1 {
		t.Errorf("stderr does not say %q once:\n%s", want, stderr)
	}
}

// TestServerKilled: gpumux-remoted dies (SIGKILL) under a busy client:
// every call fails promptly with CUDA_ERROR_UNKNOWN, none hangs; restarted,
// it serves new clients.
func TestServerKilled(t *testing.T) {
	sock := filepath.Join(shortTempDir(t), "remoted.sock")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	srv := serveSubprocess(ctx, t, sock)

	prog := program{name: "dead", addr: "unix:" + sock, token: mint(t, "ctest-dead", 0), timeout: "10"}
	cmd := prog.command(ctx, t)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	var out strings.Builder
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		if sc.Text() == "READY" {
			break
		}
	}
	time.Sleep(200 * time.Millisecond) // both threads busy
	srv.Process.Signal(syscall.SIGKILL)
	srv.Wait()
	killed := time.Now()
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
	}
	err = cmd.Wait()
	if err != nil {
		t.Errorf("dead: %v\n%s\nstderr:\n%s", err, out.String(), stderr.String())
	}
	if d := time.Since(killed); d > 10*time.Second {
		t.Errorf("the client took %v to notice", d)
	}
	want := "gpumux: lost the connection to gpumux-remoted at unix:" + sock
	if strings.Count(stderr.String(), want) != 1 {
		t.Errorf("stderr does not say %q once:\n%s", want, stderr.String())
	}

	// Restarted on the same socket, the server serves new clients.
	serveSubprocess(ctx, t, sock)
	program{name: "mem", addr: "unix:" + sock, token: mint(t, "ctest-after-restart", 0)}.run(t)
}

// serveSubprocess runs gpumux-remoted's server (fake backend) in a child
// process on a unix socket, killed at the end of the test.
func serveSubprocess(ctx context.Context, t *testing.T, sock string) *exec.Cmd {
	t.Helper()
	srv := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	srv.Env = append(os.Environ(), serveEnv+"="+sock, secretEnv+"="+string(secret))
	srvOut, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var srvErr bytes.Buffer
	srv.Stderr = &srvErr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	if line, _ := bufio.NewReader(srvOut).ReadString('\n'); line != "SERVING\n" {
		t.Fatalf("server subprocess: %q\n%s", line, srvErr.String())
	}
	return srv
}

// TestExports: the library exports the CUDA driver API and nothing else:
// every call of calls.def marked export, every name of unsupported.list,
// and the entry points of interposer.c.
func TestExports(t *testing.T) {
	dir := build(t)
	f, err := elf.Open(filepath.Join(dir, "libcuda.so.1"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	for _, s := range syms {
		if s.Section == elf.SHN_UNDEF || elf.ST_BIND(s.Info) == elf.STB_LOCAL {
			continue
		}
		if !strings.HasPrefix(s.Name, "cu") || elf.ST_TYPE(s.Info) != elf.STT_FUNC {
			t.Errorf("exports %s (type %v): only cu* functions may be", s.Name, elf.ST_TYPE(s.Info))
		}
		exported[s.Name] = true
	}
	root := repoRoot(t)
	want := []string{
		"cuCtxGetCurrent", "cuCtxSetCurrent", "cuCtxPushCurrent_v2", "cuCtxPopCurrent_v2", "cuCtxCreate_v2",
		"cuCtxCreate_v3", "cuCtxCreate_v4", "cuCtxDestroy_v2", "cuLaunchKernel", "cuModuleLoadDataEx",
		"cuModuleLoadFatBinary", "cuModuleLoad", "cuGetErrorString", "cuGetErrorName", "cuGetProcAddress",
		"cuGetProcAddress_v2", "cuGetExportTable", "cuCtxCreate", "cuCtxDestroy", "cuLaunchKernel_ptsz",
	}
	def, err := os.ReadFile(filepath.Join(root, "remote", "proto", "calls.def"))
	if err != nil {
		t.Fatal(err)
	}
	exportRE := regexp.MustCompile(`(?m)^\d+\s+(cu\w+)\s+(\S*export\S*)\s*:`)
	for _, m := range exportRE.FindAllStringSubmatch(string(def), -1) {
		want = append(want, m[1])
	}
	list, err := os.ReadFile(filepath.Join(root, "remote", "interposer", "unsupported.list"))
	if err != nil {
		t.Fatal(err)
	}
	nUnsupported := 0
	for _, line := range strings.Split(string(list), "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		if line = strings.TrimSpace(line); line != "" {
			want = append(want, line)
			nUnsupported++
		}
	}
	for _, n := range want {
		if !exported[n] {
			t.Errorf("%s is not exported", n)
		}
	}
	if nUnsupported < 400 || len(exported) < len(want) {
		t.Errorf("%d exports, %d unsupported: want at least %d and 400", len(exported), nUnsupported, len(want))
	}
	t.Logf("%d exported symbols (%d unsupported stubs)", len(exported), nUnsupported)
}

// closedPort is a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func mintExpired() (string, error) {
	return token.Mint(secret, token.Claims{ID: "ctest-expired", Expires: time.Now().Add(-time.Hour)})
}

// protoStub admits clients and answers each request frame with answer,
// which writes raw frames.
func protoStub(t *testing.T, answer func(w io.Writer, h proto.Header)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveOne(t, ln, func(c net.Conn, br *bufio.Reader, _ proto.Header, _ []byte) {
		welcome(c)
		for {
			h, _, err := proto.ReadFrame(br, nil)
			if err != nil {
				return
			}
			if h.Flags&proto.FlagData == 0 {
				answer(c, h)
			}
		}
	})
	return ln.Addr().String()
}

// serveOne accepts one connection on ln, reads its first frame and hands
// them to serve, in the background until the test ends; then the
// connection and ln are closed.
func serveOne(t *testing.T, ln net.Listener, serve func(c net.Conn, br *bufio.Reader, h proto.Header, p []byte)) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		if h, p, err := proto.ReadFrame(br, nil); err == nil {
			serve(c, br, h, p)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
	})
}

// welcome admits the client on c.
func welcome(c io.Writer) {
	c.Write(proto.AppendFrame(nil, proto.Header{Op: proto.OpHello, Flags: proto.FlagReply}, proto.Welcome{Result: proto.Success}.Encode()))
}

func reply(h proto.Header, r proto.Result, out ...uint32) []byte {
	p := binary.LittleEndian.AppendUint32(nil, uint32(r))
	for _, v := range out {
		p = binary.LittleEndian.AppendUint32(p, v)
	}
	return proto.AppendFrame(nil, proto.Header{Op: h.Op, Flags: proto.FlagReply, Seq: h.Seq}, p)
}

func data(h proto.Header, n int) []byte {
	return proto.AppendFrame(nil, proto.Header{Op: h.Op, Flags: proto.FlagData, Seq: h.Seq}, make([]byte, n))
}

// TestProtocolErrors: a server that breaks the protocol loses the
// connection (CUDA_ERROR_UNKNOWN, logged once with the reason) and never
// gets a byte written past the caller's buffer.
func TestProtocolErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer func(w io.Writer, h proto.Header)
		why    string
	}{
		{"seq", func(w io.Writer, h proto.Header) {
			h.Seq++
			w.Write(reply(h, proto.Success, 12080))
		}, "protocol error: got op 2 seq 2 waiting for op 2 (cuDriverGetVersion) seq 1"},
		{"op", func(w io.Writer, h proto.Header) {
			h.Op++
			w.Write(reply(h, proto.Success, 12080))
		}, "protocol error: got op 3 seq 1 waiting for op 2 (cuDriverGetVersion) seq 1"},
		{"trailing", func(w io.Writer, h proto.Header) {
			w.Write(reply(h, proto.Success, 12080, 7))
		}, "protocol error: a malformed reply to cuDriverGetVersion (12 bytes, trailing bytes)"},
		{"truncated", func(w io.Writer, h proto.Header) {
			w.Write(reply(h, proto.Success))
		}, "protocol error: a malformed reply to cuDriverGetVersion (4 bytes, too short)"},
		{"tiny", func(w io.Writer, h proto.Header) {
			w.Write(proto.AppendFrame(nil, proto.Header{Op: h.Op, Flags: proto.FlagReply, Seq: h.Seq}, []byte{0, 0}))
		}, "protocol error: a reply of 2 bytes to cuDriverGetVersion"},
		{"flags", func(w io.Writer, h proto.Header) {
			w.Write(proto.AppendFrame(nil, proto.Header{Op: h.Op, Seq: h.Seq}, []byte{0, 0, 0, 0}))
		}, "protocol error: flags 0 waiting for the reply to cuDriverGetVersion"},
		{"huge", func(w io.Writer, h proto.Header) {
			f := reply(h, proto.Success, 12080)
			binary.LittleEndian.PutUint32(f, 16+proto.MaxPayload+1)
			w.Write(f)
		}, fmt.Sprintf("protocol error: a frame of length %d", 16+proto.MaxPayload+1)},
		{"moved-long", func(w io.Writer, h proto.Header) {
			// A Moved reply is the result alone: one that carries more
			// (here what a real reply to the call would) is not followed,
			// even with a well-formed MovedTo after it.
			w.Write(reply(h, proto.Moved, 12080))
			w.Write(proto.AppendFrame(nil, proto.Header{Op: proto.OpMoved, Flags: proto.FlagReply, Seq: h.Seq},
				proto.MovedTo{Addr: "127.0.0.1:1", Ticket: make([]byte, proto.TicketSize)}.Encode()))
		}, "protocol error: a Moved reply of 8 bytes to cuDriverGetVersion"},
		{"overflow", func(w io.Writer, h proto.Header) {
			w.Write(data(h, 32))
			w.Write(reply(h, proto.Success))
		}, "protocol error: cuMemcpyDtoH_v2: 32 bytes of data past the 16 asked for"},
		{"short", func(w io.Writer, h proto.Header) {
			w.Write(data(h, 8))
			w.Write(reply(h, proto.Success))
		}, "protocol error: cuMemcpyDtoH_v2 succeeded with 8 of 16 bytes"},
		{"error-partial", func(w io.Writer, h proto.Header) {
			if h.Op == proto.OpMemcpyDtoHV2 {
				w.Write(data(h, 8))
				w.Write(reply(h, proto.ErrInvalidValue))
				return
			}
			w.Write(reply(h, proto.Success, 12080))
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := protoStub(t, tc.answer)
			_, stderr := program{name: "protoerr", args: []string{tc.name}, addr: addr, timeout: "5"}.run(t)
			if tc.why == "" {
				if stderr != "" {
					t.Errorf("unexpected messages:\n%s", stderr)
				}
				return
			}
			want := "gpumux: lost the connection to gpumux-remoted at " + addr + ": " + tc.why
			if strings.Count(stderr, want) != 1 {
				t.Errorf("stderr does not say %q once:\n%s", want, stderr)
			}
		})
	}
}

// TestCache: repeats of the calls calls.def marks cache never reach the
// server, until an uncache call forgets those about modules and functions;
// the others always do.
func TestCache(t *testing.T) {
	var mu sync.Mutex
	count := map[proto.Op]int{}
	addr := protoStub(t, func(w io.Writer, h proto.Header) {
		mu.Lock()
		count[h.Op]++
		mu.Unlock()
		switch h.Op {
		case proto.OpCtxSynchronize, proto.OpFuncSetAttribute, proto.OpModuleUnload:
			w.Write(reply(h, proto.Success))
		case proto.OpModuleGetFunction:
			w.Write(reply(h, proto.Success, 7, 0)) // a function handle
		default:
			w.Write(reply(h, proto.Success, 12080))
		}
	})
	program{name: "protoerr", args: []string{"cache"}, addr: addr}.run(t)
	mu.Lock()
	defer mu.Unlock()
	// Three passes of three calls about one function: an attribute set
	// after the first and an unload after the second forget them.
	want := map[proto.Op]int{proto.OpDriverGetVersion: 1, proto.OpDeviceGetAttribute: 2, proto.OpCtxSynchronize: 5,
		proto.OpModuleGetFunction: 3, proto.OpFuncGetAttribute: 3,
		proto.OpOccupancyMaxActiveBlocksPerMultiprocessorWithFlags: 3, proto.OpFuncSetAttribute: 1, proto.OpModuleUnload: 1}
	for op, n := range want {
		if count[op] != n {
			t.Errorf("%s reached the server %d times, want %d", proto.Calls[op].Name, count[op], n)
		}
	}
}
