package share_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gpumux/gpumux/share"
)

func TestLayoutErrors(t *testing.T) {
	node := testNode(t)
	tests := []struct {
		name  string
		rules []share.GPURule
		want  []string // substrings of the error; none means valid
	}{
		{"default is exclusive", nil, nil},
		{"timeslice", []share.GPURule{{Match: "0-3", Mechanism: share.TimeSlice, Replicas: 4}}, nil},
		{"mig by uuid list", []share.GPURule{{Match: node.GPUs[6].UUID, Mechanism: share.MIG, MIGDevices: map[string]int{"1g.18gb": 7}}}, nil},
		{"model glob", []share.GPURule{{Match: "*H200*", Mechanism: share.TimeSlice, Replicas: 2}}, nil},
		{"glob that matches nothing is fine", []share.GPURule{{Match: "*A100*", Mechanism: share.TimeSlice, Replicas: 2}}, nil},
		{"replicas 1", []share.GPURule{{Match: "0", Mechanism: share.TimeSlice, Replicas: 1}},
			[]string{`gpu block 1 (match = "0"): replicas = 1: `, `mechanism = "exclusive"`}},
		{"replicas too many", []share.GPURule{{Match: "0", Mechanism: share.TimeSlice, Replicas: 49}}, []string{"replicas = 49", "2 to 48"}},
		{"replicas on exclusive", []share.GPURule{{Match: "0", Mechanism: share.Exclusive, Replicas: 2}}, []string{"replicas applies only to", `"exclusive"`}},
		{"unknown mechanism", []share.GPURule{{Match: "0", Mechanism: "fractional"}}, []string{"mechanism", `"fractional"`, "valid: exclusive, mig, mps, timeslice, remote"}},
		{"mechanism of a later issue", []share.GPURule{{Match: "0", Mechanism: share.Remote}}, []string{`"remote" is not available`}},
		{"mps equal shares", []share.GPURule{{Match: "4,5", Mechanism: share.MPS, Shares: 4}}, nil},
		{"mps sizes", []share.GPURule{{Match: "4", Mechanism: share.MPS, ShareSizes: []string{"50%", "25%", "25%"}}}, nil},
		{"mps without shares", []share.GPURule{{Match: "4", Mechanism: share.MPS}}, []string{"shares: an mps GPU needs shares = N"}},
		{"mps both", []share.GPURule{{Match: "4", Mechanism: share.MPS, Shares: 2, ShareSizes: []string{"50%"}}}, []string{"not both"}},
		{"mps too many", []share.GPURule{{Match: "4", Mechanism: share.MPS, Shares: 49}}, []string{"shares = 49", "1 to 48 clients"}},
		{"mps sizes over 100", []share.GPURule{{Match: "4", Mechanism: share.MPS, ShareSizes: []string{"50%", "50%", "25%"}}}, []string{"add up to 125%; at most 100%"}},
		{"mps zero size", []share.GPURule{{Match: "4", Mechanism: share.MPS, ShareSizes: []string{"0%", "50%"}}}, []string{`"0%": want a percentage from 1% to 100%`}},
		{"mps size not a percentage", []share.GPURule{{Match: "4", Mechanism: share.MPS, ShareSizes: []string{"16GiB"}}}, []string{`"16GiB": want a percentage`}},
		{"shares on timeslice", []share.GPURule{{Match: "4", Mechanism: share.TimeSlice, Replicas: 2, Shares: 2}}, []string{"shares = 2: applies only to mechanism = \"mps\""}},
		{"bad index range", []share.GPURule{{Match: "3-1", Mechanism: share.Exclusive}}, []string{"match", `"3-1"`}},
		{"huge index", []share.GPURule{{Match: "9223372036854775807", Mechanism: share.Exclusive}}, []string{"0 to 1023"}},
		{"huge range end", []share.GPURule{{Match: "0-9223372036854775807", Mechanism: share.Exclusive}}, []string{"indexes 0 to 1023"}},
		{"index the node does not have", []share.GPURule{{Match: "0,42", Mechanism: share.Exclusive}},
			[]string{`gpu block 1 (match = "0,42"): match: GPU index 42 is out of range: this node has 9 GPUs, indexes 0-8`}},
		{"range past the node's GPUs", []share.GPURule{{Match: "8-10", Mechanism: share.Exclusive}},
			[]string{`match: GPU indexes 9-10 are out of range`}},
		{"bad glob", []share.GPURule{{Match: "[H200", Mechanism: share.Exclusive}}, []string{"not a valid model glob"}},
		{"uuid mixed with index", []share.GPURule{{Match: "GPU-x,3", Mechanism: share.Exclusive}}, []string{`"3" is not a GPU UUID`}},
		{"empty match", []share.GPURule{{Match: "", Mechanism: share.Exclusive}}, []string{"match: ", "empty"}},
		{"overlapping matches", []share.GPURule{
			{Match: "0-3", Mechanism: share.TimeSlice, Replicas: 4},
			{Match: "3,4", Mechanism: share.Exclusive},
		}, []string{`gpu block 2 (match = "3,4")`, "GPU 3", `also matched by gpu block 1 (match = "0-3")`}},
		{"mig without layout", []share.GPURule{{Match: "6", Mechanism: share.MIG}}, []string{"mig_devices", "empty"}},
		{"timeslice on a GPU in MIG mode splits its instances", []share.GPURule{{Match: "7", Mechanism: share.TimeSlice, Replicas: 2}}, nil},
		{"timeslice sizes", []share.GPURule{{Match: "0", Mechanism: share.TimeSlice, ReplicaSizes: []string{"50%", "25%", "25%"}, Limit: share.LimitShare}}, nil},
		{"timeslice sizes over 100", []share.GPURule{{Match: "0", Mechanism: share.TimeSlice, ReplicaSizes: []string{"60%", "50%"}}}, []string{"replica_sizes", "add up to 110%"}},
		{"timeslice replicas and sizes", []share.GPURule{{Match: "0", Mechanism: share.TimeSlice, Replicas: 2, ReplicaSizes: []string{"50%"}}}, []string{"replicas", "not both"}},
		{"timeslice bad limit", []share.GPURule{{Match: "0", Mechanism: share.TimeSlice, Replicas: 2, Limit: "hard"}}, []string{`limit = "hard"`, `"cap"`, `"share"`, `"off"`}},
		{"limit on mps", []share.GPURule{{Match: "4", Mechanism: share.MPS, Shares: 2, Limit: share.LimitCap}}, []string{`limit = "cap"`, "applies only to mechanism = \"timeslice\""}},
		{"replica sizes on exclusive", []share.GPURule{{Match: "0", Mechanism: share.Exclusive, ReplicaSizes: []string{"50%"}}}, []string{"replica_sizes", "applies only to"}},
		{"timeslice on MIG instances", []share.GPURule{{Match: "6", Mechanism: share.TimeSlice, Replicas: 2, MIGDevices: map[string]int{"3g.71gb": 2}}}, nil},
		{"mig layout on exclusive", []share.GPURule{{Match: "6", Mechanism: share.Exclusive, MIGDevices: map[string]int{"1g.18gb": 1}}}, []string{"mig_devices", "applies only to"}},
		{"mig on a GPU without MIG", []share.GPURule{{Match: "8", Mechanism: share.MIG, MIGDevices: map[string]int{"1g.5gb": 1}}}, []string{"GPU 8 (Tesla T4) has no MIG support"}},
		{"unknown profile", []share.GPURule{{Match: "6", Mechanism: share.MIG, MIGDevices: map[string]int{"3g.40gb": 1}}},
			[]string{`profile "3g.40gb" does not exist on GPU 6 (NVIDIA H200)`, "valid: 1g.18gb", "7g.141gb"}},
		{"too many of a profile", []share.GPURule{{Match: "6", Mechanism: share.MIG, MIGDevices: map[string]int{"2g.35gb": 4}}}, []string{"4× 2g.35gb: at most 3 fit on GPU 6"}},
		{"too many slots", []share.GPURule{{Match: "6", Mechanism: share.MIG, MIGDevices: map[string]int{"4g.71gb": 1, "3g.71gb": 2}}}, []string{"need 12 memory slots", "has 8"}},
		{"zero count", []share.GPURule{{Match: "6", Mechanism: share.MIG, MIGDevices: map[string]int{"1g.18gb": 0}}}, []string{`"1g.18gb" = 0`, "at least 1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := share.Layout{GPUs: tc.rules}
			_, err := l.Assign(node)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("want an error containing %q, got none", tc.want)
			}
			if !errors.Is(err, share.ErrInvalid) {
				t.Errorf("error does not wrap ErrInvalid: %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	l := share.Layout{GPUs: []share.GPURule{
		{Match: "0", Mechanism: share.TimeSlice, Replicas: 1},
		{Match: "1", Mechanism: "bogus"},
	}}
	err := l.Validate()
	var fe *share.FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("want a FieldError, got %v", err)
	}
	for _, w := range []string{"gpu block 1", "replicas", "gpu block 2", "bogus"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not name %q", err, w)
		}
	}
}

// TestAssignMIGModeGPU: a GPU in MIG mode that is exclusive (by default, or
// by a rule) is assigned to mig, to offer the instances it has; an mps GPU
// in MIG mode stays mps (its instances are split).
func TestAssignMIGModeGPU(t *testing.T) {
	node := testNode(t) // GPU 7 is in MIG mode
	for _, tc := range []struct {
		name  string
		rules []share.GPURule
		rule  int
		want  share.Mechanism
	}{
		{"unmatched", nil, -1, share.MIG},
		{"exclusive by a rule", []share.GPURule{{Match: "7", Mechanism: share.Exclusive}}, 0, share.MIG},
		{"mps on its instances", []share.GPURule{{Match: "7", Mechanism: share.MPS, Shares: 2}}, 0, share.MPS},
		{"timeslice splits its instances", []share.GPURule{{Match: "*H200*", Mechanism: share.TimeSlice, Replicas: 2}}, 0, share.TimeSlice},
	} {
		t.Run(tc.name, func(t *testing.T) {
			as, err := (&share.Layout{GPUs: tc.rules}).Assign(node)
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range as {
				switch {
				case a.GPUIndex == 7 && (a.Mechanism != tc.want || a.Rule != tc.rule):
					t.Errorf("GPU 7: %s by rule %d, want %s by rule %d", a.Mechanism, a.Rule, tc.want, tc.rule)
				case a.GPUIndex != 7 && a.Mechanism == share.MIG:
					t.Errorf("GPU %d is not in MIG mode but was assigned to mig", a.GPUIndex)
				}
			}
			if got := share.Assigned(node, as, tc.want); !containsGPU(got, 7) {
				t.Errorf("Assigned(%s) = %v, want GPU 7 among them", tc.want, got)
			}
		})
	}
}

func containsGPU(as []share.AssignedGPU, index int) bool {
	for _, a := range as {
		if a.GPU.Index == index && a.Assignment.GPUIndex == index {
			return true
		}
	}
	return false
}

// TestAssignTimeSliceLimits: a timeslice GPU's assignment carries each
// replica's percent of its device and the limit, "cap" unless the rule
// says otherwise; other mechanisms carry neither.
func TestAssignTimeSliceLimits(t *testing.T) {
	node := testNode(t)
	as, err := (&share.Layout{GPUs: []share.GPURule{
		{Match: "0", Mechanism: share.TimeSlice, Replicas: 4},
		{Match: "1", Mechanism: share.TimeSlice, ReplicaSizes: []string{"50%", "25%", "25%"}, Limit: share.LimitShare},
		{Match: "2", Mechanism: share.TimeSlice, Replicas: 3, Limit: share.LimitOff},
		{Match: "3", Mechanism: share.TimeSlice, ReplicaSizes: []string{" 60% ", "10%"}},
		{Match: "4", Mechanism: share.MPS, Shares: 2},
	}}).Assign(node)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]string{
		0: "timeslice [25 25 25 25] cap replicas 4",
		1: "timeslice [50 25 25] share replicas 0",
		2: "timeslice [33 33 33] off replicas 3",
		3: "timeslice [60 10] cap replicas 0",
		4: "mps [] \"\" replicas 0",
		5: "exclusive [] \"\" replicas 0",
	}
	for _, a := range as {
		w, ok := want[a.GPUIndex]
		if !ok {
			continue
		}
		limit := string(a.Limit)
		if limit == "" {
			limit = `""`
		}
		if got := fmt.Sprintf("%s %v %s replicas %d", a.Mechanism, a.ReplicaPercent, limit, a.Replicas); got != w {
			t.Errorf("GPU %d: %s, want %s", a.GPUIndex, got, w)
		}
	}
	if share.Limits[0] != share.LimitCap {
		t.Errorf("the default limit is %q, not Limits[0]", share.LimitCap)
	}
}
