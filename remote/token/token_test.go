package token

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
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
	if !reflect.DeepEqual(got, claims) {
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

// TestMintCheckDevices: a token of several GPUs (format gmx2) gives back
// its GPUs in order; one of a single GPU keeps format gmx1; a multi-GPU
// token cannot be turned into a single-GPU one or have its GPUs changed.
func TestMintCheckDevices(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	for _, tc := range []struct {
		name       string
		c          Claims
		wantPrefix string
		want       []int
	}{
		{"one", Claims{ID: "j", Quota: 1 << 30, Device: 5, Expires: now.Add(time.Hour)}, prefix, []int{5}},
		{"two", Claims{ID: "j", Quota: 1 << 30, Device: 1, MoreDevices: []int{0}, Expires: now.Add(time.Hour)}, prefixMulti, []int{1, 0}},
		{"most", Claims{ID: "j", Device: 100, MoreDevices: manyDevices(MaxDevices - 1), Expires: now.Add(time.Hour)}, prefixMulti,
			append([]int{100}, manyDevices(MaxDevices-1)...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok, err := Mint(secret, tc.c)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(tok, tc.wantPrefix) {
				t.Errorf("token %s: want the prefix %s", tok, tc.wantPrefix)
			}
			got, err := Check(secret, tok, now)
			if err != nil {
				t.Fatalf("Check: %v", err)
			}
			if !reflect.DeepEqual(got, tc.c) || !slices.Equal(got.Devices(), tc.want) {
				t.Fatalf("claims %+v (devices %v), want %+v (devices %v)", got, got.Devices(), tc.c, tc.want)
			}
			// The format is signed: the same body under the other
			// prefix is refused.
			other := prefix
			if tc.wantPrefix == prefix {
				other = prefixMulti
			}
			if _, err := Check(secret, other+strings.TrimPrefix(tok, tc.wantPrefix), now); !errors.Is(err, ErrInvalid) {
				t.Errorf("the token under prefix %s: %v, want ErrInvalid", other, err)
			}
		})
	}
}

func manyDevices(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
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
		{"more device", secret, Claims{ID: "a", MoreDevices: []int{1, -1}, Expires: exp}, "device -1"},
		{"device twice", secret, Claims{ID: "a", Device: 2, MoreDevices: []int{1, 2}, Expires: exp}, "device 2: named twice"},
		{"too many devices", secret, Claims{ID: "a", MoreDevices: manyDevices(MaxDevices), Expires: exp}, "at most 64"},
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
