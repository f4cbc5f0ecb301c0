package plugin

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/gpumux/gpumux/nodeconfig"

	"github.com/gpumux/gpumux/mps"
	"github.com/gpumux/gpumux/share"
)

// MPS is what the plugin needs of the MPS daemon manager; *mps.Manager
// implements it.
type MPS interface {
	Reconcile(ctx context.Context, want []mps.Device) error
	Run(ctx context.Context)
	Health(uuid string) (ok bool, reason string)
	Changed() <-chan struct{}
	PipeDir(uuid string) string
}

var _ MPS = (*mps.Manager)(nil)

// newMPS returns the manager of the node's MPS daemons.
func (p *Plugin) newMPS(cfg *nodeconfig.Config) MPS {
	return mps.NewManager(cfg.StateDir,
		mps.WithControlBinary(resolveBinary(cfg.MPSControlBinary)),
		mps.WithLogger(p.logger.Named("mps")))
}

// reconcileMPS makes the MPS daemons match the catalog: one per device with
// MPS shares, with the defaults of its largest share. Daemons of devices that
// left MPS are drained by the manager, never quit under their clients.
func (p *Plugin) reconcileMPS(ctx context.Context, c *share.Catalog) error {
	var want []mps.Device
	for _, d := range c.MPSDaemons() {
		want = append(want, mps.Device{UUID: d.UUID, ThreadPercent: d.ThreadPercent, PinnedMemLimitMiB: d.PinnedMemLimitMiB})
	}
	return p.mps.Reconcile(ctx, want)
}

// nodePaths tells the share model where the node keeps device nodes and MPS
// pipe directories, and, for remote shares, the interposer and how to mint
// tokens (share.RemoteAccess).
type nodePaths struct {
	Host
	mps    MPS
	remote *remoteGPUs
}

func (n nodePaths) MPSPipeDir(uuid string) string { return n.mps.PipeDir(uuid) }

func (n nodePaths) InterposerDir() string {
	if n.remote == nil {
		return ""
	}
	return n.remote.InterposerDir()
}

func (n nodePaths) RemoteToken(g share.RemoteGPU, quotaMiB uint64) (string, error) {
	if n.remote == nil {
		return "", errors.New("this node's config has no remote block")
	}
	return n.remote.RemoteToken(g, quotaMiB)
}

var _ share.RemoteAccess = nodePaths{}

// resolveBinary finds a program given by name: on PATH, else next to the
// plugin's executable or one directory up (a plugin in bin/plugins/ finds
// bin/gpumux-fake-mps-control). Paths are returned as they are.
func resolveBinary(name string) string {
	if filepath.IsAbs(name) || filepath.Base(name) != name {
		return name
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if exe, err := os.Executable(); err == nil {
		dir := filepath.Dir(exe)
		for _, d := range []string{dir, filepath.Dir(dir)} {
			if p := filepath.Join(d, name); isExecutable(p) {
				return p
			}
		}
	}
	return name // the manager reports it missing, with the name
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}
