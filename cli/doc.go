// Package cli implements the gpumux operator command: parsing its flags,
// running its verbs against a node's GPUs, and printing tables or JSON.
// cmd/gpumux only calls Run.
package cli
