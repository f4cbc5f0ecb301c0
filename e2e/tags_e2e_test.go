//go:build e2e && !no_dynamic_plugins && !static_build

package e2e

// The e2e tests link containerd's Go client, whose loader of containerd Go
// plugins imports Go's plugin package and so makes the linker bind every
// symbol at start (-z now), and go-nvml, whose NVML symbols must stay unbound
// until NVML is loaded. Linked together without the tag below, the test binary
// dies at start on a machine without the NVIDIA driver ("undefined symbol:
// nvml…"). Build them as the Makefile does:
//
//	go test -tags 'e2e no_dynamic_plugins' ./e2e/...
var _ = buildTheE2ETestsWithTheTag_no_dynamic_plugins
