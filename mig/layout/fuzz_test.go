package layout

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParse feeds arbitrary files to Parse: it must not panic, every error
// must name the file, and whatever it accepts must write out in gpumux's
// format (Marshal) and read back to the same rules.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.yaml")
	for _, file := range files {
		if src, err := os.ReadFile(file); err == nil {
			f.Add(string(src), "")
			f.Add(string(src), "all-balanced")
		}
	}
	f.Add("version: gpumux.io/v1\ngpus:\n  - match: \"0-3\"\n    mig-enabled: true\n    mig-devices: {3g.71gb: 1, 2g.35gb: 2}\n", "")
	f.Add("version: gpumux.io/v1\ngpus:\n  - match: GPU-a,GPU-b\n    device-filter: 0x233510DE:0x18BF10DE\n    mig-enabled: false\n", "")
	f.Add("version: gpumux.io/v1\ngpus:\n  - &r {match: all, mig-enabled: true, mig-devices: {}}\n  - *r\n", "")
	f.Add("version: v1\nmig-configs:\n  a:\n    - devices: [0, 1]\n      mig-enabled: true\n      mig-devices: {\"1g.5gb\": 0}\n", "a")
	f.Fuzz(func(t *testing.T, src, config string) {
		l, err := Parse("f.yaml", []byte(src), config)
		if err != nil {
			for _, line := range strings.Split(err.Error(), "\n") {
				if !strings.HasPrefix(line, "f.yaml") {
					t.Fatalf("error does not name the file: %q", line)
				}
			}
			return
		}
		out, err := l.Marshal()
		if err != nil {
			t.Fatalf("accepted, but Marshal fails: %v", err)
		}
		back, err := Parse("out.yaml", out, "")
		if err != nil {
			t.Fatalf("marshalled layout does not parse: %v\n%s", err, out)
		}
		if len(back.Rules) != len(l.Rules) {
			t.Fatalf("%d rules read back as %d", len(l.Rules), len(back.Rules))
		}
		for i := range l.Rules {
			if !sameRule(&l.Rules[i], &back.Rules[i]) {
				t.Fatalf("rule %d changed:\n%+v\n%+v", i, l.Rules[i], back.Rules[i])
			}
		}
	})
}
