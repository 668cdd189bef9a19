/* SPDX-License-Identifier: BSD-3-Clause */
/* Monotonic time in nanoseconds and wrap-safe comparisons. */
#ifndef SX_COMMON_TIME_H
#define SX_COMMON_TIME_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

/*
 * The clock_gettime that sx_time_ns calls: the vDSO's own where time.c
 * found it, else libc's. libc's is a function of its own that loads the
 * vDSO's address from the dynamic loader's data, two pages besides the
 * vDSO's, each a TLB miss after every system call on a kernel that
 * flushes the TLB there (common/hot.h), and a progress pass reads the
 * clock after its system calls. Set before main; read-only afterwards.
 */
typedef int (*sx_clock_fn_t)(clockid_t, struct timespec *);
extern sx_clock_fn_t sx_clock_gettime_fn;

/** Nanoseconds on CLOCK_MONOTONIC: never jumps with wall-clock changes. */
static inline uint64_t sx_time_ns(void)
{
    struct timespec ts;
    sx_clock_gettime_fn(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/** @p ns nanoseconds as a timespec, for ppoll, epoll_pwait2 and timerfds. */
static inline struct timespec sx_ns_to_ts(uint64_t ns)
{
    return (struct timespec){.tv_sec = (time_t)(ns / 1000000000u),
                             .tv_nsec = (long)(ns % 1000000000u)};
}

/** The same clock at the kernel's tick resolution (1 to 4 ms), for a few
 *  nanoseconds a read: time stamps only a diagnosis looks at (how long an
 *  operation has been pending) take it on the fast path. */
static inline uint64_t sx_time_coarse_ns(void)
{
    struct timespec ts;
    sx_clock_gettime_fn(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/*
 * Wrap-safe "a is before b" for free-running 64-bit counters: the
 * difference is read as signed, so the answer stays right across a wrap as
 * long as the two are less than 2^63 apart (the same trick as the kernel's
 * time_before() and RFC 1982 serial-number arithmetic).
 */
static inline bool sx_u64_before(uint64_t a, uint64_t b)
{
    return (int64_t)(a - b) < 0;
}

static inline bool sx_u64_before_eq(uint64_t a, uint64_t b)
{
    return (int64_t)(a - b) <= 0;
}

/*
 * How long a thread that sleeps until @p until (UINT64_MAX: no deadline)
 * waits from @p now, at most @p cap: 0 when the deadline is due or past.
 * (until - now wraps for a deadline just past, which a sleeper that
 * computed its deadline a moment earlier meets often: read as "far off",
 * it slept the whole cap.)
 */
static inline uint64_t sx_wait_ns(uint64_t now, uint64_t until, uint64_t cap)
{
    if (until == UINT64_MAX)
        return cap;
    if (!sx_u64_before(now, until))
        return 0;
    return until - now < cap ? until - now : cap;
}

/* The same for 32-bit sequence numbers (RFC 1982 serial-number
 * arithmetic): a is before b when b - a, read as signed, is positive. */
static inline bool sx_u32_before(uint32_t a, uint32_t b)
{
    return (int32_t)(a - b) < 0;
}

#endif /* SX_COMMON_TIME_H */
