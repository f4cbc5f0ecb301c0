package server_test

import (
	"strings"
	"testing"
	"time"

	"github.com/gpumux/gpumux/remote/proto"
	"github.com/gpumux/gpumux/remote/server"
	"github.com/gpumux/gpumux/remote/token"
)

// TestTokenExpiry: when a connection's token expires, the server frees
// what the client held, and fails each of its calls from then on with
// CUDA_ERROR_NOT_PERMITTED (an async call's failure comes with the next
// sync call, as any async failure does), logging the expiry once; a while
// later it closes the connection.
func TestTokenExpiry(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel() // each waits for its token to expire
			inProcess := mode.srv == nil
			e := start(t, envConfig{srv: withMode(mode.srv, server.WithExpiredLinger(time.Second))})
			// Tokens expire on a whole second: this one in one to two.
			expires := time.Now().Add(2 * time.Second)
			cl := e.dial(t, mint(t, testSecret, token.Claims{ID: "job", Quota: 1 << 20, Expires: expires}))
			ctx := primary(t, cl)
			p := alloc(t, cl, ctx, 4096)
			upload(t, cl, ctx, p, make([]byte, 4096))

			eventually(t, "the client's memory to be counted", func() bool {
				return e.srv.Stats().Tenants["job"].MemoryUsed == 4096
			})
			eventually(t, "the expired client's memory to be freed", func() bool {
				return e.srv.Stats().Tenants["job"].MemoryUsed == 0
			})
			if time.Now().Before(expires.Truncate(time.Second)) {
				t.Fatal("the client's memory was freed before its token expired")
			}
			denied := proto.ErrNotPermitted
			_, r, err := cl.MemAllocV2(ctx, 4096)
			is(t, "cuMemAlloc after expiry", denied)(r, err)
			is(t, "cuMemcpyHtoD after expiry", denied)(cl.MemcpyHtoDV2(ctx, p, make([]byte, 3<<20), 3<<20))
			_, r, err = cl.DeviceGetCount(0)
			is(t, "cuDeviceGetCount after expiry", denied)(r, err)
			_, r, err = cl.CtxCreateV2(0, 0, 0)
			is(t, "cuCtxCreate after expiry", denied)(r, err)
			ok(t, "cuMemsetD8 after expiry (sent)")(cl.MemsetD8V2(ctx, p, 1, 16))
			is(t, "the sync call after it", denied)(cl.CtxSynchronize(ctx))
			is(t, "the next sync call", denied)(cl.CtxSynchronize(ctx))
			if !inProcess {
				return // the worker logs to stderr and has its own backend
			}
			if n := strings.Count(e.logs.String(), "token expired"); n != 1 {
				t.Errorf("the expiry is logged %d times, want once:\n%s", n, e.logs)
			}
			e.waitClean(t)
			eventually(t, "the connection to be closed a second after expiry", func() bool {
				_, _, err := cl.DeviceGetCount(0)
				return err != nil
			})
		})
	}
}

// TestTokenExpiryClosesABusyClient: a client that calls without pause,
// so that its worker answers every call from its busy poll and never
// sleeps, still has its connection closed after its token's expiry.
func TestTokenExpiryClosesABusyClient(t *testing.T) {
	e := start(t, envConfig{srv: []server.Option{server.WithSecret(testSecret),
		server.WithExpiredLinger(500 * time.Millisecond), server.WithBusyPoll(server.MaxBusyPoll)}})
	expires := time.Now().Add(time.Second)
	cl := e.dial(t, mint(t, testSecret, token.Claims{ID: "busy", Quota: 1 << 20, Expires: expires}))
	ctx := primary(t, cl)
	giveUp := expires.Add(5 * time.Second)
	for time.Now().Before(giveUp) {
		if _, err := cl.CtxSynchronize(ctx); err != nil {
			return // closed
		}
	}
	t.Fatalf("the connection of a client calling without pause stayed open 5s after its token expired:\n%s", e.logs)
}
