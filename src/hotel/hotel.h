/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Hotel: a fixed number of rooms for un-ACKed packets, each room with a
 * deadline on the shard's timer wheel (common/wheel.h). Modelled on Open
 * MPI's opal_hotel: a packet checks in when it is sent, checks out when its
 * ACK arrives, and is evicted (handed to a callback, typically to be
 * retransmitted) if its deadline passes first. The hotel knows nothing of
 * packets: an occupant is an opaque pointer that the caller owns at all
 * times; the hotel only remembers it.
 *
 * Synchronization table (the model is liburcu's wfcqueue.h).
 *
 * A wheel and the hotels on it belong to one shard; "owner" means the
 * thread holding that shard's token (src/locks/), or the single thread of a
 * test. Nothing below takes a lock, blocks, sleeps or logs; only the two
 * init functions allocate.
 *
 *   function                       context              from a callback (1)
 *   sx_wheel_init, sx_hotel_init   any thread (2)       yes
 *   sx_wheel_fini, sx_hotel_fini   owner                no
 *   sx_wheel_expire                owner                no (returns 0)
 *   sx_wheel_add/rearm/cancel      owner                yes
 *   sx_hotel_checkin/checkout/     owner                yes
 *     rearm
 *   sx_wheel_next_deadline/        owner                yes
 *     pending/now, sx_timer_*
 *   sx_hotel_stats, _occupancy     any thread (3)       yes
 *
 *   (1) A timer callback or an eviction callback: both run on the owner's
 *       thread inside sx_wheel_expire().
 *   (2) The new object is the caller's until it hands it to a shard.
 *   (3) Atomic reads of counters that only the owner writes: each value
 *       is exact, a set of them is not one snapshot, except that the
 *       occupancy returned never exceeds the high-water mark.
 *
 * Calls on the same wheel (and the hotels on it) that need external
 * synchronization, that is the token, are marked X:
 *
 *   [1] fini   [2] expire   [3] add, rearm, cancel, checkin, checkout
 *   [4] next_deadline, pending, now   [5] sx_hotel_stats, sx_hotel_occupancy
 *
 *        [1] [2] [3] [4] [5]
 *   [1]   X   X   X   X   X
 *   [2]   X   X   X   X   -
 *   [3]   X   X   X   X   -
 *   [4]   X   X   X   X   -
 *   [5]   X   -   -   -   -
 */
#ifndef SX_HOTEL_HOTEL_H
#define SX_HOTEL_HOTEL_H

#include <stdint.h>

#include "common/wheel.h"

typedef struct sx_hotel sx_hotel_t;

/**
 * Names one stay in one room: the room index and the room's generation,
 * which changes whenever the room is vacated, so a key from an earlier stay
 * never matches a later guest. Opaque to callers; 0 is never a valid key.
 * A room's generation is 32 bits: a key could match again only after 2^32
 * stays in the same room while it was held.
 */
typedef uint64_t sx_hotel_key_t;

/** A key that no check-in ever returns; handy for "not checked in". */
#define SX_HOTEL_KEY_NONE ((sx_hotel_key_t)0)

/** Most rooms a hotel may have. */
#define SX_HOTEL_MAX_ROOMS (UINT32_MAX - 2u)

/**
 * Eviction callback: @p occupant's deadline passed. It runs on the owner's
 * thread inside sx_wheel_expire(), exactly once per eviction, after the
 * room has been vacated (its key is already stale and a check-out with it
 * returns SX_ERR_NOT_FOUND). The occupant is the caller's as it always was.
 * It may check the occupant in again (that is how a retransmission
 * re-arms), and may check other guests in or out; it must not block, call
 * sx_wheel_expire() or sx_hotel_fini().
 */
typedef void (*sx_hotel_evict_cb_t)(void *occupant, void *arg);

/** Counters of a hotel; see sx_hotel_stats(). */
typedef struct sx_hotel_stats {
    uint32_t rooms;      /**< capacity, fixed at init */
    uint32_t occupancy;  /**< rooms occupied now */
    uint32_t high_water; /**< most rooms ever occupied at once */
    uint64_t checkins;   /**< successful check-ins */
    uint64_t checkouts;  /**< successful check-outs */
    uint64_t evictions;  /**< eviction callbacks run */
    uint64_t full;       /**< check-ins refused with SX_ERR_FULL */
} sx_hotel_stats_t;

/**
 * Creates a hotel of @p num_rooms rooms (1 .. SX_HOTEL_MAX_ROOMS) whose
 * deadlines run on @p wheel, calling @p evict_cb(occupant, @p evict_arg) on
 * expiry. Allocates all rooms now (nothing later allocates) but touches
 * none: a room is set up when first checked into. The hotel
 * borrows @p wheel, which must outlive it. Returns SX_OK,
 * SX_ERR_INVALID_PARAM or SX_ERR_NO_MEMORY; *hotel_p is written only on
 * SX_OK. Any thread; the hotel then belongs to the wheel's owner.
 */
int sx_hotel_init(sx_wheel_t *wheel, uint32_t num_rooms, sx_hotel_evict_cb_t evict_cb,
                  void *evict_arg, sx_hotel_t **hotel_p);

/**
 * Cancels the deadlines of all guests still checked in and frees the hotel
 * (NULL is ignored). Remaining guests are dropped without a callback: their
 * occupants stay the caller's, so check out what you still need first.
 * Owner only, never from a callback. O(rooms ever used).
 */
void sx_hotel_fini(sx_hotel_t *hotel);

/**
 * Checks @p occupant (any pointer, NULL included; never dereferenced) into
 * a free room with an eviction deadline of @p deadline_ns, on the wheel's
 * clock; a deadline already passed evicts on the next sx_wheel_expire().
 * O(1): a room comes off a free list, or is the next never used. Returns
 * SX_OK with the stay's key in *key_p, or SX_ERR_FULL when every room is
 * taken (*key_p untouched). Owner only; eviction callbacks may call it.
 * Never blocks.
 */
int sx_hotel_checkin(sx_hotel_t *hotel, void *occupant, uint64_t deadline_ns,
                     sx_hotel_key_t *key_p);

/**
 * Ends the stay @p key before its deadline and cancels the deadline. O(1).
 * Returns SX_OK with the occupant in *occupant_p (which may be NULL if the
 * caller does not want it), or SX_ERR_NOT_FOUND if @p key is stale (the
 * guest already checked out or was evicted) or names no room. Owner only;
 * eviction callbacks may call it. Never blocks.
 */
int sx_hotel_checkout(sx_hotel_t *hotel, sx_hotel_key_t key, void **occupant_p);

/**
 * Moves the eviction deadline of the stay @p key to @p deadline_ns, keeping
 * room and key. O(1). Returns SX_OK, or SX_ERR_NOT_FOUND for a stale key.
 * Owner only; eviction callbacks may call it. Never blocks.
 */
int sx_hotel_rearm(sx_hotel_t *hotel, sx_hotel_key_t key, uint64_t deadline_ns);

/**
 * Fills *stats_p with the hotel's counters. Any thread, never blocks: the
 * counters are atomics (see note 3 of the table above). The caller owns
 * *stats_p. Returns SX_OK.
 */
int sx_hotel_stats(const sx_hotel_t *hotel, sx_hotel_stats_t *stats_p);

/** Rooms occupied now. Any thread (a relaxed atomic read). */
uint32_t sx_hotel_occupancy(const sx_hotel_t *hotel);

#endif /* SX_HOTEL_HOTEL_H */
