package nodeconfig_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/gpumux/gpumux/nodeconfig"
)

func TestNRIBlock(t *testing.T) {
	tests := []struct {
		name, src string
		want      *nodeconfig.NRI
		err       string // "" for none
	}{
		{"absent", ``, nil, ""},
		{"defaults", "nri {}\n", &nodeconfig.NRI{Enabled: true, Socket: "/var/run/nri/nri.sock", PluginIndex: "50", RuncRoot: "/run/containerd/runc/k8s.io"}, ""},
		{"everything", "nri {\n enabled = false\n socket = \"/run/nri.sock\"\n plugin_index = \"05\"\n runc_root = \"/run/r\"\n skip_runtime_handlers = [\"gpumux\"]\n}\n",
			&nodeconfig.NRI{Enabled: false, Socket: "/run/nri.sock", PluginIndex: "05", RuncRoot: "/run/r", SkipRuntimeHandlers: []string{"gpumux"}}, ""},
		{"empty handler", "nri {\n skip_runtime_handlers = [\"\"]\n}\n", nil, `skip_runtime_handlers: an empty name`},
		{"relative socket", "nri {\n socket = \"nri.sock\"\n}\n", nil, `nri block: socket = "nri.sock": want the clean absolute path`},
		{"unclean runc root", "nri {\n runc_root = \"/run//r/\"\n}\n", nil, `nri block: runc_root = "/run//r/"`},
		{"bad index", "nri {\n plugin_index = \"5\"\n}\n", nil, `nri block: plugin_index = "5": want two digits`},
		{"unknown key", "nri {\n sock = \"/x\"\n}\n", nil, `sock`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := nodeconfig.ParseConfig([]byte(tc.src))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(cfg.NRI, tc.want) {
				t.Errorf("NRI = %+v, want %+v", cfg.NRI, tc.want)
			}
		})
	}
}
