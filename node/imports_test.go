package node_test

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/gpumux/gpumux/"

// deps lists the module's packages that pkg imports, directly or not.
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", module+pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
	}
	var mine []string
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, module) {
			mine = append(mine, strings.TrimPrefix(p, module))
		}
	}
	return mine
}

// TestLayering checks the one-way flow of imports (ARCHITECTURE.md):
// cmd → {plugin → ocicreate, runtimehook → ocicreate, cli → {nri, ocicreate}} → node →
// mechanisms → share → gpu. The
// front doors never import each other; the core and the mechanisms never
// import a front door; share knows nothing of the core or the mechanisms.
func TestLayering(t *testing.T) {
	frontDoors := []string{"plugin", "runtimehook", "cli", "nri", "ocicreate"}
	mechanisms := []string{"exclusive", "mig", "mps", "timeslice", "remote"}
	tests := []struct {
		pkg    string
		forbid []string
	}{
		{"plugin", []string{"runtimehook", "cli", "nri"}},
		{"runtimehook", []string{"plugin", "cli", "nri"}},
		{"cli", []string{"plugin", "runtimehook"}},
		// gpumux agent (cli) serves the NRI plugin.
		{"nri", []string{"plugin", "runtimehook", "cli"}},
		// gpumux-runtime-core (runtimehook), gpumux agent (cli) and the
		// Nomad plugin all prepare creates with it.
		{"ocicreate", []string{"plugin", "runtimehook", "cli", "nri"}},
		{"node", frontDoors},
		{"share", append(append([]string{"node", "nodeconfig"}, frontDoors...), mechanisms...)},
		{"gpu", append(append([]string{"node", "share"}, frontDoors...), mechanisms...)},
	}
	for _, m := range mechanisms {
		tests = append(tests, struct {
			pkg    string
			forbid []string
		}{m, append([]string{"node"}, frontDoors...)})
	}
	for _, tc := range tests {
		t.Run(tc.pkg, func(t *testing.T) {
			for _, d := range deps(t, tc.pkg) {
				for _, f := range tc.forbid {
					if d == f || strings.HasPrefix(d, f+"/") {
						t.Errorf("%s imports %s (directly or not): the layering is cmd → {plugin, runtimehook, cli} → node → mechanisms → share → gpu", tc.pkg, d)
					}
				}
			}
		})
	}
}
