package node

import (
	"fmt"
	"path/filepath"
	"sync"

	"github.com/gpumux/gpumux/gpu/driverfiles"
	"github.com/gpumux/gpumux/internal/ldcache"
	"github.com/gpumux/gpumux/internal/ociruntime"
	"github.com/gpumux/gpumux/share"
)

// DefaultHookBinary is where docs/runtime.md installs gpumux-runtime: the
// program of the hook when it is found nowhere else.
const DefaultHookBinary = "/usr/local/bin/gpumux-runtime"

// WithHookBinary sets the program that containers' hooks run:
// gpumux-runtime, which asks the node agent to do the hook and hands it to
// gpumux-runtime-hook where no agent does, or gpumux-runtime-hook itself
// (default: gpumux-runtime found on PATH or next to the running executable
// by ResolveBinary, else DefaultHookBinary).
func WithHookBinary(path string) Option { return func(o *options) { o.hookBinary = path } }

// WithHookEnv sets the environment of the containers' hooks (a hook
// inherits none): where gpumux-runtime finds the node agent
// (GPUMUX_RUNTIME_SOCKET) when it is not at its default path.
func WithHookEnv(env ...string) Option { return func(o *options) { o.hookEnv = env } }

// resolveHookBinary finds gpumux-runtime for the hooks.
func resolveHookBinary() string {
	if p := ResolveBinary("gpumux-runtime"); filepath.IsAbs(p) {
		return p
	}
	return DefaultHookBinary
}

// WithDriverAtHostPaths gives containers the driver's files each at its
// path under the driver root, a bind mount a file and link, which images
// of the host's family of distributions find without a linker cache: for
// a front door whose containers run no hooks (a Nomad reservation). By
// default a container gets them in one read-only bind of a tree staged
// under the state directory (driverfiles.Stage) at /usr/local/nvidia,
// where NVIDIA's CUDA images look, and the hook adds its lib64 to the
// linker cache: each bind mount costs a container's start about a
// millisecond (docs/benchmarks.md).
func WithDriverAtHostPaths() Option { return func(o *options) { o.driverAtHostPaths = true } }

// driverCache keeps the driver's files once found, and their staged tree
// once made: they change only with the driver, which a node agent
// restarts with.
type driverCache struct {
	mu     sync.Mutex
	files  *driverfiles.Files
	staged string
	pruned bool // the other trees were pruned (once a process)
}

// DriverRoot is where the node's driver files are looked for: the config's
// driver_root, else the host's ("/", or a simulated node's driver).
func (n *Node) DriverRoot() string {
	if n.cfg.DriverRoot != "" {
		return n.cfg.DriverRoot
	}
	return n.host.DriverRoot()
}

// DriverFiles finds the driver's user-space files that containers of the
// node's own shares get (package driverfiles): the libraries of the
// version NVML runs, under DriverRoot. The error says what is missing
// (wrapping driverfiles.ErrMissing when libcuda or libnvidia-ml is).
func (n *Node) DriverFiles() (*driverfiles.Files, error) {
	n.driver.mu.Lock()
	defer n.driver.mu.Unlock()
	if n.driver.files != nil {
		return n.driver.files, nil
	}
	version, err := n.host.DriverVersion()
	if err != nil {
		return nil, fmt.Errorf("driver files: %w", err)
	}
	files, err := driverfiles.Find(n.DriverRoot(), version)
	if err != nil {
		return nil, fmt.Errorf("driver files: %w", err)
	}
	n.driver.files = files
	return files, nil
}

// addDriver adds the driver's files to the edits of local shares, read-only,
// and a hook that puts the libraries' directories into the container's
// linker cache (for images whose loader does not search them by default).
// By default the libraries and programs are in the staged tree, one mount
// at /usr/local/nvidia, and the hook also links each program at its path
// on the host (/usr/bin/nvidia-smi) to the tree's; with
// WithDriverAtHostPaths each library is mounted at its path under the
// driver root and at its SONAME and bare-name links, each program at its
// path. The sockets are mounted at their paths either way.
func (n *Node) addDriver(e *share.Edits) error {
	files, tree, err := n.driverReady()
	if err != nil {
		return err
	}
	e.DriverLibraries = map[string]string{}
	args := []string{filepath.Base(n.hookBinary), "hook", ociruntime.HookUpdateLdcache}
	if n.driverAtHostPaths {
		e.Mounts = append(e.Mounts, hostPathMounts(files)...)
		for _, l := range files.Libraries {
			e.DriverLibraries[l.SONAME] = filepath.Join(filepath.Dir(l.ContainerPath), l.SONAME)
		}
		args = append(args, files.LibraryDirs()...)
	} else {
		e.Mounts = append(e.Mounts, readOnly(tree, driverfiles.ContainerDir))
		for _, l := range files.Libraries {
			e.DriverLibraries[l.SONAME] = filepath.Join(driverfiles.ContainerLibDir, l.SONAME)
		}
		for _, f := range files.Binaries {
			args = append(args, ldcache.LinkFlag, f.ContainerPath+"="+filepath.Join(driverfiles.ContainerBinDir, filepath.Base(f.ContainerPath)))
		}
		args = append(args, driverfiles.ContainerLibDir)
	}
	for _, f := range files.Sockets {
		e.Mounts = append(e.Mounts, readOnly(f.HostPath, f.ContainerPath))
	}
	e.Hooks = append(e.Hooks, share.Hook{Stage: share.HookCreateContainer, Path: n.hookBinary, Args: args, Env: n.hookEnv})
	return nil
}

// hostPathMounts are the driver's libraries and programs each at its path
// under the driver root, the libraries again at their links: what
// WithDriverAtHostPaths gives.
func hostPathMounts(files *driverfiles.Files) []share.Mount {
	var out []share.Mount
	for _, l := range files.Libraries {
		out = append(out, readOnly(l.HostPath, l.ContainerPath))
		for _, link := range l.Links {
			out = append(out, readOnly(l.HostPath, link))
		}
	}
	for _, f := range files.Binaries {
		out = append(out, readOnly(f.HostPath, f.ContainerPath))
	}
	return out
}

// readOnly is a read-only bind of host at container.
func readOnly(host, container string) share.Mount {
	return share.Mount{HostPath: host, ContainerPath: container, ReadOnly: true}
}

// ReservationDriverMounts are the mounts of the driver's libraries and
// programs that a Nomad reservation gives a task (WithDriverAtHostPaths).
// gpumux-runtime, which gives the staged tree, drops them from the spec of
// a Nomad docker task that carries both: the same files, a bind mount each.
func (n *Node) ReservationDriverMounts() ([]share.Mount, error) {
	files, err := n.DriverFiles()
	if err != nil {
		return nil, err
	}
	return hostPathMounts(files), nil
}

// driverReady finds the driver's files and, unless they are given at their
// host paths, their staged tree: what a local share's container needs.
func (n *Node) driverReady() (files *driverfiles.Files, tree string, err error) {
	if files, err = n.DriverFiles(); err != nil || n.driverAtHostPaths {
		return files, "", err
	}
	tree, err = n.stagedDriver(files)
	return files, tree, err
}

// StagedDriverDir is where a node stages trees of the driver's files:
// <state_dir>/driver.
func (n *Node) StagedDriverDir() string { return filepath.Join(n.cfg.StateDir, "driver") }

// stagedDriver is the staged tree of files, staged once per process.
func (n *Node) stagedDriver(files *driverfiles.Files) (string, error) {
	n.driver.mu.Lock()
	defer n.driver.mu.Unlock()
	if n.driver.staged != "" {
		return n.driver.staged, nil
	}
	st, err := files.Stage(n.StagedDriverDir())
	if err != nil {
		return "", fmt.Errorf("driver files: %w", err)
	}
	n.driver.staged = st.Path
	if st.Built {
		n.logger.Info("staged the driver's files for containers", "tree", st.Path, "copied", st.Copied)
		n.pruneDriverTrees() // those of the driver before, once unused
	}
	return st.Path, nil
}

// pruneDriverTrees removes the staged trees other than the current one that
// no container mounts, once a process, and says what it removed and kept.
// A failure is logged: it costs disk space, not containers. The caller
// holds n.driver.mu.
func (n *Node) pruneDriverTrees() {
	if n.driver.pruned {
		return
	}
	n.driver.pruned = true
	removed, mounted, err := driverfiles.Prune(n.StagedDriverDir(), n.driver.staged)
	if err != nil {
		n.logger.Warn("pruning staged driver trees", "error", err)
	}
	if len(removed) > 0 || len(mounted) > 0 {
		n.logger.Info("staged driver trees of other drivers", "removed", removed, "kept_while_mounted", mounted)
	}
}

// logDriver says what containers of the node's shares get of the driver,
// staging its tree at a node agent's start rather than at its first
// container's, and pruning the trees of drivers before that no container
// uses any more.
func (n *Node) logDriver() {
	files, tree, err := n.driverReady()
	if err != nil {
		n.logger.Error("containers of this node's shares cannot get the driver's files; its shares are unhealthy", "error", err)
		return
	}
	if tree != "" {
		n.driver.mu.Lock()
		n.pruneDriverTrees()
		n.driver.mu.Unlock()
	}
	n.logger.Info("driver files for containers", "version", files.Version, "root", files.Root, "staged", tree,
		"libraries", len(files.Libraries), "programs", len(files.Binaries), "sockets", len(files.Sockets), "not_in_this_driver", files.Missing)
}
