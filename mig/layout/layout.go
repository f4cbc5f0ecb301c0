package layout

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/gpumux/gpumux/gpu"
)

// The versions Parse understands; the version decides the format.
const (
	VersionGPUMux    = "gpumux.io/v1" // gpumux's own format
	VersionMIGParted = "v1"           // mig-parted's format
)

// MaxIndex is the largest GPU index a selector may name.
const MaxIndex = 1023

// Layout is a parsed layout file in either format.
type Layout struct {
	File    string // the name given to Parse, for messages
	Version string // VersionGPUMux or VersionMIGParted
	Config  string // the selected entry of mig-configs (mig-parted only)
	Rules   []Rule

	// PCIID returns a GPU's PCI ids. For calls it only for GPUs that a rule
	// with a device filter selects. Nil reads them from
	// /sys/bus/pci/devices/<bus id>/, which suits a real node; set it for
	// simulated nodes, whose bus ids are not in sysfs.
	PCIID func(g *gpu.GPU) (DeviceID, error)
}

// Rule says what the GPUs it selects should be.
type Rule struct {
	Line       int    // of the rule's first key, for messages
	Path       string // the rule's place in the file: "gpus[1]", "mig-configs.custom[0]"
	Match      Selector
	MIGEnabled bool
	Devices    map[string]int // profile name → count, never nil; empty when MIG is disabled

	pos positions
}

// positions are the lines of a rule's fields, for messages about them.
type positions struct {
	match, filter, enabled, devices int
	matchKey                        string         // "match" (gpumux's format) or "devices" (mig-parted's)
	device                          map[string]int // profile name → line
}

// Selector selects GPUs: exactly one of All, Indexes, UUIDs or Model is set,
// and DeviceIDs, when not empty, further keeps only GPUs with one of those PCI
// ids.
type Selector struct {
	All       bool
	Indexes   []int    // sorted, no duplicates
	UUIDs     []string // "GPU-…", no duplicates
	Model     string   // a path.Match glob over the GPU's model name ("*H200*")
	DeviceIDs []DeviceID
}

// DeviceID is a PCI identity as mig-parted's device-filter writes it: the
// device id in the high 16 bits and the vendor id in the low 16
// (0x233510DE: device 2335, vendor 10DE, an H200). Subsystem, packed the same
// way, narrows a filter to one board; 0 in a filter means any subsystem.
// NVML's PciInfo reports both packed like this (PciDeviceId, PciSubSystemId).
type DeviceID struct {
	ID        uint32
	Subsystem uint32
}

func (d DeviceID) String() string {
	if d.Subsystem != 0 {
		return fmt.Sprintf("0x%08X:0x%08X", d.ID, d.Subsystem)
	}
	return fmt.Sprintf("0x%08X", d.ID)
}

// matches reports whether hardware id hw passes filter d.
func (d DeviceID) matches(hw DeviceID) bool {
	return d.ID == hw.ID && (d.Subsystem == 0 || d.Subsystem == hw.Subsystem)
}

// String is the selector as gpumux's format writes its match: "all", "0-3,5",
// "GPU-…,GPU-…" or the model glob. It leaves out DeviceIDs.
func (s Selector) String() string {
	switch {
	case s.All:
		return "all"
	case len(s.Indexes) > 0:
		return formatIndexes(s.Indexes)
	case len(s.UUIDs) > 0:
		return strings.Join(s.UUIDs, ",")
	}
	return s.Model
}

// matchesGPU reports whether the GPU is selected, leaving out DeviceIDs.
func (s Selector) matchesGPU(g *gpu.GPU) bool {
	switch {
	case s.All:
		return true
	case len(s.Indexes) > 0:
		_, ok := slices.BinarySearch(s.Indexes, g.Index)
		return ok
	case len(s.UUIDs) > 0:
		return slices.Contains(s.UUIDs, g.UUID)
	}
	ok, _ := path.Match(s.Model, g.Model)
	return ok
}

// Want is what a layout wants of one GPU.
type Want struct {
	MIGEnabled bool
	Devices    map[string]int // profile name → count, never nil
	Rule       *Rule          // the rule that selected the GPU
}

// ErrInvalid is matched (errors.Is) by every error about a layout's content.
var ErrInvalid = errors.New("invalid MIG layout")

// Error is one problem in a layout file, printed as
// "file:line: field: value: what is valid". Parse and For return several
// joined with errors.Join, in line order.
type Error struct {
	File  string
	Line  int    // 0 when unknown
	Field string // where: "gpus[0].mig-devices"; empty for the whole file
	Value string // the value at fault as written; empty for none
	Msg   string // what is wrong and what is valid
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":" + strconv.Itoa(e.Line))
	}
	for _, s := range []string{e.Field, e.Value, e.Msg} {
		if s != "" {
			b.WriteString(": " + s)
		}
	}
	return b.String()
}

// Is makes every Error match ErrInvalid.
func (e *Error) Is(target error) bool { return target == ErrInvalid }

// joinSorted joins errs in line order.
func joinSorted(errs []*Error) error {
	if len(errs) == 0 {
		return nil
	}
	slices.SortStableFunc(errs, func(a, b *Error) int { return a.Line - b.Line })
	out := make([]error, len(errs))
	for i, e := range errs {
		out[i] = e
	}
	return errors.Join(out...)
}

// Parse reads a layout file; name is its name for messages. The version key
// picks the format: "gpumux.io/v1" for gpumux's, "v1" for mig-parted's. For
// mig-parted's format, config names the entry of mig-configs to use (it may be
// empty when the file has exactly one, as with mig-parted); for gpumux's
// format it must be empty. The whole file is checked, every config of a
// mig-parted file included, and every problem is reported.
func Parse(name string, src []byte, config string) (*Layout, error) {
	if name == "" {
		name = "layout"
	}
	d := &decoder{file: name, src: src, budget: maxNodes}
	root, err := d.document()
	if err != nil {
		return nil, err
	}
	l, err := d.layout(root, config)
	if err != nil {
		return nil, err
	}
	l.File = name
	return l, nil
}

// parseSelector parses gpumux's match: "all" or "*", GPU indexes and ranges
// ("0-3", "4,5"), GPU UUIDs ("GPU-…", comma separated) or a model glob
// ("*H200*"). It returns what is valid when s is not.
func parseSelector(s string) (Selector, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "":
		return Selector{}, errors.New(`empty; want GPU indexes ("0-3", "4,5"), GPU UUIDs ("GPU-…"), a model glob ("*H200*") or all`)
	case s == "all" || s == "*":
		return Selector{All: true}, nil
	case s[0] >= '0' && s[0] <= '9':
		seen := map[int]bool{}
		var idx []int
		parts := strings.Split(s, ",")
		for _, p := range parts {
			lo, hi, err := parseRange(strings.TrimSpace(p))
			if err != nil && len(parts) == 1 {
				return Selector{}, err
			}
			if err != nil {
				return Selector{}, fmt.Errorf("%q: %w", strings.TrimSpace(p), err)
			}
			for i := lo; i <= hi; i++ {
				if !seen[i] {
					seen[i] = true
					idx = append(idx, i)
				}
			}
		}
		slices.Sort(idx)
		return Selector{Indexes: idx}, nil
	case strings.HasPrefix(s, "GPU-"):
		var uuids []string
		for _, p := range strings.Split(s, ",") {
			p = strings.TrimSpace(p)
			if !strings.HasPrefix(p, "GPU-") || len(p) == len("GPU-") {
				return Selector{}, fmt.Errorf("%q is not a GPU UUID (GPU-…); do not mix UUIDs with indexes or globs", p)
			}
			if !slices.Contains(uuids, p) {
				uuids = append(uuids, p)
			}
		}
		return Selector{UUIDs: uuids}, nil
	case strings.HasPrefix(s, "MIG-"):
		return Selector{}, errors.New("a MIG device UUID; match selects whole GPUs: use the GPU's UUID (GPU-…), its index or its model")
	}
	if _, err := path.Match(s, ""); err != nil {
		return Selector{}, fmt.Errorf("not a valid model glob (%v); want a glob such as \"*H200*\"", err)
	}
	return Selector{Model: s}, nil
}

func parseRange(s string) (lo, hi int, err error) {
	a, b, isRange := strings.Cut(s, "-")
	lo, err = parseIndex(a)
	if err != nil {
		return 0, 0, fmt.Errorf("not a GPU index (0 to %d) or a range like 0-3", MaxIndex)
	}
	if !isRange {
		return lo, lo, nil
	}
	if hi, err = parseIndex(b); err != nil || hi < lo {
		return 0, 0, fmt.Errorf("not a GPU index range like 0-3 (indexes 0 to %d, low to high)", MaxIndex)
	}
	return lo, hi, nil
}

func parseIndex(s string) (int, error) {
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, errors.New("not a number")
	}
	n, err := strconv.Atoi(s)
	if err != nil || n > MaxIndex {
		return 0, errors.New("out of range")
	}
	return n, nil
}

// formatIndexes writes sorted indexes with runs as ranges: "0-3,5".
func formatIndexes(idx []int) string {
	var parts []string
	for i := 0; i < len(idx); {
		j := i
		for j+1 < len(idx) && idx[j+1] == idx[j]+1 {
			j++
		}
		switch {
		case j == i:
			parts = append(parts, strconv.Itoa(idx[i]))
		default:
			parts = append(parts, fmt.Sprintf("%d-%d", idx[i], idx[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// parseDeviceID parses one device-filter entry: "0x233510DE", optionally
// with a subsystem, "0x233510DE:0x18BF10DE".
func parseDeviceID(s string) (DeviceID, bool) {
	id, sub, hasSub := strings.Cut(s, ":")
	var d DeviceID
	var ok bool
	if d.ID, ok = parseHex32(id); !ok {
		return DeviceID{}, false
	}
	if hasSub {
		if d.Subsystem, ok = parseHex32(sub); !ok {
			return DeviceID{}, false
		}
	}
	return d, true
}

func parseHex32(s string) (uint32, bool) {
	if len(s) < 3 || len(s) > 10 || (s[:2] != "0x" && s[:2] != "0X") {
		return 0, false
	}
	for _, c := range s[2:] {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return 0, false
		}
	}
	v, err := strconv.ParseUint(s[2:], 16, 32)
	if err != nil || v>>16 == 0 || v&0xFFFF == 0 { // a device and a vendor
		return 0, false
	}
	return uint32(v), true
}
