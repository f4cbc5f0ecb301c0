package ldcache

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
)

// LinkFlag precedes each LINK=TARGET argument of the update-ldcache hook.
const LinkFlag = "--link"

// ArgsUsage is the update-ldcache hook's arguments.
const ArgsUsage = "[" + LinkFlag + " LINK=TARGET]... DIR..."

// Link is one --link of the update-ldcache hook: a symbolic link to make
// in the container's root.
type Link struct{ Path, Target string }

// ParseArgs reads the update-ldcache hook's arguments: links first, then
// at least one directory; every path absolute and clean.
func ParseArgs(args []string) (links []Link, dirs []string, err error) {
	clean := func(what, p string) error {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p {
			return fmt.Errorf("%s %q: want a clean absolute path in the container (arguments: %s)", what, p, ArgsUsage)
		}
		return nil
	}
	for len(args) > 0 && args[0] == LinkFlag {
		if len(args) < 2 {
			return nil, nil, fmt.Errorf("%s without LINK=TARGET (arguments: %s)", LinkFlag, ArgsUsage)
		}
		path, target, ok := strings.Cut(args[1], "=")
		if !ok {
			return nil, nil, fmt.Errorf("%s %q: want LINK=TARGET (arguments: %s)", LinkFlag, args[1], ArgsUsage)
		}
		if err := errors.Join(clean("link", path), clean("link target", target)); err != nil {
			return nil, nil, err
		}
		if path == "/" {
			return nil, nil, fmt.Errorf("link %q: not the root (arguments: %s)", path, ArgsUsage)
		}
		links = append(links, Link{path, target})
		args = args[2:]
	}
	if len(args) == 0 {
		return nil, nil, fmt.Errorf("no directories given (arguments: %s)", ArgsUsage)
	}
	for _, d := range args {
		if err := clean("directory", d); err != nil {
			return nil, nil, err
		}
	}
	return links, args, nil
}

// UpdateRoot does the update-ldcache hook's work in a container's root
// file system: each link made where the image leaves its path free (its
// directory too), then the libraries of dirs added to the image's linker
// cache as `ldconfig -X DIR...` would, reading the image's cache and the
// dirs only (AddToCache). Everything is read and written inside root
// (os.Root: the image's links cannot lead out). What needs ldconfig is
// ErrUnsupported, the links made.
func UpdateRoot(root string, links []Link, dirs []string) error {
	r, err := os.OpenRoot(root)
	if err != nil {
		return err
	}
	defer r.Close()
	return UpdateIn(r, links, dirs)
}

// UpdateIn is UpdateRoot in a root already open.
func UpdateIn(r *os.Root, links []Link, dirs []string) error {
	return UpdateFrom(r, links, dirs, nil)
}

// Source is where a directory's libraries are read: a root, and the
// directory's clean absolute path in it.
type Source func(dir string) (*os.Root, string, error)

// UpdateFrom is UpdateIn with each dir's libraries read from src(dir)
// (nil: from r itself): a container's root before runc has mounted the
// driver's tree into it, the tree read where it is on the host. The cache
// names the libraries at their paths under dir, where the container will
// see them.
func UpdateFrom(r *os.Root, links []Link, dirs []string, src Source) error {
	if err := r.Mkdir("etc", 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	if err := makeLinks(r, links); err != nil {
		return err
	}
	return addToCache(r, dirs, src)
}

// scanFrom scans dir in r, or where src says it is, naming each library
// under dir.
func scanFrom(r *os.Root, dir string, src Source) ([]Entry, error) {
	if src == nil {
		return Scan(r, dir)
	}
	in, at, err := src(dir)
	if err != nil {
		return nil, err
	}
	found, err := Scan(in, at)
	for i := range found {
		found[i].Value = path.Join(dir, path.Base(found[i].Value))
	}
	return found, err
}

// makeLinks makes each link in r whose path the image leaves free, and its
// directory where the image lacks it.
func makeLinks(r *os.Root, links []Link) error {
	for _, l := range links {
		rel := strings.TrimPrefix(l.Path, "/")
		if _, err := r.Lstat(rel); err == nil {
			continue // the image's own, kept
		}
		if err := r.MkdirAll(filepath.Dir(rel), 0o755); err != nil {
			return fmt.Errorf("link %s: %w", l.Path, err)
		}
		if err := r.Symlink(l.Target, rel); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("link %s: %w", l.Path, err)
		}
	}
	return nil
}

// maxCache bounds the image's cache AddToCache reads: a larger one is
// ldconfig's to rebuild (a distribution's is tens of KiB).
const maxCache = 16 << 20

// The cache, and glibc's configuration, in the container's root.
const (
	cacheFile  = "etc/ld.so.cache"
	cacheTemp  = "etc/ld.so.cache~" // ldconfig's own temporary name
	configFile = "etc/ld.so.conf"
)

// AddToCache puts the libraries of dirs into the container's linker cache
// as `ldconfig -X DIR...` would, reading the image's cache and the dirs
// only. An image with no cache and no glibc configuration (a static or
// musl image) gets a cache of the dirs' libraries alone. What this package
// does not take on is ErrUnsupported, and so is an image that has a
// configuration but no cache: the caller runs ldconfig for those.
func AddToCache(r *os.Root, dirs []string) error {
	return addToCache(r, dirs, nil)
}

// addToCache is AddToCache with the dirs read where src says (scanFrom).
func addToCache(r *os.Root, dirs []string, src Source) error {
	c, err := imageCache(r)
	if err != nil {
		return err
	}
	var libs []Entry
	for _, d := range dirs {
		found, err := scanFrom(r, d, src)
		if err != nil {
			return err
		}
		libs = append(libs, found...)
	}
	c.Add(dirs, libs)
	return writeCache(r, c.Marshal())
}

// imageCache is the image's cache in r, empty where the image has none
// and no glibc configuration either; one with a configuration and no
// cache is ErrUnsupported.
func imageCache(r *os.Root) (*Cache, error) {
	b, err := readCache(r)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if _, err := r.Lstat(configFile); !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: the image has /%s and no cache", ErrUnsupported, configFile)
		}
		return &Cache{}, nil
	case err != nil:
		return nil, err
	}
	c, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("the image's /%s: %w", cacheFile, err)
	}
	return c, nil
}

// readCache reads the image's cache, which must be a regular file of at
// most maxCache bytes (the image chooses what is at that path: a link to
// /dev/zero, a FIFO); anything else is ErrUnsupported, for ldconfig to
// replace.
func readCache(r *os.Root) ([]byte, error) {
	f, err := r.OpenFile(cacheFile, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() || fi.Size() > maxCache {
		return nil, fmt.Errorf("%w: the image's /%s is a %v of %d bytes", ErrUnsupported, cacheFile, fi.Mode().Type(), fi.Size())
	}
	b, err := io.ReadAll(io.LimitReader(f, maxCache+1))
	if err == nil && len(b) > maxCache {
		err = fmt.Errorf("%w: the image's /%s grows past %d bytes", ErrUnsupported, cacheFile, maxCache)
	}
	return b, err
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
