package mig

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"sort"
	"strings"

	"github.com/gpumux/gpumux/gpu"
)

// ErrInfeasible means the wanted instances cannot all be placed on the GPU.
var ErrInfeasible = errors.New("layout does not fit")

// Slot is one instance to create: a profile at a placement.
type Slot struct {
	Profile   gpu.MIGProfile
	Placement gpu.Placement
}

// Fit finds placements for want (profile name → count) on a GPU with the given
// profiles, none overlapping each other. Larger instances are placed first,
// each at the first free placement, backtracking when a later one cannot fit;
// the search is exhaustive, so an error means no placement exists. The error
// (ErrInfeasible) says why: the smallest set of wanted profiles that cannot
// be placed together, their placements and the memory slots they compete
// for ("1× 4g.71gb (at 0:4) and 2× 2g.35gb (at 0:2, 2:2, 4:2) overlap on
// memory slots 0-3"), and around instances that stay (FitAroundInstances),
// those in the way, with their slots.
func Fit(profiles []gpu.MIGProfile, want map[string]int) ([]Slot, error) {
	return FitAround(profiles, want, nil)
}

// FitAround is Fit on a GPU whose placements occupied are taken (instances
// that stay). Among the free placements of a profile it tries first those
// that block the fewest placements of other profiles, so that small
// instances leave room for large ones (a 1g goes to slot 6 before slot 0,
// which a 4g needs).
func FitAround(profiles []gpu.MIGProfile, want map[string]int, occupied []gpu.Placement) ([]Slot, error) {
	stay := make([]occupant, len(occupied))
	for i, pl := range occupied {
		stay[i] = occupant{placement: pl}
	}
	return fitAround(profiles, want, stay)
}

// FitAroundInstances is FitAround around instances that stay; when the
// wanted ones cannot fit, the error names the staying instances in the way.
func FitAroundInstances(profiles []gpu.MIGProfile, want map[string]int, stay []gpu.MIGInstance) ([]Slot, error) {
	occ := make([]occupant, len(stay))
	for i, inst := range stay {
		occ[i] = occupant{profile: inst.Profile, placement: inst.Placement}
	}
	return fitAround(profiles, want, occ)
}

// occupant is a placement taken by an instance that stays.
type occupant struct {
	profile   string // "" when unknown
	placement gpu.Placement
}

func (o occupant) String() string {
	name := o.profile
	if name == "" {
		name = "the instance"
	}
	return fmt.Sprintf("%s at %s (%s)", name, o.placement, slotNames(cover(o.placement)))
}

func occupantList(occ []occupant) string {
	s := make([]string, len(occ))
	for i, o := range occ {
		if o.profile == "" {
			s[i] = o.placement.String()
		} else {
			s[i] = fmt.Sprintf("%s at %s", o.profile, o.placement)
		}
	}
	return strings.Join(s, ", ")
}

func fitAround(profiles []gpu.MIGProfile, want map[string]int, stay []occupant) ([]Slot, error) {
	byName := map[string]gpu.MIGProfile{}
	for _, p := range profiles {
		byName[p.Name] = p
	}
	slots := 0
	for name, n := range want {
		p, ok := byName[name]
		if !ok {
			return nil, fmt.Errorf("%w: profile %q does not exist on this GPU", ErrInfeasible, name)
		}
		if n > p.MaxCount {
			return nil, fmt.Errorf("%w: %d× %s: at most %d fit", ErrInfeasible, n, name, p.MaxCount)
		}
		if len(p.Placements) > 0 {
			slots += n * p.Placements[0].Size
		}
	}
	occupied := make([]gpu.Placement, len(stay))
	used := 0
	for i, o := range stay {
		occupied[i] = o.placement
		used += o.placement.Size
	}
	if slots+used > 8 {
		if used > 0 {
			return nil, fmt.Errorf("%w: %s need %d memory slots; the GPU has 8, and %d %s held by instances that stay (%s)", ErrInfeasible, describe(want), slots, used, plural(used, "is", "are"), occupantList(stay))
		}
		return nil, fmt.Errorf("%w: %s need %d memory slots, the GPU has 8", ErrInfeasible, describe(want), slots)
	}
	cost := blockingCost(profiles)
	out, ok := fitTodo(byName, want, occupied, cost)
	if !ok {
		why := explain(byName, want, stay, cost)
		if len(stay) > 0 {
			return nil, fmt.Errorf("%w: no non-overlapping placements exist for %s around the instances that stay (%s)%s", ErrInfeasible, describe(want), occupantList(stay), why)
		}
		return nil, fmt.Errorf("%w: no non-overlapping placements exist for %s%s", ErrInfeasible, describe(want), why)
	}
	return out, nil
}

// fitTodo places want around occupied, larger instances first; it reports
// false when no non-overlapping placements exist.
func fitTodo(byName map[string]gpu.MIGProfile, want map[string]int, occupied []gpu.Placement, cost map[gpu.Placement]int) ([]Slot, bool) {
	var todo []gpu.MIGProfile
	for name, n := range want {
		for i := 0; i < n; i++ {
			todo = append(todo, byName[name])
		}
	}
	sort.SliceStable(todo, func(i, j int) bool {
		if todo[i].Slices != todo[j].Slices {
			return todo[i].Slices > todo[j].Slices
		}
		return todo[i].Name < todo[j].Name
	})
	out := make([]Slot, 0, len(todo))
	if !place(todo, occupied, cost, &out) {
		return nil, false
	}
	return out, true
}

// explain says why want cannot be placed around stay: it finds the smallest
// set of wanted profiles that cannot be placed together and names them, the
// memory slots their placements compete for, and the instances that stay
// in their way. It returns "" when it finds no such set, else ": " and the
// reason.
func explain(byName map[string]gpu.MIGProfile, want map[string]int, stay []occupant, cost map[gpu.Placement]int) string {
	var names []string
	for name, n := range want {
		if n > 0 {
			names = append(names, name)
		}
	}
	// Larger profiles first, as the reasons read best that way.
	sort.Slice(names, func(i, j int) bool {
		a, b := byName[names[i]], byName[names[j]]
		if a.Slices != b.Slices {
			return a.Slices > b.Slices
		}
		return a.Name < b.Name
	})
	occupied := make([]gpu.Placement, len(stay))
	for i, o := range stay {
		occupied[i] = o.placement
	}
	for k := 1; k <= len(names); k++ {
		var found []string
		combinations(names, k, func(subset []string) bool {
			sub := map[string]int{}
			for _, n := range subset {
				sub[n] = want[n]
			}
			if _, ok := fitTodo(byName, sub, occupied, cost); !ok {
				found = slices.Clone(subset)
				return false
			}
			return true
		})
		if found == nil {
			continue
		}
		if k == 1 {
			return ": " + explainOne(byName[found[0]], want[found[0]], stay)
		}
		return ": " + explainMany(byName, found, want, stay)
	}
	return ""
}

// combinations calls fn with every k-element subset of list, in order,
// until fn returns false.
func combinations(list []string, k int, fn func([]string) bool) {
	subset := make([]string, 0, k)
	var rec func(start int) bool
	rec = func(start int) bool {
		if len(subset) == k {
			return fn(subset)
		}
		for i := start; i <= len(list)-(k-len(subset)); i++ {
			subset = append(subset, list[i])
			if !rec(i + 1) {
				return false
			}
			subset = subset[:len(subset)-1]
		}
		return true
	}
	rec(0)
}

// explainOne says why n instances of p do not fit around stay: too few of
// its placements are free, and which instances that stay take the others.
func explainOne(p gpu.MIGProfile, n int, stay []occupant) string {
	var free []gpu.Placement
	var blocked []string
	for _, pl := range p.Placements {
		var in []string
		for _, o := range stay {
			if pl.Overlaps(o.placement) {
				in = append(in, o.String())
			}
		}
		if len(in) == 0 {
			free = append(free, pl)
			continue
		}
		blocked = append(blocked, fmt.Sprintf("%s overlaps %s", pl, strings.Join(in, " and ")))
	}
	if len(p.Placements) == 1 && len(blocked) == 1 {
		return fmt.Sprintf("%d× %s can only be placed at %s, which %s, an instance that stays", n, p.Name, p.Placements[0], strings.TrimPrefix(blocked[0], p.Placements[0].String()+" "))
	}
	s := fmt.Sprintf("%d× %s %s %s of its placements %s, and ", n, p.Name, plural(n, "needs", "need"), plural(n, "one", fmt.Sprint(n)), placements(p.Placements))
	switch len(free) {
	case 0:
		s += "none is free"
	case 1:
		s += "only " + free[0].String() + " is free"
	default:
		s += "only " + placements(free) + " are free"
	}
	if len(blocked) > 0 {
		s += ": " + strings.Join(blocked, ", ") + plural(len(blocked), ", an instance that stays", "; those instances stay")
	}
	return s
}

func plural[T any](n int, one, many T) T {
	if n == 1 {
		return one
	}
	return many
}

// explainMany describes a set of profiles (names, want's counts) that cannot
// be placed together although each fits alone: the memory slots their free
// placements compete for, how many slots they need against how many their
// placements cover, and the instances that stay in their way.
func explainMany(byName map[string]gpu.MIGProfile, names []string, want map[string]int, stay []occupant) string {
	var (
		parts   []string
		covers  []uint16
		need    int
		blocked []string
	)
	for _, name := range names {
		p := byName[name]
		var free []gpu.Placement
		for _, pl := range p.Placements {
			ok := true
			for _, o := range stay {
				if pl.Overlaps(o.placement) {
					ok = false
					if s := o.String(); !slices.Contains(blocked, s) {
						blocked = append(blocked, s)
					}
				}
			}
			if ok {
				free = append(free, pl)
			}
		}
		parts = append(parts, fmt.Sprintf("%d× %s (at %s)", want[name], name, placements(free)))
		covers = append(covers, cover(free...))
		if len(p.Placements) > 0 {
			need += want[name] * p.Placements[0].Size
		}
	}
	var contested, all uint16
	for i := range covers {
		all |= covers[i]
		for j := i + 1; j < len(covers); j++ {
			contested |= covers[i] & covers[j]
		}
	}
	list := strings.Join(parts[:len(parts)-1], ", ") + " and " + parts[len(parts)-1]
	s := fmt.Sprintf("%s overlap on memory %s", list, slotNames(contested))
	if usable := bits.OnesCount16(all); need > usable {
		s += fmt.Sprintf("; together they need %d memory slots, and their placements cover only %s", need, slotNames(all))
	}
	if len(blocked) > 0 {
		s += "; in the way: " + strings.Join(blocked, ", ") + plural(len(blocked), ", which stays", ", which stay")
	}
	return s
}

// cover is the set of memory slots the placements take, as a bit mask.
func cover(pls ...gpu.Placement) uint16 {
	var m uint16
	for _, pl := range pls {
		for s := pl.Start; s < pl.Start+pl.Size && s < 16; s++ {
			m |= 1 << s
		}
	}
	return m
}

// slotNames writes a set of memory slots as "slot 3", "slots 0-3" or
// "slots 0-1, 4-5".
func slotNames(m uint16) string {
	var runs []string
	n := 0
	for s := 0; s < 16; s++ {
		if m&(1<<s) == 0 {
			continue
		}
		e := s
		for e+1 < 16 && m&(1<<(e+1)) != 0 {
			e++
		}
		if e == s {
			runs = append(runs, fmt.Sprint(s))
		} else {
			runs = append(runs, fmt.Sprintf("%d-%d", s, e))
		}
		n += e - s + 1
		s = e
	}
	if n == 1 {
		return "slot " + runs[0]
	}
	return "slots " + strings.Join(runs, ", ")
}

func place(todo []gpu.MIGProfile, occupied []gpu.Placement, cost map[gpu.Placement]int, done *[]Slot) bool {
	if len(todo) == 0 {
		return true
	}
	p := todo[0]
	candidates := slices.Clone(p.Placements)
	sort.SliceStable(candidates, func(i, j int) bool { return cost[candidates[i]] < cost[candidates[j]] })
	for _, pl := range candidates {
		if overlapsAny(pl, *done) || overlapsPlacements(pl, occupied) {
			continue
		}
		*done = append(*done, Slot{Profile: p, Placement: pl})
		if place(todo[1:], occupied, cost, done) {
			return true
		}
		*done = (*done)[:len(*done)-1]
	}
	return false
}

// blockingCost counts, for every placement of the GPU's profiles, how many
// placements of its profiles it overlaps: a placement that blocks few
// leaves the most room.
func blockingCost(profiles []gpu.MIGProfile) map[gpu.Placement]int {
	var all []gpu.Placement
	for _, p := range profiles {
		all = append(all, p.Placements...)
	}
	cost := map[gpu.Placement]int{}
	for _, a := range all {
		if _, done := cost[a]; done {
			continue
		}
		for _, b := range all {
			if a.Overlaps(b) {
				cost[a]++
			}
		}
	}
	return cost
}

func overlapsAny(pl gpu.Placement, slots []Slot) bool {
	for _, s := range slots {
		if pl.Overlaps(s.Placement) {
			return true
		}
	}
	return false
}

func overlapsPlacements(pl gpu.Placement, occupied []gpu.Placement) bool {
	for _, o := range occupied {
		if pl.Overlaps(o) {
			return true
		}
	}
	return false
}

func placements(pls []gpu.Placement) string {
	s := make([]string, len(pls))
	for i, pl := range pls {
		s[i] = pl.String()
	}
	return strings.Join(s, ", ")
}

// describe prints a layout as "1× 1g.18gb + 2× 3g.71gb", by profile name,
// leaving out profiles wanted 0 times.
func describe(want map[string]int) string {
	names := make([]string, 0, len(want))
	for n, c := range want {
		if c > 0 {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%d× %s", want[n], n)
	}
	return strings.Join(parts, " + ")
}
