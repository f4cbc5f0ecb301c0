// Package tlstest makes throwaway certificate authorities and certificates
// for the tests of gpumux's TLS (gpumux-remoted's listener, the pool's
// probes, the C interposer): nothing with a private key is committed, each
// test makes its own in a temporary directory.
package tlstest
