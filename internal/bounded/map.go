package bounded

import "sync"

// Map is a map of at most max entries, emptied when a new key would
// exceed it. The zero value is not usable: see New.
type Map[K comparable, V any] struct {
	mu  sync.Mutex
	m   map[K]V
	max int
}

// New returns an empty Map of at most max entries.
func New[K comparable, V any](max int) *Map[K, V] {
	return &Map[K, V]{m: map[K]V{}, max: max}
}

// Get returns the value of k, and whether there is one.
func (c *Map[K, V]) Get(k K) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[k]
	return v, ok
}

// Put sets the value of k, emptying the map first when it is full and k is
// not in it.
func (c *Map[K, V]) Put(k K, v V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[k]; !ok && len(c.m) >= c.max {
		clear(c.m)
	}
	c.m[k] = v
}

// Keys returns the keys the map holds, in no order.
func (c *Map[K, V]) Keys() []K {
	c.mu.Lock()
	defer c.mu.Unlock()
	keys := make([]K, 0, len(c.m))
	for k := range c.m {
		keys = append(keys, k)
	}
	return keys
}

// Clear empties the map.
func (c *Map[K, V]) Clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.m)
}
