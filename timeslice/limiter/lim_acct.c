/*
 * The share's memory accounting, shared by all its processes through one
 * file in the state directory (README.md, "Accounting"):
 *
 *   header (64 bytes): "GPUMUXLM", version 1, slot count 256, slot size 64
 *   256 slots of 64 bytes, one per live process that allocated:
 *     0  u64 bytes   device memory the process holds
 *     8  u64 tag     random, chosen when the slot is claimed
 *     16 u64 check   lim_acct_slot_check(index, bytes, tag)
 *     24 u32 pid     (for people reading the file; never trusted)
 *     32 u64 start   the process's start time in ticks (likewise)
 *
 * Who is alive comes from the kernel, not from the file: a process holds a
 * POSIX write lock on the first byte of its slot for as long as it lives
 * (the kernel drops it when the process dies, kill -9 included, or
 * execs: the descriptor is close-on-exec). A slot without a lock is
 * garbage from a dead process and is zeroed by whoever looks next. Every
 * update happens under a write lock on byte 0 (and the process's own
 * mutex, as POSIX locks belong to processes, not threads).
 *
 * The file is only ever read with pread (no mapping: a truncated file
 * cannot raise SIGBUS). The limit never comes from it; what it can say
 * is bounded: a live slot counts at most the limit, and a live slot whose
 * check word is wrong counts as the whole limit (damage is taken for
 * full use until its owner, who knows its true usage, rewrites it).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lim.h"

/* How long a process waits for another to release the file's lock before
 * an allocation fails (a holder that is stopped or misbehaves). */
#define LOCK_WAIT_NS (10ull * 1000000000ull)

static struct {
	pthread_mutex_t mu;
	char dir[LIM_PATH_MAX];
	char path[LIM_PATH_MAX];
	uint64_t limit;
	int fd;
	int ro;     /* opened read-only: can look, not account */
	int reader; /* lim_acct_init_reader: no locks taken, nothing written */
	dev_t dev;
	ino_t ino;
	int slot; /* claimed slot, -1 if none */
	uint64_t tag;
	uint64_t mine;
	uint64_t start;
	int logged_full, logged_rebuilt, logged_lock, logged_io;
} A = {
	.mu = PTHREAD_MUTEX_INITIALIZER,
	.fd = -1,
	.slot = -1,
};

uint64_t lim_acct_slot_check(uint32_t idx, uint64_t bytes, uint64_t tag)
{
	uint64_t x = bytes ^ (tag * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)idx << 48) ^ 0x6770756d75780001ull;
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return x | 1;
}





static off_t slot_off(unsigned i)
{
	return (off_t)(LIM_ACCT_HDR + (uint64_t)i * LIM_ACCT_SLOT);
}

void lim_acct_init_reader(const char *dir, uint64_t limit)
{
	lim_acct_init(dir, limit);
	pthread_mutex_lock(&A.mu);
	A.reader = 1;
	pthread_mutex_unlock(&A.mu);
}

void lim_acct_init(const char *dir, uint64_t limit)
{
	pthread_mutex_lock(&A.mu);
	snprintf(A.dir, sizeof A.dir, "%s", dir);
	int n = snprintf(A.path, sizeof A.path, "%s/%s", dir, LIM_ACCT_FILE);
	if (n < 0 || (size_t)n >= sizeof A.path)
		A.path[0] = '\0';
	A.limit = limit;
	pthread_mutex_unlock(&A.mu);
}

uint64_t lim_acct_limit(void)
{
	return A.limit;
}

static int open_locked(char *why, size_t whysize)
{
	if (A.fd >= 0)
		return 0;
	if (A.path[0] == '\0') {
		snprintf(why, whysize, "%s: the path is too long", A.dir);
		return -1;
	}
	A.ro = 0;
	int fd;
	if (A.reader) {
		fd = open(A.path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		A.ro = 1;
	} else if ((fd = open(A.path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0666)) >= 0) {
		/* Every process of the share may write it, whatever its user
		 * and umask: the directory is the share's alone. */
		if (fchmod(fd, 0666) != 0) {
			/* Not fatal: a process of another user may fail to
			 * write, and then fails closed. */
		}
	} else if (errno == EEXIST) {
		fd = open(A.path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0 && (errno == EACCES || errno == EROFS || errno == EPERM)) {
			fd = open(A.path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
			A.ro = fd >= 0;
		}
	} else if (errno == EACCES || errno == EROFS || errno == EPERM) {
		fd = open(A.path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		A.ro = fd >= 0;
	}
	if (fd < 0) {
		snprintf(why, whysize, "%s: %s", A.path, strerror(errno));
		return -1;
	}
	struct stat st;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		snprintf(why, whysize, "%s: not a regular file", A.path);
		return -1;
	}
	A.fd = fd;
	A.dev = st.st_dev;
	A.ino = st.st_ino;
	return 0;
}

/* close_locked closes the file, which drops this process's locks on it. */
static void close_locked(void)
{
	if (A.fd >= 0)
		close(A.fd);
	A.fd = -1;
	A.slot = -1;
}

/* current_locked reopens the file if it was deleted or replaced since it
 * was opened: all processes must count in the same file. */
static int current_locked(char *why, size_t whysize)
{
	if (open_locked(why, whysize) != 0)
		return -1;
	struct stat st;
	if (stat(A.path, &st) == 0 && st.st_dev == A.dev && st.st_ino == A.ino)
		return 0;
	close_locked();
	return open_locked(why, whysize);
}

static int lock_range(short type, off_t start, off_t len, int wait)
{
	struct flock l = {.l_type = type, .l_whence = SEEK_SET, .l_start = start, .l_len = len};
	uint64_t deadline = 0;
	long sleep_ns = 20000;
	for (;;) {
		if (fcntl(A.fd, F_SETLK, &l) == 0)
			return 0;
		if (errno == EINTR)
			continue;
		if (!wait || (errno != EAGAIN && errno != EACCES))
			return -1;
		uint64_t now = lim_now_ns();
		if (deadline == 0)
			deadline = now + LOCK_WAIT_NS;
		else if (now >= deadline)
			return -1;
		struct timespec ts = {0, sleep_ns};
		nanosleep(&ts, NULL);
		if (sleep_ns < 1000000)
			sleep_ns *= 2;
	}
}

static int global_lock(void)
{
	if (A.reader)
		return 0;
	if (lock_range(A.ro ? F_RDLCK : F_WRLCK, 0, 1, 1) == 0)
		return 0;
	if (!A.logged_lock) {
		A.logged_lock = 1;
		lim_log("%s: another process has held the accounting lock for over %llu s; allocations fail", A.path,
			LOCK_WAIT_NS / 1000000000ull);
	}
	return -1;
}

static void global_unlock(void)
{
	if (A.reader)
		return;
	struct flock l = {.l_type = F_UNLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
	fcntl(A.fd, F_SETLK, &l);
}


/* header_locked makes the header and the size right; with the lock held.
 * A wrong header is rewritten: slots are judged one by one anyway. */
static void header_locked(void)
{
	if (A.ro)
		return;
	unsigned char want[LIM_ACCT_HDR] = {0};
	memcpy(want, LIM_ACCT_MAGIC, 8);
	lim_put32(want + 8, LIM_ACCT_VERSION);
	lim_put32(want + 12, LIM_ACCT_SLOTS);
	lim_put32(want + 16, LIM_ACCT_SLOT);
	lim_put32(want + 20, LIM_ACCT_HDR);
	unsigned char got[LIM_ACCT_HDR];
	ssize_t n = pread(A.fd, got, sizeof got, 0);
	struct stat st;
	int bad_size = fstat(A.fd, &st) != 0 || st.st_size != (off_t)LIM_ACCT_SIZE;
	if (n == (ssize_t)sizeof got && memcmp(got, want, sizeof want) == 0 && !bad_size)
		return;
	int fresh = n == 0;
	if (lim_pwrite_all(A.fd, want, sizeof want, 0) != 0 || ftruncate(A.fd, LIM_ACCT_SIZE) != 0) {
		if (!A.logged_io) {
			A.logged_io = 1;
			lim_log("%s: cannot write: %s", A.path, strerror(errno));
		}
		return;
	}
	if (!fresh && !A.logged_rebuilt) {
		A.logged_rebuilt = 1;
		lim_log("%s: the accounting file was damaged (header or size); rewrote its header", A.path);
	}
}

static uint64_t new_tag(void)
{
	uint64_t t = 0;
	if (getrandom(&t, sizeof t, GRND_NONBLOCK) != (ssize_t)sizeof t)
		t = lim_now_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)&t;
	return t ? t : 1;
}

static int write_mine_locked(void)
{
	if (A.slot < 0 || A.ro)
		return A.slot < 0 ? 0 : -1;
	unsigned char s[LIM_ACCT_SLOT] = {0};
	lim_put64(s, A.mine);
	lim_put64(s + 8, A.tag);
	lim_put64(s + 16, lim_acct_slot_check((uint32_t)A.slot, A.mine, A.tag));
	lim_put32(s + 24, (uint32_t)getpid());
	lim_put64(s + 32, A.start);
	return lim_pwrite_all(A.fd, s, sizeof s, slot_off((unsigned)A.slot));
}

static int claim_locked(void)
{
	if (A.slot >= 0)
		return 0;
	if (A.ro)
		return -1;
	for (unsigned i = 0; i < LIM_ACCT_SLOTS; i++) {
		if (lock_range(F_WRLCK, slot_off(i), 1, 0) != 0)
			continue;
		A.slot = (int)i;
		A.tag = new_tag();
		if (A.start == 0)
			A.start = lim_start_time();
		if (write_mine_locked() != 0) {
			lock_range(F_UNLCK, slot_off(i), 1, 0);
			A.slot = -1;
			return -1;
		}
		return 0;
	}
	if (!A.logged_full) {
		A.logged_full = 1;
		lim_log("%s: all %u slots are held by live processes; this process cannot allocate", A.path,
			LIM_ACCT_SLOTS);
	}
	return -1;
}

static uint64_t sat_add(uint64_t a, uint64_t b, uint64_t max)
{
	if (a >= max || b >= max - a)
		return max;
	return a + b;
}

/* others_locked sums the usage of the other live processes, at most the
 * limit, and zeroes the slots of dead ones. */
static uint64_t others_locked(void)
{
	static const unsigned char zero[LIM_ACCT_SLOT];
	/* Static, not on the caller's stack: A.mu is held. */
	static unsigned char slots[LIM_ACCT_SLOTS * LIM_ACCT_SLOT];
	memset(slots, 0, sizeof slots);
	ssize_t n = pread(A.fd, slots, sizeof slots, LIM_ACCT_HDR);
	if (n < 0)
		return A.limit;
	unsigned char live[LIM_ACCT_SLOTS] = {0};
	/* Find the locked slots: each F_GETLK returns the first lock of
	 * another process in the range; at most one call per slot. */
	off_t off = LIM_ACCT_HDR, end = (off_t)LIM_ACCT_SIZE;
	for (unsigned iter = 0; off < end && iter <= LIM_ACCT_SLOTS; iter++) {
		struct flock l = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = off, .l_len = end - off};
		if (fcntl(A.fd, F_GETLK, &l) != 0) {
			/* Cannot tell: everyone not yet seen is alive. */
			for (off_t o = off; o < end; o += LIM_ACCT_SLOT)
				live[(o - LIM_ACCT_HDR) / LIM_ACCT_SLOT] = 1;
			break;
		}
		if (l.l_type == F_UNLCK)
			break;
		off_t s = l.l_start < off ? off : l.l_start;
		off_t e = (l.l_len == 0 || l.l_start + l.l_len > end) ? end : l.l_start + l.l_len;
		if (e <= s)
			e = s + 1;
		unsigned first = (unsigned)((s - LIM_ACCT_HDR) / LIM_ACCT_SLOT);
		unsigned last = (unsigned)((e - 1 - LIM_ACCT_HDR) / LIM_ACCT_SLOT);
		for (unsigned i = first; i <= last && i < LIM_ACCT_SLOTS; i++)
			live[i] = 1;
		off = slot_off(last + 1);
	}
	/* A reader (libnvidia-ml.so.1) takes no lock and cannot see this
	 * process's own locks: the slot of the libcuda.so.1 in the same
	 * process is known by its pid and start time. */
	uint32_t me = A.reader ? (uint32_t)getpid() : 0;
	uint64_t start = A.reader ? (A.start ? A.start : (A.start = lim_start_time())) : 0;
	uint64_t sum = 0;
	for (unsigned i = 0; i < LIM_ACCT_SLOTS; i++) {
		if ((int)i == A.slot)
			continue;
		const unsigned char *s = slots + (size_t)i * LIM_ACCT_SLOT;
		if (!live[i] && A.reader && me != 0 && lim_get32(s + 24) == me && lim_get64(s + 32) == start)
			live[i] = 1;
		if (!live[i]) {
			if (memcmp(s, zero, sizeof zero) != 0 && !A.ro)
				lim_pwrite_all(A.fd, zero, sizeof zero, slot_off(i));
			continue;
		}
		uint64_t bytes = lim_get64(s), tag = lim_get64(s + 8), check = lim_get64(s + 16);
		if (tag == 0 || check != lim_acct_slot_check(i, bytes, tag)) {
			/* A reader may see a slot half rewritten: read it
			 * again before taking it for damage. */
			unsigned char again[LIM_ACCT_SLOT];
			for (int k = 0; k < 3 && A.reader; k++) {
				if (pread(A.fd, again, sizeof again, slot_off(i)) != (ssize_t)sizeof again)
					break;
				bytes = lim_get64(again), tag = lim_get64(again + 8), check = lim_get64(again + 16);
				if (tag != 0 && check == lim_acct_slot_check(i, bytes, tag))
					break;
			}
			if (tag == 0 || check != lim_acct_slot_check(i, bytes, tag))
				bytes = A.limit; /* damaged: taken for full use */
		}
		sum = sat_add(sum, bytes, A.limit);
	}
	return sum;
}

int lim_acct_open(char *why, size_t whysize)
{
	pthread_mutex_lock(&A.mu);
	int r = open_locked(why, whysize);
	if (r == 0 && global_lock() == 0) {
		header_locked();
		global_unlock();
	}
	pthread_mutex_unlock(&A.mu);
	return r;
}

int lim_acct_reserve(uint64_t n)
{
	char why[LIM_PATH_MAX + 128];
	pthread_mutex_lock(&A.mu);
	int r = LIM_ACCT_ERROR;
	if (current_locked(why, sizeof why) != 0) {
		if (!A.logged_io) {
			A.logged_io = 1;
			lim_log("%s; allocations fail", why);
		}
		goto out;
	}
	if (global_lock() != 0)
		goto out;
	header_locked();
	if (claim_locked() != 0)
		goto unlock;
	uint64_t others = others_locked();
	uint64_t used = sat_add(others, A.mine, A.limit);
	uint64_t old = A.mine;
	if (n <= A.limit && used <= A.limit - n && A.mine + n >= A.mine) {
		A.mine += n;
		r = LIM_ACCT_OK;
	} else {
		r = LIM_ACCT_OVER;
	}
	/* Rewritten every time: repairs damage to this process's slot. */
	if (write_mine_locked() != 0) {
		A.mine = old;
		r = LIM_ACCT_ERROR;
		if (!A.logged_io) {
			A.logged_io = 1;
			lim_log("%s: cannot write: %s; allocations fail", A.path, strerror(errno));
		}
	}
unlock:
	global_unlock();
out:
	pthread_mutex_unlock(&A.mu);
	return r;
}

void lim_acct_release(uint64_t n)
{
	pthread_mutex_lock(&A.mu);
	A.mine -= n < A.mine ? n : A.mine;
	if (A.fd >= 0 && A.slot >= 0 && global_lock() == 0) {
		header_locked();
		write_mine_locked();
		global_unlock();
	}
	pthread_mutex_unlock(&A.mu);
}

int lim_acct_usage(uint64_t *used)
{
	char why[LIM_PATH_MAX + 128];
	pthread_mutex_lock(&A.mu);
	int r = -1;
	*used = A.limit;
	if (A.reader && A.fd < 0 && access(A.path, F_OK) != 0 && errno == ENOENT) {
		*used = 0; /* no process has allocated yet */
		r = 0;
	} else if (current_locked(why, sizeof why) == 0 && global_lock() == 0) {
		header_locked();
		write_mine_locked(); /* repairs damage to this process's slot */
		*used = sat_add(others_locked(), A.mine, A.limit);
		global_unlock();
		r = 0;
	}
	pthread_mutex_unlock(&A.mu);
	return r;
}

uint64_t lim_acct_mine(void)
{
	pthread_mutex_lock(&A.mu);
	uint64_t m = A.mine;
	pthread_mutex_unlock(&A.mu);
	return m;
}

void lim_acct_forked(void)
{
	/* The child holds none of the parent's locks (POSIX locks are not
	 * inherited), and none of its memory: it starts with nothing. */
	pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
	A.mu = fresh;
	A.slot = -1;
	A.mine = 0;
	A.start = 0;
}

void lim_acct_prefork(void)
{
	pthread_mutex_lock(&A.mu);
}

void lim_acct_postfork_parent(void)
{
	pthread_mutex_unlock(&A.mu);
}

void lim_acct_close(void)
{
	pthread_mutex_lock(&A.mu);
	close_locked();
	A.mine = 0;
	pthread_mutex_unlock(&A.mu);
}
