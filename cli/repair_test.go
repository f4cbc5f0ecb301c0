package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpumux/gpumux/cli"
	"github.com/gpumux/gpumux/node/lease"
)

// fakeRunc writes a runc that lists one container, whose bundle's spec
// gpumux-runtime prepared for shares, and returns it and its root.
func fakeRunc(t *testing.T, dir, container string, shares string) (runc, root string) {
	t.Helper()
	root, bundle := filepath.Join(dir, "runc-root"), filepath.Join(dir, "bundle")
	os.MkdirAll(root, 0o755)
	os.MkdirAll(bundle, 0o755)
	spec := specs.Spec{Version: specs.Version, Process: &specs.Process{Args: []string{"/probe"}, Env: []string{"GPUMUX_SHARES=" + shares}},
		Hooks: &specs.Hooks{Poststop: []specs.Hook{{Path: "/usr/bin/gpumux-runtime", Args: []string{"gpumux-runtime", "hook", "poststop"}}}}}
	b, _ := json.Marshal(spec)
	os.WriteFile(filepath.Join(bundle, "config.json"), b, 0o600)
	list := fmt.Sprintf(`[{"id":%q,"pid":42,"status":"running","bundle":%q}]`, container, bundle)
	os.WriteFile(filepath.Join(root, "list.json"), []byte(list), 0o644)
	runc = filepath.Join(dir, "runc")
	os.WriteFile(runc, []byte("#!/bin/sh\n[ \"$3\" = list ] || exit 2\ncat \"$2/list.json\"\n"), 0o755)
	return runc, root
}

// TestDamagedLeaseStoreThroughTheCLI damages a lease store holding a share
// (emptied; 4 KiB of garbage in the middle) and runs the gpumux binary:
// status and mig plan fail with an error naming the file and gpumux repair
// (exit 1, no panic); repair --dry-run changes nothing; repair keeps the
// damaged file, names it, and brings the lease back, which status shows.
func TestDamagedLeaseStoreThroughTheCLI(t *testing.T) {
	damages := map[string]func(path string) error{
		"empty": func(path string) error { return os.Truncate(path, 0) },
		"garbage in the middle": func(path string) error {
			fi, err := os.Stat(path)
			if err != nil {
				return err
			}
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.WriteAt([]byte(strings.Repeat("\xde\xad\xbe\xef", 1024)), fi.Size()/2-2048)
			return err
		},
	}
	for name, damage := range damages {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			stateDir := filepath.Join(dir, "state")
			node := []string{"--simulate", "dgxh200", "--state-dir", stateDir}
			const share = "GPU-held-by-web-1"
			path := lease.PathIn(stateDir)
			s, err := lease.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 50 { // several pages, as on a busy node
				c := fmt.Sprintf("gone-%02d-%s", i, strings.Repeat("c", 80))
				if _, err := s.Acquire(context.Background(), c, func(map[string]string) ([]string, error) { return []string{c + "-share"}, nil }); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := s.Acquire(context.Background(), "web-1", func(map[string]string) ([]string, error) { return []string{share}, nil }); err != nil {
				t.Fatal(err)
			}
			s.Close()
			if err := damage(path); err != nil {
				t.Fatal(err)
			}
			layout := filepath.Join(dir, "layout.yaml")
			os.WriteFile(layout, []byte("version: gpumux.io/v1\ngpus:\n  - match: \"6\"\n    mig-enabled: true\n    mig-devices: {3g.71gb: 2}\n"), 0o644)
			for _, args := range [][]string{{"status"}, {"mig", "plan", "-f", layout, "--nomad", "off"}} {
				code, out, errOut := runProcess(t, append(args, node...)...)
				if code != cli.ExitError || strings.Contains(errOut, "goroutine ") || !strings.Contains(errOut, path) || !strings.Contains(errOut, "gpumux repair") {
					t.Errorf("gpumux %s on a damaged store: exit %d, want %d and an error naming %s and gpumux repair, without a panic\nstdout:\n%s\nstderr:\n%s", args[0], code, cli.ExitError, path, out, errOut)
				}
			}

			runc, root := fakeRunc(t, dir, "web-1", share)
			repair := append([]string{"repair", "--runc", runc, "--runc-root", root, "--nomad", "off"}, node...)
			damaged, _ := os.ReadFile(path)
			code, out, errOut := runProcess(t, append(repair, "--dry-run")...)
			if code != cli.ExitOK || !strings.Contains(out, "web-1 holds "+share) || !strings.Contains(out, "Nothing changed (--dry-run)") {
				t.Errorf("repair --dry-run: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
			}
			if now, _ := os.ReadFile(path); string(now) != string(damaged) {
				t.Error("repair --dry-run changed the store")
			}
			code, out, errOut = runProcess(t, repair...)
			kept := regexp.MustCompile(`Kept the damaged file as (\S+)\.\n`).FindStringSubmatch(out)
			if code != cli.ExitOK || kept == nil {
				t.Fatalf("repair: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
			}
			if b, err := os.ReadFile(kept[1]); err != nil || string(b) != string(damaged) {
				t.Errorf("the damaged file is not kept as %s: %v", kept[1], err)
			}
			got, err := lease.ReadIn(context.Background(), stateDir)
			if err != nil || !maps.Equal(got, map[string]string{share: "web-1"}) {
				t.Errorf("leases after repair: %v, %v", got, err)
			}
			code, out, errOut = runProcess(t, append([]string{"status"}, node...)...)
			if code != cli.ExitOK || !strings.Contains(out, share+"  container web-1") {
				t.Errorf("status after repair: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
			}
		})
	}
}
