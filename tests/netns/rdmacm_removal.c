/* rdma_cm IDs on a device whose interface is deleted, treated as the kernel's rdma_cm
 * treats them when a device goes, and the interface made again under its name.
 *
 *   rdmacm_removal ADDR PORT
 *     Makes four IDs on one channel: L listens on ADDR:PORT (on ADDR's device alone), W
 *     listens on every device (0.0.0.0:PORT+1), B is bound to ADDR (any port), and I is
 *     bound to nothing. Prints "ready", then waits up to 20 s for events while ADDR's
 *     interface is deleted: L and B must each hear RDMA_CM_EVENT_DEVICE_REMOVAL once
 *     ("L removed", "B removed"), W and I nothing, and nothing more may come within
 *     1 s after. Destroys L and B ("destroyed"), waits up to 20 s until ADDR can be
 *     bound again (its interface made again), listens on ADDR:PORT once more and sends
 *     that listener a connect request from a new ID: the listener must get it ("server
 *     got the request"), and its rejection must reach the client ("client rejected").
 *     W, listening on every device, must take in the interface made again: a request to
 *     ADDR:PORT+1 reaches it within 5 s ("wildcard got the request after N refused":
 *     until then, those sent are refused as no listener's).
 *
 * Exit status 0 unless a call failed or an event was missing or unexpected. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>

#define PROG "rdmacm_removal"
#include "rdmacm_util.h"

static void say(const char *what)
{
	printf("%s\n", what);
	fflush(stdout);
}

int main(int argc, char **argv)
{
	struct rdma_event_channel *ch, *cch;
	struct rdma_cm_id *l, *w, *b, *i, *client, *request;
	struct sockaddr_storage ss, any, bound, wss;
	struct rdma_cm_event *e;
	char wport[16];
	int removed_l = 0, removed_b = 0, tries;

	if (argc != 3) {
		fprintf(stderr, "usage: rdmacm_removal ADDR PORT\n");
		return 2;
	}
	ss = addr_of(argv[1], argv[2]);
	snprintf(wport, sizeof(wport), "%d", atoi(argv[2]) + 1);
	any = addr_of("0.0.0.0", wport);
	bound = addr_of(argv[1], "0");
	ch = rdma_create_event_channel();
	cch = rdma_create_event_channel();
	if (!ch || !cch)
		die("rdma_create_event_channel");

	l = listen_on(ch, &ss, 4);
	w = listen_on(ch, &any, 4);
	if (rdma_create_id(ch, &b, NULL, RDMA_PS_TCP) || rdma_create_id(ch, &i, NULL, RDMA_PS_TCP))
		die("rdma_create_id");
	if (rdma_bind_addr(b, (struct sockaddr *)&bound))
		die("rdma_bind_addr");
	say("ready");

	/* Up to 20 s for the first, then 1 s after each, for any more. */
	for (e = next_event(ch, 20000); e; e = next_event(ch, 1000)) {
		struct rdma_cm_id *id = e->id;
		int kind = e->event;

		rdma_ack_cm_event(e);
		if (kind == RDMA_CM_EVENT_DEVICE_REMOVAL && id == l && !removed_l++) {
			say("L removed");
		} else if (kind == RDMA_CM_EVENT_DEVICE_REMOVAL && id == b && !removed_b++) {
			say("B removed");
		} else {
			fprintf(stderr, PROG ": unexpected %s on %s\n", rdma_event_str(kind),
				id == l ? "L" : id == b ? "B" : id == w ? "W" : id == i ? "I" : "?");
			return 1;
		}
	}
	if (!removed_l || !removed_b) {
		fprintf(stderr, PROG ": DEVICE_REMOVAL %s L, %s B\n", removed_l ? "on" : "missing on",
			removed_b ? "on" : "missing on");
		return 1;
	}
	if (rdma_destroy_id(l) || rdma_destroy_id(b))
		die("rdma_destroy_id");
	say("destroyed");

	/* The interface made again: ADDR can be bound once it has the address. */
	for (tries = 0; tries < 200; tries++) {
		struct rdma_cm_id *probe;

		if (rdma_create_id(ch, &probe, NULL, RDMA_PS_TCP))
			die("rdma_create_id");
		if (!rdma_bind_addr(probe, (struct sockaddr *)&bound)) {
			rdma_destroy_id(probe);
			break;
		}
		rdma_destroy_id(probe);
		usleep(100 * 1000);
	}
	l = listen_on(ch, &ss, 4);
	say("listening again");
	client = request_to(cch, &ss, 0x123);
	expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST, NULL, &request);
	say("server got the request");
	if (rdma_reject(request, NULL, 0))
		die("rdma_reject");
	expect(cch, RDMA_CM_EVENT_REJECTED, NULL, NULL);
	say("client rejected");
	rdma_destroy_id(request);
	rdma_destroy_id(client);

	wss = addr_of(argv[1], wport);
	for (tries = 0;; tries++) {
		int status;

		client = request_to(cch, &wss, 0x124);
		e = next_event(ch, 500);
		if (e && e->event == RDMA_CM_EVENT_CONNECT_REQUEST && e->listen_id == w) {
			request = e->id;
			rdma_ack_cm_event(e);
			break;
		}
		if (e) {
			fprintf(stderr, PROG ": unexpected %s on the listener's channel\n",
				rdma_event_str(e->event));
			return 1;
		}
		expect(cch, RDMA_CM_EVENT_REJECTED, &status, NULL);
		rdma_destroy_id(client);
		if (tries == 10) {
			fprintf(stderr, PROG ": the wildcard listener never got a request (status %d)\n",
				status);
			return 1;
		}
	}
	printf("wildcard got the request after %d refused\n", tries);
	fflush(stdout);
	if (rdma_reject(request, NULL, 0))
		die("rdma_reject");
	expect(cch, RDMA_CM_EVENT_REJECTED, NULL, NULL);
	rdma_destroy_id(request);
	rdma_destroy_id(client);
	rdma_destroy_id(l);
	rdma_destroy_id(w);
	rdma_destroy_id(i);
	rdma_destroy_event_channel(cch);
	rdma_destroy_event_channel(ch);
	return 0;
}
