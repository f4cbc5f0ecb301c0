package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpumux/gpumux/node/lease"
	"github.com/gpumux/gpumux/share"
)

// RuncRootGlobs are where runc keeps its containers' state on a node, as
// globs: runc's own default, containerd's (one directory per namespace) and
// Docker's (one per runtime).
var RuncRootGlobs = []string{"/run/runc", "/run/containerd/runc/*", "/run/docker/runtime-*/moby"}

// DefaultRuncRoots returns the directories of RuncRootGlobs that exist.
func DefaultRuncRoots() []string {
	var roots []string
	for _, g := range RuncRootGlobs {
		matches, _ := filepath.Glob(g)
		for _, m := range matches {
			if fi, err := os.Stat(m); err == nil && fi.IsDir() {
				roots = append(roots, m)
			}
		}
	}
	return roots
}

// RepairOptions say where Repair looks for what still runs.
type RepairOptions struct {
	Runc   string          // runc binary ("runc" when empty)
	Roots  []string        // runc state directories (runc --root) to look in
	Holder []HoldersOption // whom to ask besides runc: AskNomad
	DryRun bool            // find and report, change nothing
}

// RepairReport says what Repair found and did.
type RepairReport struct {
	Store string `json:"store"` // the lease store's file
	// Damage is why the store needs rebuilding: its damage, or that it is
	// missing; "" when it is sound, and then nothing was done.
	Damage string `json:"damage,omitempty"`
	// Leases are the leases of the containers runc still knows that
	// gpumux-runtime prepared: what the rebuilt store holds.
	Leases []lease.Record `json:"leases"`
	// Unreadable are containers runc knows whose spec could not be read,
	// with why: whether they hold shares cannot be told.
	Unreadable []string `json:"unreadable,omitempty"`
	// Nomad maps the shares live Nomad allocations hold to their holder.
	// Nomad keeps those itself: they are reported, not recorded.
	Nomad     map[string]string `json:"nomad,omitempty"`
	NomadNote string            `json:"nomad_note,omitempty"`
	// Aside is where the damaged file was kept ("" for none, or a dry run).
	Aside string `json:"aside,omitempty"`
	// Skipped are leases not recorded, with why (two containers naming one
	// share).
	Skipped []string `json:"skipped,omitempty"`
	DryRun  bool     `json:"dry_run"`
	// Rebuilt says the store was replaced.
	Rebuilt bool `json:"rebuilt"`
}

// Repair rebuilds the lease store of state directory stateDir when it is
// damaged (lease.ErrDamaged) or missing, from what still runs: the
// containers runc knows under o.Roots whose spec gpumux-runtime prepared
// (their GPUMUX_SHARES, with its poststop hook that releases them) get
// their leases back. The damaged file is kept beside the store
// (lease.Rebuild). Nomad's live allocations, when asked (o.Holder), are
// reported: Nomad keeps what they hold itself. Reservations the Nomad
// plugin made for tasks that had not started yet are lost with the file.
// A sound store is left alone. With o.DryRun nothing is changed.
func Repair(ctx context.Context, stateDir string, o RepairOptions) (*RepairReport, error) {
	path := lease.PathIn(stateDir)
	rep := &RepairReport{Store: path, Leases: []lease.Record{}, DryRun: o.DryRun}
	var damage *lease.DamagedError
	switch err := lease.Check(path); {
	case err == nil:
		return rep, nil
	case errors.Is(err, os.ErrNotExist):
		rep.Damage = "there is no lease store"
	case errors.As(err, &damage):
		rep.Damage = damage.Why
	default:
		return nil, err
	}
	var err error
	if rep.Leases, rep.Unreadable, err = RuncLeases(ctx, o.Runc, o.Roots, stateDir); err != nil {
		return nil, err
	}
	ho := holdersOptions{nomadAddr: NomadOff}
	for _, opt := range o.Holder {
		opt(&ho)
	}
	if ho.nomadAddr != NomadOff {
		if rep.Nomad, rep.NomadNote, err = nomadHolders(ctx, ho.nomadAddr, ho.nomadExplicit); err != nil {
			return nil, err
		}
	}
	if o.DryRun {
		return rep, nil
	}
	aside, skipped, err := lease.Rebuild(ctx, path, rep.Leases)
	if err != nil {
		return nil, err
	}
	rep.Aside, rep.Rebuilt = aside, true
	if skipped != nil {
		rep.Skipped = strings.Split(skipped.Error(), "\n")
	}
	return rep, nil
}

// runcContainer is what runc list --format json says of a container.
type runcContainer struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	Bundle string `json:"bundle"`
}

// RuncLeases returns the leases gpumux-runtime took on the node of
// stateDir for the containers runc (binary runc) knows under roots, as
// their bundles record them: a spec that gpumux-runtime prepared has
// GPUMUX_SHARES, the shares it leased, in its process env, and
// gpumux-runtime's poststop hook, which releases them, or the bundle
// LeasedMarker of stateDir (gpumux agent releases them).
// Containers whose spec cannot be read are listed in unreadable, with why.
// A root runc cannot list is an error.
func RuncLeases(ctx context.Context, runc string, roots []string, stateDir string) (leases []lease.Record, unreadable []string, err error) {
	if runc == "" {
		runc = "runc"
	}
	leases = []lease.Record{}
	for _, root := range roots {
		out, err := exec.CommandContext(ctx, runc, "--root", root, "list", "--format", "json").Output()
		if err != nil {
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				err = fmt.Errorf("%w: %s", err, strings.TrimSpace(string(exit.Stderr)))
			}
			return nil, nil, fmt.Errorf("%s --root %s list: %w", runc, root, err)
		}
		var list []runcContainer
		if err := json.Unmarshal(out, &list); err != nil {
			return nil, nil, fmt.Errorf("%s --root %s list: %w", runc, root, err)
		}
		for _, c := range list {
			ids, err := leasedIn(c.Bundle, stateDir)
			if err != nil {
				unreadable = append(unreadable, fmt.Sprintf("%s (runc root %s): %v", c.ID, root, err))
				continue
			}
			if len(ids) > 0 {
				leases = append(leases, lease.Record{Version: lease.RecordVersion, Container: c.ID, Shares: ids, Bundle: c.Bundle, Root: root})
			}
		}
	}
	sort.Slice(leases, func(i, j int) bool { return leases[i].Container < leases[j].Container })
	return leases, unreadable, nil
}

// LeasedMarker is the file gpumux agent writes into the bundle of a
// container whose shares it gives back when runc deletes it, not by a
// poststop hook: Repair finds the containers gpumux leased shares for by
// either. It holds the node's state directory. A file in the bundle, not
// an annotation of the spec: a container's user sets annotations (docker
// run --annotation, a pod's), never the bundle's files, nor its hooks.
const LeasedMarker = "gpumux-leased"

// LeasedBy says whether bundle's LeasedMarker names stateDir.
func LeasedBy(bundle, stateDir string) bool {
	b, err := os.ReadFile(filepath.Join(bundle, LeasedMarker))
	return err == nil && filepath.Clean(string(b)) == filepath.Clean(stateDir)
}

// leasedIn returns the shares a bundle's spec says gpumux-runtime leased
// for it on the node of stateDir: its GPUMUX_SHARES, when the spec has
// gpumux-runtime's poststop hook or the bundle LeasedMarker of stateDir (a
// spec with GPUMUX_SHARES but neither asks for shares, or carries a Nomad
// reservation without gpumux-runtime: no lease of its own).
func leasedIn(bundle, stateDir string) ([]string, error) {
	raw, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		return nil, err
	}
	var spec specs.Spec
	if err := json.Unmarshal(raw, &spec); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(bundle, "config.json"), err)
	}
	marked := LeasedBy(bundle, stateDir)
	if spec.Process == nil || !marked && (spec.Hooks == nil || !slices.ContainsFunc(spec.Hooks.Poststop, isReleaseHook)) {
		return nil, nil
	}
	var ids []string
	for _, kv := range spec.Process.Env {
		if v, ok := strings.CutPrefix(kv, share.EnvShares+"="); ok {
			for _, id := range strings.Split(v, ",") {
				if id = strings.TrimSpace(id); id != "" {
					ids = append(ids, id)
				}
			}
			break // the first one, as getenv reads it
		}
	}
	sort.Strings(ids)
	return slices.Compact(ids), nil
}

// isReleaseHook reports whether h is gpumux-runtime's poststop hook, which
// it adds to the specs it prepares ("gpumux-runtime hook poststop", see
// ociruntime.HookPoststop).
func isReleaseHook(h specs.Hook) bool {
	n := len(h.Args)
	return n >= 2 && h.Args[n-2] == "hook" && h.Args[n-1] == "poststop"
}
