/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The RCU id table (the peer table and the memory-key table): insert, lookup and remove semantics,
 * every entry freed exactly once and only after a grace period, and readers that look entries up
 * while a writer adds and removes them (ASan turns a premature free into a use-after-free report;
 * the poison check below catches it without ASan too).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <shardx.h>

#include "locks/rcu_table.h"
#include "test_filter.h"

#define CANARY(id) ((id)*0x9e3779b97f4a7c15ull + 1)

typedef struct test_peer {
    sx_rcu_entry_t entry;
    uint64_t canary[8];
} test_peer_t;

static atomic_ulong frees;

static void test_peer_free(sx_rcu_entry_t *e)
{
    test_peer_t *p = caa_container_of(e, test_peer_t, entry);
    /* Poison first: a reader still holding it would see garbage. */
    memset(p->canary, 0xdd, sizeof(p->canary));
    atomic_fetch_add(&frees, 1);
    free(p);
}

static test_peer_t *new_peer(uint64_t id)
{
    test_peer_t *p = calloc(1, sizeof(*p));
    assert_non_null(p);
    p->entry.id = id;
    p->entry.free_fn = test_peer_free;
    for (unsigned i = 0; i < 8; i++)
        p->canary[i] = CANARY(id);
    return p;
}

static void test_insert_lookup_remove(void **state)
{
    (void)state;
    sx_rcu_table_t t;
    atomic_store(&frees, 0);

    assert_int_equal(sx_rcu_table_init(&t), SX_OK);
    for (uint64_t id = 0; id < 100; id++)
        assert_int_equal(sx_rcu_table_insert(&t, &new_peer(id)->entry), SX_OK);
    assert_int_equal(sx_rcu_table_count(&t), 100);

    /* A duplicate id is refused and stays the caller's. */
    test_peer_t *dup = new_peer(42);
    assert_int_equal(sx_rcu_table_insert(&t, &dup->entry), SX_ERR_EXISTS);
    free(dup);

    sx_rcu_read_lock();
    for (uint64_t id = 0; id < 100; id++) {
        sx_rcu_entry_t *e = sx_rcu_table_lookup_rcu(&t, id);
        assert_non_null(e);
        assert_int_equal(e->id, id);
        assert_int_equal(caa_container_of(e, test_peer_t, entry)->canary[7], CANARY(id));
    }
    assert_null(sx_rcu_table_lookup_rcu(&t, 1000));
    sx_rcu_read_unlock(&t);

    assert_int_equal(sx_rcu_table_remove(&t, 7), SX_OK);
    assert_int_equal(sx_rcu_table_remove(&t, 7), SX_ERR_NOT_FOUND);
    assert_int_equal(sx_rcu_table_remove(&t, 5000), SX_ERR_NOT_FOUND);
    sx_rcu_read_lock();
    assert_null(sx_rcu_table_lookup_rcu(&t, 7));
    sx_rcu_read_unlock(&t);
    assert_int_equal(sx_rcu_table_count(&t), 99);
    rcu_barrier();
    assert_int_equal(atomic_load(&frees), 1);

    assert_int_equal(sx_rcu_table_insert(&t, &new_peer(7)->entry), SX_OK);
    sx_rcu_table_fini(&t);
    /* 100 inserted plus the re-insert, each freed exactly once. */
    assert_int_equal(atomic_load(&frees), 101);
}

static void test_invalid_insert(void **state)
{
    (void)state;
    sx_rcu_table_t t;
    test_peer_t p = {.entry.id = 1, .entry.free_fn = NULL};

    assert_int_equal(sx_rcu_table_init(&t), SX_OK);
    assert_int_equal(sx_rcu_table_insert(&t, NULL), SX_ERR_INVALID_PARAM);
    assert_int_equal(sx_rcu_table_insert(&t, &p.entry), SX_ERR_INVALID_PARAM);
    sx_rcu_table_fini(&t);
}

/* A removed entry stays readable for a reader that found it before the
 * removal, until that reader leaves its read section. */
static void test_removed_entry_outlives_reader(void **state)
{
    (void)state;
    sx_rcu_table_t t;
    atomic_store(&frees, 0);

    assert_int_equal(sx_rcu_table_init(&t), SX_OK);
    assert_int_equal(sx_rcu_table_insert(&t, &new_peer(3)->entry), SX_OK);
    sx_rcu_read_lock();
    sx_rcu_entry_t *e = sx_rcu_table_lookup_rcu(&t, 3);
    assert_non_null(e);
    /* Removal only defers the free (call_rcu never waits for us). */
    assert_int_equal(sx_rcu_table_remove(&t, 3), SX_OK);
    assert_int_equal(caa_container_of(e, test_peer_t, entry)->canary[0], CANARY(3));
    assert_int_equal(atomic_load(&frees), 0);
    sx_rcu_read_unlock(&t);
    rcu_barrier();
    assert_int_equal(atomic_load(&frees), 1);
    sx_rcu_table_fini(&t);
}

/* ------------------------------------------------------------------ */

#define READERS       3
#define IDS           64
#define WRITER_ROUNDS 20000

typedef struct rw_arg {
    sx_rcu_table_t *table;
    atomic_bool *stop;
    unsigned long bad;
} rw_arg_t;

static void *reader(void *p)
{
    rw_arg_t *a = p;
    uint64_t x = (uint64_t)(uintptr_t)p;

    while (!atomic_load_explicit(a->stop, memory_order_relaxed)) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t id = (x >> 33) % IDS;
        sx_rcu_read_lock();
        sx_rcu_entry_t *e = sx_rcu_table_lookup_rcu(a->table, id);
        if (e != NULL) {
            test_peer_t *peer = caa_container_of(e, test_peer_t, entry);
            for (unsigned i = 0; i < 8; i++) {
                if (peer->canary[i] != CANARY(id))
                    a->bad++;
            }
        }
        sx_rcu_read_unlock(a->table);
    }
    return NULL;
}

static void test_readers_during_add_and_remove(void **state)
{
    (void)state;
    sx_rcu_table_t t;
    atomic_bool stop = false;
    pthread_t r[READERS];
    rw_arg_t args[READERS];
    unsigned long inserted = 0;
    atomic_store(&frees, 0);

    assert_int_equal(sx_rcu_table_init(&t), SX_OK);
    for (unsigned i = 0; i < READERS; i++) {
        args[i] = (rw_arg_t){.table = &t, .stop = &stop};
        assert_int_equal(pthread_create(&r[i], NULL, reader, &args[i]), 0);
    }
    /* The writer (this thread) churns ids: add if absent, remove if there. */
    uint64_t x = 12345;
    for (unsigned round = 0; round < WRITER_ROUNDS; round++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t id = (x >> 33) % IDS;
        if (sx_rcu_table_remove(&t, id) == SX_ERR_NOT_FOUND) {
            test_peer_t *p = new_peer(id);
            assert_int_equal(sx_rcu_table_insert(&t, &p->entry), SX_OK);
            inserted++;
        }
    }
    atomic_store(&stop, true);
    for (unsigned i = 0; i < READERS; i++) {
        pthread_join(r[i], NULL);
        assert_int_equal(args[i].bad, 0);
    }
    sx_rcu_table_fini(&t);
    assert_int_equal(atomic_load(&frees), inserted);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_insert_lookup_remove),
        cmocka_unit_test(test_invalid_insert),
        cmocka_unit_test(test_removed_entry_outlives_reader),
        cmocka_unit_test(test_readers_during_add_and_remove),
    };
    sx_test_filter_from_env();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
