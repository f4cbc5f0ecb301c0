package bounded

import (
	"slices"
	"testing"
)

func TestMap(t *testing.T) {
	m := New[string, int](2)
	m.Put("a", 1)
	m.Put("b", 2)
	m.Put("b", 3) // a key it holds: nothing emptied
	if v, ok := m.Get("a"); !ok || v != 1 {
		t.Fatalf("a = %d, %v; want 1, true", v, ok)
	}
	if v, _ := m.Get("b"); v != 3 {
		t.Fatalf("b = %d; want 3", v)
	}
	m.Put("c", 4) // a third key: emptied first
	if got := slices.Sorted(slices.Values(m.Keys())); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("keys after a third: %q; want [c]", got)
	}
	m.Clear()
	if _, ok := m.Get("c"); ok || len(m.Keys()) != 0 {
		t.Fatalf("after Clear: %q", m.Keys())
	}
}
