package share

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Level is how much isolation an auto request needs. It steers the choice of
// mechanism only when the request names none.
type Level string

// Isolation levels of an auto request.
const (
	// LevelStrict: hardware isolation of memory, compute and faults (a MIG
	// instance or a whole GPU). The default.
	LevelStrict Level = "strict"
	// LevelStandard: hard memory and compute limits, shared fate (an MPS
	// share), or better.
	LevelStandard Level = "standard"
	// LevelNone: nothing enforced (a time-slice replica), or better.
	LevelNone Level = "none"
)

// Levels lists the isolation levels, strongest first.
var Levels = []Level{LevelStrict, LevelStandard, LevelNone}

// ParseLevel validates an isolation level name.
func ParseLevel(s string) (Level, error) {
	for _, l := range Levels {
		if string(l) == s {
			return l, nil
		}
	}
	return "", fmt.Errorf("unknown isolation level %q (valid: strict, standard, none)", s)
}

// Request is what a container asks for.
type Request struct {
	Mechanism      Mechanism // "" means auto
	Isolation      Level     // used by auto: strict | standard | none; "" means strict
	MemoryMiB      uint64    // minimum memory per share, 0 = any
	ComputePercent int       // minimum compute percent per share, 0 = any
	Count          int       // how many shares (GPUs); 0 means 1
}

// ErrNoFit is wrapped by Choose's errors when no free shares satisfy a valid
// request (as opposed to a malformed one).
var ErrNoFit = errors.New("no share fits")

// autoPreference is the auto policy for the node's own GPUs: per isolation
// level, the mechanisms tried in order. Each level accepts the mechanisms
// that isolate at least as much as it asks, and prefers the one that shares
// the hardware most, so that strong isolation is left for those who ask for
// it.
var autoPreference = map[Level][]Mechanism{
	LevelStrict:   {MIG, Exclusive},
	LevelStandard: {MPS, MIG, Exclusive},
	LevelNone:     {TimeSlice, MPS, MIG, Exclusive},
}

// autoFallback is what auto tries when none of the node's own mechanisms
// can serve a request: a remote share, at the levels its isolation
// satisfies (a hard memory quota, a shared server: as MPS). A node uses its
// own GPUs first; remote GPUs are slower to reach and shared with other
// nodes.
var autoFallback = map[Level][]Mechanism{
	LevelStandard: {Remote},
	LevelNone:     {Remote},
}

// AutoMechanisms returns the node-local mechanisms auto tries for a level,
// in order ("" is strict), or nil for an unknown level.
func AutoMechanisms(l Level) []Mechanism {
	if l == "" {
		l = LevelStrict
	}
	return append([]Mechanism(nil), autoPreference[l]...)
}

// AutoFallback returns the mechanisms auto tries for a level after
// AutoMechanisms' when the catalog offers them: remote for standard and
// none, nothing for strict.
func AutoFallback(l Level) []Mechanism {
	if l == "" {
		l = LevelStrict
	}
	return append([]Mechanism(nil), autoFallback[l]...)
}

// Choose picks req.Count shares of the catalog that are free (free(s) is
// true) and fit req. A share fits when its advertised memory and compute
// percent (the group attributes a Nomad job constrains on) are at least what
// the request asks; zero asks for any.
//
// The policy, deterministic for a given catalog and free set:
//
//	request                    mechanisms tried, in order; the first that has Count fitting free shares wins
//	mechanism = X              X only (exclusive, mig, mps, timeslice or remote)
//	auto, isolation = none     timeslice, mps, mig, exclusive, then remote
//	auto, isolation = standard mps, mig, exclusive, then remote
//	auto, isolation = strict   mig, exclusive (also when isolation is "")
//
// Remote is tried by auto only when the catalog offers remote shares at all
// (the node config has a remote block, see AutoFallback), and only after
// every local mechanism failed.
//
// Within a mechanism the smallest fitting shares win: least memory, then
// least compute percent, then fewest SMs, then share ID. One request never
// mixes mechanisms. With Count > 1, every share must fit on its own, and:
//
//   - mps shares all come from one device (a process talks to one MPS server;
//     see mpsEdits), the device whose smallest Count fitting shares are the
//     smallest in total (memory, then compute, then IDs); so do remote shares
//     (the interposer talks to one GPU of one server; see remoteEdits);
//   - time-slice replicas come from distinct GPUs (two replicas of one GPU
//     would show the container one GPU);
//   - MIG instances and whole GPUs are the Count smallest that fit, on any GPUs.
//
// Errors for requests that cannot be satisfied wrap ErrNoFit and name what was
// asked and what is free, counted per group name. Malformed requests (unknown
// mechanism or level, an isolation level with an explicit mechanism, negative
// Count, compute over 100, an unimplemented mechanism) are errors that do not
// wrap ErrNoFit.
func Choose(c *Catalog, free func(Share) bool, req Request) ([]Share, error) {
	count := req.Count
	if count == 0 {
		count = 1
	}
	if count < 0 {
		return nil, fmt.Errorf("invalid request: count %d: want at least 1", req.Count)
	}
	if req.ComputePercent < 0 || req.ComputePercent > 100 {
		return nil, fmt.Errorf("invalid request: compute %d%%: want 0 (any) to 100", req.ComputePercent)
	}
	var mechs []Mechanism
	auto := req.Mechanism == ""
	level := req.Isolation
	if auto {
		if level == "" {
			level = LevelStrict
		}
		if _, err := ParseLevel(string(level)); err != nil {
			return nil, fmt.Errorf("invalid request: %w", err)
		}
		mechs = autoPreference[level]
		for _, m := range autoFallback[level] {
			if c.offers(m) {
				mechs = append(slices.Clone(mechs), m)
			}
		}
	} else {
		if _, err := ParseMechanism(string(req.Mechanism)); err != nil {
			return nil, fmt.Errorf("invalid request: %w", err)
		}
		if req.Isolation != "" {
			return nil, fmt.Errorf("invalid request: isolation %q steers mechanism auto only; mechanism %q was asked for", req.Isolation, req.Mechanism)
		}
		mechs = []Mechanism{req.Mechanism}
	}

	// The free shares, with their group names, in catalog order.
	var frees []Share
	groupOf := map[string]string{}
	if c != nil {
		for _, g := range c.Groups {
			for _, s := range g.Shares {
				if free(s) {
					frees = append(frees, s)
					groupOf[s.ID] = g.Name
				}
			}
		}
	}
	spreadOf := map[string]Spread{}
	if c != nil {
		for _, g := range c.Groups {
			for _, s := range g.Shares {
				spreadOf[s.ID] = g.Spread
			}
		}
	}
	for _, m := range mechs {
		// The fitting shares of m, by how their groups spread a request
		// (limited and unlimited time-slice replicas differ), each class
		// tried in turn.
		byClass := map[Spread][]Share{}
		var classes []Spread
		for _, s := range frees {
			if s.Mechanism == m && fits(s, req) {
				sp := spreadOf[s.ID]
				if _, ok := byClass[sp]; !ok {
					classes = append(classes, sp)
				}
				byClass[sp] = append(byClass[sp], s)
			}
		}
		for _, sp := range classes {
			fit := byClass[sp]
			sort.Slice(fit, func(i, j int) bool { return smaller(fit[i], fit[j]) })
			if got := pick(sp, fit, count); got != nil {
				return got, nil
			}
		}
	}
	return nil, c.noFit(req, count, auto, level, mechs, frees, groupOf)
}

// offers reports whether the catalog has shares of mechanism m, free or not.
func (c *Catalog) offers(m Mechanism) bool {
	if c == nil {
		return false
	}
	for _, g := range c.Groups {
		if g.Mechanism == m && len(g.Shares) > 0 {
			return true
		}
	}
	return false
}

func fits(s Share, req Request) bool {
	return s.MemoryMiB >= req.MemoryMiB && s.ComputePercent >= req.ComputePercent
}

// smaller orders shares smallest first: memory, compute percent, SMs, ID.
func smaller(a, b Share) bool {
	if a.MemoryMiB != b.MemoryMiB {
		return a.MemoryMiB < b.MemoryMiB
	}
	if a.ComputePercent != b.ComputePercent {
		return a.ComputePercent < b.ComputePercent
	}
	if a.SMCount != b.SMCount {
		return a.SMCount < b.SMCount
	}
	return a.ID < b.ID
}

// spread is how the catalog's groups of mechanism m spread a request.
func (c *Catalog) spread(m Mechanism) Spread {
	if c != nil {
		for _, g := range c.Groups {
			if g.Mechanism == m {
				return g.Spread
			}
		}
	}
	return SpreadAny
}

// pick takes count shares from fit (sorted smallest first), spread as
// asked, or returns nil.
func pick(spread Spread, fit []Share, count int) []Share {
	if len(fit) < count {
		return nil
	}
	switch spread {
	case SpreadOneDevice:
		byParent := map[string][]Share{}
		var parents []string
		for _, s := range fit {
			p := s.Parent()
			if _, ok := byParent[p]; !ok {
				parents = append(parents, p)
			}
			byParent[p] = append(byParent[p], s)
		}
		var best []Share
		for _, p := range parents {
			if ss := byParent[p]; len(ss) >= count && (best == nil || smallerSet(ss[:count], best)) {
				best = ss[:count]
			}
		}
		return clone(best)
	case SpreadAlone:
		if count > 1 {
			return nil
		}
		return clone(fit[:1])
	case SpreadDistinctGPUs:
		var out []Share
		used := map[string]bool{}
		for _, s := range fit {
			if !used[s.Parent()] {
				used[s.Parent()] = true
				out = append(out, s)
				if len(out) == count {
					return out
				}
			}
		}
		return nil
	default:
		return clone(fit[:count])
	}
}

func clone(ss []Share) []Share {
	if ss == nil {
		return nil
	}
	return append([]Share(nil), ss...)
}

// smallerSet orders equal-sized sets of shares (each sorted smallest first):
// total memory, total compute percent, then the shares in order.
func smallerSet(a, b []Share) bool {
	var am, bm uint64
	var ac, bc int
	for i := range a {
		am, bm = am+a[i].MemoryMiB, bm+b[i].MemoryMiB
		ac, bc = ac+a[i].ComputePercent, bc+b[i].ComputePercent
	}
	if am != bm {
		return am < bm
	}
	if ac != bc {
		return ac < bc
	}
	for i := range a {
		if a[i].ID != b[i].ID {
			return smaller(a[i], b[i])
		}
	}
	return false
}

// nouns name one share of a mechanism, and several, with the mechanism's
// own name in them (what the user wrote).
var nouns = map[Mechanism][2]string{
	Exclusive: {"exclusive GPU", "exclusive GPUs"},
	MIG:       {"MIG instance", "MIG instances"},
	MPS:       {"mps share", "mps shares"},
	TimeSlice: {"timeslice replica", "timeslice replicas"},
	Remote:    {"remote share", "remote shares"},
}

func noun(m Mechanism) (one, many string) {
	if n, ok := nouns[m]; ok {
		return n[0], n[1]
	}
	return string(m) + " share", string(m) + " shares"
}

// noFit explains why no shares fit, e.g.
//
//	no free MIG instance with ≥ 30 GiB (30720 MiB); free: 2× H200-mig-1g.18gb
//	no 2 free mps shares on one device with ≥ 40% compute; free: 3× H200-mps-25pct
//	no free share for isolation strict (tried mig, exclusive) with ≥ 200 GiB (204800 MiB); free: 7× H200
func (c *Catalog) noFit(req Request, count int, auto bool, level Level, mechs []Mechanism, frees []Share, groupOf map[string]string) error {
	var what string
	if auto {
		tried := make([]string, len(mechs))
		for i, m := range mechs {
			tried[i] = string(m)
		}
		if count == 1 {
			what = "free share"
		} else {
			what = fmt.Sprintf("%d free shares of one mechanism", count)
		}
		what += fmt.Sprintf(" for isolation %s (tried %s)", level, strings.Join(tried, ", "))
	} else {
		one, many := noun(req.Mechanism)
		if count == 1 {
			what = "free " + one
		} else {
			what = fmt.Sprintf("%d free %s", count, many)
			switch c.spread(req.Mechanism) {
			case SpreadOneDevice:
				what += " on one device"
			case SpreadDistinctGPUs:
				what += " on distinct GPUs"
			case SpreadAlone:
				what += " (a limited one is alone in its task)"
			}
		}
	}
	var cond []string
	if req.MemoryMiB > 0 {
		cond = append(cond, "≥ "+FormatMiB(req.MemoryMiB))
	}
	if req.ComputePercent > 0 {
		cond = append(cond, fmt.Sprintf("≥ %d%% compute", req.ComputePercent))
	}
	if len(cond) > 0 {
		what += " with " + strings.Join(cond, " and ")
	}

	considered := map[Mechanism]bool{}
	for _, m := range mechs {
		considered[m] = true
	}
	var mine, other []Share
	for _, s := range frees {
		if considered[s.Mechanism] {
			mine = append(mine, s)
		} else {
			other = append(other, s)
		}
	}
	var freeText string
	switch {
	case len(mine) > 0:
		freeText = countByGroup(mine, groupOf)
	case len(other) > 0:
		_, many := noun(req.Mechanism)
		if auto {
			names := make([]string, len(mechs))
			for i, m := range mechs {
				names[i] = string(m)
			}
			many = strings.Join(names, " or ") + " shares"
		}
		freeText = fmt.Sprintf("no %s (other free shares: %s)", many, countByGroup(other, groupOf))
	default:
		freeText = "none"
	}
	return noFitError(fmt.Sprintf("no %s; free: %s", what, freeText))
}

// noFitError reads as what was asked and what is free, and is ErrNoFit.
type noFitError string

func (e noFitError) Error() string { return string(e) }
func (e noFitError) Unwrap() error { return ErrNoFit }

// countByGroup writes "2× H200-mig-1g.18gb, 1× H200" in the order the groups
// first appear.
func countByGroup(ss []Share, groupOf map[string]string) string {
	counts := map[string]int{}
	var order []string
	for _, s := range ss {
		g := groupOf[s.ID]
		if counts[g] == 0 {
			order = append(order, g)
		}
		counts[g]++
	}
	parts := make([]string, len(order))
	for i, g := range order {
		parts[i] = fmt.Sprintf("%d× %s", counts[g], g)
	}
	return strings.Join(parts, ", ")
}

// FormatMiB writes a memory size for people: "30 GiB (30720 MiB)" when it is
// whole GiB, else "1536 MiB".
func FormatMiB(mib uint64) string {
	if mib >= 1024 && mib%1024 == 0 {
		return fmt.Sprintf("%d GiB (%d MiB)", mib/1024, mib)
	}
	return fmt.Sprintf("%d MiB", mib)
}
