package version

import (
	"runtime/debug"
	"strings"
	"testing"

	goversion "github.com/hashicorp/go-version"
)

func TestResolve(t *testing.T) {
	dev := strings.TrimSpace(release) + "-dev"
	vcs := func(mainVersion, rev, modified string) *debug.BuildInfo {
		bi := &debug.BuildInfo{Main: debug.Module{Version: mainVersion}}
		if rev != "" {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: "vcs.revision", Value: rev})
		}
		if modified != "" {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: "vcs.modified", Value: modified})
		}
		return bi
	}
	for _, tc := range []struct {
		name              string
		ldVersion, commit string
		bi                *debug.BuildInfo
		want              Info
	}{
		{"linker stamps win", "v0.2.0-3-gabcdef1", "abcdef1234", vcs("v0.9.0", "ffff", "true"), Info{"0.2.0-3-gabcdef1", "abcdef1234"}},
		{"no build info", "", "", nil, Info{dev, "unknown"}},
		{"go build in a clean tree", "", "", vcs("(devel)", "1018ca9", "false"), Info{dev, "1018ca9"}},
		{"go build in a dirty tree", "", "", vcs("v0.0.0-20261125061513-1018ca9abcde+dirty", "1018ca9abcde", "true"), Info{dev, "1018ca9abcde-dirty"}},
		{"go install at a release", "", "", vcs("v0.3.1", "", ""), Info{"0.3.1", "unknown"}},
		{"linker version, commit from VCS", "0.2.0", "", vcs("", "abc", ""), Info{"0.2.0", "abc"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := resolve(tc.ldVersion, tc.commit, tc.bi)
			if got != tc.want {
				t.Fatalf("resolve(%q, %q) = %+v, want %+v", tc.ldVersion, tc.commit, got, tc.want)
			}
			// Nomad refuses a plugin whose version it cannot parse.
			if _, err := goversion.NewVersion(got.Version); err != nil {
				t.Fatalf("Nomad cannot parse version %q: %v", got.Version, err)
			}
		})
	}
}

func TestString(t *testing.T) {
	got := String()
	if i := Get(); got != i.Version+" (commit "+i.Commit+")" {
		t.Fatalf("String() = %q, Get() = %+v", got, i)
	}
}
