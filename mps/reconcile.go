package mps

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Reconcile makes the daemons match want, one per Device.
//
// A wanted device whose daemon already answers in its pipe directory (after
// a plugin restart, say) is adopted, not restarted; one without is started.
// Either way its defaults are read back and set where they differ. A daemon
// whose device is no longer wanted, found in this Manager or in the state
// directory, is quit once none of its servers has a client; until then it
// keeps running, reported as draining, and later Reconcile and Run passes
// check it again. quit is never sent to a daemon with clients.
//
// Errors name their device; one device's failure does not stop the others,
// and Run retries failed starts.
func (m *Manager) Reconcile(ctx context.Context, want []Device) error {
	if err := m.validate(want); err != nil {
		return err
	}
	if err := m.lockOps(ctx); err != nil {
		return err
	}
	defer m.unlockOps()
	if err := ensureDir(m.root(), 0o755); err != nil {
		return fmt.Errorf("mps: %w", err)
	}
	if dir := closedAncestor(m.root()); dir != "" && len(want) > 0 && !m.warnedClosed {
		m.warnedClosed = true
		m.log.Warn("MPS clients that do not run as root cannot reach their pipe directory, and CUDA runs them WITHOUT MPS (whole GPU, no limits): give others search permission (o+x) on this directory",
			"directory", dir)
	}
	wanted := make(map[string]bool, len(want))
	var errs []error
	for _, w := range want {
		wanted[w.UUID] = true
		if err := ctx.Err(); err != nil {
			return errors.Join(append(errs, err)...)
		}
		if err := m.ensure(ctx, m.want(w)); err != nil {
			errs = append(errs, fmt.Errorf("MPS control daemon for %s: %w", w.UUID, err))
		}
	}
	m.discover(ctx, wanted)
	for _, d := range m.list() {
		if wanted[d.dev.UUID] {
			continue
		}
		if err := m.drain(ctx, d); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// validate checks a wanted set before anything is touched.
func (m *Manager) validate(want []Device) error {
	seen := make(map[string]bool, len(want))
	for _, d := range want {
		if err := validUUID(d.UUID); err != nil {
			return fmt.Errorf("mps: %w", err)
		}
		if seen[d.UUID] {
			return fmt.Errorf("mps: device %s wanted twice", d.UUID)
		}
		seen[d.UUID] = true
		if d.ThreadPercent < 0 || d.ThreadPercent > 100 {
			return fmt.Errorf("mps: device %s: thread percentage %d is not within 1-100 (0 for 100)", d.UUID, d.ThreadPercent)
		}
		if n := len(m.PipeDir(d.UUID)); n > maxPipeDirLen {
			return fmt.Errorf("mps: device %s: pipe directory %s is %d bytes long, and MPS needs at most %d (its sockets' paths must fit in 108 bytes): use a shorter state directory",
				d.UUID, m.PipeDir(d.UUID), n, maxPipeDirLen)
		}
	}
	return nil
}

// validUUID accepts the GPU and MIG UUIDs of current drivers; the UUID names
// a directory, so it may not hold a path separator.
func validUUID(s string) error {
	if !strings.HasPrefix(s, "GPU-") && !strings.HasPrefix(s, "MIG-") {
		return fmt.Errorf("device UUID %q does not start with GPU- or MIG-", s)
	}
	if strings.ContainsAny(s, "/\\\x00 \t\n") {
		return fmt.Errorf("device UUID %q holds a path separator or space", s)
	}
	return nil
}

// want records w as wanted and returns its daemon record.
func (m *Manager) want(w Device) *daemon {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.daemons[w.UUID]
	if d == nil {
		d = &daemon{dev: w, reason: fmt.Sprintf("MPS control daemon for %s not started yet", w.UUID)}
		m.daemons[w.UUID] = d
	}
	d.dev = w
	d.defaultsOK = false // read back on every Reconcile
	if d.draining {
		d.draining, d.clients, d.healthy = false, nil, false
		d.reason = fmt.Sprintf("MPS control daemon for %s wanted again", w.UUID)
	}
	return d
}

// makeDirs creates a device's directories: the pipe directory and its
// parents 0755, because clients (task users, not only root) must reach the
// sockets inside; the log directory 0700, because only the daemon (root)
// writes there. Each device has its own; none is shared.
func (m *Manager) makeDirs(uuid string) error {
	for _, dir := range []struct {
		path string
		perm os.FileMode
	}{
		{m.root(), 0o755},
		{filepath.Join(m.root(), uuid), 0o755},
		{m.PipeDir(uuid), 0o755},
		{m.LogDir(uuid), 0o700},
	} {
		if err := ensureDir(dir.path, dir.perm); err != nil {
			return fmt.Errorf("MPS directories: %w", err)
		}
	}
	return nil
}

// ensure adopts or starts a wanted daemon and applies its defaults.
func (m *Manager) ensure(ctx context.Context, d *daemon) error {
	uuid := d.dev.UUID
	if err := m.makeDirs(uuid); err != nil {
		m.setHealth(d, false, fmt.Sprintf("MPS control daemon for %s: %v", uuid, err))
		return err
	}
	if _, err := m.servers(ctx, uuid); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// A first start, or a restart of a daemon just found dead, is
		// immediate; after a failed attempt the backoff holds, so that a
		// caller reconciling whenever health changes (node.Watch) does not
		// spin on a daemon that cannot start.
		return m.recover(ctx, d, err, d.attempts == 0)
	}
	if !d.known {
		d.known = true
		m.setPID(d, readPIDFile(m.PipeDir(uuid)))
		m.log.Info("adopted running MPS control daemon", "device", uuid, "pid", d.pid)
	}
	d.failingSince, d.attempts = time.Time{}, 0
	return m.finish(ctx, d)
}

// finish applies a daemon's defaults if needed and records its health.
func (m *Manager) finish(ctx context.Context, d *daemon) error {
	if !d.defaultsOK {
		if err := m.applyDefaults(ctx, d); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			m.setHealth(d, false, fmt.Sprintf("MPS control daemon for %s: defaults not applied: %v", d.dev.UUID, err))
			return fmt.Errorf("defaults not applied: %w", err)
		}
	}
	m.setHealth(d, true, "")
	return nil
}

func (m *Manager) setPID(d *daemon, pid int) {
	m.mu.Lock()
	d.pid = pid
	m.mu.Unlock()
}

// recover handles a daemon that did not answer probeErr: it waits out a
// live but stalled daemon up to the hang timeout, then kills it; it starts
// a dead one, at once when immediate, else after the restart backoff.
func (m *Manager) recover(ctx context.Context, d *daemon, probeErr error, immediate bool) error {
	uuid, pipe := d.dev.UUID, m.PipeDir(d.dev.UUID)
	now := m.now()
	if d.failingSince.IsZero() {
		d.failingSince, d.attempts = now, 0
		d.nextRestart = now.Add(m.backoff(1))
	}
	if pid, alive := daemonAlive(pipe, m.binary); alive {
		if now.Sub(d.failingSince) < m.hangTimeout {
			why := fmt.Sprintf("not answering: %v; its process %d still runs, and is killed and restarted if it does not answer for %s", probeErr, pid, m.hangTimeout)
			m.setHealth(d, false, fmt.Sprintf("MPS control daemon for %s %s", uuid, why))
			return errors.New(why)
		}
		m.log.Warn("killing MPS control daemon that has not answered", "device", uuid, "pid", pid, "for", now.Sub(d.failingSince).Round(time.Millisecond), "error", probeErr)
		kctx, cancel := context.WithTimeout(ctx, m.cmdTimeout)
		err := killAndWait(kctx, pid)
		cancel()
		if err != nil {
			why := fmt.Sprintf("not answering: %v; killing it failed: %v", probeErr, err)
			m.setHealth(d, false, fmt.Sprintf("MPS control daemon for %s %s", uuid, why))
			return errors.New(why)
		}
		immediate = true
	}
	attempt := d.attempts + 1
	var reason string
	if d.known {
		reason = fmt.Sprintf("MPS control daemon for %s not answering: %v; restarting (attempt %d)", uuid, probeErr, attempt)
	} else {
		reason = fmt.Sprintf("MPS control daemon for %s not running; starting (attempt %d)", uuid, attempt)
	}
	if !immediate && now.Before(d.nextRestart) {
		if d.attempts == 0 { // just found dead; after a failed attempt, its reason stays
			m.setHealth(d, false, reason)
		}
		return nil
	}
	if d.known || attempt > 1 { // a first start is no news
		m.setHealth(d, false, reason)
	}
	if !d.known {
		m.log.Debug("starting MPS control daemon", "device", uuid, "pipe_dir", pipe)
	}
	if err := m.start(ctx, d); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		d.attempts = attempt
		wait := m.backoff(attempt + 1)
		d.nextRestart = m.now().Add(wait)
		m.setHealth(d, false, fmt.Sprintf("%s failed: %v; next attempt in %s", reason, err, wait))
		return err
	}
	if d.known {
		m.mu.Lock()
		d.restarts++
		d.lastFail, d.lastAt = reason, d.failingSince
		m.mu.Unlock()
		m.log.Info("restarted MPS control daemon", "device", uuid, "pid", d.pid, "after", reason)
	}
	d.known = true
	d.failingSince, d.attempts = time.Time{}, 0
	return m.finish(ctx, d)
}

// start starts a daemon in a directory where none lives, waits until it
// answers and applies its defaults.
func (m *Manager) start(ctx context.Context, d *daemon) error {
	uuid, pipe := d.dev.UUID, m.PipeDir(d.dev.UUID)
	if err := m.makeDirs(uuid); err != nil {
		return err
	}
	if err := removeStale(pipe); err != nil {
		return fmt.Errorf("remove the files a dead daemon left: %w", err)
	}
	sctx, cancel := context.WithTimeout(ctx, m.startTimeout)
	defer cancel()
	if err := m.cmd.start(sctx, m.env(uuid)); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	for {
		_, err := m.servers(sctx, uuid)
		if err == nil {
			break
		}
		select {
		case <-sctx.Done():
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("started, but no answer within %s: %w", m.startTimeout, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	m.setPID(d, readPIDFile(pipe))
	d.defaultsOK, d.pinnedSet = false, 0
	m.log.Info("started MPS control daemon", "device", uuid, "pid", d.pid, "pipe_dir", pipe)
	return m.applyDefaults(ctx, d)
}

// applyDefaults reads the daemon's defaults back and sets those that differ
// from the device's. They apply to servers started afterwards: a server
// already running keeps the values it started with.
func (m *Manager) applyDefaults(ctx context.Context, d *daemon) error {
	uuid := d.dev.UUID
	want := d.dev.ThreadPercent
	if want == 0 {
		want = 100
	}
	out, err := m.send(ctx, uuid, "get_default_active_thread_percentage")
	if err != nil {
		return err
	}
	got, err := parsePercent(out)
	if err != nil {
		return fmt.Errorf("%q: %w", "get_default_active_thread_percentage", err)
	}
	if math.Abs(got-float64(want)) >= 0.05 {
		cmd := fmt.Sprintf("set_default_active_thread_percentage %d", want)
		out, err := m.send(ctx, uuid, cmd)
		if err != nil {
			return err
		}
		if got, err = parsePercent(out); err != nil {
			return fmt.Errorf("%q: %w", cmd, err)
		}
		if math.Abs(got-float64(want)) >= 0.05 {
			return fmt.Errorf("%q refused: the daemon kept %s (its control.log says why)", cmd, strings.TrimSpace(out))
		}
		m.log.Info("set MPS default active thread percentage", "device", uuid, "percent", want)
	}

	const getLimit = "get_default_device_pinned_mem_limit 0" // the daemon sees its device alone, as device 0
	out, err = m.send(ctx, uuid, getLimit)
	if err != nil {
		return err
	}
	cur, mib := strings.TrimSpace(out), d.dev.PinnedMemLimitMiB
	switch {
	case mib == 0 && cur == "":
	case mib == 0:
		return m.removeLimit(ctx, d, cur)
	case cur != DisplayMemLimit(mib<<20) || (mib%1024 != 0 && d.pinnedSet != mib):
		// A limit that is not whole GiB reads back rounded down, so it is
		// set once per daemon rather than compared.
		cmd := fmt.Sprintf("set_default_device_pinned_mem_limit 0 %s", FormatMemLimit(mib))
		if _, err := m.send(ctx, uuid, cmd); err != nil {
			return err
		}
		out, err := m.send(ctx, uuid, getLimit)
		if err != nil {
			return err
		}
		if now := strings.TrimSpace(out); now != DisplayMemLimit(mib<<20) {
			return fmt.Errorf("%q not in force: the daemon reports %q", cmd, now)
		}
		d.pinnedSet = mib
		m.log.Info("set MPS default pinned device memory limit", "device", uuid, "limit", FormatMemLimit(mib))
	}
	d.defaultsOK = true
	return nil
}

// removeLimit handles a daemon with a default pinned memory limit where none
// is wanted: no command removes one, so an idle daemon is restarted, and a
// daemon with clients keeps its (stricter) limit until it is idle.
func (m *Manager) removeLimit(ctx context.Context, d *daemon, cur string) error {
	clients, err := m.clients(ctx, d.dev.UUID)
	if err != nil {
		return err
	}
	if len(clients) > 0 {
		return fmt.Errorf("the daemon has a default pinned memory limit of %s where none is wanted; MPS cannot remove it from a running daemon, and it has %d client(s), so it is restarted once they are gone", cur, len(clients))
	}
	m.log.Info("restarting idle MPS control daemon to remove its default pinned memory limit", "device", d.dev.UUID, "limit", cur)
	if err := m.quit(ctx, d); err != nil {
		return err
	}
	return m.start(ctx, d)
}

// quit sends quit and waits for the daemon's process to exit. Callers make
// sure no client is connected: with clients, the real daemon's quit waits
// for them (seen on driver 580: the server refuses to shut down, retrying
// with a growing delay, and the command blocks).
func (m *Manager) quit(ctx context.Context, d *daemon) error {
	uuid := d.dev.UUID
	pid, alive := daemonAlive(m.PipeDir(uuid), m.binary)
	if _, err := m.send(ctx, uuid, "quit"); err != nil {
		return err
	}
	if !alive {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, m.cmdTimeout)
	defer cancel()
	if err := waitExit(wctx, pid); err != nil {
		return fmt.Errorf("quit sent, but %w", err)
	}
	return nil
}

// discover adds, as draining, the daemons of devices that are not wanted
// but run under the state directory: a plugin restarted with a new config
// still owns the daemons its predecessor started.
func (m *Manager) discover(ctx context.Context, wanted map[string]bool) {
	entries, err := os.ReadDir(m.root())
	if err != nil {
		m.log.Warn("cannot list MPS state directory", "error", err)
		return
	}
	for _, e := range entries {
		uuid := e.Name()
		if !e.IsDir() || wanted[uuid] || m.tracked(uuid) != nil || validUUID(uuid) != nil {
			continue
		}
		pipe := m.PipeDir(uuid)
		if !hasDaemonFiles(pipe) {
			continue
		}
		_, probeErr := m.servers(ctx, uuid)
		pid, alive := daemonAlive(pipe, m.binary)
		if probeErr != nil && !alive {
			if err := removeStale(pipe); err != nil {
				m.log.Warn("cannot remove a dead MPS control daemon's files", "device", uuid, "error", err)
			}
			continue
		}
		d := &daemon{dev: Device{UUID: uuid}, known: true, draining: true, pid: pid}
		m.mu.Lock()
		m.daemons[uuid] = d
		m.mu.Unlock()
		m.log.Info("found MPS control daemon of a device no longer wanted", "device", uuid, "pid", pid)
	}
}

func hasDaemonFiles(pipe string) bool {
	for _, name := range []string{pidFileName, "control"} {
		if _, err := os.Lstat(filepath.Join(pipe, name)); err == nil {
			return true
		}
	}
	return false
}

// drain checks a daemon that is no longer wanted: it quits it once it has
// no client, and forgets it once it is gone.
func (m *Manager) drain(ctx context.Context, d *daemon) error {
	uuid := d.dev.UUID
	m.mu.Lock()
	first := !d.draining
	d.draining, d.healthy = true, false
	m.mu.Unlock()
	if first {
		m.log.Info("MPS device no longer wanted; its control daemon is quit once it has no clients", "device", uuid)
	}
	clients, err := m.clients(ctx, uuid)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if pid, alive := daemonAlive(m.PipeDir(uuid), m.binary); alive {
			m.setDraining(d, nil, fmt.Sprintf("MPS control daemon for %s is no longer wanted and does not answer: %v; its process %d is left running", uuid, err, pid))
			return nil
		}
		m.log.Info("MPS control daemon of a device no longer wanted is gone", "device", uuid)
		m.removePipeDir(uuid)
		m.forget(d)
		return nil
	}
	if len(clients) > 0 {
		m.setDraining(d, clients, fmt.Sprintf("MPS control daemon for %s is no longer wanted; draining: %d client(s) still connected (pids %v)", uuid, len(clients), clients))
		return nil
	}
	if err := m.quit(ctx, d); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		m.setDraining(d, nil, fmt.Sprintf("MPS control daemon for %s is no longer wanted; quit failed: %v", uuid, err))
		return fmt.Errorf("quit MPS control daemon for %s: %w", uuid, err)
	}
	m.log.Info("quit MPS control daemon: device no longer wanted and no clients left", "device", uuid)
	m.removePipeDir(uuid)
	m.forget(d)
	return nil
}

func (m *Manager) setDraining(d *daemon, clients []int, reason string) {
	m.mu.Lock()
	changed := d.reason != reason
	d.clients, d.reason, d.healthy = slices.Clone(clients), reason, false
	m.mu.Unlock()
	if changed {
		m.notify()
	}
}

// removePipeDir removes a quit daemon's pipe directory; its logs stay.
func (m *Manager) removePipeDir(uuid string) {
	if err := os.RemoveAll(m.PipeDir(uuid)); err != nil {
		m.log.Warn("cannot remove MPS pipe directory", "device", uuid, "error", err)
	}
}
