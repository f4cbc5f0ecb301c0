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
	skip []share.Mechanism
}

// Skip leaves the mechanisms out: Catalog does not ask their providers
// (a front door skips share.Remote unless a request may need it, as
// looking at the pool goes over the network).
func Skip(ms ...share.Mechanism) CatalogOption {
	return func(o *catalogOptions) { o.skip = append(o.skip, ms...) }
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
		if slices.Contains(o.skip, p.Mechanism()) {
			continue
		}
		got, err := p.Offers(ctx, inv, as)
		if err != nil {
			return nil, nil, fmt.Errorf("%s shares: %w", p.Mechanism(), err)
		}
		offers = append(offers, got...)
	}
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
