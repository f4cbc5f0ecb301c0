package share

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/gpumux/gpumux/gpu"
)

// MaxReplicas bounds time-slice replicas per GPU: more only adds context-switch
// overhead (and matches MPS's 48-client limit).
const MaxReplicas = 48

// MaxMPSClients is how many clients one MPS server accepts (Volta and later).
const MaxMPSClients = 48

// Layout assigns a node's GPUs to mechanisms. GPUs no rule matches are
// exclusive. The field tags are the user-facing config keys.
type Layout struct {
	GPUs []GPURule `codec:"gpu" json:"gpu,omitempty"`
}

// GPURule is one `gpu { … }` block.
type GPURule struct {
	// Match selects GPUs: indexes ("0-3", "4,5"), UUIDs ("GPU-…", comma
	// separated) or a glob over the model name ("*H200*").
	Match      string         `codec:"match" json:"match"`
	Mechanism  Mechanism      `codec:"mechanism" json:"mechanism"`
	Replicas   int            `codec:"replicas" json:"replicas,omitempty"`
	MIGDevices map[string]int `codec:"mig_devices" json:"mig_devices,omitempty"`
	// Shares splits an mps GPU into equal shares; ShareSizes into shares of
	// the given sizes ("50%"). Each share gets that part of the GPU's memory
	// (a hard MPS limit) and of its SMs. With mig_devices, or on a GPU in MIG
	// mode, each MIG instance is split so, with a daemon of its own.
	Shares     int      `codec:"shares" json:"shares,omitempty"`
	ShareSizes []string `codec:"share_sizes" json:"share_sizes,omitempty"`
	// ReplicaSizes splits a timeslice GPU into replicas of the given sizes
	// ("50%"), as Replicas does into equal ones: each replica gets that part
	// of the GPU's memory and of its time. On a GPU in MIG mode (or with
	// mig_devices) each MIG instance is split so.
	ReplicaSizes []string `codec:"replica_sizes" json:"replica_sizes,omitempty"`
	// Limit is how a timeslice GPU's replicas are held to their size by
	// gpumux's limiter: "cap" (the default: never more memory, never more
	// than its part of the time), "share" (idle time may be used by busy
	// replicas) or "off" (nothing enforced).
	Limit Limit `codec:"limit" json:"limit,omitempty"`
}

// Limit is how time-slice replicas are held to their size.
type Limit string

// The limits of time-slice replicas.
const (
	LimitCap   Limit = "cap"   // memory and time capped at the replica's size
	LimitShare Limit = "share" // memory capped; idle time may be used by others
	LimitOff   Limit = "off"   // nothing enforced
)

// Limits lists the limits, the default first.
var Limits = []Limit{LimitCap, LimitShare, LimitOff}

// Assignment is the rule that applies to one GPU.
type Assignment struct {
	GPUIndex   int
	Rule       int // index into Layout.GPUs, -1 for the exclusive default
	Mechanism  Mechanism
	Replicas   int
	MIGDevices map[string]int
	MPSPercent []int // mps: each share's percent of the GPU
	// ReplicaPercent is each time-slice replica's percent of its device
	// (the GPU, or each MIG instance), and Limit how it is enforced.
	ReplicaPercent []int
	Limit          Limit
}

// FieldError is a layout error that names the block and field at fault.
type FieldError struct {
	Block int    // index of the gpu block
	Match string // its match, to help find it
	Field string
	Err   error
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("gpu block %d (match = %q): %s: %v", e.Block+1, e.Match, e.Field, e.Err)
}

func (e *FieldError) Unwrap() error { return e.Err }

// Is makes every FieldError match ErrInvalid.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

// ErrInvalid is matched by every layout validation error.
var ErrInvalid = errors.New("invalid layout")

func (l *Layout) fieldErr(i int, field string, format string, args ...any) error {
	return &FieldError{Block: i, Match: l.GPUs[i].Match, Field: field, Err: fmt.Errorf(format, args...)}
}

// Validate checks what can be checked without knowing the node's GPUs. It
// reports every problem, not only the first.
func (l *Layout) Validate() error {
	var errs []error
	for i, r := range l.GPUs {
		if _, err := parseMatch(r.Match); err != nil {
			errs = append(errs, l.fieldErr(i, "match", "%v", err))
		}
		if _, err := ParseMechanism(string(r.Mechanism)); err != nil {
			errs = append(errs, l.fieldErr(i, "mechanism", "%v", err))
			continue
		}
		if r.Mechanism == Remote {
			errs = append(errs, l.fieldErr(i, "mechanism", "%q is not available in a gpu block (available: exclusive, mig, mps, timeslice): remote GPUs are other hosts' and come from the remote { } block", r.Mechanism))
		}
		if _, err := l.replicaPercents(i); err != nil {
			errs = append(errs, err)
		}
		switch {
		case r.Mechanism == MIG && len(r.MIGDevices) == 0:
			errs = append(errs, l.fieldErr(i, "mig_devices", "empty: a mig GPU needs a layout, e.g. mig_devices { \"3g.71gb\" = 2 }"))
		case r.Mechanism != MIG && r.Mechanism != MPS && r.Mechanism != TimeSlice && len(r.MIGDevices) != 0:
			errs = append(errs, l.fieldErr(i, "mig_devices", "applies only to mechanism = \"mig\", or \"mps\" and \"timeslice\" on MIG instances, not %q", r.Mechanism))
		}
		for _, name := range sortedKeys(r.MIGDevices) {
			if n := r.MIGDevices[name]; n < 1 {
				errs = append(errs, l.fieldErr(i, "mig_devices", "%q = %d: a count must be at least 1", name, n))
			}
		}
		if _, err := l.mpsPercents(i); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// replicaPercents validates block i's replicas/replica_sizes and limit and
// returns each replica's percent of its device (nil for other mechanisms).
func (l *Layout) replicaPercents(i int) ([]int, error) {
	r := l.GPUs[i]
	if r.Mechanism != TimeSlice {
		switch {
		case r.Replicas != 0:
			return nil, l.fieldErr(i, fmt.Sprintf("replicas = %d", r.Replicas), "replicas applies only to mechanism = \"timeslice\", not %q", r.Mechanism)
		case len(r.ReplicaSizes) != 0:
			return nil, l.fieldErr(i, "replica_sizes", "applies only to mechanism = \"timeslice\", not %q", r.Mechanism)
		case r.Limit != "":
			return nil, l.fieldErr(i, fmt.Sprintf("limit = %q", r.Limit), "applies only to mechanism = \"timeslice\", not %q", r.Mechanism)
		}
		return nil, nil
	}
	if r.Limit != "" && !slices.Contains(Limits, r.Limit) {
		return nil, l.fieldErr(i, fmt.Sprintf("limit = %q", r.Limit), "want \"cap\" (the default: memory and time held to the replica's size), \"share\" (idle time may be used by busy replicas) or \"off\" (nothing enforced)")
	}
	switch {
	case r.Replicas != 0 && len(r.ReplicaSizes) != 0:
		return nil, l.fieldErr(i, "replicas", "set replicas (equal replicas) or replica_sizes, not both")
	case len(r.ReplicaSizes) != 0:
		return l.percents(i, "replica_sizes", r.ReplicaSizes, MaxReplicas, "replicas")
	case r.Replicas < 2 || r.Replicas > MaxReplicas:
		return nil, l.fieldErr(i, fmt.Sprintf("replicas = %d", r.Replicas), "a time-slice GPU needs 2 to %d replicas, or replica_sizes = [\"50%%\", \"25%%\", \"25%%\"] (for one workload per GPU use mechanism = \"exclusive\")", MaxReplicas)
	}
	return equalPercents(r.Replicas), nil
}

func equalPercents(n int) []int {
	out := make([]int, n)
	for k := range out {
		out[k] = 100 / n
	}
	return out
}

// percents parses block i's sizes (field) as percentages that add up to at
// most 100%, at most max of them (what names them, in errors).
func (l *Layout) percents(i int, field string, sizes []string, max int, what string) ([]int, error) {
	if len(sizes) > max {
		return nil, l.fieldErr(i, field, "%d %s: at most %d", len(sizes), what, max)
	}
	out := make([]int, len(sizes))
	sum := 0
	for k, size := range sizes {
		pct, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(size), "%"))
		if err != nil || !strings.HasSuffix(strings.TrimSpace(size), "%") || pct < 1 || pct > 100 {
			return nil, l.fieldErr(i, field, "%q: want a percentage from 1%% to 100%%, e.g. \"25%%\"", size)
		}
		out[k] = pct
		sum += pct
	}
	if sum > 100 {
		return nil, l.fieldErr(i, field, "%v add up to %d%%; at most 100%%", sizes, sum)
	}
	return out, nil
}

// mpsPercents validates block i's shares/share_sizes and returns each
// share's percent of the GPU (nil for other mechanisms).
func (l *Layout) mpsPercents(i int) ([]int, error) {
	r := l.GPUs[i]
	if r.Mechanism != MPS {
		switch {
		case r.Shares != 0:
			return nil, l.fieldErr(i, fmt.Sprintf("shares = %d", r.Shares), "applies only to mechanism = \"mps\", not %q", r.Mechanism)
		case len(r.ShareSizes) != 0:
			return nil, l.fieldErr(i, "share_sizes", "applies only to mechanism = \"mps\", not %q", r.Mechanism)
		}
		return nil, nil
	}
	switch {
	case r.Shares != 0 && len(r.ShareSizes) != 0:
		return nil, l.fieldErr(i, "shares", "set shares (equal shares) or share_sizes, not both")
	case r.Shares == 0 && len(r.ShareSizes) == 0:
		return nil, l.fieldErr(i, "shares", "an mps GPU needs shares = N (equal shares) or share_sizes = [\"50%%\", \"25%%\", \"25%%\"]")
	case r.Shares < 0 || r.Shares > MaxMPSClients:
		return nil, l.fieldErr(i, fmt.Sprintf("shares = %d", r.Shares), "an MPS server takes 1 to %d clients", MaxMPSClients)
	case r.Shares > 0:
		return equalPercents(r.Shares), nil
	case len(r.ShareSizes) > MaxMPSClients:
		return nil, l.fieldErr(i, "share_sizes", "%d shares: an MPS server takes at most %d clients", len(r.ShareSizes), MaxMPSClients)
	}
	return l.percents(i, "share_sizes", r.ShareSizes, MaxMPSClients, "shares")
}

// Assign resolves the layout against a node's GPUs: which rule applies to each
// GPU, checked against what the GPU is (MIG support, its profiles and how many
// instances fit). Rules that match no GPU of this node by UUID or model are
// not errors, so one config can serve a fleet of different nodes; a GPU
// index the node does not have is.
func (l *Layout) Assign(node *gpu.Node) ([]Assignment, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	out := make([]Assignment, len(node.GPUs))
	for i, g := range node.GPUs {
		out[i] = Assignment{GPUIndex: g.Index, Rule: -1, Mechanism: Exclusive}
	}
	var errs []error
	for ri, r := range l.GPUs {
		m, _ := parseMatch(r.Match)
		if err := l.checkIndexes(ri, m, node); err != nil {
			errs = append(errs, err)
		}
		for gi := range node.GPUs {
			g := &node.GPUs[gi]
			if !m.matches(g) {
				continue
			}
			if prev := out[gi].Rule; prev >= 0 {
				errs = append(errs, l.fieldErr(ri, "match", "GPU %d (%s) is also matched by gpu block %d (match = %q); each GPU may be matched once", g.Index, g.UUID, prev+1, l.GPUs[prev].Match))
				continue
			}
			pcts, _ := l.mpsPercents(ri) // validated above
			replicas, _ := l.replicaPercents(ri)
			limit := r.Limit
			if r.Mechanism == TimeSlice && limit == "" {
				limit = LimitCap
			}
			out[gi] = Assignment{GPUIndex: g.Index, Rule: ri, Mechanism: r.Mechanism, Replicas: r.Replicas, MIGDevices: r.MIGDevices,
				MPSPercent: pcts, ReplicaPercent: replicas, Limit: limit}
			if len(r.MIGDevices) > 0 {
				errs = append(errs, l.checkMIG(ri, g)...)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for i := range out {
		if out[i].Mechanism == Exclusive && node.GPUs[i].MIGEnabled {
			// A GPU in MIG mode can only be used through its instances:
			// offer the ones that exist, whoever made them.
			out[i].Mechanism = MIG
		}
	}
	return out, nil
}

// checkIndexes refuses GPU indexes in block ri's match that the node does
// not have: a block that silently matched fewer GPUs than it names would
// leave a GPU unconfigured without a word. A GPU the node ignores is one it
// has: a block may name it, and leaves it alone.
func (l *Layout) checkIndexes(ri int, m matcher, node *gpu.Node) error {
	have := map[int]bool{}
	for i := range node.GPUs {
		have[node.GPUs[i].Index] = true
	}
	for _, i := range node.Ignored {
		have[i] = true
	}
	var missing []int
	for _, i := range sortedInts(m.indexes) {
		if !have[i] {
			missing = append(missing, i)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	what := "GPU index " + indexRanges(missing) + " is"
	if len(missing) > 1 {
		what = "GPU indexes " + indexRanges(missing) + " are"
	}
	valid := "this node has no GPUs"
	if n := len(node.GPUs); n > 0 {
		valid = fmt.Sprintf("this node has %d GPUs, indexes %s", n, indexRanges(sortedInts(have)))
	}
	return l.fieldErr(ri, "match", "%s out of range: %s", what, valid)
}

func sortedInts(set map[int]bool) []int {
	out := make([]int, 0, len(set))
	for i := range set {
		out = append(out, i)
	}
	sort.Ints(out)
	return out
}

// indexRanges writes sorted indexes as match writes them, runs as ranges:
// "0-3,5".
func indexRanges(idx []int) string {
	var parts []string
	for i := 0; i < len(idx); {
		j := i
		for j+1 < len(idx) && idx[j+1] == idx[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.Itoa(idx[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", idx[i], idx[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

func (l *Layout) checkMIG(ri int, g *gpu.GPU) []error {
	r := l.GPUs[ri]
	if !g.MIGCapable {
		return []error{l.fieldErr(ri, "mechanism", "\"mig\" but GPU %d (%s) has no MIG support", g.Index, g.Model)}
	}
	var errs []error
	slots := 0
	for _, name := range sortedKeys(r.MIGDevices) {
		n := r.MIGDevices[name]
		p, ok := g.Profile(name)
		if !ok {
			errs = append(errs, l.fieldErr(ri, "mig_devices", "profile %q does not exist on GPU %d (%s); valid: %s", name, g.Index, g.Model, strings.Join(g.ProfileNames(), ", ")))
			continue
		}
		if n > p.MaxCount {
			errs = append(errs, l.fieldErr(ri, "mig_devices", "%d× %s: at most %d fit on GPU %d (%s)", n, name, p.MaxCount, g.Index, g.Model))
		}
		if len(p.Placements) > 0 {
			slots += n * p.Placements[0].Size
		}
	}
	if slots > 8 && len(errs) == 0 {
		errs = append(errs, l.fieldErr(ri, "mig_devices", "the profiles need %d memory slots; GPU %d (%s) has 8", slots, g.Index, g.Model))
	}
	return errs
}

// matcher selects GPUs by index, UUID or model glob.
type matcher struct {
	indexes map[int]bool
	uuids   map[string]bool
	glob    string
}

func (m matcher) matches(g *gpu.GPU) bool {
	switch {
	case m.indexes != nil:
		return m.indexes[g.Index]
	case m.uuids != nil:
		return m.uuids[g.UUID]
	default:
		ok, _ := path.Match(m.glob, g.Model)
		return ok
	}
}

func parseMatch(s string) (matcher, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return matcher{}, errors.New("empty: use GPU indexes (\"0-3\", \"4,5\"), UUIDs (\"GPU-…\") or a model glob (\"*H200*\")")
	}
	parts := strings.Split(s, ",")
	switch {
	case s[0] >= '0' && s[0] <= '9':
		m := matcher{indexes: map[int]bool{}}
		for _, p := range parts {
			lo, hi, err := parseRange(strings.TrimSpace(p))
			if err != nil {
				return matcher{}, fmt.Errorf("%q: %w", s, err)
			}
			for i := lo; i <= hi; i++ {
				m.indexes[i] = true
			}
		}
		return m, nil
	case strings.HasPrefix(s, "GPU-"):
		m := matcher{uuids: map[string]bool{}}
		for _, p := range parts {
			p = strings.TrimSpace(p)
			if !strings.HasPrefix(p, "GPU-") {
				return matcher{}, fmt.Errorf("%q: %q is not a GPU UUID (GPU-…); do not mix UUIDs with indexes or globs", s, p)
			}
			m.uuids[p] = true
		}
		return m, nil
	default:
		if _, err := path.Match(s, ""); err != nil {
			return matcher{}, fmt.Errorf("%q is not a valid model glob: %w", s, err)
		}
		return matcher{glob: s}, nil
	}
}

// MaxGPUIndex bounds the GPU indexes a match may name.
const MaxGPUIndex = 1023

func parseRange(s string) (lo, hi int, err error) {
	a, b, isRange := strings.Cut(s, "-")
	if lo, err = strconv.Atoi(a); err != nil || lo < 0 || lo > MaxGPUIndex {
		return 0, 0, fmt.Errorf("%q is not a GPU index (0 to %d) or range like 0-3", s, MaxGPUIndex)
	}
	if !isRange {
		return lo, lo, nil
	}
	if hi, err = strconv.Atoi(b); err != nil || hi < lo || hi > MaxGPUIndex {
		return 0, 0, fmt.Errorf("%q is not a GPU index range like 0-3 (indexes 0 to %d)", s, MaxGPUIndex)
	}
	return lo, hi, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// AssignedGPU is one of a node's GPUs with the rule that applies to it.
type AssignedGPU struct {
	GPU        *gpu.GPU
	Assignment Assignment
}

// Assigned returns the node's GPUs assigned to mechanism m, in order.
func Assigned(node *gpu.Node, as []Assignment, m Mechanism) []AssignedGPU {
	var out []AssignedGPU
	for _, a := range as {
		if a.Mechanism != m {
			continue
		}
		for i := range node.GPUs {
			if node.GPUs[i].Index == a.GPUIndex {
				out = append(out, AssignedGPU{GPU: &node.GPUs[i], Assignment: a})
			}
		}
	}
	return out
}
