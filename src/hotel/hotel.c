/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Hotel rooms on a timer wheel; see hotel.h for the contract.
 *
 * Free rooms form a LIFO list threaded through the rooms themselves, so
 * check-in and check-out are O(1) and a room vacated by an eviction is the
 * first one reused, while it is still warm in the cache. Rooms never used
 * are not on it: when it is empty, check-in takes the next of them, in
 * index order, and sets it up then. Setting up all SX_HOTEL_ROOMS (16,384
 * by default, 1.2 MB) at creation touched every page of the array: with
 * 16 shards sx_engine_create took 75-90 ms and 23.0 MB of resident memory,
 * and 24-28 ms and 4.5 MB without it. A key is the room index in the low
 * 32 bits and the room's generation in the high 32; the generation is
 * bumped on every vacate and skips 0, so no key is ever 0 and a stale key
 * never matches the room's current stay.
 *
 * The counters are atomics written only by the owner (a load and a store,
 * no read-modify-write, so plain moves on x86 and arm64) so that
 * sx_hotel_stats() may read them from any thread without a data race.
 */
#include "hotel/hotel.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>

#include <shardx.h>

#include "common/hot.h"

#define ROOM_NONE     UINT32_MAX        /* end of the free list */
#define ROOM_OCCUPIED (UINT32_MAX - 1u) /* next_free of an occupied room */

typedef struct sx_hotel_room {
    sx_timer_t timer; /* the eviction deadline; its arg is the hotel */
    void *occupant;
    uint32_t gen;       /* generation of the current or next stay, never 0 */
    uint32_t next_free; /* next free room, or ROOM_OCCUPIED */
} sx_hotel_room_t;

struct sx_hotel {
    sx_wheel_t *wheel; /* borrowed */
    sx_hotel_evict_cb_t evict_cb;
    void *evict_arg;
    uint32_t num_rooms;
    uint32_t free_head;
    uint32_t fresh; /* rooms[fresh..num_rooms) never used: untouched, all zero */
    _Atomic uint32_t occupancy;
    _Atomic uint32_t high_water;
    _Atomic uint64_t checkins;
    _Atomic uint64_t checkouts;
    _Atomic uint64_t evictions;
    _Atomic uint64_t full;
    sx_hotel_room_t rooms[];
};

/* Single-writer counter increment: plain moves on x86 and arm64. */
static inline void bump(_Atomic uint64_t *c)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}

static inline uint32_t load32(const _Atomic uint32_t *c)
{
    /* C11 declares atomic_load_explicit on non-const objects only. */
    return atomic_load_explicit((_Atomic uint32_t *)c, memory_order_relaxed);
}

static inline uint64_t load64(const _Atomic uint64_t *c)
{
    return atomic_load_explicit((_Atomic uint64_t *)c, memory_order_relaxed);
}

static inline sx_hotel_key_t make_key(uint32_t room, uint32_t gen)
{
    return ((sx_hotel_key_t)gen << 32) | room;
}

/* The room that @p key names if the stay is current, else NULL. */
static sx_hotel_room_t *lookup(sx_hotel_t *h, sx_hotel_key_t key)
{
    uint32_t index = (uint32_t)key;
    if (index >= h->num_rooms)
        return NULL;
    sx_hotel_room_t *room = &h->rooms[index];
    if (room->gen != (uint32_t)(key >> 32) || room->next_free != ROOM_OCCUPIED)
        return NULL;
    return room;
}

/* Ends the current stay of @p room and puts it on the free list. */
SX_HOT static void vacate(sx_hotel_t *h, sx_hotel_room_t *room)
{
    room->occupant = NULL;
    room->gen++;
    if (room->gen == 0)
        room->gen = 1;
    room->next_free = h->free_head;
    h->free_head = (uint32_t)(room - h->rooms);
    atomic_store_explicit(&h->occupancy, load32(&h->occupancy) - 1, memory_order_relaxed);
}

/* Wheel callback of a room's deadline: vacate first, then tell the owner,
 * so the callback sees a consistent hotel and may check the guest back in. */
static void evict(sx_timer_t *timer, void *arg)
{
    sx_hotel_t *h = arg;
    sx_hotel_room_t *room =
        (sx_hotel_room_t *)(void *)((char *)timer - offsetof(sx_hotel_room_t, timer));
    void *occupant = room->occupant;
    vacate(h, room);
    bump(&h->evictions);
    h->evict_cb(occupant, h->evict_arg);
}

int sx_hotel_init(sx_wheel_t *wheel, uint32_t num_rooms, sx_hotel_evict_cb_t evict_cb,
                  void *evict_arg, sx_hotel_t **hotel_p)
{
    if (wheel == NULL || evict_cb == NULL || hotel_p == NULL || num_rooms == 0 ||
        num_rooms > SX_HOTEL_MAX_ROOMS)
        return SX_ERR_INVALID_PARAM;

    sx_hotel_t *h = calloc(1, sizeof(*h) + (size_t)num_rooms * sizeof(sx_hotel_room_t));
    if (h == NULL)
        return SX_ERR_NO_MEMORY;

    h->wheel = wheel;
    h->evict_cb = evict_cb;
    h->evict_arg = evict_arg;
    h->num_rooms = num_rooms;
    /* No room is set up yet (see the top of the file): the first check-ins
     * take rooms in index order, which keeps a lightly loaded hotel's
     * working set small. A key naming a room never used finds gen 0, which
     * no key carries. */
    h->free_head = ROOM_NONE;
    h->fresh = 0;
    atomic_init(&h->occupancy, 0);
    atomic_init(&h->high_water, 0);
    atomic_init(&h->checkins, 0);
    atomic_init(&h->checkouts, 0);
    atomic_init(&h->evictions, 0);
    atomic_init(&h->full, 0);
    *hotel_p = h;
    return SX_OK;
}

void sx_hotel_fini(sx_hotel_t *hotel)
{
    if (hotel == NULL)
        return;
    for (uint32_t i = 0; i < hotel->fresh; i++) {
        if (hotel->rooms[i].next_free == ROOM_OCCUPIED)
            sx_wheel_cancel(hotel->wheel, &hotel->rooms[i].timer);
    }
    free(hotel);
}

SX_HOT int sx_hotel_checkin(sx_hotel_t *hotel, void *occupant, uint64_t deadline_ns,
                            sx_hotel_key_t *key_p)
{
    sx_hotel_t *h = hotel;
    uint32_t index = h->free_head;
    sx_hotel_room_t *room;
    if (index != ROOM_NONE) {
        room = &h->rooms[index];
        h->free_head = room->next_free;
    } else if (h->fresh < h->num_rooms) {
        index = h->fresh++;
        room = &h->rooms[index];
        sx_timer_init(&room->timer, evict, h);
        room->gen = 1;
    } else {
        bump(&h->full);
        return SX_ERR_FULL;
    }
    room->next_free = ROOM_OCCUPIED;
    room->occupant = occupant;
    /* The room's timer is idle whenever the room is free, so this cannot
     * fail with SX_ERR_EXISTS. */
    sx_wheel_add(h->wheel, &room->timer, deadline_ns);

    /* The high-water mark is raised before occupancy is published with
     * release, so that a reader that loads occupancy with acquire and then
     * the high-water mark never sees occupancy above it. */
    uint32_t occupancy = load32(&h->occupancy) + 1;
    if (occupancy > load32(&h->high_water))
        atomic_store_explicit(&h->high_water, occupancy, memory_order_relaxed);
    atomic_store_explicit(&h->occupancy, occupancy, memory_order_release);
    bump(&h->checkins);
    *key_p = make_key(index, room->gen);
    return SX_OK;
}

SX_HOT int sx_hotel_checkout(sx_hotel_t *hotel, sx_hotel_key_t key, void **occupant_p)
{
    sx_hotel_room_t *room = lookup(hotel, key);
    if (room == NULL)
        return SX_ERR_NOT_FOUND;
    void *occupant = room->occupant;
    sx_wheel_cancel(hotel->wheel, &room->timer);
    vacate(hotel, room);
    bump(&hotel->checkouts);
    if (occupant_p != NULL)
        *occupant_p = occupant;
    return SX_OK;
}

SX_HOT int sx_hotel_rearm(sx_hotel_t *hotel, sx_hotel_key_t key, uint64_t deadline_ns)
{
    sx_hotel_room_t *room = lookup(hotel, key);
    if (room == NULL)
        return SX_ERR_NOT_FOUND;
    return sx_wheel_rearm(hotel->wheel, &room->timer, deadline_ns);
}

int sx_hotel_stats(const sx_hotel_t *hotel, sx_hotel_stats_t *stats_p)
{
    stats_p->rooms = hotel->num_rooms;
    /* Acquire pairs with the release in sx_hotel_checkin(). */
    stats_p->occupancy =
        atomic_load_explicit((_Atomic uint32_t *)&hotel->occupancy, memory_order_acquire);
    stats_p->high_water = load32(&hotel->high_water);
    stats_p->checkins = load64(&hotel->checkins);
    stats_p->checkouts = load64(&hotel->checkouts);
    stats_p->evictions = load64(&hotel->evictions);
    stats_p->full = load64(&hotel->full);
    return SX_OK;
}

uint32_t sx_hotel_occupancy(const sx_hotel_t *hotel)
{
    return load32(&hotel->occupancy);
}
