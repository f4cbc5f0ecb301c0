/*
 * Finding and loading the real library behind the limiter's own: the
 * absolute path in GPUMUX_LIMITER_CUDA / GPUMUX_LIMITER_NVML, else the
 * first file of that name in the usual driver directories. The limiter's
 * own file is never loaded, whatever path leads to it (compared by device
 * and inode, after following links).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lim.h"

/* The Debian multiarch directory of the driver's libraries on this
 * architecture. */
#if defined(__x86_64__)
#define LIM_MULTIARCH "x86_64-linux-gnu"
#elif defined(__aarch64__)
#define LIM_MULTIARCH "aarch64-linux-gnu"
#else
#error "the limiter is written for x86-64 and AArch64 only"
#endif

/* Where distributions and the NVIDIA container toolkit put the driver's
 * libraries. */
static const char default_search[] = "/usr/lib/" LIM_MULTIARCH ":/usr/lib64:/usr/local/nvidia/lib64:"
				     "/usr/local/nvidia/lib:/usr/lib/wsl/lib:/usr/lib:/lib/" LIM_MULTIARCH ":/lib64";

static int self_id(struct stat *st)
{
	Dl_info info;
	if (dladdr((void *)self_id, &info) == 0 || info.dli_fname == NULL)
		return -1;
	char real[LIM_PATH_MAX];
	if (realpath(info.dli_fname, real) == NULL)
		return -1;
	return stat(real, st);
}

/* try loads path unless it is the limiter itself; 1 when it is, -1 on
 * other failures (why set). */
static void *try(const char *path, const struct stat *self, int have_self, int *is_self, char *why, size_t whysize)
{
	*is_self = 0;
	struct stat st;
	if (stat(path, &st) != 0) {
		snprintf(why, whysize, "%s: %s", path, strerror(errno));
		return NULL;
	}
	if (have_self && st.st_dev == self->st_dev && st.st_ino == self->st_ino) {
		*is_self = 1;
		snprintf(why, whysize, "%s is the limiter itself", path);
		return NULL;
	}
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		const char *e = dlerror();
		snprintf(why, whysize, "%s", e ? e : path);
	}
	return h;
}

void *lim_open_real(const char *env, const char *soname, char *why, size_t whysize)
{
	struct stat self;
	int have_self = self_id(&self) == 0;
	int is_self;
	const char *given = getenv(env);
	if (given != NULL && given[0] != '\0') {
		if (given[0] != '/') {
			snprintf(why, whysize, "%s=%s is not an absolute path", env, given);
			return NULL;
		}
		return try(given, &self, have_self, &is_self, why, whysize);
	}
	const char *list = getenv("GPUMUX_LIMITER_SEARCH_PATH");
	if (list == NULL || list[0] == '\0')
		list = default_search;
	char path[LIM_PATH_MAX];
	snprintf(why, whysize, "no %s in %s (set %s)", soname, list, env);
	for (const char *p = list; *p != '\0';) {
		const char *end = strchr(p, ':');
		size_t n = end ? (size_t)(end - p) : strlen(p);
		if (n > 0 && p[0] == '/' && n + 1 + strlen(soname) < sizeof path) {
			memcpy(path, p, n);
			path[n] = '/';
			strcpy(path + n + 1, soname);
			char tmp[512];
			void *h = try(path, &self, have_self, &is_self, tmp, sizeof tmp);
			if (h != NULL)
				return h;
			if (!is_self && access(path, F_OK) == 0)
				snprintf(why, whysize, "%s", tmp); /* it exists but does not load */
		}
		p += n;
		if (*p == ':')
			p++;
	}
	return NULL;
}

int lim_load_table(const char *env, const char *soname, const char *what, const char *const *names, void **table,
		   unsigned count, void *missing_library, void *missing_symbol)
{
	char why[LIM_PATH_MAX + 256];
	void *h = lim_open_real(env, soname, why, sizeof why);
	if (h == NULL)
		lim_log("cannot load the real %s: %s; %s calls fail", soname, why, what);
	for (unsigned i = 0; i < count; i++) {
		void *p = h ? dlsym(h, names[i]) : NULL;
		if (p == NULL)
			p = h ? missing_symbol : missing_library;
		__atomic_store_n(&table[i], p, __ATOMIC_RELEASE);
	}
	return h != NULL;
}
