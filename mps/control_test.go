package mps

import (
	"slices"
	"strings"
	"testing"
)

func TestParsePIDs(t *testing.T) {
	for _, tc := range []struct {
		reply string
		want  []int
		err   bool
	}{
		{"", nil, false},
		{"\n", nil, false},
		{"781\n", []int{781}, false},
		{"781\n970\n", []int{781, 970}, false},
		{" 12 \n\n34", []int{12, 34}, false},
		{"Server 12345 not found\n", nil, true},
		{"0\n", nil, true},
		{"-3\n", nil, true},
	} {
		got, err := parsePIDs(tc.reply)
		if (err != nil) != tc.err || !slices.Equal(got, tc.want) {
			t.Errorf("parsePIDs(%q) = %v, %v; want %v, error %v", tc.reply, got, err, tc.want, tc.err)
		}
	}
}

func TestParsePercent(t *testing.T) {
	for _, tc := range []struct {
		reply string
		want  float64
		err   bool
	}{
		{"100.0\n", 100, false},
		{"25.0", 25, false},
		{"12.5\n", 12.5, false},
		{"", 0, true},
		{"Unknown command \"x\"\n", 0, true},
	} {
		got, err := parsePercent(tc.reply)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("parsePercent(%q) = %v, %v; want %v, error %v", tc.reply, got, err, tc.want, tc.err)
		}
	}
}

func TestDaemonEnv(t *testing.T) {
	base := []string{
		"PATH=/usr/bin", "CUDA_VISIBLE_DEVICES=0,1", "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps",
		"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=10", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=1G", "HOME=/root",
	}
	got := daemonEnv(base, "GPU-1", "/s/mps/GPU-1/pipe", "/s/mps/GPU-1/log")
	want := []string{
		"PATH=/usr/bin", "HOME=/root",
		"CUDA_VISIBLE_DEVICES=GPU-1", "CUDA_MPS_PIPE_DIRECTORY=/s/mps/GPU-1/pipe", "CUDA_MPS_LOG_DIRECTORY=/s/mps/GPU-1/log",
	}
	if !slices.Equal(got, want) {
		t.Errorf("daemonEnv = %v\nwant %v", got, want)
	}
}

func TestBackoff(t *testing.T) {
	m := NewManager(t.TempDir(), WithRestartBackoff(100e6, 1e9)) // 100ms, 1s
	var got []string
	for n := 1; n <= 6; n++ {
		got = append(got, m.backoff(n).String())
	}
	if want := "100ms 200ms 400ms 800ms 1s 1s"; strings.Join(got, " ") != want {
		t.Errorf("backoff = %v, want %s", got, want)
	}
}

func TestValidate(t *testing.T) {
	m := NewManager("/var/lib/gpumux")
	long := NewManager("/var/lib/nomad/plugins/gpumux/state/a-rather-long-directory-name")
	const gpu = "GPU-256fb354-563b-2270-f7db-6748bbc46ed3"
	const mig = "MIG-6d5b2d30-1b0c-5c45-9f5f-8d62b5b1f1a4"
	for _, tc := range []struct {
		name string
		m    *Manager
		want []Device
		err  string
	}{
		{"ok", m, []Device{{UUID: gpu, ThreadPercent: 25, PinnedMemLimitMiB: 4096}, {UUID: mig}}, ""},
		{"empty", m, nil, ""},
		{"no uuid", m, []Device{{}}, "does not start with GPU- or MIG-"},
		{"index", m, []Device{{UUID: "0"}}, "does not start with GPU- or MIG-"},
		{"old MIG form", m, []Device{{UUID: "MIG-GPU-1/1/0"}}, "path separator"},
		{"twice", m, []Device{{UUID: gpu}, {UUID: gpu, ThreadPercent: 50}}, "wanted twice"},
		{"percent", m, []Device{{UUID: gpu, ThreadPercent: 101}}, "not within 1-100"},
		{"negative", m, []Device{{UUID: gpu, ThreadPercent: -1}}, "not within 1-100"},
		{"long state dir", long, []Device{{UUID: gpu}}, "bytes long, and MPS needs at most 88"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.m.validate(tc.want)
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("validate: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("validate = %v, want an error with %q", err, tc.err)
			}
		})
	}
}
