package fakecuda

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/gpumux/gpumux/remote/proto"
)

func TestPeerQueries(t *testing.T) {
	b := newFake(t, WithDevices(3))
	for _, tc := range []struct {
		name  string
		got   func() (int32, proto.Result)
		want  int32
		wantR proto.Result
	}{
		{"can access 0→1", func() (int32, proto.Result) { return b.DeviceCanAccessPeer(0, 1) }, 1, proto.Success},
		{"can access 2→0", func() (int32, proto.Result) { return b.DeviceCanAccessPeer(2, 0) }, 1, proto.Success},
		{"can access itself", func() (int32, proto.Result) { return b.DeviceCanAccessPeer(1, 1) }, 0, proto.Success},
		{"can access a device not there", func() (int32, proto.Result) { return b.DeviceCanAccessPeer(0, 3) }, 0, proto.ErrInvalidDevice},
		{"access supported", func() (int32, proto.Result) { return b.DeviceP2PAttribute(p2pAccessSupported, 0, 1) }, 1, proto.Success},
		{"native atomics", func() (int32, proto.Result) { return b.DeviceP2PAttribute(p2pNativeAtomics, 1, 0) }, 1, proto.Success},
		{"performance rank", func() (int32, proto.Result) { return b.DeviceP2PAttribute(p2pPerformanceRank, 0, 2) }, 0, proto.Success},
		{"attribute of one device", func() (int32, proto.Result) { return b.DeviceP2PAttribute(p2pAccessSupported, 1, 1) }, 0, proto.ErrInvalidDevice},
		{"unknown attribute", func() (int32, proto.Result) { return b.DeviceP2PAttribute(99, 0, 1) }, 0, proto.ErrInvalidValue},
		{"attribute of a device not there", func() (int32, proto.Result) { return b.DeviceP2PAttribute(p2pAccessSupported, -1, 1) }, 0, proto.ErrInvalidDevice},
	} {
		if v, r := tc.got(); v != tc.want || r != tc.wantR {
			t.Errorf("%s: %d, %v; want %d, %v", tc.name, v, r, tc.want, tc.wantR)
		}
	}
}

// TestPeerAccess: a kernel reaches another device's memory only after its
// context enabled access to that memory's context; peer copies need no
// access; a plain device-to-device copy between devices is refused (the
// server must ask for a peer copy).
func TestPeerAccess(t *testing.T) {
	b := newFake(t, WithDevices(2))
	ctx0 := must[uintptr](t, "ctx 0")(b.CtxCreate(0, 0))
	ctx1 := must[uintptr](t, "ctx 1")(b.CtxCreate(1, 0))
	same := must[uintptr](t, "another ctx on 0")(b.CtxCreate(0, 0))
	img := ModuleImage([]Kernel{FillU32}, nil)
	locked(func() {
		defer b.CtxSetCurrent(0)
		b.CtxSetCurrent(ctx1)
		p1 := must[proto.DevPtr](t, "alloc on 1")(b.MemAlloc(64))
		b.CtxSetCurrent(ctx0)
		p0 := must[proto.DevPtr](t, "alloc on 0")(b.MemAlloc(64))
		m := must[uintptr](t, "load")(b.ModuleLoadData(img))
		fill := must[uintptr](t, "fill")(b.ModuleGetFunction(m, "fill_u32"))
		one := [3]uint32{1, 1, 1}
		params := make([]byte, 24)
		binary.LittleEndian.PutUint64(params, uint64(p1))
		binary.LittleEndian.PutUint32(params[8:], 7)
		binary.LittleEndian.PutUint64(params[16:], 16)

		steps := []struct {
			name string
			do   func() proto.Result
			want proto.Result
		}{
			{"a kernel on 0 writing 1's memory before access", func() proto.Result { return b.LaunchKernel(fill, one, one, 0, 0, params) }, proto.ErrIllegalAddress},
			{"disable before enable", func() proto.Result { return b.CtxDisablePeerAccess(ctx1) }, proto.ErrPeerAccessNotEnabled},
			{"enable with flags", func() proto.Result { return b.CtxEnablePeerAccess(ctx1, 1) }, proto.ErrInvalidValue},
			{"enable itself", func() proto.Result { return b.CtxEnablePeerAccess(ctx0, 0) }, proto.ErrInvalidContext},
			{"enable a context of the same device", func() proto.Result { return b.CtxEnablePeerAccess(same, 0) }, proto.ErrPeerAccessUnsupported},
			{"enable an unknown context", func() proto.Result { return b.CtxEnablePeerAccess(12345, 0) }, proto.ErrInvalidContext},
			{"enable", func() proto.Result { return b.CtxEnablePeerAccess(ctx1, 0) }, proto.Success},
			{"enable again", func() proto.Result { return b.CtxEnablePeerAccess(ctx1, 0) }, proto.ErrPeerAccessAlreadyEnabled},
			{"the kernel after access", func() proto.Result { return b.LaunchKernel(fill, one, one, 0, 0, params) }, proto.Success},
			{"disable", func() proto.Result { return b.CtxDisablePeerAccess(ctx1) }, proto.Success},
			{"the kernel after disabling", func() proto.Result { return b.LaunchKernel(fill, one, one, 0, 0, params) }, proto.ErrIllegalAddress},
			{"a peer copy without access", func() proto.Result { return b.MemcpyPeer(p0, ctx0, p1, ctx1, 64, 0, false) }, proto.Success},
			{"a peer copy naming the wrong device's context", func() proto.Result { return b.MemcpyPeer(p0, ctx1, p1, ctx1, 64, 0, false) }, proto.ErrInvalidValue},
			{"a peer copy of another context of the device", func() proto.Result { return b.MemcpyPeer(p1, ctx1, p0, same, 64, 0, true) }, proto.Success},
			{"a peer copy past the end", func() proto.Result { return b.MemcpyPeer(p0, ctx0, p1+8, ctx1, 64, 0, false) }, proto.ErrInvalidValue},
			{"a peer copy naming a context not there", func() proto.Result { return b.MemcpyPeer(p0, 1, p1, ctx1, 64, 0, false) }, proto.ErrInvalidContext},
			{"a device-to-device copy between devices", func() proto.Result { return b.MemcpyDtoD(p0, p1, 64, 0, false) }, proto.ErrInvalidValue},
		}
		for _, s := range steps {
			if r := s.do(); r != s.want {
				t.Errorf("%s: %v, want %v", s.name, r, s.want)
			}
		}
		got := make([]byte, 64)
		if r := b.MemcpyDtoH(got, p0, 0); r != proto.Success {
			t.Fatal(r)
		}
		want := make([]byte, 64)
		for i := range 16 {
			binary.LittleEndian.PutUint32(want[4*i:], 7)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("device 0 after the peer copies: % x, want the kernel's sevens", got)
		}
	})
	// Destroying a context forgets it as a peer.
	b.CtxDestroy(ctx1)
	locked(func() {
		b.CtxSetCurrent(ctx0)
		defer b.CtxSetCurrent(0)
		if r := b.CtxDisablePeerAccess(ctx1); r != proto.ErrInvalidContext {
			t.Errorf("disabling a destroyed peer: %v", r)
		}
	})
	b.CtxDestroy(ctx0)
	b.CtxDestroy(same)
}
