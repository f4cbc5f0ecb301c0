package hostcheck

import (
	"os"
	"path/filepath"
	"strings"
)

// FilterEnv returns env (KEY=VALUE entries) without the variables named in
// drop, for the processes a harness starts: a daemon under test (which then
// gets its marker, see Owner.Marker) or a build.
func FilterEnv(env []string, drop ...string) []string {
	out := env[:0:0]
next:
	for _, kv := range env {
		for _, d := range drop {
			if strings.HasPrefix(kv, d+"=") {
				continue next
			}
		}
		out = append(out, kv)
	}
	return out
}

// CacheDir is where the build and fetch scripts (scripts/build-nomad.sh,
// build-containerd.sh, fetch-docker.sh) keep the tools the harnesses run:
// $GPUMUX_CACHE, else ~/.cache/gpumux (root's home when there is none).
func CacheDir() string {
	if c := os.Getenv("GPUMUX_CACHE"); c != "" {
		return c
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = "/root"
	}
	return filepath.Join(home, ".cache", "gpumux")
}
