package ociruntime

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/opencontainers/runtime-spec/specs-go"
)

// ContainerRoot reads the root file system's path from the bundle's
// config.json (relative paths are the bundle's).
func ContainerRoot(bundle string) (string, error) {
	if !filepath.IsAbs(bundle) {
		return "", fmt.Errorf("the container state's bundle %q is not an absolute path", bundle)
	}
	path := filepath.Join(bundle, "config.json")
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading the container spec: %w", err)
	}
	var spec struct {
		Root *specs.Root `json:"root"`
	}
	if err := json.Unmarshal(b, &spec); err != nil {
		return "", fmt.Errorf("decoding %s: %w", path, err)
	}
	if spec.Root == nil || spec.Root.Path == "" {
		return "", fmt.Errorf("%s has no root.path", path)
	}
	root := spec.Root.Path
	if !filepath.IsAbs(root) {
		root = filepath.Join(bundle, root)
	}
	return filepath.Clean(root), nil
}
