package entry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpumux/gpumux/node/lease"
)

const fakeCore = "/opt/gpumux/gpumux-runtime-core"

// handOver runs the entry on args and returns the program it handed over
// to and its argv.
func handOver(t *testing.T, args []string) (path string, argv []string) {
	t.Helper()
	var stderr bytes.Buffer
	h := handler{
		stderr:   &stderr,
		corePath: func() (string, error) { return fakeCore, nil },
		exec: func(p string, a, _ []string) error {
			path, argv = p, a
			return errors.New("exec recorded")
		},
	}
	if code := h.main(context.Background(), args, strings.NewReader("")); code != 127 || !strings.Contains(stderr.String(), "exec recorded") {
		t.Fatalf("%q: exit %d, stderr %q; want the recorded exec's failure", args, code, stderr.String())
	}
	return path, argv
}

// bundleWith writes a bundle whose config.json has these annotations and
// process env (a nil spec: no config.json; raw: config.json as given).
func bundleWith(t *testing.T, spec *specs.Spec, raw string) string {
	t.Helper()
	dir := t.TempDir()
	var b []byte
	switch {
	case raw != "":
		b = []byte(raw)
	case spec != nil:
		b, _ = json.Marshal(spec)
	default:
		return dir
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestHandOver: runc gets every call of a container that asks for nothing,
// with gpumux's own --config dropped; the core gets a create that asks (or
// whose spec it cannot read: the core reports why), and the hooks that need
// the node, with the arguments as given.
func TestHandOver(t *testing.T) {
	runc := filepath.Join(t.TempDir(), "runc")
	if err := os.WriteFile(runc, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvRunc, runc)
	t.Setenv(EnvStateDir, "") // poststop goes to the core
	spec := func(ann map[string]string, env ...string) *specs.Spec {
		return &specs.Spec{Annotations: ann, Process: &specs.Process{Env: env}}
	}
	plain := bundleWith(t, spec(map[string]string{"io.kubernetes.cri.container-type": "container"}, "PATH=/bin", "NVIDIA_VISIBLE_DEVICES=all", "GPUMUX_DEBUG=1"), "")
	noProcess := bundleWith(t, &specs.Spec{}, "")
	tests := []struct {
		name     string
		args     []string
		wantPath string
		wantArgs []string // nil: args as given
	}{
		{"start", []string{"--root", "/r", "start", "c1"}, runc, nil},
		{"delete, with --config", []string{"--config", "/etc/n.hcl", "delete", "c1"}, runc, []string{"delete", "c1"}},
		{"version", []string{"--version"}, runc, nil},
		{"create, nothing asked", []string{"--root", "/r", "create", "--bundle", plain, "c1"}, runc, nil},
		{"create, no process", []string{"create", "--bundle", noProcess, "c1"}, runc, nil},
		{"create, annotation", []string{"create", "--bundle", bundleWith(t, spec(map[string]string{"gpumux.io/mechanism": "mps"}), ""), "c1"}, fakeCore, nil},
		{"create, unknown gpumux annotation", []string{"create", "-b", bundleWith(t, spec(map[string]string{"gpumux.io/typo": "1"}), ""), "c1"}, fakeCore, nil},
		{"create, env", []string{"--config", "/etc/n.hcl", "create", "--bundle=" + bundleWith(t, spec(nil, "PATH=/bin", "GPUMUX_GPUS=2"), ""), "c1"}, fakeCore, nil},
		{"create, reserved shares", []string{"create", "--bundle", bundleWith(t, spec(nil, "GPUMUX_SHARES=GPU-1"), ""), "c1"}, fakeCore, nil},
		{"create, a request variable without a value", []string{"create", "--bundle", bundleWith(t, spec(nil, "GPUMUX_MEMORY"), ""), "c1"}, fakeCore, nil},
		{"create, no config.json", []string{"create", "--bundle", bundleWith(t, nil, ""), "c1"}, fakeCore, nil},
		{"create, a malformed config.json", []string{"create", "--bundle", bundleWith(t, nil, "{"), "c1"}, fakeCore, nil},
		{"hook poststop", []string{"hook", "poststop"}, fakeCore, nil},
		{"hook, no name", []string{"hook"}, fakeCore, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path, argv := handOver(t, tc.args)
			want := tc.wantArgs
			if want == nil {
				want = tc.args
			}
			if path != tc.wantPath || len(argv) == 0 || argv[0] != tc.wantPath || !slices.Equal(argv[1:], want) {
				t.Errorf("handed over to %s %q, want %s %q", path, argv, tc.wantPath, want)
			}
		})
	}
}

// TestNoRunc: a runc that cannot be found is reported, not handed over to.
func TestNoRunc(t *testing.T) {
	t.Setenv(EnvRunc, filepath.Join(t.TempDir(), "no-runc"))
	var stderr bytes.Buffer
	h := handler{stderr: &stderr, exec: func(string, []string, []string) error { t.Fatal("exec called"); return nil }}
	if code := h.main(context.Background(), []string{"start", "c1"}, nil); code != 127 || !strings.Contains(stderr.String(), "no-runc") {
		t.Errorf("exit %d, stderr %q; want 127 naming the runc", code, stderr.String())
	}
}

// TestPoststopReleases: with the state directory in its environment (the
// core's hooks have it), the poststop hook releases the container's leases
// itself, and no other container's.
func TestPoststopReleases(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(EnvStateDir, dir)
	ctx := context.Background()
	s, err := lease.Open(lease.PathIn(dir))
	if err != nil {
		t.Fatal(err)
	}
	for c, id := range map[string]string{"c1": "GPU-1", "c2": "GPU-2"} {
		if _, err := s.Acquire(ctx, c, func(map[string]string) ([]string, error) { return []string{id}, nil }); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	var stderr bytes.Buffer
	h := handler{stderr: &stderr, exec: func(p string, _, _ []string) error { t.Errorf("handed over to %s", p); return errors.New("no") }}
	if code := h.main(ctx, []string{"hook", HookPoststop}, strings.NewReader(`{"id":"c1","bundle":"/b"}`)); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	s, err = lease.Open(lease.PathIn(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	held, err := s.Leases(ctx)
	if err != nil || len(held) != 1 || held["GPU-2"] != "c2" {
		t.Errorf("leases after c1's poststop: %v, %v; want only c2's GPU-2", held, err)
	}
	if code := h.main(ctx, []string{"hook", HookPoststop}, strings.NewReader(`{}`)); code != 1 || !strings.Contains(stderr.String(), "no id") {
		t.Errorf("a state without an id: exit %d, stderr %q", code, stderr.String())
	}
}
