/* A program that ends its connections the way many do: by exiting, or by destroying its
 * event channel, without rdma_disconnect or rdma_destroy_id. With rdma-core the kernel
 * closes the program's rdma_cm file then and the IB CM ends each connection (a DREQ, or
 * the DREP to the peer's DREQ): its peer hears DISCONNECTED at once, with status 0.
 *
 *   rdmacm_hangup server ADDR PORT exit|channel
 *   rdmacm_hangup client ADDR PORT exit|channel
 *     exit      the server exits once the connection is established; the client must
 *               get DISCONNECTED (status 0) within 4 s.
 *     channel   the client disconnects; the server, once it has seen DISCONNECTED,
 *               destroys its event channel (never the connected ID) and stays alive 3 s;
 *               the client must get DISCONNECTED with status 0 (the server's DREP)
 *               within 2 s (unanswered, it comes 5 s later with -ETIMEDOUT).
 *   No QPs: the connection is what matters (the server accepts with a QP number only, the
 *   client calls rdma_establish).
 *
 * Prints what each side saw; exit status 0 unless a call failed or the client's check
 * failed. */
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>

#define PROG "rdmacm_hangup"
#include "rdmacm_util.h"

static int server(struct sockaddr_storage *ss, int exit_mode)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_conn_param p = { .qp_num = 0x123 };
	struct rdma_cm_id *conn;

	if (!ch)
		die("rdma_create_event_channel");
	listen_on(ch, ss, 4);
	printf("server listening\n");
	fflush(stdout);
	expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST, NULL, &conn);
	if (rdma_accept(conn, &p))
		die("rdma_accept");
	expect(ch, RDMA_CM_EVENT_ESTABLISHED, NULL, NULL);
	printf("server established\n");
	fflush(stdout);
	if (exit_mode) {
		usleep(200 * 1000);
		printf("server exits\n");
		fflush(stdout);
		exit(0);
	}
	expect(ch, RDMA_CM_EVENT_DISCONNECTED, NULL, NULL);
	rdma_destroy_event_channel(ch);
	printf("server destroyed its channel\n");
	fflush(stdout);
	sleep(3);
	return 0;
}

static int client(struct sockaddr_storage *ss, int exit_mode)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_event *e;
	struct rdma_cm_id *id;

	if (!ch)
		die("rdma_create_event_channel");
	id = request_to(ch, ss, 0x456);
	expect(ch, RDMA_CM_EVENT_CONNECT_RESPONSE, NULL, NULL);
	if (rdma_establish(id))
		die("rdma_establish");
	printf("client established\n");
	fflush(stdout);
	if (!exit_mode && rdma_disconnect(id))
		die("rdma_disconnect");
	/* Within 2 s after a disconnect: the server stays 3 s after destroying its channel,
	 * so the DREP its exit would send cannot pass for the channel's. */
	e = next_event(ch, exit_mode ? 4000 : 2000);
	if (!e) {
		printf("client heard nothing\n");
		return 1;
	}
	printf("client %s status %d\n", rdma_event_str(e->event), e->status);
	return e->event == RDMA_CM_EVENT_DISCONNECTED && e->status == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
	struct sockaddr_storage ss;
	int exit_mode;

	if (argc != 5 || (strcmp(argv[4], "exit") && strcmp(argv[4], "channel"))) {
		fprintf(stderr, "usage: rdmacm_hangup server|client ADDR PORT exit|channel\n");
		return 2;
	}
	ss = addr_of(argv[2], argv[3]);
	exit_mode = !strcmp(argv[4], "exit");
	return strcmp(argv[1], "server") ? client(&ss, exit_mode) : server(&ss, exit_mode);
}
