package ocicreate

import (
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"syscall"

	"github.com/gpumux/gpumux/internal/filever"
	"github.com/gpumux/gpumux/nodeconfig"
)

// MatchConfig makes the server answer gpumux-runtime for any node config
// file that decodes to cfg, and for no other: the Nomad plugin's config
// is the body of its plugin block, which gpumux-runtime reads from a file
// of its own (/etc/gpumux/node.hcl, or the Nomad client's config file).
// Each version of a file is read once.
func MatchConfig(cfg *nodeconfig.Config) ServerOption {
	return func(s *Server) { s.match = &configMatch{want: cfg, seen: map[string]matchSeen{}} }
}

// configMatch remembers, per file, whether the version it read decodes to
// want.
type configMatch struct {
	want *nodeconfig.Config
	mu   sync.Mutex
	seen map[string]matchSeen
}

type matchSeen struct {
	version filever.Version
	same    bool
}

// maxConfigFile bounds a node config file read for a match.
const maxConfigFile = 1 << 20

// maxSeen bounds the files remembered: a node has one or two.
const maxSeen = 64

func (m *configMatch) matches(path string) bool {
	if !filepath.IsAbs(path) {
		return false
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0) // a FIFO there does not block
	if err != nil {
		return false
	}
	defer f.Close()
	v, ok := filever.Of(f) // a regular file only
	if !ok {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if seen, ok := m.seen[path]; ok && seen.version == v {
		return seen.same
	}
	src, err := io.ReadAll(io.LimitReader(f, maxConfigFile+1))
	same := false
	if err == nil && len(src) <= maxConfigFile {
		cfg, err := nodeconfig.ParseConfig(src)
		same = err == nil && reflect.DeepEqual(cfg, m.want)
	}
	if len(m.seen) >= maxSeen {
		clear(m.seen)
	}
	m.seen[path] = matchSeen{v, same}
	return same
}
