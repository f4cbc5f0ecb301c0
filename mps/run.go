package mps

import (
	"context"
	"sync"
	"time"
)

// Run watches the daemons until ctx is done. Every check interval it sends
// each one get_server_list (bounded by the command timeout). A daemon that
// does not answer is reported unhealthy with the reason at once; a dead one
// is restarted after the restart backoff, its stale files removed first and
// its defaults applied again, and is healthy again once it answers. A daemon
// whose process lives but does not answer is killed and restarted only after
// the hang timeout. Draining daemons are quit once they have no clients.
//
// When ctx ends, Run returns and leaves every daemon running: a plugin that
// stops must not take its clients' GPU work with it.
func (m *Manager) Run(ctx context.Context) {
	timer := time.NewTimer(m.interval)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		if err := m.lockOps(ctx); err != nil {
			return
		}
		m.check(ctx)
		wait := m.nextWake()
		m.unlockOps()
		timer.Reset(wait)
	}
}

// check probes every daemon once, in parallel. The caller holds ops.
func (m *Manager) check(ctx context.Context) {
	var wg sync.WaitGroup
	for _, d := range m.list() {
		wg.Go(func() { m.checkOne(ctx, d) })
	}
	wg.Wait()
}

func (m *Manager) checkOne(ctx context.Context, d *daemon) {
	if d.draining {
		if err := m.drain(ctx, d); err != nil && ctx.Err() == nil {
			m.log.Warn("draining MPS control daemon", "device", d.dev.UUID, "error", err)
		}
		return
	}
	_, err := m.servers(ctx, d.dev.UUID)
	if ctx.Err() != nil {
		return // cancelled: the probe says nothing about the daemon
	}
	if err != nil {
		if err := m.recover(ctx, d, err, false); err != nil && ctx.Err() == nil {
			m.log.Debug("MPS control daemon not recovered yet", "device", d.dev.UUID, "error", err)
		}
		return
	}
	if pid := readPIDFile(m.PipeDir(d.dev.UUID)); d.known && pid != d.pid {
		// Restarted by someone else: its defaults are the binary's.
		m.log.Warn("MPS control daemon was replaced outside this manager; applying its defaults again", "device", d.dev.UUID, "old_pid", d.pid, "pid", pid)
		m.setPID(d, pid)
		d.defaultsOK, d.pinnedSet = false, 0
	}
	d.known = true
	d.failingSince, d.attempts = time.Time{}, 0
	if err := m.finish(ctx, d); err != nil && ctx.Err() == nil {
		m.log.Warn("MPS control daemon defaults", "device", d.dev.UUID, "error", err)
	}
}

// nextWake is the time until the next pass: the check interval, or sooner
// when a restart is due. The caller holds ops.
func (m *Manager) nextWake() time.Duration {
	wait := m.interval
	now := m.now()
	for _, d := range m.list() {
		if d.failingSince.IsZero() || d.draining {
			continue
		}
		if until := d.nextRestart.Sub(now); until < wait {
			wait = max(until, time.Millisecond)
		}
	}
	return wait
}
