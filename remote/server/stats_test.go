package server_test

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"syscall"
	"testing"
	"time"

	"github.com/gpumux/gpumux/remote/fakecuda"
	"github.com/gpumux/gpumux/remote/proto"
	"github.com/gpumux/gpumux/remote/server"
)

// modes are the two ways a server runs its tenants.
var modes = []struct {
	name string
	srv  []server.Option
}{
	{"in-process", nil},
	{"tenant processes", tenantOpts()},
}

// wantCalls checks st's calls by name, {ok, failed}, and that each
// call's latency histogram counts every call.
func wantCalls(st server.Stats, calls map[string][2]uint64) error {
	got := map[string][2]uint64{}
	for op, cs := range st.Calls {
		var n uint64
		for _, b := range cs.Latency {
			n += b
		}
		if n != cs.OK+cs.Failed || len(cs.Latency) != len(server.LatencyBuckets())+1 {
			return fmt.Errorf("%s: %d latency buckets counting %d calls, want %d counting %d",
				proto.Calls[op].Name, len(cs.Latency), n, len(server.LatencyBuckets())+1, cs.OK+cs.Failed)
		}
		got[proto.Calls[op].Name] = [2]uint64{cs.OK, cs.Failed}
	}
	return want("calls", got, calls)
}

// statsEventually polls the server's statistics until check passes (a
// worker reports within a second), failing with check's last complaint.
func statsEventually(t *testing.T, e *env, check func(server.Stats) error) server.Stats {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := e.srv.Stats()
		err := check(st)
		if err == nil {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("statistics after 5s: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// want compares a part of the statistics with what it should be.
func want[T any](what string, got, want T) error {
	if !reflect.DeepEqual(got, want) {
		return fmt.Errorf("%s: %v, want %v", what, got, want)
	}
	return nil
}

// TestStats: the statistics count what the clients did, the same with and
// without tenant processes.
func TestStats(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			e := start(t, envConfig{srv: mode.srv})
			cl := e.dial(t, e.token(t, "a", 1<<20))
			ctx := primary(t, cl)
			p := alloc(t, cl, ctx, 4096)
			upload(t, cl, ctx, p, make([]byte, 3000))
			download(t, cl, ctx, p, 1000)
			// Asynchronous calls count their own result, also behind an
			// earlier failure; the synchronous call reporting it fails.
			ok(t, "a memset past the allocation")(cl.MemsetD8V2(ctx, p, 0, 8192))
			ok(t, "another")(cl.MemsetD8V2(ctx, p, 0, 8192))
			ok(t, "a good memset")(cl.MemsetD8V2(ctx, p, 0, 4096))
			is(t, "the sync after them", proto.ErrInvalidValue)(cl.CtxSynchronize(ctx))
			ok(t, "the next sync")(cl.CtxSynchronize(ctx))
			if _, err := proto.Dial(t.Context(), e.network, e.addr, proto.Hello{Token: "gmx1.AAAA.BBBB"}, 0); !errors.Is(err, proto.ErrRefused) {
				t.Fatalf("a bad token: %v", err)
			}
			if _, err := proto.Dial(t.Context(), e.network, e.addr, proto.Hello{Token: e.token(t, "b", fakecuda.DefaultMemory)}, 0); !errors.Is(err, proto.ErrRefused) {
				t.Fatalf("a quota past the GPU's memory: %v", err)
			}

			calls := map[string][2]uint64{
				"cuDevicePrimaryCtxRetain": {1, 0}, "cuMemAlloc_v2": {1, 0}, "cuMemcpyHtoD_v2": {1, 0},
				"cuMemcpyDtoH_v2": {1, 0}, "cuMemsetD8_v2": {1, 2}, "cuCtxSynchronize": {1, 1},
			}
			wantRefused := map[string]uint64{}
			for _, r := range server.RefusalReasons() {
				wantRefused[r] = 0
			}
			wantRefused["bad_token"], wantRefused["admission"] = 1, 1
			statsEventually(t, e, func(st server.Stats) error {
				return errors.Join(
					wantCalls(st, calls),
					want("bytes to the device", st.BytesToDevice, 3000),
					want("bytes to the host", st.BytesToHost, 1000),
					want("tenants", st.Tenants, map[string]server.TenantStats{"a": {Sessions: 1, MemoryUsed: 4096, Quota: 1 << 20}}),
					want("refused", st.Refused, wantRefused),
					want("admissions refused", st.AdmissionsRefused, map[int]uint64{0: 1}),
				)
			})

			ok(t, "cuMemFree")(cl.MemFreeV2(ctx, p))
			calls["cuMemFree_v2"] = [2]uint64{1, 0}
			statsEventually(t, e, func(st server.Stats) error {
				return errors.Join(wantCalls(st, calls),
					want("tenants", st.Tenants, map[string]server.TenantStats{"a": {Sessions: 1, Quota: 1 << 20}}))
			})

			cl.Close()
			workers := 0
			if mode.srv != nil {
				workers = 1
			}
			st := statsEventually(t, e, func(st server.Stats) error {
				return errors.Join(wantCalls(st, calls),
					want("tenants", len(st.Tenants), 0),
					want("workers", st.Workers, 0),
					want("worker starts", st.WorkerStarts, uint64(workers)),
				)
			})
			if st.WorkerDeaths != 0 {
				t.Errorf("%d worker deaths, want none", st.WorkerDeaths)
			}
		})
	}
}

// TestStatsOutliveWorkers: what a worker reported stays counted after it
// is killed; its death is counted, and its tenant's next worker counts on
// from there.
func TestStatsOutliveWorkers(t *testing.T) {
	e := start(t, envConfig{srv: tenantOpts()})
	cl := e.dial(t, e.token(t, "a", 0))
	ctx := primary(t, cl)
	for range 5 {
		ok(t, "cuCtxSynchronize")(cl.CtxSynchronize(ctx))
	}
	calls := map[string][2]uint64{"cuDevicePrimaryCtxRetain": {1, 0}, "cuCtxSynchronize": {5, 0}}
	statsEventually(t, e, func(st server.Stats) error {
		return errors.Join(wantCalls(st, calls), want("workers", st.Workers, 1))
	})

	if err := syscall.Kill(e.srv.Tenants()["a"], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	statsEventually(t, e, func(st server.Stats) error {
		return errors.Join(
			wantCalls(st, calls),
			want("tenants", len(st.Tenants), 0),
			want("workers", st.Workers, 0),
			want("worker deaths", st.WorkerDeaths, 1),
		)
	})

	cl = e.dial(t, e.token(t, "a", 0))
	ok(t, "cuCtxSynchronize")(cl.CtxSynchronize(primary(t, cl)))
	calls2 := maps.Clone(calls)
	calls2["cuDevicePrimaryCtxRetain"] = [2]uint64{2, 0}
	calls2["cuCtxSynchronize"] = [2]uint64{6, 0}
	statsEventually(t, e, func(st server.Stats) error {
		return errors.Join(
			wantCalls(st, calls2),
			want("workers", st.Workers, 1),
			want("worker starts", st.WorkerStarts, 2),
			want("tenants", st.Tenants, map[string]server.TenantStats{"a": {Sessions: 1}}),
		)
	})
}
