/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Micro-benchmark of the hotel on its timer wheel: nanoseconds per
 * check-in, per check-out and per eviction (a deadline expiring through
 * sx_wheel_expire() into the eviction callback).
 *
 * The set-up mimics a shard's retransmit hotel: 4096 rooms (the default
 * send window), a 1 us wheel tick, packets sent 100 ns apart with a 1 ms
 * retransmission timeout, ACKs arriving in send order. Simulated time is
 * passed explicitly, so the wheel's work does not depend on how fast the
 * machine runs; only the measurement reads the clock.
 *
 * Usage: hotel_bench [--iters N]   (N rounds of 4096 operations; default 2000)
 * Prints one human line per metric and one JSON line. Each figure is the
 * median over the rounds of the round's time per operation, so that a
 * round in which the thread was preempted (common on a shared machine)
 * does not move it; the mean is printed beside it.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* common/time.h needs clock_gettime() */
#endif

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shardx.h>

#include "common/time.h"
#include "hotel/hotel.h"
#include "common/wheel.h"

enum { ROOMS = 4096 };

static const uint64_t TICK_NS = 1000;    /* wheel tick */
static const uint64_t SEND_GAP_NS = 100; /* between two packets sent */
static const uint64_t RTO_NS = 1000000;  /* retransmission timeout */

static uint64_t g_evictions;

static void count_eviction(void *occupant, void *arg)
{
    (void)occupant;
    (void)arg;
    g_evictions++;
}

static int usage(const char *argv0)
{
    fprintf(stderr, "usage: %s [--iters N]\n", argv0);
    return 2;
}

static int parse_iters(const char *text, uint64_t *iters_p)
{
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v == 0 || text[0] == '-')
        return -1;
    *iters_p = v;
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Median and mean of @p n round times, as nanoseconds per operation. */
static void summarize(uint64_t *rounds, uint64_t n, double *median_p, double *mean_p)
{
    uint64_t sum = 0;
    for (uint64_t i = 0; i < n; i++)
        sum += rounds[i];
    qsort(rounds, n, sizeof(rounds[0]), cmp_u64);
    *median_p = (double)rounds[n / 2] / ROOMS;
    *mean_p = (double)sum / (double)n / ROOMS;
}

static void die(const char *what, int status)
{
    fprintf(stderr, "hotel_bench: %s: %s\n", what, sx_strerror(status));
    exit(1);
}

int main(int argc, char **argv)
{
    uint64_t iters = 2000;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
            if (parse_iters(argv[++i], &iters) != 0)
                return usage(argv[0]);
        } else if (strncmp(argv[i], "--iters=", 8) == 0) {
            if (parse_iters(argv[i] + 8, &iters) != 0)
                return usage(argv[0]);
        } else {
            return usage(argv[0]);
        }
    }

    static char packets[ROOMS]; /* stand-ins for packet descriptors */
    static sx_hotel_key_t keys[ROOMS];
    sx_wheel_t *wheel = NULL;
    sx_hotel_t *hotel = NULL;
    uint64_t now = 0; /* simulated time */
    int rc = sx_wheel_init(TICK_NS, 0, now, &wheel);
    if (rc != SX_OK)
        die("sx_wheel_init", rc);
    rc = sx_hotel_init(wheel, ROOMS, count_eviction, NULL, &hotel);
    if (rc != SX_OK)
        die("sx_hotel_init", rc);

    uint64_t *checkin_ns = calloc(iters, sizeof(uint64_t));
    uint64_t *checkout_ns = calloc(iters, sizeof(uint64_t));
    uint64_t *expire_ns = calloc(iters, sizeof(uint64_t));
    if (checkin_ns == NULL || checkout_ns == NULL || expire_ns == NULL)
        die("calloc", SX_ERR_NO_MEMORY);

    /* Check-in and check-out: a window's worth of packets sent, then all
     * ACKed in order. The wheel's clock follows between rounds (untimed),
     * as a progress loop would keep it. */
    for (uint64_t round = 0; round < iters; round++) {
        uint64_t t0 = sx_time_ns();
        for (int i = 0; i < ROOMS; i++) {
            now += SEND_GAP_NS;
            rc = sx_hotel_checkin(hotel, &packets[i], now + RTO_NS, &keys[i]);
            if (rc != SX_OK)
                die("sx_hotel_checkin", rc);
        }
        uint64_t t1 = sx_time_ns();
        for (int i = 0; i < ROOMS; i++) {
            rc = sx_hotel_checkout(hotel, keys[i], NULL);
            if (rc != SX_OK)
                die("sx_hotel_checkout", rc);
        }
        uint64_t t2 = sx_time_ns();
        checkin_ns[round] = t1 - t0;
        checkout_ns[round] = t2 - t1;
        sx_wheel_expire(wheel, now);
    }

    /* Eviction: a window of packets whose deadlines spread over 1 ms (so
     * most of them cascade from level 1 to level 0 on the way), all
     * expired by one sx_wheel_expire() call, as after a lost burst. The
     * check-ins are not timed here. */
    g_evictions = 0;
    for (uint64_t round = 0; round < iters; round++) {
        for (int i = 0; i < ROOMS; i++) {
            rc = sx_hotel_checkin(hotel, &packets[i], now + RTO_NS + (uint64_t)i * 250, &keys[i]);
            if (rc != SX_OK)
                die("sx_hotel_checkin", rc);
        }
        /* A deadline fires once the clock reaches it rounded up to the
         * tick, hence the extra tick. */
        now += RTO_NS + ROOMS * 250 + TICK_NS;
        uint64_t t0 = sx_time_ns();
        unsigned fired = sx_wheel_expire(wheel, now);
        expire_ns[round] = sx_time_ns() - t0;
        if (fired != ROOMS || sx_hotel_occupancy(hotel) != 0) {
            fprintf(stderr, "hotel_bench: expected %d evictions, got %u\n", ROOMS, fired);
            return 1;
        }
    }
    if (g_evictions != iters * ROOMS) {
        fprintf(stderr, "hotel_bench: eviction count %" PRIu64 " is wrong\n", g_evictions);
        return 1;
    }

    sx_hotel_stats_t st;
    sx_hotel_stats(hotel, &st);
    sx_hotel_fini(hotel);
    sx_wheel_fini(wheel);

    double ops = (double)iters * ROOMS;
    double in_ns, out_ns, ex_ns, in_mean, out_mean, ex_mean;
    summarize(checkin_ns, iters, &in_ns, &in_mean);
    summarize(checkout_ns, iters, &out_ns, &out_mean);
    summarize(expire_ns, iters, &ex_ns, &ex_mean);
    free(checkin_ns);
    free(checkout_ns);
    free(expire_ns);
    printf("hotel checkin : %7.2f ns/op (mean %.2f; %d rooms, %.0f ops)\n", in_ns, in_mean, ROOMS,
           ops);
    printf("hotel checkout: %7.2f ns/op (mean %.2f; %d rooms, %.0f ops)\n", out_ns, out_mean, ROOMS,
           ops);
    printf("hotel expire  : %7.2f ns/eviction (mean %.2f; %d deadlines over 1 ms per expire "
           "call, %.0f evictions)\n",
           ex_ns, ex_mean, ROOMS, ops);
    printf("{\"bench\":\"hotel\",\"rooms\":%d,\"iters\":%" PRIu64 ",\"checkin_ns\":%.2f,"
           "\"checkout_ns\":%.2f,\"expire_ns\":%.2f,\"high_water\":%" PRIu32 "}\n",
           ROOMS, iters, in_ns, out_ns, ex_ns, st.high_water);
    return 0;
}
