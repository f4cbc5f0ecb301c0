/*
 * gpumux-runtime: the OCI runtime a containerd shim or Docker runs for every
 * runc call of every container (runc options BinaryName, Docker runtimes).
 *
 * It is a small static C program because it is on the path of every
 * container, GPU or not: a call it hands to runc costs the start of this
 * program and an exec (a Go program's start cost about 0.5 ms more on the
 * CI machine, more when the machine is busy; docs/benchmarks.md). It only
 * routes, and execs what does the work:
 *
 *   runc CALL ...                 runc ($GPUMUX_RUNC, default "runc" on PATH)
 *   create of a container that    the node agent, asked over its socket
 *     may ask for GPUs            ($GPUMUX_RUNTIME_SOCKET, default
 *                                 /run/gpumux/runtime.sock): it leases and
 *                                 injects the shares into the bundle, then
 *                                 this program execs runc; where no agent
 *                                 answers, or the agent runs another node
 *                                 config: gpumux-runtime-core, beside this
 *                                 program, with the arguments as given (it
 *                                 does the same in a process of its own and
 *                                 runs runc; given a container that asks for
 *                                 nothing after all, it runs runc on it
 *                                 untouched)
 *   hook update-ldcache ...       the node agent, asked over its socket
 *   hook poststop (with           with the container's state read from
 *     $GPUMUX_STATE_DIR set)      stdin (run by runc's init, update-ldcache
 *                                 sends none and leaves stdin unread: its
 *                                 working directory is the root); where no
 *                                 agent answers, or it leaves the hook to
 *                                 it: gpumux-runtime-hook, beside this
 *                                 program, with the same stdin
 *   hook anything else            gpumux-runtime-core
 *   --version                     gpumux's version, then runc's
 *
 * A leading `--config FILE` is the core's: it is kept for the core and
 * dropped for runc.
 *
 * "May ask": the bundle's config.json, with JSON's string escapes undone,
 * contains "gpumux.io/" (an annotation of gpumux's) or "GPUMUX_" (a
 * variable of gpumux's in the process env), or it cannot be read. This is a
 * superset of what asks (node.ParseRequest, which the core applies
 * exactly; TestCEntryRoutesEveryRequestToTheCore checks the two agree): a
 * container that mentions gpumux elsewhere takes the core's
 * longer path and is passed through there. The spec is not otherwise
 * parsed: one that is not JSON goes to runc, which refuses it.
 *
 * The agent's protocol is package ocicreate's (doc.go): NUL-terminated
 * strings (the protocol, the node config file the core would read,
 * $GPUMUX_STATE_DIR, this program's path, runc's arguments), the write side
 * shut, and one line back: "runc", "core" or "error MESSAGE"; for a hook
 * the protocol gpumux-hook/1 and the state before runc's arguments, and
 * "ok", "fallback" or "error MESSAGE" back.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#ifndef GPUMUX_VERSION
#define GPUMUX_VERSION "unknown (commit unknown)"
#endif

#define ENTRY "gpumux-runtime"
#define CORE "gpumux-runtime-core"
#define HOOK "gpumux-runtime-hook"

#define SOCKET_DEFAULT "/run/gpumux/runtime.sock"
#define CONFIG_DEFAULT "/etc/gpumux/node.hcl"
#define PROTOCOL "gpumux-create/1"
#define PROTOCOL_HOOK "gpumux-hook/1"
/* A container's state on a hook's stdin larger than this is not sent
 * (the agent's bound on a request is 1 MiB, arguments included). */
#define MAX_STATE (1L << 19)
/* How long the agent may take to prepare a create. */
#define AGENT_TIMEOUT_S 60

/* A config.json larger than this is the core's to read. */
#define MAX_SPEC (64L << 20)

/* runc's global flags that take a value as the next argument. */
static const char *const value_flags[] = {"--root", "--log", "--log-format", "--criu", "--rootless", NULL};

static int takes_value(const char *a)
{
	for (const char *const *f = value_flags; *f; f++)
		if (strcmp(a, *f) == 0)
			return 1;
	return 0;
}

/* hand_over replaces this process with path; it returns only on failure. */
static int hand_over(const char *path, char **argv)
{
	argv[0] = (char *)path;
	execv(path, argv);
	fprintf(stderr, "%s: exec %s: %s\n", ENTRY, path, strerror(errno));
	return 127;
}

/* sibling runs name, installed in this program's directory, with args. */
static int sibling(const char *name, char **args, int n)
{
	char self[PATH_MAX], path[PATH_MAX];
	ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
	if (len < 0) {
		fprintf(stderr, "%s: finding %s: /proc/self/exe: %s\n", ENTRY, name, strerror(errno));
		return 127;
	}
	self[len] = 0;
	char *slash = strrchr(self, '/');
	int dirlen = slash ? (int)(slash - self) : 0;
	if (snprintf(path, sizeof path, "%.*s/%s", dirlen, self, name) >= (int)sizeof path) {
		fprintf(stderr, "%s: finding %s: path too long\n", ENTRY, name);
		return 127;
	}
	struct stat st;
	if (stat(path, &st) != 0) {
		fprintf(stderr, "%s: %s must be installed beside %s: stat %s: %s\n", ENTRY, name, self, path,
			strerror(errno));
		return 127;
	}
	char **argv = calloc((size_t)n + 2, sizeof *argv);
	if (!argv) {
		fprintf(stderr, "%s: out of memory\n", ENTRY);
		return 127;
	}
	memcpy(argv + 1, args, (size_t)n * sizeof *argv);
	int code = hand_over(path, argv);
	free(argv);
	return code;
}

/* runc replaces this process with runc, given args. */
static int runc(char **args, int n)
{
	const char *name = getenv("GPUMUX_RUNC");
	if (!name || !*name)
		name = "runc";
	char **argv = calloc((size_t)n + 2, sizeof *argv);
	if (!argv) {
		fprintf(stderr, "%s: out of memory\n", ENTRY);
		return 127;
	}
	memcpy(argv + 1, args, (size_t)n * sizeof *argv);
	argv[0] = (char *)name;
	execvp(name, argv);
	fprintf(stderr, "%s: runc: exec %s: %s\n", ENTRY, name, strerror(errno));
	free(argv);
	return 127;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/*
 * unescape undoes JSON's string escapes in place, left to right, and
 * returns the new length: \uXXXX of an ASCII character becomes it, of any
 * other a byte >= 0x80 (never part of the names looked for); \" \\ \/
 * become their character, the other escapes (\n, \t, ...) a control
 * character. Outside strings valid JSON has no backslash.
 */
static size_t unescape(char *b, size_t n)
{
	size_t i = 0, o = 0;
	while (i < n) {
		if (b[i] != '\\' || i + 1 >= n) {
			b[o++] = b[i++];
			continue;
		}
		char c = b[i + 1];
		if (c == 'u' && i + 5 < n) {
			int v = 0, ok = 1;
			for (int k = 2; k < 6; k++) {
				int h = hexval(b[i + k]);
				ok &= h >= 0;
				v = v * 16 + (h < 0 ? 0 : h);
			}
			if (ok) {
				b[o++] = v < 0x80 ? (char)v : (char)0x80;
				i += 6;
				continue;
			}
		}
		b[o++] = (c == '"' || c == '\\' || c == '/') ? c : '\n';
		i += 2;
	}
	return o;
}

/* read_all reads the whole file at path into a new buffer. */
static char *read_all(const char *path, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	struct stat st;
	char *buf = NULL;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > MAX_SPEC)
		goto out;
	buf = malloc((size_t)st.st_size + 1);
	if (!buf)
		goto out;
	size_t got = 0;
	while (got < (size_t)st.st_size) {
		ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	if (got != (size_t)st.st_size) {
		free(buf);
		buf = NULL;
		goto out;
	}
	*len = got;
out:
	close(fd);
	return buf;
}

/* may_ask says whether the container of this bundle may ask for GPUs. */
static int may_ask(const char *bundle)
{
	char path[PATH_MAX];
	if (snprintf(path, sizeof path, "%s/config.json", bundle) >= (int)sizeof path)
		return 1;
	size_t n;
	char *spec = read_all(path, &n);
	if (!spec)
		return 1;
	n = unescape(spec, n);
	int asks = memmem(spec, n, "gpumux.io/", 10) || memmem(spec, n, "GPUMUX_", 7);
	free(spec);
	return asks;
}

/* write_all writes n bytes of b to fd; to a socket (sock) without
 * SIGPIPE when the other end has gone. */
static int write_all(int fd, const char *b, size_t n, int sock)
{
	while (n > 0) {
		ssize_t w = sock ? send(fd, b, n, MSG_NOSIGNAL) : write(fd, b, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		b += w;
		n -= (size_t)w;
	}
	return 0;
}

enum { AGENT_NONE, AGENT_RUNC, AGENT_CORE, AGENT_OK, AGENT_FALLBACK, AGENT_REFUSED, AGENT_BROKEN };

/*
 * ask_agent sends a request to the node agent (protocol, the node config,
 * $GPUMUX_STATE_DIR, this program's path, then state if not NULL, then
 * runc's arguments) and returns its answer: AGENT_NONE where no agent
 * answers on the socket (nothing there, nothing listening, not allowed),
 * AGENT_REFUSED with its message printed, AGENT_BROKEN (reason in why)
 * when it broke off or answered what this program does not know.
 */
static int ask_agent(const char *protocol, const char *config, const char *state, char **rargs, int rn,
		     char *why, size_t whylen)
{
	const char *path = getenv("GPUMUX_RUNTIME_SOCKET");
	if (!path || !*path)
		path = SOCKET_DEFAULT;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof sa.sun_path)
		return AGENT_NONE;
	strcpy(sa.sun_path, path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return AGENT_NONE;
	/* Before connect, which waits on an agent whose backlog is full. */
	struct timeval tv = {.tv_sec = AGENT_TIMEOUT_S};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
		close(fd);
		return AGENT_NONE;
	}

	char self[PATH_MAX];
	ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
	self[len < 0 ? 0 : len] = 0;
	const char *env_state = getenv("GPUMUX_STATE_DIR");
	const char *head[] = {protocol, config, env_state ? env_state : "", self, state};
	size_t nhead = state ? 5 : 4;
	int ok = 1;
	for (size_t i = 0; ok && i < nhead; i++)
		ok = write_all(fd, head[i], strlen(head[i]) + 1, 1) == 0;
	for (int i = 0; ok && i < rn; i++)
		ok = write_all(fd, rargs[i], strlen(rargs[i]) + 1, 1) == 0;
	char answer[4096];
	size_t got = 0;
	if (ok && shutdown(fd, SHUT_WR) == 0) {
		for (;;) {
			ssize_t r = read(fd, answer + got, sizeof answer - 1 - got);
			if (r < 0 && errno == EINTR)
				continue;
			if (r < 0)
				ok = 0;
			if (r <= 0)
				break;
			got += (size_t)r;
			if (got >= sizeof answer - 1)
				break;
		}
	} else {
		ok = 0;
	}
	int err = errno;
	close(fd);
	answer[got] = 0;
	char *nl = strchr(answer, '\n');
	if (!ok || !nl) {
		snprintf(why, whylen, "the node agent at %s did not answer: %s", path,
			 ok ? "no answer" : (err == EAGAIN || err == EWOULDBLOCK) ? "timed out" : strerror(err));
		return AGENT_BROKEN;
	}
	*nl = 0;
	static const struct {
		const char *word;
		int answer;
	} answers[] = {{"runc", AGENT_RUNC}, {"core", AGENT_CORE}, {"ok", AGENT_OK}, {"fallback", AGENT_FALLBACK}};
	for (size_t i = 0; i < sizeof answers / sizeof *answers; i++)
		if (strcmp(answer, answers[i].word) == 0)
			return answers[i].answer;
	if (strncmp(answer, "error ", 6) == 0) {
		fprintf(stderr, "%s\n", answer + 6);
		return AGENT_REFUSED;
	}
	snprintf(why, whylen, "the node agent at %s answered %.200s", path, answer);
	return AGENT_BROKEN;
}

/* create_via_agent: a create that may ask goes to the agent, else the core. */
static int create_via_agent(const char *config, char **args, int n, char **rargs, int rn)
{
	char why[512];
	switch (ask_agent(PROTOCOL, config, NULL, rargs, rn, why, sizeof why)) {
	case AGENT_RUNC:
		return runc(rargs, rn);
	case AGENT_REFUSED:
		return 1;
	case AGENT_BROKEN:
		fprintf(stderr, "%s: %s\n", ENTRY, why);
		return 1;
	}
	return sibling(CORE, args, n);
}

/*
 * run_by_runc_init says whether this process's parent is runc's init,
 * which runs createContainer hooks with the container's root as their
 * working directory (and startContainer hooks after its switch to that
 * root, which the agent tells apart). The hook runs in the container's PID
 * namespace, where getppid() is 1, and sees the host's /proc: the parent's
 * PID there is in /proc/self/stat.
 */
static int run_by_runc_init(void)
{
	static const char init[] = "runc:[2:INIT]\n";
	char buf[512];
	int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t r = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (r <= 0)
		return 0;
	buf[r] = 0;
	/* PID (COMM) STATE PPID ...: COMM may hold anything, ')' too. */
	char *end = strrchr(buf, ')');
	int ppid;
	if (!end || sscanf(end + 1, " %*c %d", &ppid) != 1 || ppid <= 0)
		return 0;
	char path[64], comm[sizeof init + 1];
	snprintf(path, sizeof path, "/proc/%d/comm", ppid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	r = read(fd, comm, sizeof comm - 1);
	close(fd);
	return r == (ssize_t)(sizeof init - 1) && memcmp(comm, init, sizeof init - 1) == 0;
}

/*
 * hook_via_agent: a hook goes to the agent with the state on stdin; where
 * the agent does not do it (no agent, "fallback", an error, no answer),
 * gpumux-runtime-hook gets the same stdin. An update-ldcache hook run by
 * runc's init leaves stdin unread and sends no state: the agent takes the
 * root from this process's working directory (runc's init writes the state
 * from a goroutine that may wait for its only processor; ocicreate/doc.go).
 */
static int hook_via_agent(const char *config, char **rargs, int rn)
{
	if (strcmp(rargs[1], "update-ldcache") == 0 && run_by_runc_init()) {
		char why[512];
		if (ask_agent(PROTOCOL_HOOK, config, "", rargs, rn, why, sizeof why) == AGENT_OK)
			return 0;
		return sibling(HOOK, rargs, rn);
	}
	size_t got = 0, cap = 64 << 10;
	char *state = malloc(cap);
	for (;;) {
		if (state && got + 1 >= cap)
			state = realloc(state, cap *= 2);
		if (!state) {
			fprintf(stderr, "%s: out of memory\n", ENTRY);
			return 127;
		}
		ssize_t r = read(0, state + got, cap - 1 - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	state[got] = 0;
	int answer = AGENT_NONE;
	char why[512];
	/* An empty state is the agent's sign of a hook run by runc's init:
	 * none read is gpumux-runtime-hook's to report. */
	if (got > 0 && got < MAX_STATE && memchr(state, 0, got) == NULL)
		answer = ask_agent(PROTOCOL_HOOK, config, state, rargs, rn, why, sizeof why);
	if (answer == AGENT_OK)
		return 0;
	/* Anything else, a refusal included: gpumux-runtime-hook does the
	 * hook, and reports its own errors. It reads the same state, from a
	 * file in memory. */
	int fd = memfd_create("gpumux-hook-state", MFD_CLOEXEC);
	if (fd < 0 || write_all(fd, state, got, 0) != 0 || lseek(fd, 0, SEEK_SET) != 0 || dup2(fd, 0) != 0) {
		fprintf(stderr, "%s: handing the hook's state to %s: %s\n", ENTRY, HOOK, strerror(errno));
		return 127;
	}
	close(fd);
	free(state);
	return sibling(HOOK, rargs, rn);
}

int main(int argc, char **argv)
{
	char **args = argv + 1;
	int n = argc - 1;
	char **rargs = args; /* runc's arguments: without a leading --config FILE */
	int rn = n;
	const char *config = getenv("GPUMUX_CONFIG"); /* the node config the core reads */
	if (n >= 2 && strcmp(args[0], "--config") == 0) {
		config = args[1];
		rargs += 2;
		rn -= 2;
	}
	if (!config || !*config)
		config = CONFIG_DEFAULT;

	if (rn >= 1 && strcmp(rargs[0], "hook") == 0) {
		const char *dir = getenv("GPUMUX_STATE_DIR");
		if (rn >= 2 && (strcmp(rargs[1], "update-ldcache") == 0 ||
				(rn == 2 && strcmp(rargs[1], "poststop") == 0 && dir && *dir)))
			return hook_via_agent(config, rargs, rn);
		return sibling(CORE, args, n);
	}
	if (rn == 1 && (strcmp(rargs[0], "--version") == 0 || strcmp(rargs[0], "-v") == 0)) {
		printf("%s %s\n", ENTRY, GPUMUX_VERSION);
		fflush(stdout);
	}

	/* The subcommand: the first argument that is neither a flag nor a
	 * global flag's value. */
	int i = 0;
	for (; i < rn && rargs[i][0] == '-'; i++)
		if (takes_value(rargs[i]) && i + 1 < rn)
			i++;
	if (i < rn && strcmp(rargs[i], "create") == 0) {
		const char *bundle = ".";
		for (int j = i + 1; j < rn; j++) {
			if ((strcmp(rargs[j], "--bundle") == 0 || strcmp(rargs[j], "-b") == 0) && j + 1 < rn)
				bundle = rargs[++j];
			else if (strncmp(rargs[j], "--bundle=", 9) == 0)
				bundle = rargs[j] + 9;
		}
		if (may_ask(bundle))
			return create_via_agent(config, args, n, rargs, rn);
	}
	return runc(rargs, rn);
}
