package entry

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpumux/gpumux/gpu/sim"
	"github.com/gpumux/gpumux/internal/ldcache"
	"github.com/gpumux/gpumux/internal/ociruntime"
)

// ldcacheBundle is a bundle whose root (no /etc, as the e2e tests' probe
// rootfs) has the simulated driver's libcuda at its SONAME, as the driver
// mounts give it.
func ldcacheBundle(t testing.TB, rootPath string) (bundle, rootfs string) {
	t.Helper()
	n, err := sim.Open("dgxh200", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := n.EnsureDriverFiles(); err != nil {
		t.Fatal(err)
	}
	lib, err := os.ReadFile(filepath.Join(n.DriverRoot(), sim.LibDir(), "libcuda.so.1"))
	if err != nil {
		t.Fatal(err)
	}
	bundle = t.TempDir()
	rootfs = filepath.Join(bundle, "rootfs")
	if err := os.MkdirAll(filepath.Join(rootfs, sim.LibDir()), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, sim.LibDir(), "libcuda.so.1"), lib, 0o644); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(specs.Spec{Version: specs.Version, Root: &specs.Root{Path: rootPath}})
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return bundle, rootfs
}

// hook runs `gpumux-runtime-hook hook ARGS...` on the state of container
// c1 of bundle ("" for no state), and returns its exit code and stderr.
func hook(t *testing.T, bundle string, args ...string) (int, string) {
	t.Helper()
	var state []byte
	if bundle != "" {
		state, _ = json.Marshal(specs.State{ID: "c1", Bundle: bundle})
	}
	var stdout, stderr bytes.Buffer
	code := Main(context.Background(), append([]string{"hook"}, args...), bytes.NewReader(state), &stdout, &stderr)
	return code, stderr.String()
}

// TestUpdateLdcache: the hook puts the driver's library directory into the
// container's linker cache, making /etc where the image has none.
func TestUpdateLdcache(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("ldconfig -r chroots: needs root")
	}
	ldconfig, err := findLdconfig()
	if err != nil {
		t.Skip(err)
	}
	for _, rootPath := range []string{"rootfs", "<absolute>"} {
		t.Run(rootPath, func(t *testing.T) {
			bundle, rootfs := ldcacheBundle(t, "rootfs")
			if rootPath != "rootfs" {
				b, _ := json.Marshal(specs.Spec{Version: specs.Version, Root: &specs.Root{Path: rootfs, Readonly: true}})
				if err := os.WriteFile(filepath.Join(bundle, "config.json"), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			dir := "/" + sim.LibDir()
			if code, stderr := hook(t, bundle, ociruntime.HookUpdateLdcache, dir); code != 0 {
				t.Fatalf("hook update-ldcache: exit %d: %s", code, stderr)
			}
			out, err := exec.Command(ldconfig, "-r", rootfs, "-p").CombinedOutput()
			if want := "=> " + dir + "/libcuda.so.1\n"; err != nil || !strings.Contains(string(out), "\tlibcuda.so.1 (") || !strings.Contains(string(out), want) {
				t.Errorf("the container's cache (%v):\n%s\nwant libcuda.so.1 %s", err, out, want)
			}
		})
	}
}

func TestUpdateLdcacheErrors(t *testing.T) {
	bundle, _ := ldcacheBundle(t, "rootfs")
	noSpec := t.TempDir()
	for _, tc := range []struct {
		name   string
		bundle string
		args   []string
		want   string
	}{
		{"no directory", bundle, []string{ociruntime.HookUpdateLdcache}, "no directories given"},
		{"a relative directory", bundle, []string{ociruntime.HookUpdateLdcache, "usr/lib"}, `directory "usr/lib": want a clean absolute path`},
		{"an option for ldconfig", bundle, []string{ociruntime.HookUpdateLdcache, "/usr/lib", "-C/tmp/x"}, `directory "-C/tmp/x"`},
		{"no config.json", noSpec, []string{ociruntime.HookUpdateLdcache, "/usr/lib"}, "reading the container spec"},
		{"no container state", "", []string{ociruntime.HookUpdateLdcache, "/usr/lib"}, "decoding the container state"},
		{"a link without its argument", bundle, []string{ociruntime.HookUpdateLdcache, ldcache.LinkFlag}, "--link without LINK=TARGET"},
		{"a link without a target", bundle, []string{ociruntime.HookUpdateLdcache, ldcache.LinkFlag, "/usr/bin/nvidia-smi", "/usr/lib"}, `--link "/usr/bin/nvidia-smi": want LINK=TARGET`},
		{"a relative link", bundle, []string{ociruntime.HookUpdateLdcache, ldcache.LinkFlag, "usr/bin/x=/y", "/usr/lib"}, `link "usr/bin/x": want a clean absolute path`},
		{"a relative target", bundle, []string{ociruntime.HookUpdateLdcache, ldcache.LinkFlag, "/usr/bin/x=y", "/usr/lib"}, `link target "y": want a clean absolute path`},
		{"the root as a link", bundle, []string{ociruntime.HookUpdateLdcache, ldcache.LinkFlag, "/=/y", "/usr/lib"}, `link "/": not the root`},
		{"links and no directory", bundle, []string{ociruntime.HookUpdateLdcache, ldcache.LinkFlag, "/usr/bin/x=/y"}, "no directories given"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stderr := hook(t, tc.bundle, tc.args...)
			if code == 0 || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want a failure saying %q", code, stderr, tc.want)
			}
		})
	}
}

// TestUpdateLdcacheIntoTheImagesCache: the hook adds the driver's
// libraries to the cache the image has, keeping its entries (and which
// ldconfig wrote it: no ldconfig ran), and where the image configures
// glibc's linker but has no cache, or one this hook cannot read, the
// host's ldconfig builds the cache from the image's configuration.
func TestUpdateLdcacheIntoTheImagesCache(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("ldconfig -r chroots: needs root")
	}
	ldconfig, err := findLdconfig()
	if err != nil {
		t.Fatal(err)
	}
	dir := "/" + sim.LibDir()
	image := (&ldcache.Cache{Generator: "the image's ldconfig", HasGenerator: true, Entries: []ldcache.Entry{
		{Key: "libimage.so.1", Value: "/opt/image/libimage.so.1", Flags: ldcache.FlagELFLibc6 | ldcache.FlagX8664Lib64},
		{Key: "libcuda.so.1", Value: dir + "/libcuda.so.1", Flags: 1}, // a stale entry of the driver's directory
	}}).Marshal()
	for _, tc := range []struct {
		name  string
		cache []byte // nil: none
		conf  bool   // an /etc/ld.so.conf naming /opt/conf
		want  []string
		not   []string
	}{
		{"the image's cache", image, false,
			[]string{"libimage.so.1 (libc6,x86-64) => /opt/image/libimage.so.1", "libcuda.so.1 (libc6,x86-64) => " + dir, "Cache generated by: the image's ldconfig"},
			[]string{"libcuda.so.1 (ELF)"}},
		{"a configuration and no cache", nil, true, []string{"=> /opt/conf/libcuda.so.1", "=> " + dir + "/libcuda.so.1"}, []string{"the image's ldconfig"}},
		{"a damaged cache", image[:100], true, []string{"=> /opt/conf/libcuda.so.1", "=> " + dir + "/libcuda.so.1"}, []string{"the image's ldconfig"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bundle, rootfs := ldcacheBundle(t, "rootfs")
			if err := os.MkdirAll(filepath.Join(rootfs, "etc"), 0o755); err != nil {
				t.Fatal(err)
			}
			if tc.cache != nil {
				if err := os.WriteFile(filepath.Join(rootfs, "etc/ld.so.cache"), tc.cache, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if tc.conf {
				lib, err := os.ReadFile(filepath.Join(rootfs, sim.LibDir(), "libcuda.so.1"))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.MkdirAll(filepath.Join(rootfs, "opt/conf"), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(rootfs, "opt/conf/libconf.so.1"), lib, 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(rootfs, "etc/ld.so.conf"), []byte("/opt/conf\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if code, stderr := hook(t, bundle, ociruntime.HookUpdateLdcache, dir); code != 0 {
				t.Fatalf("hook update-ldcache: exit %d: %s", code, stderr)
			}
			out, err := exec.Command(ldconfig, "-p", "-C", filepath.Join(rootfs, "etc/ld.so.cache")).CombinedOutput()
			if err != nil {
				t.Fatalf("ldconfig -p: %v\n%s", err, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("the container's cache lacks %q:\n%s", w, out)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(string(out), n) {
					t.Errorf("the container's cache has %q:\n%s", n, out)
				}
			}
			if _, err := os.Lstat(filepath.Join(rootfs, "etc/ld.so.cache~")); err == nil {
				t.Error("the temporary cache was left behind")
			}
		})
	}
}

// TestUpdateLdcacheLeavesTheHostAlone: a container whose root is the host's
// own (e2e/gpu's scripts bind / as the root) keeps the host's cache.
func TestUpdateLdcacheLeavesTheHostAlone(t *testing.T) {
	bundle := t.TempDir()
	b, _ := json.Marshal(specs.Spec{Version: specs.Version, Root: &specs.Root{Path: "/", Readonly: true}})
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	before, err := os.Stat("/etc/ld.so.cache")
	if err != nil {
		t.Skip(err)
	}
	if code, stderr := hook(t, bundle, ociruntime.HookUpdateLdcache, "/usr/lib/gpumux-test-not-there"); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	after, err := os.Stat("/etc/ld.so.cache")
	if err != nil || !after.ModTime().Equal(before.ModTime()) || !os.SameFile(before, after) {
		t.Errorf("the host's /etc/ld.so.cache changed (%v)", err)
	}
}

// TestUpdateLdcacheLinks: the hook links the driver's programs where the
// image has nothing (making the directory where it lacks it), keeps what
// the image has, and never writes outside the container's root, even
// through the image's own links.
func TestUpdateLdcacheLinks(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("ldconfig -r chroots: needs root")
	}
	if _, err := findLdconfig(); err != nil {
		t.Skip(err)
	}
	bundle, rootfs := ldcacheBundle(t, "rootfs")
	if err := os.MkdirAll(filepath.Join(rootfs, "usr/bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "usr/bin/nvidia-debugdump"), []byte("the image's own\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	const smi, dump = "/usr/local/nvidia/bin/nvidia-smi", "/usr/local/nvidia/bin/nvidia-debugdump"
	dir := "/" + sim.LibDir()
	if code, stderr := hook(t, bundle, ociruntime.HookUpdateLdcache, ldcache.LinkFlag, "/usr/bin/nvidia-smi="+smi, ldcache.LinkFlag, "/usr/bin/nvidia-debugdump="+dump,
		ldcache.LinkFlag, "/opt/tools/bin/nvidia-smi="+smi, dir); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for link, want := range map[string]string{"usr/bin/nvidia-smi": smi, "opt/tools/bin/nvidia-smi": smi} {
		if got, err := os.Readlink(filepath.Join(rootfs, link)); err != nil || got != want {
			t.Errorf("/%s -> %q (%v), want -> %s", link, got, err, want)
		}
	}
	if b, err := os.ReadFile(filepath.Join(rootfs, "usr/bin/nvidia-debugdump")); err != nil || string(b) != "the image's own\n" {
		t.Errorf("the image's /usr/bin/nvidia-debugdump became %q (%v)", b, err)
	}

	// An image whose /usr/sbin leads out of its root: refused, nothing
	// written outside.
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(rootfs, "usr/sbin")); err != nil {
		t.Fatal(err)
	}
	code, stderr := hook(t, bundle, ociruntime.HookUpdateLdcache, ldcache.LinkFlag, "/usr/sbin/nvidia-smi="+smi, dir)
	if code == 0 || !strings.Contains(stderr, "link /usr/sbin/nvidia-smi") {
		t.Errorf("a link through the image's link out of its root: exit %d, %q; want it refused", code, stderr)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("the hook wrote outside the container's root: %v", entries)
	}
}

// BenchmarkUpdateLdcache measures the update-ldcache hook, as runc runs it
// (gpumux-runtime-hook's own process, its start included), on the root of
// an image the size of a CUDA one: its cache lists libs libraries of a
// configured directory, and the driver's directory holds the simulated
// driver's libraries. "merge" is the hook as it is (the image's cache read,
// the driver's libraries added); "ldconfig" the same hook given one more
// directory, the driver's parent, whose subdirectory makes it run the
// host's ldconfig as it did before it wrote the cache itself (ldconfig
// reads every library of the image's configuration). One process per
// iteration; needs root (ldconfig -r):
//
//	go test -run '^$' -bench UpdateLdcache ./runtimehook/entry/
func BenchmarkUpdateLdcache(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("ldconfig -r chroots: needs root")
	}
	ldconfig, err := findLdconfig()
	if err != nil {
		b.Fatal(err)
	}
	hookBin := filepath.Join(b.TempDir(), ociruntime.HookBinary)
	if out, err := exec.Command("go", "build", "-o", hookBin, "github.com/gpumux/gpumux/cmd/gpumux-runtime-hook").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	for _, libs := range []int{30, 300} {
		bundle, rootfs := ldcacheBundle(b, "rootfs")
		lib, err := os.ReadFile(filepath.Join(rootfs, sim.LibDir(), "libcuda.so.1"))
		if err != nil {
			b.Fatal(err)
		}
		image := filepath.Join(rootfs, "opt/image")
		if err := os.MkdirAll(image, 0o755); err != nil {
			b.Fatal(err)
		}
		for i := range libs {
			if err := os.WriteFile(filepath.Join(image, fmt.Sprintf("libimage%d.so.1", i)), lib, 0o644); err != nil {
				b.Fatal(err)
			}
		}
		if err := os.MkdirAll(filepath.Join(rootfs, "etc"), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(rootfs, "etc/ld.so.conf"), []byte("/opt/image\n"), 0o644); err != nil {
			b.Fatal(err)
		}
		if out, err := exec.Command(ldconfig, "-r", rootfs).CombinedOutput(); err != nil {
			b.Fatalf("ldconfig: %v\n%s", err, out)
		}
		dir := "/" + sim.LibDir()
		state, _ := json.Marshal(specs.State{ID: "c1", Bundle: bundle})
		for _, way := range []struct {
			name string
			dirs []string
		}{
			{"merge", []string{dir}},
			{"ldconfig", []string{dir, filepath.Dir(filepath.Dir(dir))}},
		} {
			b.Run(fmt.Sprintf("libs=%d/%s", libs, way.name), func(b *testing.B) {
				for b.Loop() {
					cmd := exec.Command(hookBin, append([]string{"hook", ociruntime.HookUpdateLdcache}, way.dirs...)...)
					cmd.Stdin = bytes.NewReader(state)
					if out, err := cmd.CombinedOutput(); err != nil {
						b.Fatalf("%v: %s", err, out)
					}
				}
			})
		}
	}
}
