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
// its current mode, and a comment says so.
func Export(node *gpu.Node) ([]byte, error) {
	rules := make([]Rule, 0, len(node.GPUs))
	comments := make([]string, 0, len(node.GPUs))
	for _, g := range node.GPUs {
		if _, err := parseSelector(g.UUID); err != nil || !strings.HasPrefix(g.UUID, "GPU-") || strings.Contains(g.UUID, ",") {
			return nil, fmt.Errorf("GPU %d (%s): UUID %q cannot select it", g.Index, g.Model, g.UUID)
		}
		devices := map[string]int{}
		if g.MIGEnabled {
			for _, inst := range g.MIGInstances {
				devices[inst.Profile]++
			}
		}
		rules = append(rules, Rule{Match: Selector{UUIDs: []string{g.UUID}}, MIGEnabled: g.MIGEnabled, Devices: devices})
		c := fmt.Sprintf("GPU %d: %s", g.Index, g.Model)
		switch {
		case !g.MIGCapable:
			c += ", no MIG support"
		case g.MIGPending != g.MIGEnabled:
			c += fmt.Sprintf(", MIG mode changes to %s at its next reset", onOff(g.MIGPending))
		}
		comments = append(comments, c)
	}
	header := fmt.Sprintf("MIG layout of a node with %d GPUs, exported by gpumux", len(node.GPUs))
	if node.DriverVersion != "" {
		header += " (driver " + node.DriverVersion + ")"
	}
	return marshal(rules, comments, header)
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
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	// What is written must read back as the same rules.
	back, err := Parse("output", buf.Bytes(), "")
	if err != nil {
		return nil, fmt.Errorf("the layout cannot be written in gpumux's format: %w", err)
	}
	for i := range rules {
		if !sameRule(&rules[i], &back.Rules[i]) {
			return nil, fmt.Errorf("the layout cannot be written in gpumux's format: rule %d (%s) would read back as %q", i, rules[i].Path, back.Rules[i].Match.String())
		}
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
