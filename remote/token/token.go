package token

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// prefix names the token format of one GPU; prefixMulti that of several
// (a server that knows only the first refuses the second).
const (
	prefix      = "gmx1."
	prefixMulti = "gmx2."
)

// MaxDevices is the most GPUs one token grants.
const MaxDevices = 64

// MinSecret is the shortest secret accepted, in bytes.
const MinSecret = 16

var (
	// ErrInvalid means the token is malformed or its signature is wrong.
	ErrInvalid = errors.New("invalid token")
	// ErrExpired means the token was valid but is past its expiry.
	ErrExpired = errors.New("token expired")
)

// Claims is what a token grants.
type Claims struct {
	// ID names the reservation. The connections presenting tokens with
	// the same ID share one pool of memory on the server, as large as the
	// largest of their quotas, within which each token's holders stay
	// within its own Quota (docs/remote.md).
	ID string
	// Quota is the device memory limit in bytes; 0 means no limit.
	Quota uint64
	// Device is the server's GPU index the share is on: the client's
	// device 0.
	Device int
	// MoreDevices are further GPUs of the server the token grants, the
	// client's devices 1, 2, … in this order (none: Device alone). The
	// quota covers the memory of all of them together.
	MoreDevices []int
	// Expires is when the token stops being accepted.
	Expires time.Time
}

// Devices returns the server GPUs the token grants, in the client's
// order: Device, then MoreDevices.
func (c Claims) Devices() []int {
	return append([]int{c.Device}, c.MoreDevices...)
}

// Mint signs claims with secret. A token of one GPU has the format gmx1, a
// token of several gmx2.
func Mint(secret []byte, c Claims) (string, error) {
	if len(secret) < MinSecret {
		return "", fmt.Errorf("token secret: %d bytes, want at least %d", len(secret), MinSecret)
	}
	if c.ID == "" || len(c.ID) > 255 || strings.ContainsAny(c.ID, ".\x00") {
		return "", fmt.Errorf("token id %q: want 1 to 255 bytes without '.'", c.ID)
	}
	devs := c.Devices()
	if err := checkDevices(devs); err != nil {
		return "", err
	}
	body := make([]byte, 0, 32+2*len(devs)+len(c.ID))
	body = binary.BigEndian.AppendUint64(body, c.Quota)
	p := prefix
	if len(devs) == 1 {
		body = binary.BigEndian.AppendUint16(body, uint16(c.Device))
		body = binary.BigEndian.AppendUint64(body, uint64(c.Expires.Unix()))
	} else {
		p = prefixMulti
		body = binary.BigEndian.AppendUint64(body, uint64(c.Expires.Unix()))
		body = append(body, byte(len(devs)))
		for _, d := range devs {
			body = binary.BigEndian.AppendUint16(body, uint16(d))
		}
	}
	body = append(body, c.ID...)
	enc := base64.RawURLEncoding
	return p + enc.EncodeToString(body) + "." + enc.EncodeToString(sign(p, secret, body)), nil
}

// checkDevices checks a token's GPUs: 1 to MaxDevices distinct indexes of
// 0 to 65535.
func checkDevices(devs []int) error {
	if len(devs) > MaxDevices {
		return fmt.Errorf("token devices: %d, want at most %d", len(devs), MaxDevices)
	}
	seen := map[int]bool{}
	for _, d := range devs {
		if d < 0 || d > 0xffff {
			return fmt.Errorf("token device %d: want 0 to 65535", d)
		}
		if seen[d] {
			return fmt.Errorf("token device %d: named twice", d)
		}
		seen[d] = true
	}
	return nil
}

// Check verifies a token against secret at time now and returns its claims.
func Check(secret []byte, tok string, now time.Time) (Claims, error) {
	p := prefix
	rest, ok := strings.CutPrefix(tok, prefix)
	if !ok {
		p = prefixMulti
		rest, ok = strings.CutPrefix(tok, prefixMulti)
	}
	if !ok {
		return Claims{}, fmt.Errorf("%w: does not start with %q or %q", ErrInvalid, prefix, prefixMulti)
	}
	b64, s64, ok := strings.Cut(rest, ".")
	if !ok {
		return Claims{}, fmt.Errorf("%w: no signature", ErrInvalid)
	}
	enc := base64.RawURLEncoding.Strict()
	body, err1 := enc.DecodeString(b64)
	sig, err2 := enc.DecodeString(s64)
	if err1 != nil || err2 != nil || len(body) < 19 {
		return Claims{}, fmt.Errorf("%w: malformed", ErrInvalid)
	}
	if !hmac.Equal(sig, sign(p, secret, body)) {
		return Claims{}, fmt.Errorf("%w: bad signature", ErrInvalid)
	}
	c := Claims{Quota: binary.BigEndian.Uint64(body[0:])}
	if p == prefix {
		c.Device = int(binary.BigEndian.Uint16(body[8:]))
		c.Expires = time.Unix(int64(binary.BigEndian.Uint64(body[10:])), 0)
		c.ID = string(body[18:])
	} else {
		c.Expires = time.Unix(int64(binary.BigEndian.Uint64(body[8:])), 0)
		n := int(body[16])
		if n < 2 || len(body) < 17+2*n+1 {
			return Claims{}, fmt.Errorf("%w: malformed", ErrInvalid)
		}
		devs := make([]int, n)
		for i := range devs {
			devs[i] = int(binary.BigEndian.Uint16(body[17+2*i:]))
		}
		if err := checkDevices(devs); err != nil {
			return Claims{}, fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		c.Device, c.MoreDevices = devs[0], devs[1:]
		c.ID = string(body[17+2*n:])
	}
	if !now.Before(c.Expires) {
		return c, fmt.Errorf("%w: at %s", ErrExpired, c.Expires.UTC().Format(time.RFC3339))
	}
	return c, nil
}

// sign is the HMAC of a token's format prefix p and body.
func sign(p string, secret, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(p))
	m.Write(body)
	return m.Sum(nil)
}

// ReadSecret reads a pool secret file: its bytes, surrounding whitespace
// trimmed. A file readable by others is refused.
func ReadSecret(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("token secret: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("token secret %s: mode %v lets others read it; chmod 600 it", path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("token secret: %w", err)
	}
	s := []byte(strings.TrimSpace(string(b)))
	if len(s) < MinSecret {
		return nil, fmt.Errorf("token secret %s: %d bytes, want at least %d", path, len(s), MinSecret)
	}
	return s, nil
}

// NewSecret returns a random secret, hex-encoded, for a new pool.
func NewSecret() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return fmt.Sprintf("%x", b), nil
}
