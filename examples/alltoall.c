/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * alltoall: every process of a job sends a message to every process
 * (itself included) and checks what it receives. Start it with the
 * built-in launcher or with Open MPI's mpirun:
 *
 *   sx_run -n 4 ./alltoall
 *   mpirun -np 4 ./alltoall
 *
 * Arguments: [rounds] [bytes] — messages per pair (default 100) and their
 * size (default 64, at least 16). Exit status 0 when every message
 * arrived once, intact and in order.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shardx.h>

#define TAG 7

typedef struct state {
    uint32_t size;
    uint64_t *next_from; /* [size]: the round we expect next from each rank */
    uint64_t received;
    uint64_t bad;
    uint64_t completed;
    uint64_t failed;
} state_t;

/* Message: u64 sender rank, u64 round, then filler derived from both. */
static void on_message(void *arg, uint64_t peer_id, uint8_t tag, const void *data, size_t len)
{
    state_t *st = arg;
    uint64_t hdr[2];
    (void)tag;

    if (len < sizeof(hdr) || peer_id >= st->size) {
        st->bad++;
        return;
    }
    memcpy(hdr, data, sizeof(hdr));
    const uint8_t *p = data;
    int ok = hdr[0] == peer_id && hdr[1] == st->next_from[peer_id];
    for (size_t i = sizeof(hdr); ok && i < len; i++)
        ok = p[i] == (uint8_t)(hdr[0] * 31 + hdr[1] + i);
    if (!ok)
        st->bad++;
    st->next_from[peer_id]++;
    st->received++;
}

static void on_complete(void *ctx, int status)
{
    state_t *st = ctx;
    if (status == SX_OK)
        st->completed++;
    else
        st->failed++;
}

static void on_error(void *arg, uint64_t peer_id, int status)
{
    (void)arg;
    fprintf(stderr, "peer %" PRIu64 " failed: %s\n", peer_id, sx_strerror(status));
}

int main(int argc, char **argv)
{
    unsigned rounds = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 10) : 100;
    size_t bytes = argc > 2 ? strtoul(argv[2], NULL, 10) : 64;
    sx_engine_h engine;
    sx_job_info_t job;
    state_t st = {0};

    if (bytes < 16)
        bytes = 16;
    int rc = sx_engine_create(NULL, &engine);
    if (rc != SX_OK) {
        fprintf(stderr, "sx_engine_create: %s\n", sx_strerror(rc));
        return 1;
    }
    sx_am_register(engine, TAG, on_message, &st);
    sx_error_register(engine, on_error, NULL);
    rc = sx_engine_join(engine, &job);
    if (rc != SX_OK) {
        fprintf(stderr, "sx_engine_join: %s\n", sx_strerror(rc));
        sx_engine_destroy(engine);
        return 1;
    }
    st.size = job.size;
    st.next_from = calloc(job.size, sizeof(*st.next_from));
    /* A buffer per message: sx_send reads it until the completion runs. */
    uint8_t *bufs = malloc((size_t)rounds * job.size * bytes);
    if (st.next_from == NULL || (bufs == NULL && rounds > 0))
        return 1;

    uint64_t sent = 0;
    for (unsigned r = 0; r < rounds; r++) {
        for (uint32_t k = 0; k < job.size; k++) {
            uint32_t dst = (job.rank + k) % job.size; /* spread the load */
            uint64_t hdr[2] = {job.rank, r};
            uint8_t *buf = bufs + ((size_t)r * job.size + k) * bytes;
            memcpy(buf, hdr, sizeof(hdr));
            for (size_t i = sizeof(hdr); i < bytes; i++)
                buf[i] = (uint8_t)(hdr[0] * 31 + hdr[1] + i);
            struct iovec iov = {.iov_base = buf, .iov_len = bytes};
            /* sx_send queues behind a full window; it never says "again". */
            rc = sx_send(sx_job_peer(engine, dst), TAG, &iov, 1, on_complete, &st);
            if (rc != SX_INPROGRESS) {
                fprintf(stderr, "sx_send to rank %u: %s\n", dst, sx_strerror(rc));
                st.failed++;
            } else {
                sent++;
            }
        }
        sx_progress(engine);
    }
    uint64_t expect = (uint64_t)rounds * job.size;
    while ((st.completed + st.failed < sent || st.received < expect) && st.failed == 0)
        sx_progress(engine);
    /* Peers may still wait for our acknowledgements: leave together. */
    rc = sx_job_barrier(engine);
    int ok = rc == SX_OK && st.failed == 0 && st.bad == 0 && st.received == expect;
    printf("rank %u of %u (%s): sent %" PRIu64 ", received %" PRIu64 " of %" PRIu64 ", bad %" PRIu64
           ", failed %" PRIu64 ": %s\n",
           job.rank, job.size, job.modex, sent, st.received, expect, st.bad, st.failed,
           ok ? "ok" : "FAILED");
    free(bufs);
    free(st.next_from);
    sx_engine_destroy(engine);
    return ok ? 0 : 1;
}
