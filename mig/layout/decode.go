package layout

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// maxNodes bounds the nodes a file may have once YAML aliases are expanded,
// so that a file of aliases to aliases cannot make decoding take forever.
const maxNodes = 100_000

var (
	gpumuxTopKeys    = []string{"version", "gpus"}
	gpumuxRuleKeys   = []string{"match", "device-filter", "mig-enabled", "mig-devices"}
	migPartedTopKeys = []string{"version", "mig-configs"}
	migPartedKeys    = []string{"devices", "device-filter", "mig-enabled", "mig-devices"}

	// profileName is the shape of NVIDIA's MIG profile names: 3g.71gb,
	// 1c.2g.10gb, 1g.18gb+me, 1g.24gb+me.all, 1g.24gb-me.
	profileName = regexp.MustCompile(`^([1-9][0-9]*c\.)?[1-9][0-9]*g\.[0-9]+gb([+-][A-Za-z0-9]+([.,][A-Za-z0-9]+)*)?$`)
)

const wantVersion = `want version: gpumux.io/v1 (gpumux's format) or version: v1 (mig-parted's format)`

type decoder struct {
	file   string
	src    []byte
	budget int
	fatal  *Error // ends decoding: what was decoded so far is partial
	errs   []*Error
}

// fail records an error.
func (d *decoder) fail(line int, field, value, format string, args ...any) {
	d.errs = append(d.errs, &Error{File: d.file, Line: line, Field: field, Value: value, Msg: fmt.Sprintf(format, args...)})
}

// document reads the one YAML document of the file and returns its root.
func (d *decoder) document() (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(d.src))
	var doc yaml.Node
	err := dec.Decode(&doc)
	if errors.Is(err, io.EOF) || err == nil && (doc.Kind != yaml.DocumentNode || len(doc.Content) == 0) {
		return nil, &Error{File: d.file, Line: 1, Msg: "empty; " + wantVersion}
	}
	if err != nil {
		return nil, d.syntax(err)
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == nil:
		line := extra.Line
		if len(extra.Content) > 0 {
			line = extra.Content[0].Line
		}
		return nil, &Error{File: d.file, Line: line, Msg: "a second YAML document; a layout file holds one (remove the ---)"}
	case !errors.Is(err, io.EOF):
		return nil, d.syntax(err)
	}
	return doc.Content[0], nil
}

var (
	yamlLine     = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)
	unquotedStar = regexp.MustCompile(`(^|[:\[{,-])\s*\*`)
)

// syntax turns a YAML parser error into an Error with the line it names.
func (d *decoder) syntax(err error) error {
	e := &Error{File: d.file}
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		e.Line, _ = strconv.Atoi(m[1])
		msg = m[2]
	} else {
		msg = strings.TrimPrefix(msg, "yaml: ")
	}
	if name, ok := strings.CutPrefix(msg, "unknown anchor '"); ok {
		name, _, _ = strings.Cut(name, "' referenced")
		if i := bytes.Index(d.src, []byte("*"+name)); i >= 0 && e.Line == 0 {
			e.Line = 1 + bytes.Count(d.src[:i], []byte("\n"))
		}
		msg += `; a value that starts with * (such as the model glob "*H200*") must be quoted`
	}
	if lines := bytes.Split(d.src, []byte("\n")); e.Line > 0 && e.Line <= len(lines) {
		line := lines[e.Line-1]
		switch {
		case bytes.HasPrefix(bytes.TrimLeft(line, " "), []byte("\t")):
			msg += "; YAML indents with spaces, not tabs"
		case unquotedStar.Match(line) && !strings.Contains(msg, "must be quoted"):
			msg += `; a value that starts with * (such as the model glob "*H200*") must be quoted`
		}
	}
	e.Msg = "YAML syntax: " + msg
	return e
}

// visit follows aliases to the node they stand for and counts it against
// the budget; false means the budget is spent, and the error says so.
func (d *decoder) visit(n *yaml.Node) (*yaml.Node, bool) {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n == nil { // not from yaml's parser, but do not let it pass silently
		d.fatal = &Error{File: d.file, Msg: "a YAML alias stands for nothing"}
		return nil, false
	}
	d.budget--
	if d.budget == -1 {
		d.fatal = &Error{File: d.file, Line: n.Line, Msg: fmt.Sprintf("more than %d YAML nodes once aliases are expanded; write the layout out without aliases", maxNodes)}
	}
	return n, d.budget >= 0
}

// show writes a value for a message: strings quoted, other scalars as
// written, collections by kind.
func show(n *yaml.Node) string {
	switch {
	case n.Kind == yaml.MappingNode && len(n.Content) == 0:
		return "{}"
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.SequenceNode && len(n.Content) == 0:
		return "[]"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	}
	v := n.Value
	if len(v) > 80 {
		v = v[:77] + "..."
	}
	switch n.ShortTag() {
	case "!!str":
		return strconv.Quote(v)
	case "!!null":
		return "null (no value)"
	}
	return v
}

func join(where, key string) string {
	if where == "" {
		return key
	}
	return where + "." + key
}

// entry is one key of a mapping.
type entry struct {
	key, val *yaml.Node
}

// fields reads a mapping whose keys must be among valid, reporting unknown
// and duplicate keys. It returns false (having reported why) when n is not a
// mapping.
func (d *decoder) fields(n *yaml.Node, where string, valid []string, what string) (map[string]entry, bool) {
	if n.Kind != yaml.MappingNode {
		d.fail(n.Line, where, show(n), "want %s", what)
		return nil, false
	}
	out := map[string]entry{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, ok := d.visit(n.Content[i])
		if !ok {
			return out, true
		}
		v, ok := d.visit(n.Content[i+1])
		if !ok {
			return out, true
		}
		if k.Kind != yaml.ScalarNode {
			d.fail(k.Line, where, show(k), "want a key; valid keys: %s", strings.Join(valid, ", "))
			continue
		}
		if prev, dup := out[k.Value]; dup {
			d.fail(k.Line, join(where, k.Value), "", "duplicate key (first at line %d)", prev.key.Line)
			continue
		}
		if !contains(valid, k.Value) {
			hint := ""
			if s := suggest(k.Value, valid); s != "" {
				hint = fmt.Sprintf(" (did you mean %s?)", s)
			}
			if k.Tag == "!!merge" {
				hint = " (YAML merge keys are not supported)"
			}
			d.fail(k.Line, join(where, k.Value), "", "unknown key%s; valid keys: %s", hint, strings.Join(valid, ", "))
			continue
		}
		out[k.Value] = entry{k, v}
	}
	return out, true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// suggest returns the valid key that s is a likely misspelling of.
func suggest(s string, valid []string) string {
	norm := func(s string) string {
		return strings.ToLower(strings.NewReplacer("_", "", "-", "", " ", "").Replace(s))
	}
	for _, v := range valid {
		if norm(v) == norm(s) {
			return v
		}
	}
	return ""
}

// layout decodes the root mapping in the format its version names.
func (d *decoder) layout(root *yaml.Node, config string) (*Layout, error) {
	if root.Kind != yaml.MappingNode {
		return nil, &Error{File: d.file, Line: root.Line, Value: show(root), Msg: "want a mapping that starts with version: gpumux.io/v1 (gpumux's format) or version: v1 (mig-parted's format)"}
	}
	var version *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		if k := root.Content[i]; k.Kind == yaml.ScalarNode && k.Value == "version" {
			version, _ = d.visit(root.Content[i+1])
			break
		}
	}
	switch {
	case version == nil:
		return nil, &Error{File: d.file, Line: root.Line, Field: "version", Msg: "missing; " + wantVersion}
	case version.Kind != yaml.ScalarNode || version.ShortTag() != "!!str":
		return nil, &Error{File: d.file, Line: version.Line, Field: "version", Value: show(version), Msg: "want gpumux.io/v1 (gpumux's format) or v1 (mig-parted's format)"}
	}
	var l *Layout
	switch version.Value {
	case VersionGPUMux:
		l = d.gpumux(root, version, config)
	case VersionMIGParted:
		l = d.migParted(root, config)
	default:
		return nil, &Error{File: d.file, Line: version.Line, Field: "version", Value: show(version), Msg: "unknown version; valid: gpumux.io/v1 (gpumux's format), v1 (mig-parted's format)"}
	}
	if d.fatal != nil {
		// What was decoded before that is partial: its other
		// errors would mislead.
		return nil, d.fatal
	}
	if err := joinSorted(d.errs); err != nil {
		return nil, err
	}
	return l, nil
}

func (d *decoder) gpumux(root, version *yaml.Node, config string) *Layout {
	l := &Layout{Version: VersionGPUMux, Rules: []Rule{}}
	f, _ := d.fields(root, "", gpumuxTopKeys, "")
	if config != "" {
		d.fail(version.Line, "config", strconv.Quote(config), "gpumux's format (version: gpumux.io/v1) has no named configs; select none (-c is for mig-parted's mig-configs)")
	}
	g, ok := f["gpus"]
	if !ok {
		d.fail(root.Line, "gpus", "", "missing; want a list of rules such as - match: \"0-3\" (gpus: [] for none)")
		return l
	}
	if g.val.Kind != yaml.SequenceNode {
		d.fail(g.val.Line, "gpus", show(g.val), `want a list of rules such as - match: "0-3"`)
		return l
	}
	for i, item := range g.val.Content {
		item, ok := d.visit(item)
		if !ok {
			break
		}
		if r, ok := d.rule(item, fmt.Sprintf("gpus[%d]", i), false); ok {
			l.Rules = append(l.Rules, r)
		}
	}
	return l
}

func (d *decoder) migParted(root *yaml.Node, config string) *Layout {
	l := &Layout{Version: VersionMIGParted, Rules: []Rule{}}
	f, _ := d.fields(root, "", migPartedTopKeys, "")
	mc, ok := f["mig-configs"]
	if !ok {
		d.fail(root.Line, "mig-configs", "", "missing; want named configs, each a list of rules such as - devices: all")
		return l
	}
	if mc.val.Kind != yaml.MappingNode || len(mc.val.Content) == 0 {
		d.fail(mc.val.Line, "mig-configs", show(mc.val), "want at least one named config, each a list of rules such as - devices: all")
		return l
	}
	var names []string
	configs := map[string][]Rule{}
	lines := map[string]int{}
	for i := 0; i+1 < len(mc.val.Content); i += 2 {
		k, ok1 := d.visit(mc.val.Content[i])
		v, ok2 := d.visit(mc.val.Content[i+1])
		if !ok1 || !ok2 {
			break
		}
		if k.Kind != yaml.ScalarNode {
			d.fail(k.Line, "mig-configs", show(k), "want a config name")
			continue
		}
		name, where := k.Value, "mig-configs."+k.Value
		if first, dup := lines[name]; dup {
			d.fail(k.Line, where, "", "duplicate config name (first at line %d)", first)
			continue
		}
		lines[name] = k.Line
		names = append(names, name)
		if v.Kind != yaml.SequenceNode || len(v.Content) == 0 {
			d.fail(v.Line, where, show(v), "want a list of at least one rule such as - devices: all")
			continue
		}
		rules := []Rule{}
		for j, item := range v.Content {
			item, ok := d.visit(item)
			if !ok {
				break
			}
			if r, ok := d.rule(item, fmt.Sprintf("%s[%d]", where, j), true); ok {
				rules = append(rules, r)
			}
		}
		configs[name] = rules
	}
	switch {
	case config == "" && len(names) == 1:
		config = names[0]
	case config == "":
		d.fail(mc.key.Line, "mig-configs", "", "%d configs and none selected; select one (-c) of: %s", len(names), strings.Join(names, ", "))
		return l
	case lines[config] == 0:
		d.fail(mc.key.Line, "mig-configs", strconv.Quote(config), "no such config; available: %s", strings.Join(names, ", "))
		return l
	}
	l.Config, l.Rules = config, configs[config]
	return l
}

// rule decodes one rule in gpumux's format or, with migParted, mig-parted's.
// It reports what is wrong and returns false if anything is.
func (d *decoder) rule(n *yaml.Node, where string, migParted bool) (Rule, bool) {
	keys, sel := gpumuxRuleKeys, "match"
	if migParted {
		keys, sel = migPartedKeys, "devices"
	}
	before := len(d.errs)
	f, ok := d.fields(n, where, keys, "a rule, a mapping with keys "+strings.Join(keys, ", "))
	if !ok {
		return Rule{}, false
	}
	r := Rule{Line: n.Line, Path: where, Devices: map[string]int{}, pos: positions{device: map[string]int{}}}

	if e, ok := f[sel]; !ok {
		if migParted {
			d.fail(n.Line, join(where, sel), "", "missing; want all or a list of GPU indexes such as [0, 1]")
		} else {
			d.fail(n.Line, join(where, sel), "", `missing; want GPU indexes ("0-3", "4,5"), GPU UUIDs ("GPU-…"), a model glob ("*H200*") or all`)
		}
	} else {
		r.pos.match, r.pos.matchKey = e.key.Line, sel
		if migParted {
			r.Match = d.devices(e.val, join(where, sel))
		} else {
			r.Match = d.match(e.val, join(where, sel))
		}
	}
	if e, ok := f["device-filter"]; ok {
		r.pos.filter = e.key.Line
		r.Match.DeviceIDs = d.deviceFilter(e.val, join(where, "device-filter"))
	}

	e, ok := f["mig-enabled"]
	switch {
	case !ok:
		d.fail(n.Line, join(where, "mig-enabled"), "", "missing; want true or false")
	case e.val.Kind != yaml.ScalarNode || e.val.ShortTag() != "!!bool":
		d.fail(e.val.Line, join(where, "mig-enabled"), show(e.val), "want true or false")
	default:
		r.pos.enabled = e.key.Line
		_ = e.val.Decode(&r.MIGEnabled)
	}

	e, ok = f["mig-devices"]
	switch {
	case !ok && r.MIGEnabled:
		d.fail(n.Line, join(where, "mig-devices"), "", `missing; a GPU with mig-enabled: true needs its MIG devices, such as {"3g.71gb": 2}, or {} for MIG mode without devices`)
	case ok:
		r.pos.devices = e.key.Line
		entries := d.migDevices(e.val, join(where, "mig-devices"), migParted, &r)
		if entries > 0 && !r.MIGEnabled && r.pos.enabled > 0 {
			d.fail(e.key.Line, join(where, "mig-devices"), "", "set while mig-enabled is false; remove mig-devices or set mig-enabled: true")
		}
	}
	return r, len(d.errs) == before
}

// match decodes gpumux's match.
func (d *decoder) match(n *yaml.Node, field string) Selector {
	if n.Kind != yaml.ScalarNode || (n.ShortTag() != "!!str" && n.ShortTag() != "!!int") {
		d.fail(n.Line, field, show(n), `want a string: GPU indexes ("0-3", "4,5"), GPU UUIDs ("GPU-…"), a model glob ("*H200*") or all`)
		return Selector{}
	}
	s, err := parseSelector(n.Value)
	if err != nil {
		d.fail(n.Line, field, show(n), "%v", err)
	}
	return s
}

// devices decodes mig-parted's devices: all, or a list of indexes.
func (d *decoder) devices(n *yaml.Node, field string) Selector {
	const want = "want all or a list of GPU indexes such as [0, 1]"
	switch {
	case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str" && n.Value == "all":
		return Selector{All: true}
	case n.Kind != yaml.SequenceNode:
		d.fail(n.Line, field, show(n), want)
		return Selector{}
	case len(n.Content) == 0:
		d.fail(n.Line, field, show(n), "an empty list selects no GPU; "+want)
		return Selector{}
	}
	seen := map[int]bool{}
	var idx []int
	for _, item := range n.Content {
		item, ok := d.visit(item)
		if !ok {
			return Selector{}
		}
		var i int
		if item.Kind != yaml.ScalarNode || item.ShortTag() != "!!int" || item.Decode(&i) != nil || i < 0 || i > MaxIndex {
			d.fail(item.Line, field, show(item), "not a GPU index; want whole numbers from 0 to %d, such as [0, 1]", MaxIndex)
			continue
		}
		if !seen[i] {
			seen[i] = true
			idx = append(idx, i)
		}
	}
	slices.Sort(idx)
	return Selector{Indexes: idx}
}

// deviceFilter decodes a device-filter: one PCI device id or a list of them.
func (d *decoder) deviceFilter(n *yaml.Node, field string) []DeviceID {
	const want = `want a PCI id 0x<device><vendor> such as "0x233510DE" (H200), optionally :0x<subsystem id>`
	items := []*yaml.Node{n}
	if n.Kind == yaml.SequenceNode {
		items = n.Content
	}
	var out []DeviceID
	for _, item := range items {
		item, ok := d.visit(item)
		if !ok {
			return nil
		}
		if item.Kind != yaml.ScalarNode || (item.ShortTag() != "!!str" && item.ShortTag() != "!!int") {
			d.fail(item.Line, field, show(item), "%s, or a list of them", want)
			continue
		}
		if item.Value == "" && item == n && item.ShortTag() == "!!str" {
			continue // mig-parted reads device-filter: "" as no filter
		}
		id, ok := parseDeviceID(item.Value)
		if !ok {
			d.fail(item.Line, field, show(item), want)
			continue
		}
		if !containsID(out, id) {
			out = append(out, id)
		}
	}
	return out
}

func containsID(list []DeviceID, id DeviceID) bool {
	for _, x := range list {
		if x == id {
			return true
		}
	}
	return false
}

// migDevices decodes mig-devices into r and returns how many entries it had.
// gpumux's counts start at 1; mig-parted's at 0, which means none.
func (d *decoder) migDevices(n *yaml.Node, field string, migParted bool, r *Rule) int {
	min := 1
	if migParted {
		min = 0
	}
	if n.Kind != yaml.MappingNode {
		d.fail(n.Line, field, show(n), `want a mapping of MIG profile to count such as {"3g.71gb": 2}, or {} for none`)
		return 0
	}
	entries := 0
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, ok1 := d.visit(n.Content[i])
		v, ok2 := d.visit(n.Content[i+1])
		if !ok1 || !ok2 {
			break
		}
		entries++
		if k.Kind != yaml.ScalarNode || !profileName.MatchString(k.Value) {
			d.fail(k.Line, field, show(k), "not a MIG profile name; want one such as 3g.71gb, 1g.18gb+me or 1c.2g.35gb")
			continue
		}
		name := k.Value
		if first, dup := r.pos.device[name]; dup {
			d.fail(k.Line, field, strconv.Quote(name), "duplicate profile (first at line %d)", first)
			continue
		}
		r.pos.device[name] = k.Line
		var count int
		if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!int" || v.Decode(&count) != nil || count < min {
			d.fail(v.Line, field, name+": "+show(v), "want a count, a whole number of %d or more", min)
			continue
		}
		if count > 0 {
			r.Devices[name] = count
		}
	}
	return entries
}
