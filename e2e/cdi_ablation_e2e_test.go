//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// cdiAblationKind is the CDI kind of cdiAblations' devices.
const cdiAblationKind = "bench.gpumux.io/ablation"

// cdiAblation is one device of cdiAblations: the time-slice replica's
// device with some of its containerEdits dropped or rewritten.
type cdiAblation struct {
	name string
	edit func(t testing.TB, edits map[string]any)
}

// cdiAblations take a time-slice replica's CDI device apart, to say which
// of its edits a container's start pays for: without the createContainer
// hooks (update-ldcache: gpumux-runtime-hook, then ldconfig), without the
// mounts (the driver's and the limiter's files), without the device nodes,
// and env only; and ways tried out here only (the generator is unchanged):
// the hook replaced by /bin/true (what any hook process costs runc); one
// bind mount per host directory, at a private path, instead of one per
// file (dir-mounts: 6 mounts instead of 23); one bind mount only, of the
// driver's library directory (one-mount: the floor of a design that puts
// everything in one directory); and the same 23 binds with their
// mountpoints on tmpfs (tmpfs-mounts: a tmpfs on each directory that
// receives them, so that runc creates the mountpoints there and not in
// the container's root file system).
var cdiAblations = []cdiAblation{
	{"no-hooks", func(_ testing.TB, e map[string]any) { delete(e, "hooks") }},
	{"no-mounts", func(_ testing.TB, e map[string]any) { delete(e, "mounts") }},
	{"no-devices", func(_ testing.TB, e map[string]any) { delete(e, "deviceNodes") }},
	{"env-only", func(_ testing.TB, e map[string]any) {
		for k := range e {
			if k != "env" {
				delete(e, k)
			}
		}
	}},
	{"hook-true", func(t testing.TB, e map[string]any) {
		hooks, _ := e["hooks"].([]any)
		if len(hooks) == 0 {
			t.Fatal("the time-slice replica's CDI device has no hooks")
		}
		for _, h := range hooks {
			h := h.(map[string]any)
			h["path"], h["args"] = "/bin/true", []any{"true"}
		}
	}},
	{"dir-mounts", dirMounts},
	{"one-mount", func(t testing.TB, e map[string]any) {
		dirMounts(t, e)
		e["mounts"] = e["mounts"].([]any)[:1]
	}},
	{"tmpfs-mounts", tmpfsMounts},
}

// tmpfsMounts puts a tmpfs on each container directory that receives the
// device's mounts, before them (CDI orders mounts by depth).
func tmpfsMounts(t testing.TB, e map[string]any) {
	t.Helper()
	mounts, _ := e["mounts"].([]any)
	if len(mounts) == 0 {
		t.Fatal("the time-slice replica's CDI device has no mounts")
	}
	seen := map[string]bool{}
	var tmpfs []any
	for _, m := range mounts {
		dir := filepath.Dir(m.(map[string]any)["containerPath"].(string))
		if !seen[dir] {
			seen[dir] = true
			tmpfs = append(tmpfs, map[string]any{"hostPath": "tmpfs", "containerPath": dir, "type": "tmpfs",
				"options": []any{"nosuid", "nodev", "mode=755", "size=65536k"}})
		}
	}
	e["mounts"] = append(tmpfs, mounts...)
}

// dirMounts replaces the device's mounts by one read-only bind of each host
// directory they come from, at /run/gpumux/bench/N (a mount of a directory
// keeps its mount), and points the hooks' arguments at the directory that
// now holds the driver's libraries.
func dirMounts(t testing.TB, e map[string]any) {
	t.Helper()
	mounts, _ := e["mounts"].([]any)
	if len(mounts) == 0 {
		t.Fatal("the time-slice replica's CDI device has no mounts")
	}
	dirs := map[string]string{}  // host directory → container path
	moved := map[string]string{} // container directory → its new path
	var out []any
	for _, m := range mounts {
		m := m.(map[string]any)
		host, ctr := m["hostPath"].(string), m["containerPath"].(string)
		hostDir, ctrDir := host, ctr
		if fi, err := os.Stat(host); err != nil {
			t.Fatal(err)
		} else if !fi.IsDir() {
			hostDir, ctrDir = filepath.Dir(host), filepath.Dir(ctr)
		}
		if _, ok := dirs[hostDir]; !ok {
			dirs[hostDir] = fmt.Sprintf("/run/gpumux/bench/%d", len(dirs))
			out = append(out, map[string]any{"hostPath": hostDir, "containerPath": dirs[hostDir], "type": "bind",
				"options": []any{"rbind", "nosuid", "nodev", "ro"}})
		}
		moved[ctrDir] = dirs[hostDir]
	}
	e["mounts"] = out
	hooks, _ := e["hooks"].([]any)
	for _, h := range hooks {
		h := h.(map[string]any)
		args, _ := h["args"].([]any)
		for i, a := range args {
			if p, ok := moved[fmt.Sprint(a)]; ok {
				args[i] = p
			}
		}
	}
}

// writeCDIAblations writes cdiAblations' devices, derived from the device
// dev (kind=name) of the CDI spec file specFile, as one more spec in dir,
// and returns each one's fully qualified name, in cdiAblations' order.
func writeCDIAblations(t testing.TB, specFile, dev, dir string) []string {
	t.Helper()
	_, name, _ := strings.Cut(dev, "=")
	b, err := os.ReadFile(specFile)
	if err != nil {
		t.Fatal(err)
	}
	var spec map[string]any
	if err := json.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	var edits []byte
	devices, _ := spec["devices"].([]any)
	for _, d := range devices {
		if d := d.(map[string]any); d["name"] == name {
			edits, _ = json.Marshal(d["containerEdits"])
		}
	}
	if edits == nil {
		t.Fatalf("%s has no device %s", specFile, name)
	}
	var out []any
	var names []string
	for _, a := range cdiAblations {
		var e map[string]any
		if err := json.Unmarshal(edits, &e); err != nil {
			t.Fatal(err)
		}
		a.edit(t, e)
		out = append(out, map[string]any{"name": a.name, "containerEdits": e})
		names = append(names, cdiAblationKind+"="+a.name)
	}
	b, err = json.MarshalIndent(map[string]any{"cdiVersion": spec["cdiVersion"], "kind": cdiAblationKind, "devices": out}, "", "  ")
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "ablation.json"), b, 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
	return names
}
