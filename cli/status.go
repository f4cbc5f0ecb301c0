package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/gpumux/gpumux/gpu"
	"github.com/gpumux/gpumux/node"
	"github.com/gpumux/gpumux/share"
)

// Status is what `gpumux status` reports.
type Status struct {
	Node   *gpu.Node     `json:"node"`
	Groups []share.Group `json:"groups"`
	// Held maps the shares containers hold (gpumux-runtime's leases) to the
	// container holding each.
	Held map[string]string `json:"held,omitempty"`
}

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	var nf nodeFlags
	nf.register(fs)
	output := fs.String("output", "table", "output `FORMAT`: table or json")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: gpumux status [flags]\n\nShows the node's GPUs, their MIG instances, and the shares the node offers\nunder its layout (every GPU whole, unless --config gives a layout).\nChanges nothing.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args, stderr); !ok {
		return code
	}
	if *output != "table" && *output != "json" {
		fmt.Fprintf(stderr, "gpumux status: --output %q: want table or json\n", *output)
		return ExitUsage
	}
	st, err := status(ctx, &nf)
	if err != nil {
		fmt.Fprintf(stderr, "gpumux status: %v\n", err)
		return ExitError
	}
	if *output == "json" {
		if err := writeJSON(stdout, st); err != nil {
			fmt.Fprintf(stderr, "gpumux status: %v\n", err)
			return ExitError
		}
		return ExitOK
	}
	printStatus(stdout, st)
	return ExitOK
}

func status(ctx context.Context, nf *nodeFlags) (*Status, error) {
	n, err := nf.open()
	if err != nil {
		return nil, err
	}
	defer n.Close()
	inv, err := n.Host().Inventory(ctx)
	if err != nil {
		return nil, err
	}
	// Remote shares are not shown: a look at the pool goes over the network.
	c, err := n.Catalog(ctx, node.Local())
	if err != nil {
		return nil, err
	}
	h, err := n.Holders(ctx)
	if err != nil {
		return nil, err
	}
	held := map[string]string{}
	for id := range h.Shares {
		held[id] = strings.TrimPrefix(h.Of(id), "container ")
	}
	return &Status{Node: inv, Groups: c.Groups, Held: held}, nil
}

func printStatus(w io.Writer, st *Status) {
	fmt.Fprintf(w, "Driver %s, CUDA %s, %d GPUs\n\n", st.Node.DriverVersion, st.Node.CUDAVersion, len(st.Node.GPUs))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GPU (└ GI/CI)\tMODEL\tUUID\tMEMORY\tSMS\tCC\tMIG")
	for _, g := range st.Node.GPUs {
		mode := "n/a"
		if g.MIGCapable {
			mode = map[bool]string{true: "enabled", false: "disabled"}[g.MIGEnabled]
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d MiB\t%d\t%s\t%s\n", g.Index, g.Model, g.UUID, g.MemoryMiB, g.SMCount, g.ComputeCapability, mode)
		for _, m := range g.MIGInstances {
			fmt.Fprintf(tw, "└ %d/%d\t%s\t%s\t%d MiB\t%d\t\tat %s, caps %d,%d\n", m.GIID, m.CIID, m.Profile, m.UUID, m.MemoryMiB, m.SMCount, m.Placement, m.GICapMinor, m.CICapMinor)
		}
		for _, m := range g.MIGIncomplete {
			fmt.Fprintf(tw, "└ %d/-\t%s\t(no compute instance)\t%d MiB\t\t\tat %s, INCOMPLETE: left by an interrupted change; gpumux mig apply removes it\n", m.GIID, m.Profile, m.MemoryMiB, m.Placement)
		}
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tMECHANISM\tSHARES\tHELD\tMEMORY/SHARE\tCOMPUTE\tSMS\tMEMORY ISOLATION")
	for _, g := range st.Groups {
		held := 0
		for _, s := range g.Shares {
			if st.Held[s.ID] != "" {
				held++
			}
		}
		fmt.Fprintf(tw, "nvidia/gpu/%s\t%s\t%d\t%d\t%d MiB\t%d%%\t%d\t%s\n", g.Name, g.Mechanism, len(g.Shares), held, g.Attrs.MemoryMiB, g.Attrs.ComputePercent, g.Attrs.SMCount, g.Attrs.MemoryIsolation)
	}
	tw.Flush()
	if len(st.Held) > 0 {
		fmt.Fprintln(w, "\nHeld by containers (gpumux-runtime leases; Nomad's allocations are in nomad alloc status):")
		ids := make([]string, 0, len(st.Held))
		for id := range st.Held {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for _, id := range ids {
			fmt.Fprintf(w, "  %s  %s\n", id, st.Held[id])
		}
	}
}
