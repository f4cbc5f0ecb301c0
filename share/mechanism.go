package share

import (
	"fmt"
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

// Properties are what a mechanism guarantees, whatever its size. Each
// mechanism's provider states its own (ARCHITECTURE.md's table).
type Properties struct {
	MemoryIsolation Isolation
	FaultIsolation  bool // a fault in one workload does not affect others
}

// Spread is how a request for several shares of one mechanism takes them.
type Spread int

// The ways of spreading a request over shares.
const (
	// SpreadAny takes the smallest fitting shares, on any devices.
	SpreadAny Spread = iota
	// SpreadOneDevice takes every share from one device: a process talks
	// to one MPS server, and the interposer to one remote GPU.
	SpreadOneDevice
	// SpreadDistinctGPUs takes each share from another GPU: two replicas
	// of one GPU would show the container one GPU.
	SpreadDistinctGPUs
	// SpreadAlone serves only requests for one share: the share is alone
	// in its task (a limited time-slice replica: the limiter holds a
	// process to one replica).
	SpreadAlone
)
