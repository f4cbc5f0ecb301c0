package node

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"

	"github.com/gpumux/gpumux/node/lease"
)

// RuncAlive returns the check Reclaim needs: whether runc (binary runc,
// under the lease's runc root, or root when the lease names none) still
// knows a lease's container. Leases of containers it does not know are
// reclaimed; a runc that fails otherwise is an error, and the lease stays.
func RuncAlive(ctx context.Context, runc, root string) func(lease.Record) (bool, error) {
	return func(r lease.Record) (bool, error) {
		dir := r.Root
		if dir == "" {
			dir = root
		}
		var args []string
		if dir != "" {
			args = append(args, "--root", dir)
		}
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

// Reclaim releases the leases of containers that are gone (see
// lease.Store.Reclaim) and returns the share IDs it released. A store that
// does not exist yet has nothing to reclaim.
func (n *Node) Reclaim(ctx context.Context, alive func(lease.Record) (bool, error)) ([]string, error) {
	st, err := lease.Open(n.LeasePath())
	if err != nil {
		return nil, err
	}
	defer st.Close()
	return st.Reclaim(ctx, alive)
}
