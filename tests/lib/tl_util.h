/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Helpers of the transport tests (test_transport_conformance and the
 * test_transport_* of each transport): connecting two interfaces, a log of
 * received datagrams with their arrival times, polling until enough
 * arrived, one-datagram sends, round trips and batches of checked
 * datagrams, a byte pattern and a checksum, and whether a wait fd is
 * readable. An includer may define TL_RX_DEADLINE_NS (the
 * hang detector of rx_until and tl_batches) before including; cmocka.h
 * must come first (the helpers assert).
 */
#ifndef SX_TESTS_TL_UTIL_H
#define SX_TESTS_TL_UTIL_H

#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <shardx.h>

#include "common/time.h"
#include "transports/transport.h"

#ifndef TL_RX_DEADLINE_NS
#define TL_RX_DEADLINE_NS (10ull * 1000000000ull)
#endif

/* Inserts @p to's address into @p from, after asking addr_check where the
 * transport has one, and returns the destination. */
static inline sx_tl_dest_t connect_to(sx_tl_iface_t *from, sx_tl_iface_t *to)
{
    uint8_t addr[SX_TL_ADDR_MAX];
    size_t len = sizeof(addr);
    sx_tl_dest_t dest = SX_TL_DEST_NONE;

    assert_int_equal(to->ops->local_addr(to, addr, &len), SX_OK);
    if (from->ops->addr_check != NULL)
        assert_int_equal(from->ops->addr_check(from, addr, len), SX_OK);
    assert_int_equal(from->ops->addr_insert(from, addr, len, &dest), SX_OK);
    return dest;
}

/* Received datagrams, copied, with the time each poll returned them. */
typedef struct rx_log {
    size_t n, cap;
    uint8_t **data;
    size_t *len;
    uint64_t *at_ns;
} rx_log_t;

static inline void rx_log_free(rx_log_t *log)
{
    for (size_t i = 0; i < log->n; i++)
        free(log->data[i]);
    free(log->data);
    free(log->len);
    free(log->at_ns);
    memset(log, 0, sizeof(*log));
}

static inline void rx_log_add(rx_log_t *log, const uint8_t *data, size_t len)
{
    if (log->n == log->cap) {
        log->cap = log->cap ? log->cap * 2 : 64;
        log->data = realloc(log->data, log->cap * sizeof(*log->data));
        log->len = realloc(log->len, log->cap * sizeof(*log->len));
        log->at_ns = realloc(log->at_ns, log->cap * sizeof(*log->at_ns));
        assert_non_null(log->data);
        assert_non_null(log->len);
        assert_non_null(log->at_ns);
    }
    log->data[log->n] = malloc(len + 1);
    assert_non_null(log->data[log->n]);
    if (len > 0)
        memcpy(log->data[log->n], data, len);
    log->at_ns[log->n] = sx_time_ns();
    log->len[log->n++] = len;
}

/* One poll of @p rx into @p log. */
static inline void rx_once(sx_tl_iface_t *rx, rx_log_t *log)
{
    sx_tl_event_t ev[64];
    int n = rx->ops->poll(rx, ev, 64);

    assert_true(n >= 0);
    for (int i = 0; i < n; i++) {
        assert_int_equal(ev[i].type, SX_TL_EV_RECV);
        assert_int_equal(ev[i].status, SX_OK);
        rx_log_add(log, ev[i].data, ev[i].len);
    }
}

/* Polls @p rx until @p log holds @p want datagrams, polling @p also (when
 * not NULL) before each round and dropping what it returns: the fault
 * decorator releases held and delayed datagrams when its sender polls.
 * Fails after the deadline, which only turns a hang into a failure. */
static inline void rx_until_also(sx_tl_iface_t *rx, sx_tl_iface_t *also, rx_log_t *log, size_t want)
{
    uint64_t deadline = sx_time_ns() + TL_RX_DEADLINE_NS;
    sx_tl_event_t ev[64];

    while (log->n < want) {
        if (also != NULL)
            assert_true(also->ops->poll(also, ev, 64) >= 0);
        rx_once(rx, log);
        /* The receiver's counters say where a lost datagram went, if
         * it reached the receiver at all (a rare loss: test_transport_ofi
         * once lost 6 of 192 under load and could not tell). */
        if (sx_time_ns() > deadline)
            fail_msg("only %zu of %zu datagrams arrived (receiver: rx_datagrams %llu, "
                     "rx_truncated %llu, rx_kernel_drops %llu)",
                     log->n, want, (unsigned long long)rx->stats.rx_datagrams,
                     (unsigned long long)rx->stats.rx_truncated,
                     (unsigned long long)rx->stats.rx_kernel_drops);
    }
}

static inline void rx_until(sx_tl_iface_t *rx, rx_log_t *log, size_t want)
{
    rx_until_also(rx, NULL, log, want);
}

static inline int send_one(sx_tl_iface_t *tx, sx_tl_dest_t dest, const void *data, size_t len)
{
    sx_tl_tx_t t = {.dest = dest, .iovcnt = 1};
    unsigned posted = 99;

    t.iov[0] = (struct iovec){.iov_base = (void *)data, .iov_len = len};
    int rc = tx->ops->post_send(tx, &t, 1, &posted);
    assert_int_equal(posted, rc == SX_OK ? 1 : 0);
    return rc;
}

static inline void fill(uint8_t *buf, size_t len, unsigned seed)
{
    for (size_t i = 0; i < len; i++)
        buf[i] = (uint8_t)(seed * 131 + i * 7 + (i >> 8));
}

static inline uint32_t checksum(const uint8_t *p, size_t len)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 16777619u;
    return h;
}

/* Polls @p rx until it returns one datagram, which must be @p data. */
static inline void expect_one(sx_tl_iface_t *rx, const void *data, size_t len)
{
    sx_tl_event_t ev[2];
    uint64_t deadline = sx_time_ns() + TL_RX_DEADLINE_NS;
    int n;

    while ((n = rx->ops->poll(rx, ev, 1)) == 0)
        assert_true(sx_time_ns() < deadline);
    assert_int_equal(n, 1);
    assert_int_equal(ev[0].type, SX_TL_EV_RECV);
    assert_int_equal(ev[0].status, SX_OK);
    assert_int_equal(ev[0].len, len);
    if (len > 0)
        assert_memory_equal(ev[0].data, data, len);
}

/* Sends @p len bytes of pattern @p seed from @p a to @p d, scribbles on the
 * buffer as soon as post_send returns (sync_send: it is the caller's
 * again), and checks that exactly that datagram arrives at @p b. */
static inline void round_trip(sx_tl_iface_t *a, sx_tl_dest_t d, sx_tl_iface_t *b, size_t len,
                              unsigned seed)
{
    uint8_t *buf = malloc(len + 1), *want = malloc(len + 1);
    rx_log_t log = {0};

    assert_non_null(buf);
    assert_non_null(want);
    fill(buf, len, seed);
    memcpy(want, buf, len);
    assert_int_equal(send_one(a, d, buf, len), SX_OK);
    memset(buf, 0x5a, len);
    rx_until(b, &log, 1);
    assert_int_equal(log.n, 1);
    assert_int_equal(log.len[0], len);
    if (len > 0)
        assert_memory_equal(log.data[0], want, len);
    rx_log_free(&log);
    free(buf);
    free(want);
}

/* Whether @p fd becomes readable within @p timeout_ms (0: is it now); the
 * timeout is a bound only, never a sleep. */
static inline bool fd_readable(int fd, int timeout_ms)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    return poll(&pfd, 1, timeout_ms) == 1 && (pfd.revents & POLLIN);
}

/* Whether one of @p iface's wait fds becomes readable within @p
 * timeout_ms (0: is one now); a bound only, never a sleep. */
static inline bool tl_wait_readable(sx_tl_iface_t *iface, int timeout_ms)
{
    int fds[SX_TL_WAIT_FDS];
    struct pollfd pfd[SX_TL_WAIT_FDS];
    unsigned n = iface->ops->wait_fds(iface, fds);

    for (unsigned i = 0; i < n; i++)
        pfd[i] = (struct pollfd){.fd = fds[i], .events = POLLIN};
    return n > 0 && n <= SX_TL_WAIT_FDS && poll(pfd, n, timeout_ms) > 0;
}

#define TL_BATCH 64

/*
 * @p rounds batches of TL_BATCH datagrams from @p a to @p b, each of two
 * iovecs (an 8-byte header: number and checksum; then up to @p maxlen - 8
 * bytes of pattern), posted as one array and re-posted from where the
 * interface stopped taking them (SX_ERR_AGAIN) without the sender ever
 * polling: post_send must make room itself or the deadline fails the test.
 * The buffers are scribbled on once posted (sync_send). Every datagram
 * arrives once, in order (one sender on loopback), whole; nothing is
 * dropped or truncated at @p b. Then a batch whose third datagram is over
 * the mtu: the two before it go out, in order, and the call says which
 * one failed.
 */
static inline void tl_batches(sx_tl_iface_t *a, sx_tl_iface_t *b, size_t maxlen, unsigned rounds)
{
    sx_tl_dest_t to_b = connect_to(a, b);
    uint8_t *mem = malloc(TL_BATCH * maxlen);
    sx_tl_tx_t tx[TL_BATCH];
    rx_log_t log = {0};
    uint64_t deadline = sx_time_ns() + TL_RX_DEADLINE_NS;

    assert_non_null(mem);
    assert_true(maxlen > 8 && maxlen <= a->caps.mtu);
    for (unsigned r = 0; r < rounds; r++) {
        for (unsigned i = 0; i < TL_BATCH; i++) {
            uint8_t *p = mem + i * maxlen;
            size_t len = 8 + (r * TL_BATCH + i) * 37 % (maxlen - 8);
            uint32_t id = r * TL_BATCH + i;
            fill(p, len, id);
            memcpy(p, &id, 4);
            uint32_t sum = checksum(p + 8, len - 8);
            memcpy(p + 4, &sum, 4);
            tx[i] = (sx_tl_tx_t){.dest = to_b, .iovcnt = 2};
            tx[i].iov[0] = (struct iovec){p, 8};
            tx[i].iov[1] = (struct iovec){p + 8, len - 8};
        }
        unsigned done = 0;
        while (done < TL_BATCH) {
            unsigned posted = 0;
            int rc = a->ops->post_send(a, tx + done, TL_BATCH - done, &posted);
            assert_true(rc == SX_OK || rc == SX_ERR_AGAIN);
            done += posted;
            if (sx_time_ns() > deadline)
                fail_msg("the sender stayed full");
        }
        /* The sender's buffers are its own again (sync_send): scribble. */
        memset(mem, 0xee, TL_BATCH * maxlen);
        /* Drain each round so the receiver never has to hold more. */
        rx_until(b, &log, (size_t)(r + 1) * TL_BATCH);
    }
    for (size_t i = 0; i < log.n; i++) {
        uint32_t id, sum;
        assert_true(log.len[i] >= 8);
        memcpy(&id, log.data[i], 4);
        memcpy(&sum, log.data[i] + 4, 4);
        assert_int_equal(id, i);
        assert_int_equal(log.len[i], 8 + i * 37 % (maxlen - 8));
        assert_int_equal(sum, checksum(log.data[i] + 8, log.len[i] - 8));
    }
    rx_log_free(&log);
    assert_int_equal(b->stats.rx_kernel_drops, 0);
    assert_int_equal(b->stats.rx_truncated, 0);

    for (unsigned i = 0; i < 4; i++)
        tx[i].iov[1].iov_len = 16;
    tx[2].iov[1].iov_len = a->caps.mtu;
    unsigned posted = 0, total = 0;
    int rc;
    /* With every send slot still busy, the call says so first. */
    while ((rc = a->ops->post_send(a, tx + total, 4 - total, &posted)) == SX_ERR_AGAIN) {
        total += posted;
        if (sx_time_ns() > deadline)
            fail_msg("the sender stayed full");
    }
    assert_int_equal(rc, SX_ERR_INVALID_PARAM);
    assert_int_equal(total + posted, 2);
    rx_until(b, &log, 2);
    for (unsigned i = 0; i < 2; i++) {
        assert_int_equal(log.len[i], 24);
        assert_memory_equal(log.data[i], tx[i].iov[0].iov_base, 8);
        assert_memory_equal(log.data[i] + 8, tx[i].iov[1].iov_base, 16);
    }
    rx_log_free(&log);
    free(mem);
}

#endif /* SX_TESTS_TL_UTIL_H */
