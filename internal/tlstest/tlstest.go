package tlstest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority whose files are in a directory.
type CA struct {
	Cert    *x509.Certificate
	key     crypto.Signer
	dir     string
	CertPEM []byte
	// CertFile is the CA certificate (PEM): what clients trust.
	CertFile string
}

// Pair is a certificate and its key, issued by a CA, as files.
type Pair struct {
	CertFile, KeyFile string
}

// KeyType picks a key's algorithm.
type KeyType int

// Key types.
const (
	ECDSA KeyType = iota // P-256
	RSA                  // 2048 bits
)

// NewCA makes a CA named name with an ECDSA P-256 key, writing its
// certificate to dir/<name>.pem.
func NewCA(t testing.TB, dir, name string) *CA {
	t.Helper()
	key := newKey(t, ECDSA)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{Cert: cert, key: key, dir: dir, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
	ca.CertFile = filepath.Join(dir, name+".pem")
	write(t, ca.CertFile, ca.CertPEM)
	return ca
}

// Options are what an issued certificate says beyond its names.
type Options struct {
	Key KeyType
	// NotAfter is when it expires (zero: in a day).
	NotAfter time.Time
}

// Server issues a server certificate for hosts (DNS names and IP
// addresses), written to dir/<name>.pem and dir/<name>-key.pem.
func (ca *CA) Server(t testing.TB, name string, hosts []string, o Options) Pair {
	t.Helper()
	tmpl := ca.template(t, name, o)
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return ca.issue(t, name, tmpl, o.Key)
}

// Client issues a client certificate named name (for mutual TLS).
func (ca *CA) Client(t testing.TB, name string, o Options) Pair {
	t.Helper()
	tmpl := ca.template(t, name, o)
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	return ca.issue(t, name, tmpl, o.Key)
}

func (ca *CA) template(t testing.TB, name string, o Options) *x509.Certificate {
	notAfter := o.NotAfter
	if notAfter.IsZero() {
		notAfter = time.Now().Add(24 * time.Hour)
	}
	return &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-2 * time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
	}
}

func (ca *CA) issue(t testing.TB, name string, tmpl *x509.Certificate, kt KeyType) Pair {
	key := newKey(t, kt)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	p := Pair{CertFile: filepath.Join(ca.dir, name+".pem"), KeyFile: filepath.Join(ca.dir, name+"-key.pem")}
	write(t, p.CertFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	write(t, p.KeyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))
	return p
}

// Pool is a certificate pool holding the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// ClientConfig is what a Go client that trusts ca uses to reach
// serverName, presenting pair if it has a certificate.
func (ca *CA) ClientConfig(t testing.TB, serverName string, pair *Pair) *tls.Config {
	t.Helper()
	c := &tls.Config{RootCAs: ca.Pool(), ServerName: serverName, MinVersion: tls.VersionTLS12}
	if pair != nil {
		cert, err := tls.LoadX509KeyPair(pair.CertFile, pair.KeyFile)
		if err != nil {
			t.Fatal(err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c
}

func newKey(t testing.TB, kt KeyType) crypto.Signer {
	var key crypto.Signer
	var err error
	switch kt {
	case RSA:
		key, err = rsa.GenerateKey(rand.Reader, 2048)
	default:
		key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	}
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func serial(t testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func write(t testing.TB, path string, b []byte) {
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(fmt.Errorf("tlstest: %w", err))
	}
}
