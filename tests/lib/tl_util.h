/*
 * Helpers of the transport tests (test_transport_udp, _ofi, _self, _fault):
 * a log of received datagrams, polling until enough arrived, one-datagram
 * sends, a byte pattern and a checksum. An includer may define
 * TL_RX_DEADLINE_NS (the hang detector of rx_until) before including;
 * cmocka.h must come first (the helpers assert).
 */
#ifndef SX_TESTS_TL_UTIL_H
#define SX_TESTS_TL_UTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <shardx.h>

#include "common/time.h"
#include "transports/transport.h"

#ifndef TL_RX_DEADLINE_NS
#define TL_RX_DEADLINE_NS (10ull * 1000000000ull)
#endif

typedef struct rx_log {
    size_t n, cap;
    uint8_t **data;
    size_t *len;
} rx_log_t;

static inline void rx_log_free(rx_log_t *log)
{
    for (size_t i = 0; i < log->n; i++)
        free(log->data[i]);
    free(log->data);
    free(log->len);
    memset(log, 0, sizeof(*log));
}

static inline void rx_log_add(rx_log_t *log, const uint8_t *data, size_t len)
{
    if (log->n == log->cap) {
        log->cap = log->cap ? log->cap * 2 : 64;
        log->data = realloc(log->data, log->cap * sizeof(*log->data));
        log->len = realloc(log->len, log->cap * sizeof(*log->len));
        assert_non_null(log->data);
        assert_non_null(log->len);
    }
    log->data[log->n] = malloc(len + 1);
    assert_non_null(log->data[log->n]);
    if (len > 0)
        memcpy(log->data[log->n], data, len);
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

static inline void rx_until(sx_tl_iface_t *rx, rx_log_t *log, size_t want)
{
    uint64_t deadline = sx_time_ns() + TL_RX_DEADLINE_NS;

    while (log->n < want) {
        rx_once(rx, log);
        if (sx_time_ns() > deadline)
            fail_msg("only %zu of %zu datagrams arrived", log->n, want);
    }
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

#endif /* SX_TESTS_TL_UTIL_H */
