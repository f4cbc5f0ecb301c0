package nodeconfig

import (
	"testing"
	"time"
)

// FuzzParseConfig feeds arbitrary HCL to the config parser: it must never
// panic, and whatever it accepts must be a valid config with its defaults.
func FuzzParseConfig(f *testing.F) {
	f.Add(`simulate = "dgxh200"` + "\ngpu {\n match = \"0-3\"\n mechanism = \"timeslice\"\n replicas = 4\n}")
	f.Add("gpu {\n match = \"6,7\"\n mechanism = \"mig\"\n mig_devices {\n \"3g.71gb\" = 1\n }\n}")
	f.Add(`plugin "nomad-device-gpumux" { config { fingerprint_period = "30s" } }`)
	f.Add(`state_dir = "/tmp/x"` + "\n" + `gpu { match = "*H200*" mechanism = "exclusive" }`)
	f.Add("remote {\n servers = [\"10.0.0.5:7070\"]\n token_file = \"/etc/gpumux/remote.key\"\n shares = 2\n}")
	f.Fuzz(func(t *testing.T, src string) {
		cfg, err := ParseConfig([]byte(src))
		if err != nil {
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("accepted a config that does not validate: %v", err)
		}
		if cfg.StateDir == "" || cfg.period < time.Second || cfg.Remote != nil && (cfg.Remote.TTL() < MinRemoteTokenTTL || cfg.Remote.Shares < 1) {
			t.Fatalf("accepted config without defaults: %+v", cfg)
		}
	})
}
