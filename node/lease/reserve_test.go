package lease

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestReserveAndClaim(t *testing.T) {
	ctx := context.Background()
	s, err := Open(filepath.Join(t.TempDir(), "leases.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	token := "0123456789abcdef0123456789abcdef"
	shares := []string{"GPU-b", "GPU-a"}
	if err := s.Reserve(ctx, token, shares, time.Minute); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, container, token string
		shares                 []string
		want                   string // error substring; "" = claimed
	}{
		{"wrong token", "c1", "ffffffffffffffffffffffffffffffff", shares, "unknown to this node"},
		{"other shares", "c1", token, []string{"GPU-a"}, "not [GPU-a]"},
		{"claimed", "c1", token, []string{"GPU-a", "GPU-b"}, ""},
		{"token used twice", "c2", token, shares, "used already"},
	}
	for _, tc := range tests {
		ids, err := s.Claim(ctx, tc.container, tc.token, tc.shares)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want == "" && strings.Join(ids, ",") != "GPU-a,GPU-b":
			t.Errorf("%s: claimed %v", tc.name, ids)
		case tc.want != "" && (!errors.Is(err, ErrNoReservation) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want ErrNoReservation containing %q", tc.name, err, tc.want)
		}
	}
	if l, _ := s.Leases(ctx); l["GPU-a"] != "c1" || l["GPU-b"] != "c1" {
		t.Errorf("leases %v", l)
	}

	// An expired reservation cannot be claimed, and the next Reserve drops it.
	s.now = func() time.Time { return time.Now().Add(-2 * time.Minute) }
	old := "expired-token-0123456789"
	if err := s.Reserve(ctx, old, []string{"GPU-c"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	s.now = time.Now
	if _, err := s.Claim(ctx, "c3", old, []string{"GPU-c"}); !errors.Is(err, ErrNoReservation) || !strings.Contains(err.Error(), "expired") {
		t.Errorf("claiming an expired reservation: %v", err)
	}
	// A share leased to another container cannot be claimed.
	if err := s.Reserve(ctx, "another-token-0123456789", []string{"GPU-a"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, "c4", "another-token-0123456789", []string{"GPU-a"}); err == nil || !strings.Contains(err.Error(), "c1 holds it") {
		t.Errorf("claiming a share c1 holds: %v", err)
	}
}
