package node

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpumux/gpumux/share"
)

// Edits computes what a container needs to use shares: the edits every
// share on the node's devices needs (share.DeviceEdits), the driver's
// files when any share is on the node's own GPUs (addDriver; remote shares
// get gpumux's interposer from their mechanism instead, never the real
// driver), then each mechanism's own, from its provider. The Nomad plugin's Reserve,
// gpumux-runtime and gpumux cdi generate all come here, so one share gets
// the same edits through each.
func (n *Node) Edits(shares []share.Share) (share.Edits, error) {
	e, err := share.DeviceEdits(shares, n.host)
	if err != nil {
		return share.Edits{}, err
	}
	if slices.ContainsFunc(shares, func(s share.Share) bool { return s.Remote == nil }) {
		if err := n.addDriver(&e); err != nil {
			return share.Edits{}, fmt.Errorf("shares %v: %w", share.SortedIDs(shares), err)
		}
	}
	byMech := map[share.Mechanism][]share.Share{}
	var order []share.Mechanism
	for _, s := range shares {
		if _, ok := byMech[s.Mechanism]; !ok {
			order = append(order, s.Mechanism)
		}
		byMech[s.Mechanism] = append(byMech[s.Mechanism], s)
	}
	for _, m := range order {
		p, err := n.provider(m)
		if err != nil {
			return share.Edits{}, fmt.Errorf("shares %v: %w", share.SortedIDs(byMech[m]), err)
		}
		if err := p.Edits(byMech[m], shares, &e); err != nil {
			return share.Edits{}, err
		}
	}
	addScratch(&e)
	return e, nil
}

// addScratch puts a tmpfs at share.ScratchDir ahead of the mounts below
// it, when there are any: their mountpoints are then made there, in
// memory. On the 2-core build VM each mountpoint runc makes in a fresh
// container root cost ~1 ms (docs/benchmarks.md: a time-slice replica's
// four limiter mounts were most of what it cost over a whole GPU).
func addScratch(e *share.Edits) {
	if slices.ContainsFunc(e.Mounts, func(m share.Mount) bool { return strings.HasPrefix(m.ContainerPath, share.ScratchDir+"/") }) {
		e.Mounts = append([]share.Mount{{ContainerPath: share.ScratchDir, Scratch: true}}, e.Mounts...)
	}
}

// scratchOptions are the scratch tmpfs's: small, since it holds only
// mountpoints.
var scratchOptions = []string{"nosuid", "nodev", "noexec", "mode=755", "size=64k", "nr_inodes=1k"}

// CDIEdits turns container edits into CDI container edits: the form both
// gpumux-runtime (applied to config.json with the CDI library) and CDI spec
// files use. Device nodes carry host paths only; CDI reads their type and
// major/minor from the host when it applies them. Hook stages are OCI's
// names, which are CDI's.
func CDIEdits(e share.Edits) *cdispec.ContainerEdits {
	out := &cdispec.ContainerEdits{}
	keys := make([]string, 0, len(e.Env))
	for k := range e.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		out.Env = append(out.Env, k+"="+e.Env[k])
	}
	for _, d := range e.DeviceNodes {
		out.DeviceNodes = append(out.DeviceNodes, &cdispec.DeviceNode{Path: d.ContainerPath, HostPath: d.HostPath, Permissions: d.Permissions})
	}
	for _, m := range e.Mounts {
		if m.Scratch {
			out.Mounts = append(out.Mounts, &cdispec.Mount{HostPath: "tmpfs", ContainerPath: m.ContainerPath, Options: scratchOptions, Type: "tmpfs"})
			continue
		}
		opts := []string{"rbind", "nosuid", "nodev"}
		if m.ReadOnly {
			opts = append(opts, "ro")
		}
		out.Mounts = append(out.Mounts, &cdispec.Mount{HostPath: m.HostPath, ContainerPath: m.ContainerPath, Options: opts, Type: "bind"})
	}
	for _, h := range e.Hooks {
		out.Hooks = append(out.Hooks, &cdispec.Hook{HookName: h.Stage, Path: h.Path, Args: h.Args, Env: h.Env})
	}
	return out
}
