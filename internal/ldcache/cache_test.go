package ldcache

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// ldconfig is the host's, which the tests hold this package to.
func ldconfig(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/sbin/ldconfig.real", "/sbin/ldconfig", "/usr/sbin/ldconfig"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Fatal("no ldconfig on this machine: the tests compare this package with it")
	return ""
}

// libraries builds shared objects with gcc: name -> SONAME ("" for none).
type libraries map[string]string

// build writes each library at root/dir/name, and each link of links
// (name -> target) beside them.
func build(t *testing.T, root, dir string, libs libraries, links map[string]string) {
	t.Helper()
	d := filepath.Join(root, dir)
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "f.c")
	if err := os.WriteFile(src, []byte("int gpumux_ldcache_test(void) { return 1; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, soname := range libs {
		args := []string{"-shared", "-fPIC", "-o", filepath.Join(d, name), src}
		if soname != "" {
			args = append(args, "-Wl,-soname,"+soname)
		}
		if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
			t.Fatalf("gcc %s: %v\n%s", name, err, out)
		}
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(d, name)); err != nil {
			t.Fatal(err)
		}
	}
}

// driverDir is where the tests put "the driver's" libraries, as the
// staged tree's are in a container.
const driverDir = "/usr/local/nvidia/lib64"

// imageRoot is an image's root: libraries in two configured directories
// (one with a glibc-hwcaps subdirectory), a linker script and a file that
// is no library, and "the driver's" directory: a real file under its
// version with its SONAME and development links, a library whose SONAME
// the image has too, one without a SONAME, a link by an unrelated name, a
// link to a library in another directory.
func imageRoot(t *testing.T) string {
	root := t.TempDir()
	build(t, root, "opt/img", libraries{"libimg.so.1.2.3": "libimg.so.1", "libother.so.2": "libother.so.2"},
		map[string]string{"libimg.so.1": "libimg.so.1.2.3", "libimg.so": "libimg.so.1"})
	build(t, root, "opt/img/glibc-hwcaps/x86-64-v3", libraries{"libimg.so.1": "libimg.so.1"}, nil)
	build(t, root, "opt/a", libraries{"libfoo.so.1.0": "libfoo.so.1"}, map[string]string{"libfoo.so.1": "libfoo.so.1.0"})
	build(t, root, driverDir, libraries{"libcuda.so.580.1": "libcuda.so.1", "libfoo.so.3": "libfoo.so.1", "libnosoname.so": ""},
		map[string]string{"libcuda.so.1": "libcuda.so.580.1", "libcuda.so": "libcuda.so.1", "libweird.so.5": "libcuda.so.580.1", "libgone.so.1": "nothing",
			"libext.so.1": "../../../../opt/ext/libext.so.1.0"}) // a link out of the directory
	build(t, root, "opt/ext", libraries{"libext.so.1.0": "libext.so.1"}, nil)
	for name, text := range map[string]string{
		"opt/img/libc.so":      "/* GNU ld script */\nGROUP ( libimg.so.1 )\n",
		"opt/img/libnote.so.1": "not an ELF file\n",
		"etc/ld.so.conf":       "/opt/img\n/opt/a\n",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// listing is `ldconfig -p` of a cache file, its first line (which names
// the file) dropped.
func listing(t *testing.T, cache string) string {
	t.Helper()
	out, err := exec.Command(ldconfig(t), "-p", "-C", cache).CombinedOutput()
	if err != nil {
		t.Fatalf("ldconfig -p -C %s: %v\n%s", cache, err, out)
	}
	_, rest, _ := strings.Cut(string(out), "\n")
	return rest
}

// add is what the update-ldcache hook does with this package.
func add(t *testing.T, root string, image []byte, dirs ...string) []byte {
	t.Helper()
	c := &Cache{}
	if image != nil {
		var err error
		if c, err = Parse(image); err != nil {
			t.Fatal(err)
		}
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var libs []Entry
	for _, d := range dirs {
		found, err := Scan(r, d)
		if err != nil {
			t.Fatal(err)
		}
		libs = append(libs, found...)
	}
	c.Add(dirs, libs)
	return c.Marshal()
}

// TestAddAsLdconfig: the image's cache with the driver's directory added
// lists exactly what `ldconfig -r ROOT -X DIR` builds, in its order, from
// caches ldconfig wrote in each of its formats, and adding again changes
// nothing.
func TestAddAsLdconfig(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("ldconfig -r chroots: needs root")
	}
	for _, format := range []string{"new", "compat"} {
		t.Run(format, func(t *testing.T) {
			root := imageRoot(t)
			ld := ldconfig(t)
			for _, args := range [][]string{
				{"-r", root, "-X", "-c", format, "-C", "/etc/image.cache"},
				{"-r", root, "-X", "-C", "/etc/ldconfig.cache", driverDir},
			} {
				if out, err := exec.Command(ld, args...).CombinedOutput(); err != nil {
					t.Fatalf("ldconfig %q: %v\n%s", args, err, out)
				}
			}
			image, err := os.ReadFile(filepath.Join(root, "etc/image.cache"))
			if err != nil {
				t.Fatal(err)
			}
			// (ldconfig -p prints a compat cache's glibc-hwcaps names from
			// the wrong base: glibc 2.36 writes them relative to the new
			// format's header, as keys, and reads them relative to the file.)
			if format == "new" && !strings.Contains(listing(t, filepath.Join(root, "etc/image.cache")), `hwcap: "x86-64-v3"`) {
				t.Fatal("the image's cache has no glibc-hwcaps entry to keep")
			}
			merged := add(t, root, image, driverDir)
			want := listing(t, filepath.Join(root, "etc/ldconfig.cache"))
			got := filepath.Join(t.TempDir(), "merged.cache")
			if err := os.WriteFile(got, merged, 0o644); err != nil {
				t.Fatal(err)
			}
			if l := listing(t, got); l != want {
				t.Errorf("the merged cache lists\n%s\nldconfig's\n%s", l, want)
			}
			for _, line := range []string{"libcuda.so.1 (libc6,x86-64) => " + driverDir + "/libcuda.so.1", "libfoo.so.1 (libc6,x86-64) => /opt/a/libfoo.so.1"} {
				if !strings.Contains(want, line) {
					t.Errorf("ldconfig's listing lacks %q: the test's root does not test what it means to\n%s", line, want)
				}
			}
			if again := add(t, root, merged, driverDir); !bytes.Equal(again, merged) {
				t.Error("adding the directory to the merged cache changed it")
			}
		})
	}
}

// TestAddToNoCache: an image without cache or configuration gets the
// directory's libraries alone, as ldconfig would give it.
func TestAddToNoCache(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("ldconfig -r chroots: needs root")
	}
	root := t.TempDir()
	build(t, root, driverDir, libraries{"libcuda.so.580.1": "libcuda.so.1"}, map[string]string{"libcuda.so.1": "libcuda.so.580.1"})
	if out, err := exec.Command(ldconfig(t), "-r", root, "-X", "-C", "/ldconfig.cache", driverDir).CombinedOutput(); err != nil {
		t.Fatalf("ldconfig: %v\n%s", err, out)
	}
	got := filepath.Join(root, "merged.cache")
	if err := os.WriteFile(got, add(t, root, nil, driverDir), 0o644); err != nil {
		t.Fatal(err)
	}
	want, _, _ := strings.Cut(listing(t, filepath.Join(root, "ldconfig.cache")), "Cache generated by")
	if l := listing(t, got); l != want || !strings.Contains(l, "libcuda.so.1") {
		t.Errorf("the new cache lists\n%s\nldconfig's\n%s", l, want)
	}
}

// TestParseRefuses: what the package does not rewrite is ErrUnsupported,
// never a panic or a silent loss.
func TestParseRefuses(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("ldconfig -r chroots: needs root")
	}
	root := imageRoot(t)
	if out, err := exec.Command(ldconfig(t), "-r", root, "-X", "-c", "old", "-C", "/etc/old.cache").CombinedOutput(); err != nil {
		t.Fatalf("ldconfig: %v\n%s", err, out)
	}
	old, err := os.ReadFile(filepath.Join(root, "etc/old.cache"))
	if err != nil {
		t.Fatal(err)
	}
	good := add(t, root, nil, driverDir)
	with := func(off int, b ...byte) []byte {
		c := bytes.Clone(good)
		copy(c[off:], b)
		return c
	}
	ext := int(good[32]) | int(good[33])<<8
	for _, tc := range []struct {
		name  string
		cache []byte
	}{
		{"empty", nil},
		{"the old format alone", old},
		{"a text file", []byte("glibc-ld.so.cache1.1 is what this says\n")},
		{"big-endian", with(28, 3)},
		{"more entries than bytes", with(20, 0xff, 0xff, 0xff, 0x0f)},
		{"a key beyond the end", with(newHeaderSize+4, 0xff, 0xff, 0xff, 0xff)},
		{"a value without its NUL", bytes.TrimRight((&Cache{Entries: []Entry{{Key: "libx.so.1", Value: "/x/libx.so.1"}}}).Marshal(), "\x00")},
		{"an extension directory beyond the end", with(32, 0xfc, 0xff, 0xff, 0xff)},
		{"an extension of unknown tag", with(ext+8, 7)},
		{"truncated", good[:newHeaderSize+10]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Parse(tc.cache); !errors.Is(err, ErrUnsupported) {
				t.Errorf("Parse: %v, want ErrUnsupported", err)
			}
		})
	}
}

// TestScanRefuses: a directory ldconfig would read differently is not
// guessed at.
func TestScanRefuses(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "lib/tls"), 0o755); err != nil {
		t.Fatal(err)
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := Scan(r, "/lib"); !errors.Is(err, ErrUnsupported) {
		t.Errorf("a directory with a subdirectory: %v, want ErrUnsupported", err)
	}
	if libs, err := Scan(r, "/not/there"); err != nil || len(libs) != 0 {
		t.Errorf("a directory that does not exist: %v, %v; want nothing, as ldconfig", libs, err)
	}
}

func TestLibcmp(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"libfoo.so.10", "libfoo.so.9", 1},
		{"libfoo.so.1", "libfoo.so.1", 0},
		{"libfoo.so", "libfoo.so.1", -1},
		{"liba.so", "libb.so", -1},
		{"lib2.so", "libx.so", 1}, // a digit sorts after any other byte
		{"libx.so", "lib2.so", -1},
		{"libfoo.so.007", "libfoo.so.7", 0},
	} {
		if got := libcmp(tc.a, tc.b); got != tc.want {
			t.Errorf("libcmp(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

// FuzzParse: no input makes Parse panic, and what it reads it writes back
// to the same entries.
func FuzzParse(f *testing.F) {
	c := &Cache{Generator: "gpumux test", HasGenerator: true, Entries: []Entry{
		{Key: "libcuda.so.1", Value: driverDir + "/libcuda.so.1", Flags: FlagELFLibc6 | FlagX8664Lib64},
		{Key: "libimg.so.1", Value: "/opt/img/glibc-hwcaps/x86-64-v3/libimg.so.1", Flags: FlagELFLibc6 | FlagX8664Lib64, HWCap: hwcapExtension, HWCaps: "x86-64-v3"},
		{Key: "libimg.so.1", Value: "/opt/img/libimg.so.1", Flags: FlagELFLibc6 | FlagX8664Lib64, OSVersion: 0x030200},
	}}
	f.Add(c.Marshal())
	f.Add((&Cache{}).Marshal())
	f.Add([]byte(oldMagic + "\x00\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Parse(b)
		if err != nil {
			if !errors.Is(err, ErrUnsupported) {
				t.Fatalf("Parse: %v, not ErrUnsupported", err)
			}
			return
		}
		out := c.Marshal()
		back, err := Parse(out)
		if err != nil {
			t.Fatalf("Parse of Marshal's output: %v", err)
		}
		if !reflect.DeepEqual(back.Entries, c.Entries) && (len(back.Entries) != 0 || len(c.Entries) != 0) {
			t.Fatalf("entries %+v came back as %+v", c.Entries, back.Entries)
		}
		if back.Generator != c.Generator || back.HasGenerator != c.HasGenerator {
			t.Fatalf("generator %q came back as %q", c.Generator, back.Generator)
		}
	})
}

// TestAddToCacheRefusesOddFiles: what the image puts at /etc/ld.so.cache
// that is not a regular file (a FIFO would block a reader forever, a link
// to a device would never end) is left to ldconfig, at once.
func TestAddToCacheRefusesOddFiles(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(root, "etc/ld.so.cache"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	done := make(chan error, 1)
	go func() { done <- AddToCache(r, []string{driverDir}) }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrUnsupported) {
			t.Errorf("a FIFO as the cache: %v, want ErrUnsupported", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("AddToCache blocked on a FIFO")
	}
}

// TestScanRemembersOnlyTheSameFile: what Scan read of a library is reused
// for that file only: a library rewritten in place (same inode, same size)
// or replaced by another file is read again.
func TestScanRemembersOnlyTheSameFile(t *testing.T) {
	defer func(d time.Duration) { scanSettle = d }(scanSettle)
	scanSettle = 0 // the directory's scan remembered too: each file checked
	root := t.TempDir()
	build(t, root, "lib", libraries{"libx.so.9": "libx.so.1"}, nil)
	other := t.TempDir()
	build(t, other, "lib", libraries{"libx.so.9": "libx.so.2"}, nil)
	r, err := os.OpenRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	scan := func() string {
		t.Helper()
		e, err := Scan(r, "/lib")
		if err != nil || len(e) != 1 {
			t.Fatalf("Scan: %+v, %v", e, err)
		}
		return e[0].Key
	}
	if got := scan(); got != "libx.so.1" {
		t.Fatalf("first scan: %s", got)
	}
	if got := scan(); got != "libx.so.1" {
		t.Fatalf("second scan: %s", got)
	}
	lib, newer := filepath.Join(root, "lib/libx.so.9"), filepath.Join(other, "lib/libx.so.9")
	b, err := os.ReadFile(newer)
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(lib); fi.Size() != int64(len(b)) {
		t.Fatalf("the two builds differ in size (%d, %d): the test wants a rewrite of the same size", fi.Size(), len(b))
	}
	f, err := os.OpenFile(lib, os.O_WRONLY, 0) // in place: the same inode
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteAt(b, 0)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if got := scan(); got != "libx.so.2" {
		t.Errorf("after a rewrite in place: %s, want libx.so.2", got)
	}
	build(t, root, "lib2", libraries{"libx.so.9": "libx.so.3"}, nil)
	if err := os.Rename(filepath.Join(root, "lib2/libx.so.9"), lib); err != nil {
		t.Fatal(err)
	}
	if got := scan(); got != "libx.so.3" {
		t.Errorf("after a replacement: %s, want libx.so.3", got)
	}
}

// TestScanRemembersTheDirectory: a directory's scan is remembered, and a
// directory scanned again is what it holds now: a library added, one
// removed; a scan that looked outside the directory (a dangling link that
// later leads to a library) is not remembered, nor one of a directory
// that changed a moment ago.
func TestScanRemembersTheDirectory(t *testing.T) {
	root := t.TempDir()
	build(t, root, "lib", libraries{"libx.so.9": "libx.so.1"}, nil)
	build(t, root, "dangling", nil, map[string]string{"liby.so.1": "../other/liby.so.9"})
	r, err := os.OpenRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	keys := func(dir string) []string {
		t.Helper()
		e, err := Scan(r, dir)
		if err != nil {
			t.Fatal(err)
		}
		var k []string
		for _, x := range e {
			k = append(k, x.Key)
		}
		slices.Sort(k)
		return k
	}
	remembered := func(dir string) bool {
		return slices.ContainsFunc(scans.Keys(), func(k scanKey) bool { return k.dir == dir })
	}
	scans.Clear()
	if got := keys("/lib"); !slices.Equal(got, []string{"libx.so.1"}) || remembered("/lib") {
		t.Fatalf("a directory changed a moment ago: %q, remembered %v; want [libx.so.1], not remembered", got, remembered("/lib"))
	}
	defer func(d time.Duration) { scanSettle = d }(scanSettle)
	scanSettle = 0
	for _, step := range []struct {
		name, dir string
		do        func()
		want      []string
	}{
		{"first", "/lib", func() {}, []string{"libx.so.1"}},
		{"again", "/lib", func() {}, []string{"libx.so.1"}},
		{"a library added", "/lib", func() { build(t, root, "lib", libraries{"libz.so.9": "libz.so.1"}, nil) }, []string{"libx.so.1", "libz.so.1"}},
		{"a library removed", "/lib", func() {
			if err := os.Remove(filepath.Join(root, "lib/libx.so.9")); err != nil {
				t.Fatal(err)
			}
		}, []string{"libz.so.1"}},
		{"a dangling link", "/dangling", func() {}, nil},
		{"the dangling link leads to a library", "/dangling", func() { build(t, root, "other", libraries{"liby.so.9": "liby.so.1"}, nil) }, []string{"liby.so.1"}},
	} {
		step.do()
		if got := keys(step.dir); !slices.Equal(got, step.want) {
			t.Errorf("%s: %q, want %q", step.name, got, step.want)
		}
	}
	if !remembered("/lib") || remembered("/dangling") {
		t.Errorf("remembered /lib %v, /dangling %v; want /lib only", remembered("/lib"), remembered("/dangling"))
	}
}
