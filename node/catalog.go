package node

import (
	"context"
	"fmt"
	"slices"

	"github.com/gpumux/gpumux/gpu"
	"github.com/gpumux/gpumux/share"
)

// CatalogOption narrows what Catalog asks the mechanisms.
type CatalogOption func(*catalogOptions)

type catalogOptions struct {
	skip  []share.Mechanism
	local bool
}

// Skip leaves the mechanisms out: Catalog does not ask their providers.
func Skip(ms ...share.Mechanism) CatalogOption {
	return func(o *catalogOptions) { o.skip = append(o.skip, ms...) }
}

// networked is a Provider whose offers are found over the network (the
// remote pool): a front door asks it only when a request may need it.
type networked interface {
	Networked() bool
}

// Local leaves out the mechanisms whose offers are found over the network,
// for a lookup that must not wait on other hosts (gpumux status, a CDI
// spec, a request that NeedsNetwork says can do without).
func Local() CatalogOption {
	return func(o *catalogOptions) { o.local = true }
}

// Catalog reads the node's GPUs and returns the shares the node offers under
// its layout, each mechanism's from its provider. A node agent's Watch keeps
// the last one (Current).
func (n *Node) Catalog(ctx context.Context, opts ...CatalogOption) (*share.Catalog, error) {
	_, c, err := n.read(ctx, opts...)
	return c, err
}

// read is Catalog, with the inventory and the assignments it was built from.
func (n *Node) read(ctx context.Context, opts ...CatalogOption) (*gpu.Node, *share.Catalog, error) {
	var o catalogOptions
	for _, opt := range opts {
		opt(&o)
	}
	inv, as, err := n.assign(ctx)
	if err != nil {
		return nil, nil, err
	}
	var offers []share.Offer
	for _, p := range n.providers {
		if slices.Contains(o.skip, p.Mechanism()) || o.local && isNetworked(p) {
			continue
		}
		got, err := p.Offers(ctx, inv, as)
		if err != nil {
			return nil, nil, fmt.Errorf("%s shares: %w", p.Mechanism(), err)
		}
		offers = append(offers, got...)
	}
	offers = withoutIgnored(n.cfg, offers)
	n.cfg.GroupNames.Rename(offers)
	c, err := share.NewCatalog(offers)
	if err != nil {
		return nil, nil, err
	}
	return inv, c, nil
}

// assign reads the GPUs and resolves the layout against them.
func (n *Node) assign(ctx context.Context) (*gpu.Node, []share.Assignment, error) {
	inv, err := n.host.Inventory(ctx)
	if err != nil {
		return nil, nil, err
	}
	as, err := n.cfg.Layout().Assign(inv)
	if err != nil {
		return nil, nil, err
	}
	return inv, as, nil
}

// Current is the catalog the node agent built last (nil before the first).
func (n *Node) Current() *share.Catalog {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.catalog
}

func (n *Node) setCurrent(c *share.Catalog) {
	n.mu.Lock()
	n.catalog = c
	n.mu.Unlock()
}

func isNetworked(p Provider) bool {
	nw, ok := p.(networked)
	return ok && nw.Networked()
}

// Serves checks that the node has mechanism m: a known mechanism that
// this node's config provides (remote needs a remote block).
func (n *Node) Serves(m share.Mechanism) error {
	_, err := n.provider(m)
	return err
}

// NeedsNetwork reports whether the shares of a request must be looked for
// over the network before they are chosen: it asks for a networked
// mechanism, or names reserved shares of one.
func (n *Node) NeedsNetwork(req share.Request, reserved []string) bool {
	for _, p := range n.providers {
		if !isNetworked(p) {
			continue
		}
		if req.Mechanism == p.Mechanism() {
			return true
		}
		for _, id := range reserved {
			if parsed, err := share.ParseID(id); err == nil && parsed.Kind == p.Mechanism() {
				return true
			}
		}
	}
	return false
}

// MayFallBack reports whether a request that no share of a Local catalog
// fits may be served by a networked mechanism: auto, at an isolation level
// the policy lets fall back to one this node provides (share.AutoFallback).
func (n *Node) MayFallBack(req share.Request) bool {
	if req.Mechanism != "" {
		return false
	}
	for _, m := range share.AutoFallback(req.Isolation) {
		if p, err := n.provider(m); err == nil && isNetworked(p) {
			return true
		}
	}
	return false
}
