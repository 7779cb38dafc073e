/* A connect request that reaches a port between two listens on it, as perftest -R makes
 * it: perftest destroys its first listening ID, sleeps a second, syncs with the client,
 * and only then listens again; the client connects as soon as it is synced, and its
 * request can arrive first.
 *
 *   rdmacm_relisten ADDR PORT GAP_MS
 *     One process, both sides. Listens on ADDR:PORT and destroys that listening ID;
 *     GAP_MS later connects to ADDR:PORT (no QP: the request is what matters), and
 *     100 ms after that listens on the port again. The new listener must get the
 *     request ("server got the request") and rejects it; the client's REJECTED event
 *     then carries the consumer's reason 28, where a request refused for want of a
 *     listener carries 8 (invalid service ID) ("client rejected status N").
 *
 * Exit status 0 unless a call failed or an expected event did not come. */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>

#define PROG "rdmacm_relisten"
#include "rdmacm_util.h"

/* The next event of kind `kind` within 5 s (acknowledged, its status and ID kept), or
 * exit 1 naming what came instead. */
static void expect(struct rdma_event_channel *ch, int kind, int *status, struct rdma_cm_id **id)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *e = NULL;

	if (poll(&p, 1, 5000) == 1 && rdma_get_cm_event(ch, &e))
		e = NULL;
	if (!e || e->event != kind) {
		fprintf(stderr, "rdmacm_relisten: expected %s, got %s (status %d)\n",
			rdma_event_str(kind), e ? rdma_event_str(e->event) : "nothing",
			e ? e->status : 0);
		exit(1);
	}
	if (status)
		*status = e->status;
	if (id)
		*id = e->id;
	rdma_ack_cm_event(e);
}

static struct rdma_cm_id *listen_on(struct rdma_event_channel *ch, struct sockaddr_storage *ss)
{
	struct rdma_cm_id *id;

	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		die("rdma_create_id");
	if (rdma_bind_addr(id, (struct sockaddr *)ss))
		die("rdma_bind_addr");
	if (rdma_listen(id, 1))
		die("rdma_listen");
	return id;
}

int main(int argc, char **argv)
{
	struct rdma_event_channel *sch, *cch;
	struct rdma_cm_id *listen_id, *client, *request;
	struct rdma_conn_param p = { .qp_num = 0x123, .retry_count = 7 };
	struct sockaddr_storage ss;
	int status;

	if (argc != 4) {
		fprintf(stderr, "usage: rdmacm_relisten ADDR PORT GAP_MS\n");
		return 2;
	}
	ss = addr_of(argv[1], argv[2]);
	sch = rdma_create_event_channel();
	cch = rdma_create_event_channel();
	if (!sch || !cch)
		die("rdma_create_event_channel");

	listen_id = listen_on(sch, &ss);
	if (rdma_destroy_id(listen_id))
		die("rdma_destroy_id");
	printf("first listener gone\n");
	fflush(stdout);
	usleep(atoi(argv[3]) * 1000);

	if (rdma_create_id(cch, &client, NULL, RDMA_PS_TCP))
		die("rdma_create_id");
	if (rdma_resolve_addr(client, NULL, (struct sockaddr *)&ss, 2000))
		die("rdma_resolve_addr");
	expect(cch, RDMA_CM_EVENT_ADDR_RESOLVED, NULL, NULL);
	if (rdma_resolve_route(client, 2000))
		die("rdma_resolve_route");
	expect(cch, RDMA_CM_EVENT_ROUTE_RESOLVED, NULL, NULL);
	if (rdma_connect(client, &p))
		die("rdma_connect");
	printf("client sent the request\n");
	fflush(stdout);
	usleep(100 * 1000);

	listen_id = listen_on(sch, &ss);
	printf("listening again\n");
	fflush(stdout);
	expect(sch, RDMA_CM_EVENT_CONNECT_REQUEST, NULL, &request);
	printf("server got the request\n");
	fflush(stdout);
	if (rdma_reject(request, NULL, 0))
		die("rdma_reject");
	expect(cch, RDMA_CM_EVENT_REJECTED, &status, NULL);
	printf("client rejected status %d\n", status);
	rdma_destroy_id(request);
	rdma_destroy_id(client);
	rdma_destroy_id(listen_id);
	rdma_destroy_event_channel(cch);
	rdma_destroy_event_channel(sch);
	return 0;
}
