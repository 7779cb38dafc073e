/* A hostile rsocket peer: connects to an rsocket server as rdma-core's rsockets do
 * (their connection data in the CM's private data), then breaks the protocol with one
 * message, chosen by MODE:
 *   big       a data message of 256 MiB, more than any buffer the server published
 *   reserved  a message of a reserved kind (top bits 010)
 * Every message is a zero-length RDMA WRITE with immediate: nothing is written, only the
 * server's bookkeeping is lied to. The server must end the connection (its rrecv fails
 * with ECONNRESET) and count it, and read nothing outside what it published.
 *   rsocket_hostile SERVER PORT MODE     (exit 0 once the lies were sent and acknowledged)
 */
#include <endian.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

static void die(const char *what)
{
	fprintf(stderr, "rsocket_hostile: %s: %s\n", what, strerror(errno));
	exit(1);
}

struct sge {
	uint64_t addr;
	uint32_t key;
	uint32_t length;
} __attribute__((packed));

struct conn_data {
	uint8_t version, flags;
	uint16_t credits;
	uint8_t reserved[3], iomap_size;
	struct sge target_sgl, data_buf;
} __attribute__((packed));

static struct sge be_sge(void *p, uint32_t key, uint32_t len)
{
	struct sge s = { htobe64((uintptr_t)p), htobe32(key), htobe32(len) };
	return s;
}

/* Posts a zero-length RDMA WRITE carrying message `imm` and waits for its completion. */
static void send_msg(struct rdma_cm_id *id, uint32_t imm)
{
	struct ibv_send_wr wr, *bad;
	struct ibv_wc wc;

	memset(&wr, 0, sizeof wr);
	wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
	wr.imm_data = htobe32(imm);
	wr.send_flags = IBV_SEND_SIGNALED;
	if (ibv_post_send(id->qp, &wr, &bad))
		die("ibv_post_send");
	if (rdma_get_send_comp(id, &wc) <= 0)
		die("rdma_get_send_comp");
	if (wc.status != IBV_WC_SUCCESS) {
		fprintf(stderr, "rsocket_hostile: send completed with %s\n", ibv_wc_status_str(wc.status));
		exit(1);
	}
}

int main(int argc, char **argv)
{
	static uint8_t targets[32], ring[4096];
	struct rdma_addrinfo hints, *res;
	struct ibv_qp_init_attr attr;
	struct rdma_conn_param param;
	struct conn_data c;
	struct rdma_cm_id *id;
	struct ibv_mr *tmr, *rmr;
	int i;

	if (argc != 4) {
		fprintf(stderr, "usage: rsocket_hostile SERVER PORT big|reserved\n");
		return 2;
	}
	memset(&hints, 0, sizeof hints);
	hints.ai_port_space = RDMA_PS_TCP;
	if (rdma_getaddrinfo(argv[1], argv[2], &hints, &res))
		die("rdma_getaddrinfo");
	memset(&attr, 0, sizeof attr);
	attr.cap.max_send_wr = attr.cap.max_recv_wr = 16;
	attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
	attr.qp_type = IBV_QPT_RC;
	attr.sq_sig_all = 1;
	if (rdma_create_ep(&id, res, NULL, &attr))
		die("rdma_create_ep");
	for (i = 0; i < 16; i++) { /* receives for the server's credit updates */
		struct ibv_recv_wr wr = { .wr_id = i }, *bad;
		if (ibv_post_recv(id->qp, &wr, &bad))
			die("ibv_post_recv");
	}
	tmr = rdma_reg_write(id, targets, sizeof targets);
	rmr = rdma_reg_write(id, ring, sizeof ring);
	if (!tmr || !rmr)
		die("rdma_reg_write");
	memset(&c, 0, sizeof c);
	c.version = 1;
	c.flags = 2;
	c.credits = htobe16(16);
	c.target_sgl = be_sge(targets, tmr->rkey, 2);
	c.data_buf = be_sge(ring, rmr->rkey, sizeof ring / 2);
	memset(&param, 0, sizeof param);
	param.private_data = &c;
	param.private_data_len = sizeof c;
	param.flow_control = 1;
	param.retry_count = 7;
	param.rnr_retry_count = 7;
	if (rdma_connect(id, &param))
		die("rdma_connect");
	if (!strcmp(argv[3], "big")) {
		send_msg(id, 1u << 28);                  /* data, 256 MiB */
	} else if (!strcmp(argv[3], "reserved")) {
		send_msg(id, (2u << 29) | 16);           /* kind 010 */
	} else {
		fprintf(stderr, "rsocket_hostile: unknown mode %s\n", argv[3]);
		return 2;
	}
	printf("rsocket_hostile: %s sent\n", argv[3]);
	sleep(1);
	rdma_disconnect(id);
	rdma_dereg_mr(tmr);
	rdma_dereg_mr(rmr);
	rdma_destroy_ep(id);
	rdma_freeaddrinfo(res);
	return 0;
}
