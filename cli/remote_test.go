package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumux/gpumux/internal/quantity"
	"github.com/gpumux/gpumux/remote/token"
)

func TestRemoteSecretAndToken(t *testing.T) {
	ctx := context.Background()
	var out, errb bytes.Buffer
	if code := Run(ctx, []string{"remote", "secret"}, &out, &errb); code != ExitOK {
		t.Fatalf("remote secret: exit %d: %s", code, errb.String())
	}
	secret := strings.TrimSpace(out.String())
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "pool.key")
	if err := os.WriteFile(keyFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	args := []string{"remote", "token", "--secret-file", keyFile, "--id", "job-1", "--quota", "16Gi", "--device", "2", "--ttl", "1h"}
	if code := Run(ctx, args, &out, &errb); code != ExitOK {
		t.Fatalf("remote token: exit %d: %s", code, errb.String())
	}
	c, err := token.Check([]byte(secret), strings.TrimSpace(out.String()), time.Now())
	if err != nil {
		t.Fatalf("the printed token does not check: %v", err)
	}
	if c.ID != "job-1" || c.Quota != 16<<30 || c.Device != 2 || time.Until(c.Expires) > time.Hour {
		t.Fatalf("claims %+v", c)
	}

	out.Reset()
	args = []string{"remote", "token", "--secret-file", keyFile, "--id", "job-2", "--device", "1,0"}
	if code := Run(ctx, args, &out, &errb); code != ExitOK {
		t.Fatalf("remote token of two GPUs: exit %d: %s", code, errb.String())
	}
	c, err = token.Check([]byte(secret), strings.TrimSpace(out.String()), time.Now())
	if err != nil || !slices.Equal(c.Devices(), []int{1, 0}) {
		t.Fatalf("a token of two GPUs: claims %+v, %v; want GPUs [1 0]", c, err)
	}

	open := filepath.Join(dir, "open.key")
	os.WriteFile(open, []byte(secret), 0o644)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"remote", "token"}, ExitUsage, "--secret-file is required"},
		{[]string{"remote", "token", "--secret-file", keyFile, "--quota", "16G"}, ExitUsage, `--quota "16G": unit "G" is ambiguous (want ` + quantity.Rule + ")"},
		{[]string{"remote", "token", "--secret-file", keyFile, "--quota", "1536Ki"}, ExitUsage, `--quota "1536Ki": not a whole number of MiB`},
		{[]string{"remote", "token", "--secret-file", keyFile, "--quota", "0Gi"}, ExitUsage, `--quota "0Gi": must be at least 1Mi (leave --quota out for no limit)`},
		{[]string{"remote", "token", "--secret-file", keyFile, "--ttl", "-1s"}, ExitUsage, "want a positive duration"},
		{[]string{"remote", "token", "--secret-file", keyFile, "--id", "a.b"}, ExitUsage, "without '.'"},
		{[]string{"remote", "token", "--secret-file", open}, ExitError, "chmod 600"},
		{[]string{"remote", "token", "--secret-file", keyFile, "--device", "0,x"}, ExitUsage, `--device "0,x": want GPU indexes`},
		{[]string{"remote", "token", "--secret-file", keyFile, "--device", "1,1"}, ExitUsage, "device 1: named twice"},
		{[]string{"remote", "bogus"}, ExitUsage, `unknown command "bogus"`},
	} {
		var o, e bytes.Buffer
		if code := Run(ctx, tc.args, &o, &e); code != tc.code || !strings.Contains(e.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", tc.args, code, e.String(), tc.code, tc.want)
		}
	}
}
