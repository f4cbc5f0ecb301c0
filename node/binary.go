package node

import (
	"os"
	"os/exec"
	"path/filepath"

	"github.com/gpumux/gpumux/nodeconfig"
)

// ResolveBinary finds a program given by name: on PATH, else next to the
// running executable or one directory up (a plugin in bin/plugins/ finds
// bin/gpumux-fake-mps-control). Paths are returned as they are; a name
// found nowhere is returned as it is, for the caller to report.
func ResolveBinary(name string) string {
	if filepath.IsAbs(name) || filepath.Base(name) != name {
		return name
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if exe, err := os.Executable(); err == nil {
		dir := filepath.Dir(exe)
		for _, d := range []string{dir, filepath.Dir(dir)} {
			if p := filepath.Join(d, name); isExecutable(p) {
				return p
			}
		}
	}
	return name
}

// resolveLimiterDir returns the node's limiter directory: the configured
// one, or, when the default is not installed, a "limiter" directory next to
// the running executable or one directory up (make build's bin/limiter, for
// bin/gpumux-runtime and bin/plugins/nomad-device-gpumux alike).
func resolveLimiterDir(configured string) string {
	if configured == "" {
		configured = nodeconfig.DefaultLimiterDir
	}
	if configured != nodeconfig.DefaultLimiterDir {
		return configured
	}
	if _, err := os.Stat(configured); err == nil {
		return configured
	}
	if exe, err := os.Executable(); err == nil {
		dir := filepath.Dir(exe)
		for _, d := range []string{dir, filepath.Dir(dir)} {
			if p := filepath.Join(d, "limiter"); isDir(p) {
				return p
			}
		}
	}
	return configured
}

func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}
