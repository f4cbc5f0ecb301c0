package token

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var secret = []byte("0123456789abcdef0123456789abcdef")

func TestMintCheck(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	claims := Claims{ID: "alloc-1/0", Quota: 16 << 30, Device: 3, Expires: now.Add(time.Hour)}
	tok, err := Mint(secret, claims)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Check(secret, tok, now)
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	if got != claims {
		t.Fatalf("claims %+v, want %+v", got, claims)
	}

	tampered := func(f func(string) string) string { return f(tok) }
	body, sig, _ := strings.Cut(strings.TrimPrefix(tok, prefix), ".")
	for _, tc := range []struct {
		name    string
		secret  []byte
		tok     string
		at      time.Time
		wantErr error
	}{
		{"other secret", []byte("another secret of sixteen+ bytes"), tok, now, ErrInvalid},
		{"expired", secret, tok, now.Add(2 * time.Hour), ErrExpired},
		{"at expiry", secret, tok, claims.Expires, ErrExpired},
		{"no prefix", secret, strings.TrimPrefix(tok, prefix), now, ErrInvalid},
		{"no signature", secret, prefix + body, now, ErrInvalid},
		{"bad base64", secret, prefix + body + ".!!", now, ErrInvalid},
		{"short body", secret, prefix + "AAAA." + sig, now, ErrInvalid},
		{"body swapped", secret, tampered(func(s string) string {
			other, _ := Mint(secret, Claims{ID: "x", Quota: 1 << 40, Expires: now.Add(time.Hour)})
			ob, _, _ := strings.Cut(strings.TrimPrefix(other, prefix), ".")
			return prefix + ob + "." + sig
		}), now, ErrInvalid},
		{"empty", secret, "", now, ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Check(tc.secret, tc.tok, tc.at)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Check: %v, want %v", err, tc.wantErr)
			}
		})
	}
}

func TestMintRefuses(t *testing.T) {
	exp := time.Now().Add(time.Hour)
	for _, tc := range []struct {
		name   string
		secret []byte
		c      Claims
		want   string
	}{
		{"short secret", []byte("short"), Claims{ID: "a", Expires: exp}, "at least 16"},
		{"no id", secret, Claims{Expires: exp}, "token id"},
		{"dot in id", secret, Claims{ID: "a.b", Expires: exp}, "without '.'"},
		{"long id", secret, Claims{ID: strings.Repeat("x", 256), Expires: exp}, "1 to 255"},
		{"device", secret, Claims{ID: "a", Device: 70000, Expires: exp}, "device 70000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Mint(tc.secret, tc.c)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Mint: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestReadSecret(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good", "  "+string(secret)+"\n", 0o600)
	got, err := ReadSecret(good)
	if err != nil || string(got) != string(secret) {
		t.Fatalf("ReadSecret = %q, %v", got, err)
	}
	for _, tc := range []struct{ path, want string }{
		{write("open", string(secret), 0o644), "chmod 600"},
		{write("short", "abc", 0o600), "at least 16"},
		{filepath.Join(dir, "missing"), "no such file"},
	} {
		if _, err := ReadSecret(tc.path); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ReadSecret(%s): %v, want %q", filepath.Base(tc.path), err, tc.want)
		}
	}
	s, err := NewSecret()
	if err != nil || len(s) != 64 {
		t.Fatalf("NewSecret = %q, %v", s, err)
	}
}

// FuzzCheck: no input panics, and only a minted token passes.
func FuzzCheck(f *testing.F) {
	now := time.Unix(1_800_000_000, 0)
	tok, _ := Mint(secret, Claims{ID: "seed", Quota: 1, Expires: now.Add(time.Hour)})
	f.Add(tok)
	f.Add(prefix + "AAAAAAAAAAAAAAAAAAAAAAAAAAAA.AAAA")
	f.Add("gmx1..")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := Check(secret, s, now)
		if err != nil {
			return
		}
		again, merr := Mint(secret, c)
		if merr != nil || again != s {
			t.Fatalf("%q passed Check but is not what Mint makes of its claims (%q, %v)", s, again, merr)
		}
	})
}
