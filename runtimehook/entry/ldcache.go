package entry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpumux/gpumux/internal/ldcache"
)

// ldconfigs are where distributions keep the host's ldconfig: Ubuntu's
// /sbin/ldconfig is a script around ldconfig.real. A hook runs with the
// environment its spec gives, without PATH, so it is looked for here.
var ldconfigs = []string{"/sbin/ldconfig.real", "/sbin/ldconfig", "/usr/sbin/ldconfig"}

// LinkFlag precedes each LINK=TARGET argument of the update-ldcache hook.
const LinkFlag = "--link"

// UpdateLdcacheUsage is the update-ldcache hook's command line.
const UpdateLdcacheUsage = HookUpdateLdcache + " [" + LinkFlag + " LINK=TARGET]... DIR..."

// UpdateLdcache is the update-ldcache hook (`update-ldcache [--link
// LINK=TARGET]... DIR...`): it makes each LINK a symbolic link to TARGET
// where the image has nothing at LINK (the driver's programs, staged in
// /usr/local/nvidia/bin, onto every image's PATH in /usr/bin), then adds
// the DIRs, the container's directories of the driver's libraries, to the
// container's linker cache (/etc/ld.so.cache), so that programs of any
// image find libcuda.so.1 there. It adds them to the image's cache itself
// (addToCache), as ldconfig would, without reading every library of the
// image; a cache it does not rewrite (package ldcache's ErrUnsupported),
// or an image that configures glibc's linker and has no cache, is left to
// the host's ldconfig, chrooted into the container's root (-r: links in
// the image cannot lead it out), without touching links (-X: the driver's
// are made already). Files are read and written inside the root
// (os.Root). As runc's createContainer hook it runs in the
// container's mount namespace before the switch to its root: the mounts
// are made, and the root is still writable even when the spec makes it
// read-only (runc does that after the hooks).
func UpdateLdcache(ctx context.Context, st specs.State, args []string) error {
	links, dirs, err := parseLdcacheArgs(args)
	if err != nil {
		return err
	}
	root, err := containerRoot(st.Bundle)
	if err != nil {
		return err
	}
	if same, err := sameFile(root, "/"); err != nil {
		return err
	} else if same {
		// A container whose root is the host's (a bind of /) has the
		// host's cache already, which this hook must not rewrite.
		return nil
	}
	if err := ensureDir(root, "etc"); err != nil {
		return fmt.Errorf("container root %s: %w", root, err)
	}
	if err := makeLinks(root, links); err != nil {
		return fmt.Errorf("container root %s: %w", root, err)
	}
	err = addToCache(root, dirs)
	if err == nil {
		return nil
	}
	if !errors.Is(err, ldcache.ErrUnsupported) {
		return fmt.Errorf("container root %s: %w", root, err)
	}
	ldconfig, lerr := findLdconfig()
	if lerr != nil {
		return fmt.Errorf("%w (ldconfig was to rebuild the cache: %v)", lerr, err)
	}
	cmd := exec.CommandContext(ctx, ldconfig, append([]string{"-r", root, "-X"}, dirs...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(cmd.Args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// link is one --link of the update-ldcache hook: a symbolic link to make
// in the container's root.
type link struct{ path, target string }

// parseLdcacheArgs reads the update-ldcache hook's arguments: links
// first, then at least one directory; every path absolute and clean.
func parseLdcacheArgs(args []string) (links []link, dirs []string, err error) {
	clean := func(what, p string) error {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p {
			return fmt.Errorf("%s %q: want a clean absolute path in the container (usage: %s)", what, p, UpdateLdcacheUsage)
		}
		return nil
	}
	for len(args) > 0 && args[0] == LinkFlag {
		if len(args) < 2 {
			return nil, nil, fmt.Errorf("%s without LINK=TARGET (usage: %s)", LinkFlag, UpdateLdcacheUsage)
		}
		path, target, ok := strings.Cut(args[1], "=")
		if !ok {
			return nil, nil, fmt.Errorf("%s %q: want LINK=TARGET (usage: %s)", LinkFlag, args[1], UpdateLdcacheUsage)
		}
		if err := errors.Join(clean("link", path), clean("link target", target)); err != nil {
			return nil, nil, err
		}
		if path == "/" {
			return nil, nil, fmt.Errorf("link %q: not the root (usage: %s)", path, UpdateLdcacheUsage)
		}
		links = append(links, link{path, target})
		args = args[2:]
	}
	if len(args) == 0 {
		return nil, nil, fmt.Errorf("no directories given (usage: %s)", UpdateLdcacheUsage)
	}
	for _, d := range args {
		if err := clean("directory", d); err != nil {
			return nil, nil, err
		}
	}
	return links, args, nil
}

// makeLinks makes each link in root whose path the image leaves free, and
// its directory where the image lacks it.
func makeLinks(root string, links []link) error {
	if len(links) == 0 {
		return nil
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return err
	}
	defer r.Close()
	for _, l := range links {
		rel := strings.TrimPrefix(l.path, "/")
		if _, err := r.Lstat(rel); err == nil {
			continue // the image's own, kept
		}
		if err := r.MkdirAll(filepath.Dir(rel), 0o755); err != nil {
			return fmt.Errorf("link %s: %w", l.path, err)
		}
		if err := r.Symlink(l.target, rel); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("link %s: %w", l.path, err)
		}
	}
	return nil
}

// containerRoot reads the root file system's path from the bundle's
// config.json (relative paths are the bundle's).
func containerRoot(bundle string) (string, error) {
	if !filepath.IsAbs(bundle) {
		return "", fmt.Errorf("the container state's bundle %q is not an absolute path", bundle)
	}
	path := filepath.Join(bundle, "config.json")
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading the container spec: %w", err)
	}
	var spec struct {
		Root *specs.Root `json:"root"`
	}
	if err := json.Unmarshal(b, &spec); err != nil {
		return "", fmt.Errorf("decoding %s: %w", path, err)
	}
	if spec.Root == nil || spec.Root.Path == "" {
		return "", fmt.Errorf("%s has no root.path", path)
	}
	root := spec.Root.Path
	if !filepath.IsAbs(root) {
		root = filepath.Join(bundle, root)
	}
	return filepath.Clean(root), nil
}

// ensureDir makes dir in root (links in root cannot lead out of it).
func ensureDir(root, dir string) error {
	r, err := os.OpenRoot(root)
	if err != nil {
		return err
	}
	defer r.Close()
	if err := r.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}

// sameFile says whether a and b are one file.
func sameFile(a, b string) (bool, error) {
	fa, err := os.Stat(a)
	if err != nil {
		return false, fmt.Errorf("container root: %w", err)
	}
	fb, err := os.Stat(b)
	if err != nil {
		return false, err
	}
	return os.SameFile(fa, fb), nil
}

func findLdconfig() (string, error) {
	for _, p := range ldconfigs {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("no ldconfig on the host (looked for %s)", strings.Join(ldconfigs, ", "))
}

// maxCache bounds the image's cache this hook reads: a larger one is
// ldconfig's to rebuild (a distribution's is tens of KiB).
const maxCache = 16 << 20

// The cache, and glibc's configuration, in the container's root.
const (
	cacheFile  = "etc/ld.so.cache"
	cacheTemp  = "etc/ld.so.cache~" // ldconfig's own temporary name
	configFile = "etc/ld.so.conf"
)

// addToCache puts the libraries of dirs into the container's linker cache
// as `ldconfig -X DIR...` would, reading the image's cache and the dirs
// only. An image with no cache and no glibc configuration (a static or
// musl image) gets a cache of the dirs' libraries alone. What package
// ldcache does not take on is ErrUnsupported, and so is an image that has
// a configuration but no cache: the caller runs ldconfig for those.
func addToCache(root string, dirs []string) error {
	r, err := os.OpenRoot(root)
	if err != nil {
		return err
	}
	defer r.Close()
	c := &ldcache.Cache{}
	switch fi, err := r.Stat(cacheFile); {
	case errors.Is(err, fs.ErrNotExist):
		if _, err := r.Lstat(configFile); !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w: the image has /%s and no cache", ldcache.ErrUnsupported, configFile)
		}
	case err != nil:
		return err
	case fi.Size() > maxCache:
		return fmt.Errorf("%w: the image's cache is %d bytes", ldcache.ErrUnsupported, fi.Size())
	default:
		b, err := r.ReadFile(cacheFile)
		if err != nil {
			return err
		}
		if c, err = ldcache.Parse(b); err != nil {
			return fmt.Errorf("the image's /%s: %w", cacheFile, err)
		}
	}
	var libs []ldcache.Entry
	for _, d := range dirs {
		found, err := ldcache.Scan(r, d)
		if err != nil {
			return err
		}
		libs = append(libs, found...)
	}
	c.Add(dirs, libs)
	return writeCache(r, c.Marshal())
}

// writeCache replaces the container's cache with b: written beside it and
// renamed over it, so that the cache is whole, old or new.
func writeCache(r *os.Root, b []byte) error {
	if err := r.Remove(cacheTemp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	f, err := r.OpenFile(cacheTemp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Chmod(0o644) // whatever the umask, as ldconfig's
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = r.Rename(cacheTemp, cacheFile)
	}
	if err != nil {
		_ = r.Remove(cacheTemp)
		return fmt.Errorf("writing the container's /%s: %w", cacheFile, err)
	}
	return nil
}
