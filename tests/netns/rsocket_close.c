/* rclose of an rsocket while another thread is blocked in rrecv on it: the blocked call
 * must return (-1, EBADF) rather than spin or hang. Both ends live in this process, on
 * ADDR (a listener, a connect, an accept on a thread of its own).
 *   rsocket_close ADDR PORT     (exit 0 when rrecv returned within 5 s of the rclose)
 */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <rdma/rsocket.h>

static struct sockaddr_in addr;
static int lfd, afd = -1;
static ssize_t got = 1;
static int got_errno;

static void die(const char *what)
{
	fprintf(stderr, "rsocket_close: %s: %s\n", what, strerror(errno));
	exit(1);
}

static void *acceptor(void *arg)
{
	(void)arg;
	afd = raccept(lfd, NULL, NULL);
	if (afd < 0)
		die("raccept");
	return NULL;
}

static void *reader(void *arg)
{
	char b[64];

	got = rrecv(*(int *)arg, b, sizeof b, 0); /* nothing is ever sent: blocks */
	got_errno = errno;
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t at, rt;
	struct timespec t0, t1;
	int cfd;

	if (argc != 3) {
		fprintf(stderr, "usage: rsocket_close ADDR PORT\n");
		return 2;
	}
	addr.sin_family = AF_INET;
	addr.sin_port = htons(atoi(argv[2]));
	if (inet_pton(AF_INET, argv[1], &addr.sin_addr) != 1)
		die("inet_pton");
	lfd = rsocket(AF_INET, SOCK_STREAM, 0);
	if (lfd < 0 || rbind(lfd, (struct sockaddr *)&addr, sizeof addr) || rlisten(lfd, 1))
		die("listener");
	pthread_create(&at, NULL, acceptor, NULL);
	cfd = rsocket(AF_INET, SOCK_STREAM, 0);
	if (cfd < 0 || rconnect(cfd, (struct sockaddr *)&addr, sizeof addr))
		die("rconnect");
	pthread_join(at, NULL);
	pthread_create(&rt, NULL, reader, &cfd);
	sleep(1); /* the reader is blocked by now */
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (rclose(cfd))
		die("rclose");
	for (int i = 0; i < 50 && got == 1; i++)
		usleep(100000);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	if (got == 1) {
		fprintf(stderr, "rsocket_close: rrecv still blocked 5 s after rclose\n");
		return 1;
	}
	pthread_join(rt, NULL);
	printf("rsocket_close: rrecv returned %zd (%s) %.0f ms after rclose\n", got,
	       got < 0 ? strerror(got_errno) : "no error",
	       (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6);
	rclose(afd);
	rclose(lfd);
	return got < 0 && got_errno == EBADF ? 0 : 1;
}
