/* Helpers shared by the rdma_cm test programs here (rdmacm_backlog.c, rdmacm_relisten.c,
 * rdmacm_removal.c). The including program defines PROG, its name for error messages. */
#ifndef RDMACM_UTIL_H
#define RDMACM_UTIL_H

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <rdma/rdma_cma.h>

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

/* The next event within `ms` milliseconds, or NULL. */
static struct rdma_cm_event *next_event(struct rdma_event_channel *ch, int ms)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *e;

	if (poll(&p, 1, ms) <= 0)
		return NULL;
	if (rdma_get_cm_event(ch, &e))
		return NULL;
	return e;
}

/* The next event, of kind `kind`, within 5 s (acknowledged; its status and ID kept where
 * asked), or exit 1 naming what came instead. */
static void expect(struct rdma_event_channel *ch, int kind, int *status, struct rdma_cm_id **id)
{
	struct rdma_cm_event *e = next_event(ch, 5000);

	if (!e || e->event != kind) {
		fprintf(stderr, PROG ": expected %s, got %s (status %d)\n", rdma_event_str(kind),
			e ? rdma_event_str(e->event) : "nothing", e ? e->status : 0);
		exit(1);
	}
	if (status)
		*status = e->status;
	if (id)
		*id = e->id;
	rdma_ack_cm_event(e);
}

/* A new ID on `ch` listening on `ss` with `backlog`. */
static struct rdma_cm_id *listen_on(struct rdma_event_channel *ch, struct sockaddr_storage *ss,
				    int backlog)
{
	struct rdma_cm_id *id;

	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		die("rdma_create_id");
	if (rdma_bind_addr(id, (struct sockaddr *)ss))
		die("rdma_bind_addr");
	if (rdma_listen(id, backlog))
		die("rdma_listen");
	return id;
}

/* A new ID on `ch` that sends a connect request to `ss` (no QP behind it: QP number
 * `qpn` is only announced), its address and route resolved first. */
static struct rdma_cm_id *request_to(struct rdma_event_channel *ch, struct sockaddr_storage *ss,
				     uint32_t qpn)
{
	struct rdma_conn_param p = { .qp_num = qpn, .retry_count = 7 };
	struct rdma_cm_id *id;

	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		die("rdma_create_id");
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)ss, 2000))
		die("rdma_resolve_addr");
	expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, NULL, NULL);
	if (rdma_resolve_route(id, 2000))
		die("rdma_resolve_route");
	expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, NULL, NULL);
	if (rdma_connect(id, &p))
		die("rdma_connect");
	return id;
}

#endif
