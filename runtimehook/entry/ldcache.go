package entry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpumux/gpumux/internal/ldcache"
	"github.com/gpumux/gpumux/internal/ociruntime"
)

// ldconfigs are where distributions keep the host's ldconfig: Ubuntu's
// /sbin/ldconfig is a script around ldconfig.real. A hook runs with the
// environment its spec gives, without PATH, so it is looked for here.
var ldconfigs = []string{"/sbin/ldconfig.real", "/sbin/ldconfig", "/usr/sbin/ldconfig"}

// UpdateLdcacheUsage is the update-ldcache hook's command line.
const UpdateLdcacheUsage = ociruntime.HookUpdateLdcache + " " + ldcache.ArgsUsage

// UpdateLdcache is the update-ldcache hook (`update-ldcache [--link
// LINK=TARGET]... DIR...`): it makes each LINK a symbolic link to TARGET
// where the image has nothing at LINK (the driver's programs, staged in
// /usr/local/nvidia/bin, onto every image's PATH in /usr/bin), then adds
// the DIRs, the container's directories of the driver's libraries, to the
// container's linker cache (/etc/ld.so.cache), so that programs of any
// image find libcuda.so.1 there (ldcache.UpdateRoot, which gpumux agent
// runs too when gpumux-runtime asks it). What ldcache does not rewrite is
// left to the host's ldconfig, chrooted into the container's root (-r:
// links in the image cannot lead it out), without touching links (-X: the
// driver's are made already). As runc's createContainer hook it runs in
// the container's mount namespace before the switch to its root: the
// mounts are made, and the root is still writable even when the spec makes
// it read-only (runc does that after the hooks).
func UpdateLdcache(ctx context.Context, st specs.State, args []string) error {
	links, dirs, err := ldcache.ParseArgs(args)
	if err != nil {
		return fmt.Errorf("%w (usage: %s)", err, UpdateLdcacheUsage)
	}
	root, err := ociruntime.ContainerRoot(st.Bundle)
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
	err = ldcache.UpdateRoot(root, links, dirs)
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
