/*
 * sockbench: the baseline for bench.c through gpumux-remoted — a plain
 * socket of the same kind (TCP loopback or unix), same machine, same run.
 *
 *   cc -O2 -o sockbench sockbench.c
 *   ./sockbench tcp | ./sockbench unix
 *
 * Prints sync_rtt_us (32-byte ping-pong), h2d_gbps (client to server,
 * 1 MiB writes, 2 GiB) and d2h_gbps (server to client), as bench.c names them.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static void full(int fd, void *p, size_t n, int wr)
{
	char *b = p;
	while (n > 0) {
		ssize_t k = wr ? write(fd, b, n) : read(fd, b, n);
		if (k <= 0) {
			perror("sockbench");
			exit(1);
		}
		b += k;
		n -= (size_t)k;
	}
}

#define CHUNK (1u << 20)
#define TOTAL (2048ull << 20)
#define PINGS 20000

static void serve(int fd)
{
	char msg[32];
	char *buf = malloc(CHUNK);
	for (int i = 0; i < PINGS; i++) {
		full(fd, msg, sizeof msg, 0);
		full(fd, msg, sizeof msg, 1);
	}
	for (unsigned long long got = 0; got < TOTAL; got += CHUNK)
		full(fd, buf, CHUNK, 0);
	full(fd, msg, 1, 1);
	for (unsigned long long sent = 0; sent < TOTAL; sent += CHUNK)
		full(fd, buf, CHUNK, 1);
	exit(0);
}

int main(int argc, char **argv)
{
	int tcp = argc > 1 && strcmp(argv[1], "tcp") == 0;
	int lfd, one = 1;
	struct sockaddr_in in = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct sockaddr_un un = {.sun_family = AF_UNIX};
	socklen_t len;
	if (tcp) {
		lfd = socket(AF_INET, SOCK_STREAM, 0);
		bind(lfd, (struct sockaddr *)&in, sizeof in);
		len = sizeof in;
		getsockname(lfd, (struct sockaddr *)&in, &len);
	} else {
		snprintf(un.sun_path, sizeof un.sun_path, "/tmp/sockbench.%d", getpid());
		lfd = socket(AF_UNIX, SOCK_STREAM, 0);
		bind(lfd, (struct sockaddr *)&un, sizeof un);
	}
	listen(lfd, 1);
	pid_t pid = fork();
	if (pid == 0) {
		int fd = accept(lfd, NULL, NULL);
		if (tcp)
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		serve(fd);
	}
	int fd = socket(tcp ? AF_INET : AF_UNIX, SOCK_STREAM, 0);
	if (tcp ? connect(fd, (struct sockaddr *)&in, sizeof in) : connect(fd, (struct sockaddr *)&un, sizeof un)) {
		perror("connect");
		return 1;
	}
	if (tcp)
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	char msg[32] = {0};
	double t0 = now();
	for (int i = 0; i < PINGS; i++) {
		full(fd, msg, sizeof msg, 1);
		full(fd, msg, sizeof msg, 0);
	}
	printf("sync_rtt_us=%.2f\n", (now() - t0) / PINGS * 1e6);
	char *buf = calloc(1, CHUNK);
	t0 = now();
	for (unsigned long long sent = 0; sent < TOTAL; sent += CHUNK)
		full(fd, buf, CHUNK, 1);
	full(fd, msg, 1, 0); /* the server has read it all */
	printf("h2d_gbps=%.2f\n", TOTAL / (now() - t0) / 1e9);
	t0 = now();
	for (unsigned long long got = 0; got < TOTAL; got += CHUNK)
		full(fd, buf, CHUNK, 0);
	printf("d2h_gbps=%.2f\n", TOTAL / (now() - t0) / 1e9);
	waitpid(pid, NULL, 0);
	if (!tcp)
		unlink(un.sun_path);
	return 0;
}
