package nri

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"github.com/gpumux/gpumux/node"
	"github.com/gpumux/gpumux/node/lease"
	"github.com/gpumux/gpumux/nodeconfig"
)

// newPlugin is the plugin of a simulated H200 node whose GPU 0 has 2
// time-slice replicas and whose other GPUs are whole.
func newPlugin(t *testing.T) (*Plugin, node.Leases) {
	t.Helper()
	dir, err := os.MkdirTemp("", "gmx")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	state := filepath.Join(dir, "state")
	cfg, err := nodeconfig.ParseConfig([]byte(`simulate = "dgxh200"
state_dir = "` + state + `"
gpu {
  match     = "0"
  mechanism = "timeslice"
  replicas  = 2
  limit     = "off"
}
nri {
  skip_runtime_handlers = ["gpumux"]
}
`))
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	gone := func(lease.Record) (bool, error) { return false, nil }
	return New(n, cfg.StateDir, *cfg.NRI, gone), node.LeasesIn(cfg.StateDir)
}

func TestCreateContainer(t *testing.T) {
	ctx := context.Background()
	pod := &api.PodSandbox{Name: "pod", Annotations: map[string]string{"gpumux.io/mechanism": "exclusive"}}
	tests := []struct {
		name      string
		ann       map[string]string
		env       []string
		pod       *api.PodSandbox
		mechanism string // of the share leased; "" for none
		err       string // "" for none
	}{
		{"asks for nothing", nil, []string{"PATH=/bin"}, &api.PodSandbox{}, "", ""},
		{"a CDI device's share", nil, []string{"GPUMUX_SHARES=GPU-5d0b7a52-1b8e-4c3a-9f1e-0123456789ab/timeslice/0"}, &api.PodSandbox{}, "", ""},
		{"a skipped runtime handler's", map[string]string{"gpumux.io/mechanism": "timeslice"}, nil, &api.PodSandbox{RuntimeHandler: "gpumux"}, "", ""},
		{"a time-slice replica by annotation", map[string]string{"gpumux.io/mechanism": "timeslice"}, nil, &api.PodSandbox{}, "timeslice", ""},
		{"a whole GPU by env", nil, []string{"GPUMUX_MECHANISM=exclusive"}, &api.PodSandbox{}, "exclusive", ""},
		{"the pod's annotation", nil, nil, pod, "exclusive", ""},
		{"the container's annotation over the pod's", map[string]string{"gpumux.io/mechanism": "timeslice"}, nil, pod, "timeslice", ""},
		{"an unknown mechanism", map[string]string{"gpumux.io/mechanism": "magic"}, nil, &api.PodSandbox{}, "", `annotation gpumux.io/mechanism = "magic": unknown mechanism`},
		{"an unknown annotation", map[string]string{"gpumux.io/typo": "1"}, nil, &api.PodSandbox{}, "", `unknown annotation "gpumux.io/typo"`},
		{"a mechanism no share has", map[string]string{"gpumux.io/mechanism": "mig"}, nil, &api.PodSandbox{}, "", `no free MIG instance`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, leases := newPlugin(t)
			ctr := &api.Container{Id: "c1", Name: "app", Annotations: tc.ann, Env: tc.env}
			adj, _, err := p.CreateContainer(ctx, tc.pod, ctr)
			held, herr := leases.Held(ctx, "c1")
			if herr != nil {
				t.Fatal(herr)
			}
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "container app") {
					t.Fatalf("error %v, want one naming the container and saying %q", err, tc.err)
				}
				if len(held) > 0 {
					t.Errorf("a refused container holds %v", held)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.mechanism == "" {
				if adj != nil || len(held) > 0 {
					t.Fatalf("a container that asks for nothing got %v and holds %v", adj, held)
				}
				return
			}
			if len(held) != 1 || (tc.mechanism == "timeslice") != strings.Contains(held[0], "/timeslice/") {
				t.Fatalf("holds %v, want one %s share", held, tc.mechanism)
			}
			env := map[string]string{}
			for _, kv := range adj.GetEnv() {
				env[kv.Key] = kv.Value
			}
			uuid, _, _ := strings.Cut(held[0], "/")
			if env["NVIDIA_VISIBLE_DEVICES"] != uuid {
				t.Errorf("NVIDIA_VISIBLE_DEVICES = %q, want %s", env["NVIDIA_VISIBLE_DEVICES"], uuid)
			}
			if len(adj.GetLinux().GetDevices()) == 0 || len(adj.GetMounts()) == 0 || len(adj.GetHooks().GetCreateContainer()) == 0 {
				t.Errorf("adjustment without devices, mounts or the update-ldcache hook: %v", adj)
			}
			if _, err := p.StopContainer(ctx, tc.pod, ctr); err != nil {
				t.Fatal(err)
			}
			if held, _ := leases.Held(ctx, "c1"); len(held) > 0 {
				t.Errorf("after StopContainer it still holds %v", held)
			}
		})
	}
}

// TestNoFit: a container that no share fits fails its create, and the
// replica of one that holds it is free again once it is removed.
func TestNoFit(t *testing.T) {
	ctx := context.Background()
	p, leases := newPlugin(t)
	ask := map[string]string{"gpumux.io/mechanism": "timeslice"}
	first := &api.Container{Id: "c1", Name: "first", Annotations: ask}
	for _, c := range []*api.Container{first, {Id: "c3", Name: "third", Annotations: ask}} {
		if _, _, err := p.CreateContainer(ctx, &api.PodSandbox{}, c); err != nil {
			t.Fatal(err)
		}
	}
	second := &api.Container{Id: "c2", Name: "second", Annotations: ask}
	if _, _, err := p.CreateContainer(ctx, &api.PodSandbox{}, second); err == nil || !strings.Contains(err.Error(), "container second: no free") {
		t.Fatalf("a third replica: error %v, want a refusal", err)
	}
	if err := p.RemoveContainer(ctx, &api.PodSandbox{}, first); err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.CreateContainer(ctx, &api.PodSandbox{}, second); err != nil {
		t.Fatalf("after the first was removed: %v", err)
	}
	if held, _ := leases.Held(ctx, "c2"); len(held) != 1 {
		t.Errorf("second holds %v", held)
	}
}
