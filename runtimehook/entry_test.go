package runtimehook

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/gpumux/gpumux/node"
	"github.com/gpumux/gpumux/runtimehook/entry"
)

// TestEntryNamesAsTheCore: the hook binary's update-ldcache is the hook
// the core's specs name, with the same link flag.
func TestEntryNamesAsTheCore(t *testing.T) {
	if entry.HookUpdateLdcache != node.HookUpdateLdcache || entry.LinkFlag != node.HookLinkFlag {
		t.Errorf("entry's hook %q %q, node's %q %q", entry.HookUpdateLdcache, entry.LinkFlag, node.HookUpdateLdcache, node.HookLinkFlag)
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
		{"no hook name", nil, "usage: gpumux-runtime hook poststop|update-ldcache [--link LINK=TARGET]... DIR..."},
		{"an unknown hook", []string{"prestart"}, `unknown hook "prestart"`},
		// Specs no longer name it: a share is checked once, at create.
		{"create-runtime", []string{"create-runtime"}, `unknown hook "create-runtime"`},
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
