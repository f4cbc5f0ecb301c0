//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gpumux/gpumux/e2e/ctrd"
	"github.com/gpumux/gpumux/e2e/nomadagent"
)

// runIn runs a command in dir and returns its stdout; it fails the test,
// with stderr, when the command fails.
func runIn(t *testing.T, ctx context.Context, dir, name string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}

// debEntry is one line of `dpkg-deb --contents`.
type debEntry struct {
	mode, owner, target string
	elf                 bool // packageFiles: a binary or library
}

// debContents parses `dpkg-deb --contents`: path (without the leading
// ".") -> mode, owner and, for a link, its target.
func debContents(t *testing.T, listing string) map[string]debEntry {
	t.Helper()
	entries := map[string]debEntry{}
	sc := bufio.NewScanner(strings.NewReader(listing))
	for sc.Scan() {
		// drwxr-xr-x root/root         0 2026-11-25 06:30 ./usr/bin/
		f := strings.Fields(sc.Text())
		if len(f) < 6 {
			t.Fatalf("dpkg-deb --contents: unexpected line %q", sc.Text())
		}
		e := debEntry{mode: f[0], owner: f[1]}
		path := strings.TrimSuffix(strings.TrimPrefix(f[5], "."), "/")
		if len(f) == 8 && f[6] == "->" {
			e.target = f[7]
		}
		entries[path] = e
	}
	return entries
}

// packageFiles is what the package installs, by path: every binary and
// library (an ELF file: elf), the units and some of the docs.
var packageFiles = map[string]debEntry{
	"/usr/bin/gpumux":                                             {mode: exe, elf: true},
	"/usr/bin/gpumux-runtime":                                     {mode: exe, elf: true},
	"/usr/bin/gpumux-runtime-core":                                {mode: exe, elf: true},
	"/usr/bin/gpumux-runtime-hook":                                {mode: exe, elf: true},
	"/usr/bin/gpumux-remoted":                                     {mode: exe, elf: true},
	"/usr/lib/nomad/plugins/nomad-device-gpumux":                  {mode: exe, elf: true},
	"/usr/lib/gpumux/remote/libcuda.so.1":                         {mode: lib, elf: true},
	"/usr/lib/gpumux/remote/libnvidia-ml.so.1":                    {mode: lib, elf: true},
	"/usr/lib/gpumux/remote/libnvidia-ml.so":                      {mode: "lrwxrwxrwx", target: "libnvidia-ml.so.1"},
	"/usr/lib/gpumux/remote/nvidia-smi":                           {mode: exe, elf: true},
	"/usr/lib/gpumux/limiter/libcuda.so.1":                        {mode: lib, elf: true},
	"/usr/lib/gpumux/limiter/libnvidia-ml.so.1":                   {mode: lib, elf: true},
	"/lib/systemd/system/gpumux-agent.service":                    {mode: doc},
	"/lib/systemd/system/gpumux-remoted.service":                  {mode: doc},
	"/usr/share/doc/gpumux/install.md":                            {mode: doc},
	"/usr/share/doc/gpumux/examples/gpumux-plugin.hcl":            {mode: doc},
	"/usr/share/doc/gpumux/examples/jobs/remote-server.nomad.hcl": {mode: doc},
}

const exe, lib, doc = "-rwxr-xr-x", "-rw-r--r--", "-rw-r--r--"

// versionCommands are the installed binaries' version commands (paths
// relative to the root they are installed in) and the first line each
// prints, stamp being "VERSION (commit COMMIT)".
func versionCommands(stamp string) []versionCommand {
	return []versionCommand{
		{"usr/bin/gpumux", []string{"version"}, "gpumux " + stamp},
		{"usr/bin/gpumux-remoted", []string{"--version"}, "gpumux-remoted " + stamp},
		{"usr/bin/gpumux-runtime", []string{"--version"}, "gpumux-runtime " + stamp},
		{"usr/bin/gpumux-runtime-core", []string{"--version"}, "gpumux-runtime-core " + stamp},
		{"usr/bin/gpumux-runtime-hook", []string{"--version"}, "gpumux-runtime-hook " + stamp},
		{"usr/lib/nomad/plugins/nomad-device-gpumux", []string{"--version"}, "nomad-device-gpumux " + stamp},
	}
}

type versionCommand struct {
	bin  string
	args []string
	want string // the first line
}

// makeStamps is what the build stamps, as make computes it: the version,
// the commit (HEAD's) and the Debian version.
func makeStamps(t *testing.T, ctx context.Context, root string) (version, commit, debVersion string) {
	t.Helper()
	stamps := strings.Fields(runIn(t, ctx, root, "make", "--no-print-directory", "-s", "version"))
	if len(stamps) != 3 {
		t.Fatalf("make version printed %q, want version, commit and Debian version", stamps)
	}
	version, commit, debVersion = stamps[0], stamps[1], stamps[2]
	if head := strings.TrimSpace(runIn(t, ctx, root, "git", "rev-parse", "HEAD")); strings.TrimSuffix(commit, "-dirty") != head {
		t.Fatalf("make stamps commit %q, HEAD is %s", commit, head)
	}
	return version, commit, debVersion
}

// TestPackageInstall builds the Debian package with `make deb`, checks its
// control fields, file list and modes, unpacks it into a scratch root with
// dpkg-deb -x (not into the system), and uses what it installed: every
// binary's version, a real Nomad agent loading the plugin from the
// package's plugin directory, and a real containerd running a container
// through the package's gpumux-runtime with the package's limiter.
func TestPackageInstall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	root := repoRoot(t)
	for _, tool := range []string{"make", "dpkg-deb"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s: %v (scripts/install-deps.sh installs it)", tool, err)
		}
	}

	version, commit, debVersion := makeStamps(t, ctx, root)

	dist := t.TempDir()
	runIn(t, ctx, root, "make", "--no-print-directory", "dist", "DIST_DIR="+dist)
	arch := runtime.GOARCH
	deb := filepath.Join(dist, fmt.Sprintf("gpumux_%s_%s.deb", debVersion, arch))
	if _, err := os.Stat(deb); err != nil {
		t.Fatalf("make deb: %v", err)
	}

	t.Run("control", func(t *testing.T) {
		fields := map[string]string{
			"Package":      "gpumux",
			"Version":      debVersion + "-1",
			"Architecture": arch,
			"Depends":      "libc6",
			"Recommends":   "runc",
			"Section":      "admin",
			"Priority":     "optional",
			"Homepage":     "https://github.com/gpumux/gpumux",
		}
		for name, want := range fields {
			if got := strings.TrimSpace(runIn(t, ctx, root, "dpkg-deb", "--field", deb, name)); got != want {
				t.Errorf("control field %s = %q, want %q", name, got, want)
			}
		}
		info := runIn(t, ctx, root, "dpkg-deb", "--info", deb)
		for _, want := range []string{"Maintainer: ", "Description: Share NVIDIA GPUs between Nomad tasks and containers", "Installed-Size: "} {
			if !strings.Contains(info, want) {
				t.Errorf("dpkg-deb --info has no %q:\n%s", want, info)
			}
		}
	})

	t.Run("contents", func(t *testing.T) {
		entries := debContents(t, runIn(t, ctx, root, "dpkg-deb", "--contents", deb))
		want := packageFiles
		for path, w := range want {
			got, ok := entries[path]
			if !ok {
				t.Errorf("the package has no %s", path)
				continue
			}
			// A link's permission bits mean nothing (nfpm writes none).
			if link := strings.HasPrefix(w.mode, "l"); (link && !strings.HasPrefix(got.mode, "l")) || (!link && got.mode != w.mode) || got.target != w.target {
				t.Errorf("%s: %s -> %q, want %s -> %q", path, got.mode, got.target, w.mode, w.target)
			}
		}
		for path, e := range entries {
			if e.owner != "root/root" {
				t.Errorf("%s is owned by %s, want root/root", path, e.owner)
			}
			// Only what an operator runs goes to /usr/bin, only the plugin to
			// the plugin directory (Nomad loads every file there), nothing to
			// /etc (the operator's).
			dir := filepath.Dir(path)
			if (dir == "/usr/bin" || dir == "/usr/lib/nomad/plugins") && want[path].mode == "" {
				t.Errorf("unexpected %s in the package", path)
			}
			if strings.HasPrefix(path, "/etc") {
				t.Errorf("the package writes %s: /etc is left to the operator", path)
			}
		}
	})

	t.Run("tarball", func(t *testing.T) {
		name := fmt.Sprintf("gpumux-%s-linux-%s", version, arch)
		listing := runIn(t, ctx, root, "tar", "-tvzf", filepath.Join(dist, name+".tar.gz"))
		files := map[string]string{} // path -> mode
		for _, line := range strings.Split(strings.TrimSpace(listing), "\n") {
			f := strings.Fields(line)
			if len(f) < 6 || f[1] != "root/root" {
				t.Fatalf("tarball entry %q: want root/root", line)
			}
			files[strings.TrimSuffix(f[5], "/")] = f[0]
		}
		for path, mode := range map[string]string{
			"README.md":                                      "-rw-r--r--",
			"root/usr/bin/gpumux":                            "-rwxr-xr-x",
			"root/usr/bin/gpumux-runtime":                    "-rwxr-xr-x",
			"root/usr/bin/gpumux-runtime-core":               "-rwxr-xr-x",
			"root/usr/bin/gpumux-runtime-hook":               "-rwxr-xr-x",
			"root/usr/bin/gpumux-remoted":                    "-rwxr-xr-x",
			"root/usr/lib/nomad/plugins/nomad-device-gpumux": "-rwxr-xr-x",
			"root/usr/lib/gpumux/remote/libcuda.so.1":        "-rw-r--r--",
			"root/usr/lib/gpumux/limiter/libcuda.so.1":       "-rw-r--r--",
			"root/lib/systemd/system/gpumux-remoted.service": "-rw-r--r--",
		} {
			if got := files[name+"/"+path]; got != mode {
				t.Errorf("tarball %s: mode %q, want %q", path, got, mode)
			}
		}
	})

	scratch := t.TempDir()
	runIn(t, ctx, root, "dpkg-deb", "-x", deb, scratch)
	at := func(p string) string { return filepath.Join(scratch, p) }

	t.Run("elf", func(t *testing.T) { checkELFs(t, scratch, elfMachine[arch]) })

	t.Run("units", func(t *testing.T) {
		for unit, exec := range map[string]string{
			"gpumux-agent.service":   "ExecStart=/usr/bin/gpumux agent ",
			"gpumux-remoted.service": "ExecStart=/usr/bin/gpumux-remoted ",
		} {
			b, err := os.ReadFile(at("lib/systemd/system/" + unit))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(b), "\n"+exec) {
				t.Errorf("%s does not run the package's binary (%q):\n%s", unit, exec, b)
			}
		}
	})

	t.Run("versions", func(t *testing.T) {
		for _, tc := range versionCommands(version + " (commit " + commit + ")") {
			out := runIn(t, ctx, scratch, at(tc.bin), tc.args...)
			if first, _, _ := strings.Cut(out, "\n"); first != tc.want {
				t.Errorf("%s %s: first line %q, want %q\n%s", tc.bin, strings.Join(tc.args, " "), first, tc.want, out)
			}
			// gpumux-runtime hands --version on to runc, whose lines follow.
			if strings.HasPrefix(tc.bin, "usr/bin/gpumux-runtime") && !strings.HasSuffix(tc.bin, "-hook") && !strings.Contains(out, "\nrunc version ") {
				t.Errorf("%s --version does not show runc's version:\n%s", tc.bin, out)
			}
		}
	})

	t.Run("nomad plugin", func(t *testing.T) {
		stateDir, err := os.MkdirTemp("", "gmx")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(stateDir)
		a := nomadagent.Start(ctx, t,
			nomadagent.WithPluginDir(at("usr/lib/nomad/plugins")),
			nomadagent.WithPluginConfig(fmt.Sprintf("simulate = %q\nstate_dir = %q", "dgxh200", stateDir)),
			nomadagent.WaitForDevice("nvidia", "gpu"))
		devs, err := a.WaitNodeDevices(ctx, "nvidia", "gpu", 8)
		if err != nil {
			t.Fatalf("the installed plugin's fingerprint: %v", err)
		}
		t.Logf("the installed plugin offers %d device group(s)", len(devs))
		// Nomad's loader logs each plugin it loads with the version the
		// plugin reports (PluginInfo).
		loaded := regexp.MustCompile(`plugin_version=` + regexp.QuoteMeta(version) + `\b`)
		found := false
		for _, line := range strings.Split(a.Log(), "\n") {
			found = found || (strings.Contains(line, "nomad-device-gpumux") && loaded.MatchString(line))
		}
		if !found {
			t.Errorf("the agent's log shows no nomad-device-gpumux plugin with plugin_version=%s", version)
		}
	})

	t.Run("containerd runtime", func(t *testing.T) {
		// runtimeNode's simulated node, with the package's limiter.
		_, config := runtimeNode(t)
		f, err := os.OpenFile(config, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, err = fmt.Fprintf(f, "limiter_dir = %q\n", at("usr/lib/gpumux/limiter"))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
		d := ctrd.Start(ctx, t, ctrd.WithEnv("GPUMUX_CONFIG="+config))
		res, err := d.Run(ctx, "pkg", ctrd.RunOpts{BinaryName: at("usr/bin/gpumux-runtime"), Annotations: map[string]string{"gpumux.io/mechanism": "timeslice"}})
		if err != nil {
			t.Fatal(err)
		}
		if res.ExitCode != 0 {
			t.Fatalf("probe exit %d: %s %s", res.ExitCode, res.Stdout, res.Stderr)
		}
		checkShareProbe(t, ctrd.ParseProbe(res.Stdout), regexp.MustCompile(`^GPU-[0-9a-f-]+/timeslice/[0-3]$`), false, false)
	})
}
