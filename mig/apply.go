package mig

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strings"
	"time"

	"github.com/gpumux/gpumux/gpu"
)

// ErrBusy means a layout change was refused because instances are in use.
var ErrBusy = errors.New("MIG instances in use")

// Host is what Apply needs of a node's GPUs; *gpu.Host implements it.
type Host interface {
	Inventory(ctx context.Context) (*gpu.Node, error)
	EnableMIG(ctx context.Context, index int) error
	DisableMIG(ctx context.Context, index int) error
	ResetGPU(ctx context.Context, index int) error
	CreateMIGInstance(ctx context.Context, index int, p gpu.MIGProfile, at gpu.Placement) error
	DestroyMIGInstance(ctx context.Context, index, giID int) error
	Processes(ctx context.Context, uuid string) ([]uint32, error)
}

var _ Host = (*gpu.Host)(nil)

// Result says what Apply did.
type Result struct {
	Changed   bool // instances were destroyed or created
	Reset     bool // the GPU was reset to enable MIG mode (WithReset)
	Destroyed []gpu.MIGInstance
	Created   []Slot
}

// Progress receives one line per step; nil discards them.
type Progress func(format string, args ...any)

// Apply makes GPU index carry exactly want (profile name → count), enabling
// MIG mode if needed. It changes nothing when the GPU already matches, refuses
// with ErrBusy while any instance has processes, and finds placements for the
// whole layout before destroying anything. GPU instances without a compute
// instance (gpu.GPU.MIGIncomplete) are destroyed. If a step fails it
// restores the previous layout (MIG mode, and the previous instances at
// their previous placements) and says so in the error.
func Apply(ctx context.Context, h Host, index int, want map[string]int, progress Progress, opts ...ApplyOption) (Result, error) {
	return change(ctx, h, index, true, want, progress, opts)
}

// DisableMIG turns MIG mode off on GPU index in one step: it destroys the
// GPU's MIG instances (and GPU instances without a compute instance), then
// disables MIG mode, as mig-parted does for mig-enabled: false. It refuses
// with ErrBusy, changing nothing, while any instance is in use (processes,
// or held: WithHeld, unless WithForce). If a step fails it restores the
// previous instances and MIG mode. A change the driver leaves pending is an
// error wrapping gpu.ErrResetRequired, unless WithReset lets it reset the
// GPU; the instances are then restored too.
func DisableMIG(ctx context.Context, h Host, index int, progress Progress, opts ...ApplyOption) (Result, error) {
	return change(ctx, h, index, false, nil, progress, opts)
}

// change makes GPU index carry MIG mode migOn and, when on, exactly want:
// Apply and DisableMIG. With checkpoints (WithCheckpoint) it first undoes a
// change a crashed process left, then records the layout it starts from
// before changing anything, so that a crash at any instant is undone by
// the next change of the GPU.
func change(ctx context.Context, h Host, index int, migOn bool, want map[string]int, progress Progress, opts []ApplyOption) (Result, error) {
	if progress == nil {
		progress = func(string, ...any) {}
	}
	var o applyOptions
	for _, opt := range opts {
		opt(&o)
	}
	g, err := readGPU(ctx, h, index)
	if err != nil {
		return Result{}, err
	}
	if o.checkpoints != "" {
		cp, err := lockCheckpoint(ctx, o.checkpoints, g.UUID)
		if err != nil {
			return Result{}, fmt.Errorf("GPU %d: %w", index, err)
		}
		defer cp.unlock()
		if g, err = recoverCrashed(ctx, h, g, cp, &o, progress); err != nil {
			return Result{}, err
		}
		o.checkpoint = cp
	}
	switch {
	case migOn && !g.MIGCapable:
		return Result{}, fmt.Errorf("GPU %d (%s) has no MIG support", index, g.Model)
	case migOn && g.MIGEnabled && len(g.MIGIncomplete) == 0 && maps.Equal(counts(g.MIGInstances), want):
		return Result{}, nil
	case !migOn && !g.MIGEnabled:
		// Nothing to destroy; this also cancels a pending change to on.
		progress("GPU %d: disabling MIG mode", index)
		if _, err := changeMode(ctx, h, index, false, &o, progress); err != nil {
			return Result{}, err
		}
		return Result{Reset: o.didReset}, nil
	}
	busy, err := busyInstances(ctx, h, g, o.held)
	if err != nil {
		return Result{}, err
	}
	// Force lets held instances go; processes always keep theirs (NVML
	// refuses to destroy an instance in use).
	inUse := func(uuid string) bool { u := busy[uuid]; return len(u.pids) > 0 || u.holder != "" && !o.force }
	if !migOn {
		want = map[string]int{} // every instance goes
	}
	plan, err := PlanGPU(g, want, inUse, false)
	if err != nil {
		return Result{}, describeBusy(err, busy)
	}
	before := snapshotOf(g)
	if cp := o.checkpoint; cp != nil {
		if err := cp.write(checkpoint{Version: 1, GPU: g.UUID, Before: before.Instances, MIGEnabled: &before.MIGEnabled, Want: want, Started: time.Now().UTC()}); err != nil {
			return Result{}, fmt.Errorf("GPU %d: writing the checkpoint: %w", index, err)
		}
		// Whatever happens next leaves the GPU consistent (applied or rolled
		// back); only a crash leaves the checkpoint behind.
		defer cp.clear()
	}
	res := Result{}
	undo := func(cause error) (Result, error) {
		return res, rollback(ctx, h, index, before, cause, &o, progress)
	}
	if migOn && !g.MIGEnabled {
		progress("GPU %d: enabling MIG mode", index)
		if _, err := changeMode(ctx, h, index, true, &o, progress); err != nil {
			// Nothing else changed; a mode change left pending waits for
			// a reset, and the error says how to finish it.
			return Result{}, err
		}
		res.Reset = o.didReset
	}
	res.Changed = true
	for _, inst := range plan.Destroy {
		what := "destroying"
		if inst.CIID < 0 {
			what = "destroying the GPU instance without a compute instance,"
		}
		progress("GPU %d: %s %s (GPU instance %d at %s)", index, what, inst.Profile, inst.GIID, inst.Placement)
		if err := h.DestroyMIGInstance(ctx, index, inst.GIID); err != nil {
			return undo(fmt.Errorf("GPU %d: %w", index, err))
		}
		res.Destroyed = append(res.Destroyed, inst)
	}
	for _, s := range plan.Create {
		progress("GPU %d: creating %s at %s", index, s.Profile.Name, s.Placement)
		if err := h.CreateMIGInstance(ctx, index, s.Profile, s.Placement); err != nil {
			return undo(err)
		}
		res.Created = append(res.Created, s)
	}
	if !migOn {
		progress("GPU %d: disabling MIG mode", index)
		if _, err := changeMode(ctx, h, index, false, &o, progress); err != nil {
			return undo(err)
		}
		res.Reset = res.Reset || o.didReset
		return res, nil
	}
	after, err := readGPU(ctx, h, index)
	if err != nil {
		return res, err
	}
	if got := counts(after.MIGInstances); !maps.Equal(got, want) || len(after.MIGIncomplete) > 0 {
		return undo(fmt.Errorf("GPU %d: after applying, the GPU holds %s (and %d GPU instances without a compute instance) instead of %s", index, describe(got), len(after.MIGIncomplete), describe(want)))
	}
	progress("GPU %d: MIG layout is %s", index, describe(want))
	return res, nil
}

// snapshot is a GPU's MIG layout as restore brings it back: its MIG mode
// and its MIG devices by profile and placement.
type snapshot struct {
	MIGEnabled bool
	Instances  []instanceRef
}

func snapshotOf(g *gpu.GPU) snapshot {
	return snapshot{MIGEnabled: g.MIGEnabled, Instances: refsOf(g.MIGInstances)}
}

// rollback brings GPU index back to before and returns cause, annotated
// with the outcome.
func rollback(ctx context.Context, h Host, index int, before snapshot, cause error, o *applyOptions, progress Progress) error {
	// Roll back even when ctx was cancelled: a half-applied layout is worse.
	ctx = context.WithoutCancel(ctx)
	rp := func(format string, args ...any) {
		progress(strings.Replace(format, ": restore: ", ": rollback: ", 1), args...)
	}
	if err := restore(ctx, h, index, before, o, rp); err != nil {
		return fmt.Errorf("%w; rollback incomplete: %w", cause, err)
	}
	return fmt.Errorf("%w; the previous layout (%s) was restored", cause, before)
}

func (s snapshot) String() string {
	if !s.MIGEnabled {
		return "MIG off"
	}
	m := map[string]int{}
	for _, r := range s.Instances {
		m[r.Profile]++
	}
	return describe(m)
}

// ApplyOption changes how Apply treats instances in use.
type ApplyOption func(*applyOptions)

type applyOptions struct {
	held        func(uuid string) string // who holds an instance without processes yet
	force       bool
	reset       bool
	checkpoints string // directory of the per-GPU checkpoints, "" for none
	checkpoint  *checkpoints
	didReset    bool
}

// WithHeld names the holders Apply cannot see as processes: an instance
// leased to a container (gpumux-runtime's lease store) is in use before its
// container runs anything on it. held returns "" for an instance no one holds.
func WithHeld(held func(uuid string) string) ApplyOption {
	return func(o *applyOptions) { o.held = held }
}

// WithForce lets Apply destroy instances that are held (WithHeld). NVML
// still refuses to destroy an instance with processes on it.
func WithForce() ApplyOption { return func(o *applyOptions) { o.force = true } }

// WithReset lets Apply and DisableMIG reset a GPU whose MIG mode change the
// driver left pending (gpu.ErrResetRequired), and only that GPU, then go on.
// The GPU is reset only while the change is pending, it holds no MIG
// instances, no process runs on it and no one holds it or a share of it
// (WithHeld; WithForce lets held ones go); else the change is refused with
// ErrBusy. On real GPUs gpu.Host cannot reset (NVML has no reset call) and
// says to run nvidia-smi -r.
func WithReset() ApplyOption { return func(o *applyOptions) { o.reset = true } }

// changeMode turns MIG mode on or off on GPU index; when the driver leaves
// the change pending, it resets the GPU if the options allow it. It returns
// the GPU as it is afterwards.
func changeMode(ctx context.Context, h Host, index int, on bool, o *applyOptions, progress Progress) (*gpu.GPU, error) {
	change := h.DisableMIG
	if on {
		change = h.EnableMIG
	}
	err := change(ctx, index)
	if errors.Is(err, gpu.ErrResetRequired) {
		if !o.reset {
			return nil, fmt.Errorf("%w; to finish the change, run gpumux mig apply again with --reset (it resets GPU %d only, and only while nothing uses it), or reset the GPU yourself when it is idle (nvidia-smi -r -i %d)", err, index, index)
		}
		err = resetForMode(ctx, h, index, on, o, progress)
	}
	if err != nil {
		return nil, err
	}
	return readGPU(ctx, h, index)
}

// resetForMode resets GPU index to make its pending MIG mode (on) current,
// after checking that the change is pending and that the reset takes
// nothing in use with it.
func resetForMode(ctx context.Context, h Host, index int, on bool, o *applyOptions, progress Progress) error {
	g, err := readGPU(ctx, h, index)
	if err != nil {
		return err
	}
	if g.MIGPending != on || g.MIGEnabled == on {
		return fmt.Errorf("GPU %d: MIG mode is %s, pending %s: no change to %s waits for a reset, so it is not reset", index, onOff(g.MIGEnabled), onOff(g.MIGPending), onOff(on))
	}
	if n := len(g.MIGInstances); n > 0 {
		return fmt.Errorf("%w: GPU %d is not reset: it holds %d MIG instance(s) (%s), which a reset destroys", ErrBusy, index, n, describe(counts(g.MIGInstances)))
	}
	var why []string
	pids, err := h.Processes(ctx, g.UUID)
	if err != nil {
		return fmt.Errorf("GPU %d: checking for processes before a reset: %w", index, err)
	}
	if len(pids) > 0 {
		why = append(why, fmt.Sprintf("pids %v", pids))
	}
	if o.held != nil && !o.force {
		if holder := o.held(g.UUID); holder != "" {
			why = append(why, "held by "+holder)
		}
	}
	if len(why) > 0 {
		return fmt.Errorf("%w: GPU %d is not reset: in use (%s)", ErrBusy, index, strings.Join(why, "; "))
	}
	progress("GPU %d: resetting the GPU to turn MIG mode %s (its MIG mode change waits for a reset)", index, onOff(on))
	if err := h.ResetGPU(ctx, index); err != nil {
		if errors.Is(err, gpu.ErrInUse) {
			return fmt.Errorf("%w: %w", ErrBusy, err)
		}
		return err
	}
	o.didReset = true
	after, err := readGPU(ctx, h, index)
	if err != nil {
		return err
	}
	if after.MIGEnabled != on {
		return fmt.Errorf("GPU %d: after the reset, MIG mode is still %s", index, onOff(after.MIGEnabled))
	}
	return nil
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// use is why a MIG instance is in use.
type use struct {
	pids   []uint32
	holder string
}

func (u use) String() string {
	if len(u.pids) > 0 {
		return fmt.Sprintf("pids %v", u.pids)
	}
	return "held by " + u.holder
}

// recoverCrashed undoes the change a crashed Apply of g recorded, if any, and
// returns the GPU as it is then.
func recoverCrashed(ctx context.Context, h Host, g *gpu.GPU, cp *checkpoints, o *applyOptions, progress Progress) (*gpu.GPU, error) {
	crashed, err := cp.read()
	if err != nil || crashed == nil {
		return g, err
	}
	progress("GPU %d: an apply started %s did not finish; restoring the layout it found (%s)", g.Index, crashed.Started.Format(time.RFC3339), crashed.before())
	if err := restore(ctx, h, g.Index, crashed.before(), o, progress); err != nil {
		return nil, fmt.Errorf("GPU %d: restoring the layout of an interrupted apply (%s): %w", g.Index, cp.path, err)
	}
	if err := cp.clear(); err != nil {
		return nil, err
	}
	return readGPU(ctx, h, g.Index)
}

// busyInstances says why each MIG instance of g is in use: the processes on
// it, or who holds it; instances not in use are absent.
func busyInstances(ctx context.Context, h Host, g *gpu.GPU, held func(string) string) (map[string]use, error) {
	busy := map[string]use{}
	for _, inst := range g.MIGInstances {
		pids, err := h.Processes(ctx, inst.UUID)
		if err != nil {
			return nil, fmt.Errorf("GPU %d: checking %s for processes: %w", g.Index, inst.UUID, err)
		}
		u := use{pids: pids}
		if held != nil {
			u.holder = held(inst.UUID)
		}
		if len(u.pids) > 0 || u.holder != "" {
			busy[inst.UUID] = u
		}
	}
	return busy, nil
}

// describeBusy adds why instances are in use to an ErrBusy refusal.
func describeBusy(err error, busy map[string]use) error {
	if !errors.Is(err, ErrBusy) {
		return err
	}
	var why []string
	for uuid, u := range busy {
		why = append(why, uuid+": "+u.String())
	}
	sort.Strings(why)
	return fmt.Errorf("%w (in use: %s)", err, strings.Join(why, "; "))
}

func readGPU(ctx context.Context, h Host, index int) (*gpu.GPU, error) {
	node, err := h.Inventory(ctx)
	if err != nil {
		return nil, err
	}
	for i := range node.GPUs {
		if node.GPUs[i].Index == index {
			return &node.GPUs[i], nil
		}
	}
	return nil, fmt.Errorf("GPU %d: %w", index, gpu.ErrNotFound)
}

func counts(insts []gpu.MIGInstance) map[string]int {
	m := map[string]int{}
	for _, i := range insts {
		m[i.Profile]++
	}
	return m
}
