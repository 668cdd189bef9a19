/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * udp's receive side (udp.c has the interface): reads one socket's
 * datagrams into its buffers, one recvfrom(2) or recvmsg(2) at a time
 * while they come alone and in recvmmsg(2) batches while they come back
 * to back, cuts what GRO coalesced at the size the kernel reports, and
 * scatters each read around the landings the shard offered
 * (sx_tl_ops_t.land).
 */
#include "transports/udp_int.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <string.h>
#include <sys/socket.h>

#include <shardx.h>

#include "common/copy.h"
#include "common/hot.h"
#include "common/log.h"

/*
 * The first read that finds a backlog, UDP_RX_BUSY_READ datagrams queued
 * behind each other, turns on what only a busy socket needs; on an idle
 * one the same options cost the reader of every datagram time
 * (docs/tuning.md, "Where a small message's time goes"):
 *  - SO_RXQ_OVFL, which attaches the socket's drop count to every datagram
 *    read from then on (socket(7)), so that loss in the network can be
 *    told from overflow here. Only a full receive queue drops, and a queue
 *    fills only behind a backlog; the count is the socket's running total
 *    since it was made, so the first datagram that carries it reports the
 *    drops before it too (udp_read_ctrl adds the difference);
 *  - UDP_GRO on a data socket (Linux 5.0), so that a run of datagrams the
 *    peer sent with UDP_SEGMENT, or the network coalesced, is read whole
 *    (udp_rx_hand_up cuts it). Before, the kernel cuts such a run at the
 *    socket: the same datagrams, in more reads, and the read that finds
 *    them queued is the one that turns GRO on.
 * A ping-pong's socket never has a backlog and keeps neither: 8-byte
 * ping-pongs over loopback (sx_bench latency), 30 interleaved pairs of
 * the build before and this one, 6.19 against 5.925 us one way (medians;
 * faster in 28 of 30). Either option alone cost as much as both in a
 * raw-socket ping-pong (0.18-0.21 us), and turning GRO off alone gained
 * nothing measurable in sx_bench.
 *
 * Why eight, not two: the options stay on for good (turning UDP_GRO off
 * again would race with a coalesced run queued before the call, read
 * whole without its segment size), and an MPI job's start is a few
 * short bursts: every rank of mpi_bench pingpong, mt 1 and coll over the
 * Open MPI BTL met a read of 2 to 4 datagrams in its first exchanges, so
 * its sockets were busy before the first measured message. With eight,
 * 8-byte MPI latency 3.667 -> 3.559 us (medians of 20 interleaved pairs,
 * faster in 15); a stream fills a batch read of UDP_RX_BATCH at once, and
 * a queue that overflows holds more than eight (udp_open makes a socket
 * too small for that busy at once).
 */
void sx_udp_rx_busy(udp_rx_t *rx)
{
    int one = 1;

    rx->busy = true;
    rx->cmsg = true;
    sx_debug("udp", "socket %d is busy: drop counts%s from now on", rx->fd,
             rx->gro ? " and GRO" : "");
    if (setsockopt(rx->fd, SOL_SOCKET, SO_RXQ_OVFL, &one, sizeof(one)) != 0)
        sx_debug("udp", "SO_RXQ_OVFL unavailable (%s); kernel drops will not be counted",
                 strerror(errno));
    if (rx->gro && setsockopt(rx->fd, SOL_UDP, UDP_GRO, &one, sizeof(one)) != 0)
        sx_debug("udp", "UDP_GRO refused (%s): runs of datagrams are read one by one",
                 strerror(errno));
}

/* Reads the SO_RXQ_OVFL counter from one received buffer, if present,
 * sets *ecn_p to its ECN field (IP_TOS, IPV6_TCLASS; Not-ECT without
 * one), and returns the datagram size a UDP_GRO control message gives
 * (0: the buffer is one datagram). */
static uint32_t udp_read_ctrl(udp_iface_t *u, udp_rx_t *rx, struct msghdr *h, uint8_t *ecn_p)
{
    uint32_t seg = 0;

    *ecn_p = SX_TL_ECN_NOT_ECT;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(h); c != NULL; c = CMSG_NXTHDR(h, c)) {
        if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS && c->cmsg_len >= CMSG_LEN(1)) {
            *ecn_p = *CMSG_DATA(c) & 3; /* one byte: ip(7) */
            continue;
        }
        if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_TCLASS &&
            c->cmsg_len >= CMSG_LEN(sizeof(int))) {
            int tclass;
            memcpy(&tclass, CMSG_DATA(c), sizeof(tclass));
            *ecn_p = (uint8_t)(tclass & 3);
            continue;
        }
        if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO &&
            c->cmsg_len >= CMSG_LEN(sizeof(int))) {
            int s;
            memcpy(&s, CMSG_DATA(c), sizeof(s));
            seg = s > 0 ? (uint32_t)s : 0;
            continue;
        }
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SO_RXQ_OVFL ||
            c->cmsg_len < CMSG_LEN(sizeof(uint32_t)))
            continue;
        uint32_t drops;
        memcpy(&drops, CMSG_DATA(c), sizeof(drops));
        /* The counter is the socket's running total and wraps at 2^32:
         * add the difference, computed modulo 2^32. */
        u->base.stats.rx_kernel_drops += (uint32_t)(drops - rx->last_ovfl);
        rx->last_ovfl = drops;
    }
    return seg;
}

/* The bytes of buffer i's datagram that went to its landing (0: none,
 * or no landing). */
static size_t udp_rx_landed(const udp_rx_t *rx, unsigned i)
{
    size_t len = rx->b->msgs[i].msg_len;
    size_t n = i < rx->land_n && len > rx->land_head ? len - rx->land_head : 0;

    return n < rx->b->land_cap[i] ? n : rx->b->land_cap[i];
}

/* Copies them back into the buffer's gap, making the datagram whole. */
static void udp_rx_land_back(udp_rx_t *rx, unsigned i)
{
    size_t n = udp_rx_landed(rx, i);

    if (n != 0)
        sx_copy_bulk((uint8_t *)rx->b->iov[i].iov_base + rx->land_head, rx->b->land_dst[i], n);
}

/*
 * Hands up what the last read left (rx->pend_*), one event per datagram:
 * a buffer GRO filled is cut at its datagram size, the last datagram
 * possibly shorter (udp(7), UDP_GRO). Stops when @p max events are
 * written; the rest waits for the next poll, which reads nothing new
 * before it is out (the buffers must stay as they are).
 */
SX_HOT static unsigned udp_rx_hand_up(udp_iface_t *u, udp_rx_t *rx, sx_tl_event_t *events,
                                      unsigned max)
{
    unsigned n = 0;

    while (rx->pend_i < rx->pend_n && n < max) {
        unsigned i = rx->pend_i;
        struct msghdr *h = &rx->b->msgs[i].msg_hdr;
        size_t len = rx->b->msgs[i].msg_len;
        if (h->msg_flags & MSG_TRUNC) {
            /* Longer than the buffer (the mtu, or UDP_CTRL_MAX on the ACK
             * socket): a peer with another idea of the mtu, or garbage.
             * Never hand up a cut datagram. */
            u->base.stats.rx_truncated++;
            rx->pend_i++;
            continue;
        }
        size_t seg = rx->b->seg[i] != 0 && rx->b->seg[i] < len ? rx->b->seg[i] : len;
        if (seg > rx->limit) {
            /* A buffer larger than the mtu holds one when GRO is on: the
             * same verdict as a truncated read. */
            u->base.stats.rx_truncated++;
            rx->pend_i++;
            continue;
        }
        if (len == 0) {
            events[n++] = (sx_tl_event_t){.type = SX_TL_EV_RECV,
                                          .status = SX_OK,
                                          .data = rx->b->iov[i].iov_base,
                                          .len = 0,
                                          .src = &rx->b->src[i],
                                          .src_len = h->msg_namelen,
                                          .ecn = rx->b->ecn[i]};
            rx->pend_i++;
            continue;
        }
        /* Buffer i was read around a landing: report what went there, or
         * put it back when GRO made the read several datagrams (a landing
         * is for one). */
        size_t landed = udp_rx_landed(rx, i);
        if (seg < len && landed != 0) {
            udp_rx_land_back(rx, i);
            landed = 0;
        }
        rx->b->land_cap[i] = 0;
        if (rx->pend_off == 0 && seg < len)
            u->base.stats.rx_gro++;
        while (rx->pend_off < len && n < max) {
            size_t part = len - rx->pend_off < seg ? len - rx->pend_off : seg;
            events[n++] = (sx_tl_event_t){
                .type = SX_TL_EV_RECV,
                .status = SX_OK,
                .data = (const uint8_t *)rx->b->iov[i].iov_base + rx->pend_off,
                .len = part,
                .src = &rx->b->src[i],
                .src_len = h->msg_namelen,
                .ecn = rx->b->ecn[i],
                .landed = landed,
                .landed_at = landed != 0 ? rx->b->land_dst[i] : NULL,
            };
            rx->pend_off += part;
        }
        if (rx->pend_off >= len) {
            rx->pend_i++;
            rx->pend_off = 0;
        }
    }
    /* Buffers left for the next poll (a GRO read gave more events than
     * this one had room for) put their landed bytes back now: the caller
     * handles this poll's events first, which may write where they
     * landed, and its next offer knows nothing of them. */
    for (unsigned i = rx->pend_i; i < rx->pend_n; i++) {
        udp_rx_land_back(rx, i);
        rx->b->land_cap[i] = 0;
    }
    if (rx->pend_i >= rx->pend_n)
        rx->pend_i = rx->pend_n = 0;
    u->base.stats.rx_datagrams += n;
    return n;
}

/*
 * Gives the first @p want buffers of the next read the landings offered
 * (land): buffer k's first land_head bytes go to the buffer, the next
 * ones (the k-th piece of the spans) to its landing, the rest to the
 * buffer after a gap as long as the landing, so that copying the landed
 * bytes back makes the datagram whole again.
 */
static void udp_rx_land(udp_iface_t *u, udp_rx_t *rx, unsigned want)
{
    size_t head = u->land_head, step = u->land_step, off = 0;
    unsigned s = 0;

    rx->land_n = 0;
    if (u->land_n == 0 || head >= rx->limit)
        return;
    step = step < rx->limit - head ? step : rx->limit - head;
    for (unsigned k = 0; k < want && s < u->land_n; k++) {
        const struct iovec *span = &u->land_spans[s];
        size_t cap = span->iov_len - off < step ? span->iov_len - off : step;
        uint8_t *buf = rx->b->iov[k].iov_base;
        uint8_t *dst = (uint8_t *)span->iov_base + off;
        rx->b->land_iov[k][0] = (struct iovec){.iov_base = buf, .iov_len = head};
        rx->b->land_iov[k][1] = (struct iovec){.iov_base = dst, .iov_len = cap};
        rx->b->land_iov[k][2] = (struct iovec){.iov_base = buf + head + cap,
                                               .iov_len = rx->b->iov[k].iov_len - head - cap};
        rx->b->msgs[k].msg_hdr.msg_iov = rx->b->land_iov[k];
        rx->b->msgs[k].msg_hdr.msg_iovlen = 3;
        rx->b->land_cap[k] = cap;
        rx->b->land_dst[k] = dst;
        rx->land_n = k + 1;
        if ((off += cap) >= span->iov_len) {
            s++;
            off = 0;
        }
    }
    rx->land_head = head;
}

/* After a read that filled @p got buffers: every buffer reads into itself
 * again, and those left unfilled landed nothing. */
static void udp_rx_unland(udp_iface_t *u, udp_rx_t *rx, int got)
{
    for (unsigned k = 0; k < rx->land_n; k++) {
        rx->b->msgs[k].msg_hdr.msg_iov = &rx->b->iov[k];
        rx->b->msgs[k].msg_hdr.msg_iovlen = 1;
        if ((int)k >= got)
            rx->b->land_cap[k] = 0;
    }
    if (got > 0 && rx->land_n != 0)
        u->land_n = 0; /* the offer is used */
}

/* Whether a read that failed with @p err is worth trying again now: an
 * interrupted one, or one that only reported an ICMP error of an earlier
 * datagram sent (a few per poll): "port unreachable" on any socket, and
 * any ICMP error on a connected one. */
static bool udp_rx_again(udp_iface_t *u, udp_rx_t *rx, int err, unsigned *refused_p)
{
    if (err == EINTR)
        return true;
    if ((err == ECONNREFUSED || (rx->connected && sx_udp_errno_icmp(err))) &&
        (*refused_p)++ < UDP_REFUSED_RETRIES) {
        u->base.stats.tx_refused++;
        return true;
    }
    return false;
}

/* What a poll whose read failed for good returns: nothing read (an empty
 * socket, or more ICMP reports than a poll skips), or an I/O error. */
static int udp_rx_failed(const udp_rx_t *rx, int err, const char *call)
{
    if (sx_udp_errno_no_room(err) || err == ECONNREFUSED ||
        (rx->connected && sx_udp_errno_icmp(err)))
        return 0;
    sx_error("udp", "%s: %s", call, strerror(err));
    return SX_ERR_IO;
}

/*
 * One datagram into buffer 0, on a socket asked for no control data and
 * with no landing offered, its event written here: recvfrom(2), which
 * leaves out the kernel's copying in of a message header and its iovec
 * (copy_msghdr_from_user, import_iovec), in every empty poll too, and
 * none of the general read's bookkeeping (control messages, landings,
 * GRO's cuts, the headers to reset). A raw 8-byte ping-pong over
 * loopback, the sender's address taken either way: 3.19-3.22 us one way
 * with recvfrom, 3.25-3.42 with recvmsg as this transport called it
 * (docs/tuning.md, "Reading a lone datagram"). MSG_TRUNC makes a longer
 * datagram return its real length, so that it is counted as cut (udp(7):
 * recv's MSG_TRUNC, UDP since Linux 3.4). Finding one enters batch mode,
 * as a recvmsg that finds one does (sx_udp_rx_poll).
 */
SX_HOT_PASS static int udp_rx_lone(udp_iface_t *u, udp_rx_t *rx, sx_tl_event_t *events)
{
    unsigned refused = 0;

    for (;;) {
        socklen_t src_len = sizeof(rx->lone_src);
        const udp_sa_t *vouched = rx->vouched;
        /* Buffer 0 is b->iov[0], which no read changes (a landing reads
         * through b->land_iov); mem and buflen say the same from the
         * socket's first page. */
        ssize_t got = sx_udp_recvfrom(rx->fd, rx->mem, rx->buflen, MSG_DONTWAIT | MSG_TRUNC,
                                      vouched != NULL ? NULL : &rx->lone_src.sa,
                                      vouched != NULL ? NULL : &src_len);
        if (got >= 0) {
            rx->batch = true; /* rx->left stays true: more may wait */
            if ((size_t)got > rx->limit) {
                /* Cut, or longer than the mtu (a GRO buffer is larger):
                 * the verdict of udp_rx_hand_up. */
                u->base.stats.rx_truncated++;
                return 0;
            }
            if (vouched != NULL) {
                /* A copy: handling the events may move the hot socket
                 * (udp_hot.c) before this one is looked at. */
                rx->lone_src.in4 = vouched->in4;
                src_len = sizeof(vouched->in4);
            }
            events[0] = (sx_tl_event_t){.type = SX_TL_EV_RECV,
                                        .status = SX_OK,
                                        .data = rx->mem,
                                        .len = (size_t)got,
                                        .src = &rx->lone_src,
                                        .src_len = src_len,
                                        .ecn = SX_TL_ECN_NOT_ECT};
            u->base.stats.rx_datagrams++;
            return 1;
        }
        if (sx_udp_errno_empty((int)-got)) {
            /* Empty, the answer of nearly every busy poll: what the calls
             * below decide for it, without calling them. */
            rx->batch = false;
            rx->left = false;
            return 0;
        }
        if (!udp_rx_again(u, rx, (int)-got, &refused)) {
            rx->batch = false;
            rx->left = true; /* not found empty (that returned above) */
            return udp_rx_failed(rx, (int)-got, "recvfrom");
        }
    }
}

SX_HOT_PASS SX_RET_AFTER_SYSCALL int sx_udp_rx_poll(udp_iface_t *u, udp_rx_t *rx,
                                                    sx_tl_event_t *events, unsigned max)
{
    unsigned want = max < UDP_RX_BATCH ? max : UDP_RX_BATCH;
    unsigned refused = 0;
    int rc;

    rx->left = true; /* unless a read below finds the socket empty */
    if (want == 0)
        return 0;
    if (rx->pend_n != 0)
        return (int)udp_rx_hand_up(u, rx, events, max);
    if ((!rx->batch || want == 1) && !rx->cmsg && u->land_n == 0)
        return udp_rx_lone(u, rx, events);
    /* recvmsg and recvmmsg write back the lengths and flags of the
     * headers they were given: reset those the last read had, not all 32
     * at every poll (a busy-polling caller's empty polls spent 18 % of
     * their user time here: sx_bench latency under perf). */
    for (unsigned i = 0; i < rx->dirty; i++) {
        struct msghdr *h = &rx->b->msgs[i].msg_hdr;
        h->msg_controllen = sizeof(rx->b->ctrl[i].buf);
        h->msg_namelen = sizeof(rx->b->src[i]);
        h->msg_flags = 0;
    }
    /* One datagram at a time (recvmsg) until datagrams come back to back,
     * then batches (recvmmsg). A recvmmsg that finds one datagram goes on
     * to try for a second before it returns, and that failed try (a whole
     * recvmsg pass in the kernel) sat between a ping and its pong
     * (docs/tuning.md, section "Connected send sockets: SX_UDP_CONNECT",
     * has the measurement). A stream keeps the batches: a poll that fills
     * more than one buffer keeps batch mode, one that finds a single
     * datagram leaves it, and a single-datagram poll that finds one enters
     * it. */
    bool batch = rx->batch && want > 1;
    rx->dirty = 0;
    udp_rx_land(u, rx, batch ? want : 1);
    for (;;) {
        int err;
        if (batch) {
            rc = sx_udp_recvmmsg(rx->fd, rx->b->msgs, want, MSG_DONTWAIT);
            err = -rc;
        } else {
            ssize_t got = sx_udp_recvmsg(rx->fd, &rx->b->msgs[0].msg_hdr, MSG_DONTWAIT);
            if (got >= 0)
                rx->b->msgs[0].msg_len = (unsigned)got;
            rc = got >= 0 ? 1 : -1;
            err = (int)-got;
        }
        if (rc >= 0)
            break;
        if (udp_rx_again(u, rx, err, &refused))
            continue;
        rx->batch = false;
        rx->left = !sx_udp_errno_empty(err);
        udp_rx_unland(u, rx, 0);
        return udp_rx_failed(rx, err, batch ? "recvmmsg" : "recvmsg");
    }
    /* Only the headers of datagrams read are written back (a read that
     * fails writes none): resetting all of a batch's after every
     * recvmmsg that found one datagram was 400 instructions in the next,
     * empty, poll of a ping-pong (callgrind of sx_bench latency). */
    rx->dirty = (unsigned)rc;
    rx->batch = batch ? rc > 1 : true;
    rx->left = !batch || rc == (int)want; /* a short batch emptied the socket */
    if (rc >= UDP_RX_BUSY_READ && !rx->busy)
        sx_udp_rx_busy(rx);
    udp_rx_unland(u, rx, rc); /* land_cap[i] stays until buffer i is handed up */

    for (int i = 0; i < rc; i++)
        rx->b->seg[i] = udp_read_ctrl(u, rx, &rx->b->msgs[i].msg_hdr, &rx->b->ecn[i]);
    rx->pend_i = 0;
    rx->pend_n = (unsigned)rc;
    rx->pend_off = 0;
    int n = (int)udp_rx_hand_up(u, rx, events, max);
    if (rx->pend_n != 0)
        rx->left = true; /* datagrams of this read wait for the next poll */
    return n;
}
