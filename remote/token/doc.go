// Package token mints and checks the tokens that admit a client to
// gpumux-remoted.
//
// A pool shares one secret (gpumux-remoted --token-file on GPU servers, the
// plugin's remote.token_file on client nodes). For each reservation the
// plugin (or gpumux-runtime) mints a token naming the reservation, the
// server's GPU (or GPUs), the device memory quota and an expiry, signed
// with HMAC-SHA256; the server
// checks the signature before any call and caps the memory of every
// connection that presents the token, together, at the quota. Tokens carry
// no secret: a leaked token gives its holder its own share until it
// expires, nothing more.
package token
