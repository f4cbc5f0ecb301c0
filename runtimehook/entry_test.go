package runtimehook

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/gpumux/gpumux/internal/ociruntime"
)

// TestCoreHookErrors: the core's hooks refuse what they cannot run, with
// the usage.
func TestCoreHookErrors(t *testing.T) {
	state := `{"ociVersion":"1.0.2","id":"c1","status":"created","bundle":"/b"}`
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"arguments to another hook", []string{ociruntime.HookPoststop, "/usr/lib"}, "hook poststop takes no arguments"},
		{"no hook name", nil, "usage: gpumux-runtime hook poststop|update-ldcache [--link LINK=TARGET]... DIR..."},
		{"an unknown hook", []string{"prestart"}, `unknown hook "prestart"`},
		// Specs no longer name it: a share is checked once, at create.
		{"create-runtime", []string{"create-runtime"}, `unknown hook "create-runtime"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			t.Setenv(EnvConfig, "")
			t.Setenv(ociruntime.EnvStateDir, t.TempDir())
			code := Main(context.Background(), append([]string{"--config", "/nonexistent/node.hcl", "hook"}, tc.args...), strings.NewReader(state), &stderr)
			if code == 0 || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("exit %d, stderr %q; want a failure saying %q", code, stderr.String(), tc.want)
			}
		})
	}
}
