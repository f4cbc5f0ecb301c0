package node

import (
	"context"
	"errors"
	"time"

	"github.com/gpumux/gpumux/share"
)

// Start makes this process the node's agent, named who in the state
// directory's lock ("gpumux agent", "the gpumux Nomad plugin"): it takes
// the lock (failing with ErrAgentRunning while another agent holds it),
// starts watching XIDs, logs what containers get of the driver (or why
// they cannot get it), and starts each mechanism that has something to
// run (Lifecycle): the mig provider applies the config's MIG layouts, the
// mps provider starts watching its daemons. A mechanism that fails to
// start is logged and keeps what it has (a GPU whose MIG layout cannot be
// applied keeps its current instances); the node still serves the others.
// Starting a started node is a no-op.
func (n *Node) Start(ctx context.Context, who string) error {
	n.mu.Lock()
	started := n.lock != nil
	n.mu.Unlock()
	if started {
		return nil
	}
	lock, err := acquireStateLock(n.cfg.StateDir, who)
	if err != nil {
		return err
	}
	inv, as, err := n.assign(ctx)
	if err != nil {
		lock.release()
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	n.mu.Lock()
	n.lock, n.stop = lock, cancel
	n.changed = make(chan struct{}, 1)
	n.mu.Unlock()
	n.xids.watch(ctx, n, n.changed)
	warnUnknownIgnored(ctx, n.host, n.logger)
	if _, remoteOnly := n.host.(noGPUs); !remoteOnly {
		n.logDriver()
	}
	for _, p := range n.providers {
		lc, ok := p.(Lifecycle)
		if !ok {
			continue
		}
		if err := lc.Start(ctx, inv, as); err != nil {
			n.logger.Error("mechanism not fully started", "mechanism", p.Mechanism(), "error", err)
		}
		if nf, ok := p.(notifier); ok {
			go forward(ctx, nf.Changed(), n.changed)
		}
	}
	return nil
}

// forward ticks out after each tick of in, until ctx ends.
func forward(ctx context.Context, in <-chan struct{}, out chan<- struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-in:
			select {
			case out <- struct{}{}:
			default:
			}
		}
	}
}

// Update is one pass of Watch: the catalog built, or why none could be.
type Update struct {
	Catalog *share.Catalog
	Err     error
}

// Watch rebuilds the catalog now, then every period and whenever a share's
// health changes (an XID, an MPS daemon), reconciles the mechanisms to it
// (the MPS daemons follow the catalog), keeps it as Current, and sends it.
// The channel closes when ctx ends. Start must have been called.
func (n *Node) Watch(ctx context.Context, period time.Duration) <-chan Update {
	out := make(chan Update)
	n.mu.Lock()
	changed := n.changed
	n.mu.Unlock()
	go func() {
		defer close(out)
		timer := time.NewTimer(0)
		defer timer.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
				timer.Reset(period)
			case <-changed:
			}
			c, err := n.Refresh(ctx)
			u := Update{Catalog: c, Err: err}
			select {
			case out <- u:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// Refresh builds the catalog, reconciles the mechanisms to it and keeps it
// as Current: one pass of Watch.
func (n *Node) Refresh(ctx context.Context) (*share.Catalog, error) {
	_, c, err := n.read(ctx)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, p := range n.providers {
		if lc, ok := p.(Lifecycle); ok {
			if err := lc.Reconcile(ctx, c); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		// The affected shares report it as their health.
		n.logger.Error("mechanisms not fully reconciled", "error", err)
	}
	n.setCurrent(c)
	return c, nil
}

// Stop stops the mechanisms (leaving MPS daemons and MIG instances for the
// next agent) and releases the state directory's lock. Stopping a node
// that is not started is a no-op.
func (n *Node) Stop(ctx context.Context) error {
	n.mu.Lock()
	lock, cancel := n.lock, n.stop
	n.lock, n.stop = nil, nil
	n.mu.Unlock()
	if lock == nil {
		return nil
	}
	var errs []error
	for _, p := range n.providers {
		if lc, ok := p.(Lifecycle); ok {
			errs = append(errs, lc.Stop(ctx))
		}
	}
	cancel()
	lock.release()
	return errors.Join(errs...)
}
