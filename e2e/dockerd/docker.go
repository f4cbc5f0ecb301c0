package dockerd

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/gpumux/gpumux/e2e/ctrd"
	"github.com/gpumux/gpumux/e2e/internal/hostcheck"
)

// ProbeImage is the tag of the probe image Daemon.ProbeImage imports. Not
// "latest": Nomad's docker driver pulls a :latest image even when it is
// present.
const ProbeImage = "gpumux-e2e/probe:1"

// Docker runs the docker CLI against the engine (-H Host, its client
// config in Dir, not ~/.docker) and returns its stdout and stderr; a
// non-zero exit is an error carrying stderr.
func (d *Daemon) Docker(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	return d.DockerWithInput(ctx, nil, args...)
}

// DockerWithInput is Docker with stdin.
func (d *Daemon) DockerWithInput(ctx context.Context, stdin io.Reader, args ...string) (string, string, error) {
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, d.cfg.docker, append([]string{"-H", d.Host}, args...)...)
	cmd.Env = append(hostcheck.FilterEnv(os.Environ(), "DOCKER_HOST", "DOCKER_CONFIG", "DOCKER_CONTEXT"), "DOCKER_CONFIG="+filepath.Join(d.Dir, "cli"))
	cmd.Stdin = stdin
	cmd.Stdout = &out
	cmd.Stderr = &errOut
	if err := cmd.Run(); err != nil {
		return out.String(), errOut.String(), fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errOut.String()))
	}
	return out.String(), errOut.String(), nil
}

// ProbeImage imports, once per engine, an image of the probe rootfs
// (ctrd.MakeRootfs: the static probe as /probe, its command) tagged
// ProbeImage, and returns the tag.
func (d *Daemon) ProbeImage(ctx context.Context) (string, error) {
	d.imageOnce.Do(func() { d.image, d.imageErr = d.importProbe(ctx) })
	return d.image, d.imageErr
}

func (d *Daemon) importProbe(ctx context.Context) (string, error) {
	root := filepath.Join(d.Dir, "probe-rootfs")
	if err := ctrd.MakeRootfs(root); err != nil {
		return "", fmt.Errorf("probe rootfs: %w", err)
	}
	defer os.RemoveAll(root)
	var buf bytes.Buffer
	if err := ctrd.TarDir(&buf, root); err != nil {
		return "", fmt.Errorf("probe rootfs tarball: %w", err)
	}
	if _, _, err := d.DockerWithInput(ctx, &buf, "import", "--change", `CMD ["`+ctrd.ProbePath+`"]`, "-", ProbeImage); err != nil {
		return "", err
	}
	return ProbeImage, nil
}
