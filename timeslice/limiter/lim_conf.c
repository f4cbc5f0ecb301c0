/*
 * The limits file, written by gpumux and mounted read-only:
 *
 *	version=1
 *	memory_bytes=<N>         0: no memory limit
 *	compute_percent=<1..100>
 *	policy=cap|share|off
 *	share=<share ID>
 *
 * One key=value per line, no spaces around '='; blank lines and lines
 * starting with '#' are skipped; unknown keys are ignored; each known key
 * must appear exactly once. Anything else makes the file malformed, and
 * the limiter fails closed (README.md).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lim.h"

/* The file is small; anything larger is not a limits file. */
#define LIM_CONF_MAX 65536

void lim_log(const char *fmt, ...)
{
	char buf[1024];
	int n = snprintf(buf, sizeof buf, "gpumux limiter: ");
	va_list ap;
	va_start(ap, fmt);
	int m = vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (m < 0)
		m = 0;
	size_t len = (size_t)n + (size_t)m;
	if (len > sizeof buf - 2)
		len = sizeof buf - 2;
	buf[len++] = '\n';
	ssize_t w = write(2, buf, len);
	(void)w;
}

int lim_env_path(char *buf, size_t size, const char *name, const char *def)
{
	const char *v = getenv(name);
	if (v == NULL || v[0] == '\0')
		v = def;
	size_t n = strlen(v);
	if (n >= size)
		return -1;
	memcpy(buf, v, n + 1);
	return 0;
}

/* parse_u64 parses a decimal number without sign or spaces. */
static int parse_u64(const char *s, size_t n, uint64_t *out)
{
	if (n == 0 || n > 20)
		return -1;
	uint64_t v = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		uint64_t d = (uint64_t)(s[i] - '0');
		if (v > (UINT64_MAX - d) / 10)
			return -1;
		v = v * 10 + d;
	}
	*out = v;
	return 0;
}

static int keyis(const char *k, size_t kn, const char *want)
{
	return strlen(want) == kn && memcmp(k, want, kn) == 0;
}

/* printable copies at most 40 bytes of s for a message, replacing
 * anything unprintable. */
static void printable(char *dst, size_t size, const char *s, size_t n)
{
	size_t j = 0;
	for (size_t i = 0; i < n && j + 4 < size; i++) {
		if (i == 40) {
			memcpy(dst + j, "...", 3);
			j += 3;
			break;
		}
		unsigned char ch = (unsigned char)s[i];
		dst[j++] = (ch >= 0x20 && ch < 0x7f) ? (char)ch : '?';
	}
	dst[j] = '\0';
}

#define FAIL(...)                                                                  \
	do {                                                                       \
		int _n = snprintf(c->err, sizeof c->err, "%s: ", c->path);         \
		if (_n < 0 || (size_t)_n >= sizeof c->err)                          \
			_n = 0;                                                    \
		snprintf(c->err + _n, sizeof c->err - (size_t)_n, __VA_ARGS__);    \
		c->ok = 0;                                                         \
		return;                                                            \
	} while (0)

void lim_config_parse(struct lim_config *c, const char *path, const char *text, size_t len)
{
	memset(c, 0, sizeof *c);
	snprintf(c->path, sizeof c->path, "%s", path);
	enum { K_VERSION, K_MEMORY, K_COMPUTE, K_POLICY, K_SHARE, K_N };
	static const char *const names[K_N] = {"version", "memory_bytes", "compute_percent", "policy", "share"};
	int seen[K_N] = {0};
	char shown[64];
	size_t pos = 0;
	unsigned lineno = 0;
	while (pos < len) {
		lineno++;
		const char *line = text + pos;
		const char *nl = memchr(line, '\n', len - pos);
		size_t n = nl ? (size_t)(nl - line) : len - pos;
		pos += n + (nl ? 1 : 0);
		if (n > 0 && line[n - 1] == '\r')
			n--;
		if (n == 0 || line[0] == '#')
			continue;
		if (memchr(line, '\0', n) != NULL)
			FAIL("line %u: a NUL byte", lineno);
		const char *eq = memchr(line, '=', n);
		if (eq == NULL || eq == line) {
			printable(shown, sizeof shown, line, n);
			FAIL("line %u: want key=value, got \"%s\"", lineno, shown);
		}
		const char *k = line, *v = eq + 1;
		size_t kn = (size_t)(eq - line), vn = n - kn - 1;
		int key = -1;
		for (int i = 0; i < K_N; i++)
			if (keyis(k, kn, names[i]))
				key = i;
		if (key < 0)
			continue; /* unknown keys are ignored */
		if (seen[key])
			FAIL("line %u: %s given twice", lineno, names[key]);
		seen[key] = 1;
		printable(shown, sizeof shown, v, vn);
		uint64_t u;
		switch (key) {
		case K_VERSION:
			if (parse_u64(v, vn, &u) != 0 || u != 1)
				FAIL("line %u: version=%s is not supported (want version=1)", lineno, shown);
			break;
		case K_MEMORY:
			if (parse_u64(v, vn, &u) != 0)
				FAIL("line %u: memory_bytes=%s is not a number of bytes", lineno, shown);
			c->memory_bytes = u;
			break;
		case K_COMPUTE:
			if (parse_u64(v, vn, &u) != 0 || u < 1 || u > 100)
				FAIL("line %u: compute_percent=%s is not in 1..100", lineno, shown);
			c->compute_percent = (unsigned)u;
			break;
		case K_POLICY:
			if (vn == 3 && memcmp(v, "cap", 3) == 0)
				c->policy = LIM_POLICY_CAP;
			else if (vn == 5 && memcmp(v, "share", 5) == 0)
				c->policy = LIM_POLICY_SHARE;
			else if (vn == 3 && memcmp(v, "off", 3) == 0)
				c->policy = LIM_POLICY_OFF;
			else
				FAIL("line %u: policy=%s is not cap, share or off", lineno, shown);
			break;
		case K_SHARE:
			if (vn == 0 || vn >= sizeof c->share)
				FAIL("line %u: share= must name the share (1 to %zu bytes)", lineno, sizeof c->share - 1);
			for (size_t i = 0; i < vn; i++)
				if ((unsigned char)v[i] <= 0x20 || (unsigned char)v[i] >= 0x7f)
					FAIL("line %u: share=%s has a character that is not printable ASCII", lineno,
					     shown);
			memcpy(c->share, v, vn);
			c->share[vn] = '\0';
			break;
		}
	}
	for (int i = 0; i < K_N; i++)
		if (!seen[i])
			FAIL("no %s= line", names[i]);
	c->ok = 1;
}

void lim_config_load(struct lim_config *c, const char *path)
{
	memset(c, 0, sizeof *c);
	snprintf(c->path, sizeof c->path, "%s", path);
	if (path[0] != '/')
		FAIL("not an absolute path");
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		FAIL("%s", strerror(errno));
	struct stat st;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		FAIL("not a regular file");
	}
	char *buf = malloc(LIM_CONF_MAX + 1);
	if (buf == NULL) {
		close(fd);
		FAIL("out of memory");
	}
	size_t len = 0;
	for (;;) {
		ssize_t r = read(fd, buf + len, LIM_CONF_MAX + 1 - len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			int e = errno;
			free(buf);
			close(fd);
			FAIL("%s", strerror(e));
		}
		if (r == 0)
			break;
		len += (size_t)r;
		if (len > LIM_CONF_MAX) {
			free(buf);
			close(fd);
			FAIL("larger than %d bytes", LIM_CONF_MAX);
		}
	}
	close(fd);
	char p[LIM_PATH_MAX];
	snprintf(p, sizeof p, "%s", path);
	lim_config_parse(c, p, buf, len);
	free(buf);
}

static struct lim_config config;
static pthread_once_t config_once = PTHREAD_ONCE_INIT;

static void config_init(void)
{
	char path[LIM_PATH_MAX];
	if (lim_env_path(path, sizeof path, "GPUMUX_LIMITER_LIMITS", LIM_DEFAULT_LIMITS) != 0) {
		memset(&config, 0, sizeof config);
		snprintf(config.err, sizeof config.err, "GPUMUX_LIMITER_LIMITS: the path is too long");
		return;
	}
	lim_config_load(&config, path);
}

const struct lim_config *lim_config(void)
{
	pthread_once(&config_once, config_init);
	return &config;
}

int lim_memory_limited(void)
{
	const struct lim_config *c = lim_config();
	return c->ok && c->policy != LIM_POLICY_OFF && c->memory_bytes > 0;
}

uint64_t lim_start_time(void)
{
	int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	char buf[1024];
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	/* The command name (field 2) may hold spaces and parentheses: the
	 * fields after it start at the last ')'. starttime is field 22. */
	char *p = strrchr(buf, ')');
	if (p == NULL)
		return 0;
	int field = 2;
	for (p++; *p != '\0'; p++) {
		if (*p == ' ') {
			field++;
			if (field == 22)
				return strtoull(p + 1, NULL, 10);
		}
	}
	return 0;
}

uint64_t lim_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
