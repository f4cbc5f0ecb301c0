package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"
)

// Default engine config files.
const (
	DefaultDockerConfig     = "/etc/docker/daemon.json"
	DefaultContainerdConfig = "/etc/containerd/config.toml"
	// InstalledRuntimePath is where docs/runtime.md installs gpumux-runtime.
	InstalledRuntimePath = "/usr/local/bin/gpumux-runtime"
)

// configureRequest is one `gpumux runtime configure`.
type configureRequest struct {
	engine string // "docker" or "containerd"
	config string // the engine's config file
	entry  runtimeEntry
	// configVersion is --config-version: 0 (auto), 2 or 3.
	configVersion int64
	dryRun        bool
}

// runtimeConfigureOptions are gpumux runtime configure's flags.
type runtimeConfigureOptions struct {
	engine, config, path, version string
	setDefault, dryRun            bool
}

func newRuntimeCmd(stdout, stderr io.Writer) *cobra.Command {
	var o runtimeConfigureOptions
	cmd := leaf("configure --runtime=docker|containerd", "register gpumux-runtime with Docker or containerd as the runtime \"gpumux\"", `
Registers gpumux-runtime with a container engine as the runtime "gpumux", as
nvidia-ctk runtime configure does for NVIDIA's:

  docker      runtimes.gpumux.path in daemon.json; with --set-as-default,
              default-runtime. Then: docker run --runtime gpumux -e GPUMUX_…
  containerd  a CRI runtime "gpumux" with runtime_type io.containerd.runc.v2
              and options.BinaryName = gpumux-runtime, under
              plugins."io.containerd.grpc.v1.cri".containerd.runtimes (config
              version 2, containerd 1.6/1.7) or
              plugins."io.containerd.cri.v1.runtime".containerd.runtimes
              (version 3, containerd 2.x); version-1 files (no version key)
              get plugins.cri.containerd.runtimes. A new runtime starts as a
              copy of the file's runc runtime (SystemdCgroup and the like
              carry over). With --set-as-default, default_runtime_name.

Running it again changes nothing and says so. Everything else in the file is
kept, but the file is rewritten: keys come out sorted, and a TOML file loses
its comments and its layout. Before changing a file it copies it to
FILE.<time>.bak; it writes the new file atomically (a temporary file renamed
over it) with the old one's mode and owner. A file it cannot parse is never
written: the error names the file, the line and the problem. Restart the
engine afterwards (systemctl restart docker, or containerd).

Exit codes: 0 ok (changed or already configured), 1 error, 2 bad flags.`, func(ctx context.Context) int { return runRuntimeConfigure(ctx, &o, stdout, stderr) })
	fs := cmd.Flags()
	fs.StringVar(&o.engine, "runtime", "", "the `ENGINE` to configure: docker or containerd (required)")
	fs.StringVar(&o.config, "config", "", "the engine's config `FILE` (default "+DefaultDockerConfig+" for docker, "+DefaultContainerdConfig+" for containerd)")
	fs.StringVar(&o.path, "runtime-path", defaultRuntimePath(), "gpumux-runtime's absolute `PATH`, as the engine will run it; by default the one next to this gpumux binary, else the one on PATH, else "+InstalledRuntimePath)
	fs.BoolVar(&o.setDefault, "set-as-default", false, "also make gpumux the engine's default runtime (Docker's default-runtime; containerd: the CRI plugin's default_runtime_name, which Kubernetes pods without a runtime class use); containers that ask for no GPU pass through to runc unchanged")
	fs.StringVar(&o.version, "config-version", "auto", "containerd only: the config `VERSION` of a new or empty file, 2 (containerd 1.6, 1.7) or 3 (containerd 2.x); auto: the default of the containerd on PATH. A file with settings keeps its version (another --config-version is an error: no migration)")
	fs.BoolVar(&o.dryRun, "dry-run", false, "print the changes (stderr) and the resulting file (stdout), and change nothing")
	cmd.RegisterFlagCompletionFunc("runtime", cobra.FixedCompletions([]string{"docker", "containerd"}, cobra.ShellCompDirectiveNoFileComp))
	cmd.RegisterFlagCompletionFunc("config-version", cobra.FixedCompletions([]string{"auto", "2", "3"}, cobra.ShellCompDirectiveNoFileComp))
	return group("runtime", "register gpumux-runtime with Docker or containerd", cmd)
}

func runRuntimeConfigure(ctx context.Context, o *runtimeConfigureOptions, stdout, stderr io.Writer) int {
	req := configureRequest{engine: o.engine, config: o.config, entry: runtimeEntry{Path: o.path, SetDefault: o.setDefault}, dryRun: o.dryRun}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "gpumux runtime configure: "+format+"\n", a...)
		return ExitUsage
	}
	switch req.engine {
	case "docker":
		if req.config == "" {
			req.config = DefaultDockerConfig
		}
		if o.version != "auto" {
			return usage("--config-version %q: only for --runtime=containerd (Docker's daemon.json has no version)", o.version)
		}
	case "containerd":
		if req.config == "" {
			req.config = DefaultContainerdConfig
		}
		switch o.version {
		case "auto":
		case "2", "3":
			req.configVersion, _ = strconv.ParseInt(o.version, 10, 64)
		default:
			return usage("--config-version %q: want auto, %s", o.version, containerdVersions)
		}
	case "":
		return usage("--runtime is required: docker or containerd")
	default:
		return usage("--runtime %q: want docker or containerd", req.engine)
	}
	if !filepath.IsAbs(req.entry.Path) {
		return usage("--runtime-path %q: want an absolute path (the engine runs it from its own directory)", req.entry.Path)
	}
	if err := configureRuntime(ctx, req, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "gpumux runtime configure: %v\n", err)
		return ExitError
	}
	return ExitOK
}

// defaultRuntimePath is --runtime-path's default: gpumux-runtime next to
// this gpumux binary (as make build and a release archive lay them out),
// else the one on PATH, else where docs/runtime.md installs it.
func defaultRuntimePath() string {
	if exe, err := os.Executable(); err == nil {
		if p := filepath.Join(filepath.Dir(exe), "gpumux-runtime"); isExecutable(p) {
			return p
		}
	}
	if p, err := exec.LookPath("gpumux-runtime"); err == nil {
		if abs, err := filepath.Abs(p); err == nil {
			return abs
		}
	}
	return InstalledRuntimePath
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// configureRuntime edits req.config and says what it did on stdout (a dry
// run: the changes on stderr, the resulting file on stdout).
func configureRuntime(ctx context.Context, req configureRequest, stdout, stderr io.Writer) error {
	path := req.config
	// Write through a symlink to its target, not over the link.
	if p, err := filepath.EvalSymlinks(path); err == nil {
		path = p
	}
	src, err := os.ReadFile(path)
	existed := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if !isExecutable(req.entry.Path) {
		fmt.Fprintf(stderr, "gpumux runtime configure: warning: %s is not an executable file here; the engine will fail to start gpumux containers until gpumux-runtime is installed there (--runtime-path)\n", req.entry.Path)
	}

	var out []byte
	var changes []string
	restart := "systemctl restart docker"
	switch req.engine {
	case "docker":
		out, changes, err = editDockerConfig(src, req.entry)
	case "containerd":
		restart = "systemctl restart containerd"
		newVersion := req.configVersion
		if newVersion == 0 && isEmptyTOML(src) {
			if newVersion, err = installedContainerdConfigVersion(ctx); err != nil {
				return fmt.Errorf("%s has no settings yet, and %w: choose with --config-version %s", path, err, containerdVersions)
			}
		}
		out, _, changes, err = editContainerdConfig(src, req.entry, newVersion)
	}
	if err != nil {
		return fmt.Errorf("%s: %w (the file is left as it is)", path, err)
	}
	if len(changes) == 0 {
		fmt.Fprintf(stdout, "%s: runtime %q (%s) is already configured; nothing changed\n", path, RuntimeName, req.entry.Path)
		return nil
	}
	report := stdout
	if req.dryRun {
		report = stderr
	}
	would := ""
	if req.dryRun {
		would = "would "
	}
	for _, c := range changes {
		fmt.Fprintf(report, "%s: %s%s\n", path, would, c)
	}
	if req.dryRun {
		fmt.Fprintf(stderr, "dry run: %s not changed; it would read:\n", path)
		_, err := stdout.Write(out)
		return err
	}
	mode, owner := fs.FileMode(0o644), (*syscall.Stat_t)(nil)
	if existed {
		fi, err := os.Stat(path)
		if err != nil {
			return err
		}
		mode = fi.Mode().Perm()
		owner, _ = fi.Sys().(*syscall.Stat_t)
		backup, err := writeBackup(path, src, mode, owner, time.Now())
		if err != nil {
			return fmt.Errorf("backing up %s before changing it: %w (nothing changed)", path, err)
		}
		fmt.Fprintf(stdout, "%s: backup of the old file: %s\n", path, backup)
	} else if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := writeFileAtomic(path, out, mode, owner); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	fmt.Fprintf(stdout, "%s written; restart %s to load it (%s)\n", path, req.engine, restart)
	return nil
}

// isEmptyTOML says whether a TOML file has no settings (only blank lines
// and comments), so that it says no config version either.
func isEmptyTOML(src []byte) bool {
	for _, line := range bytes.Split(src, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) > 0 && line[0] != '#' {
			return false
		}
	}
	return true
}

// writeBackup copies the file's old contents to PATH.<time>.bak (then
// PATH.<time>-2.bak, … if that exists), with its mode and owner, and
// returns the backup's name.
func writeBackup(path string, src []byte, mode fs.FileMode, owner *syscall.Stat_t, now time.Time) (string, error) {
	stamp := now.Format("20060102-150405")
	for i := 1; i <= 100; i++ {
		name := path + "." + stamp + ".bak"
		if i > 1 {
			name = fmt.Sprintf("%s.%s-%d.bak", path, stamp, i)
		}
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		err = writeAndClose(f, src, mode, owner)
		if err != nil {
			os.Remove(name)
			return "", err
		}
		return name, nil
	}
	return "", fmt.Errorf("100 backups of %s from %s exist already", path, stamp)
}

// writeFileAtomic replaces path with data: a temporary file in the same
// directory, given the mode and owner, synced, then renamed over path, so
// that the engine never reads half a file.
func writeFileAtomic(path string, data []byte, mode fs.FileMode, owner *syscall.Stat_t) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".gpumux-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	if err := writeAndClose(f, data, mode, owner); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // the rename itself; the data is synced already
		d.Close()
	}
	return nil
}

// writeAndClose writes data to f, sets its mode and owner (when owner is
// known), syncs and closes it.
func writeAndClose(f *os.File, data []byte, mode fs.FileMode, owner *syscall.Stat_t) error {
	_, err := f.Write(data)
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil && owner != nil && (int(owner.Uid) != os.Geteuid() || int(owner.Gid) != os.Getegid()) {
		err = f.Chown(int(owner.Uid), int(owner.Gid))
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
