package nodeconfig

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	"github.com/hashicorp/nomad/plugins/shared/hclspec"

	"github.com/gpumux/gpumux/remote/pool"
	"github.com/gpumux/gpumux/share"
)

// Defaults of the remote block.
const (
	DefaultRemoteService   = pool.DefaultService
	DefaultNomadAddr       = pool.DefaultNomadAddr
	DefaultNomadNamespace  = pool.DefaultNomadNamespace
	DefaultRemoteShares    = 4
	DefaultInterposerDir   = "/usr/lib/gpumux/remote"
	DefaultRemoteTokenTTL  = 30 * 24 * time.Hour
	defaultRemoteTokenText = "720h"
	// MinRemoteTokenTTL and MaxRemoteTokenTTL bound token_ttl.
	MinRemoteTokenTTL = time.Minute
	MaxRemoteTokenTTL = 365 * 24 * time.Hour
)

// remoteSpec is the remote block's schema.
var remoteSpec = hclspec.NewBlock("remote", false, hclspec.NewObject(map[string]*hclspec.Spec{
	"servers":          hclspec.NewAttr("servers", "list(string)", false),
	"discover":         hclspec.NewDefault(hclspec.NewAttr("discover", "bool", false), hclspec.NewLiteral("false")),
	"service":          hclspec.NewDefault(hclspec.NewAttr("service", "string", false), hclspec.NewLiteral(`"`+DefaultRemoteService+`"`)),
	"nomad_addr":       hclspec.NewDefault(hclspec.NewAttr("nomad_addr", "string", false), hclspec.NewLiteral(`"`+DefaultNomadAddr+`"`)),
	"nomad_namespace":  hclspec.NewDefault(hclspec.NewAttr("nomad_namespace", "string", false), hclspec.NewLiteral(`"`+DefaultNomadNamespace+`"`)),
	"nomad_token_file": hclspec.NewAttr("nomad_token_file", "string", false),
	"token_file":       hclspec.NewAttr("token_file", "string", false),
	"token_ttl":        hclspec.NewDefault(hclspec.NewAttr("token_ttl", "string", false), hclspec.NewLiteral(`"`+defaultRemoteTokenText+`"`)),
	"shares":           hclspec.NewDefault(hclspec.NewAttr("shares", "number", false), hclspec.NewLiteral(strconv.Itoa(DefaultRemoteShares))),
	"interposer_dir":   hclspec.NewDefault(hclspec.NewAttr("interposer_dir", "string", false), hclspec.NewLiteral(`"`+DefaultInterposerDir+`"`)),
	"tls_ca_file":      hclspec.NewAttr("tls_ca_file", "string", false),
	"tls_cert_file":    hclspec.NewAttr("tls_cert_file", "string", false),
	"tls_key_file":     hclspec.NewAttr("tls_key_file", "string", false),
	"tls_server_name":  hclspec.NewAttr("tls_server_name", "string", false),
}))

// Remote is the remote { … } block: GPUs of other hosts, served by
// gpumux-remoted, offered on this node as remote shares.
type Remote struct {
	// Servers are gpumux-remoted addresses: "host:port" or "unix:/path".
	Servers []string `codec:"servers"`
	// Discover finds servers through Nomad's native service discovery: the
	// services named Service in NomadNamespace, asked of the Nomad agent at
	// NomadAddr (with the ACL token in NomadTokenFile, if any).
	Discover       bool   `codec:"discover"`
	Service        string `codec:"service"`
	NomadAddr      string `codec:"nomad_addr"`
	NomadNamespace string `codec:"nomad_namespace"`
	NomadTokenFile string `codec:"nomad_token_file"`
	// TokenFile holds the pool's secret (gpumux-remoted --token-file's),
	// mode 0600; reservations' tokens are signed with it.
	TokenFile string `codec:"token_file"`
	// TokenTTL is how long a reservation's token admits its holder.
	TokenTTL string `codec:"token_ttl"`
	// Shares splits each remote GPU into equal shares (memory = total/shares).
	Shares int `codec:"shares"`
	// InterposerDir holds the interposer's libcuda.so.1, the NVML
	// library of remote shares (libnvidia-ml.so.1) and its nvidia-smi,
	// mounted into tasks.
	InterposerDir string `codec:"interposer_dir"`
	// TLSCAFile, if set, holds the CA certificate (PEM) that signed the
	// servers' (gpumux-remoted --tls-cert-file): TCP servers are then
	// reached over TLS, by the pool's probes and by tasks, into which the
	// file is mounted read-only.
	TLSCAFile string `codec:"tls_ca_file"`
	// TLSCertFile and TLSKeyFile are a client certificate and its key for
	// servers that ask for one (--tls-client-ca-file): the probes present
	// it, and tasks too (both files are mounted into them).
	TLSCertFile string `codec:"tls_cert_file"`
	TLSKeyFile  string `codec:"tls_key_file"`
	// TLSServerName is the name checked in every server's certificate
	// instead of the host of its address.
	TLSServerName string `codec:"tls_server_name"`

	ttl time.Duration // parsed TokenTTL
}

// TTL is the parsed token_ttl.
func (r *Remote) TTL() time.Duration { return r.ttl }

// normalize fills what a config decoded without the schema's defaults lacks.
func (r *Remote) normalize() {
	if r.Service == "" {
		r.Service = DefaultRemoteService
	}
	if r.NomadAddr == "" {
		r.NomadAddr = DefaultNomadAddr
	}
	if r.NomadNamespace == "" {
		r.NomadNamespace = DefaultNomadNamespace
	}
	if r.TokenTTL == "" {
		r.TokenTTL = defaultRemoteTokenText
	}
	if r.InterposerDir == "" {
		r.InterposerDir = DefaultInterposerDir
	}
	r.ttl = DefaultRemoteTokenTTL
	if d, err := time.ParseDuration(r.TokenTTL); err == nil {
		r.ttl = d
	}
}

// serviceName is what Nomad accepts as a service name (RFC 1123 labels).
var serviceName = regexp.MustCompile(`^[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?$`)

// namespaceName is what Nomad accepts as a namespace name.
var namespaceName = regexp.MustCompile(`^[a-zA-Z0-9-]{1,128}$`)

// Validate checks the block, naming each bad field, its value and what is
// valid. It reads no file: token_file and interposer_dir are checked where
// they are used.
func (r *Remote) Validate() error {
	var errs []error
	bad := func(field string, value any, format string, args ...any) {
		errs = append(errs, fmt.Errorf("remote block: %s = %s: %s", field, quote(value), fmt.Sprintf(format, args...)))
	}
	seen := map[string]int{}
	for i, s := range r.Servers {
		field := fmt.Sprintf("servers[%d]", i)
		if err := pool.CheckServerAddr(s); err != nil {
			bad(field, s, "%v", err)
		} else if j, dup := seen[s]; dup {
			bad(field, s, "named twice (also servers[%d])", j)
		}
		seen[s] = i
	}
	if len(r.Servers) == 0 && !r.Discover {
		errs = append(errs, errors.New(`remote block: no servers and discover = false: list servers = ["host:port", …], or set discover = true to find gpumux-remoted through the Nomad services named "`+r.Service+`"`))
	}
	if r.Discover {
		if !serviceName.MatchString(r.Service) {
			bad("service", r.Service, "not a Nomad service name (1 to 63 letters, digits and dashes, not starting or ending with a dash)")
		}
		if u, err := url.Parse(r.NomadAddr); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			bad("nomad_addr", r.NomadAddr, "want the Nomad agent's HTTP address, e.g. %q", DefaultNomadAddr)
		}
		if !namespaceName.MatchString(r.NomadNamespace) {
			bad("nomad_namespace", r.NomadNamespace, "not a Nomad namespace name (1 to 128 letters, digits and dashes)")
		}
		if r.NomadTokenFile != "" && !filepath.IsAbs(r.NomadTokenFile) {
			bad("nomad_token_file", r.NomadTokenFile, "want an absolute path to a file holding a Nomad ACL token")
		}
	}
	switch {
	case r.TokenFile == "":
		errs = append(errs, errors.New(`remote block: token_file: missing: want the absolute path of the pool's secret, the file gpumux-remoted reads with --token-file (mode 0600)`))
	case !filepath.IsAbs(r.TokenFile):
		bad("token_file", r.TokenFile, "want an absolute path (the pool's secret, mode 0600)")
	}
	if d, err := time.ParseDuration(r.TokenTTL); err != nil || d < MinRemoteTokenTTL || d > MaxRemoteTokenTTL {
		bad("token_ttl", r.TokenTTL, "want a duration from %s to %s, e.g. %q", MinRemoteTokenTTL, "8760h", defaultRemoteTokenText)
	}
	if r.Shares < 1 || r.Shares > share.MaxRemoteShares {
		bad("shares", r.Shares, "want 1 to %d shares per remote GPU", share.MaxRemoteShares)
	}
	errs = append(errs, r.validateTLS()...)
	if !filepath.IsAbs(r.InterposerDir) {
		bad("interposer_dir", r.InterposerDir, "want the absolute path of the directory holding the interposer's libcuda.so.1, libnvidia-ml.so.1 and nvidia-smi (default %s)", DefaultInterposerDir)
	}
	return errors.Join(errs...)
}

// dnsName is a DNS name a certificate can carry (letters, digits, dashes
// and dots, a label at most 63 bytes).
var dnsName = regexp.MustCompile(`^(?i:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)(?:\.(?i:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?))*$`)

// validateTLS checks the tls_* settings.
func (r *Remote) validateTLS() []error {
	var errs []error
	bad := func(field string, value any, format string, args ...any) {
		errs = append(errs, fmt.Errorf("remote block: %s = %s: %s", field, quote(value), fmt.Sprintf(format, args...)))
	}
	for _, f := range []struct{ field, value, what string }{
		{"tls_ca_file", r.TLSCAFile, "the CA certificate (PEM) that signed the servers' certificates"},
		{"tls_cert_file", r.TLSCertFile, "a client certificate (PEM)"},
		{"tls_key_file", r.TLSKeyFile, "the client certificate's key (PEM)"},
	} {
		if f.value != "" && !filepath.IsAbs(f.value) {
			bad(f.field, f.value, "want the absolute path of %s", f.what)
		}
	}
	if (r.TLSCertFile == "") != (r.TLSKeyFile == "") {
		errs = append(errs, fmt.Errorf("remote block: tls_cert_file = %s and tls_key_file = %s: set both (mutual TLS) or neither", quote(r.TLSCertFile), quote(r.TLSKeyFile)))
	}
	if r.TLSCAFile == "" {
		if r.TLSCertFile != "" {
			bad("tls_cert_file", r.TLSCertFile, "needs tls_ca_file: a client certificate is presented over TLS only")
		}
		if r.TLSServerName != "" {
			bad("tls_server_name", r.TLSServerName, "needs tls_ca_file: the name is checked over TLS only")
		}
	}
	if n := r.TLSServerName; n != "" && net.ParseIP(n) == nil && (len(n) > 253 || !dnsName.MatchString(n)) {
		bad("tls_server_name", n, "want a DNS name or an IP address that the servers' certificates carry")
	}
	return errs
}

func quote(v any) string {
	if s, ok := v.(string); ok {
		return strconv.Quote(s)
	}
	return fmt.Sprint(v)
}
