/*
 * The node-wide view of a GPU's replicas for the compute limit
 * (README.md, "Compute"): a registry file in GPUMUX_LIMITER_NODE, a
 * directory shared by every replica of one GPU, and the layout of the
 * replicas' time windows computed from it.
 *
 *   header (64 bytes): "GPUMUXSC", version 1, slot count 256, slot size 128
 *   256 slots of 128 bytes, one per live process that launches work:
 *     0   u64 active     CLOCK_MONOTONIC ns of its last launch or wait
 *     8   u32 percent    its share's compute_percent
 *     12  u32 policy     0 cap, 1 share
 *     16  u64 tag        random, chosen when the slot is claimed
 *     24  u64 check      of index, percent, policy, tag and share
 *     32  char share[96] its share's ID, NUL-padded
 *
 * Liveness is a POSIX lock on a slot's first byte, as in lim_acct.c. A
 * slot that is not live or whose check word is wrong is ignored: at worst
 * a damaged registry makes replicas overlap for a while, never crashes.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lim.h"

#define SC_MAGIC "GPUMUXSC"
#define SC_HDR 64u
#define SC_SLOTS 256u
#define SC_SLOT 128u
#define SC_SIZE (SC_HDR + SC_SLOTS * SC_SLOT)
#define SC_ID 96u

static struct {
	int fd;
	int slot;
	uint64_t tag;
	char share[SC_ID];
	unsigned pct;
	int policy;
	char path[LIM_PATH_MAX];
} S = {.fd = -1, .slot = -1};





static off_t slot_off(unsigned i)
{
	return (off_t)(SC_HDR + (uint64_t)i * SC_SLOT);
}

static uint64_t check_of(unsigned idx, uint32_t pct, uint32_t policy, uint64_t tag, const unsigned char *share)
{
	uint64_t x = 0x6770756d75787363ull ^ ((uint64_t)idx << 40) ^ ((uint64_t)pct << 8) ^ policy ^
		     (tag * 0x9E3779B97F4A7C15ull);
	for (unsigned i = 0; i < SC_ID; i++) {
		x ^= share[i];
		x *= 0x100000001b3ull;
	}
	x ^= x >> 31;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 29;
	return x | 1;
}


static int lock1(off_t off)
{
	struct flock l = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = off, .l_len = 1};
	int r;
	while ((r = fcntl(S.fd, F_SETLK, &l)) != 0 && errno == EINTR)
		;
	return r;
}

int lim_sched_open(const char *dir, const char *share, unsigned pct, int policy, char *why, size_t whysize)
{
	if (S.fd >= 0)
		return 0;
	int n = snprintf(S.path, sizeof S.path, "%s/sched.v1", dir);
	if (n < 0 || (size_t)n >= sizeof S.path) {
		snprintf(why, whysize, "%s: the path is too long", dir);
		return -1;
	}
	int fd = open(S.path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666);
	if (fd < 0) {
		snprintf(why, whysize, "%s: %s", S.path, strerror(errno));
		return -1;
	}
	struct stat st;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		snprintf(why, whysize, "%s: not a regular file", S.path);
		return -1;
	}
	if (st.st_uid == geteuid())
		fchmod(fd, 0666); /* every replica's user writes it */
	S.fd = fd;
	memset(S.share, 0, sizeof S.share);
	size_t idn = strnlen(share, sizeof S.share - 1);
	memcpy(S.share, share, idn);
	S.pct = pct;
	S.policy = policy;
	/* The header, under a lock on byte 0 (creation races). */
	struct flock l = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
	while (fcntl(fd, F_SETLKW, &l) != 0 && errno == EINTR)
		;
	unsigned char want[SC_HDR] = {0}, got[SC_HDR];
	memcpy(want, SC_MAGIC, 8);
	lim_put32(want + 8, 1);
	lim_put32(want + 12, SC_SLOTS);
	lim_put32(want + 16, SC_SLOT);
	lim_put32(want + 20, SC_HDR);
	if (pread(fd, got, sizeof got, 0) != (ssize_t)sizeof got || memcmp(got, want, sizeof want) != 0 ||
	    fstat(fd, &st) != 0 || st.st_size != (off_t)SC_SIZE) {
		if (lim_pwrite_all(S.fd, want, sizeof want, 0) != 0 || ftruncate(fd, SC_SIZE) != 0) {
			/* Still usable read-only; this process just will not
			 * be seen. */
		}
	}
	l.l_type = F_UNLCK;
	fcntl(fd, F_SETLK, &l);
	for (unsigned i = 0; i < SC_SLOTS; i++) {
		if (lock1(slot_off(i)) != 0)
			continue;
		S.slot = (int)i;
		if (getrandom(&S.tag, sizeof S.tag, GRND_NONBLOCK) != (ssize_t)sizeof S.tag)
			S.tag = lim_now_ns() ^ ((uint64_t)getpid() << 32);
		S.tag |= 1;
		unsigned char s[SC_SLOT] = {0};
		lim_put64(s, lim_now_ns());
		lim_put32(s + 8, pct);
		lim_put32(s + 12, (uint32_t)policy);
		lim_put64(s + 16, S.tag);
		memcpy(s + 32, S.share, SC_ID);
		lim_put64(s + 24, check_of(i, pct, (uint32_t)policy, S.tag, s + 32));
		lim_pwrite_all(S.fd, s, sizeof s, slot_off(i));
		return 0;
	}
	snprintf(why, whysize, "%s: all %u slots are held by live processes", S.path, SC_SLOTS);
	return -1;
}

void lim_sched_touch(uint64_t now)
{
	if (S.fd < 0 || S.slot < 0)
		return;
	unsigned char b[8];
	lim_put64(b, now);
	lim_pwrite_all(S.fd, b, sizeof b, slot_off((unsigned)S.slot));
}

void lim_sched_forked(void)
{
	/* The child holds none of the parent's locks: it claims a slot of
	 * its own when it first launches. */
	if (S.fd >= 0)
		close(S.fd);
	S.fd = -1;
	S.slot = -1;
}

static int cmp_share(const void *a, const void *b)
{
	return strcmp(((const struct lim_sched_share *)a)->id, ((const struct lim_sched_share *)b)->id);
}

size_t lim_sched_read(struct lim_sched_share *out, size_t max, uint64_t now, uint64_t recent)
{
	size_t n = 0;
	if (max == 0)
		return 0;
	/* This process's own share is always there, and active. */
	memset(&out[0], 0, sizeof out[0]);
	memcpy(out[0].id, S.share, sizeof out[0].id);
	out[0].id[sizeof out[0].id - 1] = '\0';
	out[0].pct = S.pct;
	out[0].policy = S.policy;
	out[0].active = 1;
	out[0].procs = 1;
	n = 1;
	if (S.fd < 0)
		return n;
	static unsigned char slots[SC_SLOTS * SC_SLOT];
	memset(slots, 0, sizeof slots);
	if (pread(S.fd, slots, sizeof slots, SC_HDR) < 0)
		return n;
	unsigned char live[SC_SLOTS] = {0};
	off_t off = SC_HDR, end = (off_t)SC_SIZE;
	for (unsigned iter = 0; off < end && iter <= SC_SLOTS; iter++) {
		struct flock l = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = off, .l_len = end - off};
		if (fcntl(S.fd, F_GETLK, &l) != 0 || l.l_type == F_UNLCK)
			break;
		off_t s = l.l_start < off ? off : l.l_start;
		off_t e = (l.l_len == 0 || l.l_start + l.l_len > end) ? end : l.l_start + l.l_len;
		if (e <= s)
			e = s + 1;
		unsigned first = (unsigned)((s - SC_HDR) / SC_SLOT), last = (unsigned)((e - 1 - SC_HDR) / SC_SLOT);
		for (unsigned i = first; i <= last && i < SC_SLOTS; i++)
			live[i] = 1;
		off = slot_off(last + 1);
	}
	for (unsigned i = 0; i < SC_SLOTS; i++) {
		if (!live[i] || (int)i == S.slot)
			continue;
		const unsigned char *s = slots + (size_t)i * SC_SLOT;
		uint64_t active = lim_get64(s), tag = lim_get64(s + 16);
		uint32_t pct = lim_get32(s + 8), policy = lim_get32(s + 12);
		if (tag == 0 || lim_get64(s + 24) != check_of(i, pct, policy, tag, s + 32))
			continue;
		if (pct < 1 || pct > 100 || policy > 1 || memchr(s + 32, '\0', SC_ID) == NULL || s[32] == '\0')
			continue;
		const char *id = (const char *)(s + 32);
		int is_active = active <= now + 1000000000ull && now - (active < now ? active : now) <= recent;
		size_t j;
		for (j = 0; j < n; j++)
			if (strcmp(out[j].id, id) == 0)
				break;
		if (j == n) {
			if (n == max)
				continue;
			memset(&out[n], 0, sizeof out[n]);
			memcpy(out[n].id, id, strlen(id) + 1);
			out[n].pct = pct;
			out[n].policy = (int)policy;
			n++;
		}
		if (is_active) {
			out[j].active = 1;
			out[j].procs++;
		}
	}
	qsort(out, n, sizeof out[0], cmp_share);
	return n;
}

/* replica_index is n of "<device>/<kind>/<n>", or -1. */
static int replica_index(const char *id)
{
	const char *p = strrchr(id, '/');
	if (p == NULL || p[1] == '\0')
		return -1;
	int n = 0;
	for (p++; *p; p++) {
		if (*p < '0' || *p > '9' || n > 100000)
			return -1;
		n = n * 10 + (*p - '0');
	}
	return n;
}

void lim_sched_layout(const struct lim_sched_share *s, size_t n, const char *me, int have_node, uint64_t period,
		      uint64_t *off, uint64_t *len)
{
	*off = 0;
	*len = period;
	size_t mi = n;
	for (size_t i = 0; i < n; i++)
		if (strcmp(s[i].id, me) == 0)
			mi = i;
	if (mi == n)
		return;
	if (!have_node) {
		/* Alone as far as this process can see: the window of the
		 * replica's index, as if the replicas were equal. */
		unsigned pct = s[mi].pct;
		int idx = replica_index(me);
		uint64_t start = idx < 0 ? 0 : (uint64_t)idx * pct % 100;
		if (start + pct > 100)
			start = 100 - pct;
		*off = period * start / 100;
		*len = period * pct / 100;
		return;
	}
	/* Capped replicas always own their part; work-conserving ones that
	 * are active split what is left by their sizes. */
	uint64_t cap = 0, flex = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i].policy == LIM_POLICY_CAP)
			cap += s[i].pct;
		else if (s[i].active)
			flex += s[i].pct;
	}
	uint64_t capden = cap > 100 ? cap : 100;
	uint64_t caplen = 0;
	for (size_t i = 0; i < n; i++)
		if (s[i].policy == LIM_POLICY_CAP)
			caplen += period * s[i].pct / capden;
	uint64_t rest = period - caplen;
	uint64_t at = 0;
	for (size_t i = 0; i < n; i++) {
		uint64_t l = 0;
		if (s[i].policy == LIM_POLICY_CAP)
			l = period * s[i].pct / capden;
		else if (s[i].active && flex > 0)
			l = rest * s[i].pct / flex;
		if (i == mi) {
			*off = at;
			*len = l;
			return;
		}
		at += l;
	}
}
