/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Hierarchical timer wheel; see wheel.h for the contract and the paper.
 *
 * Invariants, with `cur` the wheel's current tick (every timer on the
 * wheel proper has a tick after `cur`; those at or before it are on the due
 * or firing list, or have fired):
 *
 * - A timer in level L, slot s has a tick greater than `cur` that agrees
 *   with `cur` in every 6-bit digit above L and has digit s at level L, so
 *   s is greater than cur's digit at level L: occupied slots all lie ahead
 *   of `cur` within the current rotation of their level. Bit s of
 *   bitmap[L] is set exactly when that slot's list is non-empty.
 * - The overflow list holds timers whose tick differs from `cur` above the
 *   top level; they start no earlier than the next 64^levels boundary.
 *   ovf_min is a lower bound on their ticks (cancelling does not raise it).
 *   The list is re-examined as a whole when the clock reaches the rotation
 *   holding ovf_min, which costs O(list) but happens only for deadlines
 *   beyond the span (2^48 ticks by default), so practically never.
 * - The due list holds timers added with a deadline already passed; they
 *   fire on the next expire call. The firing list holds timers taken off
 *   the wheel in the expire pass in progress whose callbacks have not run.
 *
 * It follows that the next tick at which anything happens is the first
 * occupied slot of the lowest non-empty level (a lower level's slots all
 * come before the next slot boundary of any higher level), or, with every
 * level empty, the start of the rotation holding ovf_min. Expire jumps from
 * one such event to the next, which is what makes a large jump in time
 * cheap. All tick arithmetic is modulo 2^64 and every order comparison
 * goes through sx_u64_before(), so the tick counter may wrap.
 * - quiet_until is a lower bound on every such event's tick: an expire
 *   sets it to the next event, placing a timer lowers it to that timer's
 *   event, cancelling leaves it. An expire to a tick before it, with
 *   nothing due, only moves the clock: most calls of a busy-polling
 *   progress loop, which came to 120 instructions a call before (callgrind
 *   of sx_bench latency).
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* common/time.h needs clock_gettime() */
#endif

#include "common/wheel.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include <shardx.h>

#include "common/hot.h"
#include "common/time.h"

#define SLOT_BITS 6u
#define SLOTS     (1u << SLOT_BITS)

/* Values of sx_timer_t.loc that are not a level. */
#define LOC_LIST 0xfeu /* on the due, firing or overflow list: no bitmap to keep */
#define LOC_IDLE 0xffu /* not pending */

/* quiet_until of a wheel with nothing on it: far ahead, yet well within
 * the half of the tick space that sx_u64_before orders. */
#define SX_WHEEL_QUIET_FAR (UINT64_C(1) << 62)

struct sx_wheel {
    uint64_t cur;        /* current tick */
    uint64_t cur_ns;     /* the time at which tick `cur` starts */
    uint64_t now_ns;     /* latest now given to init or expire */
    uint64_t tick_ns;    /* tick length */
    unsigned tick_shift; /* log2(tick_ns) when it is a power of two */
    bool tick_pow2;
    bool expiring; /* an expire pass is running callbacks */
    unsigned levels;
    size_t pending;
    uint64_t ovf_min;
    uint64_t quiet_until; /* no event before this tick (see the top) */
    uint64_t added_min;   /* earliest deadline added since the last take */
    sx_timer_link_t due;
    sx_timer_link_t firing;
    sx_timer_link_t overflow;
    uint64_t bitmap[SX_WHEEL_MAX_LEVELS];
    sx_timer_link_t slots[]; /* levels * SLOTS list heads */
};

/* ---- intrusive circular lists with a sentinel head ---------------------- */

static inline void list_init(sx_timer_link_t *head)
{
    head->next = head;
    head->prev = head;
}

static inline bool list_empty(const sx_timer_link_t *head)
{
    return head->next == head;
}

static inline void list_append(sx_timer_link_t *head, sx_timer_link_t *node)
{
    node->prev = head->prev;
    node->next = head;
    head->prev->next = node;
    head->prev = node;
}

static inline void list_unlink(sx_timer_link_t *node)
{
    node->prev->next = node->next;
    node->next->prev = node->prev;
    node->next = NULL;
    node->prev = NULL;
}

/* Moves every node of @p from to the tail of @p to, leaving @p from empty. */
static inline void list_splice(sx_timer_link_t *to, sx_timer_link_t *from)
{
    if (list_empty(from))
        return;
    from->next->prev = to->prev;
    to->prev->next = from->next;
    from->prev->next = to;
    to->prev = from->prev;
    list_init(from);
}

static inline sx_timer_t *link_timer(sx_timer_link_t *link)
{
    /* The link is the first member, so the two addresses coincide. */
    return (sx_timer_t *)(void *)link;
}

/* ---- tick arithmetic ---------------------------------------------------- */

static inline uint64_t low_mask(unsigned bits)
{
    return (UINT64_C(1) << bits) - 1; /* bits <= 60 here */
}

static inline unsigned digit(uint64_t tick, unsigned level)
{
    return (unsigned)(tick >> (level * SLOT_BITS)) & (SLOTS - 1);
}

static inline sx_timer_link_t *slot_head(sx_wheel_t *w, unsigned level, unsigned slot)
{
    return &w->slots[level * SLOTS + slot];
}

static inline uint64_t ns_to_ticks(const sx_wheel_t *w, uint64_t ns)
{
    return w->tick_pow2 ? ns >> w->tick_shift : ns / w->tick_ns;
}

/*
 * The tick at which a deadline fires: the deadline rounded up to the tick
 * grid, so a timer never fires before its deadline. A deadline at or
 * before the start of the current tick maps to `cur`, which means "due".
 */
static uint64_t deadline_tick(const sx_wheel_t *w, uint64_t deadline_ns)
{
    if (sx_u64_before_eq(deadline_ns, w->cur_ns))
        return w->cur;
    uint64_t delta = deadline_ns - w->cur_ns;
    uint64_t ticks = ns_to_ticks(w, delta);
    if (ticks * w->tick_ns != delta)
        ticks++;
    return w->cur + ticks;
}

/* Moves the clock forward to tick @p tick (which is not before cur). */
static void advance_to(sx_wheel_t *w, uint64_t tick)
{
    w->cur_ns += (tick - w->cur) * w->tick_ns;
    w->cur = tick;
}

/* ---- placement ---------------------------------------------------------- */

/*
 * Puts @p t, whose tick is already set, where it belongs relative to cur.
 * A tick at or before cur goes to @p due_list: the due list for a new
 * timer, the firing list for one cascaded down to the tick being expired.
 */
SX_HOT static void place(sx_wheel_t *w, sx_timer_t *t, sx_timer_link_t *due_list)
{
    if (sx_u64_before_eq(t->tick, w->cur)) {
        t->loc = LOC_LIST;
        list_append(due_list, &t->link);
        return;
    }
    /* The highest differing digit picks the level; the XOR of the absolute
     * ticks works across a wrap because digits are plain bits of the
     * 64-bit counter, which rotates modulo 2^64 like every level does. */
    uint64_t diff = t->tick ^ w->cur;
    unsigned level = diff < SLOTS ? 0 : (unsigned)(63 - __builtin_clzll(diff)) / SLOT_BITS;
    if (level >= w->levels) {
        if (list_empty(&w->overflow) || sx_u64_before(t->tick, w->ovf_min))
            w->ovf_min = t->tick;
        t->loc = LOC_LIST;
        list_append(&w->overflow, &t->link);
        /* The overflow's event: the rotation holding ovf_min (next_event). */
        uint64_t event = w->ovf_min & ~low_mask(w->levels * SLOT_BITS);
        if (sx_u64_before(event, w->quiet_until))
            w->quiet_until = event;
        return;
    }
    /* The slot's event: its start, the tick with the digits below the
     * level cleared (the timer agrees with cur above it). */
    uint64_t event = t->tick & ~low_mask(level * SLOT_BITS);
    if (sx_u64_before(event, w->quiet_until))
        w->quiet_until = event;
    unsigned slot = digit(t->tick, level);
    t->loc = (uint8_t)level;
    t->slot = (uint8_t)slot;
    list_append(slot_head(w, level, slot), &t->link);
    w->bitmap[level] |= UINT64_C(1) << slot;
}

/* Takes a pending timer off whatever list holds it. */
static void unplace(sx_wheel_t *w, sx_timer_t *t)
{
    list_unlink(&t->link);
    if (t->loc < SX_WHEEL_MAX_LEVELS && list_empty(slot_head(w, t->loc, t->slot)))
        w->bitmap[t->loc] &= ~(UINT64_C(1) << t->slot);
    t->loc = LOC_IDLE;
}

/* ---- public: timers ----------------------------------------------------- */

void sx_timer_init(sx_timer_t *timer, sx_timer_cb_t cb, void *arg)
{
    timer->link.next = NULL;
    timer->link.prev = NULL;
    timer->tick = 0;
    timer->deadline_ns = 0;
    timer->cb = cb;
    timer->arg = arg;
    timer->loc = LOC_IDLE;
    timer->slot = 0;
}

SX_HOT bool sx_timer_is_pending(const sx_timer_t *timer)
{
    return timer->loc != LOC_IDLE;
}

uint64_t sx_timer_deadline(const sx_timer_t *timer)
{
    return timer->deadline_ns;
}

/* ---- public: wheel ------------------------------------------------------ */

int sx_wheel_init(uint64_t tick_ns, unsigned levels, uint64_t now_ns, sx_wheel_t **wheel_p)
{
    if (wheel_p == NULL || tick_ns == 0 || levels > SX_WHEEL_MAX_LEVELS)
        return SX_ERR_INVALID_PARAM;
    if (levels == 0)
        levels = SX_WHEEL_DEFAULT_LEVELS;

    /* On a page boundary, so that the fields a pass reads and the first
     * levels' slots, where a message's timers go, share a page
     * (common/hot.h says why pages count). */
    size_t bytes = sizeof(sx_wheel_t) + (size_t)levels * SLOTS * sizeof(sx_timer_link_t);
    sx_wheel_t *w;
    if (posix_memalign((void **)&w, 4096, bytes) != 0)
        return SX_ERR_NO_MEMORY;
    memset(w, 0, bytes);

    w->tick_ns = tick_ns;
    w->tick_pow2 = (tick_ns & (tick_ns - 1)) == 0;
    w->tick_shift = (unsigned)__builtin_ctzll(tick_ns);
    w->levels = levels;
    /* Starting the tick counter at now / tick keeps ticks readable in a
     * debugger; with a 1 ns tick the counter wraps exactly when time does. */
    w->cur = now_ns / tick_ns;
    w->cur_ns = now_ns;
    w->now_ns = now_ns;
    w->quiet_until = w->cur + SX_WHEEL_QUIET_FAR;
    w->added_min = UINT64_MAX;
    list_init(&w->due);
    list_init(&w->firing);
    list_init(&w->overflow);
    for (size_t i = 0; i < (size_t)levels * SLOTS; i++)
        list_init(&w->slots[i]);
    *wheel_p = w;
    return SX_OK;
}

/* Marks every timer on @p head idle, so is_pending() stays truthful. */
static void idle_all(sx_timer_link_t *head)
{
    while (!list_empty(head)) {
        sx_timer_t *t = link_timer(head->next);
        list_unlink(&t->link);
        t->loc = LOC_IDLE;
    }
}

void sx_wheel_fini(sx_wheel_t *wheel)
{
    if (wheel == NULL)
        return;
    assert(!wheel->expiring);
    idle_all(&wheel->due);
    idle_all(&wheel->firing);
    idle_all(&wheel->overflow);
    for (size_t i = 0; i < (size_t)wheel->levels * SLOTS; i++)
        idle_all(&wheel->slots[i]);
    free(wheel);
}

SX_HOT int sx_wheel_add(sx_wheel_t *wheel, sx_timer_t *timer, uint64_t deadline_ns)
{
    if (timer->loc != LOC_IDLE)
        return SX_ERR_EXISTS;
    timer->deadline_ns = deadline_ns;
    timer->tick = deadline_tick(wheel, deadline_ns);
    place(wheel, timer, &wheel->due);
    wheel->pending++;
    if (deadline_ns < wheel->added_min)
        wheel->added_min = deadline_ns;
    return SX_OK;
}

uint64_t sx_wheel_take_added_min(sx_wheel_t *wheel)
{
    uint64_t min = wheel->added_min;
    wheel->added_min = UINT64_MAX;
    return min;
}

SX_HOT int sx_wheel_rearm(sx_wheel_t *wheel, sx_timer_t *timer, uint64_t deadline_ns)
{
    /* A deadline in the tick the timer already waits for fires at the same
     * moment, from the same slot: only the deadline it reports changes.
     * Most rearms are such: an ACK restarts the retransmission timer of
     * the oldest packet still out (RFC 6298, 5.3), which in a ping-pong is
     * the reply sent a microsecond before the ACK was taken: in sx_bench
     * latency --size 8, 11,433 of a rank's 11,668 rearms stayed in their
     * tick (10 us), each a cancel and an add before. */
    if (timer->loc < wheel->levels && deadline_tick(wheel, deadline_ns) == timer->tick) {
        timer->deadline_ns = deadline_ns;
        if (deadline_ns < wheel->added_min)
            wheel->added_min = deadline_ns;
        return SX_OK;
    }
    (void)sx_wheel_cancel(wheel, timer); /* an idle timer is fine too */
    return sx_wheel_add(wheel, timer, deadline_ns);
}

SX_HOT int sx_wheel_cancel(sx_wheel_t *wheel, sx_timer_t *timer)
{
    if (timer->loc == LOC_IDLE)
        return SX_ERR_NOT_FOUND;
    unplace(wheel, timer);
    wheel->pending--;
    return SX_OK;
}

size_t sx_wheel_pending(const sx_wheel_t *wheel)
{
    return wheel->pending;
}

SX_HOT uint64_t sx_wheel_now(const sx_wheel_t *wheel)
{
    return wheel->now_ns;
}

SX_HOT uint64_t sx_wheel_tick_ns(const sx_wheel_t *wheel)
{
    return wheel->tick_ns;
}

/* ---- expiry ------------------------------------------------------------- */

/*
 * The next tick after cur at which something happens, and what: the slot
 * of *level_p to fire (level 0) or cascade, or, with *level_p equal to the
 * number of levels, the overflow list to re-examine. False when the wheel
 * and the overflow list are both empty.
 */
SX_HOT static bool next_event(const sx_wheel_t *w, uint64_t *tick_p, unsigned *level_p)
{
    for (unsigned level = 0; level < w->levels; level++) {
        uint64_t bits = w->bitmap[level];
        if (bits == 0)
            continue;
        unsigned shift = level * SLOT_BITS;
        /* Every occupied slot lies ahead of cur's digit (see the top). */
        assert((bits & ((UINT64_C(2) << digit(w->cur, level)) - 1)) == 0);
        uint64_t rotation = w->cur & ~low_mask(shift + SLOT_BITS);
        *tick_p = rotation | ((uint64_t)__builtin_ctzll(bits) << shift);
        *level_p = level;
        return true;
    }
    if (!list_empty(&w->overflow)) {
        *tick_p = w->ovf_min & ~low_mask(w->levels * SLOT_BITS);
        *level_p = w->levels;
        return true;
    }
    return false;
}

/* Re-places every timer of @p head relative to the (advanced) clock. */
SX_HOT static void replace_all(sx_wheel_t *w, sx_timer_link_t *head)
{
    sx_timer_link_t tmp;
    list_init(&tmp);
    list_splice(&tmp, head);
    while (!list_empty(&tmp)) {
        sx_timer_t *t = link_timer(tmp.next);
        list_unlink(&t->link);
        place(w, t, &w->firing);
    }
}

/*
 * Handles the event next_event() found at @p level, cur having just been
 * moved to its tick. One event needs one slot only: slot 0 of a level is
 * never occupied (a timer's digit at its level is greater than cur's), so
 * no other slot starts at this tick. Cascaded timers that are due now go
 * straight to the firing list.
 */
SX_HOT static void process_event(sx_wheel_t *w, unsigned level)
{
    if (level == w->levels) {
        replace_all(w, &w->overflow);
        return;
    }
    unsigned slot = digit(w->cur, level);
    sx_timer_link_t *head = slot_head(w, level, slot);
    w->bitmap[level] &= ~(UINT64_C(1) << slot);
    if (level > 0) {
        replace_all(w, head);
        return;
    }
    /* Relabel before splicing, so that a cancel from a callback sees a
     * plain list entry and leaves the level-0 bitmap alone. */
    for (sx_timer_link_t *l = head->next; l != head; l = l->next)
        link_timer(l)->loc = LOC_LIST;
    list_splice(&w->firing, head);
}

/* Runs the callbacks of the firing list; returns how many ran. */
SX_HOT static unsigned run_firing(sx_wheel_t *w)
{
    unsigned fired = 0;
    /* Each timer leaves the list before its callback runs, and callbacks
     * may cancel later entries, so the list is re-read every iteration. */
    while (!list_empty(&w->firing)) {
        sx_timer_t *t = link_timer(w->firing.next);
        list_unlink(&t->link);
        t->loc = LOC_IDLE;
        w->pending--;
        t->cb(t, t->arg);
        fired++;
    }
    return fired;
}

SX_HOT_PASS unsigned sx_wheel_expire(sx_wheel_t *w, uint64_t now_ns)
{
    assert(!w->expiring && "sx_wheel_expire() called from a timer callback");
    if (w->expiring)
        return 0;
    w->now_ns = now_ns;

    uint64_t target = w->cur;
    if (sx_u64_before_eq(w->cur_ns, now_ns))
        target += ns_to_ticks(w, now_ns - w->cur_ns);
    /* Nothing due and no event up to target (quiet_until, see the top):
     * the same as the loop below finding none. */
    if (list_empty(&w->due) && sx_u64_before(target, w->quiet_until)) {
        if (sx_u64_before(w->cur, target))
            advance_to(w, target);
        return 0;
    }
    w->expiring = true;

    /* Timers that were already overdue when added go first: their ticks
     * are at or before cur, so before anything still on the wheel. Timers
     * that callbacks add with a passed deadline land on the (now empty) due
     * list and wait for the next call. */
    list_splice(&w->firing, &w->due);
    unsigned fired = run_firing(w);

    uint64_t tick;
    unsigned level;
    bool more;
    while ((more = next_event(w, &tick, &level)) && sx_u64_before_eq(tick, target)) {
        advance_to(w, tick);
        process_event(w, level);
        fired += run_firing(w);
    }
    /* Nothing lies between here and target, so the clock may jump; every
     * occupied slot stays ahead of it because its event is after target,
     * and that event, the one the loop stopped at, is the next. */
    if (sx_u64_before(w->cur, target))
        advance_to(w, target);
    w->quiet_until = more ? tick : w->cur + SX_WHEEL_QUIET_FAR;

    w->expiring = false;
    return fired;
}

SX_HOT int sx_wheel_next_deadline(const sx_wheel_t *wheel, uint64_t *deadline_ns_p)
{
    if (wheel->pending == 0)
        return SX_ERR_NOT_FOUND;
    if (!list_empty(&wheel->due) || !list_empty(&wheel->firing)) {
        *deadline_ns_p = wheel->cur_ns;
        return SX_OK;
    }
    uint64_t tick;
    unsigned level;
    if (!next_event(wheel, &tick, &level))
        return SX_ERR_NOT_FOUND; /* unreachable while pending > 0 */
    *deadline_ns_p = wheel->cur_ns + (tick - wheel->cur) * wheel->tick_ns;
    return SX_OK;
}
