package share

import (
	"fmt"
	"slices"
	"strings"
)

// Mechanism is how a workload shares a GPU.
type Mechanism string

// The five mechanisms.
const (
	Exclusive Mechanism = "exclusive" // a whole GPU
	MIG       Mechanism = "mig"       // a MIG instance
	MPS       Mechanism = "mps"       // a share of an MPS server
	TimeSlice Mechanism = "timeslice" // a replica of a GPU, scheduled by time
	Remote    Mechanism = "remote"    // a GPU on another host, CUDA calls forwarded
)

// Mechanisms lists every mechanism in the order of the isolation they give.
var Mechanisms = []Mechanism{Exclusive, MIG, MPS, TimeSlice, Remote}

// Implemented reports whether this build can configure the mechanism: every
// one of Mechanisms. (Remote GPUs come from the node config's remote block,
// never from a gpu block: see Layout.Validate.)
func (m Mechanism) Implemented() bool {
	return slices.Contains(Mechanisms, m)
}

// ParseMechanism validates a mechanism name.
func ParseMechanism(s string) (Mechanism, error) {
	for _, m := range Mechanisms {
		if string(m) == s {
			return m, nil
		}
	}
	return "", fmt.Errorf("unknown mechanism %q (valid: %s)", s, joinMechanisms(Mechanisms))
}

func joinMechanisms(ms []Mechanism) string {
	s := make([]string, len(ms))
	for i, m := range ms {
		s[i] = string(m)
	}
	return strings.Join(s, ", ")
}

// Isolation is how strongly a share is isolated from its neighbours.
type Isolation string

// Isolation levels, as advertised in the memory_isolation attribute.
const (
	Hard Isolation = "hard" // enforced by hardware or a hard limit
	Soft Isolation = "soft" // enforced by a cooperative limiter
	None Isolation = "none" // not enforced
)

// Properties are what a mechanism guarantees, whatever its size.
type Properties struct {
	MemoryIsolation Isolation
	FaultIsolation  bool // a fault in one workload does not affect others
}

// Properties returns the guarantees of the mechanism (ARCHITECTURE.md's table).
func (m Mechanism) Properties() Properties {
	switch m {
	case Exclusive, MIG:
		return Properties{MemoryIsolation: Hard, FaultIsolation: true}
	case MPS, Remote: // one MPS server, or one gpumux-remoted, fails for all its clients
		return Properties{MemoryIsolation: Hard, FaultIsolation: false}
	default:
		return Properties{MemoryIsolation: None, FaultIsolation: false}
	}
}
