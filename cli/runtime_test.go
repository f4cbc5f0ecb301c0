package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	toml "github.com/pelletier/go-toml/v2"

	"github.com/gpumux/gpumux/cli"
)

// configureCase is one `gpumux runtime configure` on a config file.
type configureCase struct {
	name string
	// file is the config's contents before; absent: no file.
	file   string
	absent bool
	args   []string
	// code is the exit code; want the settings the file must hold after
	// (dotted paths to values; ignored on errors).
	code   int
	want   map[string]any
	stderr string // on errors: what the message must say
	stdout string // what the output must say
}

// withRuntime replaces @RT@ in the case's file and wanted values by the
// runtime's path.
func (tc configureCase) withRuntime(rt string) configureCase {
	tc.file = strings.ReplaceAll(tc.file, "@RT@", rt)
	want := map[string]any{}
	for key, v := range tc.want {
		if s, ok := v.(string); ok {
			v = strings.ReplaceAll(s, "@RT@", rt)
		}
		want[key] = v
	}
	tc.want = want
	tc.stdout = strings.ReplaceAll(tc.stdout, "@RT@", rt)
	return tc
}

// runConfigure runs the case twice on a file in a temp dir and checks the
// exit code, the file after, the backup, and that the second run changes
// nothing. decode reads the file into a generic document.
func runConfigure(t *testing.T, engine string, tc configureCase, decode func([]byte) (map[string]any, error)) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "etc", "config")
	rt := filepath.Join(dir, "gpumux-runtime")
	tc = tc.withRuntime(rt)
	if !tc.absent {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(tc.file), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(rt, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"runtime", "configure", "--runtime", engine, "--config", path, "--runtime-path", rt}, tc.args...)
	code, out, errOut := run(t, args...)
	if code != tc.code {
		t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tc.code, out, errOut)
	}
	if tc.stdout != "" && !strings.Contains(out, tc.stdout) {
		t.Errorf("stdout lacks %q:\n%s", tc.stdout, out)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	after, readErr := os.ReadFile(path)
	if code != cli.ExitOK {
		for _, want := range []string{path, tc.stderr} {
			if !strings.Contains(errOut, want) {
				t.Errorf("stderr lacks %q:\n%s", want, errOut)
			}
		}
		if (tc.absent && readErr == nil) || (!tc.absent && string(after) != tc.file) {
			t.Errorf("a failed run changed the file:\n%s", after)
		}
		if len(names) > 1 || (tc.absent && len(names) > 0) {
			t.Errorf("a failed run left files: %v", names)
		}
		return
	}
	if readErr != nil {
		t.Fatal(readErr)
	}
	doc, err := decode(after)
	if err != nil {
		t.Fatalf("the written file does not parse: %v\n%s", err, after)
	}
	for key, want := range tc.want {
		if got := lookup(doc, key); !reflect.DeepEqual(got, want) {
			t.Errorf("%s = %#v, want %#v\n%s", strings.ReplaceAll(key, "\x00", "."), got, want, after)
		}
	}
	if strings.Contains(out, "already configured") {
		if string(after) != tc.file || len(names) != 1 {
			t.Errorf("an already configured file was rewritten or backed up: %v\n%s", names, after)
		}
	} else {
		// A changed file: its old contents in one backup, mode kept.
		fi, _ := os.Stat(path)
		wantMode := os.FileMode(0o600)
		if tc.absent {
			wantMode = 0o644
		}
		if fi.Mode().Perm() != wantMode {
			t.Errorf("mode %v, want %v", fi.Mode().Perm(), wantMode)
		}
		var backups []string
		for _, n := range names {
			if strings.HasSuffix(n, ".bak") {
				backups = append(backups, n)
			}
		}
		if wantFiles := map[bool]int{true: 1, false: 2}[tc.absent]; len(names) != wantFiles || len(backups) != wantFiles-1 {
			t.Errorf("files %v, want the config and (for a file that was there) one backup", names)
		} else if len(backups) == 1 {
			b, _ := os.ReadFile(filepath.Join(filepath.Dir(path), backups[0]))
			if string(b) != tc.file {
				t.Errorf("backup %s holds %q, want the old file", backups[0], b)
			}
		}
		if !strings.Contains(out, "restart "+engine) {
			t.Errorf("the output does not say to restart %s:\n%s", engine, out)
		}
	}
	// Idempotent: a second run changes nothing and says so.
	code, out, errOut = run(t, args...)
	again, _ := os.ReadFile(path)
	if code != cli.ExitOK || !strings.Contains(out, "already configured; nothing changed") || string(again) != string(after) {
		t.Errorf("second run: exit %d, file changed: %v\nstdout: %s\nstderr: %s", code, string(again) != string(after), out, errOut)
	}
}

// lookup follows a path of keys separated by NUL (TOML keys hold dots).
func lookup(doc map[string]any, key string) any {
	var cur any = doc
	for _, k := range strings.Split(key, "\x00") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[k]
	}
	return cur
}

// k joins keys for lookup.
func k(parts ...string) string { return strings.Join(parts, "\x00") }

func decodeJSON(b []byte) (map[string]any, error) {
	var m map[string]any
	return m, json.Unmarshal(b, &m)
}

func decodeTOML(b []byte) (map[string]any, error) {
	var m map[string]any
	return m, toml.Unmarshal(b, &m)
}

func TestRuntimeConfigureDocker(t *testing.T) {
	gpumux := k("runtimes", "gpumux", "path")
	for _, tc := range []configureCase{
		{name: "absent", absent: true, want: map[string]any{gpumux: "@RT@", "default-runtime": nil}},
		{name: "empty", file: "", want: map[string]any{gpumux: "@RT@"}},
		{name: "other runtimes and settings kept",
			file: `{"log-driver": "json-file", "max-concurrent-downloads": 3, "runtimes": {"nvidia": {"path": "nvidia-container-runtime", "runtimeArgs": []}}}`,
			want: map[string]any{gpumux: "@RT@", "log-driver": "json-file", "max-concurrent-downloads": 3.0,
				k("runtimes", "nvidia"): map[string]any{"path": "nvidia-container-runtime", "runtimeArgs": []any{}}}},
		{name: "already configured", file: `{"runtimes": {"gpumux": {"path": "@RT@"}}}`, stdout: "already configured",
			want: map[string]any{gpumux: "@RT@"}},
		{name: "another path replaced, its arguments kept", file: `{"runtimes": {"gpumux": {"path": "/opt/old/gpumux-runtime", "runtimeArgs": ["--debug"]}}}`,
			stdout: `(was "/opt/old/gpumux-runtime")`, want: map[string]any{gpumux: "@RT@", k("runtimes", "gpumux", "runtimeArgs"): []any{"--debug"}}},
		{name: "set as default", file: `{"default-runtime": "runc"}`, args: []string{"--set-as-default"},
			stdout: `"default-runtime" = "gpumux" (was "runc")`, want: map[string]any{gpumux: "@RT@", "default-runtime": "gpumux"}},
		{name: "malformed", file: "{\n  \"runtimes\": {\n    \"nvidia\": {\"path\": \"x\"},\n  }\n}\n", code: cli.ExitError, stderr: "not valid JSON: line 4, column"},
		{name: "not an object", file: `["runtimes"]`, code: cli.ExitError, stderr: "not a JSON object"},
		{name: "runtimes not an object", file: `{"runtimes": "gpumux"}`, code: cli.ExitError, stderr: `"runtimes" is a string ("gpumux"): want an object of runtimes`},
		{name: "path not a string", file: `{"runtimes": {"gpumux": {"path": 1}}}`, code: cli.ExitError, stderr: `"runtimes"."gpumux"."path" is a number (1): want a string`},
		{name: "default-runtime not a string", file: `{"default-runtime": {}}`, args: []string{"--set-as-default"}, code: cli.ExitError, stderr: `"default-runtime" is an object`},
	} {
		t.Run(tc.name, func(t *testing.T) { runConfigure(t, "docker", tc, decodeJSON) })
	}
}

func TestRuntimeConfigureContainerd(t *testing.T) {
	v2 := []string{"plugins", "io.containerd.grpc.v1.cri", "containerd"}
	v3 := []string{"plugins", "io.containerd.cri.v1.runtime", "containerd"}
	rt := func(base []string, keys ...string) string {
		return k(append(append(append([]string(nil), base...), "runtimes", "gpumux"), keys...)...)
	}
	added := func(base []string) map[string]any {
		return map[string]any{rt(base, "runtime_type"): "io.containerd.runc.v2", rt(base, "options", "BinaryName"): "@RT@"}
	}
	with := func(m map[string]any, kv ...any) map[string]any {
		out := map[string]any{}
		for key, v := range m {
			out[key] = v
		}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i].(string)] = kv[i+1]
		}
		return out
	}
	const systemd = `version = 2
root = "/var/lib/containerd"
oom_score = -999

# the CRI plugin
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.9"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = true
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
        BinaryName = "/usr/bin/nvidia-container-runtime"
`
	for _, tc := range []configureCase{
		{name: "absent, version 2", absent: true, args: []string{"--config-version", "2"}, want: with(added(v2), "version", int64(2))},
		{name: "absent, version 3", absent: true, args: []string{"--config-version", "3"}, want: with(added(v3), "version", int64(3))},
		{name: "comments only, version 3", file: "# containerd config\n\n", args: []string{"--config-version", "3"}, want: with(added(v3), "version", int64(3))},
		{name: "version 2 with runc's settings and others", file: systemd, stdout: "a copy of runtimes.runc",
			want: with(added(v2), "version", int64(2), "root", "/var/lib/containerd", "oom_score", int64(-999),
				rt(v2, "options", "SystemdCgroup"), true,
				k(append(v2[:2:2], "sandbox_image")...), "registry.k8s.io/pause:3.9",
				k(append(v2[:3:3], "default_runtime_name")...), "runc",
				k(append(v2[:3:3], "runtimes", "nvidia", "options", "BinaryName")...), "/usr/bin/nvidia-container-runtime")},
		{name: "version 2, set as default", file: systemd, args: []string{"--set-as-default"},
			stdout: `default_runtime_name = "gpumux" (was "runc")`,
			want:   with(added(v2), k(append(v2[:3:3], "default_runtime_name")...), "gpumux")},
		{name: "version 3", file: "version = 3\n[plugins.\"io.containerd.cri.v1.images\"]\n  snapshotter = \"overlayfs\"\n",
			want: with(added(v3), k("plugins", "io.containerd.cri.v1.images", "snapshotter"), "overlayfs")},
		{name: "version 3, set as default", file: "version = 3\n", args: []string{"--set-as-default"},
			want: with(added(v3), k(append(v3[:3:3], "default_runtime_name")...), "gpumux")},
		{name: "version 1 (no version key)", file: "[plugins.cri]\n  sandbox_image = \"pause:3.6\"\n",
			want: map[string]any{"version": nil, k("plugins", "cri", "containerd", "runtimes", "gpumux", "options", "BinaryName"): "@RT@", k("plugins", "cri", "sandbox_image"): "pause:3.6"}},
		{name: "already configured", stdout: "already configured", file: `version = 2
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.gpumux]
  runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.gpumux.options]
    BinaryName = "@RT@"
`, want: added(v2)},
		{name: "another binary replaced, other options kept", file: `version = 2
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.gpumux.options]
  BinaryName = "/opt/gpumux-runtime"
  Root = "/run/gpumux-runc"
`, stdout: `BinaryName = "@RT@" (was "/opt/gpumux-runtime")`, want: with(added(v2), rt(v2, "options", "Root"), "/run/gpumux-runc")},
		{name: "malformed", file: "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"\n", code: cli.ExitError, stderr: "not valid TOML: line 2, column"},
		{name: "duplicate key", file: "version = 2\nversion = 3\n", code: cli.ExitError, stderr: "not valid TOML: line 2"},
		{name: "unknown version", file: "version = 4\n", code: cli.ExitError, stderr: "version = 4: want 2 (containerd 1.6, 1.7) or 3 (containerd 2.x)"},
		{name: "version is not a number", file: "version = \"2\"\n", code: cli.ExitError, stderr: `version = "2": want`},
		{name: "flag against the file's version", file: "version = 2\n", args: []string{"--config-version", "3"}, code: cli.ExitError, stderr: "a version 2 config, not version 3"},
		{name: "runtimes is not a table", file: "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  runtimes = \"runc\"\n", code: cli.ExitError,
			stderr: `plugins."io.containerd.grpc.v1.cri".containerd.runtimes is "runc": want a table`},
		{name: "BinaryName not a string", file: "version = 3\n[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.gpumux.options]\n  BinaryName = 7\n", code: cli.ExitError,
			stderr: `plugins."io.containerd.cri.v1.runtime".containerd.runtimes.gpumux.options.BinaryName is 7: want a string`},
	} {
		t.Run(tc.name, func(t *testing.T) { runConfigure(t, "containerd", tc, decodeTOML) })
	}
}

// TestRuntimeConfigureContainerdVersionFromBinary: a new file gets the
// config version of the containerd on PATH.
func TestRuntimeConfigureContainerdVersionFromBinary(t *testing.T) {
	for _, tc := range []struct {
		version string // what `containerd --version` prints
		want    string // the CRI plugin key written
		err     string
	}{
		{"containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3", "io.containerd.grpc.v1.cri", ""},
		{"containerd containerd.io 1.7.27 05044ec0a9a75232cad458027ca83437aae3f4da", "io.containerd.grpc.v1.cri", ""},
		{"containerd github.com/containerd/containerd/v2 v2.1.4 75cb2b7193e4e490e9fbdc236c0e811ccaba3376", "io.containerd.cri.v1.runtime", ""},
		{"containerd something 0.9", "", "not containerd 1.x or 2.x"},
		{"", "", "no containerd on PATH"},
	} {
		bin := t.TempDir()
		if tc.version != "" {
			if err := os.WriteFile(filepath.Join(bin, "containerd"), []byte("#!/bin/sh\necho '"+tc.version+"'\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		t.Setenv("PATH", bin)
		path := filepath.Join(t.TempDir(), "config.toml")
		code, out, errOut := run(t, "runtime", "configure", "--runtime", "containerd", "--config", path, "--runtime-path", "/usr/local/bin/gpumux-runtime")
		b, _ := os.ReadFile(path)
		if tc.err != "" {
			if code != cli.ExitError || !strings.Contains(errOut, tc.err) || !strings.Contains(errOut, "--config-version") || len(b) != 0 {
				t.Errorf("%q: exit %d, stderr %q, file %q; want exit 1 and %q", tc.version, code, errOut, b, tc.err)
			}
			continue
		}
		if code != cli.ExitOK || !strings.Contains(string(b), tc.want) {
			t.Errorf("%q: exit %d, file:\n%s\nstdout: %s\nstderr: %s", tc.version, code, b, out, errOut)
		}
	}
}

func TestRuntimeConfigureDryRun(t *testing.T) {
	path := filepath.Join(t.TempDir(), "daemon.json")
	const old = `{"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}}`
	if err := os.WriteFile(path, []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, "runtime", "configure", "--runtime=docker", "--config", path, "--runtime-path", "/opt/gpumux/gpumux-runtime", "--dry-run", "--set-as-default")
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(out), &doc); err != nil || lookup(doc, k("runtimes", "gpumux", "path")) != "/opt/gpumux/gpumux-runtime" || doc["default-runtime"] != "gpumux" {
		t.Errorf("stdout is not the resulting file (%v):\n%s", err, out)
	}
	for _, want := range []string{`would set "runtimes"."gpumux"."path" = "/opt/gpumux/gpumux-runtime"`, `would set "default-runtime" = "gpumux"`, "not changed",
		"warning: /opt/gpumux/gpumux-runtime is not an executable file"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	if b, _ := os.ReadFile(path); string(b) != old {
		t.Errorf("a dry run changed the file:\n%s", b)
	}
	if m, _ := filepath.Glob(path + "*"); len(m) != 1 {
		t.Errorf("a dry run made files: %v", m)
	}
}

func TestRuntimeConfigureSymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "real.json")
	link := filepath.Join(dir, "daemon.json")
	if err := os.WriteFile(target, []byte("{}"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real.json", link); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := run(t, "runtime", "configure", "--runtime=docker", "--config", link, "--runtime-path", "/usr/local/bin/gpumux-runtime"); code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link was replaced by a file: %v", err)
	}
	if b, _ := os.ReadFile(target); !strings.Contains(string(b), "gpumux-runtime") {
		t.Errorf("the link's target was not written: %s", b)
	}
}

func TestRuntimeConfigureFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--runtime is required: docker or containerd"},
		{[]string{"--runtime", "podman"}, `--runtime "podman": want docker or containerd`},
		{[]string{"--runtime", "docker", "--config-version", "3"}, `--config-version "3": only for --runtime=containerd`},
		{[]string{"--runtime", "containerd", "--config-version", "1"}, `--config-version "1": want auto, 2 (containerd 1.6, 1.7) or 3 (containerd 2.x)`},
		{[]string{"--runtime", "docker", "--runtime-path", "bin/gpumux-runtime"}, `--runtime-path "bin/gpumux-runtime": want an absolute path`},
	} {
		code, _, errOut := run(t, append([]string{"runtime", "configure"}, tc.args...)...)
		if code != cli.ExitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
	if code, _, errOut := run(t, "runtime", "reconfigure"); code != cli.ExitUsage || !strings.Contains(errOut, `unknown command "reconfigure"`) {
		t.Errorf("runtime reconfigure: exit %d, %s", code, errOut)
	}
}
