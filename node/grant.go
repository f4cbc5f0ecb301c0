package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/gpumux/gpumux/node/lease"
	"github.com/gpumux/gpumux/share"
)

// ErrNotReserved means a container named shares in GPUMUX_SHARES that this
// node did not reserve for it.
var ErrNotReserved = errors.New("shares not reserved on this node")

// Claim is what a container asks of the node, as a front door read it
// (ParseRequest).
type Claim struct {
	// Container is the container's ID (runc's): the key of its leases.
	Container string
	// Request is what it asks for; Reserved the shares the Nomad plugin
	// reserved for it (GPUMUX_SHARES), which are claimed with Token
	// (GPUMUX_RESERVATION) instead of chosen.
	Request  share.Request
	Reserved []string
	Token    string
	// Env is the container's environment ("K=V"): its LD_LIBRARY_PATH is
	// kept after the edits' own.
	Env []string
}

// Grant is what a claim was given: the shares leased to the container and
// the edits that give them to it.
type Grant struct {
	Shares []share.Share
	Edits  share.Edits
}

// Lease serves a claim from the lease store: it leases the shares the
// Nomad plugin reserved for the container (with their one-time token), or
// the ones the share policy (share.Choose) picks among those no other
// container holds and that can be used now, looking at remote GPUs only for
// a claim that may need them; and it returns them with their edits. A
// share that cannot be used now (no MPS daemon, a remote server gone) fails
// the claim with the reason. Leases of containers alive reports gone are
// reclaimed first; warn hears of those kept. record adds to the lease's
// record. On error nothing stays leased.
func (n *Node) Lease(ctx context.Context, c Claim, alive func(lease.Record) (bool, error), warn io.Writer, record ...lease.AcquireOption) (g Grant, err error) {
	req := c.Request
	if req.Mechanism != "" {
		if err := n.Serves(req.Mechanism); err != nil {
			return Grant{}, fmt.Errorf("mechanism %q: %w", req.Mechanism, err)
		}
	}
	// Remote GPUs are looked for (over the network) only for requests that
	// may need them: remote ones now, auto ones if nothing local fits.
	networked := n.NeedsNetwork(req, c.Reserved)
	catalog, err := n.Catalog(ctx, catalogFor(networked)...)
	if err != nil {
		return Grant{}, err
	}
	st := LeasesIn(n.cfg.StateDir)
	var ids []string
	if len(c.Reserved) > 0 {
		// Nomad reserved these shares: honour them only with the token its
		// plugin recorded for them, which works once.
		if c.Token == "" {
			return Grant{}, fmt.Errorf("%w: GPUMUX_SHARES=%s without %s: only the gpumux Nomad plugin's reservations are honoured", ErrNotReserved, strings.Join(c.Reserved, ","), share.EnvReservation)
		}
		if ids, err = st.claim(ctx, c.Container, c.Token, c.Reserved, alive, warn, record...); err != nil {
			return Grant{}, fmt.Errorf("%w: %w", ErrNotReserved, err)
		}
	} else {
		ids, err = st.acquire(ctx, c.Container, alive, chooser(catalog, n, req), warn, record...)
		if errors.Is(err, share.ErrNoFit) && !networked && n.MayFallBack(req) {
			// Nothing local fits: look at the pool (outside the lease
			// store's lock) and choose again, remote shares included.
			if catalog, err = n.Catalog(ctx); err != nil {
				return Grant{}, fmt.Errorf("no local share fits, and remote GPUs: %w", err)
			}
			ids, err = st.acquire(ctx, c.Container, alive, chooser(catalog, n, req), warn, record...)
		}
		if err != nil {
			return Grant{}, err
		}
	}
	defer func() {
		if err != nil {
			st.Release(context.WithoutCancel(ctx), c.Container)
		}
	}()
	shares, err := catalog.Lookup(ids...)
	if err != nil {
		return Grant{}, err
	}
	for _, s := range shares {
		if ok, why := n.Health(s); !ok {
			return Grant{}, fmt.Errorf("share %s cannot be used now: %s", s.ID, why)
		}
	}
	edits, err := n.Edits(shares)
	if err != nil {
		return Grant{}, err
	}
	prependLibraryPath(edits, c.Env)
	return Grant{Shares: shares, Edits: edits}, nil
}

// chooser picks a request's shares among the catalog's free ones: neither
// leased nor unusable now (n.Health). When none fit, the error also says
// why the unusable shares of the mechanisms tried cannot be used.
func chooser(catalog *share.Catalog, n *Node, req share.Request) func(map[string]string) ([]string, error) {
	return func(leasedBy map[string]string) ([]string, error) {
		sick := map[string]string{} // device → why
		free := func(s share.Share) bool {
			if leasedBy[s.ID] != "" {
				return false
			}
			if ok, why := n.Health(s); !ok {
				if req.Mechanism == "" || s.Mechanism == req.Mechanism {
					sick[s.Parent()] = why
				}
				return false
			}
			return true
		}
		shares, err := share.Choose(catalog, free, req)
		if err != nil {
			if len(sick) > 0 && errors.Is(err, share.ErrNoFit) {
				var whys []string
				for _, dev := range slices.Sorted(maps.Keys(sick)) {
					whys = append(whys, sick[dev])
				}
				return nil, fmt.Errorf("%w; unusable now: %s", err, strings.Join(whys, "; "))
			}
			return nil, err
		}
		return share.IDs(shares), nil
	}
}

// catalogFor leaves the networked mechanisms out unless wanted.
func catalogFor(networked bool) []CatalogOption {
	if networked {
		return nil
	}
	return []CatalogOption{Local()}
}

// EnvValue returns the value of key in "K=V" entries, the last one
// winning.
func EnvValue(env []string, key string) string {
	v := ""
	for _, e := range env {
		if k, val, ok := strings.Cut(e, "="); ok && k == key {
			v = val
		}
	}
	return v
}
