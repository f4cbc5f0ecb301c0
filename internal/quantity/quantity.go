package quantity

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Rule is the one rule for memory quantities that gpumux reads from
// people (annotations, environment variables, flags), quoted in every error
// and every --help that takes one.
const Rule = "a whole number with a binary unit: Ki, Mi, Gi or Ti, optionally followed by B (16Gi, 16GiB, 512Mi, 16 GiB); " +
	"bare numbers and decimal units (M, G, MB, GB) are refused as ambiguous"

var quantityPattern = regexp.MustCompile(`^([0-9]+) *([A-Za-z]*)$`)

// ParseBytes parses a memory quantity into bytes, by Rule: a whole
// number with a binary unit, Ki, Mi, Gi or Ti (1024-based), optionally
// followed by B, case-insensitive, optionally after spaces: 16Gi, 16GiB,
// 512Mi, 16 GiB, 4kib. Bare numbers and decimal units (16, 16G, 16GB, 512M,
// 4K) are refused: "16G" is GiB to Docker but 10⁹ bytes to Kubernetes, and an
// H100 "80GB" has less than 80 GiB. So is a bare B ("512B"). The bytes must
// fit in 64 bits. 0 is a quantity: callers that need more refuse it.
//
// The error names what is wrong and quotes Rule; it does not repeat
// s, which the caller names with the field it came from.
func ParseBytes(s string) (uint64, error) {
	m := quantityPattern.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("not a memory quantity (want %s)", Rule)
	}
	digits, unit := m[1], m[2]
	if unit == "" {
		return 0, fmt.Errorf("a unit is needed (want %s)", Rule)
	}
	var shift uint
	switch prefix := strings.ToLower(strings.TrimSuffix(strings.TrimSuffix(unit, "B"), "b")); prefix {
	case "ki":
		shift = 10
	case "mi":
		shift = 20
	case "gi":
		shift = 30
	case "ti":
		shift = 40
	case "k", "m", "g", "t":
		return 0, fmt.Errorf("unit %q is ambiguous (want %s)", unit, Rule)
	case "":
		return 0, fmt.Errorf("unit %q has no binary prefix (want %s)", unit, Rule)
	default:
		if len(unit) > 16 {
			unit = unit[:16] + "…"
		}
		return 0, fmt.Errorf("unknown unit %q (want %s)", unit, Rule)
	}
	n, err := strconv.ParseUint(digits, 10, 64)
	if err != nil || n > (1<<64-1)>>shift {
		return 0, fmt.Errorf("too large (want %s)", Rule)
	}
	return n << shift, nil
}

// ParseMiB parses a memory quantity, by the rule of ParseBytes, into whole
// MiB: 1024Ki is 1, 1536Ki is refused. Its bytes fit in 64 bits, so the
// result shifted left by 20 does too.
func ParseMiB(s string) (uint64, error) {
	b, err := ParseBytes(s)
	if err != nil {
		return 0, err
	}
	if b%(1<<20) != 0 {
		return 0, errors.New("not a whole number of MiB (want a multiple of 1024Ki, or a unit of Mi, Gi or Ti)")
	}
	return b >> 20, nil
}
