//go:build gpu

package ocicreate

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/gpumux/gpumux/internal/ldcache"
	"github.com/gpumux/gpumux/internal/ociruntime"
	"github.com/gpumux/gpumux/node"
)

// BenchmarkServerCreateRealGPU is BenchmarkServerCreate on the machine's
// real GPU 0, whole (read-only: no layout declared), and its driver: what
// gpumux agent's decision costs on a GPU node (e2e/gpu/startbench.sh
// measures the container's whole start there):
//
//	go test -c -tags gpu -o ocicreate.test ./ocicreate/ && ./ocicreate.test -test.run '^$' -test.bench RealGPU
func BenchmarkServerCreateRealGPU(b *testing.B) {
	benchCreate(b, newServerOf(b, ""), "exclusive")
}

// BenchmarkServerHookRealDriver is BenchmarkServerHook on the real
// driver's tree, the one a container of this node gets (bound, as runc
// does, where the container has it): the update-ldcache hook's work on a
// GPU node, where the driver's libraries are real ones. Root only.
func BenchmarkServerHookRealDriver(b *testing.B) {
	s := newServerOf(b, "")
	spec := bundle(b, map[string]string{node.AnnotationMechanism: "exclusive"})
	if got := s.ask(b, encodeRequest(s.config, "", "/usr/bin/gpumux-runtime", "create", "--bundle", spec, "c1")); got != answerRunc {
		b.Fatalf("create: answer %q", got)
	}
	raw, err := os.ReadFile(filepath.Join(spec, "config.json"))
	if err != nil {
		b.Fatal(err)
	}
	var sp specs.Spec
	if err := json.Unmarshal(raw, &sp); err != nil {
		b.Fatal(err)
	}
	tree := ""
	for _, m := range sp.Mounts {
		if m.Destination == "/usr/local/nvidia" {
			tree = m.Source
		}
	}
	if tree == "" {
		b.Fatalf("the create's spec has no mount of the driver's tree: %+v", sp.Mounts)
	}
	bundleDir, rootfs := hookBundle(b, false)
	at := filepath.Join(rootfs, "usr/local/nvidia")
	if err := unix.Mount(tree, at, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { unix.Unmount(at, unix.MNT_DETACH) })
	req := encodeHook("", specs.State{ID: "c1", Bundle: bundleDir}, ociruntime.HookUpdateLdcache,
		ldcache.LinkFlag, "/usr/bin/nvidia-smi=/usr/local/nvidia/bin/nvidia-smi", "/usr/local/nvidia/lib64")
	for b.Loop() {
		if got := s.ask(b, req); got != answerOK {
			b.Fatalf("answer %q", got)
		}
	}
}
