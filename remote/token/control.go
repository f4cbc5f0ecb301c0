package token

import (
	"crypto/hmac"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"strings"
	"time"
)

// Control tokens. Servers of a pool hand each other migrated sessions,
// and the operator asks a server to move sessions (gpumux remote
// migrate), over control connections. A control token proves that its
// holder has the pool's secret: it grants no GPU and names no
// reservation, and its own format prefix keeps it from being taken for a
// client's token (and a client's from being taken for it). It carries only
// its expiry: mint one per request, for a short while.

const prefixControl = "gmxc."

// controlBody is what a control token says besides its expiry.
const controlBody = "control"

// MintControl signs a control token valid until expires.
func MintControl(secret []byte, expires time.Time) (string, error) {
	if len(secret) < MinSecret {
		return "", fmt.Errorf("token secret: %d bytes, want at least %d", len(secret), MinSecret)
	}
	body := binary.BigEndian.AppendUint64(nil, uint64(expires.Unix()))
	body = append(body, controlBody...)
	enc := base64.RawURLEncoding
	return prefixControl + enc.EncodeToString(body) + "." + enc.EncodeToString(sign(prefixControl, secret, body)), nil
}

// CheckControl verifies a control token against secret at time now.
func CheckControl(secret []byte, tok string, now time.Time) error {
	rest, ok := strings.CutPrefix(tok, prefixControl)
	if !ok {
		return fmt.Errorf("%w: not a control token", ErrInvalid)
	}
	b64, s64, ok := strings.Cut(rest, ".")
	if !ok {
		return fmt.Errorf("%w: no signature", ErrInvalid)
	}
	enc := base64.RawURLEncoding.Strict()
	body, err1 := enc.DecodeString(b64)
	sig, err2 := enc.DecodeString(s64)
	if err1 != nil || err2 != nil || len(body) != 8+len(controlBody) || string(body[8:]) != controlBody {
		return fmt.Errorf("%w: malformed", ErrInvalid)
	}
	if !hmac.Equal(sig, sign(prefixControl, secret, body)) {
		return fmt.Errorf("%w: bad signature", ErrInvalid)
	}
	if exp := time.Unix(int64(binary.BigEndian.Uint64(body)), 0); !now.Before(exp) {
		return fmt.Errorf("%w: at %s", ErrExpired, exp.UTC().Format(time.RFC3339))
	}
	return nil
}
