package proto

import (
	"encoding/binary"
	"math/bits"
)

// Stream capture and CUDA graphs on the wire. Graphs, graph execs and graph
// nodes travel as Handles of the client (kinds graph, gexec and node in
// calls.def); lists of nodes as blobs of little-endian u64 handles, edge
// data as blobs of EdgeDataSize-byte CUgraphEdgeData records, and a memcpy
// node's parameters as a Copy3DSize-byte record (Copy3D).

// CUstreamCaptureStatus values.
const (
	CaptureNone        int32 = 0
	CaptureActive      int32 = 1
	CaptureInvalidated int32 = 2
)

// CUstreamCaptureMode values: a capture's mode (cuStreamBeginCapture) and a
// thread's interaction mode (cuThreadExchangeStreamCaptureMode).
const (
	CaptureModeGlobal      int32 = 0
	CaptureModeThreadLocal int32 = 1
	CaptureModeRelaxed     int32 = 2
)

// cuStreamUpdateCaptureDependencies flags.
const (
	CaptureAddDependencies uint32 = 0
	CaptureSetDependencies uint32 = 1
)

// CUgraphInstantiate_flags the server passes on.
const (
	GraphInstantiateAutoFreeOnLaunch uint64 = 1
	GraphInstantiateUseNodePriority  uint64 = 8
)

// EdgeDataSize is the size of a CUgraphEdgeData: from_port, to_port, type
// and 5 reserved bytes. All zero is the default edge.
const EdgeDataSize = 8

// MaxGraphNodes bounds the node handles in one blob (a page of
// cuGraphGetNodes, a capture's dependencies, a call's dependencies).
const MaxGraphNodes = MaxBlob / 8

// EncodeHandles packs handles into a blob of little-endian u64s.
func EncodeHandles(hs []Handle) []byte {
	b := make([]byte, 0, 8*len(hs))
	for _, h := range hs {
		b = binary.LittleEndian.AppendUint64(b, uint64(h))
	}
	return b
}

// DecodeHandles unpacks a blob of handles; ok is false when its length is
// not a multiple of 8.
func DecodeHandles(b []byte) (hs []Handle, ok bool) {
	if len(b)%8 != 0 {
		return nil, false
	}
	hs = make([]Handle, len(b)/8)
	for i := range hs {
		hs[i] = Handle(binary.LittleEndian.Uint64(b[8*i:]))
	}
	return hs, true
}

// Copy3D is a device-to-device CUDA_MEMCPY3D: the fields of a memcpy node
// that gpumux forwards (both sides device memory, no arrays, level of
// detail 0). It travels as Copy3DSize bytes, the fields in this order as
// little-endian u64s.
type Copy3D struct {
	Src, SrcX, SrcY, SrcZ, SrcPitch, SrcHeight uint64
	Dst, DstX, DstY, DstZ, DstPitch, DstHeight uint64
	Width, Height, Depth                       uint64
}

// Copy3DSize is the size of an encoded Copy3D.
const Copy3DSize = 15 * 8

func (c *Copy3D) fields() []*uint64 {
	return []*uint64{&c.Src, &c.SrcX, &c.SrcY, &c.SrcZ, &c.SrcPitch, &c.SrcHeight,
		&c.Dst, &c.DstX, &c.DstY, &c.DstZ, &c.DstPitch, &c.DstHeight, &c.Width, &c.Height, &c.Depth}
}

// Encode returns the wire form.
func (c Copy3D) Encode() []byte {
	b := make([]byte, 0, Copy3DSize)
	for _, f := range c.fields() {
		b = binary.LittleEndian.AppendUint64(b, *f)
	}
	return b
}

// DecodeCopy3D reads the wire form; ok is false unless b is Copy3DSize
// bytes.
func DecodeCopy3D(b []byte) (c Copy3D, ok bool) {
	if len(b) != Copy3DSize {
		return c, false
	}
	for i, f := range c.fields() {
		*f = binary.LittleEndian.Uint64(b[8*i:])
	}
	return c, true
}

// Spans returns the byte ranges [start, end) the copy reads and writes:
// from its first byte to its last on each side. ok is false for an empty
// copy, rows wider than their pitch or planes taller than their height
// when there are several, or arithmetic that overflows.
func (c *Copy3D) Spans() (src, dst [2]uint64, ok bool) {
	if c.Width == 0 || c.Height == 0 || c.Depth == 0 {
		return src, dst, false
	}
	src, ok1 := span3D(c.Src, c.SrcX, c.SrcY, c.SrcZ, c.SrcPitch, c.SrcHeight, c.Width, c.Height, c.Depth)
	dst, ok2 := span3D(c.Dst, c.DstX, c.DstY, c.DstZ, c.DstPitch, c.DstHeight, c.Width, c.Height, c.Depth)
	return src, dst, ok1 && ok2
}

// span3D is one side of a 3D copy: rows of width bytes pitch apart, planes
// of height rows, starting at row y of plane z, byte x.
func span3D(base, x, y, z, pitch, height, width, rows, planes uint64) ([2]uint64, bool) {
	if rows > 1 || planes > 1 {
		if x > pitch || width > pitch-x {
			return [2]uint64{}, false
		}
	}
	if planes > 1 && (y > height || rows > height-y) {
		return [2]uint64{}, false
	}
	var ok = true
	add := func(a, b uint64) uint64 {
		s, c := bits.Add64(a, b, 0)
		ok = ok && c == 0
		return s
	}
	mul := func(a, b uint64) uint64 {
		h, l := bits.Mul64(a, b)
		ok = ok && h == 0
		return l
	}
	firstRow := add(mul(z, height), y)                            // rows before the first byte
	lastRow := add(mul(add(z, planes-1), height), add(y, rows-1)) // the last byte's row
	start := add(add(base, mul(firstRow, pitch)), x)
	end := add(add(add(base, mul(lastRow, pitch)), x), width)
	return [2]uint64{start, end}, ok && start < end
}
