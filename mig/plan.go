package mig

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/gpumux/gpumux/gpu"
)

// Plan is how a GPU gets from its MIG instances to a wanted layout.
type Plan struct {
	Keep    []gpu.MIGInstance // instances that stay, untouched
	Destroy []gpu.MIGInstance
	Create  []Slot
}

// Changes reports whether the plan changes anything.
func (p *Plan) Changes() bool { return len(p.Destroy) > 0 || len(p.Create) > 0 }

// PlanGPU plans GPU g's way to want (profile name → count). It keeps every
// instance that can stay — busy ones first, since they must — and places the
// new instances around them where they leave the most room. Only if the new
// instances cannot fit around every instance that could stay does it give
// up keeping the idle ones. A busy instance (busy reports processes by MIG
// UUID) is never destroyed unless force; the plan is refused with ErrBusy
// instead. A layout that cannot fit is refused with ErrInfeasible and why.
// GPU instances without a compute instance (g.MIGIncomplete) are always
// destroyed, first: nothing can use them, and their slots are free for the
// new instances.
func PlanGPU(g *gpu.GPU, want map[string]int, busy func(uuid string) bool, force bool) (*Plan, error) {
	plan, err := planInstances(g, want, busy, force)
	if err != nil {
		return nil, err
	}
	plan.Destroy = append(slices.Clone(g.MIGIncomplete), plan.Destroy...)
	return plan, nil
}

func planInstances(g *gpu.GPU, want map[string]int, busy func(uuid string) bool, force bool) (*Plan, error) {
	isBusy := func(i gpu.MIGInstance) bool { return busy != nil && busy(i.UUID) }
	byProfile := map[string][]gpu.MIGInstance{}
	for _, inst := range g.MIGInstances {
		byProfile[inst.Profile] = append(byProfile[inst.Profile], inst)
	}
	var keep, drop []gpu.MIGInstance
	for profile, insts := range byProfile {
		sort.SliceStable(insts, func(i, j int) bool {
			if isBusy(insts[i]) != isBusy(insts[j]) {
				return isBusy(insts[i])
			}
			return insts[i].GIID < insts[j].GIID
		})
		n := min(want[profile], len(insts))
		keep = append(keep, insts[:n]...)
		drop = append(drop, insts[n:]...)
	}
	if err := refuseBusy(g, drop, isBusy, force); err != nil {
		return nil, err
	}
	plan, err := planAround(g, want, keep, drop)
	if err == nil {
		return plan, nil
	}
	// Keeping every instance that could stay leaves no room: keep only the
	// busy ones and rebuild the rest.
	var busyKeep, idleKeep []gpu.MIGInstance
	for _, inst := range keep {
		if isBusy(inst) {
			busyKeep = append(busyKeep, inst)
		} else {
			idleKeep = append(idleKeep, inst)
		}
	}
	if len(idleKeep) == 0 {
		return nil, fmt.Errorf("GPU %d (%s): %w", g.Index, g.Model, err)
	}
	plan, err2 := planAround(g, want, busyKeep, append(drop, idleKeep...))
	if err2 != nil {
		return nil, fmt.Errorf("GPU %d (%s): %w", g.Index, g.Model, err2)
	}
	return plan, nil
}

// planAround plans the instances want still needs beyond keep, placed
// around keep, with drop destroyed.
func planAround(g *gpu.GPU, want map[string]int, keep, drop []gpu.MIGInstance) (*Plan, error) {
	need := map[string]int{}
	for profile, n := range want {
		need[profile] = n
	}
	for _, inst := range keep {
		need[inst.Profile]--
	}
	for profile, n := range need {
		if n <= 0 {
			delete(need, profile)
		}
	}
	slots, err := FitAroundInstances(g.MIGProfiles, need, keep)
	if err != nil {
		return nil, err
	}
	sortInstances(keep)
	sortInstances(drop)
	return &Plan{Keep: keep, Destroy: drop, Create: slots}, nil
}

func refuseBusy(g *gpu.GPU, drop []gpu.MIGInstance, isBusy func(gpu.MIGInstance) bool, force bool) error {
	if force {
		return nil
	}
	var busy []string
	for _, inst := range drop {
		if isBusy(inst) {
			busy = append(busy, fmt.Sprintf("%s (%s at %s)", inst.UUID, inst.Profile, inst.Placement))
		}
	}
	if len(busy) == 0 {
		return nil
	}
	sort.Strings(busy)
	return fmt.Errorf("%w: GPU %d keeps its layout: the new one would destroy %s", ErrBusy, g.Index, strings.Join(busy, ", "))
}

func sortInstances(insts []gpu.MIGInstance) {
	sort.Slice(insts, func(i, j int) bool { return insts[i].GIID < insts[j].GIID })
}
