package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpumux/gpumux/node/lease"
)

// runcStateTimeout bounds a `runc state`: the lease store stays open while
// it runs, and a runc that hangs keeps the lease (an error) rather than the
// store.
const runcStateTimeout = 10 * time.Second

// RuncAlive returns the check Reclaim needs: whether runc (binary runc,
// under the lease's runc root, or root when the lease names none) still
// knows a lease's container. Leases of containers it does not know are
// reclaimed; a runc that fails otherwise is an error, and the lease stays.
//
// A container whose state file runc keeps under the root
// (ROOT/ID/state.json, what `runc state` reads) is alive without running
// runc: on a busy node every create checks every other container's lease,
// and a `runc state` costs milliseconds. Any other case (no such file, a
// runtime that keeps its state elsewhere, an unknown root) asks runc.
func RuncAlive(ctx context.Context, runc, root string) func(lease.Record) (bool, error) {
	return func(r lease.Record) (bool, error) {
		dir := r.Root
		if dir == "" {
			dir = root
		}
		if dir != "" && RuncStateFile(dir, r.Container) {
			return true, nil
		}
		var args []string
		if dir != "" {
			args = append(args, "--root", dir)
		}
		ctx, cancel := context.WithTimeout(ctx, runcStateTimeout)
		defer cancel()
		out, err := exec.CommandContext(ctx, runc, append(args, "state", r.Container)...).CombinedOutput()
		var exit *exec.ExitError
		switch {
		case err == nil:
			return true, nil
		case errors.As(err, &exit) && strings.Contains(string(out), "does not exist"):
			return false, nil
		default:
			return false, fmt.Errorf("%s state %s: %w: %s", runc, r.Container, err, strings.TrimSpace(string(out)))
		}
	}
}

// RuncStateFile says whether runc keeps a state file for container id
// under root (ROOT/ID/state.json). An ID that runc would refuse (it allows
// letters, digits and "_+-.", not "." or "..") is never found here.
func RuncStateFile(root, id string) bool {
	if id == "" || id == "." || id == ".." || strings.IndexFunc(id, func(c rune) bool {
		return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("_+-.", c))
	}) >= 0 {
		return false
	}
	fi, err := os.Stat(filepath.Join(root, id, "state.json"))
	return err == nil && fi.Mode().IsRegular()
}

// Reclaim releases the leases of containers that are gone (see
// lease.Store.Reclaim) and returns the share IDs it released. A store that
// does not exist yet has nothing to reclaim, and is not made.
func (n *Node) Reclaim(ctx context.Context, alive func(lease.Record) (bool, error)) ([]string, error) {
	return LeasesIn(n.cfg.StateDir).Reclaim(ctx, alive)
}

// ReclaimLogged is Reclaim as the node's long-lived process (gpumux agent,
// the Nomad plugin) runs it every period, so that a container deleted
// while nothing watched is given back without waiting for the next create:
// what it released, and why it kept some (runc could not tell, the store
// could not be opened), go to the node's logger.
func (n *Node) ReclaimLogged(ctx context.Context, alive func(lease.Record) (bool, error)) {
	released, err := n.Reclaim(ctx, alive)
	if len(released) > 0 {
		n.logger.Info("released the leases of containers runc no longer knows", "shares", strings.Join(released, ","))
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		n.logger.Warn("reclaiming the leases of containers that are gone failed in part: those are kept, and looked at again next period", "error", err)
	}
}
