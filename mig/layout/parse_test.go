package layout

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
)

// summary writes a layout's rules one per line, for comparison.
func summary(l *Layout) []string {
	out := []string{}
	for _, r := range l.Rules {
		s := fmt.Sprintf("%d %s match=%s", r.Line, r.Path, r.Match)
		if len(r.Match.DeviceIDs) > 0 {
			s += fmt.Sprintf(" filter=%v", r.Match.DeviceIDs)
		}
		s += fmt.Sprintf(" mig=%v", r.MIGEnabled)
		if len(r.Devices) > 0 || r.MIGEnabled {
			s += " " + describe(r.Devices)
		}
		out = append(out, s)
	}
	return out
}

func equalLines(t *testing.T, what string, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("%s:\ngot:\n\t%s\nwant:\n\t%s", what, strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name, src, config string
		version           string
		want              []string
	}{
		{
			name: "gpumux, the doc's example",
			src: `version: gpumux.io/v1
gpus:
  - match: "0-3"
    mig-enabled: true
    mig-devices:
      3g.71gb: 1
      2g.35gb: 2
  - match: "*A100*"
    mig-enabled: false
`,
			version: VersionGPUMux,
			want: []string{
				"3 gpus[0] match=0-3 mig=true {2g.35gb: 2, 3g.71gb: 1}",
				"8 gpus[1] match=*A100* mig=false",
			},
		},
		{
			name: "gpumux, every selector and a device filter",
			src: `version: gpumux.io/v1
gpus:
  - match: 7
    mig-enabled: true
    mig-devices: {}
  - match: " 5, 0-2, 1 "
    mig-enabled: false
  - match: GPU-a, GPU-b
    mig-enabled: false
  - match: "*"
    device-filter: "0x233510de"
    mig-enabled: false
  - match: all
    device-filter: ["0x233510DE:0x18BF10DE", "0x20B010DE", "0x20B010DE"]
    mig-enabled: false
    mig-devices: {}
  - mig-devices: {"1g.18gb+me": 1, "1c.2g.35gb": 2, "1g.24gb+me.all": 1, "1g.24gb-me": 1}
    mig-enabled: true
    match: NVIDIA H200
`,
			version: VersionGPUMux,
			want: []string{
				"3 gpus[0] match=7 mig=true {}",
				"6 gpus[1] match=0-2,5 mig=false",
				"8 gpus[2] match=GPU-a,GPU-b mig=false",
				"10 gpus[3] match=all filter=[0x233510DE] mig=false",
				"13 gpus[4] match=all filter=[0x233510DE:0x18BF10DE 0x20B010DE] mig=false",
				"17 gpus[5] match=NVIDIA H200 mig=true {1c.2g.35gb: 2, 1g.18gb+me: 1, 1g.24gb+me.all: 1, 1g.24gb-me: 1}",
			},
		},
		{
			name:    "gpumux, no rules",
			src:     "version: gpumux.io/v1\ngpus: []\n",
			version: VersionGPUMux,
			want:    []string{},
		},
		{
			name: "gpumux, aliases are followed",
			src: `version: gpumux.io/v1
gpus:
  - &r {match: "0", mig-enabled: true, mig-devices: &d {3g.71gb: 2}}
  - {match: "1", mig-enabled: true, mig-devices: *d}
`,
			version: VersionGPUMux,
			want: []string{
				"3 gpus[0] match=0 mig=true {3g.71gb: 2}",
				"4 gpus[1] match=1 mig=true {3g.71gb: 2}",
			},
		},
		{
			name: "mig-parted, config selected",
			src: `version: v1
mig-configs:
  all-1g.10gb:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 7
  custom:
    - devices: [0,1]
      device-filter: ["0x233010DE"]
      mig-enabled: false
    - devices:
        - 3
        - 2
      mig-enabled: true
      mig-devices: {"3g.40gb": 2, "1g.10gb": 0}
    - devices: [4]
      device-filter: ""
      mig-enabled: false
      mig-devices: {}
`,
			config:  "custom",
			version: VersionMIGParted,
			want: []string{
				"9 mig-configs.custom[0] match=0-1 filter=[0x233010DE] mig=false",
				"12 mig-configs.custom[1] match=2-3 mig=true {3g.40gb: 2}",
				"17 mig-configs.custom[2] match=4 mig=false",
			},
		},
		{
			name:    "mig-parted, the only config is selected without a name",
			src:     "version: v1\nmig-configs:\n  only:\n    - devices: all\n      mig-enabled: false\n",
			version: VersionMIGParted,
			want:    []string{"4 mig-configs.only[0] match=all mig=false"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, err := Parse("l.yaml", []byte(tc.src), tc.config)
			if err != nil {
				t.Fatal(err)
			}
			if l.Version != tc.version || l.File != "l.yaml" {
				t.Errorf("version %q, file %q", l.Version, l.File)
			}
			equalLines(t, "rules", summary(l), tc.want)
		})
	}
}

func TestParseErrors(t *testing.T) {
	const rule = "  - match: \"0\"\n    mig-enabled: true\n    mig-devices: {3g.71gb: 1}\n"
	tests := []struct {
		name, src, config string
		want              []string
	}{
		// The file as a whole.
		{"empty", "", "", []string{
			`l.yaml:1: empty; want version: gpumux.io/v1 (gpumux's format) or version: v1 (mig-parted's format)`}},
		{"only comments", "# nothing\n", "", []string{
			`l.yaml:1: empty; want version: gpumux.io/v1 (gpumux's format) or version: v1 (mig-parted's format)`}},
		{"not a mapping", "- 1\n", "", []string{
			`l.yaml:1: a list: want a mapping that starts with version: gpumux.io/v1 (gpumux's format) or version: v1 (mig-parted's format)`}},
		{"missing version", "gpus: []\n", "", []string{
			`l.yaml:1: version: missing; want version: gpumux.io/v1 (gpumux's format) or version: v1 (mig-parted's format)`}},
		{"unknown version", "# x\nversion: gpumux.io/v2\ngpus: []\n", "", []string{
			`l.yaml:2: version: "gpumux.io/v2": unknown version; valid: gpumux.io/v1 (gpumux's format), v1 (mig-parted's format)`}},
		{"version not a string", "version: 1\n", "", []string{
			`l.yaml:1: version: 1: want gpumux.io/v1 (gpumux's format) or v1 (mig-parted's format)`}},
		{"two documents", "version: gpumux.io/v1\ngpus: []\n---\nversion: v1\n", "", []string{
			`l.yaml:4: a second YAML document; a layout file holds one (remove the ---)`}},
		{"syntax", "version: gpumux.io/v1\ngpus:\n  - match: \"0\n", "", []string{
			`l.yaml:3: YAML syntax: found unexpected end of stream`}},
		{"tab", "version: gpumux.io/v1\ngpus:\n\t- match: all\n", "", []string{
			`l.yaml:3: YAML syntax: found character that cannot start any token; YAML indents with spaces, not tabs`}},
		{"unquoted glob", "version: gpumux.io/v1\ngpus:\n  - match: *H200*\n    mig-enabled: false\n", "", []string{
			`l.yaml:3: YAML syntax: did not find expected alphabetic or numeric character; a value that starts with * (such as the model glob "*H200*") must be quoted`}},
		{"unknown anchor", "version: gpumux.io/v1\ngpus:\n  - match: *H200\n    mig-enabled: false\n", "", []string{
			`l.yaml:3: YAML syntax: unknown anchor 'H200' referenced; a value that starts with * (such as the model glob "*H200*") must be quoted`}},

		// gpumux's format.
		{"config with gpumux's format", "version: gpumux.io/v1\ngpus:\n" + rule, "custom", []string{
			`l.yaml:1: config: "custom": gpumux's format (version: gpumux.io/v1) has no named configs; select none (-c is for mig-parted's mig-configs)`}},
		{"unknown top-level key", "version: gpumux.io/v1\ngpu:\n" + rule, "", []string{
			`l.yaml:1: gpus: missing; want a list of rules such as - match: "0-3" (gpus: [] for none)`,
			`l.yaml:2: gpu: unknown key; valid keys: version, gpus`}},
		{"duplicate top-level key", "version: gpumux.io/v1\ngpus: []\nversion: gpumux.io/v1\n", "", []string{
			`l.yaml:3: version: duplicate key (first at line 1)`}},
		{"gpus not a list", "version: gpumux.io/v1\ngpus: {match: all}\n", "", []string{
			`l.yaml:2: gpus: a mapping: want a list of rules such as - match: "0-3"`}},
		{"rule not a mapping", "version: gpumux.io/v1\ngpus:\n  - all\n", "", []string{
			`l.yaml:3: gpus[0]: "all": want a rule, a mapping with keys match, device-filter, mig-enabled, mig-devices`}},
		{"misspelt key", "version: gpumux.io/v1\ngpus:\n  - match: all\n    mig_enabled: false\n", "", []string{
			`l.yaml:3: gpus[0].mig-enabled: missing; want true or false`,
			`l.yaml:4: gpus[0].mig_enabled: unknown key (did you mean mig-enabled?); valid keys: match, device-filter, mig-enabled, mig-devices`}},
		{"merge key", "version: gpumux.io/v1\ngpus:\n  - <<: {match: all}\n    mig-enabled: false\n", "", []string{
			`l.yaml:3: gpus[0].<<: unknown key (YAML merge keys are not supported); valid keys: match, device-filter, mig-enabled, mig-devices`,
			`l.yaml:3: gpus[0].match: missing; want GPU indexes ("0-3", "4,5"), GPU UUIDs ("GPU-…"), a model glob ("*H200*") or all`}},
		{"duplicate rule key", "version: gpumux.io/v1\ngpus:\n  - match: all\n    mig-enabled: false\n    mig-enabled: true\n", "", []string{
			`l.yaml:5: gpus[0].mig-enabled: duplicate key (first at line 4)`}},
		{"mig-enabled not a bool", "version: gpumux.io/v1\ngpus:\n  - match: all\n    mig-enabled: yes\n", "", []string{
			`l.yaml:4: gpus[0].mig-enabled: "yes": want true or false`}},
		{"mig-enabled quoted", "version: gpumux.io/v1\ngpus:\n  - match: all\n    mig-enabled: \"true\"\n    mig-devices: {}\n", "", []string{
			`l.yaml:4: gpus[0].mig-enabled: "true": want true or false`}},
		{"match missing", "version: gpumux.io/v1\ngpus:\n  - mig-enabled: false\n", "", []string{
			`l.yaml:3: gpus[0].match: missing; want GPU indexes ("0-3", "4,5"), GPU UUIDs ("GPU-…"), a model glob ("*H200*") or all`}},
		{"match empty", "version: gpumux.io/v1\ngpus:\n  - match: \"\"\n    mig-enabled: false\n", "", []string{
			`l.yaml:3: gpus[0].match: "": empty; want GPU indexes ("0-3", "4,5"), GPU UUIDs ("GPU-…"), a model glob ("*H200*") or all`}},
		{"match a list", "version: gpumux.io/v1\ngpus:\n  - match: [0, 1]\n    mig-enabled: false\n", "", []string{
			`l.yaml:3: gpus[0].match: a list: want a string: GPU indexes ("0-3", "4,5"), GPU UUIDs ("GPU-…"), a model glob ("*H200*") or all`}},
		{"match backwards range", "version: gpumux.io/v1\ngpus:\n  - match: 3-1\n    mig-enabled: false\n", "", []string{
			`l.yaml:3: gpus[0].match: "3-1": not a GPU index range like 0-3 (indexes 0 to 1023, low to high)`}},
		{"match index too large", "version: gpumux.io/v1\ngpus:\n  - match: 0,9999999999999999999999\n    mig-enabled: false\n", "", []string{
			`l.yaml:3: gpus[0].match: "0,9999999999999999999999": "9999999999999999999999": not a GPU index (0 to 1023) or a range like 0-3`}},
		{"match mixes UUIDs and indexes", "version: gpumux.io/v1\ngpus:\n  - match: GPU-a,4\n    mig-enabled: false\n", "", []string{
			`l.yaml:3: gpus[0].match: "GPU-a,4": "4" is not a GPU UUID (GPU-…); do not mix UUIDs with indexes or globs`}},
		{"match a MIG UUID", "version: gpumux.io/v1\ngpus:\n  - match: MIG-0c8e\n    mig-enabled: false\n", "", []string{
			`l.yaml:3: gpus[0].match: "MIG-0c8e": a MIG device UUID; match selects whole GPUs: use the GPU's UUID (GPU-…), its index or its model`}},
		{"match bad glob", "version: gpumux.io/v1\ngpus:\n  - match: \"[H200\"\n    mig-enabled: false\n", "", []string{
			`l.yaml:3: gpus[0].match: "[H200": not a valid model glob (syntax error in pattern); want a glob such as "*H200*"`}},
		{"device filter", "version: gpumux.io/v1\ngpus:\n  - match: all\n    device-filter: [\"0x2335\", 10, \"0x233510DE:x\", [1]]\n    mig-enabled: false\n", "", []string{
			`l.yaml:4: gpus[0].device-filter: "0x2335": want a PCI id 0x<device><vendor> such as "0x233510DE" (H200), optionally :0x<subsystem id>`,
			`l.yaml:4: gpus[0].device-filter: 10: want a PCI id 0x<device><vendor> such as "0x233510DE" (H200), optionally :0x<subsystem id>`,
			`l.yaml:4: gpus[0].device-filter: "0x233510DE:x": want a PCI id 0x<device><vendor> such as "0x233510DE" (H200), optionally :0x<subsystem id>`,
			`l.yaml:4: gpus[0].device-filter: a list: want a PCI id 0x<device><vendor> such as "0x233510DE" (H200), optionally :0x<subsystem id>, or a list of them`}},
		{"mig-devices missing", "version: gpumux.io/v1\ngpus:\n  - match: all\n    mig-enabled: true\n", "", []string{
			`l.yaml:3: gpus[0].mig-devices: missing; a GPU with mig-enabled: true needs its MIG devices, such as {"3g.71gb": 2}, or {} for MIG mode without devices`}},
		{"mig-devices empty value", "version: gpumux.io/v1\ngpus:\n  - match: all\n    mig-enabled: true\n    mig-devices:\n", "", []string{
			`l.yaml:5: gpus[0].mig-devices: null (no value): want a mapping of MIG profile to count such as {"3g.71gb": 2}, or {} for none`}},
		{"mig-devices a list", "version: gpumux.io/v1\ngpus:\n  - match: all\n    mig-enabled: true\n    mig-devices: [3g.71gb]\n", "", []string{
			`l.yaml:5: gpus[0].mig-devices: a list: want a mapping of MIG profile to count such as {"3g.71gb": 2}, or {} for none`}},
		{"mig-devices without MIG", "version: gpumux.io/v1\ngpus:\n  - match: all\n    mig-enabled: false\n    mig-devices: {3g.71gb: 1}\n", "", []string{
			`l.yaml:5: gpus[0].mig-devices: set while mig-enabled is false; remove mig-devices or set mig-enabled: true`}},
		{"bad profiles and counts", `version: gpumux.io/v1
gpus:
  - match: all
    mig-enabled: true
    mig-devices:
      3g.71gb: one
      2g.35gb: 0
      1g.18gb: -1
      4g.71gb: 1.5
      7g: 1
      "3g.71gb": 1
      [x]: 1
`, "", []string{
			`l.yaml:6: gpus[0].mig-devices: 3g.71gb: "one": want a count, a whole number of 1 or more`,
			`l.yaml:7: gpus[0].mig-devices: 2g.35gb: 0: want a count, a whole number of 1 or more`,
			`l.yaml:8: gpus[0].mig-devices: 1g.18gb: -1: want a count, a whole number of 1 or more`,
			`l.yaml:9: gpus[0].mig-devices: 4g.71gb: 1.5: want a count, a whole number of 1 or more`,
			`l.yaml:10: gpus[0].mig-devices: "7g": not a MIG profile name; want one such as 3g.71gb, 1g.18gb+me or 1c.2g.35gb`,
			`l.yaml:11: gpus[0].mig-devices: "3g.71gb": duplicate profile (first at line 6)`,
			`l.yaml:12: gpus[0].mig-devices: a list: not a MIG profile name; want one such as 3g.71gb, 1g.18gb+me or 1c.2g.35gb`}},
		{"every problem of a file is reported", `version: gpumux.io/v1
gpus:
  - match: "0-3"
    mig-enabled: yes
  - match: "4"
    mig-enabled: true
    mig-devices: {3g.71gb: 0}
  - match: "5"
    mig-enabled: false
    size: large
`, "", []string{
			`l.yaml:4: gpus[0].mig-enabled: "yes": want true or false`,
			`l.yaml:7: gpus[1].mig-devices: 3g.71gb: 0: want a count, a whole number of 1 or more`,
			`l.yaml:10: gpus[2].size: unknown key; valid keys: match, device-filter, mig-enabled, mig-devices`}},

		// mig-parted's format.
		{"mig-parted, no config named", "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: false\n  b:\n    - devices: all\n      mig-enabled: false\n", "", []string{
			`l.yaml:2: mig-configs: 2 configs and none selected; select one (-c) of: a, b`}},
		{"mig-parted, unknown config", "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: false\n  b:\n    - devices: all\n      mig-enabled: false\n", "c", []string{
			`l.yaml:2: mig-configs: "c": no such config; available: a, b`}},
		{"mig-parted, mig-configs missing", "version: v1\n", "", []string{
			`l.yaml:1: mig-configs: missing; want named configs, each a list of rules such as - devices: all`}},
		{"mig-parted, mig-configs empty", "version: v1\nmig-configs: {}\n", "", []string{
			`l.yaml:2: mig-configs: {}: want at least one named config, each a list of rules such as - devices: all`}},
		{"mig-parted, gpumux's keys", "version: v1\ngpus: []\nmig-configs:\n  a:\n    - match: all\n      mig-enabled: false\n", "a", []string{
			`l.yaml:2: gpus: unknown key; valid keys: version, mig-configs`,
			`l.yaml:5: mig-configs.a[0].match: unknown key; valid keys: devices, device-filter, mig-enabled, mig-devices`,
			`l.yaml:5: mig-configs.a[0].devices: missing; want all or a list of GPU indexes such as [0, 1]`}},
		{"mig-parted, every config is checked", `version: v1
mig-configs:
  good:
    - devices: all
      mig-enabled: false
  a:
    - devices: [0, -1, x, 1024]
      mig-enabled: false
  b: []
  c:
    - devices: "0"
      mig-enabled: true
      mig-devices: {"1g.5gb": -1}
  d:
    - devices: []
      mig-enabled: false
    - devices: all
  a: x
`, "good", []string{
			`l.yaml:7: mig-configs.a[0].devices: -1: not a GPU index; want whole numbers from 0 to 1023, such as [0, 1]`,
			`l.yaml:7: mig-configs.a[0].devices: "x": not a GPU index; want whole numbers from 0 to 1023, such as [0, 1]`,
			`l.yaml:7: mig-configs.a[0].devices: 1024: not a GPU index; want whole numbers from 0 to 1023, such as [0, 1]`,
			`l.yaml:9: mig-configs.b: []: want a list of at least one rule such as - devices: all`,
			`l.yaml:11: mig-configs.c[0].devices: "0": want all or a list of GPU indexes such as [0, 1]`,
			`l.yaml:13: mig-configs.c[0].mig-devices: 1g.5gb: -1: want a count, a whole number of 0 or more`,
			`l.yaml:15: mig-configs.d[0].devices: []: an empty list selects no GPU; want all or a list of GPU indexes such as [0, 1]`,
			`l.yaml:17: mig-configs.d[1].mig-enabled: missing; want true or false`,
			`l.yaml:18: mig-configs.a: duplicate config name (first at line 6)`}},
		{"mig-parted, mig-devices rules", `version: v1
mig-configs:
  a:
    - devices: all
      mig-enabled: true
    - devices: all
      mig-enabled: false
      mig-devices: {"1g.5gb": 0}
`, "", []string{
			`l.yaml:4: mig-configs.a[0].mig-devices: missing; a GPU with mig-enabled: true needs its MIG devices, such as {"3g.71gb": 2}, or {} for MIG mode without devices`,
			`l.yaml:8: mig-configs.a[1].mig-devices: set while mig-enabled is false; remove mig-devices or set mig-enabled: true`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, err := Parse("l.yaml", []byte(tc.src), tc.config)
			if err == nil {
				t.Fatalf("accepted: %v", summary(l))
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("%v is not ErrInvalid", err)
			}
			equalLines(t, "errors", strings.Split(err.Error(), "\n"), tc.want)
		})
	}
}

// TestAliasBomb: aliases to aliases must not make decoding take forever.
// Expanded, this file has 300 configs of 100 rules of 100 profiles.
func TestAliasBomb(t *testing.T) {
	var b strings.Builder
	b.WriteString("version: v1\nmig-configs:\n  c0: &L\n    - &R {devices: all, mig-enabled: true, mig-devices: {")
	for i := 1; i <= 100; i++ {
		fmt.Fprintf(&b, "%dg.%dgb: 1, ", i, i)
	}
	b.WriteString("}}\n")
	for i := 1; i < 100; i++ {
		b.WriteString("    - *R\n")
	}
	for i := 1; i < 300; i++ {
		fmt.Fprintf(&b, "  c%d: *L\n", i)
	}
	_, err := Parse("bomb.yaml", []byte(b.String()), "c0")
	equalLines(t, "errors", strings.Split(fmt.Sprint(err), "\n"), []string{
		"bomb.yaml:4: more than 100000 YAML nodes once aliases are expanded; write the layout out without aliases",
	})
}

func TestTestdataGPUMux(t *testing.T) {
	src, err := os.ReadFile("testdata/h200.yaml")
	if err != nil {
		t.Fatal(err)
	}
	l, err := Parse("testdata/h200.yaml", src, "")
	if err != nil {
		t.Fatal(err)
	}
	equalLines(t, "rules", summary(l), []string{
		"5 gpus[0] match=0-3 mig=true {2g.35gb: 2, 3g.71gb: 1}",
		"11 gpus[1] match=4-5 mig=true {1g.18gb: 7}",
		"16 gpus[2] match=6 mig=true {}",
		"20 gpus[3] match=7 filter=[0x233510DE] mig=false",
		"24 gpus[4] match=*A100* mig=false",
	})

	src, err = os.ReadFile("testdata/errors.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Parse("testdata/errors.yaml", src, "")
	equalLines(t, "errors", strings.Split(fmt.Sprint(err), "\n"), []string{
		`testdata/errors.yaml:4: gpus[0].mig-enabled: "yes": want true or false`,
		`testdata/errors.yaml:5: gpus[0].mig_devices: unknown key (did you mean mig-devices?); valid keys: match, device-filter, mig-enabled, mig-devices`,
		`testdata/errors.yaml:7: gpus[1].match: "3-1": not a GPU index range like 0-3 (indexes 0 to 1023, low to high)`,
		`testdata/errors.yaml:10: gpus[1].mig-devices: 3g.71gb: "one": want a count, a whole number of 1 or more`,
		`testdata/errors.yaml:11: gpus[1].mig-devices: 2g.35gb: 0: want a count, a whole number of 1 or more`,
		`testdata/errors.yaml:12: gpus[1].mig-devices: "2g.35gb": duplicate profile (first at line 11)`,
		`testdata/errors.yaml:13: gpus[2].match: "GPU-abc,4": "4" is not a GPU UUID (GPU-…); do not mix UUIDs with indexes or globs`,
		`testdata/errors.yaml:14: gpus[2].device-filter: "0x2335": want a PCI id 0x<device><vendor> such as "0x233510DE" (H200), optionally :0x<subsystem id>`,
		`testdata/errors.yaml:14: gpus[2].device-filter: 10: want a PCI id 0x<device><vendor> such as "0x233510DE" (H200), optionally :0x<subsystem id>`,
		`testdata/errors.yaml:16: gpus[2].mig-devices: set while mig-enabled is false; remove mig-devices or set mig-enabled: true`,
		`testdata/errors.yaml:18: gpus[3].match: missing; want GPU indexes ("0-3", "4,5"), GPU UUIDs ("GPU-…"), a model glob ("*H200*") or all`,
		`testdata/errors.yaml:18: gpus[3].mig-devices: missing; a GPU with mig-enabled: true needs its MIG devices, such as {"3g.71gb": 2}, or {} for MIG mode without devices`,
		`testdata/errors.yaml:19: gpus[4].match: a list: want a string: GPU indexes ("0-3", "4,5"), GPU UUIDs ("GPU-…"), a model glob ("*H200*") or all`,
		`testdata/errors.yaml:21: gpus[4].mig-enabled: duplicate key (first at line 20)`,
		`testdata/errors.yaml:22: gpus[4].size: unknown key; valid keys: match, device-filter, mig-enabled, mig-devices`,
	})
}

// TestTestdataMIGParted reads mig-parted's own files unchanged (origins in
// testdata/README.md): every config parses, and Marshal turns each into a
// gpumux file that reads back to the same rules.
func TestTestdataMIGParted(t *testing.T) {
	for _, tc := range []struct {
		file    string
		configs int
		check   map[string][]string
	}{
		{"testdata/mig-parted-examples-config.yaml", 7, map[string][]string{
			"all-enabled": {"8 mig-configs.all-enabled[0] match=all mig=true {}"},
			"custom-config": {
				"39 mig-configs.custom-config[0] match=0-3 mig=false",
				"41 mig-configs.custom-config[1] match=4 mig=true {1g.5gb: 7}",
				"45 mig-configs.custom-config[2] match=5 mig=true {2g.10gb: 3}",
				"49 mig-configs.custom-config[3] match=6 mig=true {3g.20gb: 2}",
				"53 mig-configs.custom-config[4] match=7 mig=true {1g.5gb: 2, 2g.10gb: 1, 3g.20gb: 1}",
			},
		}},
		{"testdata/mig-parted-config-default.yaml", 68, map[string][]string{
			"all-disabled":       {"4 mig-configs.all-disabled[0] match=all mig=false"},
			"all-1g.24gb.me.all": {"57 mig-configs.all-1g.24gb.me.all[0] match=all mig=true {1g.24gb+me.all: 1}"},
			"all-1g.10gb": {
				"107 mig-configs.all-1g.10gb[0] match=all filter=[0x233010DE 0x233110DE 0x232210DE 0x20B210DE 0x20B510DE 0x20F310DE 0x20F510DE 0x232410DE] mig=true {1g.10gb: 7}",
				"114 mig-configs.all-1g.10gb[1] match=all filter=[0x20B010DE 0x20B110DE 0x20F110DE 0x20F610DE] mig=true {1g.10gb: 4}",
			},
			"all-balanced": {
				"293 mig-configs.all-balanced[0] match=all filter=[0x294110DE] mig=true {1g.23gb: 2, 2g.47gb: 1, 3g.93gb: 1}",
				"301 mig-configs.all-balanced[1] match=all filter=[0x2BB510DE] mig=true {1g.24gb: 2, 2g.48gb: 1}",
				"308 mig-configs.all-balanced[2] match=all filter=[0x290110DE] mig=true {1g.23gb: 2, 2g.45gb: 1, 3g.90gb: 1}",
				"316 mig-configs.all-balanced[3] match=all filter=[0x234810DE] mig=true {1g.18gb: 2, 2g.36gb: 1, 3g.72gb: 1}",
				"325 mig-configs.all-balanced[4] match=all filter=[0x233510DE 0x233B10DE] mig=true {1g.18gb: 2, 2g.35gb: 1, 3g.71gb: 1}",
				"334 mig-configs.all-balanced[5] match=all filter=[0x232110DE 0x233A10DE] mig=true {1g.12gb: 2, 2g.24gb: 1, 3g.47gb: 1}",
				"343 mig-configs.all-balanced[6] match=all filter=[0x233010DE 0x233110DE 0x232210DE 0x20B210DE 0x20B510DE 0x20F310DE 0x20F510DE 0x232410DE] mig=true {1g.10gb: 2, 2g.20gb: 1, 3g.40gb: 1}",
				"352 mig-configs.all-balanced[7] match=all filter=[0x20B010DE 0x20B110DE 0x20F110DE 0x20F610DE] mig=true {1g.5gb: 2, 2g.10gb: 1, 3g.20gb: 1}",
				"361 mig-configs.all-balanced[8] match=all filter=[0x20B710DE] mig=true {1g.6gb: 2, 2g.12gb: 1}",
				"369 mig-configs.all-balanced[9] match=all filter=[0x234210DE 0x233D10DE 0x20B610DE 0x232910DE] mig=true {1g.12gb: 2, 2g.24gb: 1, 3g.48gb: 1}",
			},
		}},
	} {
		src, err := os.ReadFile(tc.file)
		if err != nil {
			t.Fatal(err)
		}
		names := configNames(t, tc.file, src)
		if len(names) != tc.configs {
			t.Errorf("%s: %d configs, want %d", tc.file, len(names), tc.configs)
		}
		for _, name := range names {
			l, err := Parse(tc.file, src, name)
			if err != nil {
				t.Errorf("%s -c %s: %v", tc.file, name, err)
				continue
			}
			if l.Config != name || l.Version != VersionMIGParted || len(l.Rules) == 0 {
				t.Errorf("%s -c %s: config %q, version %q, %d rules", tc.file, name, l.Config, l.Version, len(l.Rules))
			}
			if want, ok := tc.check[name]; ok {
				equalLines(t, tc.file+" -c "+name, summary(l), want)
			}
			out, err := l.Marshal()
			if err != nil {
				t.Errorf("%s -c %s: Marshal: %v", tc.file, name, err)
				continue
			}
			back, err := Parse("marshalled", out, "")
			if err != nil {
				t.Errorf("%s -c %s: the marshalled layout does not parse: %v\n%s", tc.file, name, err, out)
				continue
			}
			for i := range l.Rules {
				if !sameRule(&l.Rules[i], &back.Rules[i]) {
					t.Errorf("%s -c %s: rule %d reads back as %v", tc.file, name, i, summary(back)[i])
				}
			}
		}
	}
}

// configNames lists a mig-parted file's configs from Parse's error for no
// config selected.
func configNames(t *testing.T, file string, src []byte) []string {
	t.Helper()
	_, err := Parse(file, src, "")
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("%s without a config: %v", file, err)
	}
	_, list, ok := strings.Cut(e.Msg, "select one (-c) of: ")
	if !ok {
		t.Fatalf("%s without a config: %v", file, err)
	}
	return strings.Split(list, ", ")
}

func TestMarshalRefusesWhatParseRejects(t *testing.T) {
	for _, l := range []*Layout{
		{Rules: []Rule{{Match: Selector{}, Devices: map[string]int{}}}},
		{Rules: []Rule{{Match: Selector{All: true}, MIGEnabled: true, Devices: map[string]int{"3g.71gb": 0}}}},
		{Rules: []Rule{{Match: Selector{All: true}, MIGEnabled: true, Devices: map[string]int{"three": 1}}}},
		{Rules: []Rule{{Match: Selector{UUIDs: []string{"GPU-a,GPU-b"}}}}},
		{Rules: []Rule{{Match: Selector{All: true, DeviceIDs: []DeviceID{{ID: 0x10DE}}}}}},
	} {
		if out, err := l.Marshal(); err == nil {
			t.Errorf("Marshal(%+v) = %s", l.Rules, out)
		}
	}
}
