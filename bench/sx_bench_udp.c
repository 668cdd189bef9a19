/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The raw-UDP floor: what this machine's loopback does with two plain
 * nonblocking UDP sockets, no reliability, no headers, busy-polling recv().
 * Every shardx figure is reported as a ratio to it, measured in the same
 * run, so a report stays meaningful on a noisy or slow machine.
 *
 * The sockets get the same buffer sizes shardx's udp transport asks for
 * (16 MiB receive, 4 MiB send by default), so the floor and shardx differ
 * in protocol work only, not in kernel settings.
 */
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sx_bench.h"

#define SXB_UDP_RCVBUF (16 << 20)
#define SXB_UDP_SNDBUF (4 << 20)

/* A receiver decides the sender is done once the sender said so and then
 * nothing arrived for this long: datagrams still queued are drained first. */
#define SXB_UDP_QUIET_NS 20000000ull

/* The ping-pong floor's resend timer (sxb_udp_ping): about a thousand
 * loopback round trips, a hundred across a switch. */
#define SXB_UDP_RESEND_NS 10000000ull

static void sxb_udp_bufsize(int fd, int force_opt, int opt, int bytes)
{
    /* SO_*BUFFORCE passes rmem_max/wmem_max when we may (CAP_NET_ADMIN). */
    if (setsockopt(fd, SOL_SOCKET, force_opt, &bytes, sizeof(bytes)) != 0)
        (void)setsockopt(fd, SOL_SOCKET, opt, &bytes, sizeof(bytes));
}

/* A nonblocking socket bound to @p ip (the kernel picks the port), with
 * shardx's buffer sizes; its port in @p port_p. */
static int sxb_udp_socket(struct in_addr ip, uint16_t *port_p)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr = ip};
    socklen_t alen = sizeof(a);
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

    if (fd < 0)
        return -1;
    sxb_udp_bufsize(fd, SO_RCVBUFFORCE, SO_RCVBUF, SXB_UDP_RCVBUF);
    sxb_udp_bufsize(fd, SO_SNDBUFFORCE, SO_SNDBUF, SXB_UDP_SNDBUF);
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &alen) != 0) {
        close(fd);
        return -1;
    }
    *port_p = a.sin_port;
    return fd;
}

/* The shared-socket pair (sx_bench.h): sfd receives unconnected, tfd sends
 * connected to the other rank's sfd. */
static int sxb_udp_open_shared(const sxb_ctl_t *ctl, sxb_udp_t *u, struct in_addr self_ip,
                               struct in_addr peer_ip)
{
    uint16_t mine[2], theirs[2]; /* sfd's port, tfd's */

    u->sfd = sxb_udp_socket(self_ip, &mine[0]);
    u->tfd = u->sfd < 0 ? -1 : sxb_udp_socket(self_ip, &mine[1]);
    if (u->sfd < 0 || u->tfd < 0)
        return sxb_fail("raw UDP shared-socket pair: %s", strerror(errno));
    if (sxb_ctl_write(ctl, mine, sizeof(mine)) != 0 ||
        sxb_ctl_read(ctl, theirs, sizeof(theirs), NULL, NULL) != 0)
        return -1;
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_addr = peer_ip, .sin_port = theirs[0]};
    u->tpeer =
        (struct sockaddr_in){.sin_family = AF_INET, .sin_addr = peer_ip, .sin_port = theirs[1]};
    if (connect(u->tfd, (struct sockaddr *)&to, sizeof(to)) != 0)
        return sxb_fail("raw UDP connect of the shared pair: %s", strerror(errno));
    return 0;
}

int sxb_udp_open(const sxb_ctl_t *ctl, sxb_udp_t *u)
{
    struct sockaddr_in self, peer;
    socklen_t slen = sizeof(self), plen = sizeof(peer);
    struct in_addr self_ip = {.s_addr = htonl(INADDR_LOOPBACK)}, peer_ip = self_ip;
    uint16_t port, peer_port;

    u->fd = u->sfd = u->tfd = -1;
    /* The floor takes the path the ranks take: that of a launched job's
     * control channel (TCP between the hosts' addresses, sx_bench_ctl.c),
     * loopback for a forked one (a pipe). */
    if (ctl->launched && getsockname(ctl->rfd, (struct sockaddr *)&self, &slen) == 0 &&
        self.sin_family == AF_INET && getpeername(ctl->rfd, (struct sockaddr *)&peer, &plen) == 0 &&
        peer.sin_family == AF_INET) {
        self_ip = self.sin_addr;
        peer_ip = peer.sin_addr;
    }
    u->buf = malloc(SXB_UDP_MAX);
    if (u->buf == NULL || (u->fd = sxb_udp_socket(self_ip, &port)) < 0) {
        sxb_fail("raw UDP socket: %s", strerror(errno));
        sxb_udp_close(u);
        return -1;
    }
    memset(u->buf, 0x5a, SXB_UDP_MAX);
    if (sxb_ctl_write(ctl, &port, sizeof(port)) != 0 ||
        sxb_ctl_read(ctl, &peer_port, sizeof(peer_port), NULL, NULL) != 0) {
        sxb_udp_close(u);
        return -1;
    }
    /* Connected, so send() needs no address and strangers' datagrams are
     * filtered by the kernel. */
    u->peer =
        (struct sockaddr_in){.sin_family = AF_INET, .sin_addr = peer_ip, .sin_port = peer_port};
    if (connect(u->fd, (struct sockaddr *)&u->peer, sizeof(u->peer)) != 0) {
        sxb_fail("raw UDP connect: %s", strerror(errno));
        sxb_udp_close(u);
        return -1;
    }
    if (sxb_udp_open_shared(ctl, u, self_ip, peer_ip) != 0) {
        sxb_udp_close(u);
        return -1;
    }
    return 0;
}

void sxb_udp_close(sxb_udp_t *u)
{
    int *fds[] = {&u->fd, &u->sfd, &u->tfd};
    for (unsigned i = 0; i < 3; i++) {
        if (*fds[i] >= 0)
            close(*fds[i]);
        *fds[i] = -1;
    }
    free(u->buf);
    u->buf = NULL;
}

/* Sends @p len bytes on @p fd, waiting for room. */
SXB_LOOP static int sxb_udp_send(const sxb_ctl_t *ctl, sxb_udp_t *u, int fd, size_t len)
{
    uint64_t deadline = 0;
    unsigned spins = 0;

    for (;;) {
        if (send(fd, u->buf, len, 0) == (ssize_t)len)
            return 0;
        if (errno != EAGAIN && errno != ENOBUFS && errno != EINTR)
            return sxb_fail("raw UDP send of %zu bytes: %s", len, strerror(errno));
        /* As in sxb_udp_recv: no clock read unless the wait gets long. */
        if ((++spins & 4095) == 0) {
            if (deadline == 0)
                deadline = sxb_now_ns() + SXB_WAIT_LIMIT_NS;
            else if (sxb_check(ctl, deadline, "room to send a raw UDP datagram") != 0)
                return -1;
        }
    }
}

/* Busy-polls for one datagram; returns its length, -1 after printing why,
 * or -2 once @p until_ns (0: no limit) has passed or, with @p watch_ctl,
 * once the control channel has something to read. The clock and the
 * channel are looked at only every 1024 empty reads: a round trip is a few
 * microseconds. With @p shared it reads the shared pair's receiving
 * socket, with the sender's address, and checks that (sxb_udp_pingpong). */
SXB_LOOP static ssize_t sxb_udp_recv(const sxb_ctl_t *ctl, sxb_udp_t *u, bool shared,
                                     uint64_t until_ns, bool watch_ctl)
{
    uint64_t deadline = 0;
    unsigned spins = 0;

    for (;;) {
        struct sockaddr_in from;
        socklen_t from_len = sizeof(from);
        ssize_t n =
            shared ? recvfrom(u->sfd, u->buf, SXB_UDP_MAX, 0, (struct sockaddr *)&from, &from_len)
                   : recv(u->fd, u->buf, SXB_UDP_MAX, 0);
        if (n >= 0 && shared &&
            (from_len != sizeof(from) || from.sin_family != AF_INET ||
             from.sin_addr.s_addr != u->tpeer.sin_addr.s_addr ||
             from.sin_port != u->tpeer.sin_port)) {
            sxb_fail("raw UDP datagram from an address not the other rank's");
            return -1;
        }
        if (n >= 0)
            return n;
        if (errno != EAGAIN && errno != EINTR) {
            sxb_fail("raw UDP recv: %s", strerror(errno));
            return -1;
        }
        if ((++spins & 1023) != 0)
            continue;
        uint64_t now = sxb_now_ns();
        if (until_ns != 0 && now >= until_ns)
            return -2;
        if (watch_ctl && sxb_ctl_readable(ctl))
            return -2;
        if (deadline == 0)
            deadline = now + SXB_WAIT_LIMIT_NS;
        else if (sxb_check(ctl, deadline, "a raw UDP datagram") != 0)
            return -1;
    }
}

/* A ping's number, in its first bytes (up to 4, little-endian). */
static void sxb_udp_put_seq(uint8_t *buf, size_t size, uint32_t seq)
{
    for (size_t i = 0; i < size && i < 4; i++)
        buf[i] = (uint8_t)(seq >> (8 * i));
}

static bool sxb_udp_has_seq(const uint8_t *buf, size_t size, uint32_t seq)
{
    for (size_t i = 0; i < size && i < 4; i++)
        if (buf[i] != (uint8_t)(seq >> (8 * i)))
            return false;
    return true;
}

/* Rank 0's round trip: a ping, and its own answer. Answers to earlier
 * pings (resent, or from an earlier call on the same sockets) are read and
 * dropped. A ping unanswered for ten times the fastest round trip so far
 * (@p *min_rtt_p, 0 before the first), and at least SXB_UDP_RESEND_NS, is
 * taken as lost: the round trip starts again with a new number and counts
 * in @p *lost_p. A 0-byte ping has no number, so it waits for its answer
 * as long as any wait here. */
SXB_LOOP static int sxb_udp_ping(const sxb_ctl_t *ctl, sxb_udp_t *u, size_t size, bool shared,
                                 uint64_t *rtt_p, uint64_t *min_rtt_p, uint64_t *lost_p)
{
    int fd = shared ? u->tfd : u->fd;
    uint64_t give_up = 0;

    for (;;) {
        uint32_t seq = ++u->seq;
        sxb_udp_put_seq(u->buf, size, seq);
        uint64_t t0 = sxb_now_ns();
        if (sxb_udp_send(ctl, u, fd, size) != 0)
            return -1;
        uint64_t wait = *min_rtt_p * 10 > SXB_UDP_RESEND_NS ? *min_rtt_p * 10 : SXB_UDP_RESEND_NS;
        uint64_t until = size > 0 ? t0 + wait : 0;
        for (;;) {
            ssize_t n = sxb_udp_recv(ctl, u, shared, until, false);
            uint64_t t1 = sxb_now_ns();
            if (n == -1)
                return -1;
            if (n == -2)
                break;
            if ((size_t)n == size && sxb_udp_has_seq(u->buf, size, seq)) {
                *rtt_p = t1 - t0;
                if (*min_rtt_p == 0 || *rtt_p < *min_rtt_p)
                    *min_rtt_p = *rtt_p;
                return 0;
            }
            if (size == 0)
                return sxb_fail("raw UDP pong of %zd bytes, expected %zu", n, size);
        }
        (*lost_p)++;
        if (give_up == 0)
            give_up = t0 + SXB_WAIT_LIMIT_NS;
        else if (sxb_check(ctl, give_up, "a raw UDP pong (every ping resent since)") != 0)
            return -1;
    }
}

SXB_LOOP int sxb_udp_pingpong(const sxb_ctl_t *ctl, sxb_udp_t *u, size_t size, bool shared,
                              uint64_t warmup, uint64_t iters, uint64_t *rtt_ns, uint64_t *lost_p)
{
    if (size > SXB_UDP_MAX)
        return sxb_fail("raw UDP ping-pong of %zu bytes: above %u", size, SXB_UDP_MAX);
    if (sxb_ctl_barrier(ctl, NULL, NULL) != 0)
        return -1;
    if (ctl->rank == 0) {
        uint64_t min_rtt = 0, lost = 0; /* 0: none yet */
        for (uint64_t i = 0; i < warmup + iters; i++) {
            uint64_t rtt = 0;
            if (sxb_udp_ping(ctl, u, size, shared, &rtt, &min_rtt, &lost) != 0)
                return -1;
            if (i >= warmup)
                rtt_ns[i - warmup] = rtt;
        }
        if (lost_p != NULL)
            *lost_p += lost;
    } else {
        /* Echo everything, resent pings too, until rank 0 has its last
         * answer and says so on the control channel. */
        int fd = shared ? u->tfd : u->fd;
        for (;;) {
            ssize_t n = sxb_udp_recv(ctl, u, shared, 0, true);
            if (n == -1)
                return -1;
            if (n == -2)
                break;
            if (sxb_udp_send(ctl, u, fd, (size_t)n) != 0)
                return -1;
        }
    }
    return sxb_ctl_barrier(ctl, NULL, NULL);
}

/* What rank 1 saw of a one-way stream. */
typedef struct sxb_udp_rx_report {
    uint64_t received;
    uint64_t first_ns, last_ns;
} sxb_udp_rx_report_t;

static int sxb_udp_blast(const sxb_ctl_t *ctl, sxb_udp_t *u, size_t size, uint64_t count,
                         uint64_t *elapsed_ns_p)
{
    uint64_t t0 = sxb_now_ns();
    for (uint64_t i = 0; i < count; i++) {
        if (sxb_udp_send(ctl, u, u->fd, size) != 0)
            return -1;
    }
    *elapsed_ns_p = sxb_now_ns() - t0;
    /* Tell the receiver how many went out, so it stops once drained. */
    return sxb_ctl_write(ctl, &count, sizeof(count));
}

static int sxb_udp_count(const sxb_ctl_t *ctl, sxb_udp_t *u, sxb_udp_rx_report_t *rep)
{
    uint64_t deadline = sxb_now_ns() + SXB_WAIT_LIMIT_NS;
    uint64_t sent = 0, quiet_since = 0;
    bool done = false;
    unsigned spins = 0;

    *rep = (sxb_udp_rx_report_t){0};
    for (;;) {
        ssize_t n = recv(u->fd, u->buf, SXB_UDP_MAX, 0);
        if (n >= 0) {
            uint64_t now = sxb_now_ns();
            if (rep->received++ == 0)
                rep->first_ns = now;
            rep->last_ns = now;
            quiet_since = 0;
            continue;
        }
        if (errno != EAGAIN && errno != EINTR)
            return sxb_fail("raw UDP recv: %s", strerror(errno));
        if ((++spins & 255) != 0)
            continue;
        if (!done && sxb_ctl_readable(ctl)) {
            if (sxb_ctl_read(ctl, &sent, sizeof(sent), NULL, NULL) != 0)
                return -1;
            done = true;
        }
        if (done) {
            uint64_t now = sxb_now_ns();
            if (rep->received >= sent)
                break;
            if (quiet_since == 0)
                quiet_since = now;
            else if (now - quiet_since > SXB_UDP_QUIET_NS)
                break;
        }
        if (sxb_check(ctl, deadline, "the raw UDP stream") != 0)
            return -1;
    }
    return 0;
}

int sxb_udp_rate(const sxb_ctl_t *ctl, sxb_udp_t *u, size_t size, uint64_t count, double *rx_rate_p,
                 double *tx_rate_p, double *loss_p)
{
    sxb_udp_rx_report_t rep;
    uint64_t tx_ns = 0;

    if (sxb_ctl_barrier(ctl, NULL, NULL) != 0)
        return -1;
    if (ctl->rank == 1) {
        if (sxb_udp_count(ctl, u, &rep) != 0 || sxb_ctl_write(ctl, &rep, sizeof(rep)) != 0)
            return -1;
        return sxb_ctl_barrier(ctl, NULL, NULL);
    }
    if (sxb_udp_blast(ctl, u, size, count, &tx_ns) != 0 ||
        sxb_ctl_read(ctl, &rep, sizeof(rep), NULL, NULL) != 0)
        return -1;
    double rx_s = (double)(rep.last_ns - rep.first_ns) / 1e9;
    /* Fewer than two datagrams arrived (a lossy path drops the reassembly
     * of every datagram above its MTU once its fragments fill the
     * kernel's reassembly memory): no rate, rather than a floor of 0
     * that made every ratio to it infinite. */
    if (rx_rate_p != NULL)
        *rx_rate_p = rep.received >= 2 && rx_s > 0 ? (double)rep.received / rx_s : NAN;
    if (tx_rate_p != NULL)
        *tx_rate_p = (double)count / ((double)tx_ns / 1e9);
    if (loss_p != NULL)
        *loss_p = 1.0 - (double)rep.received / (double)count;
    return sxb_ctl_barrier(ctl, NULL, NULL);
}

int sxb_bench_floor(const sxb_ctl_t *ctl, const sxb_opts_t *opts)
{
    size_t sizes[16];
    size_t nsizes = sxb_latency_sizes(opts, sizes, 16);
    sxb_udp_t u = {.fd = -1, .sfd = -1, .tfd = -1};
    bool human = sxb_human(ctl, opts);
    int rc = -1;

    if (sxb_udp_open(ctl, &u) != 0)
        return -1;
    if (human)
        printf("\n# raw-UDP ping-pong: two nonblocking sockets, busy-polling recv()\n"
               "%9s %8s %12s %10s\n",
               "size", "iters", "half_rtt_us", "p99_us");
    for (size_t s = 0; s < nsizes; s++) {
        if (sizes[s] > SXB_UDP_MAX)
            continue;
        uint64_t iters = sxb_latency_iters(opts, sizes[s]);
        uint64_t *rtt = calloc(iters, sizeof(*rtt));
        if (rtt == NULL) {
            sxb_fail("out of memory");
            goto out;
        }
        uint64_t lost = 0;
        if (sxb_udp_pingpong(ctl, &u, sizes[s], false, iters / 10 + 10, iters, rtt, &lost) != 0) {
            free(rtt);
            goto out;
        }
        if (ctl->rank == 0) {
            uint64_t med, p99;
            sxb_quantiles(rtt, iters, 0.99, &med, &p99);
            sxb_record_t r = sxb_record("floor", "raw", sizes[s]);
            sxb_metric(&r, "half_rtt_us", (double)med / 2e3);
            sxb_metric(&r, "p99_us", (double)p99 / 2e3);
            sxb_metric(&r, "lost_round_trips", (double)lost);
            sxb_record_add(&r);
            if (human)
                printf("%9zu %8llu %12.2f %10.2f\n", sizes[s], (unsigned long long)iters,
                       (double)med / 2e3, (double)p99 / 2e3);
            if (human && lost > 0)
                printf("#   %llu round trips lost a datagram (no answer in 10 ms, or in ten "
                       "times the fastest round trip where that is longer) and ran again\n",
                       (unsigned long long)lost);
        }
        free(rtt);
    }

    /* One-way rate: one send() per datagram, as plain as it gets. */
    size_t size = opts->size_set && opts->size <= SXB_UDP_MAX ? opts->size : 8;
    uint64_t count = opts->iters_set ? opts->iters : 1000000;
    double rx_rate = 0, tx_rate = 0, loss = 0;
    if (sxb_udp_rate(ctl, &u, size, count, &rx_rate, &tx_rate, &loss) != 0)
        goto out;
    if (ctl->rank == 0) {
        sxb_record_t r = sxb_record("floor_rate", "raw", size);
        sxb_metric(&r, "msg_rate", rx_rate);
        sxb_metric(&r, "msg_rate_sender", tx_rate);
        sxb_metric(&r, "bw_MBps", rx_rate * (double)size / 1e6);
        sxb_metric(&r, "loss", loss);
        sxb_record_add(&r);
        if (human)
            printf("\n# raw-UDP one-way rate: %zu-byte datagrams, one send()/recv() each\n"
                   "%10s %10s %8s %14s %14s\n%10llu %10.0f %8.3f %14.0f %14.0f\n",
                   size, "sent", "received", "loss_%", "rx_msgs_per_s", "tx_msgs_per_s",
                   (unsigned long long)count, (1.0 - loss) * (double)count, 100.0 * loss, rx_rate,
                   tx_rate);
    }
    rc = 0;
out:
    sxb_udp_close(&u);
    return rc;
}
