package server_test

import (
	"bytes"
	"cmp"
	"context"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpumux/gpumux/remote/fakecuda"
	"github.com/gpumux/gpumux/remote/proto"
	"github.com/gpumux/gpumux/remote/server"
)

// workerEnv makes the test binary a tenant worker (see TestMain), with
// workerDevicesEnv fake devices (default 1).
const (
	workerEnv        = "GPUMUX_SERVER_TEST_WORKER"
	workerDevicesEnv = "GPUMUX_SERVER_TEST_WORKER_DEVICES"
	// workerMigrateEnv=1 makes the worker's sessions migratable.
	workerMigrateEnv = "GPUMUX_SERVER_TEST_WORKER_MIGRATE"
)

func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) == "1" {
		os.Exit(runWorker())
	}
	os.Exit(m.Run())
}

// runWorker is what gpumux-remoted --tenant-worker does, on the fake
// backend.
func runWorker() int {
	devices, err := strconv.Atoi(cmp.Or(os.Getenv(workerDevicesEnv), "1"))
	if err != nil {
		return 1
	}
	be, err := fakecuda.New(fakecuda.WithDevices(devices))
	if err != nil {
		return 1
	}
	f := os.NewFile(server.TenantFD, "ctrl")
	c, err := net.FileConn(f)
	if err != nil {
		return 1
	}
	opts := []server.Option{server.WithSecret(testSecret)}
	if os.Getenv(workerMigrateEnv) == "1" {
		opts = append(opts, server.WithMigration())
	}
	if err := server.New(be, opts...).ServeTenant(context.Background(), c.(*net.UnixConn)); err != nil {
		return 1
	}
	return 0
}

func tenantOpts() []server.Option { return tenantOptsDevices(1) }

// tenantOptsDevices runs workers whose fake backends have n devices, with
// env added to theirs.
func tenantOptsDevices(n int, env ...string) []server.Option {
	return []server.Option{server.WithSecret(testSecret), server.WithTenantProcesses(func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(append(os.Environ(), workerEnv+"=1", workerDevicesEnv+"="+strconv.Itoa(n)), env...)
		cmd.Stderr = os.Stderr
		return cmd
	})}
}

// TestTenantProcesses: each token ID runs in a worker process of its own;
// connections of one ID share it (and its quota); a worker goes when its
// last connection does; a killed worker ends only its tenant's
// connections, and the tenant's next connection gets a new worker.
func TestTenantProcesses(t *testing.T) {
	e := start(t, envConfig{srv: tenantOpts()})
	a1 := e.dial(t, e.token(t, "tenant-a", 1<<20))
	a2 := e.dial(t, e.token(t, "tenant-a", 1<<20))
	b := e.dial(t, e.token(t, "tenant-b", 0))

	tenants := e.srv.Tenants()
	if len(tenants) != 2 || tenants["tenant-a"] == tenants["tenant-b"] || tenants["tenant-a"] == os.Getpid() {
		t.Fatalf("workers %v: want two, one per tenant, neither the front", tenants)
	}

	// The data path works through a worker.
	ctxA := primary(t, a1)
	p := alloc(t, a1, ctxA, 4096)
	data := bytes.Repeat([]byte("gpumux"), 600)
	upload(t, a1, ctxA, p, data)
	if got := download(t, a1, ctxA, p, len(data)); !bytes.Equal(got, data) {
		t.Fatal("data changed through the tenant worker")
	}
	// One quota for both connections of tenant-a: 4096 of 1 MiB is used.
	ctxA2 := primary(t, a2)
	if _, r, err := a2.MemAllocV2(ctxA2, 1<<20); r != proto.ErrOutOfMemory || err != nil {
		t.Fatalf("tenant-a's second connection allocating its whole quota: %v %v, want %v", r, err, proto.ErrOutOfMemory)
	}
	// B's worker has never heard of A's pointer.
	ctxB := primary(t, b)
	is(t, "tenant-b reading tenant-a's pointer", proto.ErrInvalidValue)(b.MemcpyDtoHV2(ctxB, make([]byte, 16), p, 16))

	// Kill A's worker: A's connections fail promptly, B's keeps working.
	if err := syscall.Kill(tenants["tenant-a"], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if _, err := a1.CtxSynchronize(ctxA); err == nil {
		t.Fatal("a call on a killed worker's connection succeeded")
	}
	ok(t, "tenant-b after tenant-a's worker died")(b.CtxSynchronize(ctxB))
	eventually(t, "the front reports the dead worker", func() bool {
		return strings.Contains(e.logs.String(), "tenant worker died")
	})
	a3 := e.dial(t, e.token(t, "tenant-a", 1<<20))
	ok(t, "tenant-a's next connection")(a3.CtxSynchronize(primary(t, a3)))
	if pid := e.srv.Tenants()["tenant-a"]; pid == 0 || pid == tenants["tenant-a"] {
		t.Fatalf("tenant-a's worker is %d after the old one (%d) died: want a new one", pid, tenants["tenant-a"])
	}

	// Workers exit with their last connection.
	a2.Close()
	a3.Close()
	b.Close()
	eventually(t, "idle workers exit", func() bool { return len(e.srv.Tenants()) == 0 })
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range tenants {
		for syscall.Kill(pid, 0) == nil && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if syscall.Kill(pid, 0) == nil {
			t.Errorf("worker %d still runs after its tenant's connections closed", pid)
		}
	}
}

// TestTenantReconnectWhileWorkerGoesIdle: a tenant whose connections come
// one after another (as the Nomad plugin's probes of a server do) races
// each new connection against its worker going idle with the last one.
// Every connection must be served: one on its way to a worker is never cut
// off by the worker's retirement (the handoff is reserved before the
// welcome; CI once saw "connection reset by peer" at a probe's cuInit).
func TestTenantReconnectWhileWorkerGoesIdle(t *testing.T) {
	e := start(t, envConfig{srv: tenantOpts()})
	tok := e.token(t, "prober", 1<<20)
	starts := map[int]bool{}
	for i := range 60 {
		cl := e.dial(t, tok)
		if r, err := cl.Init(0, 0); err != nil || r != proto.Success {
			t.Fatalf("connection %d: cuInit: %v %v (workers started so far: %d)", i, r, err, len(starts))
		}
		starts[e.srv.Tenants()["prober"]] = true
		cl.Close()
	}
	t.Logf("60 connections one after another, served by %d worker processes", len(starts))
	eventually(t, "the last worker goes", func() bool { return len(e.srv.Tenants()) == 0 })
}
