package runtimehook

import (
	"os"

	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpumux/gpumux/share"
)

// CDIEdits turns a share's container edits into CDI container edits: the
// form both the runtime (applied to config.json with the CDI library) and CDI
// spec files use. Device nodes carry host paths only; CDI reads their type
// and major/minor from the host when it applies them.
func CDIEdits(e share.Edits) *cdispec.ContainerEdits {
	out := &cdispec.ContainerEdits{}
	for _, k := range sortedKeys(e.Env) {
		out.Env = append(out.Env, k+"="+e.Env[k])
	}
	for _, d := range e.DeviceNodes {
		out.DeviceNodes = append(out.DeviceNodes, &cdispec.DeviceNode{Path: d.ContainerPath, HostPath: d.HostPath, Permissions: d.Permissions})
	}
	for _, m := range e.Mounts {
		opts := []string{"rbind", "nosuid", "nodev"}
		if m.ReadOnly {
			opts = append(opts, "ro")
		}
		out.Mounts = append(out.Mounts, &cdispec.Mount{HostPath: m.HostPath, ContainerPath: m.ContainerPath, Options: opts, Type: "bind"})
	}
	return out
}

// fileMode is the mode a spec file is rewritten with when it had none.
const fileMode os.FileMode = 0o644
