/* RDMA in children of fork() whose parent has a device open, as Python's multiprocessing
 * runs rdma-core's own rdma_cm tests.
 *
 *   fork_children ADDR PORT
 *
 * The parent opens the first device and makes a QP on it (its driver runs), then forks a
 * server and a client. They connect through rdma_cm (synchronous endpoints, as
 * rdma_server and rdma_client do) and the client sends a message the server checks.
 * Prints "server got: ..." and "client sent" and exits 0 iff both children did; each
 * child gives up after 20 s. A child inherits its parent's library state, not its
 * threads: it must open the device afresh. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#define MSG "hello from a child of fork"

static int fail(const char *who, const char *what)
{
	fprintf(stderr, "%s: %s failed\n", who, what);
	return 1;
}

static struct rdma_addrinfo *addr(const char *host, const char *port, int passive)
{
	struct rdma_addrinfo hints = { .ai_port_space = RDMA_PS_TCP }, *res;

	if (passive)
		hints.ai_flags = RAI_PASSIVE;
	return rdma_getaddrinfo(host, port, &hints, &res) ? NULL : res;
}

static int server(const char *host, const char *port)
{
	struct ibv_qp_init_attr attr = { .cap = { .max_send_wr = 1, .max_recv_wr = 1,
		.max_send_sge = 1, .max_recv_sge = 1 }, .sq_sig_all = 1 };
	struct rdma_addrinfo *ai = addr(host, port, 1);
	struct rdma_cm_id *listen_id, *id;
	struct ibv_wc wc;
	struct ibv_mr *mr;
	char buf[64] = "";

	if (!ai || rdma_create_ep(&listen_id, ai, NULL, &attr))
		return fail("server", "rdma_create_ep");
	if (rdma_listen(listen_id, 1))
		return fail("server", "rdma_listen");
	printf("server listening\n");
	fflush(stdout);
	if (rdma_get_request(listen_id, &id))
		return fail("server", "rdma_get_request");
	if (!(mr = rdma_reg_msgs(id, buf, sizeof buf)))
		return fail("server", "rdma_reg_msgs");
	if (rdma_post_recv(id, NULL, buf, sizeof buf, mr))
		return fail("server", "rdma_post_recv");
	if (rdma_accept(id, NULL))
		return fail("server", "rdma_accept");
	if (rdma_get_recv_comp(id, &wc) != 1 || wc.status != IBV_WC_SUCCESS)
		return fail("server", "the receive");
	printf("server got: %s\n", buf);
	rdma_disconnect(id);
	rdma_dereg_mr(mr);
	rdma_destroy_ep(id);
	rdma_destroy_ep(listen_id);
	return strcmp(buf, MSG) != 0;
}

static int client(const char *host, const char *port)
{
	struct ibv_qp_init_attr attr = { .cap = { .max_send_wr = 1, .max_recv_wr = 1,
		.max_send_sge = 1, .max_recv_sge = 1, .max_inline_data = 64 }, .sq_sig_all = 1 };
	struct rdma_addrinfo *ai = addr(host, port, 0);
	struct rdma_cm_id *id;
	struct ibv_wc wc;
	char msg[] = MSG;

	if (!ai || rdma_create_ep(&id, ai, NULL, &attr))
		return fail("client", "rdma_create_ep");
	if (rdma_connect(id, NULL))
		return fail("client", "rdma_connect");
	if (rdma_post_send(id, NULL, msg, sizeof msg, NULL, IBV_SEND_INLINE))
		return fail("client", "rdma_post_send");
	if (rdma_get_send_comp(id, &wc) != 1 || wc.status != IBV_WC_SUCCESS)
		return fail("client", "the send");
	printf("client sent\n");
	rdma_disconnect(id);
	rdma_destroy_ep(id);
	return 0;
}

int main(int argc, char **argv)
{
	struct ibv_qp_init_attr qa = { .qp_type = IBV_QPT_RC, .cap = { .max_send_wr = 1,
		.max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_device **list;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	int n, st_s, st_c;
	pid_t s, c;

	if (argc != 3) {
		fprintf(stderr, "usage: fork_children ADDR PORT\n");
		return 2;
	}
	list = ibv_get_device_list(&n);
	if (!list || !n || !(ctx = ibv_open_device(list[0])) || !(pd = ibv_alloc_pd(ctx)))
		return fail("parent", "opening a device");
	qa.send_cq = qa.recv_cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	if (!qa.send_cq || !ibv_create_qp(pd, &qa))
		return fail("parent", "ibv_create_qp");
	printf("parent has %s open\n", ibv_get_device_name(list[0]));
	fflush(stdout);
	if (!(s = fork())) {
		alarm(20);
		exit(server(argv[1], argv[2]));
	}
	sleep(1);
	if (!(c = fork())) {
		alarm(20);
		exit(client(argv[1], argv[2]));
	}
	waitpid(c, &st_c, 0);
	waitpid(s, &st_s, 0);
	printf("server exit %d, client exit %d\n", st_s, st_c);
	return !(WIFEXITED(st_s) && !WEXITSTATUS(st_s) && WIFEXITED(st_c) && !WEXITSTATUS(st_c));
}
