/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Copies of a few bytes without a call into libc, and payload copies that
 * avoid libc's one slow case here (sx_copy_bulk).
 *
 * A memcpy whose length is not a constant is a call through the PLT into
 * libc's memmove: two pages of code (the PLT's and libc's) besides the
 * bytes. On a kernel with page-table isolation and no PCID the TLB is
 * flushed at every system call, so each of them is a miss on every
 * message (common/hot.h says why that matters; docs/tuning.md, "Pages
 * counted"). For the small messages whose latency that decides,
 * sx_copy_small moves the bytes with fixed-size moves the compiler
 * inlines: a head and a tail that may overlap, the way libc's own small
 * copies work. Longer copies go to memcpy, whose loops beat anything
 * written here, except in the one case sx_copy_bulk below avoids.
 */
#ifndef SX_COMMON_COPY_H
#define SX_COMMON_COPY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Copies up to this many bytes inline. */
#define SX_COPY_INLINE_MAX 64u

/*
 * Payload copies of kilobytes: memcpy, except where libc's is known slow.
 *
 * glibc (2.36 here) moves 2,112 bytes up to the L2 cache's size (512 KiB
 * on this VM) with `rep movsb` on a CPU with fast short rep movs (FSRM).
 * On this machine's AMD EPYC (Zen 4) that instruction runs ten to twenty
 * times slower when the destination is 1 to 31 bytes past the source
 * modulo the 4 KiB page (the skew). Measured 2026-12-02, GB/s: 4 KiB
 * cached 2.0 against 41-48 outside the window, 64 KiB 1.4-2.5 against
 * 27-46, 55,000 B from memory (16 MiB spans) 1.6-1.8 against 5.8-6.2. A
 * random pair of buffers lands in the window one time in 132, but
 * buffers at the same offset in their pages (page-aligned application
 * buffers, a packet's payload behind its header) land there together or
 * not at all. In the window, below the L2 size, the copy goes in pieces
 * of SX_COPY_PIECE bytes, each below glibc's threshold, which its vector
 * loop moves at 21-26 GB/s from cache and 2.5-3.3 from memory.
 *
 * Whether the pieces are faster is measured once per process on the first
 * skewed copy (copy.c): another CPU or another libc keeps plain memcpy
 * unless pieces win there too. The bytes copied are the same either way.
 */
#define SX_COPY_PIECE 2048u

/* The skewed path (copy.c): pieces or memcpy, as measured. */
void sx_copy_skewed(uint8_t *dst, const uint8_t *src, size_t n);
/* Whether skewed copies go in pieces here (measures on the first call). */
bool sx_copy_skew_pieces(void);
/* The copy in pieces itself, whatever the measurement chose (tests). */
void sx_copy_pieces(uint8_t *dst, const uint8_t *src, size_t n);

/* Whether a copy of @p n bytes from @p src to @p dst is in the window. */
static inline bool sx_copy_is_skewed(const void *dst, const void *src, size_t n)
{
    uintptr_t skew = ((uintptr_t)dst - (uintptr_t)src) & 4095u;
    return n > SX_COPY_PIECE && skew != 0 && skew < 32;
}

/** memcpy(@p dst, @p src, @p n) for payload bytes; no overlap. */
static inline void sx_copy_bulk(void *dst, const void *src, size_t n)
{
    if (sx_copy_is_skewed(dst, src, n))
        sx_copy_skewed(dst, src, n);
    else
        memcpy(dst, src, n);
}

/** memcpy(@p dst, @p src, @p n) for buffers that do not overlap. */
static inline void sx_copy_small(void *dst, const void *src, size_t n)
{
    uint8_t *d = dst;
    const uint8_t *s = src;

    if (n > SX_COPY_INLINE_MAX) {
        sx_copy_bulk(d, s, n);
    } else if (n >= 32) {
        memcpy(d, s, 32);
        memcpy(d + n - 32, s + n - 32, 32);
    } else if (n >= 16) {
        memcpy(d, s, 16);
        memcpy(d + n - 16, s + n - 16, 16);
    } else if (n >= 8) {
        memcpy(d, s, 8);
        memcpy(d + n - 8, s + n - 8, 8);
    } else if (n >= 4) {
        memcpy(d, s, 4);
        memcpy(d + n - 4, s + n - 4, 4);
    } else if (n > 0) {
        d[0] = s[0];
        d[n / 2] = s[n / 2];
        d[n - 1] = s[n - 1];
    }
}

/*
 * memset(@p dst, 0, @p n) for a record of a few hundred bytes whose size
 * is a constant (an operation record, a packet's head): 16-byte stores
 * in a loop the compiler keeps as it is. GCC expands a memset of such a
 * size into `rep stosq`, whose start-up on this machine's EPYC cost a
 * packet's build ~25 cycles of its ~200 (perf annotate of
 * chan_build_packet under sx_bench latency: a tenth of its samples on the
 * instruction after it); 32-byte steps with a tail that may overlap.
 */
static inline void sx_zero_small(void *dst, size_t n)
{
    uint8_t *d = dst;
    size_t i = 0;

    if (n < 32) {
        memset(d, 0, n);
        return;
    }
    for (; i + 32 <= n; i += 32)
        memset(d + i, 0, 32);
    if (i < n)
        memset(d + n - 32, 0, 32);
}

#endif
