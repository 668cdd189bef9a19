/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * udp's hot socket (udp.c has the interface, udp_sock.c makes the
 * socket): which destination it is connected to, and how a poll shares
 * its reads between it and the data socket.
 *
 * Why (config->udp_hot, SX_UDP_HOT): the raw-UDP floor of sx_bench
 * latency reads a connected socket with recv(2); shardx read one
 * unconnected socket per shard, which every peer sends to, with
 * recvfrom(2) and the sender's address, which the shard checks
 * (udp_src_matches). A throwaway ping-pong that ran six socket layouts in
 * one pair of processes, alternating blocks of 500 round trips
 * (docs/tuning.md, "Hot socket: SX_UDP_HOT"), put the whole 0.2 us a
 * message between the two in reading the address: every layout that read
 * it, connected or not, ran at shardx's time, and every one that did not
 * at the floor's. A socket connected to a peer needs no address: the
 * kernel hands it datagrams from that address and port only.
 *
 * So each interface has a second socket on the data port (udp_sock.c
 * makes it and keeps the port closed to anyone else), connected to one
 * destination's data port: the destination of the last run of about
 * UDP_HOT_RUN small datagrams sent in a row (sx_udp_hot_track, udp_int.h).
 * Its small datagrams leave through it, from our data port, and the
 * kernel hands it what comes from that destination's data port. In a
 * ping-pong of small messages both ends pick each other, and each end's
 * datagrams reach the other's hot socket. A peer that sends from
 * elsewhere (an older shardx, its connected send socket, its ACK socket)
 * still reaches the data socket, and ours reach its data socket when its
 * hot socket is connected elsewhere: nothing changes on the wire but a
 * source port, which receivers never read (udp_src_matches compares
 * addresses). sx_udp_hot_track runs in post_send, which so makes a
 * connect(2) call when a run moves the socket, or two where the new
 * route needs another local address (sx_udp_hot_connect says why).
 *
 * Once the socket has settled, its lone reads take no address (vouched,
 * udp_rx.c): those read with recvfrom, that is a ping-pong's, on a socket
 * without control data (not after its first backlog, nor once it reports
 * ECN: the address costs little beside those). After a connect, until it
 * has been found empty at least UDP_HOT_SETTLE_NS later, reads take
 * addresses, since datagrams queued before the connect (or in the moment
 * between a disconnect and the connect, when it is an unconnected socket
 * on the port) may be anyone's. The 10 ms are for a datagram the
 * kernel matched to the socket just before the connect and queues just
 * after it, one pass of its receive path: microseconds, and a bet, not a
 * bound, on a CPU that stalls in between.
 *
 * Only datagrams of at most half the route's mtu count, and a larger one
 * sent to the hot destination goes through its connected send socket and
 * ends its use of the hot socket until the next run (which finds it still
 * connected there). Bulk gains nothing here: its reads are batches that
 * take addresses anyway (udp_rx.c). And through the hot sockets it lost:
 * sx_bench bw at 1 MiB runs in one of two modes on this VM, ~2.2 and
 * ~5.1 GB/s, set by how often the receiver's delayed ACK fires, and with
 * bulk through them 4 runs of 20 were in the fast one against 9 of 20
 * without (alternated); with this rule, 9 of 20 against 11, the same
 * within each mode. (On 2026-12-06 the slow runs at 1 MiB were those in
 * which the receiver's hot socket, moving to the sender, took some of the
 * stream in the moment it stood unconnected: sx_udp_hot_connect.)
 *
 * Reading both sockets at every poll costs a second system call a pass, so
 * a socket that has had no datagram in its last UDP_HOT_IDLE reads is read
 * only every UDP_HOT_QUIET_POLLS-th poll while the other is not quiet:
 * while one peer is all the traffic, the data socket; when the hot peer
 * falls silent and others talk, the hot socket. The longer it stays quiet
 * the less often it is read: half as often after each UDP_HOT_QUIET_STEP
 * quiet reads, down to every UDP_HOT_QUIET_MAX-th poll, some 8,000 polls
 * (a few milliseconds of busy polling) into the quiet spell
 * (udp_hot_quiet_every). Each of those reads is an empty system call
 * that a datagram arriving on the other socket meanwhile waits out, and on
 * this VM an empty recvfrom now takes 1.2-1.4 us, as long as the poll
 * itself: reading the quiet data socket every 128th poll instead of every
 * 16th took sx_bench latency --size 8 from 5.975 to 5.810 us and from
 * 6.130 to 5.815 (medians of two rounds of 12 alternated pairs; faster in
 * 17 of 24, ratio to the raw-UDP floor 0.01 and 0.03 lower); every 1,024th
 * gained nothing more (12 pairs against 128: -0.04 us, faster in 6). The
 * halving by steps keeps a peer that talks every few milliseconds at 16 or
 * 32. Another peer's first datagram after a quiet spell so waits up to
 * that many polls of a busy-polling caller (at most 128, 40-200 us here),
 * as the IPv6 socket's first does (udp.c, udp_poll_sockets), and the
 * socket is read at every poll from then on; a sleeper waits on both
 * sockets (wait_fds), and the poll after its arm reads both
 * (sx_udp_hot_poll).
 */
#include "transports/udp_int.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>

#include <shardx.h>

#include "common/hot.h"
#include "common/log.h"
#include "common/time.h"
#include "common/tsan.h"

/*
 * connect(2): 0 or the negated errno. Under TSan straight to the kernel:
 * TSan models a successful connect as making the descriptor anew (a write
 * of its state, which pairs TCP's connect with accept), and the engine's
 * epoll_ctl on the same descriptor from the service or a sleeping thread
 * as a read of it, so it reports the two as a race. The kernel serializes
 * them and the socket stays the same file; nothing else in the call is
 * TSan's to check (it reads no memory of ours that TSan follows).
 */
static int udp_hot_connect_fd(int fd, const struct sockaddr *sa, socklen_t len)
{
#ifdef SX_TSAN_ENABLED
    long rc = sx_syscall5(SYS_connect, fd, (long)sa, (long)len, 0, 0);
    return rc < 0 ? (int)rc : 0;
#else
    return connect(fd, sa, len) != 0 ? -errno : 0;
#endif
}

/* Whether the hot socket's local address is the one the kernel chose for
 * @p d's route: that of @p d's connected send socket (without one, the
 * route is not known here and the answer is no). */
static bool udp_hot_same_source(udp_iface_t *u, const udp_dest_t *d)
{
    udp_sa_t have, want;
    socklen_t have_len = sizeof(have), want_len = sizeof(want);

    return d->tx_fd >= 0 && getsockname(u->hot_fd, &have.sa, &have_len) == 0 &&
           getsockname(d->tx_fd, &want.sa, &want_len) == 0 && have.sa.sa_family == AF_INET &&
           want.sa.sa_family == AF_INET && have.in4.sin_addr.s_addr != htonl(INADDR_ANY) &&
           have.in4.sin_addr.s_addr == want.in4.sin_addr.s_addr;
}

/* Connects the hot socket to destination @p dest's data port; its
 * datagrams leave through it from now on (sx_udp_hot_track). */
void sx_udp_hot_connect(udp_iface_t *u, sx_tl_dest_t dest)
{
    udp_sa_t none = {.sa = {.sa_family = AF_UNSPEC}};
    const udp_dest_t *d = &u->dests[dest];
    char who[80];

    sx_udp_sa_str(&d->sa, who, sizeof(who));
    /* Disconnected first where the route needs another local address than
     * the socket has, so that the kernel picks it anew (connect keeps one
     * it set before). In between, and for good if the connect then fails,
     * it is an unconnected socket that comes first in the kernel's list
     * for the port: it gets every datagram the data socket would, which it
     * reads with their senders' addresses (hot_settle_ns stays UINT64_MAX
     * until a connect works). A stream's datagrams that arrive in that
     * moment are read ahead of those the data socket queued before it: in
     * sx_bench bw at 1 MiB, where the receiver's hot socket moves to the
     * sender once its ACKs make a run, half the runs found 2-4 there, kept
     * 19-31 packets aside out of order, retransmitted spuriously and
     * delivered half the bandwidth (docs/tuning.md, "Hot socket"). So
     * where the local address stays (this host's peers, those one local
     * address reaches), the socket moves in one connect and is never
     * unconnected; a connect that fails then leaves it on the last
     * destination, read with addresses. */
    u->hot_rx.vouched = NULL;
    u->hot_settle_ns = UINT64_MAX;
    u->hot_dest = u->hot_conn = SX_TL_DEST_NONE;
    if (!udp_hot_same_source(u, d))
        (void)udp_hot_connect_fd(u->hot_fd, &none.sa, sizeof(none.sa));
    int err = udp_hot_connect_fd(u->hot_fd, &d->sa.sa, udp_sa_len(&d->sa));
    if (err != 0) {
        sx_debug("udp", "hot socket: connecting to %s: %s; reading it with senders' addresses", who,
                 strerror(-err));
        return;
    }
    u->hot_dest = u->hot_conn = dest;
    u->hot_sa = d->sa;
    u->hot_settle_ns = sx_time_ns() + UDP_HOT_SETTLE_NS;
    u->hot_idle = 0;
    u->base.stats.hot_connects++;
    sx_debug("udp", "hot socket: connected to %s", who);
}

/* Where a socket's idle count stops: the count that reads it least often. */
#define UDP_HOT_IDLE_CAP (UDP_HOT_IDLE + 3u * UDP_HOT_QUIET_STEP)
_Static_assert(UDP_HOT_QUIET_POLLS << 3 == UDP_HOT_QUIET_MAX, "three halvings to the longest");

/* How many polls apart sx_udp_hot_poll reads a socket that has had no
 * datagram in its last @p idle reads (a power of two): 1 while it is not
 * quiet, then UDP_HOT_QUIET_POLLS, doubling after every
 * UDP_HOT_QUIET_STEP quiet reads up to UDP_HOT_QUIET_MAX (the top of the file
 * says why). */
static unsigned udp_hot_quiet_every(unsigned idle)
{
    if (idle < UDP_HOT_IDLE)
        return 1;
    unsigned halvings = (idle - UDP_HOT_IDLE) / UDP_HOT_QUIET_STEP;
    return halvings >= 3 ? UDP_HOT_QUIET_MAX : UDP_HOT_QUIET_POLLS << halvings;
}

/* One socket's read for sx_udp_hot_poll: its idle count (a read with no
 * room is none), and its share of rx_left. */
SX_HOT static int udp_hot_read(udp_iface_t *u, udp_rx_t *rx, unsigned *idle_p,
                               sx_tl_event_t *events, unsigned max)
{
    int n = sx_udp_rx_poll(u, rx, events, max);
    if (n < 0)
        return n;
    if (n > 0)
        *idle_p = 0;
    else if (max > 0 && *idle_p < UDP_HOT_IDLE_CAP)
        (*idle_p)++;
    u->base.rx_left |= rx->left;
    return n;
}

/*
 * Reads the data socket and, where there is one, the hot socket, each
 * unless it is quiet and this is not its turn; sets rx_left from them. A
 * socket skipped counts as empty in rx_left, as the IPv6 one does: a
 * caller that then sleeps arms first, and the poll after an arm reads
 * both (hot_all), so a sleeper woken for a skipped socket's datagram
 * reads it at once. While both are read, the one read first (the hot
 * socket, unless the data socket had a datagram at least as recently)
 * leaves a quarter of the room to the other, which would otherwise wait
 * behind a peer that keeps the first full (the ACK socket's share in
 * udp_poll_sockets, for the same reason).
 */
SX_HOT_PASS SX_RET_AFTER_SYSCALL int sx_udp_hot_poll(udp_iface_t *u, sx_tl_event_t *events,
                                                     unsigned max)
{
    u->base.rx_left = false;
    if (u->hot_fd < 0)
        return udp_hot_read(u, &u->rx, &u->data_idle, events, max);
    /* A quiet socket waits for its turn only while the other is not
     * quiet: when both are, both are read. */
    unsigned polls = ++u->polls;
    bool hot_quiet = u->hot_idle >= UDP_HOT_IDLE, data_quiet = u->data_idle >= UDP_HOT_IDLE;
    bool hot_turn = (polls & (udp_hot_quiet_every(u->hot_idle) - 1)) == 0;
    bool data_turn = (polls & (udp_hot_quiet_every(u->data_idle) - 1)) == 0;
    bool read_hot = hot_turn || u->hot_all || data_quiet || u->hot_rx.pend_n != 0;
    bool read_data = data_turn || u->hot_all || hot_quiet || u->rx.pend_n != 0;
    int got = 0;
    u->hot_all = false;
    /* The data socket first where it had a datagram at least as recently
     * as the hot one. A peer's datagrams move from the data socket to the
     * hot one when it becomes the hot socket's peer (our run of small
     * datagrams to it connects ours there) or we its (its run moves them
     * from its connected send socket to its hot one), and its older ones
     * are left in the data socket, so that one is read first until it
     * has had nothing. Read the other way round, the newer ones came
     * first, and up to a poll's worth of packets was kept aside out of
     * order (sx_bench bw at 4 KiB: 25 in 2 runs of 8; 0 or 1 since, the
     * one a datagram that reached the data socket between its read and
     * the hot one's). A stream's data socket reads in batches, which
     * empty it; one that reads a datagram at a time (udp_rx.c) gives one
     * a poll, and the two still interleave. A ping-pong's hot socket,
     * with a datagram at nearly every read and a quiet data socket, stays
     * first. */
    if (read_data && read_hot && u->data_idle <= u->hot_idle) {
        got = udp_hot_read(u, &u->rx, &u->data_idle, events, max - max / 4);
        if (got < 0)
            return got;
        read_data = false;
    }
    if (read_hot) {
        int n = udp_hot_read(u, &u->hot_rx, &u->hot_idle, events + got,
                             read_data ? max - max / 4 : max - (unsigned)got);
        if (n < 0)
            return n;
        got += n;
        u->base.stats.rx_hot += (unsigned)n;
        /* Settled: found empty, so what came before the connect is read,
         * and long enough after it that nothing the kernel matched to the
         * socket unconnected is still on its way in. */
        if (u->hot_rx.vouched == NULL && !u->hot_rx.left && u->hot_settle_ns != UINT64_MAX &&
            sx_time_ns() >= u->hot_settle_ns)
            u->hot_rx.vouched = &u->hot_sa;
    }
    if (read_data) {
        int n = udp_hot_read(u, &u->rx, &u->data_idle, events + got, max - (unsigned)got);
        if (n < 0)
            return n;
        got += n;
    }
    return got;
}
