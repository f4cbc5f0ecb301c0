package ctest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpumux/gpumux/internal/cbuild"
	"github.com/gpumux/gpumux/internal/namelist"
)

// The NVML library of remote shares (remote/nvml): its C test program
// (remote/nvml/tests/nvml.c) and go-nvml, the binding gpumux's own Go
// code and many tools use, in a process whose libcuda.so.1 is the
// interposer talking to the server on the fake backend.

// nvmlUnsupported are the unanswered calls nvml.c makes, each twice: each
// must be logged once.
var nvmlUnsupported = []string{
	"nvmlDeviceGetPowerUsage", "nvmlDeviceGetTemperature", "nvmlDeviceGetUtilizationRates",
	"nvmlDeviceGetMinorNumber", "nvmlSystemGetDriverVersion",
}

// TestNVML runs nvml.c's checks over both transports, with a quota.
func TestNVML(t *testing.T) {
	const quota = 64 << 20
	e := startServer(t)
	for _, tr := range []struct{ name, addr string }{{"unix", e.unix}, {"tcp", e.tcp}} {
		t.Run(tr.name, func(t *testing.T) {
			_, stderr := program{name: "nvml", args: []string{"check"}, addr: tr.addr, token: mint(t, "ctest-nvml-"+tr.name, quota),
				env: []string{fmt.Sprintf("GM_TEST_QUOTA=%d", quota)}}.run(t)
			var logged []string
			for _, line := range strings.Split(strings.TrimSpace(stderr), "\n") {
				name, found := strings.CutSuffix(strings.TrimPrefix(line, "gpumux: "),
					" is not supported by gpumux's NVML for remote GPUs; it returns NVML_ERROR_NOT_SUPPORTED")
				if !found {
					t.Errorf("unexpected message: %q", line)
					continue
				}
				logged = append(logged, name)
			}
			slices.Sort(logged)
			if want := slices.Sorted(slices.Values(nvmlUnsupported)); !slices.Equal(logged, want) {
				t.Errorf("logged %v, want each of %v once", logged, want)
			}
		})
	}
}

// TestNVMLWithoutServer: without a server nvmlInit fails with
// NVML_ERROR_DRIVER_NOT_LOADED and says why once; NVML_INIT_FLAG_NO_GPUS
// initializes without devices.
func TestNVMLWithoutServer(t *testing.T) {
	_, stderr := program{name: "nvml", args: []string{"noserver"}}.run(t)
	for _, want := range []string{
		"gpumux: cannot use gpumux-remoted at (none): GPUMUX_REMOTE_ADDR is not set",
		"gpumux: NVML: the remote GPU cannot be used (CUDA_ERROR_NO_DEVICE; the interposer's message says why); nvmlInit returns 9 (Driver Not Loaded)",
	} {
		if n := strings.Count(stderr, want); n != 1 {
			t.Errorf("%q logged %d times, want once; stderr:\n%s", want, n, stderr)
		}
	}
}

// TestNVMLExports: the library exports exactly the functions of the real
// libnvidia-ml.so.1 (driver 580.159.04), so that programs linked against
// NVML load, and nothing else.
func TestNVMLExports(t *testing.T) {
	exported, others, err := cbuild.Exports(filepath.Join(build(t), "libnvidia-ml.so.1"))
	if err != nil {
		t.Fatal(err)
	}
	if len(others) > 0 {
		t.Errorf("exports %v: only functions may be", others)
	}
	want, err := namelist.ReadFile(filepath.Join(repoRoot(t), "timeslice", "limiter", "libnvidia-ml-580.159.04.symbols"))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(want)
	if !slices.Equal(exported, want) {
		t.Errorf("exports %d functions, want the real library's %d", len(exported), len(want))
		for _, n := range want {
			if _, found := slices.BinarySearch(exported, n); !found {
				t.Errorf("%s is not exported", n)
			}
		}
		for _, n := range exported {
			if _, found := slices.BinarySearch(want, n); !found {
				t.Errorf("%s is exported, but is not NVML's", n)
			}
		}
	}
}

// Environment of the go-nvml child (TestNVMLGoNVML).
const (
	goNVMLEnv  = "GM_CTEST_GO_NVML" // the library's path
	goNVMLWant = "GM_CTEST_GO_NVML_WANT"
)

// goNVMLExpect is what the go-nvml child must see, as
// "name|uuid|total|used".
type goNVMLExpect struct {
	name, uuid  string
	total, used uint64
}

func (w goNVMLExpect) String() string {
	return fmt.Sprintf("%s|%s|%d|%d", w.name, w.uuid, w.total, w.used)
}

func parseGoNVMLExpect(s string) (goNVMLExpect, error) {
	f := strings.Split(s, "|")
	if len(f) != 4 {
		return goNVMLExpect{}, fmt.Errorf("%s=%q: want name|uuid|total|used", goNVMLWant, s)
	}
	total, err1 := strconv.ParseUint(f[2], 10, 64)
	used, err2 := strconv.ParseUint(f[3], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return goNVMLExpect{}, fmt.Errorf("%s=%q: %w", goNVMLWant, s, err)
	}
	return goNVMLExpect{name: f[0], uuid: f[1], total: total, used: used}, nil
}

// TestNVMLGoNVML: go-nvml (nvml.WithLibraryPath at the built library) in a
// process of its own sees the share: one device, CUDA's name and UUID, the
// quota as its memory and, as used, what another process of the share
// holds; its own process list is empty (it has no context); what is not
// answered is ERROR_NOT_SUPPORTED.
func TestNVMLGoNVML(t *testing.T) {
	if os.Getenv("GM_CTEST_SANITIZE") != "" {
		t.Skip("go-nvml loads the library into a Go process, which has no sanitizer runtime")
	}
	const quota, held = 256 << 20, 24 << 20
	e := startServer(t)
	tok := mint(t, "ctest-go-nvml", quota)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	holder, _ := program{name: "nvml", args: []string{"hold", strconv.Itoa(held)}, addr: e.unix, token: tok}.start(ctx, t, "READY")
	defer holder.finish(t)

	name, uuid := e.gpu0()
	want := goNVMLExpect{name: name, uuid: uuid, total: quota, used: held}
	child := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), goNVMLEnv+"="+filepath.Join(build(t), "libnvidia-ml.so.1"), goNVMLWant+"="+want.String(),
		"GPUMUX_REMOTE_ADDR="+e.tcp, "GPUMUX_REMOTE_TOKEN="+tok)
	out, err := child.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "go-nvml: ok") {
		t.Errorf("go-nvml child: %v\n%s", err, out)
	}
}

// goNVMLChild is the child of TestNVMLGoNVML (TestMain runs it): it prints
// each failed check and "go-nvml: ok" if none failed.
func goNVMLChild(lib string) int {
	want, err := parseGoNVMLExpect(os.Getenv(goNVMLWant))
	if err != nil {
		fmt.Println(err)
		return 1
	}
	var failed []string
	fail := func(format string, a ...any) { failed = append(failed, fmt.Sprintf(format, a...)) }
	check := func(what string, r nvml.Return) bool {
		if r != nvml.SUCCESS {
			fail("%s: %v", what, r)
			return false
		}
		return true
	}
	lib2 := nvml.New(nvml.WithLibraryPath(lib))
	if !check("Init", lib2.Init()) {
		fmt.Println(strings.Join(failed, "\n"))
		return 1
	}
	defer lib2.Shutdown()
	if n, r := lib2.DeviceGetCount(); check("DeviceGetCount", r) && n != 1 {
		fail("DeviceGetCount: %d, want 1", n)
	}
	if v, r := lib2.SystemGetCudaDriverVersion_v2(); check("SystemGetCudaDriverVersion_v2", r) && v <= 0 {
		fail("SystemGetCudaDriverVersion_v2: %d", v)
	}
	dev, r := lib2.DeviceGetHandleByIndex(0)
	if !check("DeviceGetHandleByIndex", r) {
		fmt.Println(strings.Join(failed, "\n"))
		return 1
	}
	if name, r := dev.GetName(); check("GetName", r) && name != want.name {
		fail("GetName: %q, want %q", name, want.name)
	}
	if uuid, r := dev.GetUUID(); check("GetUUID", r) && uuid != want.uuid {
		fail("GetUUID: %q, want %q", uuid, want.uuid)
	}
	if byUUID, r := lib2.DeviceGetHandleByUUID(want.uuid); check("DeviceGetHandleByUUID", r) {
		if i, r := byUUID.GetIndex(); check("GetIndex", r) && i != 0 {
			fail("the device of its UUID has index %d", i)
		}
	}
	if pci, r := dev.GetPciInfo(); check("GetPciInfo", r) {
		byPci, r := lib2.DeviceGetHandleByPciBusId(string(bytes.TrimRight(pciBytes(pci.BusId), "\x00")))
		if check("DeviceGetHandleByPciBusId", r) && byPci != dev {
			fail("DeviceGetHandleByPciBusId: another handle")
		}
	}
	if m, r := dev.GetMemoryInfo(); check("GetMemoryInfo", r) && (m.Total != want.total || m.Used != want.used || m.Free != want.total-want.used) {
		fail("GetMemoryInfo: %+v, want total %d used %d", m, want.total, want.used)
	}
	if m, r := dev.GetMemoryInfo_v2(); check("GetMemoryInfo_v2", r) && (m.Total != want.total || m.Used != want.used || m.Reserved != 0) {
		fail("GetMemoryInfo_v2: %+v, want total %d used %d", m, want.total, want.used)
	}
	if procs, r := dev.GetComputeRunningProcesses(); check("GetComputeRunningProcesses", r) && len(procs) != 0 {
		fail("GetComputeRunningProcesses: %+v, want none (this process has no context)", procs)
	}
	if cur, pend, r := dev.GetMigMode(); check("GetMigMode", r) && (cur != nvml.DEVICE_MIG_DISABLE || pend != nvml.DEVICE_MIG_DISABLE) {
		fail("GetMigMode: %d %d", cur, pend)
	}
	if major, _, r := dev.GetCudaComputeCapability(); check("GetCudaComputeCapability", r) && major <= 0 {
		fail("GetCudaComputeCapability: major %d", major)
	}
	for what, r := range map[string]nvml.Return{
		"GetPowerUsage":       second(dev.GetPowerUsage()),
		"GetTemperature":      second(dev.GetTemperature(nvml.TEMPERATURE_GPU)),
		"GetUtilizationRates": second(dev.GetUtilizationRates()),
	} {
		if r != nvml.ERROR_NOT_SUPPORTED {
			fail("%s: %v, want ERROR_NOT_SUPPORTED", what, r)
		}
	}
	if len(failed) > 0 {
		fmt.Println(strings.Join(failed, "\n"))
		return 1
	}
	fmt.Println("go-nvml: ok")
	return 0
}

func second[T any](_ T, r nvml.Return) nvml.Return { return r }

// pciBytes is a C char array's bytes.
func pciBytes(a [32]int8) []byte {
	b := make([]byte, len(a))
	for i, c := range a {
		b[i] = byte(c)
	}
	return b
}
