package runtimehook

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/gpumux/gpumux/node"
	"github.com/gpumux/gpumux/runtimehook/entry"
)

// TestEntryAsksAsParseRequestDoes: gpumux-runtime sends to the core exactly
// the containers that ParseRequest finds a request in, or refuses: a
// container it hands to runc is one the core would have left untouched.
func TestEntryAsksAsParseRequestDoes(t *testing.T) {
	envs := node.RequestEnv()
	if !slices.Equal(slices.Sorted(slices.Values(envs)), slices.Sorted(slices.Values(entry.RequestEnv))) {
		t.Errorf("entry.RequestEnv = %v, want the request's variables %v", entry.RequestEnv, envs)
	}
	if entry.AnnotationPrefix != node.AnnotationPrefix || entry.HookUpdateLdcache != node.HookUpdateLdcache {
		t.Error("entry's annotation prefix or update-ldcache hook name differs from the core's")
	}
	tests := []struct {
		name string
		ann  map[string]string
		env  []string
	}{
		{"nothing", nil, nil},
		{"other annotations and env", map[string]string{"io.kubernetes.pod.name": "x", "gpumux.iox": "1"}, []string{"PATH=/bin", "NVIDIA_VISIBLE_DEVICES=all", "GPUMUX_DEBUG=1", "GPUMUX_RESERVATION=t", "GPUMUX"}},
		{"an annotation", map[string]string{node.AnnotationMechanism: "mps"}, nil},
		{"an unknown gpumux annotation", map[string]string{"gpumux.io/typo": "1"}, nil},
		{"an empty annotation", map[string]string{node.AnnotationMemory: ""}, nil},
		{"reserved shares", nil, []string{"GPUMUX_SHARES=GPU-00000000-0000-0000-0000-000000000000"}},
		{"a malformed variable", nil, []string{"GPUMUX_GPUS"}},
		{"a bad value", nil, []string{"GPUMUX_COMPUTE=200"}},
	}
	for _, e := range envs {
		tests = append(tests, struct {
			name string
			ann  map[string]string
			env  []string
		}{e, nil, []string{e + "=1"}})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, asked, err := node.ParseRequest(tc.ann, tc.env, node.DefaultLimits)
			if got, want := entry.Asks(tc.ann, tc.env), asked || err != nil; got != want {
				t.Errorf("entry.Asks = %v, but ParseRequest says asked %v, error %v", got, asked, err)
			}
		})
	}
}

// TestCoreHookErrors: the core's hooks refuse what they cannot run, with
// the usage.
func TestCoreHookErrors(t *testing.T) {
	state := `{"ociVersion":"1.0.2","id":"c1","status":"created","bundle":"/b"}`
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"arguments to another hook", []string{HookPoststop, "/usr/lib"}, "hook poststop takes no arguments"},
		{"no hook name", nil, "usage: gpumux-runtime hook create-runtime|poststop|update-ldcache DIR..."},
		{"an unknown hook", []string{"prestart"}, `unknown hook "prestart"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			t.Setenv(EnvConfig, "")
			t.Setenv(EnvStateDir, t.TempDir())
			code := Main(context.Background(), append([]string{"--config", "/nonexistent/node.hcl", "hook"}, tc.args...), strings.NewReader(state), &stderr)
			if code == 0 || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("exit %d, stderr %q; want a failure saying %q", code, stderr.String(), tc.want)
			}
		})
	}
}
