/*
 * acctfuzz DIR LIMIT [child]: the accounting's reader under arbitrary
 * file contents (timeslice/ctest's FuzzAccounting). Linked with the
 * limiter's sources. This process holds LIMIT/8 bytes; with "child", a
 * child process holds LIMIT/4 in a slot of its own. For every line
 * "check" on stdin (after the test has overwritten DIR's accounting file)
 * it checks that the share never has more room than the limit allows,
 * whatever the file says, and answers "ok USED" or "FAIL why".
 */
#include <errno.h>
#include <signal.h>
#include <sys/wait.h>

#include "t.h"

static unsigned long long L;

int main(int argc, char **argv)
{
	if (argc < 3)
		return 2;
	L = strtoull(argv[2], NULL, 0);
	int with_child = argc > 3 && strcmp(argv[3], "child") == 0;
	lim_acct_init(argv[1], L);
	char why[4200];
	if (lim_acct_open(why, sizeof why) != 0) {
		fprintf(stderr, "open: %s\n", why);
		return 2;
	}
	int ready[2], hold[2];
	if (pipe(ready) != 0 || pipe(hold) != 0)
		return 2;
	if (with_child) {
		pid_t pid = fork();
		if (pid == 0) {
			lim_acct_forked();
			close(hold[1]);
			if (lim_acct_reserve(L / 4) != LIM_ACCT_OK)
				_exit(3);
			ssize_t w = write(ready[1], "r", 1);
			(void)w;
			char c;
			while (read(hold[0], &c, 1) < 0 && errno == EINTR)
				;
			_exit(0);
		}
		char c;
		if (read(ready[0], &c, 1) != 1) {
			fprintf(stderr, "the child did not start\n");
			return 2;
		}
	}
	close(hold[0]);
	const uint64_t mine = L / 8;
	int r = lim_acct_reserve(mine);
	if (r != LIM_ACCT_OK) {
		uint64_t used = 0;
		lim_acct_usage(&used);
		fprintf(stderr, "cannot reserve %llu: %d (used %llu)\n", (unsigned long long)mine, r,
			(unsigned long long)used);
		return 2;
	}
	printf("READY\n");
	fflush(stdout);
	char line[64];
	while (fgets(line, sizeof line, stdin) != NULL) {
		uint64_t used = 0;
		int r = lim_acct_usage(&used);
		const char *fail = NULL;
		if (r != 0)
			fail = "the file could not be read";
		else if (used < mine)
			fail = "usage below this process's own";
		else if (used > L)
			fail = "usage above the limit";
		else if (!with_child && used != mine)
			fail = "a dead process's garbage counted";
		if (fail == NULL && lim_acct_reserve(L - mine + 1) == LIM_ACCT_OK)
			fail = "reserved more than the limit";
		if (fail == NULL && !with_child) {
			if (lim_acct_reserve(L - mine) != LIM_ACCT_OK)
				fail = "could not reserve what is free";
			else
				lim_acct_release(L - mine);
		}
		if (fail == NULL && lim_acct_mine() != mine)
			fail = "this process's own usage changed";
		if (fail)
			printf("FAIL %s (used %llu)\n", fail, (unsigned long long)used);
		else
			printf("ok %llu\n", (unsigned long long)used);
		fflush(stdout);
	}
	close(hold[1]);
	while (wait(NULL) > 0 || errno == EINTR)
		;
	return 0;
}
