package ctest

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpumux/gpumux/internal/syncbuf"
)

// The accounting file's layout (timeslice/limiter/README.md).
const (
	acctHdr   = 64
	acctSlots = 256
	acctSlot  = 64
	acctSize  = acctHdr + acctSlots*acctSlot
)

// slotCheck is lim_acct_slot_check.
func slotCheck(idx uint32, bytes, tag uint64) uint64 {
	x := bytes ^ (tag * 0x9E3779B97F4A7C15) ^ (uint64(idx) << 48) ^ 0x6770756d75780001
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x | 1
}

func acctHeader() []byte {
	h := make([]byte, acctHdr)
	copy(h, "GPUMUXLM")
	binary.LittleEndian.PutUint32(h[8:], 1)
	binary.LittleEndian.PutUint32(h[12:], acctSlots)
	binary.LittleEndian.PutUint32(h[16:], acctSlot)
	binary.LittleEndian.PutUint32(h[20:], acctHdr)
	return h
}

// setSlot writes a slot with a valid check word.
func setSlot(f []byte, i int, bytes, tag uint64, pid uint32) {
	s := f[acctHdr+i*acctSlot:][:acctSlot]
	binary.LittleEndian.PutUint64(s[0:], bytes)
	binary.LittleEndian.PutUint64(s[8:], tag)
	binary.LittleEndian.PutUint64(s[16:], slotCheck(uint32(i), bytes, tag))
	binary.LittleEndian.PutUint32(s[24:], pid)
}

// slotOf finds the slot of a process by its pid.
func slotOf(t *testing.T, f []byte, pid int) int {
	t.Helper()
	for i := 0; i < acctSlots && acctHdr+(i+1)*acctSlot <= len(f); i++ {
		if binary.LittleEndian.Uint32(f[acctHdr+i*acctSlot+24:]) == uint32(pid) {
			return i
		}
	}
	t.Fatalf("no slot of pid %d", pid)
	return -1
}

// TestAccountingFile: what a process writes, as the README describes it.
func TestAccountingFile(t *testing.T) {
	sh := newShare(t, limit, 50, "cap")
	p := program{name: "mem", args: []string{"hold", "12345"}, sh: sh}.start(t, "HELD")
	f, err := os.ReadFile(sh.acctFile())
	if err != nil {
		t.Fatal(err)
	}
	if len(f) != acctSize || !bytes.Equal(f[:acctHdr], acctHeader()) {
		t.Fatalf("the file is %d bytes, header % x", len(f), f[:min(len(f), acctHdr)])
	}
	i := slotOf(t, f, p.cmd.Process.Pid)
	s := f[acctHdr+i*acctSlot:][:acctSlot]
	n, tag, check := binary.LittleEndian.Uint64(s), binary.LittleEndian.Uint64(s[8:]), binary.LittleEndian.Uint64(s[16:])
	if n != 12345 || tag == 0 || check != slotCheck(uint32(i), n, tag) || binary.LittleEndian.Uint64(s[32:]) == 0 {
		t.Errorf("slot %d: bytes %d tag %x check %x start %d", i, n, tag, check, binary.LittleEndian.Uint64(s[32:]))
	}
	if st, _ := os.Stat(sh.acctFile()); st.Mode().Perm() != 0o666 {
		t.Errorf("the file's mode is %v, want 0666 (every user of the share writes it)", st.Mode())
	}
	p.finish()
}

// TestForgedAccounting: whatever the accounting file says, the share's
// processes never get more than the limit minus what live processes hold:
// damage counts as full use until the owners rewrite their slots (which
// they do at their next allocation, free or memory query), garbage of
// dead processes is dropped, values cannot wrap. (A forger who computes
// valid check words could lower a live process's count; such a process of
// the share could as well load the real driver: README.md, "Threat model".)
func TestForgedAccounting(t *testing.T) {
	sh := newShare(t, limit, 50, "cap")
	const x, y = 8 << 20, 4 << 20
	a := program{name: "mem", args: []string{"hold", strconv.Itoa(x)}, sh: sh}.start(t, "HELD")
	b := program{name: "mem", args: []string{"hold", strconv.Itoa(y)}, sh: sh}.start(t, "HELD")
	orig, err := os.ReadFile(sh.acctFile())
	if err != nil {
		t.Fatal(err)
	}
	sa, sb := slotOf(t, orig, a.cmd.Process.Pid), slotOf(t, orig, b.cmd.Process.Pid)
	tagOf := func(i int) uint64 { return binary.LittleEndian.Uint64(orig[acctHdr+i*acctSlot+8:]) }
	rng := rand.New(rand.NewSource(1))
	garbage := func(n int) []byte {
		g := make([]byte, n)
		rng.Read(g)
		return g
	}
	clone := func() []byte { return append([]byte(nil), orig...) }
	const left = limit - x - y
	for _, tc := range []struct {
		name  string
		forge func() []byte
		exact bool // the forgery changes nothing the processes rely on
	}{
		{"zeros", func() []byte { return make([]byte, acctSize) }, false},
		{"empty", func() []byte { return nil }, false},
		{"garbage", func() []byte { return garbage(acctSize) }, false},
		{"short", func() []byte { return clone()[:100] }, false},
		{"long", func() []byte { return append(clone(), garbage(1<<20)...) }, true},
		{"bad header", func() []byte {
			f := clone()
			copy(f, "EVILEVIL")
			binary.LittleEndian.PutUint32(f[12:], 1)
			return f
		}, true},
		{"live slots swapped", func() []byte {
			f := clone()
			sA := append([]byte(nil), f[acctHdr+sa*acctSlot:][:acctSlot]...)
			copy(f[acctHdr+sa*acctSlot:], f[acctHdr+sb*acctSlot:][:acctSlot])
			copy(f[acctHdr+sb*acctSlot:], sA)
			return f
		}, false},
		{"values that wrap", func() []byte {
			f := clone()
			setSlot(f, sa, ^uint64(0)-y/2, tagOf(sa), uint32(a.cmd.Process.Pid))
			setSlot(f, sb, y, tagOf(sb), uint32(b.cmd.Process.Pid))
			return f
		}, false},
		{"dead slots claim it all", func() []byte {
			f := clone()
			for i := 0; i < acctSlots; i++ {
				if i != sa && i != sb {
					setSlot(f, i, limit, uint64(i)+1, 1)
				}
			}
			return f
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(sh.acctFile(), tc.forge(), 0o666); err != nil {
				t.Fatal(err)
			}
			out, _ := program{name: "mem", args: []string{"try", strconv.Itoa(left + 1)}, sh: sh}.run(t)
			free := freeOf(t, out)
			if free > left || !strings.Contains(out, "RESULT 2\n") {
				t.Errorf("with the forged file: %s(want FREE at most %d and CUDA_ERROR_OUT_OF_MEMORY)", out, left)
			}
			if tc.exact && free != left {
				t.Errorf("FREE %d, want %d", free, left)
			}
			// The owners rewrite their slots: exact again.
			a.send("touch")
			a.expect("TOUCHED")
			b.send("touch")
			b.expect("TOUCHED")
			out, _ = program{name: "mem", args: []string{"try", strconv.Itoa(left)}, sh: sh}.run(t)
			if want := fmt.Sprintf("FREE %d\nRESULT 0\n", left); !strings.Contains(out, want) {
				t.Errorf("after the owners rewrote their slots: %s(want %q)", out, want)
			}
		})
	}
	a.finish()
	b.finish()
}

func freeOf(t *testing.T, out string) uint64 {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(l, "FREE "); ok {
			n, err := strconv.ParseUint(v, 10, 64)
			if err == nil {
				return n
			}
		}
	}
	t.Fatalf("no FREE line in %q", out)
	return 0
}

// fuzzHarness is an acctfuzz process and its accounting file.
type fuzzHarness struct {
	file   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *bufio.Reader
	stderr *syncbuf.Buffer
}

func startFuzzHarness(f *testing.F, child bool) *fuzzHarness {
	b := getBuild(f)
	dir := f.TempDir()
	args := []string{dir, strconv.Itoa(limit)}
	if child {
		args = append(args, "child")
	}
	cmd := exec.Command(filepath.Join(b.bin, "acctfuzz"), args...)
	emulate(cmd)
	if os.Getenv("GM_CTEST_SANITIZE") != "" {
		cmd.Env = append(os.Environ(), "ASAN_OPTIONS=detect_leaks=0")
	}
	h := &fuzzHarness{file: filepath.Join(dir, "memory.v1"), cmd: cmd, stderr: &syncbuf.Buffer{}}
	var err error
	if h.stdin, err = cmd.StdinPipe(); err != nil {
		f.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		f.Fatal(err)
	}
	h.out = bufio.NewReader(stdout)
	cmd.Stderr = h.stderr
	if err := cmd.Start(); err != nil {
		f.Fatal(err)
	}
	if line, err := h.out.ReadString('\n'); line != "READY\n" {
		cmd.Process.Kill()
		cmd.Wait()
		f.Fatalf("acctfuzz: %q, %v; stderr:\n%s", line, err, h.stderr.String())
	}
	f.Cleanup(func() {
		h.stdin.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	return h
}

// check writes data as the accounting file and asks the harness.
func (h *fuzzHarness) check(data []byte) error {
	if err := os.WriteFile(h.file, data, 0o666); err != nil {
		return err
	}
	if _, err := io.WriteString(h.stdin, "check\n"); err != nil {
		return fmt.Errorf("acctfuzz is gone (%v); stderr:\n%s", err, h.stderr.String())
	}
	line, err := h.out.ReadString('\n')
	if err != nil {
		return fmt.Errorf("acctfuzz did not answer (%v); stderr:\n%s", err, h.stderr.String())
	}
	if !strings.HasPrefix(line, "ok ") {
		return fmt.Errorf("acctfuzz: %s", strings.TrimSpace(line))
	}
	return nil
}

// FuzzAccounting feeds arbitrary bytes as the accounting file to the
// accounting code, with and without another live process in the share:
// it must never crash or hang, never count more than the limit, never let
// a reservation go past it, and (without another live process) count
// exactly what this process holds.
func FuzzAccounting(f *testing.F) {
	valid := append(acctHeader(), make([]byte, acctSlots*acctSlot)...)
	withSlots := append([]byte(nil), valid...)
	setSlot(withSlots, 0, limit/4, 7, 1)
	setSlot(withSlots, 1, 1<<63, 9, 2)
	setSlot(withSlots, 255, ^uint64(0), 11, 3)
	ff := bytes.Repeat([]byte{0xff}, acctSize)
	for _, seed := range [][]byte{nil, {0}, acctHeader(), valid, withSlots, ff, withSlots[:acctHdr+acctSlot+5],
		append(append([]byte(nil), withSlots...), ff...)} {
		f.Add(seed)
	}
	alone, shared := startFuzzHarness(f, false), startFuzzHarness(f, true)
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 1<<17 {
			data = data[:1<<17]
		}
		for _, h := range []*fuzzHarness{alone, shared} {
			if err := h.check(data); err != nil {
				t.Fatal(err)
			}
		}
	})
}
