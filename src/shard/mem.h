/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Registered memory: the regions an engine exposes to its peers' PUT and
 * GET, each named by a random 64-bit remote key, and the check the RMA
 * target runs before it touches a byte (key, access right, range).
 *
 * The regions live in an RCU table (locks/rcu_table.h) keyed by the remote
 * key: the RMA target looks them up on every PUT and GET chunk without a
 * lock. A region's record is freed only after a grace period (the table's
 * call_rcu), so a reader that found it may still look at it; removal does
 * not wait for that grace period.
 *
 * Accesses: a read section holds only the lookup and the check. The copy
 * itself (a PUT chunk into the region, a GET answer's chunk out of it)
 * runs after it, counted in the region's `accesses` (begun inside the
 * read section that found the region, sx_mem_access_begin_rcu, ended by
 * sx_mem_access_end). Removal marks the region `dead` and then waits for
 * the accesses under way: no remote write lands in a region once
 * sx_mem_table_remove has returned, and no read of it is under way.
 * An access counts itself in first and looks at `dead` second, and
 * removal writes `dead` first and reads the count second, all four
 * sequentially consistent (a Dekker pair, as a pin's read below): either
 * the access sees `dead` and backs out (the region is gone, as if the
 * lookup had missed), or removal sees the access and waits for it. So
 * removal needs no grace period. It used to wait one out
 * (synchronize_rcu), which cost every deregistration membarrier(2) IPIs
 * to the process's other CPUs and, when a reader was descheduled in its
 * section, a 10 ms sleep (urcu-bp's wait_for_readers); ob1 deregisters a
 * buffer per large message. With four ranks on two cores exchanging
 * 256 KiB (MPI_Sendrecv), uprobes timed sx_mem_deregister at 8.8 us on
 * average with the grace period and 3.6 us without (docs/tuning.md).
 *
 * Pins: a GET's answer is sent from the region itself (zero copy,
 * chan_tx.c) and the packets that point into it may need sending again
 * until they are acknowledged, which can be after the owner deregisters
 * it. Each such packet holds a pin. Deregistration never waits for the
 * peer: if pins remain once no reader can take a new one, it copies the
 * region to a shadow that the pinned packets read from then on, and waits
 * for the accesses that began before the switch. A pinned packet's reads
 * (a checksum, a copy, a post_send: every transport that gets pinned
 * packets is done with them when post_send returns) begin outside any
 * read section, sx_mem_pin_read_begin: a read section held across a post
 * of 17 datagrams of 64 KiB (100 us) put 17 of 2,400 deregistrations of
 * an MPI 1 MiB ping-pong past 100 us and its one-way time from 250 to
 * 320 us. Its begin and the shadow's publication are a Dekker pair: a
 * reader that counts itself in before the shadow is published is waited
 * for, one that comes later sees the shadow. The region's record lives until
 * both tables (by key, and the set of live handles) and the last pin let go
 * of it. In the common case (the answer
 * acknowledged before the initiator tells the owner it is done) there is
 * no copy and no wait.
 *
 * Synchronization:
 *
 *   function                 | who may call          | how
 *   -------------------------+-----------------------+----------------------------
 *   sx_mem_table_add         | any thread            | the handle set's writer lock,
 *                            |                       | key_lock (the key pool), then
 *                            |                       | the table's writer lock
 *   sx_mem_table_remove      | any thread, not in a  | the handle set's writer lock,
 *                            | read section          | the table's, then marks it
 *                            |                       | dead and waits for accesses
 *   sx_mem_check_rcu         | any thread            | inside sx_rcu_read_lock()
 *   sx_mem_access_begin_rcu, | any thread            | inside the read section that
 *   sx_mem_pin_rcu           |                       | found the region; atomic
 *   sx_mem_access_end        | who began it          | atomic
 *   sx_mem_pin_read_begin/end| a pin's holder        | atomic (Pins)
 *   sx_mem_unpin             | a pin's holder        | atomic
 *   sx_mem_table_init / fini | one thread, no others |
 */
#ifndef SX_SHARD_MEM_H
#define SX_SHARD_MEM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "locks/rcu_table.h"
#include "shard/wire.h"

/* A registered region; the key is the table id. */
typedef struct sx_mem {
    sx_rcu_entry_t entry;  /* in the table by key (id: the key) */
    sx_rcu_entry_t handle; /* in the set of live handles (id: this record's address) */
    uint8_t *addr;
    size_t len;
    unsigned access;           /* SX_MEM_REMOTE_READ | SX_MEM_REMOTE_WRITE */
    atomic_uint refs;          /* the two tables', a deregistration's, and one per pin */
    atomic_uint pins;          /* packets that point into the region */
    atomic_uint accesses;      /* copies to or from the region under way (Accesses) */
    atomic_bool dead;          /* removed: no access or pin begins (Accesses) */
    _Atomic(uint8_t *) shadow; /* after deregistration with pins: the copy */
} sx_mem_t;

/* Regions up to this size may be pinned; a larger one's GET answers are
 * copied as they are built, so a deregistration never copies more. */
#define SX_MEM_PIN_MAX (64u * 1024u * 1024u)

/* Keys drawn from the kernel at once: a registration took a getrandom(2)
 * of its own, and ob1 registers a buffer per large message (32 calls per
 * 1 MiB allreduce of four ranks, strace). 256 bytes is as much as one
 * call always returns whole, never cut short by a signal (getrandom(2)). */
#define SX_MEM_KEY_BATCH 32u

typedef struct sx_mem_table {
    sx_rcu_table_t rcu;
    /* The handles sx_mem_table_add gave out and no removal took back, by
     * address: a removal asks it before it reads the record, so a stale
     * handle (removed already) or another table's is refused unread. Not
     * a stale handle whose address a later registration got from malloc:
     * that one is the new region's (a handle is an address; see
     * sx_mem_deregister in shardx.h). */
    sx_rcu_table_t handles;
    bool created;
    atomic_uint_fast64_t shadow_bytes; /* copied by deregistrations with pins */
    pthread_mutex_t key_lock;          /* guards keys and nkeys */
    uint64_t keys[SX_MEM_KEY_BATCH];   /* drawn and unused: keys[0..nkeys) */
    unsigned nkeys;
} sx_mem_table_t;

int sx_mem_table_init(sx_mem_table_t *table);
void sx_mem_table_fini(sx_mem_table_t *table);

/**
 * Registers @p len bytes at @p addr with @p access under a fresh random
 * key (a peer cannot guess one it was not given). SX_ERR_NO_MEMORY, or
 * SX_ERR_INTERNAL when no free key was drawn.
 */
int sx_mem_table_add(sx_mem_table_t *table, void *addr, size_t len, unsigned access,
                     sx_mem_t **mem_p);

/** Withdraws @p mem and waits until no reader can still be using it;
 *  pinned packets go on reading a copy (see Pins above). SX_ERR_NOT_FOUND,
 *  without reading @p mem, if it is not a handle of this table (removed
 *  already, or another table's). */
int sx_mem_table_remove(sx_mem_table_t *table, sx_mem_t *mem);

/**
 * Checks a remote access: the key names a registered region with the
 * right @p need, the whole operation's range lies inside the region, and
 * this chunk (@p len bytes at r->addr) inside the operation. Every
 * comparison is written so that hostile 64-bit values cannot overflow it.
 * Returns where the chunk starts, usable until the read section ends, or
 * NULL with *status set (SX_ERR_ACCESS, SX_ERR_OUT_OF_RANGE); *mem_p is
 * the region (NULL on error), for sx_mem_access_begin_rcu or
 * sx_mem_pin_rcu.
 */
uint8_t *sx_mem_check_rcu(sx_mem_table_t *table, const sx_wire_rma_t *r, unsigned need,
                          uint64_t len, int *status, sx_mem_t **mem_p);

/** Counts an access to @p m that runs after the read section that found
 *  it: the bytes sx_mem_check_rcu returned stay usable until
 *  sx_mem_access_end. False when the region is being removed: then
 *  nothing was counted and its bytes must not be touched (the caller
 *  answers SX_ERR_ACCESS, as for a key not found). Keep the access short:
 *  a deregistration spins on it. */
static inline bool sx_mem_access_begin_rcu(sx_mem_t *m)
{
    atomic_fetch_add(&m->accesses, 1); /* sequentially consistent: see Accesses */
    if (!atomic_load(&m->dead))
        return true;
    atomic_fetch_sub_explicit(&m->accesses, 1, memory_order_release);
    return false;
}

static inline void sx_mem_access_end(sx_mem_t *m)
{
    atomic_fetch_sub_explicit(&m->accesses, 1, memory_order_release);
}

/** Pins @p m, in the read section that found it, if it is at most
 *  SX_MEM_PIN_MAX bytes and not being removed: its bytes may then be read
 *  after the section ends, through sx_mem_pin_read_begin, until
 *  sx_mem_unpin. */
bool sx_mem_pin_rcu(sx_mem_t *m);

/** Begins a read of the pinned bytes that were at @p p and returns where
 *  they are now: @p p, or the same place in the shadow after
 *  deregistration. Valid until sx_mem_pin_read_end; keep it short (a
 *  deregistration spins on it). */
static inline const uint8_t *sx_mem_pin_read_begin(sx_mem_t *pin, const uint8_t *p)
{
    atomic_fetch_add(&pin->accesses, 1); /* sequentially consistent: see Pins */
    const uint8_t *shadow = atomic_load(&pin->shadow);
    return shadow != NULL ? shadow + (p - pin->addr) : p;
}

static inline void sx_mem_pin_read_end(sx_mem_t *pin)
{
    sx_mem_access_end(pin);
}

/** Lets go of a pin taken by sx_mem_pin_rcu. */
void sx_mem_unpin(sx_mem_t *pin);

#endif /* SX_SHARD_MEM_H */
