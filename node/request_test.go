package node

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpumux/gpumux/internal/quantity"
	"github.com/gpumux/gpumux/share"
)

const (
	gpuA = "GPU-5d0b7a52-1b8e-4c3a-9f1e-0123456789ab"
	migA = "MIG-2c9fcf0d-fb60-452c-a81d-dc13c306d3f8"
)

func TestParseRequest(t *testing.T) {
	tests := []struct {
		name     string
		ann      map[string]string
		env      []string
		lim      Limits
		want     share.Request
		reserved []string
		asked    bool
	}{
		{name: "nothing", env: []string{"PATH=/bin", "NVIDIA_VISIBLE_DEVICES=all"}},
		{name: "other annotations and GPUMUX_ variables are not ours",
			ann: map[string]string{"io.kubernetes.cri.sandbox-id": "x", "gpumux.io": "y", "x.gpumux.io/gpus": "2"},
			env: []string{"GPUMUX_DEBUG=1", "GPUMUX_GPU=2", "GPUMUXGPUS=3", "NOEQUALS"}},
		{name: "auto alone", ann: map[string]string{AnnotationMechanism: "auto"}, want: share.Request{Count: 1}, asked: true},
		{name: "every annotation", ann: map[string]string{AnnotationMechanism: "auto", AnnotationMemory: "16Gi", AnnotationCompute: "25",
			AnnotationIsolation: "standard", AnnotationGPUs: "2"},
			want: share.Request{Isolation: share.LevelStandard, MemoryMiB: 16384, ComputePercent: 25, Count: 2}, asked: true},
		{name: "every variable", env: []string{"GPUMUX_MECHANISM=mig", "GPUMUX_MEMORY=512Mi", "GPUMUX_COMPUTE=40%", "GPUMUX_GPUS=3"},
			want: share.Request{Mechanism: share.MIG, MemoryMiB: 512, ComputePercent: 40, Count: 3}, asked: true},
		{name: "annotation and variable agree in meaning", ann: map[string]string{AnnotationMemory: "16Gi", AnnotationGPUs: "2"},
			env: []string{"GPUMUX_MEMORY=16384MiB", "GPUMUX_GPUS=02"}, want: share.Request{MemoryMiB: 16384, Count: 2}, asked: true},
		{name: "same variable twice, same value", env: []string{"GPUMUX_GPUS=2", "GPUMUX_GPUS=2"}, want: share.Request{Count: 2}, asked: true},
		{name: "white space is trimmed", ann: map[string]string{AnnotationMechanism: " mps\n", AnnotationMemory: "16 GiB "},
			want: share.Request{Mechanism: share.MPS, MemoryMiB: 16384, Count: 1}, asked: true},
		{name: "units", ann: map[string]string{AnnotationMemory: "1ti"}, want: share.Request{MemoryMiB: 1 << 20, Count: 1}, asked: true},
		{name: "gib lower case", ann: map[string]string{AnnotationMemory: "2gib"}, want: share.Request{MemoryMiB: 2048, Count: 1}, asked: true},
		{name: "whole MiB in Ki", ann: map[string]string{AnnotationMemory: "2048KiB"}, want: share.Request{MemoryMiB: 2, Count: 1}, asked: true},
		{name: "memory at the limit", ann: map[string]string{AnnotationMemory: "80Gi"}, lim: Limits{MaxMemoryMiB: 80 * 1024},
			want: share.Request{MemoryMiB: 80 * 1024, Count: 1}, asked: true},
		{name: "count at the default limit", ann: map[string]string{AnnotationGPUs: "8"}, want: share.Request{Count: 8}, asked: true},
		{name: "count at a raised limit", ann: map[string]string{AnnotationGPUs: "16"}, lim: Limits{MaxCount: 16}, want: share.Request{Count: 16}, asked: true},
		{name: "reserved shares", env: []string{"GPUMUX_SHARES=" + gpuA + "," + migA + "," + gpuA + "/mps/3"},
			want: share.Request{Count: 3}, reserved: []string{gpuA, migA, gpuA + "/mps/3"}, asked: true},
		{name: "reserved shares with a matching count", env: []string{"GPUMUX_SHARES=" + gpuA + "/timeslice/0", "GPUMUX_GPUS=1"},
			want: share.Request{Count: 1}, reserved: []string{gpuA + "/timeslice/0"}, asked: true},
		{name: "remote", env: []string{"GPUMUX_MECHANISM=remote", "GPUMUX_MEMORY=16Gi"},
			want: share.Request{Mechanism: share.Remote, MemoryMiB: 16384, Count: 1}, asked: true},
		{name: "reserved remote shares", env: []string{"GPUMUX_SHARES=" + gpuA + "/remote/0," + gpuA + "/remote/3"},
			want: share.Request{Count: 2}, reserved: []string{gpuA + "/remote/0", gpuA + "/remote/3"}, asked: true},
		{name: "reserved shares are not bound by MaxCount", env: []string{"GPUMUX_SHARES=" + gpuA + "/timeslice/0," + gpuA + "/timeslice/1"}, lim: Limits{MaxCount: 1},
			want: share.Request{Count: 2}, reserved: []string{gpuA + "/timeslice/0", gpuA + "/timeslice/1"}, asked: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, reserved, asked, err := ParseRequest(tt.ann, tt.env, tt.lim)
			if err != nil {
				t.Fatal(err)
			}
			if req != tt.want || asked != tt.asked || strings.Join(reserved, ",") != strings.Join(tt.reserved, ",") {
				t.Errorf("got %+v %v %v, want %+v %v %v", req, reserved, asked, tt.want, tt.reserved, tt.asked)
			}
			if !asked && (reserved != nil || req != (share.Request{})) {
				t.Errorf("asked for nothing, but got %+v %v", req, reserved)
			}
		})
	}
}

func TestParseRequestErrors(t *testing.T) {
	long := strings.Repeat("x", 300)
	many := strings.TrimSuffix(strings.Repeat(gpuA+",", MaxReservedShares+1), ",")
	tests := []struct {
		name string
		ann  map[string]string
		env  []string
		lim  Limits
		want string // the whole error
	}{
		{name: "unknown annotation", ann: map[string]string{"gpumux.io/gpu": "1", "gpumux.io/memory": "1Gi"},
			want: `unknown annotation "gpumux.io/gpu" (valid: gpumux.io/mechanism, gpumux.io/memory, gpumux.io/compute, gpumux.io/isolation, gpumux.io/gpus)`},
		{name: "unknown annotations, all named", ann: map[string]string{"gpumux.io/b": "", "gpumux.io/a": "", "gpumux.io/Memory": ""},
			want: `unknown annotation "gpumux.io/Memory", "gpumux.io/a", "gpumux.io/b" (valid: gpumux.io/mechanism, gpumux.io/memory, gpumux.io/compute, gpumux.io/isolation, gpumux.io/gpus)`},
		{name: "unknown mechanism", ann: map[string]string{AnnotationMechanism: "vgpu"},
			want: `annotation gpumux.io/mechanism = "vgpu": unknown mechanism (valid: auto, exclusive, mig, mps, timeslice, remote)`},
		{name: "mechanism is case-sensitive", env: []string{"GPUMUX_MECHANISM=MIG"},
			want: `environment variable GPUMUX_MECHANISM = "MIG": unknown mechanism (valid: auto, exclusive, mig, mps, timeslice, remote)`},
		{name: "empty mechanism", ann: map[string]string{AnnotationMechanism: " "},
			want: `annotation gpumux.io/mechanism = " ": empty (valid: auto, exclusive, mig, mps, timeslice, remote)`},
		{name: "unknown isolation", ann: map[string]string{AnnotationIsolation: "hard"},
			want: `annotation gpumux.io/isolation = "hard": unknown isolation level (valid: strict, standard, none)`},
		{name: "isolation with a mechanism", ann: map[string]string{AnnotationIsolation: "strict"}, env: []string{"GPUMUX_MECHANISM=mps"},
			want: `isolation "strict" steers mechanism auto only, but mechanism "mps" was asked for: drop one of them`},
		{name: "bare number", ann: map[string]string{AnnotationMemory: "16"},
			want: `annotation gpumux.io/memory = "16": a unit is needed (want ` + quantity.Rule + `)`},
		{name: "decimal G", ann: map[string]string{AnnotationMemory: "16G"},
			want: `annotation gpumux.io/memory = "16G": unit "G" is ambiguous (want ` + quantity.Rule + `)`},
		{name: "decimal GB", env: []string{"GPUMUX_MEMORY=80GB"},
			want: `environment variable GPUMUX_MEMORY = "80GB": unit "GB" is ambiguous (want ` + quantity.Rule + `)`},
		{name: "decimal MB", ann: map[string]string{AnnotationMemory: "512MB"},
			want: `annotation gpumux.io/memory = "512MB": unit "MB" is ambiguous (want ` + quantity.Rule + `)`},
		{name: "not whole MiB", ann: map[string]string{AnnotationMemory: "1536Ki"},
			want: `annotation gpumux.io/memory = "1536Ki": not a whole number of MiB (want a multiple of 1024Ki, or a unit of Mi, Gi or Ti)`},
		{name: "bytes", ann: map[string]string{AnnotationMemory: "1073741824B"},
			want: `annotation gpumux.io/memory = "1073741824B": unit "B" has no binary prefix (want ` + quantity.Rule + `)`},
		{name: "fraction", ann: map[string]string{AnnotationMemory: "1.5Gi"},
			want: `annotation gpumux.io/memory = "1.5Gi": not a memory quantity (want ` + quantity.Rule + `)`},
		{name: "zero", ann: map[string]string{AnnotationMemory: "0Mi"},
			want: `annotation gpumux.io/memory = "0Mi": must be at least 1Mi (0 would mean any: leave the key out instead)`},
		{name: "overflow", ann: map[string]string{AnnotationMemory: "18446744073709551615Ti"},
			want: `annotation gpumux.io/memory = "18446744073709551615Ti": too large (want ` + quantity.Rule + `)`},
		{name: "memory over the limit", ann: map[string]string{AnnotationMemory: "81Gi"}, lim: Limits{MaxMemoryMiB: 80 * 1024},
			want: `annotation gpumux.io/memory = "81Gi": 81 GiB (82944 MiB) is over this node's limit of 80 GiB (81920 MiB) per share`},
		{name: "compute 0", ann: map[string]string{AnnotationCompute: "0"},
			want: `annotation gpumux.io/compute = "0": want a whole percentage from 1 to 100, e.g. 25 or 25%`},
		{name: "compute 101", env: []string{"GPUMUX_COMPUTE=101%"},
			want: `environment variable GPUMUX_COMPUTE = "101%": want a whole percentage from 1 to 100, e.g. 25 or 25%`},
		{name: "compute fraction", ann: map[string]string{AnnotationCompute: "0.5"},
			want: `annotation gpumux.io/compute = "0.5": want a whole percentage from 1 to 100, e.g. 25 or 25%`},
		{name: "compute sign", ann: map[string]string{AnnotationCompute: "+5"},
			want: `annotation gpumux.io/compute = "+5": want a whole percentage from 1 to 100, e.g. 25 or 25%`},
		{name: "gpus 0", ann: map[string]string{AnnotationGPUs: "0"},
			want: `annotation gpumux.io/gpus = "0": want a whole number from 1 to 8`},
		{name: "gpus all", ann: map[string]string{AnnotationGPUs: "all"},
			want: `annotation gpumux.io/gpus = "all": want a whole number from 1 to 8`},
		{name: "gpus over the default limit", ann: map[string]string{AnnotationGPUs: "9"},
			want: `annotation gpumux.io/gpus = "9": 9 GPUs is over this node's limit of 8 per container`},
		{name: "gpus over a lowered limit", env: []string{"GPUMUX_GPUS=3"}, lim: Limits{MaxCount: 2},
			want: `environment variable GPUMUX_GPUS = "3": 3 GPUs is over this node's limit of 2 per container`},
		{name: "gpus huge", ann: map[string]string{AnnotationGPUs: "99999999999999999999"},
			want: `annotation gpumux.io/gpus = "99999999999999999999": want a whole number from 1 to 8`},
		{name: "annotation and variable disagree", ann: map[string]string{AnnotationMemory: "16Gi"}, env: []string{"GPUMUX_MEMORY=8Gi"},
			want: `annotation gpumux.io/memory = "16Gi" and environment variable GPUMUX_MEMORY = "8Gi" disagree: give one, or the same value in both`},
		{name: "mechanism disagrees", ann: map[string]string{AnnotationMechanism: "auto"}, env: []string{"GPUMUX_MECHANISM=mig"},
			want: `annotation gpumux.io/mechanism = "auto" and environment variable GPUMUX_MECHANISM = "mig" disagree: give one, or the same value in both`},
		{name: "variable twice", env: []string{"GPUMUX_GPUS=1", "GPUMUX_GPUS=2"},
			want: `environment variable GPUMUX_GPUS is set twice, to "1" and "2"`},
		{name: "variable without a value", env: []string{"GPUMUX_GPUS"},
			want: `environment entry "GPUMUX_GPUS" has no value (want GPUMUX_GPUS=<value>)`},
		{name: "empty variable", env: []string{"GPUMUX_ISOLATION="},
			want: `environment variable GPUMUX_ISOLATION = "": empty (valid: strict, standard, none)`},
		{name: "long values are clipped", ann: map[string]string{AnnotationIsolation: long},
			want: `annotation gpumux.io/isolation = "` + long[:120] + `…": unknown isolation level (valid: strict, standard, none)`},
		{name: "empty shares", env: []string{"GPUMUX_SHARES="},
			want: `environment variable GPUMUX_SHARES = "": empty (want comma-separated share IDs, e.g. GPU-…, MIG-…, GPU-…/mps/0)`},
		{name: "empty share ID", env: []string{"GPUMUX_SHARES=" + gpuA + ",,"},
			want: `environment variable GPUMUX_SHARES = "` + gpuA + `,,": share ID 2 of 3 is empty`},
		{name: "malformed share ID", env: []string{"GPUMUX_SHARES=/dev/nvidia0"},
			want: `environment variable GPUMUX_SHARES = "/dev/nvidia0": share ID "/dev/nvidia0" is malformed (want GPU-<uuid> or MIG-<uuid>, optionally followed by /timeslice/<n>, /mps/<n> or /remote/<n>)`},
		{name: "share ID with another mechanism", env: []string{"GPUMUX_SHARES=" + gpuA + "/mig/0"},
			want: `environment variable GPUMUX_SHARES = "` + gpuA + `/mig/0": share ID "` + gpuA + `/mig/0" is malformed (want GPU-<uuid> or MIG-<uuid>, optionally followed by /timeslice/<n>, /mps/<n> or /remote/<n>)`},
		{name: "share ID all", env: []string{"GPUMUX_SHARES=all"},
			want: `environment variable GPUMUX_SHARES = "all": share ID "all" is malformed (want GPU-<uuid> or MIG-<uuid>, optionally followed by /timeslice/<n>, /mps/<n> or /remote/<n>)`},
		{name: "duplicate share ID", env: []string{"GPUMUX_SHARES=" + migA + ", " + migA},
			want: `environment variable GPUMUX_SHARES = "` + migA + `, ` + migA + `": share ID "` + migA + `" is named twice`},
		{name: "too many share IDs", env: []string{"GPUMUX_SHARES=" + many},
			want: `environment variable GPUMUX_SHARES = "` + many[:120] + `…": 513 share IDs: at most 512`},
		{name: "count disagrees with reserved shares", env: []string{"GPUMUX_SHARES=" + gpuA, "GPUMUX_GPUS=2"},
			want: `2 GPUs asked for, but GPUMUX_SHARES names 1 reserved shares`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, reserved, asked, err := ParseRequest(tt.ann, tt.env, tt.lim)
			if err == nil {
				t.Fatalf("got %+v %v %v, want error %s", req, reserved, asked, tt.want)
			}
			if err.Error() != tt.want {
				t.Errorf("error\n got %s\nwant %s", err, tt.want)
			}
			if asked || reserved != nil || req != (share.Request{}) {
				t.Errorf("an error came with %+v %v %v", req, reserved, asked)
			}
		})
	}
}

// FuzzParseRequest: ParseRequest never panics, and what it accepts stays
// within the limits and is a request share.Choose takes as valid.
func FuzzParseRequest(f *testing.F) {
	f.Add("mechanism", "mig", "GPUMUX_MEMORY=16Gi", "GPUMUX_SHARES="+gpuA, uint8(0), uint32(0))
	f.Add("memory", "80Gi", "GPUMUX_GPUS=2", "GPUMUX_COMPUTE=40%", uint8(2), uint32(40960))
	f.Add("isolation", "none", "GPUMUX_MECHANISM=auto", "GPUMUX_GPUS=9", uint8(16), uint32(0))
	f.Add("gpus", "3", "GPUMUX_SHARES="+migA+","+gpuA+"/mps/1", "GPUMUX_GPUS=2", uint8(0), uint32(0))
	f.Add("compute", "101", "GPUMUX_MEMORY=16G", "X=1", uint8(1), uint32(1))
	f.Fuzz(func(t *testing.T, key, value, env1, env2 string, maxCount uint8, maxMiB uint32) {
		lim := Limits{MaxCount: int(maxCount), MaxMemoryMiB: uint64(maxMiB)}
		ann := map[string]string{AnnotationPrefix + key: value, "other": value}
		req, reserved, asked, err := ParseRequest(ann, []string{env1, env2}, lim)
		if err != nil {
			if asked || reserved != nil || req != (share.Request{}) {
				t.Fatalf("an error came with %+v %v %v", req, reserved, asked)
			}
			return
		}
		if !asked {
			if reserved != nil || req != (share.Request{}) {
				t.Fatalf("asked for nothing, but got %+v %v", req, reserved)
			}
			return
		}
		max := lim.MaxCount
		if max == 0 {
			max = DefaultMaxCount
		}
		switch {
		case reserved == nil && (req.Count < 1 || req.Count > max):
			t.Fatalf("count %d outside 1..%d", req.Count, max)
		case reserved != nil && req.Count != len(reserved):
			t.Fatalf("count %d for %d reserved shares", req.Count, len(reserved))
		case len(reserved) > MaxReservedShares:
			t.Fatalf("%d reserved shares", len(reserved))
		case lim.MaxMemoryMiB > 0 && req.MemoryMiB > lim.MaxMemoryMiB:
			t.Fatalf("memory %d over %d", req.MemoryMiB, lim.MaxMemoryMiB)
		case req.ComputePercent < 0 || req.ComputePercent > 100:
			t.Fatalf("compute %d", req.ComputePercent)
		}
		seen := map[string]bool{}
		for _, id := range reserved {
			if seen[id] || !validID(id) {
				t.Fatalf("reserved %v", reserved)
			}
			seen[id] = true
		}
		// share.Choose agrees it is well formed: any error is ErrNoFit.
		if _, err := share.Choose(nil, func(share.Share) bool { return true }, req); !errors.Is(err, share.ErrNoFit) {
			t.Fatalf("%+v: Choose finds it malformed: %v", req, err)
		}
	})
}
