/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Diagnostics: sx_dump (dump.c), and the thread that serves SX_DUMP_SIGNAL
 * and the progress watchdog SX_WATCHDOG_S (watchdog.c).
 *
 * Synchronization:
 *
 *   function                  | called by            | how
 *   --------------------------+----------------------+------------------------------
 *   sx_diag_shard_enter/leave | any thread           | global lock, then the shard's
 *                             |                      | token, retried for a bounded time
 *   sx_dump_chan_locked       | the token holder     | reads the channel
 *   sx_engine_dump            | any thread           | each shard under enter/leave
 *   sx_engine_diag_start/stop | engine create/destroy|
 */
#ifndef SX_ENGINE_DIAG_H
#define SX_ENGINE_DIAG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "shard/chan.h"
#include "shard/shard.h"

struct sx_engine;

/* How long a diagnosis tries for one shard's token before it reports the
 * shard as busy: long enough that a shard merely being progressed is
 * caught between passes on a loaded machine, short enough for a person
 * waiting on a dump. */
#define SX_DIAG_SHARD_BUDGET_NS (500ull * 1000000ull)

/** Takes shard @p s's token (and the global lock in global mode), trying
 *  for @p budget_ns; false if it stayed busy. The tenure serves, as the
 *  engine's service does: callbacks of what it runs are deferred to the
 *  next caller's pass. */
bool sx_diag_shard_enter(struct sx_engine *e, sx_shard_t *s, uint64_t budget_ns);

/** Runs what was queued meanwhile and releases what enter took. */
void sx_diag_shard_leave(struct sx_engine *e, sx_shard_t *s);

/**
 * Writes channel @p c's state and its operations pending at least
 * @p min_age_ns (at most a few listed, the rest counted). Returns how many
 * operations were that old. Token holder of the channel's shard only.
 */
unsigned sx_dump_chan_locked(FILE *out, const sx_chan_t *c, uint64_t now, uint64_t min_age_ns);

/** sx_dump with a per-shard budget. */
int sx_engine_dump(struct sx_engine *e, FILE *out, uint64_t budget_ns);

/** Starts the diagnostics thread when SX_DUMP_SIGNAL or SX_WATCHDOG_S asks
 *  for one (and installs the signal handler); at creation. */
int sx_engine_diag_start(struct sx_engine *e);

/** Stops and joins it; first thing at destruction. */
void sx_engine_diag_stop(struct sx_engine *e);

#endif /* SX_ENGINE_DIAG_H */
