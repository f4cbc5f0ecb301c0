package nodeconfig

import (
	"os"
	"reflect"
	"testing"

	"github.com/hashicorp/nomad/plugins/base"
)

// TestDecodeAsNomad: Decode reads the msgpack of a config exactly as
// Nomad's plugins/base does (whose handle it sets itself, to spare
// gpumux-runtime-core that package's initialisation): the example plugin
// config and the remote client's, with every kind of field (lists, a map,
// blocks, durations as text), and a config of every top-level key.
func TestDecodeAsNomad(t *testing.T) {
	every := `
enabled            = true
ignored_gpu_ids    = ["GPU-c70bf8d8-08b9-e783-2313-aaab3311dacf"]
group_names        = "nomad-device-nvidia"
simulate           = "dgxh200"
state_dir          = "/tmp/gpumux-state"
fingerprint_period = "30s"
mps_control_binary = "/usr/bin/nvidia-cuda-mps-control"
metrics_addr       = "127.0.0.1:9400"
runtime_socket     = "/run/gpumux/runtime.sock"
limiter_dir        = "/usr/lib/gpumux/limiter"
driver_root        = "/run/nvidia/driver"
gpu {
  match         = "0-1"
  mechanism     = "timeslice"
  replica_sizes = ["50%", "25%", "25%"]
  limit         = "off"
}
gpu {
  match       = "2"
  mechanism   = "mps"
  share_sizes = ["50%", "50%"]
}
`
	srcs := map[string]string{"every top-level key": every}
	for _, f := range []string{"../examples/gpumux-plugin.hcl", "../examples/gpumux-remote-client.hcl"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		srcs[f] = string(b)
	}
	for name, src := range srcs {
		t.Run(name, func(t *testing.T) {
			packed, err := pack([]byte(src))
			if err != nil {
				t.Fatal(err)
			}
			ours, err := Decode(packed)
			if err != nil {
				t.Fatal(err)
			}
			var nomads Config
			if err := base.MsgPackDecode(packed, &nomads); err != nil {
				t.Fatal(err)
			}
			nomads.normalize()
			if !reflect.DeepEqual(*ours, nomads) {
				t.Errorf("decoded\n%+v\nNomad's plugins/base decodes\n%+v", *ours, nomads)
			}
			if len(ours.GPUs) == 0 && ours.Remote == nil {
				t.Errorf("%s decoded to no gpu block and no remote block: %+v", name, ours)
			}
		})
	}
}
