/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Single-writer counters.
 *
 * Each counter has exactly one writer (the holder of the shard token that
 * owns it), so an increment needs no atomic read-modify-write: a relaxed
 * load and a relaxed store compile to plain moves on x86 and arm64, while
 * still letting other threads read the counter without a data race.
 */
#ifndef SX_COMMON_STAT_H
#define SX_COMMON_STAT_H

#include <stdatomic.h>
#include <stdint.h>

typedef _Atomic uint64_t sx_stat_t;

static inline void sx_stat_add(sx_stat_t *counter, uint64_t n)
{
    atomic_store_explicit(counter, atomic_load_explicit(counter, memory_order_relaxed) + n,
                          memory_order_relaxed);
}

/* Publishes a value the writer keeps elsewhere (a mirror of a plain
 * counter that only the writer may read directly). */
static inline void sx_stat_set(sx_stat_t *counter, uint64_t v)
{
    atomic_store_explicit(counter, v, memory_order_relaxed);
}

static inline uint64_t sx_stat_read(const sx_stat_t *counter)
{
    return atomic_load_explicit(counter, memory_order_relaxed);
}

#endif /* SX_COMMON_STAT_H */
