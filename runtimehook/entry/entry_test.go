package entry

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/gpumux/gpumux/internal/ociruntime"
	"github.com/gpumux/gpumux/node/lease"
)

// TestPoststopReleases: with the state directory in its environment (the
// core's hooks have it), the poststop hook releases the container's leases
// itself, and no other container's.
func TestPoststopReleases(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(ociruntime.EnvStateDir, dir)
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
	var stdout, stderr bytes.Buffer
	if code := Main(ctx, []string{"hook", ociruntime.HookPoststop}, strings.NewReader(`{"id":"c1","bundle":"/b"}`), &stdout, &stderr); code != 0 {
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
	if code := Main(ctx, []string{"hook", ociruntime.HookPoststop}, strings.NewReader(`{}`), &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "no id") {
		t.Errorf("a state without an id: exit %d, stderr %q", code, stderr.String())
	}
}

// TestHookUsage: gpumux-runtime-hook runs its two hooks and --version only;
// anything else, and poststop without the state directory, is a usage
// error naming what it runs.
func TestHookUsage(t *testing.T) {
	t.Setenv(ociruntime.EnvStateDir, "")
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--version"}, 0, ociruntime.HookBinary + " "},
		{[]string{"hook", "prestart"}, 2, "the other hooks are gpumux-runtime-core's"},
		{[]string{"create", "c1"}, 2, "usage: gpumux-runtime-hook hook update-ldcache [--link LINK=TARGET]... DIR..."},
		{nil, 2, "usage:"},
		{[]string{"hook", ociruntime.HookPoststop}, 2, "GPUMUX_STATE_DIR is not set"},
		{[]string{"hook", ociruntime.HookUpdateLdcache}, 1, "decoding the container state"},
	}
	for _, tc := range tests {
		var stdout, stderr bytes.Buffer
		code := Main(context.Background(), tc.args, strings.NewReader(""), &stdout, &stderr)
		if code != tc.code || !strings.Contains(stdout.String()+stderr.String(), tc.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit %d and %q", tc.args, code, stdout.String(), stderr.String(), tc.code, tc.want)
		}
	}
}
