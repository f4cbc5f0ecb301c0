package cli_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode"

	"github.com/hashicorp/nomad/api"
	"go.yaml.in/yaml/v3"

	"github.com/gpumux/gpumux/cli"
	"github.com/gpumux/gpumux/gpu"
	"github.com/gpumux/gpumux/gpu/sim"
	"github.com/gpumux/gpumux/internal/version"
	"github.com/gpumux/gpumux/remote/fakecuda"
	"github.com/gpumux/gpumux/remote/pool/pooltest"
)

// jsonKeys walks a decoded JSON document and calls key for every object key,
// with its path.
func jsonKeys(v any, path string, key func(path, k string)) {
	switch v := v.(type) {
	case map[string]any:
		for k, c := range v {
			key(path, k)
			jsonKeys(c, path+"."+k, key)
		}
	case []any:
		for i, c := range v {
			jsonKeys(c, fmt.Sprintf("%s[%d]", path, i), key)
		}
	}
}

// snakeCase reports whether a key is snake_case: lower-case letters, digits
// and underscores. Profile names as keys ("3g.71gb") keep their dots.
func snakeCase(k string) bool {
	for _, r := range k {
		if unicode.IsUpper(r) || r == '-' || r == ' ' {
			return false
		}
	}
	return k != ""
}

// TestOutputFormats runs every command that prints state in each -o format:
// JSON and YAML parse, carry the same document, and have snake_case keys
// only; tables are not JSON.
func TestOutputFormats(t *testing.T) {
	n := newMIGNode(t)
	layout := n.file("layout.yaml", "version: gpumux.io/v1\ngpus:\n  - match: \"0\"\n    mig-enabled: true\n    mig-devices: {3g.71gb: 2}\n")
	commands := []struct {
		name string
		args []string
	}{
		{"status", []string{"status", "--nomad", "off"}},
		{"mig plan", []string{"mig", "plan", "-f", layout, "--nomad", "off"}},
		{"mig apply --dry-run", []string{"mig", "apply", "--dry-run", "-f", layout, "--nomad", "off"}},
		{"mig assert", []string{"mig", "assert", "-f", layout}},
		{"repair --dry-run", []string{"repair", "--dry-run", "--nomad", "off", "--runc-root", t.TempDir()}},
		{"mig apply", []string{"mig", "apply", "-f", layout, "--nomad", "off"}}, // applies: the last one
	}
	for _, c := range commands {
		args := c.args
		t.Run(c.name, func(t *testing.T) {
			docs := map[string]any{}
			for _, format := range []string{"json", "yaml"} {
				code, out, errOut := n.run(append(args, "-o", format)...)
				if code != cli.ExitOK && code != cli.ExitDiffers {
					t.Fatalf("-o %s: exit %d: %s", format, code, errOut)
				}
				var doc any
				var err error
				if format == "json" {
					err = json.Unmarshal([]byte(out), &doc)
				} else {
					err = yaml.Unmarshal([]byte(out), &doc)
				}
				if err != nil || doc == nil {
					t.Fatalf("-o %s does not parse (%v):\n%s", format, err, out)
				}
				keys := 0
				jsonKeys(doc, "", func(path, k string) {
					keys++
					if !snakeCase(k) {
						t.Errorf("-o %s: key %q at %q is not snake_case", format, k, path)
					}
				})
				if keys == 0 {
					t.Errorf("-o %s: no keys:\n%s", format, out)
				}
				docs[format] = doc
			}
			// The YAML is the JSON's document: same keys, same values (apply
			// ran twice, so only its last run's keys are compared).
			j, _ := json.Marshal(docs["json"])
			y, _ := json.Marshal(docs["yaml"])
			if c.name != "mig apply" {
				if string(j) != string(y) {
					t.Errorf("JSON and YAML differ:\n%s\n%s", j, y)
				}
			}
			for _, format := range []string{"table", "wide"} {
				code, out, errOut := n.run(append(args, "-o", format)...)
				if code != cli.ExitOK && code != cli.ExitDiffers || json.Valid([]byte(out)) {
					t.Errorf("-o %s: exit %d (%s):\n%s", format, code, errOut, out)
				}
			}
		})
	}
}

// TestWideColumns: -o wide adds columns that the table leaves out.
func TestWideColumns(t *testing.T) {
	n := newMIGNode(t)
	layout := n.file("layout.yaml", "version: gpumux.io/v1\ngpus:\n  - match: \"0\"\n    mig-enabled: true\n    mig-devices: {3g.71gb: 2}\n")
	tests := []struct {
		args []string
		wide []string // in -o wide only
		both []string
	}{
		{[]string{"status", "--nomad", "off"}, []string{"PCI BUS ID", "TEMP", "POWER", "FAULT ISOLATION", "\nSHARE ", "HELD BY"}, []string{"USED", "UTIL", "MEMORY ISOLATION"}},
		{[]string{"mig", "plan", "-f", layout, "--nomad", "off"}, []string{"UUID", "RULE", "layout.yaml:3"}, []string{"CURRENT", "WANTED", "ACTION"}},
		{[]string{"mig", "assert", "-f", layout}, nil, []string{"GPU 0: differs"}},
		// The table run applies the layout; the wide one finds it applied.
		{[]string{"mig", "apply", "-f", layout, "--nomad", "off"}, []string{"RESULT", "MATCHES", "3g.71gb at 0:4 (MIG-"}, []string{"GPU 0: ", "refused as busy"}},
	}
	for _, tc := range tests {
		_, table, _ := n.run(append(tc.args, "-o", "table")...)
		_, wide, _ := n.run(append(tc.args, "-o", "wide")...)
		for _, c := range append(tc.wide, tc.both...) {
			if !strings.Contains(wide, c) {
				t.Errorf("%v -o wide lacks %q:\n%s", tc.args, c, wide)
			}
		}
		for _, c := range tc.wide {
			if strings.Contains(table, c) {
				t.Errorf("%v -o table has the wide column %q:\n%s", tc.args, c, table)
			}
		}
		for _, c := range tc.both {
			if !strings.Contains(table, c) {
				t.Errorf("%v -o table lacks %q:\n%s", tc.args, c, table)
			}
		}
		if strings.Contains(table+wide, "\x1b[") {
			t.Errorf("%v: colours written to a file:\n%s%s", tc.args, table, wide)
		}
	}
}

func TestCompletion(t *testing.T) {
	for shell, want := range map[string]string{
		"bash": "__start_gpumux",
		"zsh":  "#compdef gpumux",
		"fish": "complete -c gpumux",
	} {
		code, out, errOut := run(t, "completion", shell)
		if code != cli.ExitOK || !strings.Contains(out, want) {
			t.Errorf("completion %s: exit %d, lacks %q (%s)", shell, code, want, errOut)
		}
	}
	// The shells ask the binary for flag values: -o offers the formats.
	code, out, _ := run(t, "__complete", "status", "-o", "")
	for _, f := range []string{"table", "json", "yaml", "wide"} {
		if code != cli.ExitOK || !strings.Contains(out, f+"\n") {
			t.Errorf("completing -o: exit %d, lacks %s:\n%s", code, f, out)
		}
	}
	if _, out, _ := run(t, "__complete", "mig", ""); !strings.Contains(out, "apply") || !strings.Contains(out, "export") {
		t.Errorf("completing mig: %s", out)
	}
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"version"}, {"-v"}} {
		code, out, errOut := run(t, args...)
		if code != cli.ExitOK || out != "gpumux "+version.String()+"\n" {
			t.Errorf("gpumux %v: exit %d, %q (%s)", args, code, out, errOut)
		}
	}
}

// TestDeprecatedOutputFile: --output FILE, -f/--file's old name on mig
// export and cdi generate, still writes the file and warns on stderr;
// both at once is a usage error.
func TestDeprecatedOutputFile(t *testing.T) {
	n := newMIGNode(t)
	for _, cmd := range [][]string{{"mig", "export"}, {"cdi", "generate"}} {
		name := strings.Join(cmd, " ")
		file := filepath.Join(n.dir, strings.ReplaceAll(name, " ", "-")+".json")
		code, out, errOut := n.run(append(cmd, "--output", file)...)
		if code != cli.ExitOK || out != "" || !strings.Contains(errOut, "warning: --output FILE is deprecated, use -f/--file FILE") {
			t.Errorf("%s --output: exit %d, stdout %q, stderr %q", name, code, out, errOut)
		}
		if b, err := os.ReadFile(file); err != nil || len(b) == 0 {
			t.Errorf("%s --output did not write %s: %v", name, file, err)
		}
		code, _, errOut = n.run(append(cmd, "--output", file, "-f", file)...)
		if code != cli.ExitUsage || !strings.Contains(errOut, "give only -f/--file") {
			t.Errorf("%s --output and -f: exit %d, %s", name, code, errOut)
		}
		code, _, errOut = n.run(append(cmd, "--file", file)...)
		if code != cli.ExitOK || strings.Contains(errOut, "deprecated") {
			t.Errorf("%s --file: exit %d, %s", name, code, errOut)
		}
	}
}

// TestStatusShowsUseNomadAndRemote: gpumux status shows each GPU's memory
// use and utilization, the shares live Nomad allocations hold, and the
// remote shares of the config's remote block.
func TestStatusShowsUseNomadAndRemote(t *testing.T) {
	srv := pooltest.Start(t, pooltest.Options{Fake: []fakecuda.Option{fakecuda.WithDevices(1), fakecuda.WithMemory(16 << 30), fakecuda.WithName("NVIDIA H200")}})
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	cfg := filepath.Join(dir, "node.hcl")
	src := fmt.Sprintf("simulate = \"dgxh200\"\nstate_dir = %q\nremote {\n servers = [%q]\n token_file = %q\n interposer_dir = %q\n}\n",
		state, srv.Addr, pooltest.WriteSecret(t, dir), pooltest.WriteInterposer(t, dir))
	if err := os.WriteFile(cfg, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, "status", "--config", cfg, "--nomad", "off", "-o", "json")
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var st cli.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatal(err)
	}
	h, err := gpu.OpenSimulated("dgxh200", state)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Simulated().SetTelemetry(2, simTelemetry); err != nil {
		t.Fatal(err)
	}
	var remote, held string
	for _, g := range st.Groups {
		for _, s := range g.Shares {
			switch {
			case g.Mechanism == "remote" && remote == "":
				remote = s.ID
				if s.RemoteAddr != srv.Addr {
					t.Errorf("remote share %s: remote_addr %q, want %q", s.ID, s.RemoteAddr, srv.Addr)
				}
			case g.Mechanism == "exclusive" && held == "":
				held = s.ID
			}
		}
	}
	if remote == "" {
		t.Fatalf("no remote share in %+v", st.Groups)
	}
	nomad := fakeNomad(t, "node-1", "", []*api.Allocation{alloc(api.AllocClientStatusRunning, "running", held)})
	code, out, errOut = run(t, "status", "--config", cfg, "--nomad", nomad, "-o", "json")
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	st = cli.Status{}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Held) != 1 || st.Held[0].Share != held || !strings.HasPrefix(strings.Join(st.Held[0].HeldBy, ","), "Nomad allocation 0123abcd") {
		t.Errorf("held %+v, want %s held by the Nomad allocation", st.Held, held)
	}
	g := st.GPUs[2]
	if g.Usage == nil || g.Usage.GPUUtilPercent == nil || *g.Usage.GPUUtilPercent != simTelemetry.GPUUtil || g.Usage.MemoryTotalMiB == 0 {
		t.Errorf("GPU 2 usage %+v, want %d%% utilization and its memory", g.Usage, simTelemetry.GPUUtil)
	}
	code, out, errOut = run(t, "status", "--config", cfg, "--nomad", nomad)
	for _, want := range []string{fmt.Sprintf("%d%%", simTelemetry.GPUUtil), "remote", held + "  Nomad allocation 0123abcd"} {
		if code != cli.ExitOK || !strings.Contains(out, want) {
			t.Errorf("status table lacks %q (exit %d, %s):\n%s", want, code, errOut, out)
		}
	}
	code, out, errOut = run(t, "status", "--config", cfg, "--nomad", "off", "--remote=false", "-o", "json")
	if code != cli.ExitOK || strings.Contains(out, `"mechanism": "remote"`) {
		t.Errorf("--remote=false shows remote shares (exit %d, %s):\n%s", code, errOut, out)
	}
}

// simTelemetry is what a simulated GPU reports in the status tests.
var simTelemetry = sim.Telemetry{GPUUtil: 73, MemoryUtil: 20, TemperatureC: 55, PowerMilliwatts: 300000}
