package server_test

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/gpumux/gpumux/remote/control"
	"github.com/gpumux/gpumux/remote/fakecuda"
	"github.com/gpumux/gpumux/remote/proto"
	"github.com/gpumux/gpumux/remote/server"
)

// TestMigrateTenantProcesses: between two servers that run each tenant in
// a worker process of its own (gpumux-remoted's default), a session moves
// through the control connection, there and back and there again, named
// by its tenant or by its number: each front hands the migration to the
// worker that holds the session, the target's front hands the restore to
// the tenant's worker there (started for it) and the client's Resume
// after it; the client keeps every byte and handle, and each session is
// served by one side only.
func TestMigrateTenantProcesses(t *testing.T) {
	mk := func() *env {
		return start(t, envConfig{tcp: true, srv: append(tenantOptsDevices(1, workerMigrateEnv+"=1"), server.WithMigration())})
	}
	envs := [2]*env{mk(), mk()}
	rng := rand.New(rand.NewPCG(5, 6))
	cl := envs[0].dial(t, jobToken(t))
	w := newWorkload(t, cl, rng)
	for i := range 3 {
		from, to := envs[i%2], envs[(i+1)%2]
		for range 5 {
			w.step(rng)
		}
		req := proto.Control{Kind: proto.ControlMigrate, Tenant: "job", Target: to.addr}
		if i == 1 {
			req = proto.Control{Kind: proto.ControlMigrate, Session: sessionOf(t, from), Target: to.addr}
		}
		rep := migrateWhileRunning(t, w, rng, from.addr, req)
		if rep.Result != proto.Success || len(rep.Moved) != 1 {
			t.Fatalf("move %d (%+v): %+v", i, req, rep)
		}
		w.verify()
		waitSessions(t, from, 0)
		waitSessions(t, to, 1)
		if _, ok := to.srv.Tenants()["job"]; !ok {
			t.Fatalf("move %d: no worker of the job on the target: %v", i, to.srv.Tenants())
		}
	}
	if got := cl.Moves(); got != 3 {
		t.Errorf("the client followed %d moves, want 3", got)
	}
	// Nothing to move: a tenant without a worker, a session of none.
	for _, req := range []proto.Control{
		{Kind: proto.ControlMigrate, Tenant: "nobody", Target: envs[0].addr},
		{Kind: proto.ControlMigrate, Session: 999999, Target: envs[0].addr},
	} {
		if rep := migrateWhileRunning(t, w, rng, envs[1].addr, req); rep.Result != proto.ErrNotFound {
			t.Errorf("%+v: %+v, want not found", req, rep)
		}
	}
}

// TestMigrateTenantProcessesRefused: a target that runs its tenants in
// workers checks the session's client at its front before it takes the
// snapshot, as it would the client's own handshake: a target at its
// client limit, or whose GPU has promised its memory to another tenant,
// refuses the session before the switch. The session stays on the source
// with everything it had, no worker starts for it on the target, and once
// the other tenant has gone the move goes through.
func TestMigrateTenantProcessesRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   []server.Option
		quota  uint64 // the other tenant's
		refuse string
	}{
		{"at its client limit", []server.Option{server.WithMaxClients(1)}, 0, "its limit of 1 clients"},
		{"the GPU promised", nil, 768 << 20, "cannot take a quota of 512 MiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mk := func(extra ...server.Option) *env {
				opts := append(tenantOptsDevices(1, workerMigrateEnv+"=1"), server.WithMigration())
				return start(t, envConfig{tcp: true, fake: []fakecuda.Option{fakecuda.WithMemory(1 << 30)}, srv: append(opts, extra...)})
			}
			from, to := mk(), mk(tc.opts...)
			rng := rand.New(rand.NewPCG(7, 8))
			cl := from.dial(t, jobToken(t))
			w := newWorkload(t, cl, rng)
			other := to.dial(t, to.token(t, "other", tc.quota))
			req := proto.Control{Kind: proto.ControlMigrate, Tenant: "job", Target: to.addr}
			rep := migrateWhileRunning(t, w, rng, from.addr, req)
			if rep.Result == proto.Success || !strings.Contains(rep.Message, tc.refuse) {
				t.Fatalf("the move to a target %s: %+v, want refused with %q", tc.name, rep, tc.refuse)
			}
			w.verify()
			waitSessions(t, from, 1)
			waitSessions(t, to, 0)
			if _, ok := to.srv.Tenants()["job"]; ok {
				t.Fatal("a worker of the job started on the target that refused it")
			}
			if cl.Moves() != 0 {
				t.Fatal("the client moved")
			}
			other.Close()
			deadline := time.Now().Add(10 * time.Second)
			for len(to.srv.Tenants()) != 0 && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond) // the other tenant's logout
			}
			if rep := migrateWhileRunning(t, w, rng, from.addr, req); rep.Result != proto.Success {
				t.Fatalf("the move once the other tenant has gone: %+v", rep)
			}
			w.verify()
			waitSessions(t, to, 1)
			if tc.quota != 0 {
				return
			}
			// The moved session counts as the target's one client, once:
			// another is refused until it ends.
			if c, err := to.tryDial(to.token(t, "other", 0)); err == nil || !strings.Contains(err.Error(), "limit of 1 clients") {
				if c != nil {
					c.Close()
				}
				t.Fatalf("a second client of a target at its limit with the moved session: %v", err)
			}
			cl.Close()
			for deadline := time.Now().Add(10 * time.Second); ; {
				c, err := to.tryDial(to.token(t, "other", 0))
				if err == nil {
					c.Close()
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("a client once the moved session has ended: %v", err)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// migrateWhileRunning sends a control request to the server at addr and
// runs the workload until it is answered.
func migrateWhileRunning(t *testing.T, w *workload, rng *rand.Rand, addr string, req proto.Control) proto.ControlReply {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cc, err := control.Dial(ctx, addr, testSecret, req)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	replies := make(chan proto.ControlReply, 1)
	go func() {
		rep, err := cc.Reply()
		if err != nil {
			rep.Message = err.Error()
		}
		replies <- rep
	}()
	for {
		select {
		case rep := <-replies:
			return rep
		default:
			w.step(rng)
		}
	}
}

// waitSessions waits until e serves n sessions of the job.
func waitSessions(t *testing.T, e *env, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(e.srv.Sessions()["job"]) != n {
		if time.Now().After(deadline) {
			t.Fatalf("the job's sessions: %v, want %d", e.srv.Sessions(), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
