/*
 * The interposer's side of the gpumux remote protocol: one connection per
 * process to gpumux-remoted, frames, the message builder and reader of
 * gm_wire.h, the reply cache and the fork handlers. remote/proto (frame.go,
 * codec.go, hello.go, client.go) is the reference for everything on the
 * wire.
 *
 * Calls go out one at a time under gm_mu, as in proto.Client: the protocol
 * has one request in flight per connection (replies carry the request's
 * sequence number and must match it).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "gm_internal.h"
#include "gm_tls.h"
#include "gm_wire.h"
#include "zz_calls.h"

#define GM_DEFAULT_TIMEOUT_MS 30000
#define GM_CACHE_BUCKETS 1024
#define GM_CACHE_MAX_ENTRIES 16384
#define GM_CACHE_MAX_KEY 1024

/* gm_msg.bad */
#define GM_BAD_ARG 1   /* an argument the protocol cannot carry */
#define GM_BAD_NOMEM 2 /* malloc failed building the request */
#define GM_BAD_REPLY 3 /* a get past the end of the reply */

enum gm_state {
	GM_IDLE,        /* not connected yet */
	GM_UP,          /* connected and admitted */
	GM_UNREACHABLE, /* connecting or the handshake failed: no device */
	GM_LOST,        /* the connection broke after the handshake */
};

struct gm_centry {
	struct gm_centry *next;
	int op;
	int object; /* GM_CACHE_OBJECT: forgotten by a GM_UNCACHE call */
	uint32_t klen, rlen;
	unsigned char data[]; /* key (request payload), then reply payload */
};

static pthread_mutex_t gm_mu = PTHREAD_MUTEX_INITIALIZER;

/* Everything below is guarded by gm_mu. */
static struct {
	enum gm_state state;
	int fd;
	uint32_t seq;
	int timeout_ms;
	uint64_t quota;
	char addr[256];
	struct gm_centry *cache[GM_CACHE_BUCKETS];
	int cache_n;
	/* capture_mode is the capture interaction mode last sent for the
	 * server's worker thread (CU_STREAM_CAPTURE_MODE_GLOBAL at first). */
	int capture_mode;
	/* moves counts the times the session followed a move. */
	int moves;
} gm = {.fd = -1};

/* ---- logging ---- */

void gm_log(const char *fmt, ...)
{
	char buf[1024];
	int n = snprintf(buf, sizeof buf, "gpumux: ");
	va_list ap;
	va_start(ap, fmt);
	int k = vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (k < 0)
		k = 0;
	n += k;
	if ((size_t)n > sizeof buf - 2)
		n = (int)sizeof buf - 2;
	buf[n++] = '\n';
	const char *p = buf;
	while (n > 0) {
		ssize_t w = write(2, p, (size_t)n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			break;
		p += w;
		n -= (int)w;
	}
}

/* gm_debug: GPUMUX_REMOTE_DEBUG is set (non-empty): log every failing
 * call (read once). */
int gm_debug(void)
{
	static int v = -1;
	if (v < 0) {
		const char *s = getenv("GPUMUX_REMOTE_DEBUG");
		v = s == NULL || *s == 0 ? 0 : strcmp(s, "2") == 0 ? 2 : 1;
	}
	return v;
}

CUresult gm_refuse(const char *call, const char *arg, CUresult r)
{
	if (gm_debug())
		gm_log("debug: %s refused here: argument %s (%d)", call, arg, (int)r);
	return r;
}

int gm_first(unsigned char *once)
{
	return __atomic_exchange_n(once, 1, __ATOMIC_RELAXED) == 0;
}

static const char *gm_errstr(int err, char *buf, size_t len)
{
	return strerror_r(err, buf, len);
}

/* ---- little-endian helpers ---- */

static void gm_le16(unsigned char *p, uint16_t v)
{
	p[0] = (unsigned char)v;
	p[1] = (unsigned char)(v >> 8);
}

static void gm_le32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static void gm_le64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static uint16_t gm_rd16(const unsigned char *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t gm_rd32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t gm_rd64(const unsigned char *p)
{
	return (uint64_t)gm_rd32(p) | (uint64_t)gm_rd32(p + 4) << 32;
}

static void gm_header(unsigned char *h, uint32_t payload, int op, uint16_t flags, uint32_t seq, uint64_t ctx)
{
	gm_le32(h, (uint32_t)(GM_HEADER_SIZE - 4) + payload);
	gm_le16(h + 4, (uint16_t)op);
	gm_le16(h + 6, flags);
	gm_le32(h + 8, seq);
	gm_le64(h + 12, ctx);
}

/* ---- messages ---- */

void gm_msg_init(gm_msg *m, int op, int flags)
{
	m->op = op;
	m->flags = flags;
	m->buf = m->inline_buf;
	m->cap = sizeof m->inline_buf;
	/* The frame header goes in front of the payload: one write sends both. */
	m->len = GM_HEADER_SIZE;
	m->pos = GM_HEADER_SIZE;
	m->bad = 0;
	m->in = NULL;
	m->out = NULL;
	m->stream_len = 0;
}

void gm_msg_free(gm_msg *m)
{
	if (m->buf != m->inline_buf)
		free(m->buf);
	m->buf = m->inline_buf;
	m->cap = sizeof m->inline_buf;
	m->len = m->pos = 0;
}

/* gm_grow makes room for a buffer of total size n (header included). */
static int gm_grow(gm_msg *m, size_t n)
{
	if (n <= m->cap)
		return 0;
	size_t cap = m->cap;
	while (cap < n)
		cap *= 2;
	unsigned char *b = malloc(cap);
	if (b == NULL)
		return -1;
	memcpy(b, m->buf, m->len);
	if (m->buf != m->inline_buf)
		free(m->buf);
	m->buf = b;
	m->cap = cap;
	return 0;
}

static unsigned char *gm_put(gm_msg *m, size_t n)
{
	if (m->bad)
		return NULL;
	if (m->len - GM_HEADER_SIZE + n > GM_MAX_PAYLOAD) {
		m->bad = GM_BAD_ARG;
		return NULL;
	}
	if (gm_grow(m, m->len + n) < 0) {
		m->bad = GM_BAD_NOMEM;
		return NULL;
	}
	unsigned char *p = m->buf + m->len;
	m->len += n;
	return p;
}

void gm_put_u32(gm_msg *m, uint32_t v)
{
	unsigned char *p = gm_put(m, 4);
	if (p)
		gm_le32(p, v);
}

void gm_put_u64(gm_msg *m, uint64_t v)
{
	unsigned char *p = gm_put(m, 8);
	if (p)
		gm_le64(p, v);
}

void gm_put_str(gm_msg *m, const char *s)
{
	if (s == NULL) {
		m->bad = GM_BAD_ARG;
		return;
	}
	size_t n = strnlen(s, GM_MAX_STRING + 1);
	if (n > GM_MAX_STRING) {
		/* The server would drop the connection for it. */
		m->bad = GM_BAD_ARG;
		return;
	}
	unsigned char *p = gm_put(m, 4 + n);
	if (p) {
		gm_le32(p, (uint32_t)n);
		memcpy(p + 4, s, n);
	}
}

void gm_put_bytes(gm_msg *m, const void *b, size_t n)
{
	if (n > GM_MAX_BLOB || (b == NULL && n != 0)) {
		m->bad = GM_BAD_ARG;
		return;
	}
	unsigned char *p = gm_put(m, 4 + n);
	if (p) {
		gm_le32(p, (uint32_t)n);
		if (n)
			memcpy(p + 4, b, n);
	}
}

void gm_put_memprop(gm_msg *m, const CUmemAllocationProp *p)
{
	gm_put_u32(m, (uint32_t)p->type);
	gm_put_u32(m, (uint32_t)p->requestedHandleTypes);
	gm_put_u32(m, (uint32_t)p->location.type);
	gm_put_u32(m, (uint32_t)p->location.id);
	gm_put_u32(m, p->allocFlags.compressionType);
	gm_put_u32(m, p->allocFlags.gpuDirectRDMACapable);
	gm_put_u32(m, p->allocFlags.usage);
}

void gm_stream_in(gm_msg *m, const void *p, uint64_t n)
{
	m->in = p;
	m->out = NULL;
	m->stream_len = n;
}

void gm_stream_out(gm_msg *m, void *p, uint64_t n)
{
	m->out = p;
	m->in = NULL;
	m->stream_len = n;
}

static const unsigned char *gm_get(gm_msg *m, size_t n)
{
	if (m->bad || m->len < m->pos || m->len - m->pos < n) {
		m->bad = GM_BAD_REPLY;
		return NULL;
	}
	const unsigned char *p = m->buf + m->pos;
	m->pos += n;
	return p;
}

uint32_t gm_get_u32(gm_msg *m)
{
	const unsigned char *p = gm_get(m, 4);
	return p ? gm_rd32(p) : 0;
}

uint64_t gm_get_u64(gm_msg *m)
{
	const unsigned char *p = gm_get(m, 8);
	return p ? gm_rd64(p) : 0;
}

float gm_get_f32(gm_msg *m)
{
	uint32_t u = gm_get_u32(m);
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}

void gm_get_raw(gm_msg *m, void *dst, size_t n)
{
	const unsigned char *p = gm_get(m, n);
	if (p)
		memcpy(dst, p, n);
	else
		memset(dst, 0, n);
}

void gm_get_memprop(gm_msg *m, CUmemAllocationProp *p)
{
	memset(p, 0, sizeof *p);
	p->type = (CUmemAllocationType)gm_get_u32(m);
	p->requestedHandleTypes = (CUmemAllocationHandleType)gm_get_u32(m);
	p->location.type = (CUmemLocationType)gm_get_u32(m);
	p->location.id = (int)gm_get_u32(m);
	p->allocFlags.compressionType = (unsigned char)gm_get_u32(m);
	p->allocFlags.gpuDirectRDMACapable = (unsigned char)gm_get_u32(m);
	p->allocFlags.usage = (unsigned short)gm_get_u32(m);
}

void gm_get_str(gm_msg *m, char *dst, int len)
{
	uint32_t n = gm_get_u32(m);
	const unsigned char *p = gm_get(m, n);
	if (len <= 0)
		return;
	if (p == NULL) {
		dst[0] = 0;
		return;
	}
	size_t k = n < (uint32_t)len - 1 ? n : (size_t)len - 1;
	memcpy(dst, p, k);
	dst[k] = 0;
}

void gm_get_blob(gm_msg *m, void *dst, size_t cap, size_t *len)
{
	uint32_t n = gm_get_u32(m);
	*len = 0;
	if (n > cap) {
		/* More than the call allowed: the server speaks another protocol. */
		m->bad = GM_BAD_REPLY;
		return;
	}
	const unsigned char *p = gm_get(m, n);
	if (p != NULL && n > 0)
		memcpy(dst, p, n);
	*len = p != NULL ? n : 0;
}

/* ---- connection state ---- */

static void gm_cache_clear_locked(void)
{
	for (int i = 0; i < GM_CACHE_BUCKETS; i++) {
		struct gm_centry *e = gm.cache[i];
		while (e) {
			struct gm_centry *next = e->next;
			free(e);
			e = next;
		}
		gm.cache[i] = NULL;
	}
	gm.cache_n = 0;
}

/* gm_cache_forget_objects_locked forgets the replies about modules and
 * functions: a module unloaded, a function's attribute set. */
static void gm_cache_forget_objects_locked(void)
{
	for (int i = 0; i < GM_CACHE_BUCKETS; i++) {
		struct gm_centry **pe = &gm.cache[i];
		while (*pe) {
			struct gm_centry *e = *pe;
			if (e->object) {
				*pe = e->next;
				free(e);
				gm.cache_n--;
			} else {
				pe = &e->next;
			}
		}
	}
}

/* gm_lose_locked marks the connection lost for good: every pending and
 * later call fails with CUDA_ERROR_UNKNOWN. The server frees what the
 * client had, so there is nothing to reconnect to. */
static CUresult gm_lose_locked(const char *why)
{
	if (gm.state == GM_UP) {
		gm_log("lost the connection to gpumux-remoted at %s: %s; CUDA calls now fail with CUDA_ERROR_UNKNOWN",
		       gm.addr, why);
		gm.state = GM_LOST;
	}
	if (gm.fd >= 0) {
		gm_tls_end();
		close(gm.fd);
		gm.fd = -1;
	}
	gm_cache_clear_locked();
	return CUDA_ERROR_UNKNOWN;
}

static int64_t gm_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* gm_wait waits at most the timeout for fd to be ready for ev. */
int gm_wait(int fd, short ev, char *why, size_t wl)
{
	int64_t deadline = gm_now_ms() + gm.timeout_ms;
	for (;;) {
		int64_t left = deadline - gm_now_ms();
		if (left < 0)
			left = 0;
		struct pollfd p = {.fd = fd, .events = ev};
		int n = poll(&p, 1, (int)left);
		if (n > 0)
			return 0; /* POLLERR and POLLHUP too: the next send or recv says what */
		if (n == 0) {
			snprintf(why, wl, "no %s within %d.%03d s (GPUMUX_REMOTE_TIMEOUT)",
				 ev == POLLIN ? "answer" : "progress sending", gm.timeout_ms / 1000, gm.timeout_ms % 1000);
			return -1;
		}
		if (errno != EINTR) {
			char eb[128];
			snprintf(why, wl, "poll: %s", gm_errstr(errno, eb, sizeof eb));
			return -1;
		}
	}
}

/* gm_sendv sends every byte of iov (which it advances). */
static int gm_sendv(int fd, struct iovec *iov, int n, char *why, size_t wl)
{
	if (gm_tls_on())
		return gm_tls_sendv(iov, n, why, wl);
	while (n > 0) {
		if (iov->iov_len == 0) {
			iov++;
			n--;
			continue;
		}
		struct msghdr mh;
		memset(&mh, 0, sizeof mh);
		mh.msg_iov = iov;
		mh.msg_iovlen = (size_t)n;
		/* MSG_NOSIGNAL: a closed peer must not kill the program with SIGPIPE. */
		ssize_t k = sendmsg(fd, &mh, MSG_NOSIGNAL);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				if (gm_wait(fd, POLLOUT, why, wl) < 0)
					return -1;
				continue;
			}
			char eb[128];
			snprintf(why, wl, "send: %s", gm_errstr(errno, eb, sizeof eb));
			return -1;
		}
		size_t done = (size_t)k;
		while (n > 0 && done >= iov->iov_len) {
			done -= iov->iov_len;
			iov++;
			n--;
		}
		if (n > 0) {
			iov->iov_base = (char *)iov->iov_base + done;
			iov->iov_len -= done;
		}
	}
	return 0;
}

static int gm_send(int fd, const void *p, size_t len, char *why, size_t wl)
{
	struct iovec iov = {.iov_base = (void *)p, .iov_len = len};
	return gm_sendv(fd, &iov, 1, why, wl);
}

static int gm_recv(int fd, void *p, size_t n, char *why, size_t wl)
{
	if (gm_tls_on())
		return gm_tls_recv(p, n, why, wl);
	char *b = p;
	while (n > 0) {
		ssize_t k = recv(fd, b, n, 0);
		if (k > 0) {
			b += k;
			n -= (size_t)k;
			continue;
		}
		if (k == 0) {
			snprintf(why, wl, "the server closed the connection");
			return -1;
		}
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK) {
			if (gm_wait(fd, POLLIN, why, wl) < 0)
				return -1;
			continue;
		}
		char eb[128];
		snprintf(why, wl, "recv: %s", gm_errstr(errno, eb, sizeof eb));
		return -1;
	}
	return 0;
}

/* ---- connecting ---- */

static int gm_timeout_from_env(void)
{
	const char *s = getenv("GPUMUX_REMOTE_TIMEOUT");
	if (s == NULL || *s == 0)
		return GM_DEFAULT_TIMEOUT_MS;
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno != 0 || end == s || *end != 0 || !(v > 0) || v > 86400) {
		gm_log("GPUMUX_REMOTE_TIMEOUT=%s is not a number of seconds in (0, 86400]; using %d", s,
		       GM_DEFAULT_TIMEOUT_MS / 1000);
		return GM_DEFAULT_TIMEOUT_MS;
	}
	int ms = (int)(v * 1000);
	return ms < 1 ? 1 : ms;
}

static void gm_tune_tcp(int fd)
{
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	/* Room for a few chunks in flight each way. */
	int bufsz = 4 * GM_CHUNK_SIZE;
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bufsz, sizeof bufsz);
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bufsz, sizeof bufsz);
	/* A peer that vanishes without a FIN (host down, partition) is found
	 * by keepalive probes even while a call waits for a long kernel. */
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
#ifdef TCP_KEEPIDLE
	int idle = 15, intvl = 5, cnt = 3;
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
#endif
}

/* gm_connect_fd connects a non-blocking socket within the timeout. */
static int gm_connect_fd(int family, const struct sockaddr *sa, socklen_t salen, char *why, size_t wl)
{
	char eb[128];
	int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		snprintf(why, wl, "socket: %s", gm_errstr(errno, eb, sizeof eb));
		return -1;
	}
	int64_t deadline = gm_now_ms() + gm.timeout_ms;
	for (;;) {
		if (connect(fd, sa, salen) == 0)
			return fd;
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN && family == AF_UNIX) {
			/* A unix socket's backlog is full: retry until the deadline. */
			if (gm_now_ms() >= deadline) {
				snprintf(why, wl, "connect: the server's backlog stayed full");
				break;
			}
			struct timespec ts = {.tv_sec = 0, .tv_nsec = 10 * 1000 * 1000};
			nanosleep(&ts, NULL);
			continue;
		}
		if (errno != EINPROGRESS) {
			snprintf(why, wl, "connect: %s", gm_errstr(errno, eb, sizeof eb));
			break;
		}
		if (gm_wait(fd, POLLOUT, why, wl) < 0) {
			snprintf(why, wl, "connect: no answer within %d.%03d s (GPUMUX_REMOTE_TIMEOUT)",
				 gm.timeout_ms / 1000, gm.timeout_ms % 1000);
			break;
		}
		int err = 0;
		socklen_t el = sizeof err;
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0)
			err = errno;
		if (err == 0)
			return fd;
		snprintf(why, wl, "connect: %s", gm_errstr(err, eb, sizeof eb));
		break;
	}
	close(fd);
	return -1;
}

static int gm_dial(const char *addr, char *why, size_t wl)
{
	if (strncmp(addr, "unix:", 5) == 0) {
		const char *path = addr + 5;
		struct sockaddr_un su;
		memset(&su, 0, sizeof su);
		su.sun_family = AF_UNIX;
		size_t n = strlen(path);
		if (n == 0 || n >= sizeof su.sun_path) {
			snprintf(why, wl, "unix socket path of %zu bytes (1 to %zu)", n, sizeof su.sun_path - 1);
			return -1;
		}
		memcpy(su.sun_path, path, n);
		if (path[0] == '@')
			su.sun_path[0] = 0; /* abstract socket */
		socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + (path[0] == '@' ? 0 : 1));
		return gm_connect_fd(AF_UNIX, (struct sockaddr *)&su, len, why, wl);
	}

	/* host:port, [v6]:port */
	char host[256];
	const char *port;
	if (addr[0] == '[') {
		const char *end = strchr(addr, ']');
		if (end == NULL || end[1] != ':' || (size_t)(end - addr - 1) >= sizeof host) {
			snprintf(why, wl, "want host:port, [ipv6]:port or unix:/path");
			return -1;
		}
		memcpy(host, addr + 1, (size_t)(end - addr - 1));
		host[end - addr - 1] = 0;
		port = end + 2;
	} else {
		const char *colon = strrchr(addr, ':');
		if (colon == NULL || colon == addr || (size_t)(colon - addr) >= sizeof host) {
			snprintf(why, wl, "want host:port, [ipv6]:port or unix:/path");
			return -1;
		}
		memcpy(host, addr, (size_t)(colon - addr));
		host[colon - addr] = 0;
		port = colon + 1;
	}
	if (*port == 0) {
		snprintf(why, wl, "no port");
		return -1;
	}
	struct addrinfo hints, *res = NULL;
	memset(&hints, 0, sizeof hints);
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	int rc = getaddrinfo(host, port, &hints, &res);
	if (rc != 0) {
		snprintf(why, wl, "resolving %s: %s", host, gai_strerror(rc));
		return -1;
	}
	int fd = -1;
	for (struct addrinfo *ai = res; ai != NULL && fd < 0; ai = ai->ai_next) {
		fd = gm_connect_fd(ai->ai_family, ai->ai_addr, ai->ai_addrlen, why, wl);
		if (fd >= 0)
			gm_tune_tcp(fd);
	}
	freeaddrinfo(res);
	return fd;
}

static void gm_identity(char *buf, size_t len)
{
	char host[256] = "?";
	if (gethostname(host, sizeof host - 1) < 0)
		strcpy(host, "?");
	host[sizeof host - 1] = 0;
	char exe[1024];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (n > 0)
		exe[n] = 0;
	else
		snprintf(exe, sizeof exe, "%s", program_invocation_name);
	snprintf(buf, len, "%s/%d/%s", host, (int)getpid(), exe);
}

/* gm_handshake opens the connection fd: with proto.Hello, or, given the
 * ticket of a moved session, with proto.Resume (the same Hello and the
 * ticket); then it reads proto.Welcome. */
static int gm_handshake(int fd, const unsigned char *ticket, char *why, size_t wl)
{
	const char *tok = getenv("GPUMUX_REMOTE_TOKEN");
	if (tok == NULL)
		tok = "";
	size_t tl = strlen(tok);
	if (tl > GM_MAX_STRING) {
		snprintf(why, wl, "GPUMUX_REMOTE_TOKEN is %zu bytes, at most %u", tl, GM_MAX_STRING);
		return -1;
	}
	char id[GM_MAX_STRING + 1];
	gm_identity(id, sizeof id);
	size_t il = strlen(id);

	size_t hlen = 4 + 4 + 4 + tl + 4 + il;
	/* A Resume wraps the Hello in length-prefixed bytes, the ticket after. */
	size_t pre = ticket != NULL ? 4 : 0;
	size_t plen = pre + hlen + (ticket != NULL ? 4 + GM_TICKET_SIZE : 0);
	unsigned char *f = malloc(GM_HEADER_SIZE + plen);
	if (f == NULL) {
		snprintf(why, wl, "out of memory");
		return -1;
	}
	unsigned char *p = f + GM_HEADER_SIZE;
	if (ticket != NULL)
		gm_le32(p, (uint32_t)hlen);
	p += pre;
	gm_le32(p, GM_MAGIC);
	gm_le32(p + 4, GM_PROTO_VERSION);
	gm_le32(p + 8, (uint32_t)tl);
	memcpy(p + 12, tok, tl);
	gm_le32(p + 12 + tl, (uint32_t)il);
	memcpy(p + 16 + tl, id, il);
	if (ticket != NULL) {
		gm_le32(p + hlen, GM_TICKET_SIZE);
		memcpy(p + hlen + 4, ticket, GM_TICKET_SIZE);
	}
	gm_header(f, (uint32_t)plen, ticket != NULL ? GM_OP_RESUME : 0, 0, 0, 0);
	int rc = gm_send(fd, f, GM_HEADER_SIZE + plen, why, wl);
	free(f);
	if (rc < 0)
		return -1;

	unsigned char h[GM_HEADER_SIZE];
	if (gm_recv(fd, h, sizeof h, why, wl) < 0)
		return -1;
	uint32_t n = gm_rd32(h);
	if (n < GM_HEADER_SIZE - 4 || n - (GM_HEADER_SIZE - 4) > 4 + 4 + GM_MAX_STRING + 8) {
		snprintf(why, wl, "protocol error: a handshake answer of length %u", n);
		return -1;
	}
	if (gm_rd16(h + 4) != 0 || !(gm_rd16(h + 6) & GM_FLAG_REPLY)) {
		snprintf(why, wl, "protocol error: the handshake was answered with op %u flags %#x", gm_rd16(h + 4),
			 gm_rd16(h + 6));
		return -1;
	}
	size_t size = n - (GM_HEADER_SIZE - 4);
	unsigned char w[4 + 4 + GM_MAX_STRING + 8];
	if (gm_recv(fd, w, size, why, wl) < 0)
		return -1;
	if (size < 16 || gm_rd32(w + 4) != size - 16) {
		snprintf(why, wl, "protocol error: a malformed handshake answer (%zu bytes)", size);
		return -1;
	}
	CUresult r = (CUresult)(int32_t)gm_rd32(w);
	uint32_t ml = gm_rd32(w + 4);
	if (r != CUDA_SUCCESS) {
		snprintf(why, wl, "the server refused the connection (%s): %.*s", gm_error_name(r), (int)ml, (const char *)w + 8);
		return -1;
	}
	gm.quota = gm_rd64(w + 8 + ml);
	return 0;
}

static CUresult gm_connect_locked(void)
{
	char why[512] = "";
	gm.timeout_ms = gm_timeout_from_env();
	const char *addr = getenv("GPUMUX_REMOTE_ADDR");
	if (addr == NULL || *addr == 0) {
		snprintf(gm.addr, sizeof gm.addr, "(none)");
		snprintf(why, sizeof why, "GPUMUX_REMOTE_ADDR is not set");
	} else if (strlen(addr) >= sizeof gm.addr) {
		snprintf(gm.addr, sizeof gm.addr, "%.64s...", addr);
		snprintf(why, sizeof why, "GPUMUX_REMOTE_ADDR is too long");
	} else {
		snprintf(gm.addr, sizeof gm.addr, "%s", addr);
		int fd = gm_dial(addr, why, sizeof why);
		if (fd >= 0) {
			if (gm_tls_start(fd, addr, why, sizeof why) == 0 && gm_handshake(fd, NULL, why, sizeof why) == 0) {
				gm.fd = fd;
				gm.seq = 0;
				gm.capture_mode = 0;
				gm.state = GM_UP;
				return CUDA_SUCCESS;
			}
			gm_tls_end();
			close(fd);
		}
	}
	gm.state = GM_UNREACHABLE;
	gm_log("cannot use gpumux-remoted at %s: %s; CUDA reports no device (CUDA_ERROR_NO_DEVICE)", gm.addr, why);
	return CUDA_ERROR_NO_DEVICE;
}

static CUresult gm_ready_locked(void)
{
	switch (gm.state) {
	case GM_UP:
		return CUDA_SUCCESS;
	case GM_UNREACHABLE:
		return CUDA_ERROR_NO_DEVICE;
	case GM_LOST:
		return CUDA_ERROR_UNKNOWN;
	case GM_IDLE:
		break;
	}
	return gm_connect_locked();
}

/* ---- reply cache ---- */

static unsigned gm_hash(int op, const unsigned char *p, size_t n)
{
	uint32_t h = 2166136261u ^ (uint32_t)op;
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 16777619u;
	return h % GM_CACHE_BUCKETS;
}

static int gm_cache_get_locked(gm_msg *m)
{
	const unsigned char *key = m->buf + GM_HEADER_SIZE;
	size_t klen = m->len - GM_HEADER_SIZE;
	for (struct gm_centry *e = gm.cache[gm_hash(m->op, key, klen)]; e; e = e->next) {
		if (e->op != m->op || e->klen != klen || memcmp(e->data, key, klen) != 0)
			continue;
		if (gm_grow(m, GM_HEADER_SIZE + e->rlen) < 0)
			return 0;
		memcpy(m->buf + GM_HEADER_SIZE, e->data + e->klen, e->rlen);
		m->len = GM_HEADER_SIZE + e->rlen;
		m->pos = GM_HEADER_SIZE + 4;
		return 1;
	}
	return 0;
}

static void gm_cache_put_locked(int op, int object, const unsigned char *key, size_t klen, const gm_msg *m)
{
	size_t rlen = m->len - GM_HEADER_SIZE;
	if (gm.cache_n >= GM_CACHE_MAX_ENTRIES || rlen > GM_MAX_STRING + 64)
		return;
	unsigned b = gm_hash(op, key, klen);
	for (struct gm_centry *e = gm.cache[b]; e; e = e->next)
		if (e->op == op && e->klen == klen && memcmp(e->data, key, klen) == 0)
			return;
	struct gm_centry *e = malloc(sizeof *e + klen + rlen);
	if (e == NULL)
		return;
	e->op = op;
	e->object = object;
	e->klen = (uint32_t)klen;
	e->rlen = (uint32_t)rlen;
	memcpy(e->data, key, klen);
	memcpy(e->data + klen, m->buf + GM_HEADER_SIZE, rlen);
	e->next = gm.cache[b];
	gm.cache[b] = e;
	gm.cache_n++;
}

/* ---- following a move ---- */

/* gm_follow_locked reads where the session went after a reply
 * GM_RESULT_MOVED to the call of sequence number seq (proto.MovedTo),
 * connects there (over TLS as gm_tls_start decides for the address, as on
 * the first connection) and resumes the session with the ticket; the
 * connection to the source is closed. It returns 0, or -1 with why, which
 * names the target once it is known: the caller loses the connection. */
static int gm_follow_locked(uint32_t seq, char *why, size_t wl)
{
	char err[400];
	unsigned char h[GM_HEADER_SIZE];
	if (gm_recv(gm.fd, h, sizeof h, err, sizeof err) < 0) {
		snprintf(why, wl, "reading where the session moved: %s", err);
		return -1;
	}
	enum { max = 4 + GM_MAX_STRING + 4 + GM_TICKET_SIZE };
	uint32_t n = gm_rd32(h);
	int op = gm_rd16(h + 4);
	uint16_t fl = gm_rd16(h + 6);
	if (op != GM_OP_MOVED || fl != GM_FLAG_REPLY || gm_rd32(h + 8) != seq) {
		snprintf(why, wl, "protocol error: op %d flags %#x seq %u after a Moved reply to seq %u", op, fl,
			 gm_rd32(h + 8), seq);
		return -1;
	}
	if (n < GM_HEADER_SIZE - 4 || n - (GM_HEADER_SIZE - 4) > max) {
		snprintf(why, wl, "protocol error: a MovedTo frame of length %u", n);
		return -1;
	}
	size_t size = n - (GM_HEADER_SIZE - 4);
	unsigned char p[max];
	if (gm_recv(gm.fd, p, size, err, sizeof err) < 0) {
		snprintf(why, wl, "reading where the session moved: %s", err);
		return -1;
	}
	/* Addr (a string), then Ticket (bytes, GM_TICKET_SIZE of them),
	 * nothing after: proto.DecodeMovedTo. */
	uint32_t al = size >= 4 ? gm_rd32(p) : 0;
	if (size < 4 || al == 0 || al > size - 4 || size - 4 - al != 4 + GM_TICKET_SIZE ||
	    gm_rd32(p + 4 + al) != GM_TICKET_SIZE) {
		snprintf(why, wl, "protocol error: a malformed MovedTo (%zu bytes)", size);
		return -1;
	}
	const unsigned char *ticket = p + 4 + al + 4;
	/* proto.SplitAddr: "unix:PATH" or "/PATH" is a unix socket. */
	const char *pre = p[4] == '/' ? "unix:" : "";
	char to[sizeof gm.addr];
	if (memchr(p + 4, 0, al) != NULL || strlen(pre) + al >= sizeof to) {
		snprintf(why, wl, "protocol error: the session moved to an address of %u bytes (at most %zu, no NUL)",
			 al, sizeof to - 1 - strlen(pre));
		return -1;
	}
	snprintf(to, sizeof to, "%s%.*s", pre, (int)al, (const char *)p + 4);

	int fd = gm_dial(to, err, sizeof err);
	if (fd < 0) {
		snprintf(why, wl, "the session moved to %.200s, but connecting there failed: %.250s", to, err);
		return -1;
	}
	/* The source has let the session go: its connection is done. */
	gm_tls_end();
	close(gm.fd);
	gm.fd = -1;
	if (gm_tls_start(fd, to, err, sizeof err) < 0 || gm_handshake(fd, ticket, err, sizeof err) < 0) {
		gm_tls_end();
		close(fd);
		snprintf(why, wl, "the session moved to %.200s, but resuming it there failed: %.250s", to, err);
		return -1;
	}
	gm.fd = fd;
	gm.moves++;
	if (gm_debug())
		gm_log("debug: the session moved from %s to %s (move %d)", gm.addr, to, gm.moves);
	snprintf(gm.addr, sizeof gm.addr, "%s", to);
	return 0;
}

/* ---- calls ---- */

/* gm_roundtrip_locked sends m and, unless it is async, reads its reply
 * into m. A transport or protocol error loses the connection. A reply
 * GM_RESULT_MOVED (the server moved the session instead of running the
 * call) is followed (gm_follow_locked) and the call sent again, its host
 * data streamed again from the start: m's request stays in m->buf until a
 * reply other than that one. */
static CUresult gm_roundtrip_locked(gm_msg *m, uint64_t ctx)
{
	char why[512];
again:;
	uint32_t seq = ++gm.seq;
	if (seq == 0) /* 0 is the handshake's */
		seq = ++gm.seq;
	uint16_t flags = (m->flags & GM_ASYNC) ? GM_FLAG_ASYNC : 0;
	gm_header(m->buf, (uint32_t)(m->len - GM_HEADER_SIZE), m->op, flags, seq, ctx);
	if (gm_send(gm.fd, m->buf, m->len, why, sizeof why) < 0)
		return gm_lose_locked(why);

	/* Host memory streams straight from the caller's buffer, a chunk per
	 * data frame (ctx 0, as proto.Client sends them). */
	if (m->in != NULL) {
		const unsigned char *p = m->in;
		uint64_t left = m->stream_len;
		while (left > 0) {
			uint32_t n = left < GM_CHUNK_SIZE ? (uint32_t)left : GM_CHUNK_SIZE;
			unsigned char h[GM_HEADER_SIZE];
			gm_header(h, n, m->op, GM_FLAG_DATA, seq, 0);
			struct iovec iov[2] = {{.iov_base = h, .iov_len = sizeof h}, {.iov_base = (void *)p, .iov_len = n}};
			if (gm_sendv(gm.fd, iov, 2, why, sizeof why) < 0)
				return gm_lose_locked(why);
			p += n;
			left -= n;
		}
	}
	if (m->flags & GM_ASYNC)
		return CUDA_SUCCESS;

	uint64_t got = 0;
	for (;;) {
		unsigned char h[GM_HEADER_SIZE];
		if (gm_recv(gm.fd, h, sizeof h, why, sizeof why) < 0)
			return gm_lose_locked(why);
		uint32_t n = gm_rd32(h);
		int op = gm_rd16(h + 4);
		uint16_t fl = gm_rd16(h + 6);
		uint32_t rseq = gm_rd32(h + 8);
		if (n < GM_HEADER_SIZE - 4 || n - (GM_HEADER_SIZE - 4) > GM_MAX_PAYLOAD) {
			snprintf(why, sizeof why, "protocol error: a frame of length %u", n);
			return gm_lose_locked(why);
		}
		uint32_t size = n - (GM_HEADER_SIZE - 4);
		if (rseq != seq || op != m->op) {
			snprintf(why, sizeof why, "protocol error: got op %d seq %u waiting for op %d (%s) seq %u", op, rseq,
				 m->op, gm_op_name(m->op), seq);
			return gm_lose_locked(why);
		}
		if (fl & GM_FLAG_DATA) {
			if (m->out == NULL || size > m->stream_len - got) {
				snprintf(why, sizeof why, "protocol error: %s: %llu bytes of data past the %llu asked for",
					 gm_op_name(m->op), (unsigned long long)(got + size),
					 (unsigned long long)(m->out ? m->stream_len : 0));
				return gm_lose_locked(why);
			}
			if (gm_recv(gm.fd, (unsigned char *)m->out + got, size, why, sizeof why) < 0)
				return gm_lose_locked(why);
			got += size;
			continue;
		}
		if (!(fl & GM_FLAG_REPLY)) {
			snprintf(why, sizeof why, "protocol error: flags %#x waiting for the reply to %s", fl,
				 gm_op_name(m->op));
			return gm_lose_locked(why);
		}
		if (size < 4) {
			snprintf(why, sizeof why, "protocol error: a reply of %u bytes to %s", size, gm_op_name(m->op));
			return gm_lose_locked(why);
		}
		/* A Moved reply is a result alone, and must not overwrite the
		 * request, which goes out again: a 4-byte reply is read apart
		 * first. A longer one is read whole, with no more recv calls
		 * than before moves existed. */
		if (size == 4) {
			unsigned char rb[4];
			if (gm_recv(gm.fd, rb, sizeof rb, why, sizeof why) < 0)
				return gm_lose_locked(why);
			if (gm_rd32(rb) == GM_RESULT_MOVED) {
				if (gm_follow_locked(seq, why, sizeof why) < 0)
					return gm_lose_locked(why);
				goto again;
			}
			if (gm_grow(m, GM_HEADER_SIZE + sizeof rb) < 0)
				return gm_lose_locked("out of host memory for a reply");
			memcpy(m->buf + GM_HEADER_SIZE, rb, sizeof rb);
		} else {
			if (gm_grow(m, GM_HEADER_SIZE + (size_t)size) < 0)
				return gm_lose_locked("out of host memory for a reply");
			if (gm_recv(gm.fd, m->buf + GM_HEADER_SIZE, size, why, sizeof why) < 0)
				return gm_lose_locked(why);
			if (gm_rd32(m->buf + GM_HEADER_SIZE) == GM_RESULT_MOVED) {
				snprintf(why, sizeof why, "protocol error: a Moved reply of %u bytes to %s", size,
					 gm_op_name(m->op));
				return gm_lose_locked(why);
			}
		}
		m->len = GM_HEADER_SIZE + (size_t)size;
		m->pos = GM_HEADER_SIZE + 4;
		CUresult r = (CUresult)(int32_t)gm_rd32(m->buf + GM_HEADER_SIZE);
		if (r == CUDA_SUCCESS && m->out != NULL && got != m->stream_len) {
			/* Success with part of the data would be a silent wrong result. */
			snprintf(why, sizeof why, "protocol error: %s succeeded with %llu of %llu bytes", gm_op_name(m->op),
				 (unsigned long long)got, (unsigned long long)m->stream_len);
			return gm_lose_locked(why);
		}
		return r;
	}
}

/* gm_sync_capture_mode_locked gives the server's worker thread the
 * calling thread's capture interaction mode before one of its calls, when
 * it is not the one last sent: the server runs every thread's calls on one
 * thread, and the driver judges a call by its thread's mode
 * (cuThreadExchangeStreamCaptureMode). An async frame: an error comes with
 * the next reply. */
static CUresult gm_sync_capture_mode_locked(uint64_t ctx)
{
	int mode = gm_thread_capture_mode();
	if (mode == gm.capture_mode)
		return CUDA_SUCCESS;
	gm_msg q;
	gm_msg_init(&q, GM_OP_cuThreadExchangeStreamCaptureMode, GM_ASYNC);
	gm_put_u32(&q, (uint32_t)mode);
	CUresult r = gm_roundtrip_locked(&q, ctx);
	gm_msg_free(&q);
	if (r == CUDA_SUCCESS)
		gm.capture_mode = mode;
	return r;
}

CUresult gm_call(gm_msg *m)
{
	switch (m->bad) {
	case 0:
		break;
	case GM_BAD_NOMEM:
		return gm_refuse(gm_op_name(m->op), "(out of host memory)", CUDA_ERROR_OUT_OF_MEMORY);
	default:
		return gm_refuse(gm_op_name(m->op), "(over the protocol's limits)", CUDA_ERROR_INVALID_VALUE);
	}
	if ((m->flags & GM_ASYNC) && m->out != NULL)
		return CUDA_ERROR_INVALID_VALUE; /* an async call has no outputs */
	uint64_t ctx = gm_current_ctx();
	unsigned char key[GM_CACHE_MAX_KEY];
	size_t klen = m->len - GM_HEADER_SIZE;
	int cache = (m->flags & GM_CACHE) && !(m->flags & GM_ASYNC) && m->in == NULL && m->out == NULL &&
		    klen <= sizeof key;
	if (cache)
		memcpy(key, m->buf + GM_HEADER_SIZE, klen);

	pthread_mutex_lock(&gm_mu);
	CUresult r = gm_ready_locked();
	if (r == CUDA_SUCCESS) {
		if (cache && gm_cache_get_locked(m)) {
			pthread_mutex_unlock(&gm_mu);
			return CUDA_SUCCESS;
		}
		r = gm_sync_capture_mode_locked(ctx);
		if (r == CUDA_SUCCESS)
			r = gm_roundtrip_locked(m, ctx);
		if (r == CUDA_SUCCESS && cache && gm.state == GM_UP)
			gm_cache_put_locked(m->op, (m->flags & GM_CACHE_OBJECT) != 0, key, klen, m);
		if (r == CUDA_SUCCESS && (m->flags & GM_UNCACHE))
			gm_cache_forget_objects_locked();
	}
	pthread_mutex_unlock(&gm_mu);
	if ((r != CUDA_SUCCESS && gm_debug()) || gm_debug() > 1)
		gm_log("debug: %s returned %d", gm_op_name(m->op), (int)r);
	return r;
}

CUresult gm_reply_done(gm_msg *m)
{
	if (!m->bad && m->pos == m->len)
		return CUDA_SUCCESS;
	/* The server speaks another protocol: trust nothing it says. */
	char why[160];
	snprintf(why, sizeof why, "protocol error: a malformed reply to %s (%zu bytes, %s)", gm_op_name(m->op),
		 m->len - GM_HEADER_SIZE, m->bad ? "too short" : "trailing bytes");
	pthread_mutex_lock(&gm_mu);
	gm_lose_locked(why);
	pthread_mutex_unlock(&gm_mu);
	return CUDA_ERROR_UNKNOWN;
}

/* ---- fork ---- */

/* The forking thread tries to take gm_mu so that the child inherits a
 * consistent state; it does not wait for it (another thread may be in a
 * long synchronize), and then the child starts from scratch without
 * touching what that thread was changing. */
static __thread int gm_fork_locked;

static void gm_atfork_prepare(void)
{
	gm_interposer_atfork_prepare();
	gm_fork_locked = pthread_mutex_trylock(&gm_mu) == 0;
}

static void gm_atfork_parent(void)
{
	if (gm_fork_locked)
		pthread_mutex_unlock(&gm_mu);
	gm_fork_locked = 0;
	gm_interposer_atfork_parent();
}

static void gm_atfork_child(void)
{
	/* The child is a new client: it must not write on the parent's
	 * connection (close, not shutdown, which would cut the parent's). */
	if (gm.fd >= 0)
		close(gm.fd);
	gm.fd = -1;
	gm_tls_forget(); /* the parent's session: not this process's to use or wipe */
	if (gm_fork_locked) {
		gm_cache_clear_locked();
	} else {
		/* Another thread was inside: its entries may be half-linked. */
		memset(gm.cache, 0, sizeof gm.cache);
		gm.cache_n = 0;
	}
	gm.state = GM_IDLE;
	gm.seq = 0;
	gm.quota = 0;
	gm.capture_mode = 0;
	gm.moves = 0;
	gm_fork_locked = 0;
	pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
	memcpy(&gm_mu, &fresh, sizeof fresh);
	gm_interposer_atfork_child();
}

__attribute__((constructor)) static void gm_wire_init(void)
{
	pthread_atfork(gm_atfork_prepare, gm_atfork_parent, gm_atfork_child);
}
