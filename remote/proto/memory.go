package proto

import "encoding/binary"

// The structures of virtual memory management (cuMemCreate, cuMemSetAccess)
// and memory pools cross the wire as explicit little-endian fields, never as
// the client's struct bytes: the server validates each field.

// CUmemAllocationType values (cuda.h).
const (
	MemAllocationTypeInvalid uint32 = 0
	MemAllocationTypePinned  uint32 = 1
	MemAllocationTypeManaged uint32 = 2 // CUDA 13
)

// CUmemAllocationHandleType bits (cuda.h).
const (
	MemHandleTypeNone      uint32 = 0
	MemHandleTypePosixFD   uint32 = 1
	MemHandleTypeWin32     uint32 = 2
	MemHandleTypeWin32KMT  uint32 = 4
	MemHandleTypeFabric    uint32 = 8
	MemHandleTypeKnownMask        = MemHandleTypePosixFD | MemHandleTypeWin32 | MemHandleTypeWin32KMT | MemHandleTypeFabric
)

// CUmemLocationType values (cuda.h).
const (
	MemLocationTypeInvalid uint32 = 0
	MemLocationTypeDevice  uint32 = 1
	MemLocationTypeHost    uint32 = 2
)

// CUmemAccess_flags values (cuda.h).
const (
	MemAccessNone      uint32 = 0
	MemAccessRead      uint32 = 1
	MemAccessReadWrite uint32 = 3
)

// CUmemAllocationGranularity_flags values (cuda.h).
const (
	MemGranularityMinimum     uint32 = 0
	MemGranularityRecommended uint32 = 1
)

// CUmemPool_attribute values (cuda.h). The first three are ints, the rest
// cuuint64_t; the interposer widens them all to a u64 on the wire.
const (
	MemPoolReuseFollowEventDependencies   uint32 = 1
	MemPoolReuseAllowOpportunistic        uint32 = 2
	MemPoolReuseAllowInternalDependencies uint32 = 3
	MemPoolReleaseThreshold               uint32 = 4
	MemPoolReservedMemCurrent             uint32 = 5
	MemPoolReservedMemHigh                uint32 = 6
	MemPoolUsedMemCurrent                 uint32 = 7
	MemPoolUsedMemHigh                    uint32 = 8
)

// MemProp is a CUmemAllocationProp's fields (its win32HandleMetaData and
// reserved bytes do not travel).
type MemProp struct {
	Type        uint32 // CUmemAllocationType
	HandleTypes uint32 // requestedHandleTypes
	LocType     uint32 // location.type
	LocID       int32  // location.id: a device ordinal for a device location
	// allocFlags
	Compression   uint32 // compressionType (an unsigned char)
	GPUDirectRDMA uint32 // gpuDirectRDMACapable (an unsigned char)
	Usage         uint32 // usage (an unsigned short)
}

// MemProp writes a CUmemAllocationProp's fields.
func (e *Encoder) MemProp(p MemProp) {
	e.U32(p.Type)
	e.U32(p.HandleTypes)
	e.U32(p.LocType)
	e.I32(p.LocID)
	e.U32(p.Compression)
	e.U32(p.GPUDirectRDMA)
	e.U32(p.Usage)
}

// MemProp reads a CUmemAllocationProp's fields.
func (d *Decoder) MemProp() MemProp {
	return MemProp{Type: d.U32(), HandleTypes: d.U32(), LocType: d.U32(), LocID: d.I32(),
		Compression: d.U32(), GPUDirectRDMA: d.U32(), Usage: d.U32()}
}

// MemAccessDesc is a CUmemAccessDesc: a location and its access flags.
type MemAccessDesc struct {
	LocType uint32
	LocID   int32
	Flags   uint32
}

// MemAccessDescSize is the size of one CUmemAccessDesc record on the wire
// (cuMemSetAccess, cuMemPoolSetAccess): location type, location id and
// flags, each 32 bits, little-endian. MaxMemAccessDescs bounds one call's.
const (
	MemAccessDescSize = 12
	MaxMemAccessDescs = 64
)

// EncodeMemAccessDescs packs descriptors into the wire blob.
func EncodeMemAccessDescs(ds []MemAccessDesc) []byte {
	b := make([]byte, 0, len(ds)*MemAccessDescSize)
	for _, d := range ds {
		b = binary.LittleEndian.AppendUint32(b, d.LocType)
		b = binary.LittleEndian.AppendUint32(b, uint32(d.LocID))
		b = binary.LittleEndian.AppendUint32(b, d.Flags)
	}
	return b
}

// DecodeMemAccessDescs unpacks the wire blob; ok is false when it is empty,
// not a whole number of records, or more than MaxMemAccessDescs.
func DecodeMemAccessDescs(b []byte) (ds []MemAccessDesc, ok bool) {
	n := len(b) / MemAccessDescSize
	if len(b) == 0 || len(b)%MemAccessDescSize != 0 || n > MaxMemAccessDescs {
		return nil, false
	}
	ds = make([]MemAccessDesc, n)
	for i := range ds {
		r := b[i*MemAccessDescSize:]
		ds[i] = MemAccessDesc{LocType: binary.LittleEndian.Uint32(r), LocID: int32(binary.LittleEndian.Uint32(r[4:])),
			Flags: binary.LittleEndian.Uint32(r[8:])}
	}
	return ds, true
}

// MemPoolProps is a CUmemPoolProps's fields (its win32SecurityAttributes and
// reserved bytes do not travel).
type MemPoolProps struct {
	AllocType   uint32
	HandleTypes uint32
	LocType     uint32
	LocID       int32
	MaxSize     uint64
	Usage       uint32
}
