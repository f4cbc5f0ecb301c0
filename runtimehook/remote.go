package runtimehook

import (
	"errors"
	"strings"

	"github.com/gpumux/gpumux/share"
)

// errNoRemoteBlock is why a node without a remote block has no remote shares.
var errNoRemoteBlock = errors.New(`this node's config has no remote block (docs/runtime.md, "Remote GPUs")`)

// needsRemote reports whether a request must see the pool before its
// shares are chosen: it asks for remote shares, or Nomad reserved some.
func needsRemote(req share.Request, reserved []string) bool {
	if req.Mechanism == share.Remote {
		return true
	}
	for _, id := range reserved {
		if share.IsRemoteID(id) {
			return true
		}
	}
	return false
}

// mayFallBack reports whether a request that no local share fits may be
// served by a remote share: auto, at a level remote satisfies, on a node
// with a remote block.
func (r *Runtime) mayFallBack(req share.Request) bool {
	return req.Mechanism == "" && r.cfg.Remote != nil && len(share.AutoFallback(req.Isolation)) > 0
}

// prependLibraryPath puts the interposer before the container's own
// LD_LIBRARY_PATH, if it has one: CDI's env edits replace a variable.
func prependLibraryPath(edits share.Edits, env []string) {
	v, ok := edits.Env[share.EnvLibraryPath]
	if !ok {
		return
	}
	if old := envValue(env, share.EnvLibraryPath); old != "" && !strings.HasPrefix(old, v+":") && old != v {
		edits.Env[share.EnvLibraryPath] = v + ":" + old
	}
}
