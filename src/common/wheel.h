/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Per-shard hierarchical timer wheel.
 *
 * The algorithm is scheme 7 of G. Varghese and T. Lauck, "Hashed and
 * Hierarchical Timing Wheels: Data Structures for the Efficient
 * Implementation of a Timer Facility", SOSP 1987: a stack of wheels of 64
 * slots each, where level L covers ticks in units of 64^L. A timer sits in
 * the level of the highest 6-bit digit in which its expiry tick differs from
 * the wheel's current tick; when the current tick reaches the start of a
 * slot at a higher level, that slot's timers are cascaded down. Insert and
 * cancel are O(1); each timer is cascaded at most once per level.
 *
 * Timers are intrusive: the caller embeds an sx_timer_t in its own object,
 * so adding and cancelling never allocates. Time is uint64_t nanoseconds
 * (sx_time_ns() or any monotonic source the caller drives explicitly);
 * every comparison is wrap-safe (sx_u64_before()), so deadlines must lie
 * within 2^63 ns (292 years) of the current time.
 *
 * A wheel has one owner and no internal locking: every call comes from
 * that owner's thread (for a shard's wheel, its token holder). The
 * synchronization table at the top of src/hotel/hotel.h covers a wheel
 * and the hotels on it. Nothing here blocks or logs.
 */
#ifndef SX_COMMON_WHEEL_H
#define SX_COMMON_WHEEL_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>

/** Levels used when sx_wheel_init() is given 0: 2^48 ticks before parking. */
#define SX_WHEEL_DEFAULT_LEVELS 8u
/** Most levels a wheel may have (60 bits of tick). */
#define SX_WHEEL_MAX_LEVELS 10u

typedef struct sx_wheel sx_wheel_t;
typedef struct sx_timer sx_timer_t;

/**
 * Timer callback. Runs on the owner's thread from inside sx_wheel_expire(),
 * after the timer has been taken off the wheel (it is no longer pending),
 * so it may add @p timer again, free the object that embeds it, or add,
 * cancel and re-arm other timers on the same wheel. It must not call
 * sx_wheel_expire() or sx_wheel_fini(), and must not block.
 */
typedef void (*sx_timer_cb_t)(sx_timer_t *timer, void *arg);

/* The link that threads a timer onto one of the wheel's lists. */
typedef struct sx_timer_link {
    struct sx_timer_link *next;
    struct sx_timer_link *prev;
} sx_timer_link_t;

/**
 * A timer, embedded by the caller. The fields are private to wheel.c; they
 * are visible only so that the struct can be embedded. Initialise it with
 * sx_timer_init() before first use; it costs no resources while idle.
 */
struct sx_timer {
    sx_timer_link_t link; /* must stay first: wheel.c converts links back */
    uint64_t tick;        /* expiry tick, the deadline rounded up to the tick grid */
    uint64_t deadline_ns; /* the deadline as given, for the owner's use */
    sx_timer_cb_t cb;
    void *arg;
    uint8_t loc;  /* level 0..9, or a list code from wheel.c, or idle */
    uint8_t slot; /* slot within the level when loc is a level */
};

/**
 * Prepares @p timer to run @p cb(timer, arg) when it expires. The timer
 * must not be pending. Any context; never blocks.
 */
void sx_timer_init(sx_timer_t *timer, sx_timer_cb_t cb, void *arg);

/** True while @p timer is on a wheel and its callback has not started. */
bool sx_timer_is_pending(const sx_timer_t *timer);

/** The deadline @p timer was last added with (meaningful once added). */
uint64_t sx_timer_deadline(const sx_timer_t *timer);

/**
 * Creates a wheel with a tick of @p tick_ns nanoseconds (>= 1) and
 * @p levels levels (0 picks SX_WHEEL_DEFAULT_LEVELS; at most
 * SX_WHEEL_MAX_LEVELS), whose clock starts at @p now_ns. The tick grid is
 * anchored at @p now_ns. The wheel covers 64^levels ticks; deadlines
 * further out are parked and re-examined once per 64^levels ticks, so they
 * are neither lost nor fired early. Allocates the wheel once; nothing else
 * in this module allocates. Returns SX_OK, SX_ERR_INVALID_PARAM or
 * SX_ERR_NO_MEMORY; *wheel_p is written only on SX_OK. Any thread; the new
 * wheel belongs to the caller until it hands it to a shard.
 */
int sx_wheel_init(uint64_t tick_ns, unsigned levels, uint64_t now_ns, sx_wheel_t **wheel_p);

/**
 * Frees @p wheel (NULL is ignored). Timers still pending are marked idle
 * and their callbacks never run; the memory they live in stays the
 * caller's. Owner only, never from a timer callback.
 */
void sx_wheel_fini(sx_wheel_t *wheel);

/**
 * Arms @p timer to fire at or after @p deadline_ns: it fires from the first
 * sx_wheel_expire() whose `now` is at or past the deadline rounded up to
 * the tick grid. A deadline that has already passed fires on the next
 * sx_wheel_expire() call (not during the pass in progress when called from
 * a callback, so a callback that re-adds itself cannot loop). O(1), no
 * allocation. Returns SX_OK, or SX_ERR_EXISTS if the timer is already
 * pending (use sx_wheel_rearm() to move it). Owner only; callbacks may call
 * it.
 */
int sx_wheel_add(sx_wheel_t *wheel, sx_timer_t *timer, uint64_t deadline_ns);

/**
 * Moves @p timer to @p deadline_ns whether or not it is pending (a cancel
 * and an add in one O(1) call). Returns SX_OK. Owner only; callbacks may
 * call it.
 */
int sx_wheel_rearm(sx_wheel_t *wheel, sx_timer_t *timer, uint64_t deadline_ns);

/**
 * Takes @p timer off the wheel so that its callback will not run. O(1).
 * Returns SX_OK, or SX_ERR_NOT_FOUND if it was not pending (never added,
 * already fired or its callback is running, or already cancelled). Owner
 * only; callbacks may call it, also on timers due in the same expire pass.
 */
int sx_wheel_cancel(sx_wheel_t *wheel, sx_timer_t *timer);

/**
 * Advances the wheel's clock to @p now_ns and runs the callback of every
 * timer now due, in deadline order (timers within one tick in no
 * particular order). Empty stretches are skipped, so a jump of hours costs
 * no more than the timers it passes. A @p now_ns earlier than the wheel's
 * clock leaves the clock alone. Returns the number of callbacks run. Owner
 * only; never blocks; must not be called from a timer callback (such a
 * nested call does nothing and returns 0).
 */
unsigned sx_wheel_expire(sx_wheel_t *wheel, uint64_t now_ns);

/**
 * Writes to *deadline_ns_p the earliest time at which sx_wheel_expire() may
 * fire a timer: never later than the earliest pending timer will fire, and
 * possibly earlier (the start of a slot still to be cascaded, or the
 * wheel's current tick when a timer is already due). Sleeping until then
 * and calling sx_wheel_expire() loses nothing. Returns SX_OK, or
 * SX_ERR_NOT_FOUND when nothing is pending. O(levels). Owner only.
 */
int sx_wheel_next_deadline(const sx_wheel_t *wheel, uint64_t *deadline_ns_p);

/**
 * The earliest deadline given to sx_wheel_add() or sx_wheel_rearm() since
 * the last call (UINT64_MAX: none), exact, unlike sx_wheel_next_deadline(),
 * whose answer is a slot's start while the wheel's clock has not been
 * advanced for a while. Starts over. Owner only.
 */
uint64_t sx_wheel_take_added_min(sx_wheel_t *wheel);

/** Number of pending timers. Owner only. */
size_t sx_wheel_pending(const sx_wheel_t *wheel);

/**
 * The `now_ns` of the latest sx_wheel_init() or sx_wheel_expire() call;
 * inside a callback, the time of the expire pass that runs it, which is
 * the natural base for re-arming. Owner only.
 */
uint64_t sx_wheel_now(const sx_wheel_t *wheel);

/** The tick length in nanoseconds. Any context. */
uint64_t sx_wheel_tick_ns(const sx_wheel_t *wheel);

#endif /* SX_COMMON_WHEEL_H */
