package cli

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpumux/gpumux/node"
)

const repairHelp = `
Rebuilds the node's lease store (leases.db in the state directory) when it
is damaged or missing, from what still runs: every container runc knows
(under --runc-root, by default runc's, containerd's and Docker's state
directories that exist) whose spec gpumux-runtime prepared gets back the
shares its GPUMUX_SHARES names. The damaged file is kept beside the store
(leases.db.damaged-<time>) and named in the output. Shares that live Nomad
allocations hold are listed (ask the agent with --nomad): Nomad keeps them
itself. Reservations the Nomad plugin made for tasks that had not started
yet are lost with the damaged file: such a task's container is refused at
start, and gets a new reservation when Nomad restarts the task (nomad alloc
restart). A sound store is left as it is.

--dry-run prints what repair would do and changes nothing. -o json (or
yaml) prints the report as one document (docs/cli.md); -o wide is the table.

Exit codes: 0 the store is sound or was rebuilt, 1 error (runc or Nomad
could not be asked, the store could not be replaced, or two containers
name one share: the store is rebuilt without the later one), 2 bad flags.`

// repairOptions are gpumux repair's flags.
type repairOptions struct {
	node   nodeFlags
	dryRun bool
	runc   string
	roots  []string
	nomad  *string
	output *string
}

// RepairOutput is what gpumux repair -o json prints.
type RepairOutput struct {
	Store string `json:"store"` // the lease store's file
	// Damage is why the store needs rebuilding; "" when it is sound.
	Damage    string   `json:"damage,omitempty"`
	RuncRoots []string `json:"runc_roots"` // where runc was asked
	// Leases are those of the containers that still run: what the rebuilt
	// store holds.
	Leases     []RepairLease `json:"leases"`
	Unreadable []string      `json:"unreadable,omitempty"`
	// Nomad are the shares live Nomad allocations hold: Nomad keeps them
	// itself, so they are reported, not recorded.
	Nomad     []HeldShare `json:"nomad,omitempty"`
	NomadNote string      `json:"nomad_note,omitempty"`
	Aside     string      `json:"aside,omitempty"` // where the damaged file was kept
	Skipped   []string    `json:"skipped,omitempty"`
	DryRun    bool        `json:"dry_run"`
	Rebuilt   bool        `json:"rebuilt"`
}

// RepairLease is a container that holds shares.
type RepairLease struct {
	Container string   `json:"container"`
	Shares    []string `json:"shares"`
	RuncRoot  string   `json:"runc_root"`
}

// repairOutput puts a repair report in its output form.
func repairOutput(rep *node.RepairReport, roots []string) *RepairOutput {
	out := &RepairOutput{Store: rep.Store, Damage: rep.Damage, RuncRoots: append([]string{}, roots...), Leases: []RepairLease{},
		Unreadable: rep.Unreadable, NomadNote: rep.NomadNote, Aside: rep.Aside, Skipped: rep.Skipped, DryRun: rep.DryRun, Rebuilt: rep.Rebuilt}
	for _, r := range rep.Leases {
		out.Leases = append(out.Leases, RepairLease{Container: r.Container, Shares: r.Shares, RuncRoot: r.Root})
	}
	for _, id := range slices.Sorted(maps.Keys(rep.Nomad)) {
		out.Nomad = append(out.Nomad, HeldShare{Share: id, HeldBy: []string{rep.Nomad[id]}})
	}
	return out
}

func newRepairCmd(stdout, stderr io.Writer) *cobra.Command {
	var o repairOptions
	cmd := leaf("repair [--dry-run]", "rebuild a damaged lease store from the containers that still run", repairHelp,
		func(ctx context.Context) int { return runRepair(ctx, &o, stdout, stderr) })
	o.node.register(cmd)
	fs := cmd.Flags()
	fs.BoolVar(&o.dryRun, "dry-run", false, "print what repair would do and change nothing")
	fs.StringVar(&o.runc, "runc", envOr("GPUMUX_RUNC", "runc"), "runc `BINARY` asked which containers run (env GPUMUX_RUNC)")
	fs.StringArrayVar(&o.roots, "runc-root", nil, "runc state `DIR` (runc --root) to look in; may be repeated (default: those of "+strings.Join(node.RuncRootGlobs, ", ")+" that exist)")
	cmd.MarkFlagDirname("runc-root")
	o.nomad = nomadFlag(fs, "shares")
	o.output = outputFlag(cmd)
	return cmd
}

func runRepair(ctx context.Context, o *repairOptions, stdout, stderr io.Writer) int {
	if !checkFormat("repair", *o.output, stderr) {
		return ExitUsage
	}
	cfg, err := o.node.config()
	if err != nil {
		fmt.Fprintf(stderr, "gpumux repair: %v\n", err)
		return ExitError
	}
	roots := o.roots
	if len(roots) == 0 {
		roots = node.DefaultRuncRoots()
	}
	rep, err := node.Repair(ctx, cfg.StateDir, node.RepairOptions{
		Runc:   o.runc,
		Roots:  roots,
		Holder: []node.HoldersOption{askNomad(*o.nomad)},
		DryRun: o.dryRun,
	})
	if err != nil {
		fmt.Fprintf(stderr, "gpumux repair: %v\n", err)
		return ExitError
	}
	if structured(*o.output) {
		if err := writeData(stdout, *o.output, repairOutput(rep, roots)); err != nil {
			fmt.Fprintf(stderr, "gpumux repair: %v\n", err)
			return ExitError
		}
	} else {
		printRepair(stdout, rep, roots)
	}
	if len(rep.Skipped) > 0 {
		return ExitError
	}
	return ExitOK
}

func printRepair(w io.Writer, rep *node.RepairReport, roots []string) {
	if rep.Damage == "" {
		fmt.Fprintf(w, "The lease store %s is sound; nothing to repair.\n", rep.Store)
		return
	}
	fmt.Fprintf(w, "The lease store %s needs rebuilding: %s.\n", rep.Store, rep.Damage)
	if len(roots) == 0 {
		roots = []string{"none found"}
	}
	fmt.Fprintf(w, "Containers runc knows (runc roots: %s):\n", strings.Join(roots, ", "))
	if len(rep.Leases) == 0 {
		fmt.Fprintln(w, "  none prepared by gpumux-runtime")
	}
	shares := 0
	for _, r := range rep.Leases {
		fmt.Fprintf(w, "  %s holds %s (runc root %s)\n", r.Container, strings.Join(r.Shares, ", "), r.Root)
		shares += len(r.Shares)
	}
	for _, u := range rep.Unreadable {
		fmt.Fprintf(w, "  warning: cannot tell what %s holds\n", u)
	}
	if rep.NomadNote != "" {
		fmt.Fprintf(w, "Nomad: %s\n", rep.NomadNote)
	}
	if len(rep.Nomad) > 0 {
		fmt.Fprintln(w, "Held by live Nomad allocations (Nomad keeps these itself; not leases):")
		for _, id := range slices.Sorted(maps.Keys(rep.Nomad)) {
			fmt.Fprintf(w, "  %s: %s\n", id, rep.Nomad[id])
		}
	}
	if rep.DryRun {
		fmt.Fprintf(w, "Would keep the damaged file beside the store and rebuild it with %d shares of %d containers. Nothing changed (--dry-run).\n", shares, len(rep.Leases))
		return
	}
	for _, s := range rep.Skipped {
		fmt.Fprintf(w, "Not recorded: %s\n", s)
	}
	if rep.Aside != "" {
		fmt.Fprintf(w, "Kept the damaged file as %s.\n", rep.Aside)
	}
	fmt.Fprintf(w, "Rebuilt %s from %d containers (%d shares)", rep.Store, len(rep.Leases), shares)
	if len(rep.Skipped) > 0 {
		fmt.Fprintf(w, ", less the %d not recorded above", len(rep.Skipped))
	}
	fmt.Fprintln(w, ".")
}
