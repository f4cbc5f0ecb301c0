package node

import (
	"strings"

	"github.com/gpumux/gpumux/share"
)

// prependLibraryPath puts the interposer before the container's own
// LD_LIBRARY_PATH, if it has one: CDI's env edits replace a variable.
func prependLibraryPath(edits share.Edits, env []string) {
	v, ok := edits.Env[share.EnvLibraryPath]
	if !ok {
		return
	}
	if old := EnvValue(env, share.EnvLibraryPath); old != "" && !strings.HasPrefix(old, v+":") && old != v {
		edits.Env[share.EnvLibraryPath] = v + ":" + old
	}
}
