package server

import (
	"sync"

	"github.com/gpumux/gpumux/remote/token"
)

// quota is the device memory of the connections presenting one token ID.
type quota struct {
	id    string
	limit uint64 // 0: none
	refs  int    // guarded by Server.mu

	mu   sync.Mutex
	used uint64
}

// reserve takes n bytes, or reports false past the limit.
func (q *quota) reserve(n uint64) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.limit > 0 && n > q.limit-q.used {
		return false
	}
	q.used += n
	return true
}

// release gives n bytes back.
func (q *quota) release(n uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.used -= min(n, q.used)
}

// left returns the limit and what is left of it (limit 0: none).
func (q *quota) left() (limit, left uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.limit, q.limit - min(q.used, q.limit)
}

// joinQuota returns the quota of c's token ID, shared with the live
// connections presenting the same ID; its limit is the one of the first
// of them. Connections without an ID (WithInsecureNoAuth) get one each,
// without a limit.
func (s *Server) joinQuota(c token.Claims) *quota {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.ID == "" {
		q := &quota{limit: c.Quota, refs: 1}
		s.anonQuotas[q] = struct{}{}
		return q
	}
	q := s.quotas[c.ID]
	if q == nil {
		q = &quota{id: c.ID, limit: c.Quota}
		s.quotas[c.ID] = q
	}
	q.refs++
	return q
}

// leaveQuota drops a connection's share; the last one forgets the quota.
func (s *Server) leaveQuota(q *quota) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q.refs--
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
