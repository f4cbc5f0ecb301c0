package token

import (
	"errors"
	"testing"
	"time"
)

func TestControlToken(t *testing.T) {
	secret := []byte("0123456789abcdef0123")
	now := time.Unix(1_700_000_000, 0)
	good, err := MintControl(secret, now.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	client, err := Mint(secret, Claims{ID: "job", Expires: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		secret []byte
		tok    string
		at     time.Time
		want   error
	}{
		{"good", secret, good, now, nil},
		{"expired", secret, good, now.Add(time.Minute), ErrExpired},
		{"other secret", []byte("fedcba9876543210fedc"), good, now, ErrInvalid},
		{"a client token", secret, client, now, ErrInvalid},
		{"tampered", secret, good[:len(good)-2] + "AA", now, ErrInvalid},
		{"no signature", secret, "gmxc.AAAA", now, ErrInvalid},
	} {
		err := CheckControl(tc.secret, tc.tok, tc.at)
		if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if _, err := Check(secret, good, now); !errors.Is(err, ErrInvalid) {
		t.Errorf("a control token passed as a client's: %v", err)
	}
	if _, err := MintControl([]byte("short"), now); err == nil {
		t.Error("minted with a short secret")
	}
}
