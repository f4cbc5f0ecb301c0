package proto

import "testing"

func TestLaunchAttrsRoundTrip(t *testing.T) {
	a := LaunchAttr{ID: LaunchAttrClusterDimension}
	a.SetU32(0, 2)
	a.SetU32(1, 1)
	a.SetU32(2, 1)
	e := LaunchAttr{ID: LaunchAttrProgrammaticEvent}
	e.SetU64(0x1234)
	e.SetU32(2, 1)
	b := EncodeLaunchAttrs([]LaunchAttr{a, e})
	if len(b) != 2*LaunchAttrSize || b[0] != 4 || b[4] != 0 || b[8] != 2 || b[LaunchAttrSize] != 7 {
		t.Fatalf("encoded % x", b)
	}
	got, ok := DecodeLaunchAttrs(b)
	if !ok || len(got) != 2 || got[0] != a || got[1] != e || got[0].ClusterDim() != [3]uint32{2, 1, 1} || got[1].U64() != 0x1234 {
		t.Fatalf("decoded %+v, %v", got, ok)
	}
	if _, ok := DecodeLaunchAttrs(b[:LaunchAttrSize+1]); ok {
		t.Error("a partial record decoded")
	}
	if _, ok := DecodeLaunchAttrs(make([]byte, (MaxLaunchAttrs+1)*LaunchAttrSize)); ok {
		t.Error("more than MaxLaunchAttrs decoded")
	}
	if got, ok := DecodeLaunchAttrs(nil); !ok || len(got) != 0 {
		t.Error("no attributes did not decode")
	}
}
