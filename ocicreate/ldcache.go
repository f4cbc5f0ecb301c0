package ocicreate

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpumux/gpumux/internal/ldcache"
	"github.com/gpumux/gpumux/internal/ociruntime"
)

// cacheAtCreate does the update-ldcache hook's work at create, in the
// bundle's root file system as it is on the host (the engine has mounted
// it before it runs the runtime), the driver's libraries read from the
// host directory that runc will bind into the container, and takes the
// hook out of the spec: runc then starts no hook process for it, and asks
// no agent (on the 2-core build machine the hook cost ~3 ms of a ~45 ms
// container, most of it not the hook's work; docs/benchmarks.md).
//
// It leaves the hook in the spec, and says why, wherever what it writes
// might not be what the container sees, or is not the container's: other
// hooks before it, the host's own root, a root or driver directory this
// process sees otherwise than the asking runtime does (another mount
// namespace), a link in the image on the way to what it writes, a mount
// inside the library directory, no root on the host, a user
// namespace, a mount of the spec over a path it would write (/etc, the
// links), a library directory that is not in a bind mount of the spec,
// an image whose cache needs ldconfig (ldcache.ErrUnsupported). The hook
// does the work then, as it did before. Links it made on the way are what
// the hook would make, and the hook keeps them.
func cacheAtCreate(spec *specs.Spec, bundleDir string, pid int) error {
	i, err := soleLdcacheHook(spec.Hooks)
	if err != nil {
		return err
	}
	links, dirs, err := ldcache.ParseArgs(spec.Hooks.CreateContainer[i].Args[3:])
	if err != nil {
		return err
	}
	if spec.Root == nil || spec.Root.Path == "" {
		return errors.New("the spec names no root")
	}
	if userNamespace(spec) {
		return errors.New("a user namespace: the hook writes as the container's root")
	}
	written := []string{"/etc/ld.so.cache"}
	for _, l := range links {
		written = append(written, l.Path)
	}
	for _, w := range written {
		if j := slices.IndexFunc(spec.Mounts, func(m specs.Mount) bool { return covers(m.Destination, w) }); j >= 0 {
			return fmt.Errorf("the spec's mount at %s covers %s", spec.Mounts[j].Destination, w)
		}
	}
	for _, d := range dirs {
		if j := slices.IndexFunc(spec.Mounts, func(m specs.Mount) bool { return under(m.Destination, d) }); j >= 0 {
			return fmt.Errorf("the spec's mount at %s is inside the library directory %s", spec.Mounts[j].Destination, d)
		}
	}
	rootPath := spec.Root.Path
	if !filepath.IsAbs(rootPath) {
		rootPath = filepath.Join(bundleDir, rootPath)
	}
	// What this process sees at a path must be what runc will: the asking
	// process (pid, in the engine's mount namespace, where runc runs) sees
	// the same file there. An agent in another namespace would otherwise
	// write under the engine's mount of the root.
	if err := sameAsPeer(pid, rootPath); err != nil {
		return err
	}
	root, err := os.OpenRoot(rootPath)
	if err != nil {
		return err
	}
	defer root.Close()
	// A container run on the host's own root (a bind of /, as tests and
	// debugging do): its cache is the host's, which the hook leaves alone.
	if in, err := root.Stat("."); err != nil {
		return err
	} else if top, err := os.Stat("/"); err != nil || os.SameFile(in, top) {
		return errors.New("the container's root is the host's own")
	}
	// A link on the way to what is written could lead under a mount of
	// the spec (an image's /etc -> run/etc, a tmpfs at /run).
	for _, w := range written {
		if err := noLinkOnTheWay(root, filepath.Dir(w)); err != nil {
			return err
		}
	}
	var opened []*os.Root
	defer func() {
		for _, r := range opened {
			r.Close()
		}
	}()
	src := func(dir string) (*os.Root, string, error) {
		m, rel, err := boundAt(spec.Mounts, dir)
		if err != nil {
			return nil, "", err
		}
		if err := sameAsPeer(pid, m.Source); err != nil {
			return nil, "", err
		}
		r, err := os.OpenRoot(m.Source)
		if err != nil {
			return nil, "", err
		}
		opened = append(opened, r)
		// A directory that is not there would be an empty one in the
		// cache: the hook would find what runc mounts.
		in := strings.TrimPrefix(rel, "/")
		if in == "" {
			in = "."
		}
		if fi, err := r.Stat(in); err != nil || !fi.IsDir() {
			return nil, "", fmt.Errorf("%s: not a directory in %s (%v)", rel, m.Source, err)
		}
		return r, rel, nil
	}
	if err := ldcache.UpdateFrom(root, links, dirs, src); err != nil {
		return err
	}
	spec.Hooks.CreateContainer = slices.Delete(spec.Hooks.CreateContainer, i, i+1)
	return nil
}

// soleLdcacheHook finds gpumux's update-ldcache hook, which must run before
// any other hook for its work to move ahead of them all: no prestart or
// createRuntime hook, and the first createContainer hook (a hook that
// runs ldconfig after it would drop the driver's directory either way).
func soleLdcacheHook(h *specs.Hooks) (int, error) {
	if h == nil {
		return 0, errors.New("no hooks")
	}
	i := slices.IndexFunc(h.CreateContainer, isLdcacheHook)
	switch {
	case i < 0:
		return 0, errors.New("no update-ldcache hook")
	case i > 0 || len(h.Prestart) > 0 || len(h.CreateRuntime) > 0: // Prestart: deprecated, still run by runc
		return 0, errors.New("other hooks run before update-ldcache")
	}
	return i, nil
}

// userNamespace says whether the container has a user namespace, made
// (ID mappings) or joined (a path).
func userNamespace(spec *specs.Spec) bool {
	if spec.Linux == nil {
		return false
	}
	return len(spec.Linux.UIDMappings) > 0 || len(spec.Linux.GIDMappings) > 0 ||
		slices.ContainsFunc(spec.Linux.Namespaces, func(n specs.LinuxNamespace) bool { return n.Type == specs.UserNamespace })
}

// sameAsPeer checks that process pid sees at path what this process does
// (pid 0: this process itself).
func sameAsPeer(pid int, path string) error {
	if pid == 0 {
		return nil
	}
	mine, err := os.Stat(path)
	if err != nil {
		return err
	}
	theirs, err := os.Stat(filepath.Join(fmt.Sprintf("/proc/%d/root", pid), path))
	if err != nil || !os.SameFile(mine, theirs) {
		return fmt.Errorf("%s is not the same in the runtime's mount namespace (%v)", path, err)
	}
	return nil
}

// noLinkOnTheWay checks that no component of dir, a clean absolute path
// in r, is a symbolic link.
func noLinkOnTheWay(r *os.Root, dir string) error {
	p := ""
	for _, c := range strings.Split(strings.TrimPrefix(dir, "/"), "/") {
		if c == "" {
			continue
		}
		p = filepath.Join(p, c)
		fi, err := r.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			return nil // made as a directory
		}
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return fmt.Errorf("/%s is a link in the image", p)
		}
	}
	return nil
}

// isLdcacheHook says whether h is gpumux's update-ldcache hook, as the node
// core writes it (ociruntime.HookUpdateLdcache, ldcache.ParseArgs).
func isLdcacheHook(h specs.Hook) bool {
	base := filepath.Base(h.Path)
	return (base == ociruntime.EntryBinary || base == ociruntime.HookBinary) &&
		len(h.Args) >= 3 && h.Args[1] == "hook" && h.Args[2] == ociruntime.HookUpdateLdcache
}

// boundAt finds the bind mount of mounts that dir is in, the last of them
// (a later mount is on top), and dir's path under its source.
func boundAt(mounts []specs.Mount, dir string) (specs.Mount, string, error) {
	for j := len(mounts) - 1; j >= 0; j-- {
		m := mounts[j]
		if !covers(m.Destination, dir) {
			continue
		}
		if !isBind(m) || !filepath.IsAbs(m.Source) {
			return m, "", fmt.Errorf("%s is in the spec's %s mount at %s, not a bind mount of a host directory", dir, m.Type, m.Destination)
		}
		rel, err := filepath.Rel(filepath.Join("/", m.Destination), dir)
		if err != nil {
			return m, "", err
		}
		return m, filepath.Join("/", rel), nil
	}
	return specs.Mount{}, "", fmt.Errorf("%s is in none of the spec's mounts", dir)
}

// covers says whether a mount at dest hides or holds path: path is dest
// or under it. A relative dest is from the root, as runc takes it.
func covers(dest, path string) bool {
	dest = filepath.Join("/", dest)
	return dest == "/" || path == dest || strings.HasPrefix(path, dest+"/")
}

// under says whether a mount at dest is strictly inside dir.
func under(dest, dir string) bool {
	return strings.HasPrefix(filepath.Join("/", dest), dir+"/")
}

func isBind(m specs.Mount) bool {
	return m.Type == "bind" || slices.Contains(m.Options, "bind") || slices.Contains(m.Options, "rbind")
}
