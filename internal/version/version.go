package version

import (
	_ "embed"
	"regexp"
	"runtime/debug"
	"strings"
	"sync"
)

// Set by the linker (-X); empty in a plain `go build`.
var (
	version string
	commit  string
)

// release is the version this source tree is, or is on its way to.
//
//go:embed VERSION
var release string

// Info is what a binary says about its build.
type Info struct {
	// Version is a semantic version without a leading v: "0.1.0",
	// "0.1.0-3-gabcdef1" (3 commits after v0.1.0), "0.1.0-dev" (a tree
	// without its tag). Nomad parses it (a plugin's version).
	Version string
	// Commit is the git commit, with "-dirty" when the tree had changes;
	// "unknown" when the build recorded none.
	Commit string
}

// Get returns this binary's build information.
var Get = sync.OnceValue(func() Info {
	bi, _ := debug.ReadBuildInfo()
	return resolve(version, commit, bi)
})

// String is the build information as the version commands print it after
// the program's name: "0.1.0 (commit 1018ca9c1d2e)".
func String() string {
	i := Get()
	return i.Version + " (commit " + i.Commit + ")"
}

// pseudoVersion matches a Go pseudo-version (v0.0.0-20261125061729-abcdef123456,
// v1.2.4-0.20261125061729-abcdef123456, either with +dirty or another build
// suffix): a commit, not a release. The
// package keeps to the standard library: gpumux-runtime's entry, which
// must start fast, prints the version.
var pseudoVersion = regexp.MustCompile(`[-.]\d{14}-[0-9a-f]{12}(\+[0-9A-Za-z.-]+)?$`)

// resolve picks the version and commit from the linker's values, else
// from Go's build information bi (nil when there is none).
func resolve(ldVersion, ldCommit string, bi *debug.BuildInfo) Info {
	i := Info{Version: strings.TrimPrefix(ldVersion, "v"), Commit: ldCommit}
	if i.Version == "" {
		i.Version = strings.TrimSpace(release) + "-dev"
		if bi != nil {
			if v := bi.Main.Version; v != "" && v != "(devel)" && !pseudoVersion.MatchString(v) {
				i.Version = strings.TrimPrefix(v, "v")
			}
		}
	}
	if i.Commit == "" && bi != nil {
		var modified bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				i.Commit = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if i.Commit != "" && modified {
			i.Commit += "-dirty"
		}
	}
	if i.Commit == "" {
		i.Commit = "unknown"
	}
	return i
}
