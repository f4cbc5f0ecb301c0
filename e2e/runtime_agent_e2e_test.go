//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpumux/gpumux/e2e/ctrd"
	"github.com/gpumux/gpumux/ocicreate"
)

// agentRuntimeSocket starts gpumux agent on config serving gpumux-runtime
// on a socket of its own, and returns the agent and the socket, once the
// agent serves it.
func agentRuntimeSocket(t testing.TB, ctx context.Context, config string) (*agentProc, string) {
	t.Helper()
	socket := runtimeSocketPath(t)
	return serveRuntimeSocket(t, ctx, config, socket), socket
}

// runtimeSocketPath is a path for an agent's runtime socket, in a
// directory of the test's.
func runtimeSocketPath(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "gmx") // short: a unix socket's path is bounded
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "runtime.sock")
}

// serveRuntimeSocket starts gpumux agent on config serving gpumux-runtime
// on socket, and returns it once it does.
func serveRuntimeSocket(t testing.TB, ctx context.Context, config, socket string) *agentProc {
	t.Helper()
	a := startAgent(t, config, "--runtime-socket", socket, "--log-level", "debug")
	waitFor(t, ctx, 30*time.Second, "gpumux agent serving gpumux-runtime", func() (bool, string) {
		return strings.Contains(a.log.String(), "serving gpumux-runtime"), a.log.String()
	})
	return a
}

// agentSwitch takes a gpumux agent's runtime socket away (renamed) for the
// containers a benchmark runs through gpumux-runtime-core, and puts it back
// for those through the agent: a node without an agent, and one with.
type agentSwitch struct{ socket string }

func (a agentSwitch) use(on bool) error {
	from, to := a.socket, a.socket+".away"
	if on {
		from, to = to, from
	}
	if err := os.Rename(from, to); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}

// TestRuntimeAsksTheAgent: where gpumux agent serves gpumux-runtime (the
// socket in containerd's environment, as a node's unit file would set it,
// or at its default path), a create that asks is prepared by the agent:
// the container gets its share as through the core, the agent's log names
// the container (its linker cache written at create, no update-ldcache
// hook), the share is given back when runc deletes the container (the
// agent watches runc's root: no poststop hook), and a request
// the agent refuses fails the create with its reason.
func TestRuntimeAsksTheAgent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	stateDir, config := runtimeNode(t)
	a, socket := agentRuntimeSocket(t, ctx, config)
	d, runtime := startContainerd(t, ctx, config, ctrd.WithEnv(ocicreate.EnvSocket+"="+socket))
	for i, mech := range []string{"exclusive", "mps", "timeslice"} {
		id := "agent-" + mech
		res, err := d.Run(ctx, id, ctrd.RunOpts{BinaryName: runtime, Annotations: map[string]string{"gpumux.io/mechanism": mech}})
		if err != nil {
			t.Fatal(err)
		}
		if res.ExitCode != 0 {
			t.Fatalf("%s: probe exit %d: %s %s", mech, res.ExitCode, res.Stdout, res.Stderr)
		}
		checkShareProbe(t, ctrd.ParseProbe(res.Stdout), regexp.MustCompile(`^GPU-[0-9a-f-]+(/(mps|timeslice)/[0-3])?$`), false, mech == "mps")
		if log := a.log.String(); strings.Count(log, "prepared a container's create") != i+1 || !strings.Contains(log, "container="+id) {
			t.Fatalf("the agent's log does not show it prepared %s:\n%s", id, log)
		}
	}
	// Each container was deleted by d.Run: the agent, told by the kernel
	// that runc removed its state, gave its share back.
	waitNoLeases(t, ctx, stateDir)
	for _, mech := range []string{"exclusive", "mps", "timeslice"} {
		line := "gave a deleted container's shares back: container=agent-" + mech + " by=runc-delete"
		waitFor(t, ctx, time.Minute, "the agent's log of agent-"+mech+"'s release", func() (bool, string) {
			log := a.log.String()
			return strings.Contains(log, line), log
		})
	}
	// No hook: the agent wrote the container's linker cache at create
	// (checkShareProbe found the driver's libraries in it), and watched
	// runc's delete.
	if log := a.log.String(); strings.Contains(log, "hook=update-ldcache") || strings.Contains(log, "by=poststop-hook") {
		t.Errorf("a hook ran for a create the agent prepared:\n%s", log)
	}
	_, err := d.Run(ctx, "agent-refused", ctrd.RunOpts{BinaryName: runtime, Annotations: map[string]string{"gpumux.io/mechanism": "warp"}})
	if err == nil || !strings.Contains(err.Error(), "warp") {
		t.Errorf("a refused create: %v; want the agent's reason", err)
	}
}
