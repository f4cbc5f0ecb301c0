package nodeconfig_test

import (
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpumux/gpumux/internal/nomadconf"
	"github.com/gpumux/gpumux/nodeconfig"
)

// nomadDecode decodes a config body the way a Nomad agent hands it to the
// plugin: HCL1, Nomad's own hclutils through the schema, msgpack, Decode.
func nomadDecode(t *testing.T, src string) (*nodeconfig.Config, error) {
	t.Helper()
	b, err := nomadconf.Encode(src)
	if err != nil {
		return nil, err
	}
	return nodeconfig.Decode(b)
}

func TestRemoteBlock(t *testing.T) {
	src := `
remote {
  servers        = ["10.0.0.5:7070", "unix:/run/gpumux-remoted.sock", "[fd00::5]:7070"]
  discover       = true
  token_file     = "/etc/gpumux/remote.key"
}
`
	want := &nodeconfig.Remote{
		Servers:        []string{"10.0.0.5:7070", "unix:/run/gpumux-remoted.sock", "[fd00::5]:7070"},
		Discover:       true,
		Service:        "gpumux-remote",
		NomadAddr:      "http://127.0.0.1:4646",
		NomadNamespace: "default",
		TokenFile:      "/etc/gpumux/remote.key",
		TokenTTL:       "720h",
		Shares:         4,
		InterposerDir:  "/usr/lib/gpumux/remote",
	}
	parsed, err := nodeconfig.ParseConfig([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	fromNomad, err := nomadDecode(t, src)
	if err != nil {
		t.Fatal(err)
	}
	for name, cfg := range map[string]*nodeconfig.Config{"ParseConfig": parsed, "Nomad's decoding": fromNomad} {
		got := *cfg.Remote
		if got.TTL() != 720*time.Hour {
			t.Errorf("%s: TTL %v", name, got.TTL())
		}
		w := *want
		// The parsed TTL is unexported; compare the rest.
		if !reflect.DeepEqual(stripTTL(got), stripTTL(w)) {
			t.Errorf("%s:\n got %+v\nwant %+v", name, got, w)
		}
	}

	// Everything set, in agent config form.
	full := `plugin "nomad-device-gpumux" {
  config {
    remote {
      discover         = true
      service          = "gpus-eu"
      nomad_addr       = "https://nomad.service:4646"
      nomad_namespace  = "gpu"
      nomad_token_file = "/etc/gpumux/nomad.token"
      token_file       = "/etc/gpumux/remote.key"
      token_ttl        = "12h"
      shares           = 8
      interposer_dir   = "/opt/gpumux/remote"
    }
  }
}`
	cfg, err := nodeconfig.ParseConfig([]byte(full))
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Remote
	if r.Service != "gpus-eu" || r.NomadAddr != "https://nomad.service:4646" || r.NomadNamespace != "gpu" || r.NomadTokenFile != "/etc/gpumux/nomad.token" ||
		r.TTL() != 12*time.Hour || r.Shares != 8 || r.InterposerDir != "/opt/gpumux/remote" || len(r.Servers) != 0 {
		t.Errorf("parsed %+v", r)
	}

	// No remote block: no remote GPUs.
	if cfg, err := nodeconfig.ParseConfig([]byte(`state_dir = "/tmp/x"`)); err != nil || cfg.Remote != nil {
		t.Errorf("without a remote block: %+v, %v", cfg, err)
	}
}

func TestRemoteClientExample(t *testing.T) {
	src, err := os.ReadFile("../examples/gpumux-remote-client.hcl")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := nodeconfig.ParseConfig(src)
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Remote
	if r == nil || !r.Discover || r.Service != "gpumux-remote" || r.TokenFile != "/etc/gpumux/remote.key" || r.Shares != 4 || r.InterposerDir != "/usr/lib/gpumux/remote" || cfg.Simulate != "" {
		t.Errorf("examples/gpumux-remote-client.hcl parsed as %+v, remote %+v", cfg, r)
	}
}

func stripTTL(r nodeconfig.Remote) nodeconfig.Remote {
	return nodeconfig.Remote{Servers: r.Servers, Discover: r.Discover, Service: r.Service, NomadAddr: r.NomadAddr, NomadNamespace: r.NomadNamespace,
		NomadTokenFile: r.NomadTokenFile, TokenFile: r.TokenFile, TokenTTL: r.TokenTTL, Shares: r.Shares, InterposerDir: r.InterposerDir}
}

func TestRemoteBlockErrors(t *testing.T) {
	const key = `token_file = "/etc/gpumux/remote.key"` + "\n"
	tests := []struct {
		name, body string
		want       []string // substrings of the error
	}{
		{"nothing to find", key, []string{`remote block: no servers and discover = false`, `discover = true`, `"gpumux-remote"`}},
		{"no token file", `servers = ["10.0.0.5:7070"]`, []string{`remote block: token_file: missing`, "--token-file", "0600"}},
		{"relative token file", `servers = ["10.0.0.5:7070"]` + "\n" + `token_file = "remote.key"`, []string{`token_file = "remote.key": want an absolute path`}},
		{"server without port", key + `servers = ["10.0.0.5"]`, []string{`servers[0] = "10.0.0.5": want host:port (e.g. "10.0.0.5:7070") or unix:/path`}},
		{"port out of range", key + `servers = ["10.0.0.5:70700"]`, []string{`servers[0] = "10.0.0.5:70700": port "70700": want 1 to 65535`}},
		{"relative unix socket", key + `servers = ["unix:remoted.sock"]`, []string{`servers[0] = "unix:remoted.sock": want unix:/absolute/path`}},
		{"server twice", key + `servers = ["a:1", "b:2", "a:1"]`, []string{`servers[2] = "a:1": named twice (also servers[0])`}},
		{"bad service", key + "discover = true\nservice = \"gpumux_remote\"", []string{`service = "gpumux_remote": not a Nomad service name`}},
		{"bad nomad_addr", key + "discover = true\nnomad_addr = \"127.0.0.1:4646\"", []string{`nomad_addr = "127.0.0.1:4646": want the Nomad agent's HTTP address, e.g. "http://127.0.0.1:4646"`}},
		{"bad namespace", key + "discover = true\nnomad_namespace = \"a b\"", []string{`nomad_namespace = "a b": not a Nomad namespace name`}},
		{"relative nomad token", key + "discover = true\nnomad_token_file = \"tok\"", []string{`nomad_token_file = "tok": want an absolute path`}},
		{"zero shares", key + "discover = true\nshares = 0", []string{`shares = 0: want 1 to 48 shares per remote GPU`}},
		{"too many shares", key + "discover = true\nshares = 49", []string{`shares = 49: want 1 to 48`}},
		{"ttl too short", key + "discover = true\ntoken_ttl = \"10s\"", []string{`token_ttl = "10s": want a duration from 1m0s to 8760h, e.g. "720h"`}},
		{"ttl not a duration", key + "discover = true\ntoken_ttl = \"a week\"", []string{`token_ttl = "a week": want a duration`}},
		{"relative interposer dir", key + "discover = true\ninterposer_dir = \"lib\"", []string{`interposer_dir = "lib": want the absolute path`, "libcuda.so.1"}},
		{"relative tls_ca_file", key + "discover = true\ntls_ca_file = \"ca.pem\"", []string{`tls_ca_file = "ca.pem": want the absolute path of the CA certificate`}},
		{"relative tls_cert_file", key + "discover = true\ntls_ca_file = \"/ca.pem\"\ntls_cert_file = \"c.pem\"\ntls_key_file = \"/k.pem\"", []string{`tls_cert_file = "c.pem": want the absolute path of a client certificate`}},
		{"tls cert without key", key + "discover = true\ntls_ca_file = \"/ca.pem\"\ntls_cert_file = \"/c.pem\"", []string{`tls_cert_file = "/c.pem" and tls_key_file = "": set both (mutual TLS) or neither`}},
		{"tls cert without CA", key + "discover = true\ntls_cert_file = \"/c.pem\"\ntls_key_file = \"/k.pem\"", []string{`tls_cert_file = "/c.pem": needs tls_ca_file`}},
		{"tls server name without CA", key + "discover = true\ntls_server_name = \"gpu.example.com\"", []string{`tls_server_name = "gpu.example.com": needs tls_ca_file`}},
		{"bad tls server name", key + "discover = true\ntls_ca_file = \"/ca.pem\"\ntls_server_name = \"gpu host\"", []string{`tls_server_name = "gpu host": want a DNS name or an IP address`}},
		{"unknown key", key + "discover = true\nserver = [\"a:1\"]", []string{`server`}},
		{"every problem at once", `servers = ["x"]` + "\nshares = 0", []string{`servers[0] = "x"`, "token_file: missing", "shares = 0"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := "remote {\n" + tc.body + "\n}\n"
			for path, decode := range map[string]func() (*nodeconfig.Config, error){
				"ParseConfig": func() (*nodeconfig.Config, error) { return nodeconfig.ParseConfig([]byte(src)) },
				"Nomad":       func() (*nodeconfig.Config, error) { return nomadDecode(t, src) },
			} {
				_, err := decode()
				if err == nil {
					t.Fatalf("%s accepted %q", path, src)
				}
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("%s: error %q does not contain %q", path, err, w)
					}
				}
			}
		})
	}
	if _, err := nodeconfig.ParseConfig([]byte("remote {\n" + `servers = ["a:1"]` + "\n" + `token_file = "/k"` + "\n}\nremote {\n}\n")); err == nil {
		t.Error("two remote blocks were accepted")
	}
}
