package server_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gpumux/gpumux/remote/control"
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
