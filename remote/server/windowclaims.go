package server

import (
	"context"
	"fmt"
	"sync"

	"github.com/gpumux/gpumux/remote/proto"
)

// windowClaims are the window bases the sessions of one server hold (its
// process's addresses). A session that starts here takes bases nobody
// holds; one that moves in needs its snapshot's. A session that left for
// another server lets go of its windows only when its cleanup has run,
// after the switch, so a move back that comes first must wait for that:
// without the wait the driver finds the base mapped and the move is
// refused (seen on the H200 when a session went back within the old
// session's cleanup).
type windowClaims struct {
	mu sync.Mutex
	by map[proto.DevPtr]*windowClaim
}

type windowClaim struct {
	owner   *session
	leaving bool          // its owner is ending: it lets go without being asked
	gone    chan struct{} // closed when it lets go
}

func newWindowClaims() *windowClaims {
	return &windowClaims{by: map[proto.DevPtr]*windowClaim{}}
}

// try claims base for s if nobody holds it, and reports whether s holds
// it now and whether this call made the claim.
func (c *windowClaims) try(s *session, base proto.DevPtr) (held, made bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if w := c.by[base]; w != nil {
		return w.owner == s, false
	}
	c.by[base] = &windowClaim{owner: s, gone: make(chan struct{})}
	return true, true
}

// await claims bases for s, waiting for sessions that are ending to let go
// of theirs, until ctx ends, and reports whether it waited. A base that a
// live session holds is an error: it lets go only when its client goes.
func (c *windowClaims) await(ctx context.Context, s *session, bases []proto.DevPtr) (waited bool, err error) {
	for _, base := range bases {
		for {
			c.mu.Lock()
			w := c.by[base]
			if w == nil {
				c.by[base] = &windowClaim{owner: s, gone: make(chan struct{})}
			}
			c.mu.Unlock()
			if w == nil || w.owner == s {
				break
			}
			if !w.leaving {
				return waited, fmt.Errorf("the window at %#x is held by session %d of this server", base, w.owner.id)
			}
			waited = true
			select {
			case <-w.gone:
			case <-ctx.Done():
				return waited, fmt.Errorf("waiting for the session that left here to let go of the window at %#x: %w", base, context.Cause(ctx))
			}
		}
	}
	return waited, nil
}

// leave marks s's claims as those of a session that is ending.
func (c *windowClaims) leave(s *session) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.by {
		if w.owner == s {
			w.leaving = true
		}
	}
}

// release gives back s's claim of base.
func (c *windowClaims) release(s *session, base proto.DevPtr) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if w := c.by[base]; w != nil && w.owner == s {
		delete(c.by, base)
		close(w.gone)
	}
}

// releaseAll gives back every claim of s.
func (c *windowClaims) releaseAll(s *session) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for base, w := range c.by {
		if w.owner == s {
			delete(c.by, base)
			close(w.gone)
		}
	}
}

// windowBases are the bases of the windows a snapshot's session needs:
// those of its allocations, its pools' memory and its own reservations.
func (sn snapshot) windowBases() []proto.DevPtr {
	seen := map[proto.DevPtr]bool{}
	var out []proto.DevPtr
	add := func(p proto.DevPtr) {
		if b := p &^ (windowSize - 1); !seen[b] {
			seen[b] = true
			out = append(out, b)
		}
	}
	for _, a := range sn.allocs {
		add(a.base)
	}
	for _, r := range sn.reserved {
		add(r.base)
	}
	for _, p := range sn.pools {
		for _, c := range p.chunks {
			add(c.base)
		}
	}
	return out
}
