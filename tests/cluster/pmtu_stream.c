/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * pmtu_stream: two ranks stream large messages to each other while the
 * path between their hosts shrinks under them (ctest cluster_pmtu_shrink,
 * pmtu_job.sh). Started by sx_run across two hosts of the namespace
 * cluster:
 *
 *   pmtu_stream DIR [BYTES]
 *
 * Each rank keeps up to DEPTH messages of BYTES (default 60000) in flight
 * to the other and checks every message it receives (sender, number,
 * contents, order). Once PHASE messages went each way, it creates
 * DIR/ready.RANK and streams on until DIR/shrunk appears (pmtu_job.sh
 * lowers the switch's MTU in between, then creates it); it then sends
 * PHASE more, every one of them over the smaller path, and an END that
 * says how many it sent in all. It exits 0 when everything it sent was
 * acknowledged, everything the peer sent arrived intact and in order,
 * and no peer failed; it prints its engine's pmtu_blackholes,
 * frags_sent and frags_assembled counters for the script to read.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <shardx.h>

#define TAG_DATA 9
#define TAG_END  10
#define DEPTH    8
#define PHASE    300
#define WAIT_S   180 /* a hang detector, nothing more */

typedef struct state {
    uint32_t peer;
    uint64_t next_in; /* the message number expected next */
    uint64_t bad;
    bool end_seen;
    uint64_t end_count;
    uint64_t completed, failed, outstanding;
    int peer_error;
} state_t;

static uint8_t fill_byte(uint32_t rank, uint64_t n, size_t i)
{
    return (uint8_t)(rank * 131 + n * 7 + i);
}

/* Message: u32 sender rank, u32 zero, u64 number, then fill bytes. */
static void on_data(void *arg, uint64_t peer_id, uint8_t tag, const void *data, size_t len)
{
    state_t *st = arg;
    const uint8_t *p = data;
    uint32_t rank;
    uint64_t n;
    (void)tag;

    if (len < 16 || peer_id != st->peer) {
        st->bad++;
        return;
    }
    memcpy(&rank, p, 4);
    memcpy(&n, p + 8, 8);
    bool ok = rank == st->peer && n == st->next_in;
    for (size_t i = 16; ok && i < len; i++)
        ok = p[i] == fill_byte(rank, n, i);
    if (!ok)
        st->bad++;
    st->next_in++;
}

static void on_end(void *arg, uint64_t peer_id, uint8_t tag, const void *data, size_t len)
{
    state_t *st = arg;
    (void)tag;
    if (peer_id != st->peer || len != sizeof(uint64_t) || st->end_seen) {
        st->bad++;
        return;
    }
    memcpy(&st->end_count, data, sizeof(uint64_t));
    st->end_seen = true;
}

typedef struct op {
    state_t *st;
    bool busy;
} op_t;

static void on_complete(void *ctx, int status)
{
    op_t *op = ctx;
    state_t *st = op->st;
    op->busy = false;
    st->outstanding--;
    if (status == SX_OK)
        st->completed++;
    else
        st->failed++;
}

static void on_error(void *arg, uint64_t peer_id, int status)
{
    state_t *st = arg;
    st->peer_error = status;
    fprintf(stderr, "pmtu_stream: peer %" PRIu64 " failed: %s\n", peer_id, sx_strerror(status));
}

static bool file_exists(const char *dir, const char *name)
{
    char path[4096];
    struct stat sb;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    return stat(path, &sb) == 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: pmtu_stream DIR [BYTES]\n");
        return 2;
    }
    const char *dir = argv[1];
    size_t bytes = argc > 2 ? strtoul(argv[2], NULL, 10) : 60000;
    if (bytes < 16)
        bytes = 16;
    state_t st = {0};
    sx_engine_h e;
    sx_job_info_t job;
    int rc = sx_engine_create(NULL, &e);
    if (rc != SX_OK) {
        fprintf(stderr, "pmtu_stream: sx_engine_create: %s\n", sx_strerror(rc));
        return 1;
    }
    sx_am_register(e, TAG_DATA, on_data, &st);
    sx_am_register(e, TAG_END, on_end, &st);
    sx_error_register(e, on_error, &st);
    if ((rc = sx_engine_join(e, &job)) != SX_OK || job.size != 2) {
        fprintf(stderr, "pmtu_stream: sx_engine_join: %s (size %u; need 2)\n", sx_strerror(rc),
                rc == SX_OK ? job.size : 0);
        sx_engine_destroy(e);
        return 1;
    }
    st.peer = 1 - job.rank;
    sx_peer_h peer = sx_job_peer(e, st.peer);
    /* A buffer per message in flight: sx_send reads it until completion. */
    uint8_t *bufs = malloc(DEPTH * bytes);
    op_t ops[DEPTH + 1];
    if (bufs == NULL)
        return 1;
    for (unsigned i = 0; i <= DEPTH; i++)
        ops[i] = (op_t){&st, false};

    uint64_t sent = 0, limit = UINT64_MAX;
    bool ready = false;
    double start = now_s(), shrunk_at = 0;
    for (uint64_t pass = 0; st.failed == 0 && st.peer_error == 0 && now_s() - start < WAIT_S;
         pass++) {
        /* Phase one, PHASE each way; then ready, and on until shrunk;
         * then PHASE more. */
        if (!ready && st.completed >= PHASE && st.next_in >= PHASE) {
            char path[4096];
            snprintf(path, sizeof(path), "%s/ready.%u", dir, job.rank);
            FILE *f = fopen(path, "w");
            if (f == NULL || fclose(f) != 0) {
                perror(path);
                return 1;
            }
            ready = true;
        }
        if (ready && limit == UINT64_MAX && pass % 256 == 0 && file_exists(dir, "shrunk")) {
            limit = sent + PHASE;
            shrunk_at = now_s();
        }
        if (sent < limit && st.outstanding < DEPTH) {
            unsigned k = 0;
            while (ops[k].busy)
                k++;
            uint8_t *buf = bufs + k * bytes;
            uint32_t zero = 0;
            memcpy(buf, &job.rank, 4);
            memcpy(buf + 4, &zero, 4);
            memcpy(buf + 8, &sent, 8);
            for (size_t i = 16; i < bytes; i++)
                buf[i] = fill_byte(job.rank, sent, i);
            struct iovec iov = {buf, bytes};
            ops[k].busy = true;
            st.outstanding++;
            rc = sx_send(peer, TAG_DATA, &iov, 1, on_complete, &ops[k]);
            if (rc == SX_INPROGRESS) {
                sent++;
            } else {
                ops[k].busy = false;
                st.outstanding--;
            }
            if (rc != SX_INPROGRESS && rc != SX_ERR_AGAIN) {
                fprintf(stderr, "pmtu_stream: sx_send: %s\n", sx_strerror(rc));
                st.failed++;
            }
        }
        if (sent == limit && st.outstanding == 0)
            break;
        sx_progress(e);
    }
    /* END says how many came before it. */
    uint64_t end = sent;
    struct iovec iov = {&end, sizeof(end)};
    st.outstanding++;
    if (st.failed == 0 &&
        sx_send(peer, TAG_END, &iov, 1, on_complete, &ops[DEPTH]) != SX_INPROGRESS)
        st.failed++;
    while (st.failed == 0 && st.peer_error == 0 && (st.outstanding > 0 || !st.end_seen) &&
           now_s() - start < WAIT_S)
        sx_progress(e);
    rc = sx_job_barrier(e);

    uint64_t holes = 0, frags = 0, assembled = 0;
    sx_stats_value(e, "pmtu_blackholes", &holes);
    sx_stats_value(e, "frags_sent", &frags);
    sx_stats_value(e, "frags_assembled", &assembled);
    bool ok = rc == SX_OK && st.failed == 0 && st.peer_error == 0 && st.bad == 0 &&
              limit != UINT64_MAX && st.end_seen && st.next_in == st.end_count &&
              st.completed == sent + 1;
    printf("pmtu_stream: rank %u: sent %" PRIu64 " of %zu bytes (%d after the shrink, %.2f s), "
           "received %" PRIu64 " of %" PRIu64 ", bad %" PRIu64 ", failed %" PRIu64
           "; pmtu_blackholes=%" PRIu64 " frags_sent=%" PRIu64 " frags_assembled=%" PRIu64 ": %s\n",
           job.rank, sent, bytes, limit == UINT64_MAX ? 0 : PHASE,
           shrunk_at > 0 ? now_s() - shrunk_at : 0.0, st.next_in, st.end_count, st.bad, st.failed,
           holes, frags, assembled, ok ? "ok" : "FAILED");
    free(bufs);
    sx_engine_destroy(e);
    return ok ? 0 : 1;
}
