// One UDP GSO stream through the kernel, its send buffer copied (as ferroce's UDP way
// sends) or lent with MSG_ZEROCOPY: does lending save the kernel's copy on this path?
//
//   zerocopy recv SECONDS_IDLE             print "recv GBPS"
//   zerocopy send ADDR copy|zerocopy SECS SEGMENT
//                                          print "send GBPS sends N lent N copied N"
//
// The sender sends super-packets of as many SEGMENT-byte segments as fit in 65,000 bytes
// (4,112 is a RoCE WRITE_MIDDLE at MTU 4096 with its BTH and ICRC, 1,040 at MTU 1024) to
// UDP port 4791 and, lending, drains the error queue,
// counting completions and those the kernel flags SO_EE_CODE_ZEROCOPY_COPIED (it copied
// the pages after all). Built and run by scripts/bench/zerocopy.sh.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/errqueue.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

enum { BUFFERS = 64 };

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static void must(int ok, const char *what) {
  if (!ok) {
    perror(what);
    exit(1);
  }
}

static int receive(double idle) {
  int s = socket(AF_INET, SOCK_DGRAM, 0), one = 1, big = 16 << 20;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(4791)};
  struct timeval tv = {.tv_sec = (time_t)idle, .tv_usec = (long)((idle - (time_t)idle) * 1e6)};
  static char buf[65536];
  long long bytes = 0;
  double first = 0, last = 0;
  must(s >= 0, "socket");
  must(bind(s, (void *)&a, sizeof a) == 0, "bind");
  must(setsockopt(s, SOL_UDP, UDP_GRO, &one, sizeof one) == 0, "UDP_GRO");
  must(setsockopt(s, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big) == 0, "SO_RCVBUFFORCE");
  must(setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == 0, "SO_RCVTIMEO");
  for (;;) {
    ssize_t r = recv(s, buf, sizeof buf, 0);
    if (r < 0) break;  // idle for the timeout: the sender is done
    if (first == 0) first = now();
    bytes += r;
    last = now();
  }
  if (bytes == 0 || last <= first) {
    fprintf(stderr, "zerocopy: received nothing\n");
    return 1;
  }
  printf("recv %.2f\n", bytes * 8 / 1e9 / (last - first));
  return 0;
}

static int send_stream(const char *addr, int lend, double secs, int seg) {
  int s = socket(AF_INET, SOCK_DGRAM, 0), one = 1, big = 16 << 20;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(4791)};
  size_t len = seg > 0 ? (size_t)seg * (65000 / seg) : 0;
  char *buf = malloc(len * BUFFERS);
  long long bytes = 0, sends = 0, lent = 0, copied = 0;
  double t0 = now();
  unsigned i = 0;
  must(s >= 0 && buf != NULL && len > 0, "socket");
  must(inet_pton(AF_INET, addr, &a.sin_addr) == 1, "address");
  must(connect(s, (void *)&a, sizeof a) == 0, "connect");
  must(setsockopt(s, SOL_UDP, UDP_SEGMENT, &seg, sizeof seg) == 0, "UDP_SEGMENT");
  must(setsockopt(s, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof big) == 0, "SO_SNDBUFFORCE");
  if (lend) must(setsockopt(s, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof one) == 0, "SO_ZEROCOPY");
  memset(buf, 0x5a, len * BUFFERS);
  while (now() - t0 < secs) {
    // Reusing a lent buffer before its completion only changes the bytes sent, which
    // nobody checks here; the copies are the same.
    ssize_t r = send(s, buf + (i++ % BUFFERS) * len, len, lend ? MSG_ZEROCOPY : 0);
    if (r < 0 && errno != ENOBUFS && errno != EAGAIN) must(0, "send");
    if (r > 0) bytes += r, sends++;
    while (lend) {
      char control[128];
      struct msghdr m = {.msg_control = control, .msg_controllen = sizeof control};
      if (recvmsg(s, &m, MSG_ERRQUEUE | MSG_DONTWAIT) < 0) break;
      for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c != NULL; c = CMSG_NXTHDR(&m, c)) {
        struct sock_extended_err *e = (void *)CMSG_DATA(c);
        if (e->ee_origin != SO_EE_ORIGIN_ZEROCOPY) continue;
        lent += (long long)e->ee_data - e->ee_info + 1;
        if (e->ee_code & SO_EE_CODE_ZEROCOPY_COPIED) copied += (long long)e->ee_data - e->ee_info + 1;
      }
    }
  }
  printf("send %.2f sends %lld lent %lld copied %lld\n", bytes * 8 / 1e9 / (now() - t0), sends, lent, copied);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "recv") == 0) return receive(atof(argv[2]));
  if (argc == 6 && strcmp(argv[1], "send") == 0)
    return send_stream(argv[2], strcmp(argv[3], "zerocopy") == 0, atof(argv[4]), atoi(argv[5]));
  fprintf(stderr, "usage: zerocopy recv IDLE_SECONDS | zerocopy send ADDR copy|zerocopy SECONDS SEGMENT\n");
  return 2;
}
