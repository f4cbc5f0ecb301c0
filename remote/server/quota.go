package server

import (
	"fmt"
	"sync"

	"github.com/gpumux/gpumux/remote/token"
)

// How tokens of one ID combine. Tokens of one ID (a reservation, minted
// again with a new expiry or quota) share a pool: its limit is the largest
// quota of the ID's tokens that have joined it since it was made (joinQuota),
// which is no more than admission counts for the ID (admit). Within the
// pool, the connections presenting one token (one set of claims: tokens are
// signed deterministically, so equal claims are the same token) are also
// bounded by that token's own quota, together. So a connection allocates
// only while both its token's quota and the ID's pool have room: a later
// 1 GiB token of an ID first seen with 2 GiB gets 1 GiB, and all of the
// ID's connections together never pass the largest quota, which is what
// the GPU admitted. A token without a quota is bounded by the pool alone
// (none if no token of the ID has a quota).

// quota is the device memory of the connections presenting tokens of one
// ID: the ID's pool, and the grants of its tokens within it.
type quota struct {
	id   string
	refs int // connections; guarded by Server.mu

	mu     sync.Mutex
	limit  uint64 // the largest quota of the tokens joined; 0: none has one
	used   uint64
	grants map[grantKey]*grant
}

// grantKey names one token of an ID by its claims.
type grantKey struct {
	quota   uint64
	devices string // the token's GPUs, in order
	expires int64
}

// grant is what the connections presenting one token use of its quota.
type grant struct {
	key   grantKey
	limit uint64 // the token's quota; 0: none
	used  uint64
	refs  int // guarded by quota.mu
}

// share is one connection's part in a quota: the ID's pool and its
// token's grant (nil for a connection without a token ID).
type share struct {
	q *quota
	g *grant
}

// fits reports whether n more bytes fit in limit with used taken (limit
// 0: none).
func fits(limit, used, n uint64) bool {
	return limit == 0 || used <= limit && n <= limit-used
}

// reserve takes n bytes from the pool and the grant, or reports false if
// either has no room.
func (sh *share) reserve(n uint64) bool {
	q, g := sh.q, sh.g
	q.mu.Lock()
	defer q.mu.Unlock()
	if !fits(q.limit, q.used, n) || g != nil && !fits(g.limit, g.used, n) {
		return false
	}
	q.used += n
	if g != nil {
		g.used += n
	}
	return true
}

// release gives n bytes back.
func (sh *share) release(n uint64) {
	q, g := sh.q, sh.g
	q.mu.Lock()
	defer q.mu.Unlock()
	q.used -= min(n, q.used)
	if g != nil {
		g.used -= min(n, g.used)
	}
}

// left returns the connection's limit, the smaller of the pool's and its
// token's, and what is left of it: the smaller of what is left of each
// (limit 0: none).
func (sh *share) left() (limit, left uint64) {
	q, g := sh.q, sh.g
	q.mu.Lock()
	defer q.mu.Unlock()
	limit, left = q.limit, q.limit-min(q.used, q.limit)
	if g == nil || g.limit == 0 {
		return limit, left
	}
	gLeft := g.limit - min(g.used, g.limit)
	if limit == 0 {
		return g.limit, gLeft
	}
	return min(limit, g.limit), min(left, gLeft)
}

// used returns what the connections of the share's token ID hold together.
func (sh *share) used() uint64 {
	sh.q.mu.Lock()
	defer sh.q.mu.Unlock()
	return sh.q.used
}

// joinQuota returns a connection's share in the quota of c's token ID,
// shared with the live connections presenting tokens of that ID, and in
// its token's grant; c's quota raises the pool's limit if it is larger.
// Connections without an ID (WithInsecureNoAuth) get a quota each,
// without a limit.
func (s *Server) joinQuota(c token.Claims) *share {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.ID == "" {
		q := &quota{limit: c.Quota, refs: 1}
		s.anonQuotas[q] = struct{}{}
		return &share{q: q}
	}
	q := s.quotas[c.ID]
	if q == nil {
		q = &quota{id: c.ID, grants: map[grantKey]*grant{}}
		s.quotas[c.ID] = q
	}
	q.refs++
	q.mu.Lock()
	defer q.mu.Unlock()
	q.limit = max(q.limit, c.Quota) // admit counted it
	k := grantKey{quota: c.Quota, devices: fmt.Sprint(c.Devices()), expires: c.Expires.Unix()}
	g := q.grants[k]
	if g == nil {
		g = &grant{key: k, limit: c.Quota}
		q.grants[k] = g
	}
	g.refs++
	return &share{q: q, g: g}
}

// leaveQuota drops a connection's share; the last one of a token forgets
// its grant, the last one of an ID the quota.
func (s *Server) leaveQuota(sh *share) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := sh.q
	q.refs--
	if g := sh.g; g != nil {
		q.mu.Lock()
		if g.refs--; g.refs == 0 {
			delete(q.grants, g.key)
		}
		q.mu.Unlock()
	}
	switch {
	case q.id == "":
		delete(s.anonQuotas, q)
	case q.refs == 0:
		delete(s.quotas, q.id)
		s.releaseLocked(q.id)
	}
}

// QuotaUsed reports the device memory in use under a token ID, for tests
// and metrics.
func (s *Server) QuotaUsed(id string) uint64 {
	s.mu.Lock()
	q := s.quotas[id]
	s.mu.Unlock()
	if q == nil {
		return 0
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.used
}
