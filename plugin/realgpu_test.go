//go:build gpu

package plugin_test

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/nomad/plugins/base"
)

// TestRealFingerprintAndReserve drives the plugin over gRPC on the real NVML
// (read-only: no MIG layout is declared) and reserves the first whole GPU.
func TestRealFingerprintAndReserve(t *testing.T) {
	p := dialPlugin(t)
	if err := p.SetConfig(&base.Config{PluginConfig: encodeConfig(t, `state_dir = "`+t.TempDir()+`"`)}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ch, err := p.Fingerprint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.Error != nil {
		t.Fatal(r.Error)
	}
	if len(r.Devices) == 0 {
		t.Fatal("no device groups")
	}
	for _, g := range r.Devices {
		var attrs []string
		for k, v := range g.Attributes {
			attrs = append(attrs, k+"="+attrString(v))
		}
		t.Logf("group %s/%s/%s: %d devices %v; attributes %v", g.Vendor, g.Type, g.Name, len(g.Devices), ids(r.Devices), attrs)
	}
	g := r.Devices[0]
	if g.Name == "H200" {
		for k, want := range map[string]string{"mechanism": "exclusive", "sm_count": "132", "memory": "143771 MiB", "cuda_compute_capability": "9.0", "memory_isolation": "hard"} {
			if got := attrString(g.Attributes[k]); got != want {
				t.Errorf("attribute %s = %s, want %s", k, got, want)
			}
		}
	}
	id := g.Devices[0].ID
	res, err := p.Reserve([]string{id})
	if err != nil {
		t.Fatal(err)
	}
	if res.Envs["NVIDIA_VISIBLE_DEVICES"] != id {
		t.Errorf("envs %v", res.Envs)
	}
	for _, d := range res.Devices {
		fi, err := os.Stat(d.HostPath)
		if err != nil {
			t.Errorf("reserved device %s: %v", d.HostPath, err)
			continue
		}
		st := fi.Sys().(*syscall.Stat_t)
		t.Logf("reserved %s -> %s (char %d:%d)", d.HostPath, d.TaskPath, st.Rdev>>8&0xfff, st.Rdev&0xff|(st.Rdev>>12)&0xfff00)
		if fi.Mode()&os.ModeCharDevice == 0 || !strings.HasPrefix(d.HostPath, "/dev/nvidia") {
			t.Errorf("%s is not an NVIDIA character device", d.HostPath)
		}
	}
}
