// Package mig changes the MIG layout of GPUs: it finds non-overlapping
// placements for a wanted set of instances (Fit) and applies a layout to a GPU
// without leaving it half-configured (Apply): it refuses while instances are in
// use, plans before it destroys anything, and restores the previous instances
// at their previous placements if any step fails.
package mig
