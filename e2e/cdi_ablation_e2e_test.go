//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpumux/gpumux/gpu/driverfiles"
	"github.com/gpumux/gpumux/gpu/sim"
	"github.com/gpumux/gpumux/internal/ldcache"
	"github.com/gpumux/gpumux/share"
)

// cdiAblationKind is the CDI kind of cdiAblations' devices.
const cdiAblationKind = "bench.gpumux.io/ablation"

// cdiAblation is one device of cdiAblations: the time-slice replica's
// device with some of its containerEdits dropped or rewritten.
type cdiAblation struct {
	name string
	edit func(t testing.TB, edits map[string]any)
	// hook is who does the device's update-ldcache hook when its hook is
	// gpumux-runtime asking gpumux agent (the CRI benchmark checks it).
	hook hookBy
}

// hookBy is who does an update-ldcache hook.
type hookBy int

const (
	hookNone  hookBy = iota // no hook that asks the agent
	hookAgent               // the agent, from the hook's working directory
	// hookLeft: the agent leaves it to gpumux-runtime-hook (the Go
	// program), as it does where a hook's directory is not in the
	// container (no-mounts) and for the ablations that point the hook at
	// other directories (its debug log says why): their figures are of
	// that program's hook.
	hookLeft
)

// cdiAblations take a time-slice replica's CDI device apart, to say which
// of its edits a container's start pays for: without the createContainer
// hooks (update-ldcache: gpumux-runtime-hook, then ldconfig), without the
// mounts (the driver's and the limiter's files), without the device nodes,
// and env only; and ways tried out here only (the generator is unchanged):
// the hook replaced by /bin/true (what any hook process costs runc); the
// hook running the host's ldconfig, as it did before it wrote the cache
// itself (ldconfig: one more directory for it, /usr/local/nvidia, whose
// subdirectories package ldcache leaves to ldconfig); the hook run by
// gpumux-runtime-hook directly, as before gpumux-runtime asked the agent to
// do it (go-hook); one
// bind mount per host directory, at a private path, instead of one per
// file (dir-mounts: 6 mounts instead of 23); one bind mount only, of the
// driver's library directory (one-mount: the floor of a design that puts
// everything in one directory); and the same 23 binds with their
// mountpoints on tmpfs (tmpfs-mounts: a tmpfs on each directory that
// receives them, so that runc creates the mountpoints there and not in
// the container's root file system); the driver's files one bind each, as
// before the staged tree (file-mounts); and without the limiter's mounts
// (no-limiter-mounts: the mounts of a whole GPU's device).
var cdiAblations = []cdiAblation{
	{"no-hooks", func(_ testing.TB, e map[string]any) { delete(e, "hooks") }, hookNone},
	{"no-mounts", func(_ testing.TB, e map[string]any) { delete(e, "mounts") }, hookLeft},
	{"no-devices", func(_ testing.TB, e map[string]any) { delete(e, "deviceNodes") }, hookAgent},
	{"env-only", func(_ testing.TB, e map[string]any) {
		for k := range e {
			if k != "env" {
				delete(e, k)
			}
		}
	}, hookNone},
	{"hook-true", eachHook(func(h map[string]any) {
		h["path"], h["args"] = "/bin/true", []any{"true"}
	}), hookNone},
	{"ldconfig", eachHook(func(h map[string]any) {
		h["args"] = append(h["args"].([]any), "/usr/local/nvidia")
	}), hookLeft},
	{"go-hook", eachHook(func(h map[string]any) {
		path := filepath.Join(filepath.Dir(h["path"].(string)), "gpumux-runtime-hook")
		h["path"], h["args"] = path, append([]any{"gpumux-runtime-hook"}, h["args"].([]any)[1:]...)
	}), hookNone},
	{"dir-mounts", dirMounts, hookLeft},
	{"one-mount", func(t testing.TB, e map[string]any) {
		dirMounts(t, e)
		e["mounts"] = e["mounts"].([]any)[:1]
	}, hookLeft},
	{"tmpfs-mounts", tmpfsMounts, hookAgent},
	{"file-mounts", fileMounts, hookAgent},
	{"no-limiter-mounts", noLimiterMounts, hookAgent},
}

// noLimiterMounts drops the mounts under gpumux's scratch directory (the
// limiter's four and the scratch tmpfs they are made on), leaving the
// mounts a whole GPU's device has: what the replica's own mounts cost
// over a whole GPU's.
func noLimiterMounts(t testing.TB, e map[string]any) {
	t.Helper()
	mounts, _ := e["mounts"].([]any)
	var out []any
	for _, m := range mounts {
		if p := m.(map[string]any)["containerPath"].(string); p != share.ScratchDir && !strings.HasPrefix(p, share.ScratchDir+"/") {
			out = append(out, m)
		}
	}
	if len(out) == len(mounts) {
		t.Fatalf("the time-slice replica's CDI device has no mounts under %s", share.ScratchDir)
	}
	e["mounts"] = out
}

// eachHook is an ablation that rewrites each of the device's hooks with
// edit.
func eachHook(edit func(h map[string]any)) func(testing.TB, map[string]any) {
	return func(t testing.TB, e map[string]any) {
		hooks, _ := e["hooks"].([]any)
		if len(hooks) == 0 {
			t.Fatal("the time-slice replica's CDI device has no hooks")
		}
		for _, h := range hooks {
			edit(h.(map[string]any))
		}
	}
}

// fileMounts gives the driver's files as gpumux did before the staged
// tree (and still does for Nomad reservations): the tree's mount at
// /usr/local/nvidia replaced by a read-only bind of each of its library
// files and links at the driver's library directory (libDir, in the
// container) and of each of its programs at the path the hook would have
// linked, the hook (without its links) and the limiter pointed there. The
// tree's files are the driver's own (hard links), so the container gets
// the same bytes; only the mounts differ.
func fileMounts(t testing.TB, e map[string]any) {
	t.Helper()
	libDir := "/" + sim.LibDir()
	bind := func(host, container string) map[string]any {
		return map[string]any{"hostPath": host, "containerPath": container, "type": "bind", "options": []any{"rbind", "nosuid", "nodev", "ro"}}
	}
	mounts, _ := e["mounts"].([]any)
	var out []any
	var tree string
	for _, m := range mounts {
		m := m.(map[string]any)
		if m["containerPath"] != driverfiles.ContainerDir {
			out = append(out, m)
			continue
		}
		tree = m["hostPath"].(string)
		entries, err := os.ReadDir(filepath.Join(tree, "lib64"))
		if err != nil || len(entries) == 0 {
			t.Fatalf("the staged tree's lib64: %v (%d entries)", err, len(entries))
		}
		for _, f := range entries {
			host, err := filepath.EvalSymlinks(filepath.Join(tree, "lib64", f.Name()))
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, bind(host, filepath.Join(libDir, f.Name())))
		}
	}
	if tree == "" {
		t.Fatalf("the time-slice replica's CDI device has no mount at %s", driverfiles.ContainerDir)
	}
	retarget := func(v string) string { return strings.ReplaceAll(v, driverfiles.ContainerLibDir, libDir) }
	hooks, _ := e["hooks"].([]any)
	for _, h := range hooks {
		h := h.(map[string]any)
		args, _ := h["args"].([]any)
		var kept []any
		for i := 0; i < len(args); i++ {
			a := fmt.Sprint(args[i])
			if a == ldcache.LinkFlag && i+1 < len(args) {
				link, target, _ := strings.Cut(fmt.Sprint(args[i+1]), "=")
				out = append(out, bind(filepath.Join(tree, strings.TrimPrefix(target, driverfiles.ContainerDir)), link))
				i++
				continue
			}
			kept = append(kept, retarget(a))
		}
		h["args"] = kept
	}
	e["mounts"] = out
	env, _ := e["env"].([]any)
	for i, v := range env {
		env[i] = retarget(fmt.Sprint(v))
	}
}

// selectedCDIAblations are cdiAblations, or those GPUMUX_BENCH_ABLATIONS
// names (comma-separated; "none" for none).
func selectedCDIAblations(t testing.TB) []cdiAblation {
	t.Helper()
	only := os.Getenv("GPUMUX_BENCH_ABLATIONS")
	if only == "" {
		return cdiAblations
	}
	var out []cdiAblation
	names := strings.Split(only, ",")
	for _, a := range cdiAblations {
		if slices.Contains(names, a.name) {
			out = append(out, a)
		}
	}
	if len(out) == 0 && only != "none" {
		t.Fatalf("GPUMUX_BENCH_ABLATIONS=%s names none of the ablations", only)
	}
	return out
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
		if m.(map[string]any)["type"] == "tmpfs" {
			continue // gpumux's scratch directory, on tmpfs already
		}
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
	var out, scratch []any
	for _, m := range mounts {
		m := m.(map[string]any)
		if m["type"] == "tmpfs" {
			scratch = append(scratch, m) // gpumux's scratch directory: kept, after the binds
			continue
		}
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
	e["mounts"] = append(out, scratch...)
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
// and returns each one's fully qualified name, in their order.
func writeCDIAblations(t testing.TB, ablations []cdiAblation, specFile, dev, dir string) []string {
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
	for _, a := range ablations {
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
