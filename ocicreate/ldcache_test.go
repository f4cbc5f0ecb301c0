package ocicreate

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpumux/gpumux/internal/ldcache"
	"github.com/gpumux/gpumux/node"
)

// TestCreateWritesTheCache: a create the agent prepares gets the
// update-ldcache hook's work done at once in the bundle's root (the
// driver's libraries read from the tree runc will bind), and no hook;
// wherever the container might not see what it wrote, the hook stays.
func TestCreateWritesTheCache(t *testing.T) {
	s := newServer(t)
	for _, tc := range []struct {
		name   string
		rootfs bool
		edit   func(spec *specs.Spec, rootfs string)
		cached bool // written at create, the hook gone
	}{
		{"written at create", true, nil, true},
		{"other mounts of the spec", true, func(spec *specs.Spec, _ string) {
			spec.Mounts = append(spec.Mounts, specs.Mount{Destination: "/data", Type: "tmpfs", Source: "tmpfs"},
				specs.Mount{Destination: "/etc/hosts", Type: "bind", Source: "/etc/hosts"})
		}, true},
		{"a mount over the driver's library directory", true, func(spec *specs.Spec, _ string) {
			// The edits' mounts are sorted (CDI): runc mounts this one on
			// the tree's, and the container sees it.
			spec.Mounts = append(spec.Mounts, specs.Mount{Destination: "/usr/local/nvidia/lib64", Type: "tmpfs", Source: "tmpfs"})
		}, false},
		{"no root on the host", false, nil, false},
		{"the host's own root", false, func(spec *specs.Spec, _ string) { spec.Root.Path = "/" }, false},
		{"a mount over /etc", true, func(spec *specs.Spec, _ string) {
			spec.Mounts = append(spec.Mounts, specs.Mount{Destination: "/etc", Type: "tmpfs", Source: "tmpfs"})
		}, false},
		{"a mount over a link's directory", true, func(spec *specs.Spec, _ string) {
			spec.Mounts = append(spec.Mounts, specs.Mount{Destination: "/usr/bin", Type: "bind", Source: "/usr/bin", Options: []string{"rbind"}})
		}, false},
		{"a user namespace", true, func(spec *specs.Spec, _ string) {
			spec.Linux.UIDMappings = []specs.LinuxIDMapping{{ContainerID: 0, HostID: 100000, Size: 65536}}
		}, false},
		{"a user namespace joined", true, func(spec *specs.Spec, _ string) {
			spec.Linux.Namespaces = append(spec.Linux.Namespaces, specs.LinuxNamespace{Type: specs.UserNamespace, Path: "/proc/1/ns/user"})
		}, false},
		{"a hook before it", true, func(spec *specs.Spec, _ string) {
			spec.Hooks = &specs.Hooks{CreateRuntime: []specs.Hook{{Path: "/usr/bin/nvidia-container-runtime-hook", Args: []string{"x", "prestart"}}}}
		}, false},
		{"a relative mount over /etc", true, func(spec *specs.Spec, _ string) {
			spec.Mounts = append(spec.Mounts, specs.Mount{Destination: "etc", Type: "tmpfs", Source: "tmpfs"})
		}, false},
		{"a mount inside the library directory", true, func(spec *specs.Spec, _ string) {
			spec.Mounts = append(spec.Mounts, specs.Mount{Destination: "/usr/local/nvidia/lib64/extra", Type: "bind", Source: "/tmp", Options: []string{"rbind"}})
		}, false},
		{"the image's /etc a link", true, func(_ *specs.Spec, rootfs string) {
			if err := os.MkdirAll(filepath.Join(rootfs, "run/etc"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("run/etc", filepath.Join(rootfs, "etc")); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"an image that needs ldconfig", true, func(_ *specs.Spec, rootfs string) {
			if err := os.MkdirAll(filepath.Join(rootfs, "etc"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(rootfs, "etc/ld.so.conf"), []byte("/opt/lib\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := bundle(t, map[string]string{node.AnnotationMechanism: "timeslice"})
			rootfs := filepath.Join(b, "rootfs")
			if tc.rootfs {
				if err := os.Mkdir(rootfs, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if tc.edit != nil {
				spec := readSpec(t, b)
				tc.edit(&spec, rootfs)
				raw, _ := json.Marshal(spec)
				if err := os.WriteFile(filepath.Join(b, "config.json"), raw, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if got := s.ask(t, encodeRequest(s.config, "", "/usr/bin/gpumux-runtime", "create", "--bundle", b, "c1")); got != answerRunc {
				t.Fatalf("answer %q", got)
			}
			if _, err := node.LeasesIn(s.state).Release(context.Background(), "c1"); err != nil {
				t.Fatal(err)
			}
			spec := readSpec(t, b)
			hooked := spec.Hooks != nil && slices.ContainsFunc(spec.Hooks.CreateContainer, isLdcacheHook)
			raw, err := os.ReadFile(filepath.Join(rootfs, "etc/ld.so.cache"))
			if !tc.cached {
				if !hooked || err == nil {
					t.Errorf("hook in the spec %v, a cache written at create %v; want the hook and no cache", hooked, err == nil)
				}
				return
			}
			if hooked {
				t.Errorf("the update-ldcache hook is still in the spec: %+v", spec.Hooks.CreateContainer)
			}
			c, err := ldcache.Parse(raw)
			if err != nil || !slices.ContainsFunc(c.Entries, func(e ldcache.Entry) bool {
				return e.Key == "libcuda.so.1" && e.Value == "/usr/local/nvidia/lib64/libcuda.so.1"
			}) {
				t.Errorf("the root's cache: %+v, %v; want libcuda.so.1 at /usr/local/nvidia/lib64", c, err)
			}
			if target, err := os.Readlink(filepath.Join(rootfs, "usr/bin/nvidia-smi")); err != nil || target != "/usr/local/nvidia/bin/nvidia-smi" {
				t.Errorf("/usr/bin/nvidia-smi -> %q (%v)", target, err)
			}
		})
	}
}
