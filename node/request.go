package node

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/gpumux/gpumux/internal/quantity"
	"github.com/gpumux/gpumux/share"
)

// Annotation keys a container asks for GPU shares with (ARCHITECTURE.md).
// Every key under AnnotationPrefix must be one of these.
const (
	AnnotationPrefix    = "gpumux.io/"
	AnnotationMechanism = AnnotationPrefix + "mechanism"
	AnnotationMemory    = AnnotationPrefix + "memory"
	AnnotationCompute   = AnnotationPrefix + "compute"
	AnnotationIsolation = AnnotationPrefix + "isolation"
	AnnotationGPUs      = AnnotationPrefix + "gpus"
)

// Environment variables that mirror the annotations, and GPUMUX_SHARES (set by
// the Nomad plugin's Reserve: shares already reserved for the container).
// Other GPUMUX_* variables are not read and not refused: a container's
// environment is shared with its image and its user, and later versions of
// gpumux may set more of them.
const (
	EnvMechanism = "GPUMUX_MECHANISM"
	EnvMemory    = "GPUMUX_MEMORY"
	EnvCompute   = "GPUMUX_COMPUTE"
	EnvIsolation = "GPUMUX_ISOLATION"
	EnvGPUs      = "GPUMUX_GPUS"
	EnvShares    = share.EnvShares // "GPUMUX_SHARES"
)

// DefaultMaxCount is Limits.MaxCount when it is 0.
const DefaultMaxCount = 8

// MaxReservedShares bounds the share IDs GPUMUX_SHARES may name (8 GPUs of 48
// replicas each are 384 shares).
const MaxReservedShares = 512

// Limits bound what a container may ask for (policy maximum). The zero value
// means the defaults. Shares Nomad reserved (GPUMUX_SHARES) were bounded by
// Nomad's scheduler and are not limited again.
type Limits struct {
	MaxCount     int    // most shares one container may ask for; 0 means DefaultMaxCount
	MaxMemoryMiB uint64 // most memory per share it may ask for; 0 means no maximum
}

// DefaultLimits are the limits of a node that sets none: 8 shares, any memory.
var DefaultLimits = Limits{MaxCount: DefaultMaxCount}

// The keys of a request, each an annotation and an environment variable.
type requestKey struct {
	annotation, env string
	valid           string // what is valid, for error messages
}

var requestKeys = []requestKey{
	{AnnotationMechanism, EnvMechanism, "auto, exclusive, mig, mps, timeslice, remote"},
	{AnnotationMemory, EnvMemory, quantity.Rule},
	{AnnotationCompute, EnvCompute, "a whole percentage from 1 to 100, e.g. 25 or 25%"},
	{AnnotationIsolation, EnvIsolation, "strict, standard, none"},
	{AnnotationGPUs, EnvGPUs, "a whole number from 1 to the maximum"},
}

// RequestEnv returns the environment variables ParseRequest reads: those
// of the request keys and GPUMUX_SHARES.
func RequestEnv() []string {
	env := make([]string, 0, len(requestKeys)+1)
	for _, k := range requestKeys {
		env = append(env, k.env)
	}
	return append(env, EnvShares)
}

// ParseRequest reads what a container asks for from its OCI annotations and
// its process environment (env holds "K=V" entries, as in an OCI spec's
// process.env).
//
// asked is false when the container asks for nothing: no request key and no
// GPUMUX_SHARES. Its spec must then be left untouched. When asked, req is
// complete (Count ≥ 1; Mechanism "" means auto, and Isolation "" strict).
// reserved are the share IDs of GPUMUX_SHARES, set by the Nomad plugin's
// Reserve; the caller honours them only if they are reserved on this node.
//
// Keys, as annotation / environment variable:
//
//	gpumux.io/mechanism  GPUMUX_MECHANISM  auto|exclusive|mig|mps|timeslice|remote
//	gpumux.io/memory     GPUMUX_MEMORY     minimum memory per share, e.g. 16Gi (see below)
//	gpumux.io/compute    GPUMUX_COMPUTE    minimum compute percent per share, 1 to 100 (25 or 25%)
//	gpumux.io/isolation  GPUMUX_ISOLATION  strict|standard|none, steers auto only
//	gpumux.io/gpus       GPUMUX_GPUS       how many shares, 1 to lim.MaxCount
//	                     GPUMUX_SHARES     share IDs reserved by Nomad, comma-separated
//
// Memory is a quantity by quantity.Rule, read by quantity.ParseMiB: a whole
// number with a binary unit, Ki, Mi, Gi or Ti (1024-based), optionally
// followed by B: 16Gi, 16GiB, 512Mi, 16 GiB. Bare numbers and decimal units
// (16, 16G, 16GB, 512M) are refused as ambiguous. It must be whole MiB, and
// at least 1Mi.
//
// It is strict: an unknown gpumux.io/ annotation, a malformed or empty value,
// an annotation and a variable that disagree, a variable given twice with
// different values, isolation with a mechanism other than auto, a request
// over lim, or GPUMUX_GPUS disagreeing with the number of GPUMUX_SHARES is an
// error that names the key, the value and what is valid. Values are trimmed of
// surrounding white space, and an annotation and a variable agree when they
// mean the same (16Gi and 16384Mi do). Other GPUMUX_* variables are ignored.
func ParseRequest(annotations map[string]string, env []string, lim Limits) (req share.Request, reserved []string, asked bool, err error) {
	maxCount := lim.MaxCount
	if maxCount <= 0 {
		maxCount = DefaultMaxCount
	}

	// Unknown annotations under our prefix, all named, in a stable order.
	var unknown []string
	for k := range annotations {
		if strings.HasPrefix(k, AnnotationPrefix) && !knownAnnotation(k) {
			unknown = append(unknown, strconv.Quote(k))
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		valid := make([]string, len(requestKeys))
		for i, k := range requestKeys {
			valid[i] = k.annotation
		}
		return share.Request{}, nil, false, fmt.Errorf("unknown annotation %s (valid: %s)", strings.Join(unknown, ", "), strings.Join(valid, ", "))
	}

	// Our environment variables; one given twice must agree with itself.
	envs := map[string]string{}
	for _, kv := range env {
		name, value, ok := strings.Cut(kv, "=")
		if !isOurEnv(name) {
			continue
		}
		if !ok {
			return share.Request{}, nil, false, fmt.Errorf("environment entry %q has no value (want %s=<value>)", clip(kv), name)
		}
		if prev, dup := envs[name]; dup && prev != value {
			return share.Request{}, nil, false, fmt.Errorf("environment variable %s is set twice, to %q and %q", name, clip(prev), clip(value))
		}
		envs[name] = value
	}

	// Each key: parse the annotation and the variable, which must agree.
	values := map[string]any{}
	for _, k := range requestKeys {
		var got any
		var from string // the source of got, for error messages
		for _, src := range []struct {
			name  string
			value string
			ok    bool
		}{
			{"annotation " + k.annotation, annotations[k.annotation], hasKey(annotations, k.annotation)},
			{"environment variable " + k.env, envs[k.env], hasKey(envs, k.env)},
		} {
			if !src.ok {
				continue
			}
			v, err := parseValue(k, src.value, maxCount, lim.MaxMemoryMiB)
			if err != nil {
				return share.Request{}, nil, false, fmt.Errorf("%s = %q: %w", src.name, clip(src.value), err)
			}
			this := fmt.Sprintf("%s = %q", src.name, clip(src.value))
			if got != nil && got != v {
				return share.Request{}, nil, false, fmt.Errorf("%s and %s disagree: give one, or the same value in both", from, this)
			}
			got, from = v, this
		}
		if got != nil {
			values[k.annotation] = got
		}
	}

	if v, ok := envs[EnvShares]; ok {
		reserved, err = parseShares(v)
		if err != nil {
			return share.Request{}, nil, false, fmt.Errorf("environment variable %s = %q: %w", EnvShares, clip(v), err)
		}
	}
	if len(values) == 0 && reserved == nil {
		return share.Request{}, nil, false, nil
	}

	req.Count = 1
	if v, ok := values[AnnotationMechanism]; ok {
		req.Mechanism = v.(share.Mechanism)
	}
	if v, ok := values[AnnotationIsolation]; ok {
		req.Isolation = v.(share.Level)
		if req.Mechanism != "" {
			return share.Request{}, nil, false, fmt.Errorf("isolation %q steers mechanism auto only, but mechanism %q was asked for: drop one of them", req.Isolation, req.Mechanism)
		}
	}
	if v, ok := values[AnnotationMemory]; ok {
		req.MemoryMiB = v.(uint64)
	}
	if v, ok := values[AnnotationCompute]; ok {
		req.ComputePercent = v.(int)
	}
	if v, ok := values[AnnotationGPUs]; ok {
		req.Count = v.(int)
		if reserved != nil && req.Count != len(reserved) {
			return share.Request{}, nil, false, fmt.Errorf("%d GPUs asked for, but %s names %d reserved shares", req.Count, EnvShares, len(reserved))
		}
	} else if reserved != nil {
		req.Count = len(reserved)
	}
	return req, reserved, true, nil
}

func hasKey(m map[string]string, k string) bool {
	_, ok := m[k]
	return ok
}

func knownAnnotation(k string) bool {
	for _, rk := range requestKeys {
		if rk.annotation == k {
			return true
		}
	}
	return false
}

func isOurEnv(name string) bool {
	if name == EnvShares {
		return true
	}
	for _, rk := range requestKeys {
		if rk.env == name {
			return true
		}
	}
	return false
}

// parseValue parses one key's value into a comparable value: a
// share.Mechanism ("" for auto), a share.Level, a uint64 of MiB, or an int.
func parseValue(k requestKey, raw string, maxCount int, maxMiB uint64) (any, error) {
	s := strings.TrimSpace(raw)
	if s == "" {
		return nil, fmt.Errorf("empty (valid: %s)", k.valid)
	}
	switch k.annotation {
	case AnnotationMechanism:
		if s == "auto" {
			return share.Mechanism(""), nil
		}
		m, err := share.ParseMechanism(s)
		if err != nil {
			return nil, fmt.Errorf("unknown mechanism (valid: %s)", k.valid)
		}
		return m, nil
	case AnnotationIsolation:
		l, err := share.ParseLevel(s)
		if err != nil {
			return nil, fmt.Errorf("unknown isolation level (valid: %s)", k.valid)
		}
		return l, nil
	case AnnotationMemory:
		mib, err := quantity.ParseMiB(s)
		if err != nil {
			return nil, err
		}
		if mib == 0 {
			return nil, fmt.Errorf("must be at least 1Mi (0 would mean any: leave the key out instead)")
		}
		if maxMiB > 0 && mib > maxMiB {
			return nil, fmt.Errorf("%s is over this node's limit of %s per share", share.FormatMiB(mib), share.FormatMiB(maxMiB))
		}
		return mib, nil
	case AnnotationCompute:
		n, ok := parseSmallUint(strings.TrimSuffix(s, "%"))
		if !ok || n < 1 || n > 100 {
			return nil, fmt.Errorf("want %s", k.valid)
		}
		return n, nil
	case AnnotationGPUs:
		n, ok := parseSmallUint(s)
		if !ok || n < 1 {
			return nil, fmt.Errorf("want a whole number from 1 to %d", maxCount)
		}
		if n > maxCount {
			return nil, fmt.Errorf("%d GPUs is over this node's limit of %d per container", n, maxCount)
		}
		return n, nil
	}
	return nil, fmt.Errorf("internal error: no parser for %s", k.annotation)
}

// parseSmallUint parses 1 to 9 decimal digits.
func parseSmallUint(s string) (int, bool) {
	if len(s) == 0 || len(s) > 9 {
		return 0, false
	}
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// parseShares validates GPUMUX_SHARES: comma-separated share IDs, none empty,
// no duplicates, at most MaxReservedShares.
func parseShares(v string) ([]string, error) {
	if strings.TrimSpace(v) == "" {
		return nil, fmt.Errorf("empty (want comma-separated share IDs, e.g. GPU-…, MIG-…, GPU-…/mps/0)")
	}
	parts := strings.Split(v, ",")
	if len(parts) > MaxReservedShares {
		return nil, fmt.Errorf("%d share IDs: at most %d", len(parts), MaxReservedShares)
	}
	seen := map[string]bool{}
	out := make([]string, 0, len(parts))
	for i, p := range parts {
		id := strings.TrimSpace(p)
		switch {
		case id == "":
			return nil, fmt.Errorf("share ID %d of %d is empty", i+1, len(parts))
		case !validID(id):
			return nil, fmt.Errorf("share ID %q is malformed (want GPU-<uuid> or MIG-<uuid>, optionally followed by /timeslice/<n>, /mps/<n> or /remote/<n>)", clip(id))
		case seen[id]:
			return nil, fmt.Errorf("share ID %q is named twice", id)
		}
		seen[id] = true
		out = append(out, id)
	}
	return out, nil
}

func validID(id string) bool {
	_, err := share.ParseID(id)
	return err == nil
}

// clip shortens a value quoted in an error.
func clip(s string) string {
	const n = 120
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
