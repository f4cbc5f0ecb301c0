package remote

import (
	"crypto/tls"
	"fmt"
	"os"
	"strings"

	"github.com/gpumux/gpumux/nodeconfig"
	"github.com/gpumux/gpumux/remote/pool"
	"github.com/gpumux/gpumux/remote/token"
	"github.com/gpumux/gpumux/share"
)

// poolConfig reads the files a node config's remote block names (the pool
// secret, the Nomad ACL token) into a pool.Config.
func poolConfig(r *nodeconfig.Remote) (pool.Config, error) {
	secret, err := token.ReadSecret(r.TokenFile)
	if err != nil {
		return pool.Config{}, fmt.Errorf("remote block: token_file: %w", err)
	}
	cfg := pool.Config{
		Servers: r.Servers, Discover: r.Discover, Service: r.Service, Namespace: r.NomadNamespace,
		NomadAddr: r.NomadAddr, Secret: secret,
	}
	if cfg.TLS, err = tlsConfig(r); err != nil {
		return pool.Config{}, err
	}
	if r.Discover && r.NomadTokenFile != "" {
		b, err := os.ReadFile(r.NomadTokenFile)
		if err != nil {
			return pool.Config{}, fmt.Errorf("remote block: nomad_token_file: %w", err)
		}
		cfg.NomadToken = strings.TrimSpace(string(b))
	}
	return cfg, nil
}

// tlsConfig is the TLS client configuration of a remote block's tls_*
// settings, or nil without tls_ca_file. Errors name the setting.
func tlsConfig(r *nodeconfig.Remote) (*tls.Config, error) {
	if r.TLSCAFile == "" {
		return nil, nil
	}
	c, err := pool.ClientTLS(r.TLSCAFile, r.TLSServerName)
	if err != nil {
		return nil, fmt.Errorf("remote block: tls_ca_file: %w", err)
	}
	if r.TLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(r.TLSCertFile, r.TLSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("remote block: tls_cert_file and tls_key_file: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// remoteGPU is a GPU the pool found, as the share model takes it.
func remoteGPU(g pool.GPU) share.RemoteGPU {
	return share.RemoteGPU{Addr: g.Addr, Index: g.Index, UUID: g.UUID, Model: g.Name, MemoryMiB: g.MemoryMiB,
		SMCount: g.SMs, ComputeCapability: g.CC, CUDAVersion: g.CUDA}
}
