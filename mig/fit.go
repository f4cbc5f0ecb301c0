package mig

import (
	"errors"
	"fmt"
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
	if slots > 8 {
		return nil, fmt.Errorf("%w: %s need %d memory slots, the GPU has 8", ErrInfeasible, describe(want), slots)
	}
	sort.SliceStable(todo, func(i, j int) bool {
		if todo[i].Slices != todo[j].Slices {
			return todo[i].Slices > todo[j].Slices
		}
		return todo[i].Name < todo[j].Name
	})
	out := make([]Slot, 0, len(todo))
	if !place(todo, &out) {
		return nil, fmt.Errorf("%w: no non-overlapping placements exist for %s", ErrInfeasible, describe(want))
	}
	return out, nil
}

func place(todo []gpu.MIGProfile, done *[]Slot) bool {
	if len(todo) == 0 {
		return true
	}
	p := todo[0]
	for _, pl := range p.Placements {
		if overlapsAny(pl, *done) {
			continue
		}
		*done = append(*done, Slot{Profile: p, Placement: pl})
		if place(todo[1:], done) {
			return true
		}
		*done = (*done)[:len(*done)-1]
	}
	return false
}

func overlapsAny(pl gpu.Placement, slots []Slot) bool {
	for _, s := range slots {
		if pl.Overlaps(s.Placement) {
			return true
		}
	}
	return false
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
