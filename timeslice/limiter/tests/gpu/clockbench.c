/* What a CLOCK_MONOTONIC read costs on this machine (vDSO or syscall). */
#include <stdio.h>
#include <time.h>
int main(void)
{
	struct timespec a, b, t;
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (int i = 0; i < 10000000; i++)
		clock_gettime(CLOCK_MONOTONIC, &t);
	clock_gettime(CLOCK_MONOTONIC, &b);
	printf("NS_PER_CLOCK_READ %.1f\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / 1e7);
	return 0;
}
