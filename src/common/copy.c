/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The skewed payload copy (copy.h says which copies and why): pieces of
 * SX_COPY_PIECE bytes where they beat one memcpy, measured once.
 *
 * The measurement copies 4 KiB (above glibc's rep movsb threshold of
 * 2,112 bytes, cached) to 16 bytes past the source modulo 4 KiB, both ways, eight times each
 * in turn, and keeps each way's fastest: a preempted trial only slows its
 * own figure. Pieces are chosen when they take at most half the time of
 * one memcpy. On this VM's EPYC four copies took 0.25 us in pieces and
 * 8.1 us as one memcpy each; on a CPU without the slow case the two are
 * about equal. The measurement takes ~70 us here, once per process, in
 * the first skewed copy, whose caller may hold a shard's token; another
 * thread's skewed copy waits for it meanwhile.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/copy.h"
#include "common/log.h"
#include "common/time.h"

#define SX_COPY_PROBE_LEN    4096u
#define SX_COPY_PROBE_SKEW   16u
#define SX_COPY_PROBE_TRIALS 8
#define SX_COPY_PROBE_REPS   4

/* Where glibc stops using rep movsb when the L2 size is unknown. */
#define SX_COPY_REP_MAX_DEFAULT (1u << 20)

static pthread_once_t sx_copy_once = PTHREAD_ONCE_INIT;
/* Written once inside pthread_once, which orders them before every read:
 * whether skewed copies go in pieces, and below which length. glibc 2.36
 * stops using rep movsb on AMD CPUs at the L2 cache's size (here 512 KiB:
 * 500,000 bytes at a skew of 16 1.7 GB/s, 524,288 21), and copies longer
 * ones with its vector loop or non-temporal stores, which pieces would
 * only lose to. */
static bool sx_copy_use_pieces;
static size_t sx_copy_pieces_max;

/* A length the compiler cannot see, so that each piece is a call into
 * libc's memcpy and not an inline `rep movs` of a known size. */
static volatile size_t sx_copy_piece_len = SX_COPY_PIECE;

void sx_copy_pieces(uint8_t *dst, const uint8_t *src, size_t n)
{
    size_t piece = sx_copy_piece_len;

    while (n > piece) {
        memcpy(dst, src, piece);
        dst += piece;
        src += piece;
        n -= piece;
    }
    memcpy(dst, src, n);
}

static uint64_t sx_copy_time(bool pieces, uint8_t *dst, const uint8_t *src, size_t n)
{
    uint64_t t0 = sx_time_ns();
    for (int r = 0; r < SX_COPY_PROBE_REPS; r++) {
        if (pieces)
            sx_copy_pieces(dst, src, n);
        else
            memcpy(dst, src, n);
        __asm__ volatile("" ::: "memory");
    }
    return sx_time_ns() - t0;
}

static void sx_copy_probe(void)
{
    /* The length goes through the volatile too: memcpy of a constant 4 KiB
     * could be expanded inline. */
    size_t n = sx_copy_piece_len * 2;
    uint8_t *buf = aligned_alloc(64, 4 * SX_COPY_PROBE_LEN);
    if (buf == NULL)
        return; /* plain memcpy: the same bytes, possibly slower */
    memset(buf, 0x5a, 4 * SX_COPY_PROBE_LEN);

    uint8_t *src = buf;
    uint8_t *dst = buf + 2 * SX_COPY_PROBE_LEN + SX_COPY_PROBE_SKEW;
    uint64_t best_memcpy = UINT64_MAX, best_pieces = UINT64_MAX;
    for (int t = 0; t < SX_COPY_PROBE_TRIALS; t++) {
        uint64_t a = sx_copy_time(false, dst, src, n);
        uint64_t b = sx_copy_time(true, dst, src, n);
        if (a < best_memcpy)
            best_memcpy = a;
        if (b < best_pieces)
            best_pieces = b;
    }
    free(buf);
    long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    sx_copy_pieces_max = l2 > 0 ? (size_t)l2 : SX_COPY_REP_MAX_DEFAULT;
    sx_copy_use_pieces = best_pieces * 2 <= best_memcpy;
    sx_debug("copy",
             "%zu B at skew %u: memcpy %" PRIu64 " ns, %u B pieces %" PRIu64
             " ns (best of %d, %d copies each): skewed copies below %zu B use %s",
             n, SX_COPY_PROBE_SKEW, best_memcpy, SX_COPY_PIECE, best_pieces, SX_COPY_PROBE_TRIALS,
             SX_COPY_PROBE_REPS, sx_copy_pieces_max, sx_copy_use_pieces ? "pieces" : "memcpy");
}

bool sx_copy_skew_pieces(void)
{
    pthread_once(&sx_copy_once, sx_copy_probe);
    return sx_copy_use_pieces;
}

void sx_copy_skewed(uint8_t *dst, const uint8_t *src, size_t n)
{
    if (sx_copy_skew_pieces() && n < sx_copy_pieces_max)
        sx_copy_pieces(dst, src, n);
    else
        memcpy(dst, src, n);
}
