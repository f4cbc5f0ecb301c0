/*
 * The interposer's side of the gpumux remote protocol (remote/proto): one
 * connection per process to gpumux-remoted, frames, and the message
 * builder and reader the generated stubs (zz_calls.c) use.
 *
 * A stub builds a gm_msg (gm_msg_init, gm_put_*, gm_stream_in/out), sends
 * it with gm_call, reads outputs with gm_get_* when the result is
 * CUDA_SUCCESS, checks them with gm_reply_done and frees with gm_msg_free.
 */
#ifndef GPUMUX_GM_WIRE_H
#define GPUMUX_GM_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "gm_abi.h"

/* Protocol constants; remote/proto/frame.go is the reference. Version 2:
 * the client follows a move (remote/proto/migrate.go). */
#define GM_PROTO_VERSION 2
#define GM_MAGIC 0x584d5547u
#define GM_HEADER_SIZE 20
#define GM_CHUNK_SIZE (1u << 20)
#define GM_MAX_PAYLOAD (GM_CHUNK_SIZE + (64u << 10))
#define GM_FLAG_REPLY 1u
#define GM_FLAG_DATA 2u
#define GM_FLAG_ASYNC 4u

/* Live migration (remote/proto/migrate.go): a held call answered
 * GM_RESULT_MOVED did not run; a GM_OP_MOVED frame follows with where the
 * session went (address, ticket), and a GM_OP_RESUME frame opens the
 * connection to it. */
#define GM_RESULT_MOVED 0x474d0001u
#define GM_OP_MOVED 0xfff0
#define GM_OP_RESUME 0xfff1
#define GM_TICKET_SIZE 32u

/* gm_msg_init flags. */
#define GM_SYNC 0
#define GM_ASYNC 1 /* send and return: the result comes with a later reply */
#define GM_CACHE 2 /* answer repeats of the same request from memory */
#define GM_CACHE_OBJECT 4 /* with GM_CACHE: the reply is about a module or function */
#define GM_UNCACHE 8 /* a success forgets the GM_CACHE_OBJECT replies */

typedef struct gm_msg {
	int op, flags;
	/* The request payload, then (after gm_call) the reply payload. */
	unsigned char *buf;
	size_t len, cap, pos;
	unsigned char inline_buf[256];
	int bad; /* an encode or decode error */
	/* At most one stream per call. */
	const void *in;
	void *out;
	uint64_t stream_len;
} gm_msg;

void gm_msg_init(gm_msg *m, int op, int flags);
void gm_msg_free(gm_msg *m);
void gm_put_u32(gm_msg *m, uint32_t v);
void gm_put_u64(gm_msg *m, uint64_t v);
void gm_put_str(gm_msg *m, const char *s);
void gm_put_bytes(gm_msg *m, const void *p, size_t n);
/* A CUmemAllocationProp's fields (remote/proto/memory.go's MemProp). */
void gm_put_memprop(gm_msg *m, const CUmemAllocationProp *p);
/* Host memory streamed to the server after the call frame. */
void gm_stream_in(gm_msg *m, const void *p, uint64_t n);
/* Host memory the server streams back before the reply. */
void gm_stream_out(gm_msg *m, void *p, uint64_t n);

/*
 * gm_call sends the request and, unless it is async, waits for the reply.
 * It returns the call's CUresult: the server's, a deferred error of an
 * earlier async call, or the interposer's own (README.md, "Error codes"):
 * CUDA_ERROR_NO_DEVICE when gpumux-remoted cannot be reached or refuses
 * the handshake, CUDA_ERROR_UNKNOWN once the connection is lost,
 * CUDA_ERROR_INVALID_VALUE for an argument the protocol cannot carry,
 * CUDA_ERROR_OUT_OF_MEMORY when host memory runs out. Every wait is
 * bounded by GPUMUX_REMOTE_TIMEOUT, never a hang. On CUDA_SUCCESS the
 * reply payload is positioned after the result for gm_get_*.
 */
CUresult gm_call(gm_msg *m);

uint32_t gm_get_u32(gm_msg *m);
uint64_t gm_get_u64(gm_msg *m);
float gm_get_f32(gm_msg *m);
void gm_get_raw(gm_msg *m, void *dst, size_t n);
/* Copies length-prefixed bytes into dst (cap bytes) and their length into
 * *len; more than cap is a malformed reply. */
void gm_get_blob(gm_msg *m, void *dst, size_t cap, size_t *len);
/* Fills *p from a MemProp (its other bytes zero). */
void gm_get_memprop(gm_msg *m, CUmemAllocationProp *p);
/* Copies a string into dst (len bytes), truncated and NUL-terminated. */
void gm_get_str(gm_msg *m, char *dst, int len);
/* CUDA_SUCCESS if every get was in bounds and nothing is left over. */
CUresult gm_reply_done(gm_msg *m);

/* The size of a module image (ELF cubin, fatbin, fatbin wrapper or PTX
 * text), or 0 if it is none of these. For a fatbin wrapper it is the size
 * of the fatbin the wrapper points to: stream gm_image_data(image). */
size_t gm_image_size(const void *image);

/* The bytes to send for a module image: the fatbin a fatbin wrapper points
 * to, the image itself otherwise. */
const void *gm_image_data(const void *image);

/* The calling thread's current context handle, sent with every frame. */
uint64_t gm_current_ctx(void);

/* gm_kernel_function swaps a CUkernel (gm_dark.c) for its function in the
 * current context, looked up there on first use; a CUfunction stays as it
 * is. The generated stubs call it for every function they send. */
CUresult gm_kernel_function(CUfunction *f);

/* gm_refuse returns r for an argument refused without a round trip, logging
 * it at debug level (GPUMUX_REMOTE_DEBUG). */
CUresult gm_refuse(const char *call, const char *arg, CUresult r);

#endif
