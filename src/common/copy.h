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

#endif
