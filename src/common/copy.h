/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Copies of a few bytes without a call into libc.
 *
 * A memcpy whose length is not a constant is a call through the PLT into
 * libc's memmove: two pages of code (the PLT's and libc's) besides the
 * bytes. On a kernel with page-table isolation and no PCID the TLB is
 * flushed at every system call, so each of them is a miss on every
 * message (common/hot.h says why that matters; docs/tuning.md, "Pages
 * counted"). For the small messages whose latency that decides,
 * sx_copy_small moves the bytes with fixed-size moves the compiler
 * inlines: a head and a tail that may overlap, the way libc's own small
 * copies work. Longer copies still go to memcpy, whose loops beat
 * anything written here.
 */
#ifndef SX_COMMON_COPY_H
#define SX_COMMON_COPY_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Copies up to this many bytes inline. */
#define SX_COPY_INLINE_MAX 64u

/** memcpy(@p dst, @p src, @p n) for buffers that do not overlap. */
static inline void sx_copy_small(void *dst, const void *src, size_t n)
{
    uint8_t *d = dst;
    const uint8_t *s = src;

    if (n > SX_COPY_INLINE_MAX) {
        memcpy(d, s, n);
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
