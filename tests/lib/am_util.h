/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Helpers for tests that move active messages between engines: connect
 * two engines, progress until a condition holds (bounded by a generous
 * wall-clock limit that only turns a hang into a failure), and a receiver
 * that checks exactly-once, in-order delivery by sequence number and
 * payload checksum.
 */
#ifndef SX_TESTS_AM_UTIL_H
#define SX_TESTS_AM_UTIL_H

#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shardx.h>

#include "common/time.h"

/* Only a hang detector: tests never rely on finishing within it. */
#define AM_TEST_LIMIT_NS (120ull * 1000000000ull)

/* Counter @p name of @p e (sx_stats_value); a name the engine does not
 * have is the test's mistake: it aborts. */
static inline uint64_t am_stat(sx_engine_h e, const char *name)
{
    uint64_t v = 0;
    if (sx_stats_value(e, name, &v) != SX_OK) {
        fprintf(stderr, "am_stat: no counter %s\n", name);
        abort();
    }
    return v;
}

static inline sx_engine_h am_engine(const sx_config_kv_t *kv, size_t n)
{
    sx_engine_params_t params = {
        .field_mask = SX_ENGINE_PARAM_CONFIG, .config = kv, .config_count = n};
    sx_engine_h e = NULL;
    int rc = sx_engine_create(n ? &params : NULL, &e);
    if (rc != SX_OK) {
        fprintf(stderr, "sx_engine_create: %s\n", sx_strerror(rc));
        abort();
    }
    return e;
}

static inline sx_peer_h am_connect(sx_engine_h from, sx_engine_h to, uint64_t id)
{
    uint8_t card[4096];
    size_t len = sizeof(card);
    sx_peer_h peer = NULL;

    if (sx_engine_address(to, card, &len) != SX_OK || sx_peer_add(from, id, card, len, &peer))
        abort();
    return peer;
}

/* Two engines that know each other, A (@p ka) as peer 1 of B and B (@p kb)
 * as peer 2 of A, with one thread's home on shard 0 of each: a thread
 * that drives both progresses the shards that talk to each other. */
typedef struct am_pair {
    sx_engine_h a, b;
    sx_peer_h a_to_b, b_to_a;
} am_pair_t;

static inline am_pair_t am_pair_new(const sx_config_kv_t *ka, size_t na, const sx_config_kv_t *kb,
                                    size_t nb)
{
    am_pair_t p;
    p.a = am_engine(ka, na);
    p.b = am_engine(kb, nb);
    if (sx_thread_bind(p.a, 0) != SX_OK || sx_thread_bind(p.b, 0) != SX_OK)
        abort();
    p.a_to_b = am_connect(p.a, p.b, 2);
    p.b_to_a = am_connect(p.b, p.a, 1);
    return p;
}

/* A message body: sequence number, then bytes derived from it and a seed,
 * so a receiver can check every byte without keeping a copy. */
static inline uint8_t am_byte(uint64_t seq, uint64_t i)
{
    uint64_t x = (seq + 1) * 0x9e3779b97f4a7c15ull ^ (i * 0xbf58476d1ce4e5b9ull);
    return (uint8_t)(x >> 56);
}

static inline void am_fill(uint8_t *buf, size_t len, uint64_t seq)
{
    size_t head = len < 8 ? len : 8;
    memcpy(buf, &seq, head);
    for (size_t i = 8; i < len; i++)
        buf[i] = am_byte(seq, i);
}

/* One operation's completions: how many, and the last status
 * (am_op_done is its sx_complete_cb_t). */
typedef struct am_op {
    int status;
    unsigned calls;
} am_op_t;

static inline void am_op_done(void *arg, int status)
{
    am_op_t *op = arg;
    op->status = status;
    op->calls++;
}

/* Receiver state for one sender. */
typedef struct am_rx {
    uint64_t expected; /* next sequence number */
    uint64_t received;
    uint64_t errors;
    const size_t *sizes; /* expected size of message i (or NULL: any) */
    size_t nsizes;
} am_rx_t;

static inline void am_check(am_rx_t *rx, const void *data, size_t len)
{
    uint64_t seq = rx->expected;
    if (len >= 8)
        memcpy(&seq, data, 8);
    if (seq != rx->expected)
        rx->errors++;
    if (rx->sizes != NULL && (seq >= rx->nsizes || rx->sizes[seq] != len))
        rx->errors++;
    for (size_t i = 8; i < len; i++) {
        if (((const uint8_t *)data)[i] != am_byte(seq, i)) {
            rx->errors++;
            break;
        }
    }
    rx->expected = seq + 1;
    rx->received++;
}

/* Progresses @p a and @p b until *done reaches @p target or the limit. */
static inline bool am_progress_until(sx_engine_h a, sx_engine_h b, const uint64_t *done,
                                     uint64_t target)
{
    uint64_t start = sx_time_ns();
    while (*done < target) {
        if (a != NULL)
            sx_progress(a);
        if (b != NULL)
            sx_progress(b);
        if (sx_time_ns() - start > AM_TEST_LIMIT_NS)
            return false;
    }
    return true;
}

/* sx_sendi, again while it says SX_ERR_AGAIN, until it takes the message
 * or the limit passes; returns its last status. SX_ERR_AGAIN is part of
 * its contract: the calling thread's shard is busy (the engine's service
 * serves it while no thread has called sx_progress for SX_SERVICE_US, which
 * a loaded machine makes common) or the window is full. Between tries it
 * progresses @p e and @p other (the receiver, whose acknowledgements open a
 * full window; NULL when another thread works it), or only yields when both
 * are NULL (a test whose point is that another thread works the shard). */
static inline int am_sendi_pair(sx_engine_h e, sx_engine_h other, sx_peer_h peer, uint8_t tag,
                                const struct iovec *iov, int iovcnt)
{
    int rc;
    uint64_t t0 = sx_time_ns();
    while ((rc = sx_sendi(peer, tag, iov, iovcnt)) == SX_ERR_AGAIN &&
           sx_time_ns() - t0 < AM_TEST_LIMIT_NS) {
        if (e != NULL)
            sx_progress(e);
        if (other != NULL)
            sx_progress(other);
        if (e == NULL && other == NULL)
            sched_yield();
    }
    return rc;
}

/* am_sendi_pair with no receiver to progress. */
static inline int am_sendi(sx_engine_h e, sx_peer_h peer, uint8_t tag, const struct iovec *iov,
                           int iovcnt)
{
    return am_sendi_pair(e, NULL, peer, tag, iov, iovcnt);
}

#endif /* SX_TESTS_AM_UTIL_H */
