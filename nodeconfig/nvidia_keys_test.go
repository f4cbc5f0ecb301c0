package nodeconfig_test

import (
	"strings"
	"testing"
	"time"

	"github.com/gpumux/gpumux/nodeconfig"
	"github.com/gpumux/gpumux/share"
)

// upstreamBlock is nomad-device-nvidia's plugin block as Nomad's
// documentation gives it, with only the label changed to gpumux's.
const upstreamBlock = `
plugin "nomad-device-gpumux" {
  config {
    enabled            = true
    ignored_gpu_ids    = ["GPU-fef8089b-3c47-4b52-9a87-2f3c1a6e4d01", "MIG-ac81e44d-5b1e-5c0a-8e2b-0d9f6a1c2b3e"]
    fingerprint_period = "1m"
  }
}
`

func TestNomadDeviceNvidiaKeys(t *testing.T) {
	cfg, err := nodeconfig.ParseConfig([]byte(upstreamBlock))
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.IsEnabled() || len(cfg.IgnoredGPUIDs) != 2 || cfg.Period() != time.Minute || cfg.GroupNames != share.NamingGpumux {
		t.Errorf("parsed as enabled %v, ignored %v, period %v, group_names %q", cfg.IsEnabled(), cfg.IgnoredGPUIDs, cfg.Period(), cfg.GroupNames)
	}
	if !cfg.Ignored("MIG-ac81e44d-5b1e-5c0a-8e2b-0d9f6a1c2b3e") || cfg.Ignored("GPU-00000000-0000-0000-0000-000000000000") {
		t.Error("Ignored does not follow ignored_gpu_ids")
	}

	// The defaults are nomad-device-nvidia's: enabled, nothing ignored, 1m.
	def, err := nodeconfig.ParseConfig([]byte(`state_dir = "/tmp/x"`))
	if err != nil {
		t.Fatal(err)
	}
	if !def.IsEnabled() || len(def.IgnoredGPUIDs) != 0 || def.Period() != time.Minute {
		t.Errorf("defaults: enabled %v, ignored %v, period %v", def.IsEnabled(), def.IgnoredGPUIDs, def.Period())
	}
	if cfg, err := nodeconfig.Decode(nil); err != nil || !cfg.IsEnabled() {
		t.Errorf("an empty config: enabled %v (%v), want enabled", cfg != nil && cfg.IsEnabled(), err)
	}
	off, err := nodeconfig.ParseConfig([]byte("enabled = false\n"))
	if err != nil || off.IsEnabled() {
		t.Errorf("enabled = false parsed as enabled (%v)", err)
	}
}

func TestNomadDeviceNvidiaKeyErrors(t *testing.T) {
	tests := []struct {
		config string
		want   string
	}{
		{`fingerprint_period = "5"`, `fingerprint_period = "5": want a duration of at least 1s with its unit, e.g. "30s", "1m" or "1h30m"`},
		{`fingerprint_period = "500ms"`, `fingerprint_period = "500ms": want a duration of at least 1s`},
		{`ignored_gpu_ids = ["GPU-fef8089b"]`, `ignored_gpu_ids[0] = "GPU-fef8089b": want the UUID of a GPU or MIG instance as nvidia-smi -L prints it`},
		{`ignored_gpu_ids = ["0"]`, `ignored_gpu_ids[0] = "0"`},
		{`ignored_gpu_ids = ["GPU-fef8089b-3c47-4b52-9a87-2f3c1a6e4d01", "GPU-fef8089b-3c47-4b52-9a87-2f3c1a6e4d01"]`, `ignored_gpu_ids[1] = "GPU-fef8089b-3c47-4b52-9a87-2f3c1a6e4d01": listed twice`},
		{`ignored_gpu_ids = "GPU-fef8089b-3c47-4b52-9a87-2f3c1a6e4d01"`, `ignored_gpu_ids`},
		{`enabled = "maybe"`, `enabled`},
		{`group_names = "nvidia"`, `group_names = "nvidia": want one of ["gpumux" "nomad-device-nvidia"]`},
	}
	for _, tc := range tests {
		_, err := nodeconfig.ParseConfig([]byte(tc.config))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseConfig(%q) = %v, want an error containing %q", tc.config, err, tc.want)
		}
	}
	for _, ok := range []string{
		`ignored_gpu_ids = ["MIG-GPU-fef8089b-3c47-4b52-9a87-2f3c1a6e4d01/1/0"]`, // drivers before R470
		`group_names = "nomad-device-nvidia"`,
	} {
		if _, err := nodeconfig.ParseConfig([]byte(ok)); err != nil {
			t.Errorf("ParseConfig(%q): %v", ok, err)
		}
	}
}
