package layout

import (
	"os"
	"strings"
	"testing"
)

// docExamples returns the indented YAML blocks of doc.go that start with
// "version:", without their comment prefix.
func docExamples(t *testing.T) []string {
	t.Helper()
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	var cur *strings.Builder
	for _, line := range strings.Split(string(src), "\n") {
		body, indented := strings.CutPrefix(line, "//\t")
		switch {
		case indented && strings.HasPrefix(body, "version:"):
			cur = &strings.Builder{}
			out = append(out, "")
			fallthrough
		case indented && cur != nil:
			cur.WriteString(body + "\n")
			out[len(out)-1] = cur.String()
		default:
			cur = nil
		}
	}
	return out
}

// TestDocExamples keeps the package documentation honest: its examples
// parse and resolve on a simulated H200 node as the text says, and its
// example errors are what gpumux prints.
func TestDocExamples(t *testing.T) {
	ex := docExamples(t)
	if len(ex) != 2 {
		t.Fatalf("%d examples in doc.go, want 2", len(ex))
	}
	node := simNode(t, "dgxh200")

	l, err := Parse("doc.yaml", []byte(ex[0]), "")
	if err != nil {
		t.Fatal(err)
	}
	l.PCIID = simPCIID
	got, err := l.For(node)
	if err != nil {
		t.Fatal(err)
	}
	equalLines(t, "gpumux example", wants(got), []string{
		"GPU 0: mig=true {2g.35gb: 2, 3g.71gb: 1} from gpus[0]",
		"GPU 1: mig=true {2g.35gb: 2, 3g.71gb: 1} from gpus[0]",
		"GPU 2: mig=true {2g.35gb: 2, 3g.71gb: 1} from gpus[0]",
		"GPU 3: mig=true {2g.35gb: 2, 3g.71gb: 1} from gpus[0]",
		"GPU 4: mig=true {} from gpus[1]",
		"GPU 5: mig=false from gpus[3]",
		"GPU 6: mig=false from gpus[3]",
	})

	l, err = Parse("doc.yaml", []byte(ex[1]), "custom")
	if err != nil {
		t.Fatal(err)
	}
	l.PCIID = simPCIID
	got, err = l.For(node)
	if err != nil {
		t.Fatal(err)
	}
	equalLines(t, "mig-parted example", wants(got), []string{
		"GPU 0: mig=false from mig-configs.custom[0]",
		"GPU 1: mig=false from mig-configs.custom[0]",
		"GPU 2: mig=true {3g.71gb: 2} from mig-configs.custom[1]",
	})

	// The example errors.
	_, err = Parse("node.yaml", []byte("version: gpumux.io/v1\ngpus:\n  - match: \"0-3\"\n    mig-enabled: yes\n    mig_devices: {3g.71gb: 2}\n"), "")
	l, err2 := Parse("node.yaml", []byte("version: gpumux.io/v1\ngpus:\n  - match: \"0-3\"\n    mig-enabled: false\n  - match: \"4-7\"\n    mig-enabled: true\n    mig-devices:\n      1g.10gb: 4\n"), "")
	if err2 != nil {
		t.Fatal(err2)
	}
	_, err3 := l.For(node)
	msgs := err.Error() + "\n" + err3.Error()
	src, _ := os.ReadFile("doc.go")
	for _, m := range strings.Split(msgs, "\n") {
		if before, _, cut := strings.Cut(m, "valid: 1g.18gb (up to 7), "); cut {
			m = before + "valid: 1g.18gb (up to 7), …"
		}
		if !strings.Contains(string(src), "//\t"+m+"\n") {
			t.Errorf("doc.go does not show %q", m)
		}
	}
}
