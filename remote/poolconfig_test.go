package remote_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumux/gpumux/nodeconfig"
	"github.com/gpumux/gpumux/remote"
	"github.com/gpumux/gpumux/remote/pool/pooltest"
)

func TestPoolConfig(t *testing.T) {
	secret := pooltest.Secret
	dir := t.TempDir()
	key := filepath.Join(dir, "remote.key")
	nomadTok := filepath.Join(dir, "nomad.token")
	os.WriteFile(key, append(secret, '\n'), 0o600)
	os.WriteFile(nomadTok, []byte(" acl-token \n"), 0o600)
	r := &nodeconfig.Remote{Servers: []string{"10.0.0.5:7070"}, Discover: true, Service: "gpumux-remote", NomadAddr: "http://127.0.0.1:4646",
		NomadNamespace: "gpu", NomadTokenFile: nomadTok, TokenFile: key}
	cfg, err := remote.PoolConfig(r)
	if err != nil {
		t.Fatal(err)
	}
	if string(cfg.Secret) != string(secret) || cfg.NomadToken != "acl-token" || cfg.Namespace != "gpu" || !cfg.Discover || len(cfg.Servers) != 1 {
		t.Errorf("config %+v", cfg)
	}
	os.Chmod(key, 0o644)
	if _, err := remote.PoolConfig(r); err == nil || !strings.Contains(err.Error(), "remote block: token_file: ") || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a secret others can read: %v", err)
	}
	r.TokenFile = filepath.Join(dir, "missing")
	if _, err := remote.PoolConfig(r); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing secret: %v", err)
	}
}
