/* HMAC-MD2 for the CUDA runtime's integrity check (gm_md2.c). Plain C with
 * no other gpumux header, so that e2e/gpu/remote/darktrace.c can use it. */
#ifndef GPUMUX_GM_MD2_H
#define GPUMUX_GM_MD2_H

#include <stddef.h>

/* gm_md2_sum is MD2 (RFC 1319) of p. */
void gm_md2_sum(const void *p, size_t n, unsigned char out[16]);

/* gm_hmac_md2 is HMAC-MD2 (RFC 2104 over MD2, 16-byte block) of a then b
 * under a 16-byte key. */
void gm_hmac_md2(const unsigned char key[16], const void *a, size_t na, const void *b, size_t nb,
		 unsigned char out[16]);

/* gm_integrity_key keys the runtime's integrity answer (gm_dark.c). */
extern const unsigned char gm_integrity_key[16];

#endif
