package share

import (
	"fmt"
	"strconv"
	"strings"
)

// The share-ID grammar, in this one place:
//
//	id     = device | device "/" kind "/" n
//	device = ("GPU-" | "MIG-") 1*64(ALPHA | DIGIT | "-")
//	kind   = "timeslice" | "mps" | "remote"
//	n      = 1*3DIGIT
//
// A whole GPU's share is its UUID, a MIG instance's its MIG UUID; the n-th
// replica, MPS share or remote share of a device is "<device>/<kind>/<n>".
// IDs are stable across restarts: Nomad keeps them in its allocations and
// the lease store keys on them.

// maxIDUUID and maxIDIndex bound the parts of an ID.
const (
	maxIDUUID  = 64
	maxIDIndex = 999
)

// ID is a parsed share ID.
type ID struct {
	// Device is the UUID of the GPU or MIG instance the share is on.
	Device string
	// Kind is the mechanism of a share of part of the device ("" for the
	// whole device: a GPU or MIG instance).
	Kind Mechanism
	// N is the index of the share among its device's shares of Kind.
	N int
}

// String writes the ID.
func (id ID) String() string {
	if id.Kind == "" {
		return id.Device
	}
	return id.Device + "/" + string(id.Kind) + "/" + strconv.Itoa(id.N)
}

// SubID is the ID of the n-th share of kind m of a device.
func SubID(device string, m Mechanism, n int) string {
	return ID{Device: device, Kind: m, N: n}.String()
}

// partKinds are the mechanisms whose shares are parts of a device.
var partKinds = []Mechanism{TimeSlice, MPS, Remote}

// ParseID checks a share ID against the grammar.
func ParseID(s string) (ID, error) {
	device, rest, part := strings.Cut(s, "/")
	if err := checkDevice(device); err != nil {
		return ID{}, fmt.Errorf("share ID %q: %w", clipID(s), err)
	}
	if !part {
		return ID{Device: device}, nil
	}
	kind, num, ok := strings.Cut(rest, "/")
	if !isPartKind(Mechanism(kind)) {
		return ID{}, fmt.Errorf("share ID %q: %q is not a kind of share (valid: timeslice, mps, remote)", clipID(s), clipID(kind))
	}
	if !ok {
		return ID{}, fmt.Errorf("share ID %q: no share index after %q (want %s/%s/<n>)", clipID(s), kind, clipID(device), kind)
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 0 || n > maxIDIndex || num != strconv.Itoa(n) {
		return ID{}, fmt.Errorf("share ID %q: %q is not a share index (0 to %d)", clipID(s), clipID(num), maxIDIndex)
	}
	return ID{Device: device, Kind: Mechanism(kind), N: n}, nil
}

// DeviceOf is the GPU or MIG instance a share ID is on: the part before
// the first "/", or the whole ID. It does not validate the ID.
func DeviceOf(id string) string {
	device, _, _ := strings.Cut(id, "/")
	return device
}

// IsRemoteID reports whether a share ID names a remote share.
func IsRemoteID(id string) bool {
	parsed, err := ParseID(id)
	return err == nil && parsed.Kind == Remote
}

func checkDevice(s string) error {
	uuid, ok := strings.CutPrefix(s, "GPU-")
	if !ok {
		uuid, ok = strings.CutPrefix(s, "MIG-")
	}
	if !ok {
		return fmt.Errorf("%q is not a GPU-… or MIG-… UUID", clipID(s))
	}
	if uuid == "" || len(uuid) > maxIDUUID {
		return fmt.Errorf("%q: want 1 to %d characters after the prefix", clipID(s), maxIDUUID)
	}
	for _, r := range uuid {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
			return fmt.Errorf("%q: %q is not allowed in a UUID", clipID(s), r)
		}
	}
	return nil
}

func isPartKind(m Mechanism) bool {
	for _, k := range partKinds {
		if k == m {
			return true
		}
	}
	return false
}

// clipID shortens an ID, or a part of one, quoted in an error.
func clipID(s string) string {
	const n = 64
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
