package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/spf13/cobra"

	"github.com/gpumux/gpumux/gpu"
	"github.com/gpumux/gpumux/mig"
	"github.com/gpumux/gpumux/mig/layout"
	"github.com/gpumux/gpumux/node"
)

// Exit codes of gpumux mig.
const (
	ExitDiffers = 3 // mig assert: a GPU differs from the layout
	ExitBusy    = 4 // mig apply: a GPU was refused because its MIG instances are in use
)

const migLong = `MIG layouts from a file: plan, apply and check them, export the node's.

FILE (-f) is a MIG layout in gpumux's format (version: gpumux.io/v1) or
mig-parted's (version: v1, with -c naming the entry of mig-configs).
GPUs that no rule of the layout selects are left as they are.

Exit codes:
  0  ok
  1  error
  2  bad flags or arguments
  3  assert: a GPU differs from the layout
  4  apply: a GPU was refused because its MIG instances (or, to reset it,
     the GPU) are in use: processes, a gpumux-runtime lease, a live Nomad
     allocation`

func newMIGCmd(stdout, stderr io.Writer) *cobra.Command {
	c := group("mig", "MIG layouts from a file: plan, apply and check them, export the node's",
		newMIGLayoutCmd("plan", "what apply would change; changes nothing", stdout, stderr),
		newMIGLayoutCmd("apply", "make the GPUs carry the layout", stdout, stderr),
		newMIGLayoutCmd("assert", "check that the GPUs carry the layout", stdout, stderr),
		newMIGExportCmd(stdout, stderr))
	c.Long = migLong
	return c
}

var migHelp = map[string]string{
	"plan": `For every GPU the layout selects, shows its current MIG layout, the wanted
one and what apply would do: keep, enable MIG and create, change (destroy
the instances that cannot stay, create the wanted ones at the placements
shown, keep the rest), disable MIG (destroying the instances first), or why
it cannot (no MIG support, does not fit: which profiles overlap on which
memory slots, and which instances that stay are in the way). Instances in
use are marked: apply refuses to destroy them. GPU instances without a
compute instance (left by an interrupted change) are shown to be destroyed.
In use means processes on the instance, a container of gpumux-runtime
holding it (a lease), or a live Nomad allocation holding it or a share on it
(asked of the Nomad agent, see --nomad). Changes nothing.

-o wide adds each GPU's UUID and the rule of the file that selects it;
-o json and -o yaml print the plans as one list.

Exit codes: 0 plan shown, 1 error (unreadable or invalid layout, GPUs
unreadable, Nomad agent unreadable), 2 bad flags.`,
	"apply": `Makes every GPU the layout selects carry the wanted MIG layout, GPU by GPU,
printing one line per step. A GPU that already matches is kept as it is.
Instances that can stay stay (same UUID); the others are destroyed and the
wanted ones created, after placements for all of them were found; if a step
fails, the previous instances are restored. A GPU whose change would
destroy an instance in use (processes, a gpumux-runtime lease, a live Nomad
allocation) is refused and left unchanged; the other GPUs are still
applied. MIG mode is enabled as needed. mig-enabled: false (mig-parted's
all-disabled) destroys the GPU's instances and disables MIG mode in one
step, unless an instance is in use: then the GPU is refused as above.
GPU instances without a compute instance, left by an interrupted change,
are destroyed. A change interrupted by a crash or a kill is undone by the
next apply of that GPU, which first restores the layout (MIG mode and
instances at their placements) that the interrupted one started from.

When the driver leaves a MIG mode change pending until a GPU reset, apply
reports an error that says so, unless --reset: then it resets exactly that
GPU (never one whose mode change is not pending), but only while it holds
no MIG instances, runs no process and no container or Nomad allocation holds
it, and goes on. NVML has no reset call: on real GPUs --reset says to run
nvidia-smi -r -i N; it resets simulated GPUs.

-o json (or yaml) prints, instead of the steps, one document: per GPU the
plan, the steps done, whether it was reset, the result (kept, changed,
busy, failed), its MIG layout afterwards (mode and instances with UUIDs and
placements), whether it matches the layout, and the error if any; then the
GPU indexes per result and the exit code. -o wide also prints each GPU's
MIG layout afterwards. --dry-run shows the plan (as gpumux mig plan, in the
format -o names) and changes nothing.

Exit codes: 0 every selected GPU matches the layout afterwards, 1 error (a
GPU failed or does not match afterwards; takes precedence over 4), 2 bad
flags, 4 a GPU was refused because its MIG instances (or, for a reset, the
GPU) are in use.`,
	"assert": `Checks that every GPU the layout selects carries the wanted MIG layout
(MIG mode and the number of instances of each profile; placements are not
compared), and prints the GPUs that differ (-o wide: the ones that match
too). -o json (or yaml) prints one document: whether all match, and per GPU
whether it matches and its differences (field mig-enabled or
mig-devices.<profile>, what it has, what the layout wants). Changes nothing.

Exit codes: 0 every selected GPU matches, 1 error, 2 bad flags, 3 a GPU
differs.`,
}

// migLayoutOptions are the flags of mig plan, apply and assert.
type migLayoutOptions struct {
	node          nodeFlags
	file, config  string
	output, nomad *string
	dryRun        bool
	force, reset  bool
}

// layoutFileFlags registers -f/--file, the layout file, and -c, its
// mig-parted config (mig-parted's own flags).
func layoutFileFlags(cmd *cobra.Command, file, config *string, fileUsage, configDefault string) {
	cmd.Flags().StringVarP(file, "file", "f", "", fileUsage)
	cmd.Flags().StringVarP(config, "selected-config", "c", configDefault, "the `CONFIG` of a mig-parted file: its entry of mig-configs")
	cmd.MarkFlagFilename("file", "yaml", "yml", "json")
}

func newMIGLayoutCmd(verb, short string, stdout, stderr io.Writer) *cobra.Command {
	var o migLayoutOptions
	cmd := leaf(verb, short, migHelp[verb], func(ctx context.Context) int { return runMIGLayoutCmd(ctx, verb, &o, stdout, stderr) })
	cmd.Use = verb + " -f FILE [-c CONFIG]"
	o.node.register(cmd)
	layoutFileFlags(cmd, &o.file, &o.config, "MIG layout `FILE` (gpumux's format or mig-parted's); required", "")
	cmd.Flags().Lookup("selected-config").Usage += "; may be left out when the file has only one"
	o.output = outputFlag(cmd)
	o.nomad = new(string)
	if verb != "assert" {
		o.nomad = nomadFlag(cmd.Flags(), "MIG instances")
	}
	if verb == "apply" {
		cmd.Flags().BoolVar(&o.dryRun, "dry-run", false, "show the plan and change nothing")
		cmd.Flags().BoolVar(&o.force, "force", false, "destroy MIG instances that containers or Nomad allocations hold but run nothing on; instances with processes are never destroyed")
		cmd.Flags().BoolVar(&o.reset, "reset", false, "reset a GPU whose MIG mode change waits for a reset, and only that GPU, when nothing uses it (simulated GPUs; on real ones it says to run nvidia-smi -r)")
	}
	return cmd
}

func runMIGLayoutCmd(ctx context.Context, cmd string, o *migLayoutOptions, stdout, stderr io.Writer) int {
	if o.file == "" {
		fmt.Fprintf(stderr, "gpumux mig %s: -f FILE is required\n", cmd)
		return ExitUsage
	}
	if !checkFormat("mig "+cmd, *o.output, stderr) {
		return ExitUsage
	}
	format := *o.output
	nomadAddr := *o.nomad
	if nomadAddr == node.NomadOff || cmd == "assert" {
		nomadAddr = node.NomadOff // assert compares layouts; who holds what does not matter
	}
	l, err := readLayout(o.file, o.config)
	if err != nil {
		fmt.Fprintf(stderr, "gpumux mig %s: %v\n", cmd, err)
		return ExitError
	}
	n, err := o.node.open()
	if err != nil {
		fmt.Fprintf(stderr, "gpumux mig %s: %v\n", cmd, err)
		return ExitError
	}
	defer n.Close()
	h := n.Host()
	holders, err := n.Holders(ctx, node.AskNomad(nomadAddr, *o.nomad != ""))
	if err != nil {
		fmt.Fprintf(stderr, "gpumux mig %s: %v\n", cmd, err)
		return ExitError
	}
	if holders.Note != "" {
		fmt.Fprintf(stderr, "gpumux mig %s: note: %s\n", cmd, holders.Note)
	}
	held := holders.Device
	if gh, ok := h.(*gpu.Host); ok && gh.Simulated() != nil && l.PCIID == nil {
		l.PCIID = nvmlPCIID(gh.Simulated().NVML())
	}
	plans, _, err := migPlan(ctx, h, l, held, o.force)
	if err != nil {
		fmt.Fprintf(stderr, "gpumux mig %s: %v\n", cmd, err)
		return ExitError
	}
	if len(plans) == 0 && cmd != "plan" {
		// Not an error: one file may serve nodes of different shapes. But
		// an exported file names GPUs by UUID, so on another node it
		// selects nothing; say so.
		fmt.Fprintf(stderr, "gpumux mig %s: note: %s selects no GPU of this node\n", cmd, o.file)
	}
	switch {
	case (cmd == "plan" || cmd == "apply" && o.dryRun) && structured(format):
		if err := writeData(stdout, format, plans); err != nil {
			fmt.Fprintf(stderr, "gpumux mig %s: %v\n", cmd, err)
			return ExitError
		}
		return ExitOK
	case cmd == "plan" || cmd == "apply" && o.dryRun:
		printPlan(stdout, plans, format == FormatWide, colorsFor(stdout))
		return ExitOK
	case cmd == "assert":
		return migAssert(plans, format, stdout, stderr)
	}
	opts := []mig.ApplyOption{mig.WithHeld(held), mig.WithCheckpoint(mig.CheckpointDir(n.Config().StateDir))}
	if o.force {
		opts = append(opts, mig.WithForce())
	}
	if o.reset {
		opts = append(opts, mig.WithReset())
	}
	res := migApply(ctx, h, l, plans, held, o.force, opts, structured(format), stdout, stderr)
	switch {
	case structured(format):
		if err := writeData(stdout, format, res); err != nil {
			fmt.Fprintf(stderr, "gpumux mig apply: %v\n", err)
			return ExitError
		}
	case format == FormatWide:
		printLayouts(stdout, res)
	}
	return res.ExitCode
}

// printLayouts writes each applied GPU's MIG layout afterwards (-o wide).
func printLayouts(w io.Writer, res *ApplyResult) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GPU\tRESULT\tMATCHES\tMIG\tINSTANCES")
	for _, g := range res.GPUs {
		insts := make([]string, len(g.Layout.Instances))
		for i, inst := range g.Layout.Instances {
			insts[i] = fmt.Sprintf("%s at %s (%s)", inst.Profile, inst.Placement, inst.UUID)
		}
		mode := map[bool]string{true: "enabled", false: "disabled"}[g.Layout.MIGEnabled]
		if g.Layout.MIGPendingEnabled != g.Layout.MIGEnabled {
			mode += " (reset pending)"
		}
		fmt.Fprintf(tw, "%d\t%s\t%t\t%s\t%s\n", g.Index, g.Result, g.Matches, mode, orDash(strings.Join(insts, ", ")))
	}
	tw.Flush()
}

func readLayout(file, config string) (*layout.Layout, error) {
	src, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	return layout.Parse(file, src, config)
}

// nvmlPCIID reads a GPU's PCI ids through NVML: device filters on a simulated
// node, whose bus ids are not in sysfs.
func nvmlPCIID(lib nvml.Interface) func(g *gpu.GPU) (layout.DeviceID, error) {
	return func(g *gpu.GPU) (layout.DeviceID, error) {
		dev, ret := lib.DeviceGetHandleByIndex(g.Index)
		if ret != nvml.SUCCESS {
			return layout.DeviceID{}, fmt.Errorf("GPU %d: %s", g.Index, nvml.ErrorString(ret))
		}
		pci, ret := dev.GetPciInfo()
		if ret != nvml.SUCCESS {
			return layout.DeviceID{}, fmt.Errorf("GPU %d: PCI info: %s", g.Index, nvml.ErrorString(ret))
		}
		return layout.DeviceID{ID: pci.PciDeviceId, Subsystem: pci.PciSubSystemId}, nil
	}
}

// Plan actions.
const (
	ActionKeep    = "keep"
	ActionEnable  = "enable"  // enable MIG mode, then create
	ActionCreate  = "create"  // MIG on, no instances: create
	ActionChange  = "change"  // destroy the instances that cannot stay, then create
	ActionDisable = "disable" // disable MIG mode
	ActionRefuse  = "refuse"  // cannot be applied; Reason says why
)

// GPUPlan is what the layout wants of one GPU and what apply would do.
type GPUPlan struct {
	Index      int            `json:"index"`
	UUID       string         `json:"uuid"`
	Model      string         `json:"model"`
	MIGEnabled bool           `json:"mig_enabled"`
	Current    map[string]int `json:"current"` // profile → count
	WantMIG    bool           `json:"want_mig_enabled"`
	Want       map[string]int `json:"want"`
	// Incomplete are the GPU's GPU instances without a compute instance
	// ("1g.18gb at 6:1"), left by an interrupted change: apply destroys them.
	Incomplete []string          `json:"incomplete,omitempty"`
	Rule       string            `json:"rule"` // file:line of the rule
	Action     string            `json:"action"`
	Keep       []PlannedInstance `json:"keep,omitempty"` // instances that stay, untouched
	Destroy    []PlannedInstance `json:"destroy,omitempty"`
	Create     []PlannedInstance `json:"create,omitempty"`
	Busy       []string          `json:"busy,omitempty"` // instances in use the change would destroy: apply refuses the GPU
	Reason     string            `json:"reason,omitempty"`
}

// PlannedInstance is a MIG instance to keep, destroy or create.
type PlannedInstance struct {
	Profile   string        `json:"profile"`
	Placement gpu.Placement `json:"placement"`
	// Incomplete marks a GPU instance without a compute instance, left by
	// an interrupted change: apply destroys it.
	Incomplete bool `json:"incomplete,omitempty"`
}

func (p *GPUPlan) matches() bool { return p.Action == ActionKeep }

// migPlan resolves the layout on the node and plans each selected GPU, in
// index order. It returns the node as it read it too.
func migPlan(ctx context.Context, h mig.Host, l *layout.Layout, held func(string) string, force bool) ([]GPUPlan, *gpu.Node, error) {
	node, err := h.Inventory(ctx)
	if err != nil {
		return nil, nil, err
	}
	wants, err := l.For(node)
	if err != nil {
		return nil, nil, err
	}
	plans := []GPUPlan{}
	for i := range node.GPUs {
		g := &node.GPUs[i]
		w, ok := wants[g.Index]
		if !ok {
			continue
		}
		p := GPUPlan{
			Index: g.Index, UUID: g.UUID, Model: g.Model,
			MIGEnabled: g.MIGEnabled, Current: instanceCounts(g.MIGInstances),
			WantMIG: w.MIGEnabled, Want: nonZero(w.Devices),
		}
		for _, inst := range g.MIGIncomplete {
			p.Incomplete = append(p.Incomplete, fmt.Sprintf("%s at %s", inst.Profile, inst.Placement))
		}
		if w.Rule != nil {
			p.Rule = fmt.Sprintf("%s:%d", l.File, w.Rule.Line)
		}
		planGPU(ctx, h, g, &p, held, force)
		plans = append(plans, p)
	}
	sort.Slice(plans, func(i, j int) bool { return plans[i].Index < plans[j].Index })
	return plans, node, nil
}

func planGPU(ctx context.Context, h mig.Host, g *gpu.GPU, p *GPUPlan, held func(string) string, force bool) {
	switch {
	case !p.WantMIG && !g.MIGEnabled:
		p.Action = ActionKeep
		return
	case p.WantMIG && !g.MIGCapable:
		p.Action = ActionRefuse
		p.Reason = fmt.Sprintf("%s has no MIG support", g.Model)
		return
	case p.WantMIG && g.MIGEnabled && maps.Equal(p.Current, p.Want) && len(g.MIGIncomplete) == 0:
		p.Action = ActionKeep
		return
	}
	// In use: processes on an instance, or (unless force) a container that
	// holds it; apply treats them the same way.
	busy := map[string]bool{}
	for _, inst := range g.MIGInstances {
		if pids, err := h.Processes(ctx, inst.UUID); err == nil && len(pids) > 0 || !force && held(inst.UUID) != "" {
			busy[inst.UUID] = true
		}
	}
	isBusy := func(uuid string) bool { return busy[uuid] }
	want := p.Want
	if !p.WantMIG {
		want = map[string]int{} // MIG off: every instance goes first
	}
	plan, err := mig.PlanGPU(g, want, isBusy, false)
	if errors.Is(err, mig.ErrBusy) {
		// Show what the change would be; apply refuses it (exit 4).
		if plan, err = mig.PlanGPU(g, want, isBusy, true); err == nil {
			for _, inst := range plan.Destroy {
				if busy[inst.UUID] {
					p.Busy = append(p.Busy, fmt.Sprintf("%s (%s at %s)", inst.UUID, inst.Profile, inst.Placement))
				}
			}
		}
	}
	if err != nil {
		p.Action = ActionRefuse
		p.Reason = err.Error()
		return
	}
	for _, inst := range plan.Keep {
		p.Keep = append(p.Keep, PlannedInstance{Profile: inst.Profile, Placement: inst.Placement})
	}
	for _, inst := range plan.Destroy {
		p.Destroy = append(p.Destroy, PlannedInstance{inst.Profile, inst.Placement, inst.CIID < 0})
	}
	for _, s := range plan.Create {
		p.Create = append(p.Create, PlannedInstance{Profile: s.Profile.Name, Placement: s.Placement})
	}
	switch {
	case !p.WantMIG:
		p.Action = ActionDisable
	case !g.MIGEnabled:
		p.Action = ActionEnable
	case len(p.Destroy) == 0:
		p.Action = ActionCreate
	default:
		p.Action = ActionChange
	}
}

// describeAction is a plan's action in words.
func (p *GPUPlan) describeAction() string {
	var s string
	switch p.Action {
	case ActionKeep:
		return "keep"
	case ActionRefuse:
		return "cannot apply: " + p.Reason
	case ActionDisable:
		s = "disable MIG"
		if len(p.Destroy) > 0 {
			s = "destroy " + listInstances(p.Destroy) + "; disable MIG"
		}
	case ActionEnable:
		s = "enable MIG"
		if len(p.Create) > 0 {
			s += " and create " + listInstances(p.Create)
		}
	case ActionCreate:
		s = "create " + listInstances(p.Create)
	case ActionChange:
		s = "destroy " + listInstances(p.Destroy)
		if len(p.Create) > 0 {
			s += "; create " + listInstances(p.Create)
		}
	}
	if len(p.Keep) > 0 && p.Action != ActionKeep {
		s += "; keep " + listInstances(p.Keep)
	}
	if len(p.Busy) > 0 {
		s += " (in use, apply will refuse: " + strings.Join(p.Busy, "; ") + ")"
	}
	return s
}

func listInstances(list []PlannedInstance) string {
	parts := make([]string, len(list))
	for i, x := range list {
		parts[i] = fmt.Sprintf("%s at %s", x.Profile, x.Placement)
		if x.Incomplete {
			parts[i] += " (a GPU instance without a compute instance)"
		}
	}
	return strings.Join(parts, ", ")
}

func describeMode(migOn bool, counts map[string]int) string {
	if !migOn {
		return "MIG off"
	}
	if len(counts) == 0 {
		return "MIG on, no instances"
	}
	return describeCounts(counts)
}

// describeCounts writes a layout as "1× 3g.71gb + 2× 2g.35gb".
func describeCounts(counts map[string]int) string {
	names := slices.Sorted(maps.Keys(counts))
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%d× %s", counts[n], n)
	}
	return strings.Join(parts, " + ")
}

// printPlan writes the plans as a table; wide adds each GPU's UUID and
// rule. The action, the last column, is painted: refusals red, changes
// yellow.
func printPlan(w io.Writer, plans []GPUPlan, wide bool, c colors) {
	if len(plans) == 0 {
		fmt.Fprintln(w, "The layout selects no GPU of this node.")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	cols := "GPU\tMODEL"
	if wide {
		cols += "\tUUID\tRULE"
	}
	fmt.Fprintln(tw, cols+"\tCURRENT\tWANTED\tACTION")
	for i := range plans {
		p := &plans[i]
		extra := ""
		if wide {
			extra = fmt.Sprintf("\t%s\t%s", p.UUID, orDash(p.Rule))
		}
		action := p.describeAction()
		switch {
		case p.Action == ActionRefuse || len(p.Busy) > 0:
			action = c.red(action)
		case p.Action != ActionKeep:
			action = c.yellow(action)
		}
		fmt.Fprintf(tw, "%d\t%s%s\t%s\t%s\t%s\n", p.Index, p.Model, extra, describeMode(p.MIGEnabled, p.Current), describeMode(p.WantMIG, p.Want), action)
	}
	tw.Flush()
}

// AssertResult is what mig assert -o json prints.
type AssertResult struct {
	Matches bool        `json:"matches"` // every selected GPU matches
	Differ  int         `json:"differ"`  // how many do not
	GPUs    []GPUAssert `json:"gpus"`
}

// GPUAssert is one selected GPU as assert found it.
type GPUAssert struct {
	Index       int          `json:"index"`
	UUID        string       `json:"uuid"`
	Model       string       `json:"model"`
	Rule        string       `json:"rule"` // file:line of the rule that selects it
	Matches     bool         `json:"matches"`
	Differences []Difference `json:"differences,omitempty"`
}

// Difference is one way a GPU differs from the layout: its MIG mode
// (Field "mig-enabled", booleans) or its number of instances of a profile
// (Field "mig-devices.<profile>", counts).
type Difference struct {
	Field string `json:"field"`
	Has   any    `json:"has"`
	Wants any    `json:"wants"`
}

// differences lists how a planned GPU differs from what the layout wants.
func (p *GPUPlan) differences() []Difference {
	var d []Difference
	if p.MIGEnabled != p.WantMIG {
		d = append(d, Difference{Field: "mig-enabled", Has: p.MIGEnabled, Wants: p.WantMIG})
	}
	profiles := map[string]bool{}
	for name := range p.Current {
		profiles[name] = true
	}
	for name := range p.Want {
		profiles[name] = true
	}
	for _, name := range slices.Sorted(maps.Keys(profiles)) {
		has, wants := p.Current[name], p.Want[name]
		if !p.WantMIG {
			wants = 0 // MIG off carries no instances
		}
		if has != wants {
			d = append(d, Difference{Field: "mig-devices." + name, Has: has, Wants: wants})
		}
	}
	if n := len(p.Incomplete); n > 0 {
		d = append(d, Difference{Field: "incomplete", Has: p.Incomplete, Wants: []string{}})
	}
	return d
}

func migAssert(plans []GPUPlan, format string, stdout, stderr io.Writer) int {
	res := AssertResult{GPUs: []GPUAssert{}}
	c := colorsFor(stdout)
	for i := range plans {
		p := &plans[i]
		a := GPUAssert{Index: p.Index, UUID: p.UUID, Model: p.Model, Rule: p.Rule, Matches: p.matches()}
		switch {
		case !a.Matches:
			res.Differ++
			a.Differences = p.differences()
			if !structured(format) {
				fmt.Fprintf(stdout, "GPU %d: %s: has %s, wants %s (%s)\n", p.Index, c.red("differs"), describeMode(p.MIGEnabled, p.Current), describeMode(p.WantMIG, p.Want), p.Rule)
			}
		case format == FormatWide:
			fmt.Fprintf(stdout, "GPU %d: matches: has %s (%s)\n", p.Index, describeMode(p.MIGEnabled, p.Current), p.Rule)
		}
		res.GPUs = append(res.GPUs, a)
	}
	res.Matches = res.Differ == 0
	code := ExitOK
	if !res.Matches {
		code = ExitDiffers
	}
	switch {
	case structured(format):
		if err := writeData(stdout, format, res); err != nil {
			fmt.Fprintf(stderr, "gpumux mig assert: %v\n", err)
			return ExitError
		}
	case res.Matches:
		fmt.Fprintf(stdout, "all %d selected GPUs match the layout\n", len(plans))
	default:
		fmt.Fprintf(stdout, "%d of %d selected GPUs differ from the layout\n", res.Differ, len(plans))
	}
	return code
}

// Results of mig apply for one GPU.
const (
	ResultKept    = "kept"    // it matched already
	ResultChanged = "changed" // it was changed
	ResultBusy    = "busy"    // refused: instances (or, for a reset, the GPU) in use; left unchanged
	ResultFailed  = "failed"  // it could not be changed (rolled back where possible)
)

// ApplyResult is what mig apply -o json prints.
type ApplyResult struct {
	GPUs     []GPUApply `json:"gpus"`
	Changed  []int      `json:"changed"`
	Kept     []int      `json:"kept"`
	Busy     []int      `json:"busy"`
	Failed   []int      `json:"failed"`
	Differ   []int      `json:"differ"` // GPUs neither busy nor failed that do not match the layout afterwards
	ExitCode int        `json:"exit_code"`
}

// GPUApply is what apply did to one GPU.
type GPUApply struct {
	Index   int       `json:"index"`
	UUID    string    `json:"uuid"`
	Plan    GPUPlan   `json:"plan"`   // what apply set out to do
	Steps   []string  `json:"steps"`  // what it did, in order
	Reset   bool      `json:"reset"`  // the GPU was reset (--reset)
	Result  string    `json:"result"` // kept, changed, busy or failed
	Error   string    `json:"error,omitempty"`
	Layout  GPULayout `json:"layout"`  // the GPU's MIG layout afterwards
	Matches bool      `json:"matches"` // it carries the wanted layout afterwards
}

// GPULayout is a GPU's MIG mode and instances.
type GPULayout struct {
	MIGEnabled        bool             `json:"mig_enabled"`
	MIGPendingEnabled bool             `json:"mig_pending_enabled"` // the MIG mode it takes at its next reset: mig_enabled unless a change waits for a reset
	Instances         []LayoutInstance `json:"instances"`
}

// LayoutInstance is one MIG instance of a GPU.
type LayoutInstance struct {
	UUID      string        `json:"uuid"`
	Profile   string        `json:"profile"`
	Placement gpu.Placement `json:"placement"`
}

func layoutOf(g *gpu.GPU) GPULayout {
	l := GPULayout{MIGEnabled: g.MIGEnabled, MIGPendingEnabled: g.MIGPending, Instances: []LayoutInstance{}}
	for _, inst := range g.MIGInstances {
		l.Instances = append(l.Instances, LayoutInstance{UUID: inst.UUID, Profile: inst.Profile, Placement: inst.Placement})
	}
	sort.Slice(l.Instances, func(i, j int) bool { return l.Instances[i].Placement.Start < l.Instances[j].Placement.Start })
	return l
}

// migApply applies the plans GPU by GPU. In table form it prints the steps
// and a summary as it goes; quiet (JSON or YAML) it only collects them.
func migApply(ctx context.Context, h mig.Host, l *layout.Layout, plans []GPUPlan, held func(string) string, force bool, opts []mig.ApplyOption, quiet bool, stdout, stderr io.Writer) *ApplyResult {
	res := &ApplyResult{GPUs: []GPUApply{}, Changed: []int{}, Kept: []int{}, Busy: []int{}, Failed: []int{}, Differ: []int{}}
	for i := range plans {
		p := &plans[i]
		ga := GPUApply{Index: p.Index, UUID: p.UUID, Plan: *p, Steps: []string{}}
		prefix := fmt.Sprintf("GPU %d: ", p.Index)
		progress := func(format string, args ...any) {
			line := fmt.Sprintf(format, args...)
			ga.Steps = append(ga.Steps, strings.TrimPrefix(line, prefix))
			if !quiet {
				fmt.Fprintln(stdout, line)
			}
		}
		var err error
		switch p.Action {
		case ActionKeep:
			progress("GPU %d: keeping %s", p.Index, describeMode(p.MIGEnabled, p.Current))
		case ActionRefuse:
			err = fmt.Errorf("GPU %d: %s", p.Index, p.Reason)
		case ActionDisable:
			var r mig.Result
			r, err = mig.DisableMIG(ctx, h, p.Index, progress, opts...)
			ga.Reset = r.Reset
		default:
			var r mig.Result
			r, err = mig.Apply(ctx, h, p.Index, p.Want, progress, opts...)
			ga.Reset = r.Reset
		}
		switch {
		case errors.Is(err, mig.ErrBusy):
			fmt.Fprintf(stderr, "gpumux mig apply: GPU %d refused, left unchanged: %v\n", p.Index, err)
			ga.Result = ResultBusy
			res.Busy = append(res.Busy, p.Index)
		case err != nil:
			fmt.Fprintf(stderr, "gpumux mig apply: GPU %d failed: %v\n", p.Index, err)
			ga.Result = ResultFailed
			res.Failed = append(res.Failed, p.Index)
		case p.Action == ActionKeep:
			ga.Result = ResultKept
			res.Kept = append(res.Kept, p.Index)
		default:
			ga.Result = ResultChanged
			res.Changed = append(res.Changed, p.Index)
		}
		if err != nil {
			ga.Error = err.Error()
		}
		res.GPUs = append(res.GPUs, ga)
	}
	after, node, err := migPlan(ctx, h, l, held, force)
	if err != nil {
		fmt.Fprintf(stderr, "gpumux mig apply: reading the GPUs back: %v\n", err)
		res.ExitCode = ExitError
		return res
	}
	for i := range after {
		a := &after[i]
		k := slices.IndexFunc(res.GPUs, func(g GPUApply) bool { return g.Index == a.Index })
		if k < 0 { // the layout cannot select another GPU now; be safe anyway
			continue
		}
		ga := &res.GPUs[k]
		ga.Matches = a.matches()
		if g := gpuByIndex(node, a.Index); g != nil {
			ga.Layout = layoutOf(g)
		}
		if !ga.Matches && ga.Result != ResultBusy && ga.Result != ResultFailed {
			res.Differ = append(res.Differ, a.Index)
			fmt.Fprintf(stderr, "gpumux mig apply: GPU %d does not match the layout afterwards: has %s, wants %s\n", a.Index, describeMode(a.MIGEnabled, a.Current), describeMode(a.WantMIG, a.Want))
		}
	}
	if !quiet {
		fmt.Fprintf(stdout, "%d GPUs changed %v, %d kept %v, %d refused as busy %v, %d failed %v\n",
			len(res.Changed), res.Changed, len(res.Kept), res.Kept, len(res.Busy), res.Busy, len(res.Failed), res.Failed)
	}
	switch {
	case len(res.Failed) > 0 || len(res.Differ) > 0:
		res.ExitCode = ExitError
	case len(res.Busy) > 0:
		res.ExitCode = ExitBusy
	default:
		res.ExitCode = ExitOK
	}
	return res
}

func gpuByIndex(node *gpu.Node, index int) *gpu.GPU {
	for i := range node.GPUs {
		if node.GPUs[i].Index == index {
			return &node.GPUs[i]
		}
	}
	return nil
}

// migExportOptions are mig export's flags.
type migExportOptions struct {
	node                 nodeFlags
	file, config, format string
	// output is the deprecated --output FILE.
	output string
}

func newMIGExportCmd(stdout, stderr io.Writer) *cobra.Command {
	var o migExportOptions
	cmd := leaf("export", "write the node's current layout", `
Writes the node's current MIG layout, to standard output or to the file
-f/--file names. In gpumux's format (the default) it has one rule per GPU
selected by its UUID: gpumux mig assert -f on it passes on this node, and
gpumux mig apply -f brings the GPUs back to it. --format mig-parted writes
nvidia-mig-parted's config file (version: v1) with one config (-c, default
current) that selects GPUs by index, GPUs of one layout in one entry:
nvidia-mig-parted apply -f FILE -c current and gpumux mig apply -f FILE -c
current both read it. A GPU instance without a compute instance (left by an
interrupted change) is no MIG device: it is left out of the layout and
named in a comment; applying the layout removes it. Changes nothing.

--output FILE, the flag's name before -f/--file, still names the file but
is deprecated: it says so on stderr (-o/--output is the format of state
that other commands print).

Exit codes: 0 ok, 1 error, 2 bad flags.`, func(ctx context.Context) int { return runMIGExport(ctx, &o, stdout, stderr) })
	cmd.Use = "export [--format gpumux|mig-parted] [-f FILE]"
	o.node.register(cmd)
	layoutFileFlags(cmd, &o.file, &o.config, "write the layout to `FILE` instead of standard output", layout.DefaultExportConfig)
	cmd.Flags().Lookup("selected-config").Usage = "with --format mig-parted, the `CONFIG` name under mig-configs"
	cmd.Flags().StringVar(&o.format, "format", "gpumux", "`FORMAT` of the layout: gpumux, or mig-parted (nvidia-mig-parted's config file)")
	cmd.RegisterFlagCompletionFunc("format", cobra.FixedCompletions([]string{"gpumux", "mig-parted"}, cobra.ShellCompDirectiveNoFileComp))
	deprecatedFileFlag(cmd, &o.output)
	return cmd
}

// deprecatedFileFlag registers --output FILE, hidden: the name -f/--file
// had before -o/--output came to mean a format.
func deprecatedFileFlag(cmd *cobra.Command, output *string) {
	cmd.Flags().StringVar(output, "output", "", "deprecated: use -f/--file")
	cmd.Flags().MarkHidden("output")
}

// fileFlag resolves -f/--file and the deprecated --output: the file to
// write, or "" for standard output. Both at once is a usage error.
func fileFlag(cmd, file, output string, stderr io.Writer) (string, bool) {
	if output == "" {
		return file, true
	}
	if file != "" {
		fmt.Fprintf(stderr, "gpumux %s: --output %q and -f/--file %q: give only -f/--file\n", cmd, output, file)
		return "", false
	}
	fmt.Fprintf(stderr, "gpumux %s: warning: --output FILE is deprecated, use -f/--file FILE; writing to the file %q\n", cmd, output)
	return output, true
}

func runMIGExport(ctx context.Context, o *migExportOptions, stdout, stderr io.Writer) int {
	export := map[string]func(*gpu.Node) ([]byte, error){
		"gpumux":     layout.Export,
		"mig-parted": func(n *gpu.Node) ([]byte, error) { return layout.ExportMIGParted(n, o.config) },
	}[o.format]
	if export == nil {
		fmt.Fprintf(stderr, "gpumux mig export: --format %q: want gpumux or mig-parted\n", o.format)
		return ExitUsage
	}
	file, ok := fileFlag("mig export", o.file, o.output, stderr)
	if !ok {
		return ExitUsage
	}
	err := func() error {
		n, err := o.node.open()
		if err != nil {
			return err
		}
		defer n.Close()
		node, err := n.Host().Inventory(ctx)
		if err != nil {
			return err
		}
		b, err := export(node)
		if err != nil {
			return err
		}
		if file == "" {
			_, err = stdout.Write(b)
			return err
		}
		tmp := file + ".tmp"
		if err := os.WriteFile(tmp, b, 0o644); err != nil {
			return err
		}
		return os.Rename(tmp, file)
	}()
	if err != nil {
		fmt.Fprintf(stderr, "gpumux mig export: %v\n", err)
		return ExitError
	}
	return ExitOK
}

func instanceCounts(insts []gpu.MIGInstance) map[string]int {
	m := map[string]int{}
	for _, i := range insts {
		m[i.Profile]++
	}
	return m
}

func nonZero(devices map[string]int) map[string]int {
	m := map[string]int{}
	for k, v := range devices {
		if v > 0 {
			m[k] = v
		}
	}
	return m
}
