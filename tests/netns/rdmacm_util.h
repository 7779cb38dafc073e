/* Helpers shared by the rdma_cm test programs here (rdmacm_backlog.c, rdmacm_relisten.c).
 * The including program defines PROG, its name for error messages. */
#ifndef RDMACM_UTIL_H
#define RDMACM_UTIL_H

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* Says which call failed and why, and exits 1. */
static void die(const char *what)
{
	fprintf(stderr, PROG ": %s: %s\n", what, strerror(errno));
	exit(1);
}

/* The IPv4 socket address of HOST and PORT. */
static struct sockaddr_storage addr_of(const char *host, const char *port)
{
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM };
	struct addrinfo *ai;
	struct sockaddr_storage ss;

	if (getaddrinfo(host, port, &hints, &ai))
		die("getaddrinfo");
	memcpy(&ss, ai->ai_addr, ai->ai_addrlen);
	freeaddrinfo(ai);
	return ss;
}

#endif
