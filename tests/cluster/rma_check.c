/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * rma_check: PUTs and GETs of a few MiB between two ranks on two hosts of
 * the namespace cluster, every byte checked (ctest cluster_rma_mtu*).
 * Started by sx_run across two hosts (sxrun_job.sh):
 *
 *   rma_check [ROUNDS] [--expect-landed] [--expect-joined]
 *
 * Rank 1 registers a region of REGION bytes and tells rank 0 where it is
 * (an active message). Each round rank 0 fills its source with a pattern
 * of the round, PUTs it into the region in PARTS operations at once,
 * GETs it back into a buffer it cleared, and compares every byte; rank 1
 * checks the region itself after each round's PUTs (rank 0 tells it by a
 * message once they completed, and waits for its verdict). Across hosts
 * every data packet carries its payload CRC32C, so where the datagrams
 * are large (MTU 9000) the landings (src/shard/chan.h, "Landing": the
 * kernel reads PUT chunks into the region, GET answers into the
 * destination) have their CRC checked over the pieces. With
 * --expect-landed, both ranks must have landed bytes (rank 1 the PUTs',
 * rank 0 the GET answers'); at MTU 1500 nothing lands (SX_LAND_MIN).
 * With --expect-joined, both ranks must have sent datagrams that went to
 * the kernel joined (tl_tx_gso_joined: at MTU 1500 the packets lie end to
 * end in the shard's arena, src/shard/chan_pkt.c), rank 1 its GET
 * answers, rank 0 its PUTs, whose bytes it must have copied into those
 * packets, every one of them (copy_tx_bytes; on a path of small datagrams
 * a PUT is not sent from the caller's memory: src/shard/chan_tx.c,
 * chan_zero_copy). Each rank prints rx_landed_bytes, rx_land_missed,
 * drop_landed, drop_payload_crc, tl_tx_gso_joined and copy_tx_bytes, and
 * exits 0 when every byte matched.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <shardx.h>

#define TAG_WHERE   9  /* rank 1 -> 0: region address and key */
#define TAG_CHECK   10 /* rank 0 -> 1: round N's PUTs completed */
#define TAG_VERDICT 11 /* rank 1 -> 0: round N's region, 1 when it matched */
#define TAG_END     12
#define REGION      (8u << 20)
#define PARTS       4u
#define WAIT_S      180 /* a hang detector, nothing more */

typedef struct state {
    uint64_t where[2]; /* rank 0: the region's address and key, once told */
    bool where_seen;
    uint64_t check_round, verdict_round, verdict_ok; /* last seen + 1 */
    bool end_seen;
    uint64_t posted, done, errors; /* operations and messages of ours */
    uint64_t msgs[64][2];          /* message bodies, read until completion */
    int peer_error;
} state_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint8_t pattern(uint64_t round, size_t i)
{
    uint64_t x = (round + 1) * 0x9e3779b97f4a7c15ull ^ (i / 8) * 0xbf58476d1ce4e5b9ull;
    return (uint8_t)(x >> (8 * (i % 8)));
}

static void on_msg(void *arg, uint64_t peer_id, uint8_t tag, const void *data, size_t len)
{
    state_t *st = arg;
    uint64_t v[2] = {0, 0};
    (void)peer_id;
    memcpy(v, data, len < sizeof(v) ? len : sizeof(v));
    if (tag == TAG_WHERE && len == sizeof(v)) {
        memcpy(st->where, v, sizeof(v));
        st->where_seen = true;
    } else if (tag == TAG_CHECK) {
        st->check_round = v[0] + 1;
    } else if (tag == TAG_VERDICT) {
        st->verdict_round = v[0] + 1;
        st->verdict_ok = v[1];
    } else if (tag == TAG_END) {
        st->end_seen = true;
    }
}

static void on_done(void *arg, int status)
{
    state_t *st = arg;
    st->done++;
    if (status != SX_OK) {
        st->errors++;
        fprintf(stderr, "rma_check: an operation completed with %s\n", sx_strerror(status));
    }
}

static void on_error(void *arg, uint64_t peer_id, int status)
{
    state_t *st = arg;
    (void)peer_id;
    st->peer_error = status;
}

/* Progresses until *counter reaches @p target; false on a failure or
 * after WAIT_S. */
static bool wait_for(sx_engine_h e, state_t *st, const uint64_t *counter, uint64_t target,
                     double start)
{
    while (*counter < target) {
        if (st->errors != 0 || st->peer_error != 0 || now_s() - start > WAIT_S)
            return false;
        sx_progress(e);
    }
    return true;
}

/* Counts an operation of ours that was posted (rc SX_INPROGRESS). */
static bool posted(state_t *st, int rc, const char *what)
{
    if (rc != SX_INPROGRESS) {
        fprintf(stderr, "rma_check: %s: %s\n", what, sx_strerror(rc));
        return false;
    }
    st->posted++;
    return true;
}

/* A message: sx_send reads its body until it completes, and a few are in
 * flight at most, far fewer than the slots. */
static bool send_msg(sx_peer_h peer, uint8_t tag, uint64_t a, uint64_t b, state_t *st)
{
    uint64_t *v = st->msgs[st->posted % 64];
    v[0] = a;
    v[1] = b;
    struct iovec iov = {v, sizeof(st->msgs[0])};
    return posted(st, sx_send(peer, tag, &iov, 1, on_done, st), "sx_send");
}

/* Rank 0: ROUNDS of PUTs checked by rank 1, then GETs checked here. */
static bool run_origin(sx_engine_h e, sx_peer_h peer, state_t *st, unsigned rounds)
{
    uint8_t *src = malloc(REGION), *back = malloc(REGION);
    double start = now_s();
    bool ok = src != NULL && back != NULL;

    while (ok && !st->where_seen) {
        if (st->peer_error != 0 || now_s() - start > WAIT_S)
            ok = false;
        sx_progress(e);
    }
    for (unsigned r = 0; ok && r < rounds; r++) {
        const size_t part = REGION / PARTS;
        for (size_t i = 0; i < REGION; i++)
            src[i] = pattern(r, i);
        memset(back, 0, REGION);
        for (size_t o = 0; ok && o < REGION; o += part)
            ok =
                posted(st, sx_put(peer, src + o, part, st->where[0] + o, st->where[1], on_done, st),
                       "sx_put");
        ok = ok && wait_for(e, st, &st->done, st->posted, start);
        /* The region as rank 1 sees it. */
        ok = ok && send_msg(peer, TAG_CHECK, r, 0, st) &&
             wait_for(e, st, &st->verdict_round, r + 1, start);
        if (ok && st->verdict_ok != 1) {
            fprintf(stderr, "rma_check: round %u: rank 1's region differs from the PUTs\n", r);
            ok = false;
        }
        for (size_t o = 0; ok && o < REGION; o += part)
            ok = posted(st,
                        sx_get(peer, back + o, part, st->where[0] + o, st->where[1], on_done, st),
                        "sx_get");
        ok = ok && wait_for(e, st, &st->done, st->posted, start);
        for (size_t i = 0; ok && i < REGION; i++)
            if (back[i] != src[i]) {
                fprintf(stderr, "rma_check: round %u: GET byte %zu is %u, want %u\n", r, i, back[i],
                        src[i]);
                ok = false;
            }
    }
    ok = ok && send_msg(peer, TAG_END, 0, 0, st);
    free(src);
    free(back);
    return ok;
}

/* Rank 1: the region, checked at each CHECK. */
static bool run_target(sx_engine_h e, sx_peer_h peer, state_t *st)
{
    uint8_t *region = calloc(1, REGION);
    sx_mem_h mem = NULL;
    double start = now_s();
    bool ok = region != NULL &&
              sx_mem_register(e, region, REGION, SX_MEM_REMOTE_READ | SX_MEM_REMOTE_WRITE, &mem) ==
                  SX_OK &&
              send_msg(peer, TAG_WHERE, (uint64_t)(uintptr_t)region, sx_mem_rkey(mem), st);
    uint64_t checked = 0;
    while (ok && !st->end_seen) {
        if (st->errors != 0 || st->peer_error != 0 || now_s() - start > WAIT_S) {
            ok = false;
            break;
        }
        sx_progress(e);
        if (st->check_round > checked) {
            uint64_t r = checked++;
            uint64_t match = 1;
            for (size_t i = 0; i < REGION && match; i++)
                if (region[i] != pattern(r, i)) {
                    fprintf(stderr,
                            "rma_check: round %" PRIu64 ": region byte %zu is %u, want %u\n", r, i,
                            region[i], pattern(r, i));
                    match = 0;
                }
            ok = send_msg(peer, TAG_VERDICT, r, match, st);
        }
    }
    if (mem != NULL)
        (void)sx_mem_deregister(e, mem);
    free(region);
    return ok;
}

int main(int argc, char **argv)
{
    unsigned rounds = 4;
    bool expect_landed = false, expect_joined = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--expect-landed") == 0)
            expect_landed = true;
        else if (strcmp(argv[i], "--expect-joined") == 0)
            expect_joined = true;
        else
            rounds = (unsigned)strtoul(argv[i], NULL, 10);
    }
    state_t st = {0};
    sx_engine_h e;
    sx_job_info_t job;
    int rc = sx_engine_create(NULL, &e);
    if (rc != SX_OK) {
        fprintf(stderr, "rma_check: sx_engine_create: %s\n", sx_strerror(rc));
        return 1;
    }
    for (uint8_t tag = TAG_WHERE; tag <= TAG_END; tag++)
        sx_am_register(e, tag, on_msg, &st);
    sx_error_register(e, on_error, &st);
    if ((rc = sx_engine_join(e, &job)) != SX_OK || job.size != 2) {
        fprintf(stderr, "rma_check: sx_engine_join: %s (size %u; need 2)\n", sx_strerror(rc),
                rc == SX_OK ? job.size : 0);
        sx_engine_destroy(e);
        return 1;
    }
    sx_peer_h peer = sx_job_peer(e, 1 - job.rank);
    bool ok = job.rank == 0 ? run_origin(e, peer, &st, rounds) : run_target(e, peer, &st);
    /* Every message of ours acknowledged, then the other rank's, before
     * the engine goes (sx_job_barrier's contract). */
    ok = ok && wait_for(e, &st, &st.done, st.posted, now_s());
    if (ok && (rc = sx_job_barrier(e)) != SX_OK) {
        fprintf(stderr, "rma_check: sx_job_barrier: %s\n", sx_strerror(rc));
        ok = false;
    }
    uint64_t landed = 0, missed = 0, dropped = 0, crc_bad = 0, crc_sent = 0, joined = 0;
    uint64_t copied = 0;
    sx_stats_value(e, "rx_landed_bytes", &landed);
    sx_stats_value(e, "rx_land_missed", &missed);
    sx_stats_value(e, "drop_landed", &dropped);
    sx_stats_value(e, "drop_payload_crc", &crc_bad);
    sx_stats_value(e, "crc_sent", &crc_sent);
    sx_stats_value(e, "tl_tx_gso_joined", &joined);
    sx_stats_value(e, "copy_tx_bytes", &copied);
    if (ok && expect_landed && landed == 0) {
        fprintf(stderr, "rma_check: rank %u: nothing landed\n", job.rank);
        ok = false;
    }
    if (ok && expect_joined && joined == 0) {
        fprintf(stderr, "rma_check: rank %u: no %s went joined (tl_tx_gso_joined 0)\n", job.rank,
                job.rank == 1 ? "GET answer" : "PUT");
        ok = false;
    }
    if (ok && expect_joined && job.rank == 0 && copied < (uint64_t)rounds * REGION) {
        fprintf(stderr,
                "rma_check: rank 0: copied %" PRIu64 " bytes into packets, want the PUTs' %" PRIu64
                " or more\n",
                copied, (uint64_t)rounds * REGION);
        ok = false;
    }
    printf("rma_check: rank %u: %u rounds of %u MiB; rx_landed_bytes=%" PRIu64
           " rx_land_missed=%" PRIu64 " drop_landed=%" PRIu64 " drop_payload_crc=%" PRIu64
           " crc_sent=%" PRIu64 " tl_tx_gso_joined=%" PRIu64 " copy_tx_bytes=%" PRIu64 ": %s\n",
           job.rank, rounds, REGION >> 20, landed, missed, dropped, crc_bad, crc_sent, joined,
           copied, ok ? "ok" : "FAILED");
    sx_engine_destroy(e);
    return ok ? 0 : 1;
}
