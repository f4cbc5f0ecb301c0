package server

import (
	"encoding/binary"
	"testing"

	"github.com/gpumux/gpumux/remote/proto"
)

// TestTranslateParams: the 8-byte aligned words of a kernel's parameters
// that fall in a relocated global are translated, whatever parameter they
// are in; anything else, an unaligned word or a word past a parameter's
// end among them, is left as the client sent it.
func TestTranslateParams(t *testing.T) {
	const (
		g1, at1 = proto.DevPtr(0x7f00_0000_1000), proto.DevPtr(0x7e00_0000_4000)
		g2, at2 = proto.DevPtr(0x7f00_0000_9000), proto.DevPtr(0x7e00_0001_0000)
	)
	var rs relocations
	a1 := &allocation{base: g1, size: 112, at: at1}
	a2 := &allocation{base: g2, size: 8, at: at2}
	rs.add(a2)
	rs.add(a1)
	u64 := func(v proto.DevPtr) []byte { return binary.LittleEndian.AppendUint64(nil, uint64(v)) }
	cat := func(bs ...[]byte) []byte {
		var out []byte
		for _, b := range bs {
			out = append(out, b...)
		}
		return out
	}
	for _, tt := range []struct {
		name     string
		ps       []param
		in, want []byte
	}{
		{"a pointer argument", []param{{0, 8}}, u64(g1), u64(at1)},
		{"inside the global", []param{{0, 8}}, u64(g1 + 111), u64(at1 + 111)},
		{"one past its end", []param{{0, 8}}, u64(g1 + 112), u64(g1 + 112)},
		{"just before it", []param{{0, 8}}, u64(g1 - 1), u64(g1 - 1)},
		{"the second global", []param{{0, 8}}, u64(g2 + 7), u64(at2 + 7)},
		{"between the two", []param{{0, 8}}, u64(g2 - 8), u64(g2 - 8)},
		{"after an int", []param{{0, 4}, {8, 8}}, cat([]byte{1, 2, 3, 4, 0, 0, 0, 0}, u64(g2)), cat([]byte{1, 2, 3, 4, 0, 0, 0, 0}, u64(at2))},
		{"in a structure by value", []param{{0, 24}}, cat(u64(5), u64(g1+8), u64(g2)), cat(u64(5), u64(at1+8), u64(at2))},
		{"a 4-byte parameter's bytes", []param{{0, 4}, {4, 4}}, u64(g1), u64(g1)},
		{"unaligned in a byte array", []param{{0, 1}, {1, 12}}, cat([]byte{0}, u64(g1), []byte{0, 0, 0, 0}), cat([]byte{0}, u64(g1), []byte{0, 0, 0, 0})},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := append([]byte(nil), tt.in...)
			rs.translateParams(got, tt.ps)
			if string(got) != string(tt.want) {
				t.Errorf("got % x, want % x", got, tt.want)
			}
		})
	}
	rs.remove(a1)
	rs.remove(a2)
	p := u64(g1)
	rs.translateParams(p, []param{{0, 8}})
	if string(p) != string(u64(g1)) || rs.of(g1) != nil {
		t.Error("a global removed is still translated")
	}
}
