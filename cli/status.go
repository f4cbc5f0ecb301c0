package cli

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gpumux/gpumux/gpu"
	"github.com/gpumux/gpumux/node"
	"github.com/gpumux/gpumux/share"
)

const statusHelp = `
Shows the node's GPUs with their memory use and utilization, their MIG
instances, the shares the node offers under its layout (every GPU whole,
unless --config gives a layout), remote shares among them when the config
has a remote block (the pool is asked over the network; --remote=false
leaves them out), and who holds shares: containers of gpumux-runtime (the
lease store) and live Nomad allocations (asked of the Nomad agent, see
--nomad). Changes nothing.

-o wide adds each GPU's PCI bus ID, temperature and power draw, each
group's model, profile and fault isolation, and a line per share with its
device and holders. -o json and -o yaml print the same as one document
(docs/cli.md, "gpumux status").

Exit codes: 0 ok, 1 error (config, GPUs, lease store or Nomad agent
unreadable), 2 bad flags.`

// Status is what `gpumux status -o json` prints.
type Status struct {
	DriverVersion string      `json:"driver_version"`
	CUDAVersion   string      `json:"cuda_version"`
	GPUs          []StatusGPU `json:"gpus"`
	// IgnoredGPUs are the indexes of GPUs the config leaves alone.
	IgnoredGPUs []int         `json:"ignored_gpus,omitempty"`
	Groups      []StatusGroup `json:"groups"`
	// Held are the shares someone holds, in share ID order.
	Held []HeldShare `json:"held"`
}

// StatusGPU is one GPU of gpumux status.
type StatusGPU struct {
	Index             int          `json:"index"`
	UUID              string       `json:"uuid"`
	Model             string       `json:"model"`
	PCIBusID          string       `json:"pci_bus_id"`
	MemoryMiB         uint64       `json:"memory_mib"`
	SMCount           int          `json:"sm_count"`
	ComputeCapability string       `json:"compute_capability"`
	MIGCapable        bool         `json:"mig_capable"`
	MIGEnabled        bool         `json:"mig_enabled"`
	MIGPendingEnabled bool         `json:"mig_pending_enabled"`
	Usage             *DeviceUsage `json:"usage,omitempty"`
	MIGInstances      []StatusMIG  `json:"mig_instances"`
	// MIGIncomplete are GPU instances without a compute instance, left by
	// an interrupted change: gpumux mig apply removes them.
	MIGIncomplete []StatusMIG `json:"mig_incomplete,omitempty"`
}

// StatusMIG is one MIG instance (or a GPU instance without a compute
// instance: no UUID, ci_id -1).
type StatusMIG struct {
	GIID       int           `json:"gi_id"`
	CIID       int           `json:"ci_id"`
	UUID       string        `json:"uuid,omitempty"`
	Profile    string        `json:"profile"`
	Placement  gpu.Placement `json:"placement"`
	MemoryMiB  uint64        `json:"memory_mib"`
	SMCount    int           `json:"sm_count"`
	GICapMinor int           `json:"gi_cap_minor"`
	CICapMinor int           `json:"ci_cap_minor"`
	Usage      *DeviceUsage  `json:"usage,omitempty"`
}

// DeviceUsage is what a GPU or MIG instance uses now; what NVML does not
// report for the device (utilization of a MIG instance, say) is left out.
type DeviceUsage struct {
	MemoryUsedMiB     uint64   `json:"memory_used_mib"`
	MemoryTotalMiB    uint64   `json:"memory_total_mib"`
	GPUUtilPercent    *uint32  `json:"gpu_util_percent,omitempty"`
	MemoryUtilPercent *uint32  `json:"memory_util_percent,omitempty"`
	TemperatureC      *uint32  `json:"temperature_c,omitempty"`
	PowerWatts        *float64 `json:"power_watts,omitempty"`
}

// StatusGroup is one group of like shares.
type StatusGroup struct {
	Name            string        `json:"name"` // the device name is nvidia/gpu/<name>
	Model           string        `json:"model"`
	Mechanism       string        `json:"mechanism"`
	Profile         string        `json:"profile,omitempty"`
	MemoryMiB       uint64        `json:"memory_mib"` // per share
	ComputePercent  int           `json:"compute_percent"`
	SMCount         int           `json:"sm_count"`
	MemoryIsolation string        `json:"memory_isolation"`
	FaultIsolation  bool          `json:"fault_isolation"`
	Held            int           `json:"held"` // how many of its shares someone holds
	Shares          []StatusShare `json:"shares"`
}

// StatusShare is one share of a group.
type StatusShare struct {
	ID      string `json:"id"`
	GPUUUID string `json:"gpu_uuid"` // for a remote share, the server's GPU
	MIGUUID string `json:"mig_uuid,omitempty"`
	// RemoteAddr is the server of a remote share.
	RemoteAddr string   `json:"remote_addr,omitempty"`
	HeldBy     []string `json:"held_by,omitempty"`
}

// HeldShare is a share and who holds it: "container <id>" (a lease of
// gpumux-runtime) or "Nomad allocation <id> (job <job>, task <task>)".
type HeldShare struct {
	Share  string   `json:"share"`
	HeldBy []string `json:"held_by"`
}

// statusOptions are gpumux status's flags.
type statusOptions struct {
	node   nodeFlags
	output *string
	nomad  *string
	remote *bool
}

func newStatusCmd(stdout, stderr io.Writer) *cobra.Command {
	var o statusOptions
	cmd := leaf("status", "GPUs, their use, MIG instances, the shares the node offers and who holds them", statusHelp, func(ctx context.Context) int {
		return runStatus(ctx, &o, stdout, stderr)
	})
	o.node.register(cmd)
	o.output = outputFlag(cmd)
	o.nomad = nomadFlag(cmd.Flags(), "shares")
	o.remote = cmd.Flags().Bool("remote", true, "show the remote shares of the config's remote block, asking the pool over the network")
	return cmd
}

func runStatus(ctx context.Context, o *statusOptions, stdout, stderr io.Writer) int {
	if !checkFormat("status", *o.output, stderr) {
		return ExitUsage
	}
	st, note, err := status(ctx, o)
	if err != nil {
		fmt.Fprintf(stderr, "gpumux status: %v\n", err)
		return ExitError
	}
	if note != "" {
		fmt.Fprintf(stderr, "gpumux status: note: %s\n", note)
	}
	if structured(*o.output) {
		if err := writeData(stdout, *o.output, st); err != nil {
			fmt.Fprintf(stderr, "gpumux status: %v\n", err)
			return ExitError
		}
		return ExitOK
	}
	printStatus(stdout, st, *o.output == FormatWide, colorsFor(stdout))
	return ExitOK
}

// status reads the node; the note says why Nomad was not asked, if it was
// not.
func status(ctx context.Context, o *statusOptions) (*Status, string, error) {
	n, err := o.node.open()
	if err != nil {
		return nil, "", err
	}
	defer n.Close()
	inv, err := n.Host().Inventory(ctx)
	if err != nil {
		return nil, "", err
	}
	usage, err := n.Host().Usage(ctx)
	if err != nil {
		return nil, "", fmt.Errorf("GPU usage: %w", err)
	}
	var opts []node.CatalogOption
	if !*o.remote {
		opts = append(opts, node.Local())
	}
	c, err := n.Catalog(ctx, opts...)
	if err != nil {
		return nil, "", err
	}
	h, err := n.Holders(ctx, askNomad(*o.nomad))
	if err != nil {
		return nil, "", err
	}
	return statusOf(inv, usage, c, h), h.Note, nil
}

// statusOf puts what status read into its output form.
func statusOf(inv *gpu.Node, usage map[string]gpu.Usage, c *share.Catalog, h *node.Holders) *Status {
	st := &Status{DriverVersion: inv.DriverVersion, CUDAVersion: inv.CUDAVersion, GPUs: []StatusGPU{}, IgnoredGPUs: inv.Ignored, Groups: []StatusGroup{}, Held: []HeldShare{}}
	for _, g := range inv.GPUs {
		sg := StatusGPU{
			Index: g.Index, UUID: g.UUID, Model: g.Model, PCIBusID: g.PCIBusID, MemoryMiB: g.MemoryMiB,
			SMCount: g.SMCount, ComputeCapability: g.ComputeCapability, MIGCapable: g.MIGCapable,
			MIGEnabled: g.MIGEnabled, MIGPendingEnabled: g.MIGPending, Usage: usageOf(usage, g.UUID),
			MIGInstances: []StatusMIG{},
		}
		for _, m := range g.MIGInstances {
			sg.MIGInstances = append(sg.MIGInstances, migOf(m, usageOf(usage, m.UUID)))
		}
		for _, m := range g.MIGIncomplete {
			sg.MIGIncomplete = append(sg.MIGIncomplete, migOf(m, nil))
		}
		st.GPUs = append(st.GPUs, sg)
	}
	for _, g := range c.Groups {
		sg := StatusGroup{
			Name: g.Name, Model: g.Model, Mechanism: string(g.Mechanism), Profile: g.Profile,
			MemoryMiB: g.Attrs.MemoryMiB, ComputePercent: g.Attrs.ComputePercent, SMCount: g.Attrs.SMCount,
			MemoryIsolation: string(g.Attrs.MemoryIsolation), FaultIsolation: g.Attrs.FaultIsolation,
			Shares: []StatusShare{},
		}
		for _, s := range g.Shares {
			ss := StatusShare{ID: s.ID, GPUUUID: s.GPU.UUID, HeldBy: h.Shares[s.ID]}
			if s.MIG != nil {
				ss.MIGUUID = s.MIG.UUID
			}
			if s.Remote != nil {
				ss.RemoteAddr = s.Remote.Addr
			}
			if len(ss.HeldBy) > 0 {
				sg.Held++
			}
			sg.Shares = append(sg.Shares, ss)
		}
		st.Groups = append(st.Groups, sg)
	}
	for _, id := range slices.Sorted(maps.Keys(h.Shares)) {
		st.Held = append(st.Held, HeldShare{Share: id, HeldBy: h.Shares[id]})
	}
	return st
}

func migOf(m gpu.MIGInstance, u *DeviceUsage) StatusMIG {
	return StatusMIG{GIID: m.GIID, CIID: m.CIID, UUID: m.UUID, Profile: m.Profile, Placement: m.Placement,
		MemoryMiB: m.MemoryMiB, SMCount: m.SMCount, GICapMinor: m.GICapMinor, CICapMinor: m.CICapMinor, Usage: u}
}

// usageOf is a device's usage, nil where NVML reported none.
func usageOf(usage map[string]gpu.Usage, uuid string) *DeviceUsage {
	u, ok := usage[uuid]
	if !ok {
		return nil
	}
	return &DeviceUsage{MemoryUsedMiB: u.MemoryUsedMiB, MemoryTotalMiB: u.MemoryTotalMiB, GPUUtilPercent: u.GPUUtilPercent,
		MemoryUtilPercent: u.MemoryUtilPercent, TemperatureC: u.TemperatureC, PowerWatts: u.PowerWatts}
}

// Table cells of usage; "-" where NVML reports nothing.
func (u *DeviceUsage) used() string {
	if u == nil {
		return "-"
	}
	return fmt.Sprintf("%d MiB", u.MemoryUsedMiB)
}

func (u *DeviceUsage) util() string {
	if u == nil || u.GPUUtilPercent == nil {
		return "-"
	}
	return fmt.Sprintf("%d%%", *u.GPUUtilPercent)
}

func (u *DeviceUsage) temperature() string {
	if u == nil || u.TemperatureC == nil {
		return "-"
	}
	return fmt.Sprintf("%d C", *u.TemperatureC)
}

func (u *DeviceUsage) power() string {
	if u == nil || u.PowerWatts == nil {
		return "-"
	}
	return fmt.Sprintf("%.0f W", *u.PowerWatts)
}

// printStatus writes the status as tables; wide adds columns and a line per
// share. Only the last column of a row is painted, so that colours do not
// upset the alignment.
func printStatus(w io.Writer, st *Status, wide bool, c colors) {
	fmt.Fprintf(w, "Driver %s, CUDA %s, %d GPUs\n\n", st.DriverVersion, st.CUDAVersion, len(st.GPUs))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	cols := "GPU (└ GI/CI)\tMODEL\tUUID\tMEMORY\tUSED\tUTIL\tSMS\tCC"
	if wide {
		cols += "\tPCI BUS ID\tTEMP\tPOWER"
	}
	fmt.Fprintln(tw, cols+"\tMIG")
	for _, g := range st.GPUs {
		mode := "n/a"
		if g.MIGCapable {
			mode = map[bool]string{true: "enabled", false: "disabled"}[g.MIGEnabled]
		}
		extra := ""
		if wide {
			extra = fmt.Sprintf("\t%s\t%s\t%s", g.PCIBusID, g.Usage.temperature(), g.Usage.power())
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d MiB\t%s\t%s\t%d\t%s%s\t%s\n", g.Index, g.Model, g.UUID, g.MemoryMiB, g.Usage.used(), g.Usage.util(), g.SMCount, g.ComputeCapability, extra, mode)
		if wide {
			extra = "\t\t\t"
		}
		for _, m := range g.MIGInstances {
			fmt.Fprintf(tw, "└ %d/%d\t%s\t%s\t%d MiB\t%s\t\t%d\t%s\tat %s, caps %d,%d\n", m.GIID, m.CIID, m.Profile, m.UUID, m.MemoryMiB, m.Usage.used(), m.SMCount, extra, m.Placement, m.GICapMinor, m.CICapMinor)
		}
		for _, m := range g.MIGIncomplete {
			fmt.Fprintf(tw, "└ %d/-\t%s\t(no compute instance)\t%d MiB\t\t\t\t%s\tat %s, %s\n", m.GIID, m.Profile, m.MemoryMiB, extra, m.Placement, c.red("INCOMPLETE: left by an interrupted change; gpumux mig apply removes it"))
		}
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	cols = "GROUP\tMECHANISM\tSHARES\tHELD\tMEMORY/SHARE\tCOMPUTE\tSMS"
	if wide {
		cols += "\tMODEL\tPROFILE\tFAULT ISOLATION"
	}
	fmt.Fprintln(tw, cols+"\tMEMORY ISOLATION")
	for _, g := range st.Groups {
		extra := ""
		if wide {
			extra = fmt.Sprintf("\t%s\t%s\t%t", g.Model, orDash(g.Profile), g.FaultIsolation)
		}
		fmt.Fprintf(tw, "nvidia/gpu/%s\t%s\t%d\t%d\t%d MiB\t%d%%\t%d%s\t%s\n", g.Name, g.Mechanism, len(g.Shares), g.Held, g.MemoryMiB, g.ComputePercent, g.SMCount, extra, g.MemoryIsolation)
	}
	tw.Flush()
	if wide {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SHARE\tGROUP\tDEVICE\tHELD BY")
		for _, g := range st.Groups {
			for _, s := range g.Shares {
				dev := s.GPUUUID
				switch {
				case s.MIGUUID != "":
					dev = s.MIGUUID
				case s.RemoteAddr != "":
					dev = s.GPUUUID + " on " + s.RemoteAddr
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.ID, g.Name, dev, c.yellow(strings.Join(s.HeldBy, " and ")))
			}
		}
		tw.Flush()
		return
	}
	if len(st.Held) > 0 {
		fmt.Fprintln(w, "\nHeld (by containers: gpumux-runtime leases; by Nomad allocations):")
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, h := range st.Held {
			fmt.Fprintf(tw, "  %s\t%s\n", h.Share, c.yellow(strings.Join(h.HeldBy, " and ")))
		}
		tw.Flush()
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
