/*
 * A shard: one core's share of the engine. It owns its inbox, timer wheel,
 * hotel and counters (and, with the transports, its interfaces, channels
 * and packet pools). Nothing in a shard is written by another shard.
 *
 * Synchronization (DESIGN.md section 3):
 *
 *   field / function          | written or called by     | how
 *   --------------------------+--------------------------+---------------------------
 *   token                     | any thread               | try-lock, never waited on
 *   inbox                     | producers: any thread    | wfcqueue, see inbox.h
 *   wheel, hotel              | the token holder         | plain accesses
 *   stats                     | the token holder         | sx_stat_add (no RMW);
 *                             |                          | readable from any thread
 *   index, core, cpuset, ...  | sx_shard_create only     | read-only afterwards
 *   sx_shard_submit_mpsc      | any thread               | token-or-delegate
 *   sx_shard_progress         | any thread               | returns 0 if token busy
 *   *_locked functions        | the token holder only    |
 */
#ifndef SX_SHARD_SHARD_H
#define SX_SHARD_SHARD_H

#include <hwloc.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/stat.h"
#include "hotel/hotel.h"
#include "hotel/wheel.h"
#include "locks/token.h"
#include "shard/inbox.h"

typedef struct sx_shard sx_shard_t;
typedef struct sx_shard_guest sx_shard_guest_t;

/**
 * What a hotel guest does when its deadline passes before it checks out
 * (typically: retransmit and check in again). Runs on the token holder's
 * thread, inside sx_shard_progress, after the guest's room was vacated.
 */
typedef void (*sx_shard_evict_fn)(sx_shard_t *shard, sx_shard_guest_t *guest);

/** Embed this in anything checked into a shard's hotel. */
struct sx_shard_guest {
    sx_shard_evict_fn on_evict; /* never NULL */
};

typedef struct sx_shard_stats {
    sx_stat_t progress_calls; /* progress passes that held the token */
    sx_stat_t timers_fired;   /* timer callbacks, evictions included */
    /* Requests run are counted by the inbox itself: inbox.requests_run. */
} sx_shard_stats_t;

struct sx_shard {
    sx_token_t token __attribute__((aligned(64)));
    sx_inbox_t inbox;
    sx_wheel_t *wheel;
    sx_hotel_t *hotel;
    sx_shard_stats_t stats __attribute__((aligned(64)));
    /* Read-only after creation. */
    unsigned index;
    int core;
    int first_pu;
    int numa_node;
    hwloc_bitmap_t cpuset;
};

typedef struct sx_shard_conf {
    unsigned index;
    int core;
    int first_pu;
    int numa_node;
    hwloc_const_bitmap_t cpuset; /* copied */
    unsigned hotel_rooms;
    uint64_t tick_ns;
} sx_shard_conf_t;

int sx_shard_create(const sx_shard_conf_t *conf, sx_shard_t **shard_p);

/** Runs requests still queued, then frees the shard. No other thread may
 *  use it. */
void sx_shard_destroy(sx_shard_t *shard);

/**
 * Token-or-delegate: runs @p req now if the token is free, else queues it
 * for the holder. Never waits. Returns true if it ran before returning.
 */
bool sx_shard_submit_mpsc(sx_shard_t *shard, sx_inbox_req_t *req);

/**
 * One progress pass: takes the token (or returns 0 at once if busy), runs
 * the inbox, fires due timers, runs the inbox again and releases the token.
 * Returns the number of requests run and timers fired.
 */
int sx_shard_progress(sx_shard_t *shard);

/** Checks @p guest into the hotel until @p deadline_ns. Token holder only.
 *  SX_ERR_FULL when every room is taken. */
int sx_shard_checkin_locked(sx_shard_t *shard, sx_shard_guest_t *guest, uint64_t deadline_ns,
                            sx_hotel_key_t *key_p);

#endif /* SX_SHARD_SHARD_H */
