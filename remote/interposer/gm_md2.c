/*
 * HMAC-MD2: RFC 1319's MD2 under RFC 2104's HMAC with MD2's 16-byte block.
 * The CUDA runtime checks the driver's answer to its integrity table with
 * it (gm_dark.c); e2e/gpu/remote/darktrace.c computes the same to compare
 * with the real driver. Known answers: tests/unit.c.
 */
#include <stddef.h>
#include <string.h>

#include "gm_md2.h"

static const unsigned char gm_md2_s[256] = {
	41,  46,  67,  201, 162, 216, 124, 1,	61,  54,  84,  161, 236, 240, 6,   19,	98,  167, 5,   243, 192, 199,
	115, 140, 152, 147, 43,	 217, 188, 76,	130, 202, 30,  155, 87,	 60,  253, 212, 224, 22,  103, 66,  111, 24,
	138, 23,  229, 18,  190, 78,  196, 214, 218, 158, 222, 73,  160, 251, 245, 142, 187, 47,  238, 122, 169, 104,
	121, 145, 21,  178, 7,	 63,  148, 194, 16,  137, 11,  34,  95,	 33,  128, 127, 93,  154, 90,  144, 50,	39,
	53,  62,  204, 231, 191, 247, 151, 3,	255, 25,  48,  179, 72,	 165, 181, 209, 215, 94,  146, 42,  172, 86,
	170, 198, 79,  184, 56,	 210, 150, 164, 125, 182, 118, 252, 107, 226, 156, 116, 4,   241, 69,  157, 112, 89,
	100, 113, 135, 32,  134, 91,  207, 101, 230, 45,  168, 2,   27,	 96,  37,  173, 174, 176, 185, 246, 28,	70,
	97,  105, 52,  64,  126, 15,  85,  71,	163, 35,  221, 81,  175, 58,  195, 92,	249, 206, 186, 197, 234, 38,
	44,  83,  13,  110, 133, 40,  132, 9,	211, 223, 205, 244, 65,	 129, 77,  82,	106, 220, 55,  200, 108, 193,
	171, 250, 36,  225, 123, 8,   12,  189, 177, 74,  120, 136, 149, 139, 227, 99,	232, 109, 233, 203, 213, 254,
	59,  0,	  29,  57,  242, 239, 183, 14,	102, 88,  208, 228, 166, 119, 114, 248, 235, 117, 75,  10,  49,	68,
	80,  180, 143, 237, 31,	 26,  219, 153, 141, 51,  159, 17,  131, 20};

typedef struct {
	unsigned char x[48], c[16], l;
	unsigned n;
} gm_md2;

static void gm_md2_byte(gm_md2 *m, unsigned char b)
{
	m->x[16 + m->n] = b;
	m->x[32 + m->n] = (unsigned char)(b ^ m->x[m->n]);
	m->c[m->n] ^= gm_md2_s[b ^ m->l];
	m->l = m->c[m->n];
	if (++m->n < 16)
		return;
	m->n = 0;
	unsigned t = 0;
	for (unsigned r = 0; r < 18; r++) {
		for (unsigned k = 0; k < 48; k++)
			t = m->x[k] ^= gm_md2_s[t];
		t = (t + r) & 0xff;
	}
}

static void gm_md2_bytes(gm_md2 *m, const void *p, size_t n, unsigned char mask)
{
	for (size_t i = 0; i < n; i++)
		gm_md2_byte(m, ((const unsigned char *)p)[i] ^ mask);
}

static void gm_md2_final(gm_md2 *m, unsigned char out[16])
{
	unsigned pad = 16 - m->n;
	for (unsigned i = 0; i < pad; i++)
		gm_md2_byte(m, (unsigned char)pad);
	unsigned char c[16];
	memcpy(c, m->c, 16);
	gm_md2_bytes(m, c, 16, 0);
	memcpy(out, m->x, 16);
}

void gm_md2_sum(const void *p, size_t n, unsigned char out[16])
{
	gm_md2 m;
	memset(&m, 0, sizeof m);
	gm_md2_bytes(&m, p, n, 0);
	gm_md2_final(&m, out);
}

void gm_hmac_md2(const unsigned char key[16], const void *a, size_t na, const void *b, size_t nb,
		 unsigned char out[16])
{
	gm_md2 m;
	unsigned char in[16];
	memset(&m, 0, sizeof m);
	gm_md2_bytes(&m, key, 16, 0x36);
	gm_md2_bytes(&m, a, na, 0);
	gm_md2_bytes(&m, b, nb, 0);
	gm_md2_final(&m, in);
	memset(&m, 0, sizeof m);
	gm_md2_bytes(&m, key, 16, 0x5c);
	gm_md2_bytes(&m, in, 16, 0);
	gm_md2_final(&m, out);
}

/* The key the runtime and the driver share for the integrity answer. */
const unsigned char gm_integrity_key[16] = {0x14, 0x6a, 0xdd, 0xae, 0x53, 0xa9, 0xa7, 0x52,
					    0xaa, 0x08, 0x41, 0x36, 0x0b, 0xf5, 0x5a, 0x9f};
