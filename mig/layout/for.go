package layout

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/gpumux/gpumux/gpu"
	"github.com/gpumux/gpumux/mig"
)

// For resolves the layout on a node: which rule each GPU gets, checked
// against what the GPU is. The result maps GPU index to what the layout wants
// of it; GPUs that no rule selects are absent (the layout leaves them as they
// are), so one file can serve nodes of different shapes.
//
// When two rules select one GPU, the format decides. In gpumux's format that
// is an error naming both (as in gpumux's node config). In mig-parted's, the
// later rule wins, because mig-parted applies every rule that selects a GPU
// in file order, so the GPU ends up as the last one says; reading its files
// unchanged means giving them the meaning mig-parted gives them.
//
// A rule that enables MIG must fit every GPU it selects, even one that a
// later mig-parted rule overrides (mig-parted applies it too): the GPU supports
// MIG, each profile exists on it, each count is within what fits on an empty
// GPU, and the whole set has non-overlapping placements (mig.Fit). A rule
// that disables MIG fits any GPU, with MIG support or without.
//
// Errors name the rule's file:line, the GPUs and what is valid on them;
// GPUs of one model with the same problem are reported once.
func (l *Layout) For(node *gpu.Node) (map[int]Want, error) {
	out := map[int]Want{}
	owner := map[int]*Rule{}
	ids := map[int]DeviceID{}
	var probs problems
	l.checkIndexes(node, &probs)
	for ri := range l.Rules {
		r := &l.Rules[ri]
		for gi := range node.GPUs {
			g := &node.GPUs[gi]
			ok, err := l.selects(r, g, ids)
			if err != nil {
				probs.add(g, r.pos.filter, join(r.Path, "device-filter"), "", "cannot read the PCI ids of {gpus}: "+err.Error())
				continue
			}
			if !ok {
				continue
			}
			if prev, dup := owner[g.Index]; dup && l.Version != VersionMIGParted {
				probs.add(g, r.pos.match, join(r.Path, "match"), strconv.Quote(r.Match.String()),
					fmt.Sprintf("selects {gpus}, which %s (line %d) selects too; each GPU may be selected once", prev.Path, prev.Line))
				continue
			}
			owner[g.Index] = r
			devices := maps.Clone(r.Devices)
			if devices == nil {
				devices = map[string]int{}
			}
			out[g.Index] = Want{MIGEnabled: r.MIGEnabled, Devices: devices, Rule: r}
			check(r, g, &probs)
		}
	}
	if err := probs.errors(l.File); err != nil {
		return nil, err
	}
	return out, nil
}

// checkIndexes adds a problem for each rule that names GPU indexes the node
// does not have: a rule that silently selected fewer GPUs than it names would
// leave a GPU unconfigured without a word.
func (l *Layout) checkIndexes(node *gpu.Node, probs *problems) {
	have := make([]int, 0, len(node.GPUs))
	for i := range node.GPUs {
		have = append(have, node.GPUs[i].Index)
	}
	slices.Sort(have)
	for ri := range l.Rules {
		r := &l.Rules[ri]
		var missing []int
		for _, i := range r.Match.Indexes {
			if _, ok := slices.BinarySearch(have, i); !ok {
				missing = append(missing, i)
			}
		}
		if len(missing) == 0 {
			continue
		}
		key := r.pos.matchKey
		if key == "" {
			key = "match"
		}
		value := strconv.Quote(r.Match.String())
		if key == "devices" {
			value = strings.ReplaceAll(fmt.Sprint(r.Match.Indexes), " ", ", ")
		}
		what := "GPU index " + formatIndexes(missing) + " is"
		if len(missing) > 1 {
			what = "GPU indexes " + formatIndexes(missing) + " are"
		}
		valid := "this node has no GPUs"
		if len(have) > 0 {
			valid = fmt.Sprintf("this node has %d GPUs, indexes %s", len(have), formatIndexes(have))
		}
		probs.add(nil, r.pos.match, join(r.Path, key), value, what+" out of range: "+valid)
	}
}

// selects reports whether rule r selects GPU g, reading (and caching in ids)
// the GPU's PCI ids only when the rule has a device filter.
func (l *Layout) selects(r *Rule, g *gpu.GPU, ids map[int]DeviceID) (bool, error) {
	if !r.Match.matchesGPU(g) {
		return false, nil
	}
	if len(r.Match.DeviceIDs) == 0 {
		return true, nil
	}
	hw, ok := ids[g.Index]
	if !ok {
		read := l.PCIID
		if read == nil {
			read = sysfsPCIID
		}
		var err error
		if hw, err = read(g); err != nil {
			return false, err
		}
		ids[g.Index] = hw
	}
	for _, f := range r.Match.DeviceIDs {
		if f.matches(hw) {
			return true, nil
		}
	}
	return false, nil
}

// check adds what keeps rule r from fitting GPU g.
func check(r *Rule, g *gpu.GPU, probs *problems) {
	if !r.MIGEnabled {
		return
	}
	if !g.MIGCapable {
		probs.add(g, r.pos.enabled, join(r.Path, "mig-enabled"), "true", "{gpus} has no MIG support; use mig-enabled: false, or a match that leaves it out")
		return
	}
	field := join(r.Path, "mig-devices")
	bad := false
	for _, name := range slices.Sorted(maps.Keys(r.Devices)) {
		n := r.Devices[name]
		p, ok := g.Profile(name)
		if !ok {
			probs.add(g, r.pos.device[name], field, strconv.Quote(name), "no such MIG profile on {gpus}; valid: "+profileList(g))
			bad = true
			continue
		}
		if n > p.MaxCount {
			probs.add(g, r.pos.device[name], field, fmt.Sprintf("%s: %d", name, n), fmt.Sprintf("at most %d fit on {gpus}", p.MaxCount))
			bad = true
		}
	}
	if bad {
		return
	}
	if _, err := mig.Fit(g.MIGProfiles, r.Devices); err != nil {
		why := strings.TrimPrefix(err.Error(), mig.ErrInfeasible.Error()+": ")
		probs.add(g, r.pos.devices, field, describe(r.Devices), "these do not fit together on {gpus}: "+why)
	}
}

// profileList lists a GPU's profiles with how many of each fit.
func profileList(g *gpu.GPU) string {
	parts := make([]string, len(g.MIGProfiles))
	for i, p := range g.MIGProfiles {
		parts[i] = fmt.Sprintf("%s (up to %d)", p.Name, p.MaxCount)
	}
	return strings.Join(parts, ", ")
}

// describe writes profile counts as YAML's flow style writes them.
func describe(devices map[string]int) string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(devices)) {
		parts = append(parts, fmt.Sprintf("%s: %d", name, devices[name]))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// problems collects For's errors, merging those that differ only in which
// GPU of one model they concern.
type problems struct {
	order []problemKey
	gpus  map[problemKey][]int
}

type problemKey struct {
	line              int
	field, value, msg string // msg has {gpus} where the GPUs go
	model             string
}

// add records a problem of rule field on GPU g, or of the rule itself when
// g is nil.
func (p *problems) add(g *gpu.GPU, line int, field, value, msg string) {
	k := problemKey{line: line, field: field, value: value, msg: msg}
	if g != nil {
		k.model = g.Model
	}
	if p.gpus == nil {
		p.gpus = map[problemKey][]int{}
	}
	if _, ok := p.gpus[k]; !ok {
		p.order = append(p.order, k)
	}
	if g != nil {
		p.gpus[k] = append(p.gpus[k], g.Index)
	}
}

func (p *problems) errors(file string) error {
	var errs []*Error
	for _, k := range p.order {
		idx := p.gpus[k]
		if len(idx) == 0 { // a problem of the rule, not of a GPU
			errs = append(errs, &Error{File: file, Line: k.line, Field: k.field, Value: k.value, Msg: k.msg})
			continue
		}
		slices.Sort(idx)
		gpus := "GPU " + formatIndexes(idx)
		if len(idx) > 1 {
			gpus = "GPUs " + formatIndexes(idx)
		}
		if k.model != "" {
			gpus += " (" + k.model + ")"
		}
		errs = append(errs, &Error{File: file, Line: k.line, Field: k.field, Value: k.value, Msg: strings.ReplaceAll(k.msg, "{gpus}", gpus)})
	}
	return joinSorted(errs)
}

// sysfsRoot is where sysfsPCIID looks; tests point it elsewhere.
var sysfsRoot = "/sys/bus/pci/devices"

// sysfsPCIID reads a GPU's PCI ids from sysfs.
func sysfsPCIID(g *gpu.GPU) (DeviceID, error) {
	// NVML writes bus ids as 00000000:18:00.0; sysfs names them 0000:18:00.0.
	bus := strings.ToLower(g.PCIBusID)
	if dom, rest, ok := strings.Cut(bus, ":"); ok && len(dom) == 8 {
		bus = dom[4:] + ":" + rest
	}
	if bus == "" || strings.ContainsAny(bus, "/") {
		return DeviceID{}, fmt.Errorf("no usable PCI bus id (%q)", g.PCIBusID)
	}
	var v [4]uint64
	for i, name := range []string{"device", "vendor", "subsystem_device", "subsystem_vendor"} {
		b, err := os.ReadFile(filepath.Join(sysfsRoot, bus, name))
		if err != nil {
			return DeviceID{}, err
		}
		s := strings.TrimPrefix(strings.TrimSpace(string(b)), "0x")
		if v[i], err = strconv.ParseUint(s, 16, 16); err != nil {
			return DeviceID{}, fmt.Errorf("%s: %q is not a PCI id", filepath.Join(sysfsRoot, bus, name), strings.TrimSpace(string(b)))
		}
	}
	return DeviceID{ID: uint32(v[0]<<16 | v[1]), Subsystem: uint32(v[2]<<16 | v[3])}, nil
}
