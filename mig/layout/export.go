package layout

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/gpumux/gpumux/gpu"
)

// Marshal writes the layout's rules in gpumux's format, whichever format it
// was read from: a mig-parted config becomes a gpumux file that Parse reads
// back to the same rules (devices: all becomes match: all, an index list
// match: "0-3,5"). It fails for rules that Parse would not accept.
func (l *Layout) Marshal() ([]byte, error) {
	return marshal(l.Rules, nil, "")
}

// Export writes the node's current MIG layout in gpumux's format: one rule
// per GPU, selected by UUID, with its current MIG mode and its MIG devices
// by profile. Parse then For on the same node yields exactly the current
// layout. A GPU whose MIG mode changes at its next reset is exported with
// its current mode, and a comment says so. GPU instances without a
// compute instance (gpu.GPU.MIGIncomplete, left by an interrupted change)
// are no MIG devices: they are left out, and a comment names them; applying
// the export removes them.
func Export(node *gpu.Node) ([]byte, error) {
	rules := make([]Rule, 0, len(node.GPUs))
	comments := make([]string, 0, len(node.GPUs))
	for i := range node.GPUs {
		g := &node.GPUs[i]
		if _, err := parseSelector(g.UUID); err != nil || !strings.HasPrefix(g.UUID, "GPU-") || strings.Contains(g.UUID, ",") {
			return nil, fmt.Errorf("GPU %d (%s): UUID %q cannot select it", g.Index, g.Model, g.UUID)
		}
		rules = append(rules, Rule{Match: Selector{UUIDs: []string{g.UUID}}, MIGEnabled: g.MIGEnabled, Devices: devicesOf(g)})
		comments = append(comments, exportComment(g))
	}
	return marshal(rules, comments, exportHeader(node, ""))
}

// DefaultExportConfig is the name ExportMIGParted gives its config, as
// mig-parted's export does.
const DefaultExportConfig = "current"

// ExportMIGParted writes the node's current MIG layout in mig-parted's
// format (version: v1), as one config of mig-configs named config
// (DefaultExportConfig when empty): GPUs with the same MIG mode and devices
// share one entry, devices: all when it is every GPU, else their indexes.
// nvidia-mig-parted apply -c <config> and gpumux mig apply -c <config> read
// it; resolved on the same node it yields exactly the current layout. As
// in Export, a pending MIG mode change and GPU instances without a compute
// instance are left out and named in comments.
func ExportMIGParted(node *gpu.Node, config string) ([]byte, error) {
	if config == "" {
		config = DefaultExportConfig
	}
	type group struct {
		indexes  []int
		enabled  bool
		devices  map[string]int
		comments []string
	}
	var groups []*group
	for i := range node.GPUs {
		g := &node.GPUs[i]
		devices := devicesOf(g)
		k := slices.IndexFunc(groups, func(x *group) bool { return x.enabled == g.MIGEnabled && maps.Equal(x.devices, devices) })
		if k < 0 {
			groups = append(groups, &group{enabled: g.MIGEnabled, devices: devices})
			k = len(groups) - 1
		}
		groups[k].indexes = append(groups[k].indexes, g.Index)
		groups[k].comments = append(groups[k].comments, exportComment(g))
	}
	str := func(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }
	entries := &yaml.Node{Kind: yaml.SequenceNode}
	rules := make([]Rule, 0, len(groups))
	for _, gr := range groups {
		var devs *yaml.Node
		sel := Selector{Indexes: gr.indexes}
		if len(gr.indexes) == len(node.GPUs) {
			devs, sel = str("all"), Selector{All: true}
		} else {
			devs = &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
			for _, i := range gr.indexes {
				devs.Content = append(devs.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.Itoa(i)})
			}
		}
		migDevs := &yaml.Node{Kind: yaml.MappingNode}
		if len(gr.devices) == 0 {
			migDevs.Style = yaml.FlowStyle
		}
		for _, name := range slices.Sorted(maps.Keys(gr.devices)) {
			migDevs.Content = append(migDevs.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: name, Style: yaml.DoubleQuotedStyle},
				&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.Itoa(gr.devices[name])})
		}
		entries.Content = append(entries.Content, &yaml.Node{Kind: yaml.MappingNode, HeadComment: strings.Join(gr.comments, "\n"), Content: []*yaml.Node{
			str("devices"), devs,
			str("mig-enabled"), {Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(gr.enabled)},
			str("mig-devices"), migDevs,
		}})
		rules = append(rules, Rule{Match: sel, MIGEnabled: gr.enabled, Devices: gr.devices})
	}
	root := &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{
		str("version"), str(VersionMIGParted),
		str("mig-configs"), {Kind: yaml.MappingNode, Content: []*yaml.Node{str(config), entries}},
	}}
	doc := &yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{root}, HeadComment: exportHeader(node, "mig-parted's format")}
	out, err := encode(doc)
	if err != nil {
		return nil, err
	}
	// What is written must read back as the same rules.
	back, err := Parse("output", out, config)
	if err != nil {
		return nil, fmt.Errorf("the layout cannot be written in mig-parted's format: %w", err)
	}
	for i := range rules {
		if !sameRule(&rules[i], &back.Rules[i]) {
			return nil, fmt.Errorf("the layout cannot be written in mig-parted's format: entry %d reads back as %q", i, back.Rules[i].Match.String())
		}
	}
	return out, nil
}

// devicesOf counts a GPU's MIG devices by profile; none when MIG is off.
func devicesOf(g *gpu.GPU) map[string]int {
	devices := map[string]int{}
	if g.MIGEnabled {
		for _, inst := range g.MIGInstances {
			devices[inst.Profile]++
		}
	}
	return devices
}

// exportComment describes a GPU in an exported layout, with what the
// layout leaves out.
func exportComment(g *gpu.GPU) string {
	c := fmt.Sprintf("GPU %d: %s", g.Index, g.Model)
	switch {
	case !g.MIGCapable:
		c += ", no MIG support"
	case g.MIGPending != g.MIGEnabled:
		c += fmt.Sprintf(", MIG mode changes to %s at its next reset", onOff(g.MIGPending))
	}
	for _, inst := range g.MIGIncomplete {
		c += fmt.Sprintf("; left out: a %s GPU instance at %s without a compute instance (left by an interrupted change; applying this layout removes it)", inst.Profile, inst.Placement)
	}
	return c
}

func exportHeader(node *gpu.Node, format string) string {
	header := fmt.Sprintf("MIG layout of a node with %d GPUs, exported by gpumux", len(node.GPUs))
	if node.DriverVersion != "" {
		header += " (driver " + node.DriverVersion + ")"
	}
	if format != "" {
		header += ", in " + format
	}
	return header
}

func onOff(b bool) string {
	if b {
		return "enabled"
	}
	return "disabled"
}

func marshal(rules []Rule, comments []string, header string) ([]byte, error) {
	str := func(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }
	gpus := &yaml.Node{Kind: yaml.SequenceNode}
	if len(rules) == 0 {
		gpus.Style = yaml.FlowStyle
	}
	for i, r := range rules {
		m := &yaml.Node{Kind: yaml.MappingNode}
		m.Content = append(m.Content, str("match"), str(r.Match.String()))
		if len(r.Match.DeviceIDs) > 0 {
			ids := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
			for _, id := range r.Match.DeviceIDs {
				ids.Content = append(ids.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: id.String(), Style: yaml.DoubleQuotedStyle})
			}
			m.Content = append(m.Content, str("device-filter"), ids)
		}
		m.Content = append(m.Content, str("mig-enabled"), &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(r.MIGEnabled)})
		if r.MIGEnabled {
			devs := &yaml.Node{Kind: yaml.MappingNode}
			if len(r.Devices) == 0 {
				devs.Style = yaml.FlowStyle
			}
			for _, name := range slices.Sorted(maps.Keys(r.Devices)) {
				devs.Content = append(devs.Content, str(name), &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.Itoa(r.Devices[name])})
			}
			m.Content = append(m.Content, str("mig-devices"), devs)
		}
		if i < len(comments) {
			m.HeadComment = comments[i]
		}
		gpus.Content = append(gpus.Content, m)
	}
	root := &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{
		str("version"), str(VersionGPUMux),
		str("gpus"), gpus,
	}}
	doc := &yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{root}, HeadComment: header}
	out, err := encode(doc)
	if err != nil {
		return nil, err
	}
	// What is written must read back as the same rules.
	back, err := Parse("output", out, "")
	if err != nil {
		return nil, fmt.Errorf("the layout cannot be written in gpumux's format: %w", err)
	}
	for i := range rules {
		if !sameRule(&rules[i], &back.Rules[i]) {
			return nil, fmt.Errorf("the layout cannot be written in gpumux's format: rule %d (%s) would read back as %q", i, rules[i].Path, back.Rules[i].Match.String())
		}
	}
	return out, nil
}

// encode writes a YAML document with an indent of 2.
func encode(doc *yaml.Node) ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// sameRule compares what two rules select and want, not where they were read.
func sameRule(a, b *Rule) bool {
	return a.Match.All == b.Match.All && slices.Equal(a.Match.Indexes, b.Match.Indexes) &&
		slices.Equal(a.Match.UUIDs, b.Match.UUIDs) && a.Match.Model == b.Match.Model &&
		slices.Equal(a.Match.DeviceIDs, b.Match.DeviceIDs) &&
		a.MIGEnabled == b.MIGEnabled && maps.Equal(a.Devices, b.Devices)
}
