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
)

// ldconfigs are where distributions keep the host's ldconfig: Ubuntu's
// /sbin/ldconfig is a script around ldconfig.real. A hook runs with the
// environment its spec gives, without PATH, so it is looked for here.
var ldconfigs = []string{"/sbin/ldconfig.real", "/sbin/ldconfig", "/usr/sbin/ldconfig"}

// UpdateLdcache is the update-ldcache hook: it adds dirs, the container's
// directories of the driver's libraries, to the container's linker cache
// (/etc/ld.so.cache), so that programs of any image find libcuda.so.1
// there. It runs the host's ldconfig chrooted into the container's root
// (-r: links in the image cannot lead it out), without touching links
// (-X: the SONAME names are mounts, not links). As runc's createContainer
// hook it runs in the container's mount namespace before the switch to
// its root: the mounts are made, and the root is still writable even
// when the spec makes it read-only (runc does that after the hooks).
func UpdateLdcache(ctx context.Context, st specs.State, dirs []string) error {
	if len(dirs) == 0 {
		return errors.New("no directories given")
	}
	for _, d := range dirs {
		if !filepath.IsAbs(d) || filepath.Clean(d) != d {
			return fmt.Errorf("directory %q: want a clean absolute path in the container", d)
		}
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
	ldconfig, err := findLdconfig()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, ldconfig, append([]string{"-r", root, "-X"}, dirs...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(cmd.Args, " "), err, strings.TrimSpace(string(out)))
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
