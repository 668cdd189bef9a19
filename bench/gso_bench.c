/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * gso_bench: on a path with a 1500-byte MTU, what should bulk data pay per
 * datagram? Issue 20 asks for UDP GSO (UDP_SEGMENT) on send and GRO
 * (UDP_GRO) on receive where the kernel has them, or batches, whichever
 * measures better. shardx sends batches (sendmmsg, up to 64 datagrams a
 * call) and receives them (recvmmsg, 32 a call); this measures both kinds
 * of system call on the same kernel, with raw sockets and nothing else:
 *
 *   gso_bench --dest A.B.C.D [--port P] [--seg 1472] [--mb 256] [--mode M]
 *   gso_bench --listen [--port P] [--seg 1472] [--mode M]
 *
 * Sender modes: `batch` (sendmmsg of 64 datagrams of --seg bytes) and
 * `gso` (sendmsg of one buffer of up to 44 segments with a UDP_SEGMENT
 * control message: the kernel cuts it into datagrams, as late as the
 * device allows); `gsoiov` and `gsoadj` send the same message as 44
 * iovecs of one segment each, in buffers of their own (as packets are
 * malloc'd) or end to end in one buffer: what the kernel's copy pays per
 * iovec (src/shard/chan_pkt.c, Arenas). Receiver modes: `batch`
 * (recvmmsg, 32 datagrams a call) and `gro` (UDP_GRO on the socket: the
 * kernel may hand up several datagrams of one flow coalesced in one read,
 * with their size in a control message; recvmmsg of 64 KiB buffers). The
 * receiver counts datagrams and bytes and prints them with its time and
 * its system calls; the sender prints its time and calls. Both run until
 * --mb MiB passed (the receiver stops at a 1-byte end marker, sent 20
 * times).
 *
 * The namespace cluster (tests/cluster/) gives a 1500-byte veth path
 * between two hosts; bench/gso_bench.sh runs the four combinations there.
 * Figures only.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

#define BATCH_TX 64
#define BATCH_RX 32
#define GSO_MAX  44 /* segments of 1472 bytes within 64 KiB */
#define RX_BUF   65536

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what)
{
    fprintf(stderr, "gso_bench: %s: %s\n", what, strerror(errno));
    exit(1);
}

static int run_sender(const char *dest, int port, size_t seg, size_t mb, bool gso, bool per_iov,
                      bool adjacent)
{
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (fd < 0 || inet_pton(AF_INET, dest, &sa.sin_addr) != 1)
        die("socket or address");
    int big = 8 << 20;
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof(big));
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
        die("connect");
    uint8_t *buf = calloc(GSO_MAX > BATCH_TX ? GSO_MAX : BATCH_TX, seg);
    if (buf == NULL)
        die("calloc");
    /* gsoiov: each segment a buffer of its own, as a packet is. */
    struct iovec piov[GSO_MAX];
    for (unsigned i = 0; i < GSO_MAX; i++) {
        piov[i] = (struct iovec){.iov_base = adjacent  ? buf + i * seg
                                             : per_iov ? calloc(1, seg + 64)
                                                       : NULL,
                                 .iov_len = seg};
        if (per_iov && piov[i].iov_base == NULL)
            die("calloc");
    }
    size_t total = mb << 20, sent = 0;
    unsigned long calls = 0;
    double t0 = now_s();
    while (sent < total) {
        ssize_t n;
        if (gso) {
            size_t segs = GSO_MAX;
            struct iovec iov = {.iov_base = buf, .iov_len = segs * seg};
            char ctrl[CMSG_SPACE(sizeof(uint16_t))] = {0};
            struct msghdr m = {.msg_iov = per_iov ? piov : &iov,
                               .msg_iovlen = per_iov ? GSO_MAX : 1,
                               .msg_control = ctrl,
                               .msg_controllen = sizeof(ctrl)};
            struct cmsghdr *c = CMSG_FIRSTHDR(&m);
            c->cmsg_level = SOL_UDP;
            c->cmsg_type = UDP_SEGMENT;
            c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
            uint16_t s16 = (uint16_t)seg;
            memcpy(CMSG_DATA(c), &s16, sizeof(s16));
            n = sendmsg(fd, &m, 0);
            if (n > 0)
                sent += (size_t)n;
        } else {
            struct mmsghdr mm[BATCH_TX];
            struct iovec iov[BATCH_TX];
            for (unsigned i = 0; i < BATCH_TX; i++) {
                iov[i] = (struct iovec){.iov_base = buf + i * seg, .iov_len = seg};
                mm[i] = (struct mmsghdr){.msg_hdr = {.msg_iov = &iov[i], .msg_iovlen = 1}};
            }
            n = sendmmsg(fd, mm, BATCH_TX, 0);
            if (n > 0)
                sent += (size_t)n * seg;
        }
        calls++;
        if (n < 0 && errno != ENOBUFS && errno != EAGAIN)
            die(gso ? "sendmsg (UDP_SEGMENT)" : "sendmmsg");
    }
    double t = now_s() - t0;
    uint8_t end = 0;
    for (int i = 0; i < 20; i++)
        (void)send(fd, &end, 1, 0);
    printf("{\"side\": \"send\", \"mode\": \"%s\", \"bytes\": %zu, \"seconds\": %.4f, "
           "\"calls\": %lu, \"MBps\": %.1f}\n",
           adjacent  ? "gsoadj"
           : per_iov ? "gsoiov"
           : gso     ? "gso"
                     : "batch",
           sent, t, calls, (double)sent / t / 1e6);
    return 0;
}

static int run_receiver(int port, bool gro)
{
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
        die("bind");
    int big = 32 << 20, one = 1;
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof(big));
    if (gro && setsockopt(fd, IPPROTO_UDP, UDP_GRO, &one, sizeof(one)) != 0)
        die("UDP_GRO");
    (void)setsockopt(fd, SOL_SOCKET, SO_RXQ_OVFL, &one, sizeof(one));
    uint8_t *mem = malloc((size_t)BATCH_RX * RX_BUF);
    if (mem == NULL)
        die("malloc");
    struct mmsghdr mm[BATCH_RX];
    struct iovec iov[BATCH_RX];
    char ctrl[BATCH_RX][CMSG_SPACE(sizeof(int)) * 2];
    unsigned long calls = 0, dgrams = 0, reads = 0;
    size_t bytes = 0;
    double t0 = 0;
    bool done = false;
    while (!done) {
        for (unsigned i = 0; i < BATCH_RX; i++) {
            iov[i] = (struct iovec){.iov_base = mem + (size_t)i * RX_BUF, .iov_len = RX_BUF};
            mm[i] = (struct mmsghdr){.msg_hdr = {.msg_iov = &iov[i],
                                                 .msg_iovlen = 1,
                                                 .msg_control = ctrl[i],
                                                 .msg_controllen = sizeof(ctrl[i])}};
        }
        int n = recvmmsg(fd, mm, BATCH_RX, MSG_WAITFORONE, NULL);
        if (n < 0)
            die("recvmmsg");
        if (t0 == 0)
            t0 = now_s();
        calls++;
        for (int i = 0; i < n; i++) {
            size_t len = mm[i].msg_len;
            if (len == 1) {
                done = true;
                break;
            }
            size_t seg = len;
            for (struct cmsghdr *c = CMSG_FIRSTHDR(&mm[i].msg_hdr); c != NULL;
                 c = CMSG_NXTHDR(&mm[i].msg_hdr, c)) {
                if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
                    int s;
                    memcpy(&s, CMSG_DATA(c), sizeof(s));
                    seg = (size_t)s;
                }
            }
            reads++;
            dgrams += seg > 0 ? (len + seg - 1) / seg : 1;
            bytes += len;
        }
    }
    double t = now_s() - t0;
    printf("{\"side\": \"recv\", \"mode\": \"%s\", \"bytes\": %zu, \"datagrams\": %lu, "
           "\"buffers\": %lu, \"seconds\": %.4f, \"calls\": %lu, \"MBps\": %.1f}\n",
           gro ? "gro" : "batch", bytes, dgrams, reads, t, calls, (double)bytes / t / 1e6);
    return 0;
}

int main(int argc, char **argv)
{
    const char *dest = NULL, *mode = "batch";
    int port = 47000;
    size_t seg = 1472, mb = 256;
    bool listen = false;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--listen") == 0)
            listen = true;
        else if (strcmp(argv[i], "--dest") == 0 && i + 1 < argc)
            dest = argv[++i];
        else if (strcmp(argv[i], "--port") == 0 && i + 1 < argc)
            port = atoi(argv[++i]);
        else if (strcmp(argv[i], "--seg") == 0 && i + 1 < argc)
            seg = strtoul(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--mb") == 0 && i + 1 < argc)
            mb = strtoul(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--mode") == 0 && i + 1 < argc)
            mode = argv[++i];
        else {
            fprintf(stderr, "usage: gso_bench --listen|--dest A.B.C.D [--port P] [--seg N] "
                            "[--mb N] [--mode batch|gso|gsoiov|gsoadj|gro]\n");
            return 2;
        }
    }
    if (seg < 2 || seg > 65000 || seg * GSO_MAX > 65507 + seg) {
        fprintf(stderr, "gso_bench: --seg %zu out of range\n", seg);
        return 2;
    }
    if (listen)
        return run_receiver(port, strcmp(mode, "gro") == 0);
    if (dest == NULL) {
        fprintf(stderr, "gso_bench: --dest or --listen\n");
        return 2;
    }
    bool adjacent = strcmp(mode, "gsoadj") == 0;
    bool per_iov = adjacent || strcmp(mode, "gsoiov") == 0;
    return run_sender(dest, port, seg, mb, per_iov || strcmp(mode, "gso") == 0, per_iov, adjacent);
}
