/*
 * TLS for the interposer's connection to gpumux-remoted (gm_tls.c): a
 * transport under gm_wire.c's framing. With GPUMUX_REMOTE_TLS_CA set, a
 * TCP connection runs a TLS 1.2 handshake before the protocol's, and every
 * byte after it goes through gm_tls_sendv and gm_tls_recv. A unix socket
 * never uses TLS.
 *
 * Everything is called under gm_wire.c's lock, for the one connection of
 * the process.
 */
#ifndef GPUMUX_GM_TLS_H
#define GPUMUX_GM_TLS_H

#include <stddef.h>
#include <sys/uio.h>

/* Environment of the TLS client (docs/remote.md, "TLS"). */
#define GM_ENV_TLS_CA "GPUMUX_REMOTE_TLS_CA"
#define GM_ENV_TLS_CERT "GPUMUX_REMOTE_TLS_CERT"
#define GM_ENV_TLS_KEY "GPUMUX_REMOTE_TLS_KEY"
#define GM_ENV_TLS_SERVER_NAME "GPUMUX_REMOTE_TLS_SERVER_NAME"

/* gm_tls_start runs the TLS handshake on fd, connected to addr, if TLS is
 * configured for it; then gm_tls_on is true until gm_tls_end. It returns
 * 0 (TLS up, or not asked for) or -1 with why: one sentence that names
 * the cause. */
int gm_tls_start(int fd, const char *addr, char *why, size_t wl);

/* gm_tls_on: the connection goes through TLS. */
int gm_tls_on(void);

/* gm_tls_sendv sends every byte of iov (which it may change), sealed in
 * records; gm_tls_recv receives exactly n bytes. Both return 0, or -1
 * with why. Every wait is bounded by gm_wait's timeout. */
int gm_tls_sendv(struct iovec *iov, int n, char *why, size_t wl);
int gm_tls_recv(void *p, size_t n, char *why, size_t wl);

/* gm_tls_end ends the TLS session (the caller closes the socket), wiping
 * its keys. gm_tls_forget drops it without touching it: in a fork child,
 * where another thread of the parent may have been using it. */
void gm_tls_end(void);
void gm_tls_forget(void);

#endif
