package share_test

import (
	"strings"
	"testing"

	"github.com/gpumux/gpumux/share"
)

const simUUID = "GPU-5f3c1e2a-0b4d-4c6e-8f90-a1b2c3d4e5f6"

// idCases are share IDs ParseID accepts (err == "") or refuses (with err
// in its error).
var idCases = []struct {
	id   string
	want share.ID
	err  string
}{
	{id: simUUID, want: share.ID{Device: simUUID}},
	{id: "MIG-7a0c3e11-2b5d-5e7f-9a01-b2c3d4e5f6a7", want: share.ID{Device: "MIG-7a0c3e11-2b5d-5e7f-9a01-b2c3d4e5f6a7"}},
	{id: "GPU-t4", want: share.ID{Device: "GPU-t4"}},
	{id: "GPU-" + strings.Repeat("A", 64), want: share.ID{Device: "GPU-" + strings.Repeat("A", 64)}},
	{id: simUUID + "/timeslice/0", want: share.ID{Device: simUUID, Kind: share.TimeSlice, N: 0}},
	{id: simUUID + "/mps/47", want: share.ID{Device: simUUID, Kind: share.MPS, N: 47}},
	{id: "MIG-x/mps/3", want: share.ID{Device: "MIG-x", Kind: share.MPS, N: 3}},
	{id: "GPU-r5-1/remote/999", want: share.ID{Device: "GPU-r5-1", Kind: share.Remote, N: 999}},

	{id: "", err: `is not a GPU-… or MIG-… UUID`},
	{id: "GPU-", err: "want 1 to 64 characters after the prefix"},
	{id: "MIG-", err: "want 1 to 64 characters after the prefix"},
	{id: "GPU-" + strings.Repeat("a", 65), err: "want 1 to 64 characters after the prefix"},
	{id: "gpu-abc", err: "is not a GPU-… or MIG-… UUID"},
	{id: "abc", err: "is not a GPU-… or MIG-… UUID"},
	{id: "GPU-a b", err: `' ' is not allowed in a UUID`},
	{id: "GPU-a_b", err: `'_' is not allowed in a UUID`},
	{id: "GPU-a.b/mps/0", err: `'.' is not allowed in a UUID`},
	{id: "GPU-\xff", err: "is not allowed in a UUID"},
	{id: "/mps/0", err: "is not a GPU-… or MIG-… UUID"},
	{id: "GPU-a/", err: `"" is not a kind of share (valid: timeslice, mps, remote)`},
	{id: "GPU-a/mps", err: `share ID "GPU-a/mps": `}, // no index
	{id: "GPU-a//0", err: `"" is not a kind of share`},
	{id: "GPU-a/exclusive/0", err: `"exclusive" is not a kind of share`},
	{id: "GPU-a/mig/0", err: `"mig" is not a kind of share`},
	{id: "GPU-a/MPS/0", err: `"MPS" is not a kind of share`},
	{id: "GPU-a/mps/", err: `"" is not a share index (0 to 999)`},
	{id: "GPU-a/mps/01", err: `"01" is not a share index`},
	{id: "GPU-a/mps/+1", err: `"+1" is not a share index`},
	{id: "GPU-a/mps/-1", err: `"-1" is not a share index`},
	{id: "GPU-a/mps/-0", err: `"-0" is not a share index`},
	{id: "GPU-a/mps/1000", err: `"1000" is not a share index`},
	{id: "GPU-a/mps/1/2", err: `"1/2" is not a share index`},
	{id: "GPU-a/mps/ 1", err: `" 1" is not a share index`},
}

func TestParseID(t *testing.T) {
	for _, tc := range idCases {
		got, err := share.ParseID(tc.id)
		if tc.err != "" {
			if err == nil {
				t.Errorf("ParseID(%q) = %+v, want an error containing %q", tc.id, got, tc.err)
			} else if !strings.Contains(err.Error(), tc.err) || !strings.HasPrefix(err.Error(), "share ID ") {
				t.Errorf("ParseID(%q): %v, want an error containing %q", tc.id, err, tc.err)
			}
			if share.IsRemoteID(tc.id) {
				t.Errorf("IsRemoteID(%q) of an invalid ID", tc.id)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseID(%q) = %+v, %v; want %+v", tc.id, got, err, tc.want)
			continue
		}
		if s := got.String(); s != tc.id {
			t.Errorf("ParseID(%q).String() = %q", tc.id, s)
		}
		if d := share.DeviceOf(tc.id); d != tc.want.Device {
			t.Errorf("DeviceOf(%q) = %q, want %q", tc.id, d, tc.want.Device)
		}
		if r := share.IsRemoteID(tc.id); r != (tc.want.Kind == share.Remote) {
			t.Errorf("IsRemoteID(%q) = %v", tc.id, r)
		}
	}
}

func TestParseIDClipsLongIDs(t *testing.T) {
	long := "GPU-" + strings.Repeat("z", 500)
	_, err := share.ParseID(long)
	if err == nil || strings.Contains(err.Error(), long) || !strings.Contains(err.Error(), "…") {
		t.Errorf("ParseID of a 504-byte ID: %v; want the ID clipped", err)
	}
}

func TestSubID(t *testing.T) {
	for _, tc := range []struct {
		device string
		kind   share.Mechanism
		n      int
		want   string
	}{
		{simUUID, share.TimeSlice, 3, simUUID + "/timeslice/3"},
		{"MIG-x", share.MPS, 0, "MIG-x/mps/0"},
		{"GPU-r", share.Remote, 47, "GPU-r/remote/47"},
		{"GPU-a", "", 5, "GPU-a"}, // a whole device
	} {
		id := share.SubID(tc.device, tc.kind, tc.n)
		if id != tc.want {
			t.Errorf("SubID(%q, %q, %d) = %q, want %q", tc.device, tc.kind, tc.n, id, tc.want)
			continue
		}
		parsed, err := share.ParseID(id)
		want := share.ID{Device: tc.device, Kind: tc.kind, N: tc.n}
		if tc.kind == "" {
			want.N = 0
		}
		if err != nil || parsed != want {
			t.Errorf("ParseID(SubID(%q, %q, %d)) = %+v, %v; want %+v", tc.device, tc.kind, tc.n, parsed, err, want)
		}
		if share.DeviceOf(id) != tc.device {
			t.Errorf("DeviceOf(%q) = %q, want %q", id, share.DeviceOf(id), tc.device)
		}
	}
}

func TestDeviceOf(t *testing.T) {
	// DeviceOf does not validate: it is the part before the first "/".
	for id, want := range map[string]string{
		"GPU-a":            "GPU-a",
		"GPU-a/mps/1":      "GPU-a",
		"MIG-b/timeslice/": "MIG-b",
		"":                 "",
		"/x":               "",
		"junk/a/b/c":       "junk",
	} {
		if got := share.DeviceOf(id); got != want {
			t.Errorf("DeviceOf(%q) = %q, want %q", id, got, want)
		}
	}
}

// FuzzParseID: whatever ParseID accepts writes back as itself, parses to
// the same ID, and agrees with DeviceOf, SubID and IsRemoteID.
func FuzzParseID(f *testing.F) {
	for _, tc := range idCases {
		f.Add(tc.id)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := share.ParseID(s)
		if err != nil {
			if share.IsRemoteID(s) {
				t.Fatalf("IsRemoteID(%q) of an ID ParseID refuses: %v", s, err)
			}
			return
		}
		if got := id.String(); got != s {
			t.Fatalf("ParseID(%q).String() = %q", s, got)
		}
		again, err := share.ParseID(id.String())
		if err != nil || again != id {
			t.Fatalf("ParseID(%q) = %+v, but ParseID of its String() = %+v, %v", s, id, again, err)
		}
		if d := share.DeviceOf(s); d != id.Device {
			t.Fatalf("DeviceOf(%q) = %q, ParseID's device %q", s, d, id.Device)
		}
		if id.Kind != "" && share.SubID(id.Device, id.Kind, id.N) != s {
			t.Fatalf("SubID(%+v) = %q, want %q", id, share.SubID(id.Device, id.Kind, id.N), s)
		}
		if share.IsRemoteID(s) != (id.Kind == share.Remote) {
			t.Fatalf("IsRemoteID(%q) = %v, kind %q", s, share.IsRemoteID(s), id.Kind)
		}
		if id.N < 0 || id.N > 999 || strings.Count(s, "/") > 2 {
			t.Fatalf("ParseID(%q) accepted %+v", s, id)
		}
	})
}
