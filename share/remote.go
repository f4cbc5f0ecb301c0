package share

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// RemoteGPU is a GPU that a gpumux-remoted server serves to the pool, as the
// pool's discovery found it (package remote/pool).
type RemoteGPU struct {
	// Addr is the server as a client dials it: "host:port" or "unix:/path"
	// (what GPUMUX_REMOTE_ADDR carries).
	Addr string
	// Index is the GPU's device ordinal on the server (the token's Device).
	Index             int
	UUID              string // GPU-…, as NVML writes it
	Model             string // e.g. "NVIDIA H200"
	MemoryMiB         uint64
	SMCount           int
	ComputeCapability string // e.g. "9.0"
	// CUDAVersion is the server's CUDA driver API version, e.g. "13.0": what
	// cuDriverGetVersion returns to a program that uses the GPU.
	CUDAVersion string
}

// MaxRemoteShares bounds the shares of one remote GPU.
const MaxRemoteShares = 48

// RemoteMount is where a remote share's interposer directory (the
// libcuda.so.1 that forwards CUDA calls) appears in the container.
const RemoteMount = "/run/gpumux/remote"

// Environment variables of remote shares (the interposer reads the first two).
const (
	EnvRemoteAddr  = "GPUMUX_REMOTE_ADDR"
	EnvRemoteToken = "GPUMUX_REMOTE_TOKEN"
	// EnvLibraryPath points the dynamic linker at the interposer first.
	EnvLibraryPath = "LD_LIBRARY_PATH"
)

// RemoteAccess is what a front door supplies, next to Paths, for the edits
// of remote shares: EditsFor asks paths for it when remote shares are among
// the shares (a Paths without it cannot hand out remote shares).
type RemoteAccess interface {
	// InterposerDir is the host directory holding the interposer's
	// libcuda.so.1, mounted read-only at RemoteMount.
	InterposerDir() string
	// RemoteToken mints the token of one reservation of quotaMiB of device
	// memory on the remote GPU g.
	RemoteToken(g RemoteGPU, quotaMiB uint64) (string, error)
}

// WithRemote returns a catalog holding c's shares and those of the remote
// GPUs, each split into `shares` equal shares. A remote share's ID is
// "<GPU UUID>/remote/<n>", like the replicas of a local GPU, so it survives
// a change of the server's address. Each share gets the GPU's memory divided
// by shares, as a hard quota the server enforces, and 100/shares percent of
// its compute as a fair share (the server does not partition SMs, so
// sm_count is the whole GPU's).
//
// Remote GPUs are grouped by model and size: "<model>-remote-<shares>x"
// (e.g. "H200-remote-4x"). GPUs of one model whose attributes differ
// (memory, SMs, compute capability, CUDA version) get groups of their own,
// named with a suffix -2, -3, … in the order of (memory, SMs, capability,
// CUDA version). A GPU whose UUID the catalog already offers (a node that
// serves its own GPU to the pool, or the same GPU seen through two servers)
// is left out and returned in skipped.
func (c *Catalog) WithRemote(gpus []RemoteGPU, shares int) (out *Catalog, skipped []RemoteGPU, err error) {
	if shares < 1 || shares > MaxRemoteShares {
		return nil, nil, fmt.Errorf("remote shares = %d: want 1 to %d per GPU", shares, MaxRemoteShares)
	}
	out = &Catalog{}
	if c != nil {
		out.Groups = slices.Clone(c.Groups)
	}
	taken := map[string]bool{}
	names := map[string]bool{}
	for _, g := range out.Groups {
		names[g.Name] = true
		for _, s := range g.Shares {
			taken[s.Parent()] = true
			taken[s.GPU.UUID] = true
		}
	}
	// Of GPUs seen twice, the one of the first server (by address) is kept.
	var fresh []RemoteGPU
	for _, g := range slices.SortedStableFunc(slices.Values(gpus), func(a, b RemoteGPU) int {
		return cmp.Or(cmp.Compare(a.Addr, b.Addr), cmp.Compare(a.Index, b.Index))
	}) {
		if g.UUID == "" || taken[g.UUID] {
			skipped = append(skipped, g)
			continue
		}
		taken[g.UUID] = true
		fresh = append(fresh, g)
	}
	sorted := fresh
	slices.SortStableFunc(sorted, func(a, b RemoteGPU) int {
		return cmp.Or(cmp.Compare(a.Model, b.Model), cmp.Compare(a.MemoryMiB, b.MemoryMiB), cmp.Compare(a.SMCount, b.SMCount),
			cmp.Compare(a.ComputeCapability, b.ComputeCapability), cmp.Compare(a.CUDAVersion, b.CUDAVersion),
			cmp.Compare(a.Addr, b.Addr), cmp.Compare(a.Index, b.Index))
	})
	type key struct {
		model, cc, cuda string
		mem             uint64
		sms             int
	}
	byKey := map[key]int{} // index into out.Groups
	props := Remote.Properties()
	for _, g := range sorted {
		k := key{g.Model, g.ComputeCapability, g.CUDAVersion, g.MemoryMiB / uint64(shares), g.SMCount}
		gi, ok := byKey[k]
		if !ok {
			profile := fmt.Sprintf("%dx", shares)
			name := groupName(g.Model, Remote, profile)
			for n := 2; names[name]; n++ {
				name = fmt.Sprintf("%s-%d", groupName(g.Model, Remote, profile), n)
			}
			names[name] = true
			gi = len(out.Groups)
			byKey[k] = gi
			out.Groups = append(out.Groups, Group{
				Name: name, Model: g.Model, Mechanism: Remote, Profile: profile,
				Attrs: Attributes{
					Mechanism: Remote, MemoryMiB: k.mem, ComputePercent: 100 / shares, SMCount: g.SMCount,
					MemoryIsolation: props.MemoryIsolation, FaultIsolation: props.FaultIsolation,
					CUDAComputeCapability: g.ComputeCapability, CUDAVersion: g.CUDAVersion,
				},
			})
		}
		grp := &out.Groups[gi]
		remote := g
		for n := 0; n < shares; n++ {
			grp.Shares = append(grp.Shares, Share{
				ID: fmt.Sprintf("%s/%s/%d", g.UUID, Remote, n), Mechanism: Remote,
				GPU:     GPURef{Index: g.Index, UUID: g.UUID, Minor: -1, Model: g.Model},
				Replica: n, Replicas: shares, Remote: &remote,
				MemoryMiB: k.mem, ComputePercent: 100 / shares, SMCount: g.SMCount,
			})
		}
	}
	for gi := range out.Groups {
		g := &out.Groups[gi]
		if g.Mechanism == Remote {
			g.Attrs.ParentUUID = commonParent(g.Shares)
			g.Attrs.RemoteAddr = commonAddr(g.Shares)
		}
	}
	out.index()
	return out, skipped, nil
}

func commonAddr(shares []Share) string {
	if len(shares) == 0 || shares[0].Remote == nil {
		return ""
	}
	a := shares[0].Remote.Addr
	for _, s := range shares[1:] {
		if s.Remote == nil || s.Remote.Addr != a {
			return ""
		}
	}
	return a
}

// IsRemoteID reports whether a share ID names a remote share.
func IsRemoteID(id string) bool { return strings.Contains(id, "/"+string(Remote)+"/") }

// remoteEdits are the edits of remote shares: no device node at all, the
// interposer directory mounted read-only at RemoteMount and first on
// LD_LIBRARY_PATH, the server's address and a token for the shares' memory
// (together) in GPUMUX_REMOTE_ADDR and GPUMUX_REMOTE_TOKEN. The interposer
// talks to one server about one GPU, so a task's remote shares must all be
// of one GPU, and cannot be mixed with local ones (the interposer replaces
// libcuda.so.1, which would hide local GPUs).
func remoteEdits(shares []Share, paths Paths) (Edits, error) {
	var (
		g   *RemoteGPU
		mem uint64
		ids []string
	)
	for _, s := range shares {
		if s.Mechanism != Remote || s.Remote == nil {
			return Edits{}, fmt.Errorf("shares %v: remote shares cannot be combined with %s shares in one task (the interposer replaces libcuda.so.1)", SortedIDs(shares), s.Mechanism)
		}
		if g != nil && s.Remote.UUID != g.UUID {
			return Edits{}, fmt.Errorf("shares %v: a task's remote shares must come from one GPU (%s and %s); ask for one larger share instead", SortedIDs(shares), g.UUID, s.Remote.UUID)
		}
		g = s.Remote
		mem += s.MemoryMiB
		ids = append(ids, s.ID)
	}
	ra, ok := paths.(RemoteAccess)
	if !ok {
		return Edits{}, fmt.Errorf("shares %v: remote shares need a token, which this front door cannot mint", SortedIDs(shares))
	}
	tok, err := ra.RemoteToken(*g, mem)
	if err != nil {
		return Edits{}, fmt.Errorf("shares %v: %w", SortedIDs(shares), err)
	}
	return Edits{
		Env: map[string]string{
			EnvShares:      strings.Join(ids, ","),
			EnvRemoteAddr:  g.Addr,
			EnvRemoteToken: tok,
			EnvLibraryPath: RemoteMount,
		},
		Mounts: []Mount{{HostPath: ra.InterposerDir(), ContainerPath: RemoteMount, ReadOnly: true}},
	}, nil
}
