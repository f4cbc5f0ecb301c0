package mig

import (
	"errors"
	"fmt"
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
// the search is exhaustive, so an error means no placement exists.
func Fit(profiles []gpu.MIGProfile, want map[string]int) ([]Slot, error) {
	return FitAround(profiles, want, nil)
}

// FitAround is Fit on a GPU whose placements occupied are taken (instances
// that stay). Among the free placements of a profile it tries first those
// that block the fewest placements of other profiles, so that small
// instances leave room for large ones (a 1g goes to slot 6 before slot 0,
// which a 4g needs).
func FitAround(profiles []gpu.MIGProfile, want map[string]int, occupied []gpu.Placement) ([]Slot, error) {
	byName := map[string]gpu.MIGProfile{}
	for _, p := range profiles {
		byName[p.Name] = p
	}
	var todo []gpu.MIGProfile
	slots := 0
	for name, n := range want {
		p, ok := byName[name]
		if !ok {
			return nil, fmt.Errorf("%w: profile %q does not exist on this GPU", ErrInfeasible, name)
		}
		if n > p.MaxCount {
			return nil, fmt.Errorf("%w: %d× %s: at most %d fit", ErrInfeasible, n, name, p.MaxCount)
		}
		for i := 0; i < n; i++ {
			todo = append(todo, p)
		}
		if len(p.Placements) > 0 {
			slots += n * p.Placements[0].Size
		}
	}
	used := 0
	for _, pl := range occupied {
		used += pl.Size
	}
	if slots+used > 8 {
		if used > 0 {
			return nil, fmt.Errorf("%w: %s need %d memory slots; the GPU has 8, and %d are held by instances that stay", ErrInfeasible, describe(want), slots, used)
		}
		return nil, fmt.Errorf("%w: %s need %d memory slots, the GPU has 8", ErrInfeasible, describe(want), slots)
	}
	sort.SliceStable(todo, func(i, j int) bool {
		if todo[i].Slices != todo[j].Slices {
			return todo[i].Slices > todo[j].Slices
		}
		return todo[i].Name < todo[j].Name
	})
	cost := blockingCost(profiles)
	out := make([]Slot, 0, len(todo))
	if !place(todo, occupied, cost, &out) {
		if len(occupied) > 0 {
			return nil, fmt.Errorf("%w: no non-overlapping placements exist for %s around the instances that stay (%s)", ErrInfeasible, describe(want), placements(occupied))
		}
		return nil, fmt.Errorf("%w: no non-overlapping placements exist for %s", ErrInfeasible, describe(want))
	}
	return out, nil
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

// describe prints a layout as "2× 3g.71gb + 1× 1g.18gb", largest count first.
func describe(want map[string]int) string {
	names := make([]string, 0, len(want))
	for n := range want {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%d× %s", want[n], n)
	}
	return strings.Join(parts, " + ")
}
