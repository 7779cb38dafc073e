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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>

#define PROG "rdmacm_relisten"
#include "rdmacm_util.h"

int main(int argc, char **argv)
{
	struct rdma_event_channel *sch, *cch;
	struct rdma_cm_id *listen_id, *client, *request;
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

	listen_id = listen_on(sch, &ss, 1);
	if (rdma_destroy_id(listen_id))
		die("rdma_destroy_id");
	printf("first listener gone\n");
	fflush(stdout);
	usleep(atoi(argv[3]) * 1000);

	client = request_to(cch, &ss, 0x123);
	printf("client sent the request\n");
	fflush(stdout);
	usleep(100 * 1000);

	listen_id = listen_on(sch, &ss, 1);
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
