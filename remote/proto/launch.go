package proto

import "encoding/binary"

// Launch attributes (CUlaunchAttribute) travel in cuLaunchKernelEx's and the
// cluster occupancy calls' attrs blob as records of LaunchAttrSize bytes,
// CUlaunchAttribute's own layout on 64-bit Linux: the attribute ID (u32,
// little-endian), 4 bytes of padding, and the 64-byte CUlaunchAttributeValue.
// Handles in a value (an event) are the client's handles; the server maps
// them to the backend's own or refuses the attribute.
const (
	LaunchAttrSize      = 72
	LaunchAttrValueSize = 64
	// MaxLaunchAttrs bounds the attributes of one call.
	MaxLaunchAttrs = 32
)

// CUlaunchAttributeID values (cuda.h, CUDA 13.0).
const (
	LaunchAttrIgnore                          uint32 = 0
	LaunchAttrAccessPolicyWindow              uint32 = 1
	LaunchAttrCooperative                     uint32 = 2
	LaunchAttrSynchronizationPolicy           uint32 = 3
	LaunchAttrClusterDimension                uint32 = 4
	LaunchAttrClusterSchedulingPolicy         uint32 = 5
	LaunchAttrProgrammaticStreamSerialization uint32 = 6
	LaunchAttrProgrammaticEvent               uint32 = 7
	LaunchAttrPriority                        uint32 = 8
	LaunchAttrMemSyncDomainMap                uint32 = 9
	LaunchAttrMemSyncDomain                   uint32 = 10
	LaunchAttrPreferredClusterDimension       uint32 = 11
	LaunchAttrLaunchCompletionEvent           uint32 = 12
	LaunchAttrDeviceUpdatableKernelNode       uint32 = 13
	LaunchAttrPreferredSharedMemoryCarveout   uint32 = 14
	LaunchAttrNvlinkUtilCentricScheduling     uint32 = 16
)

// LaunchAttr is one launch attribute: its ID and its value's bytes.
type LaunchAttr struct {
	ID    uint32
	Value [LaunchAttrValueSize]byte
}

// U32 returns the value's i-th 32-bit word.
func (a *LaunchAttr) U32(i int) uint32 { return binary.LittleEndian.Uint32(a.Value[4*i:]) }

// U64 returns the value's first 64-bit word (a handle or pointer).
func (a *LaunchAttr) U64() uint64 { return binary.LittleEndian.Uint64(a.Value[:8]) }

// SetU32 sets the value's i-th 32-bit word.
func (a *LaunchAttr) SetU32(i int, v uint32) { binary.LittleEndian.PutUint32(a.Value[4*i:], v) }

// SetU64 sets the value's first 64-bit word.
func (a *LaunchAttr) SetU64(v uint64) { binary.LittleEndian.PutUint64(a.Value[:8], v) }

// ClusterDim returns a dimension attribute's x, y, z.
func (a *LaunchAttr) ClusterDim() [3]uint32 { return [3]uint32{a.U32(0), a.U32(1), a.U32(2)} }

// EncodeLaunchAttrs packs attributes into the wire blob.
func EncodeLaunchAttrs(attrs []LaunchAttr) []byte {
	b := make([]byte, len(attrs)*LaunchAttrSize)
	for i, a := range attrs {
		r := b[i*LaunchAttrSize:]
		binary.LittleEndian.PutUint32(r, a.ID)
		copy(r[8:LaunchAttrSize], a.Value[:])
	}
	return b
}

// DecodeLaunchAttrs unpacks the wire blob; ok is false when its length is
// not a whole number of records or it holds more than MaxLaunchAttrs.
func DecodeLaunchAttrs(b []byte) (attrs []LaunchAttr, ok bool) {
	if len(b)%LaunchAttrSize != 0 || len(b)/LaunchAttrSize > MaxLaunchAttrs {
		return nil, false
	}
	attrs = make([]LaunchAttr, len(b)/LaunchAttrSize)
	for i := range attrs {
		r := b[i*LaunchAttrSize:]
		attrs[i].ID = binary.LittleEndian.Uint32(r)
		copy(attrs[i].Value[:], r[8:LaunchAttrSize])
	}
	return attrs, true
}
