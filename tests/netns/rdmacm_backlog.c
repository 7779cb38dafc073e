/* A listen backlog under a flood of connect requests, as an rdma_cm program sees it.
 *
 *   rdmacm_backlog server ADDR PORT BACKLOG WAIT1 WAIT2
 *     Listens with BACKLOG and reads nothing for WAIT1 seconds, then reads what its
 *     channel holds ("phase1 requests N"), rejects those requests and reads nothing
 *     for WAIT2 seconds more, then reads again ("phase2 requests N").
 *   rdmacm_backlog client ADDR PORT COUNT WAIT
 *     Sends COUNT connect requests at once (no QP on the IDs: nothing is ever
 *     accepted) and counts the rejections that come within WAIT seconds
 *     ("client rejected N").
 *
 * A listener keeps at most BACKLOG requests unread; the rest are dropped unanswered, and
 * their senders' CMs resend them (after about 4 s with ferroce's CM), so that a request
 * finds room once the program has read others. Exit status 0 unless a call failed. */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>

#define PROG "rdmacm_backlog"
#include "rdmacm_util.h"

#define MAXN 64

/* Reads what the channel holds now: rejects and destroys each request's ID. */
static int drain_requests(struct rdma_event_channel *ch)
{
	struct rdma_cm_event *e;
	int n = 0;

	while ((e = next_event(ch, 100))) {
		struct rdma_cm_id *id = e->id;
		int kind = e->event;

		rdma_ack_cm_event(e);
		if (kind != RDMA_CM_EVENT_CONNECT_REQUEST)
			continue;
		n++;
		if (rdma_reject(id, NULL, 0))
			die("rdma_reject");
		rdma_destroy_id(id);
	}
	return n;
}

static int server(const char *host, const char *port, int backlog, int wait1, int wait2)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct sockaddr_storage ss = addr_of(host, port);
	struct rdma_cm_id *listen_id;

	if (!ch)
		die("rdma_create_event_channel");
	listen_id = listen_on(ch, &ss, backlog);
	printf("listening\n");
	fflush(stdout);
	sleep(wait1);
	printf("phase1 requests %d\n", drain_requests(ch));
	fflush(stdout);
	sleep(wait2);
	printf("phase2 requests %d\n", drain_requests(ch));
	rdma_destroy_id(listen_id);
	rdma_destroy_event_channel(ch);
	return 0;
}

static int client(const char *host, const char *port, int count, int wait)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct sockaddr_storage ss = addr_of(host, port);
	struct rdma_cm_id *ids[MAXN];
	struct rdma_cm_event *e;
	time_t until;
	int i, rejected = 0;

	if (!ch)
		die("rdma_create_event_channel");
	if (count < 1 || count > MAXN)
		count = MAXN;
	for (i = 0; i < count; i++)
		ids[i] = request_to(ch, &ss, 0x100 + i);
	printf("client sent %d\n", count);
	fflush(stdout);
	until = time(NULL) + wait;
	while (time(NULL) < until) {
		if (!(e = next_event(ch, 200)))
			continue;
		if (e->event == RDMA_CM_EVENT_REJECTED)
			rejected++;
		rdma_ack_cm_event(e);
	}
	printf("client rejected %d\n", rejected);
	for (i = 0; i < count; i++)
		rdma_destroy_id(ids[i]);
	rdma_destroy_event_channel(ch);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 7 && !strcmp(argv[1], "server"))
		return server(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]), atoi(argv[6]));
	if (argc == 6 && !strcmp(argv[1], "client"))
		return client(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]));
	fprintf(stderr, "usage: rdmacm_backlog server ADDR PORT BACKLOG WAIT1 WAIT2\n"
			"       rdmacm_backlog client ADDR PORT COUNT WAIT\n");
	return 2;
}
