//go:build gpu

package ocicreate

import "testing"

// BenchmarkServerCreateRealGPU is BenchmarkServerCreate on the machine's
// real GPU 0, whole (read-only: no layout declared), and its driver: what
// gpumux agent's decision costs on a GPU node (e2e/gpu/startbench.sh
// measures the container's whole start there):
//
//	go test -c -tags gpu -o ocicreate.test ./ocicreate/ && ./ocicreate.test -test.run '^$' -test.bench RealGPU
func BenchmarkServerCreateRealGPU(b *testing.B) {
	benchCreate(b, newServerOf(b, ""), "exclusive")
}
