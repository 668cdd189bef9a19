/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The shard inbox and the token-or-delegate protocol: every request runs
 * exactly once, each producer's requests run in its order, a request
 * submitted while the holder is releasing the token is never stranded, and
 * requests submitted from inside a running request are handled.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "shard/inbox.h"
#include "test_filter.h"

typedef struct test_req {
    sx_inbox_req_t req;
    unsigned producer;
    uint64_t seq;
} test_req_t;

/* State touched only by whoever holds the token. */
typedef struct test_owner {
    sx_token_t token;
    sx_inbox_t inbox;
    uint64_t executed;
    uint64_t *next_seq; /* per producer */
    unsigned order_violations;
    unsigned nproducers;
} test_owner_t;

static void test_run(void *owner, sx_inbox_req_t *req)
{
    test_owner_t *o = owner;
    test_req_t *r = (test_req_t *)req;

    if (r->seq != o->next_seq[r->producer])
        o->order_violations++;
    o->next_seq[r->producer] = r->seq + 1;
    o->executed++;
}

static test_owner_t *owner_new(unsigned nproducers)
{
    test_owner_t *o = calloc(1, sizeof(*o));
    assert_non_null(o);
    sx_token_init(&o->token);
    sx_inbox_init(&o->inbox, NULL, NULL);
    o->next_seq = calloc(nproducers, sizeof(uint64_t));
    assert_non_null(o->next_seq);
    o->nproducers = nproducers;
    return o;
}

static void owner_free(test_owner_t *o)
{
    sx_inbox_fini(&o->inbox, o);
    free(o->next_seq);
    free(o);
}

static void init_req(test_req_t *r, unsigned producer, uint64_t seq)
{
    memset(r, 0, sizeof(*r));
    r->req.run = test_run;
    r->producer = producer;
    r->seq = seq;
}

static void test_submit_runs_inline_when_free(void **state)
{
    (void)state;
    test_owner_t *o = owner_new(1);
    test_req_t r;

    init_req(&r, 0, 0);
    assert_true(sx_delegate_submit_mpsc(&o->token, &o->inbox, o, &r.req));
    assert_int_equal(o->executed, 1);
    assert_true(sx_inbox_empty(&o->inbox));
    /* The token was given back. */
    assert_true(sx_token_try_acquire(&o->token));
    sx_token_release(&o->token);
    owner_free(o);
}

static void test_submit_queues_when_busy(void **state)
{
    (void)state;
    test_owner_t *o = owner_new(1);
    test_req_t r[3];

    assert_true(sx_token_try_acquire(&o->token));
    for (unsigned i = 0; i < 3; i++) {
        init_req(&r[i], 0, i);
        assert_false(sx_delegate_submit_mpsc(&o->token, &o->inbox, o, &r[i].req));
    }
    assert_int_equal(o->executed, 0);
    assert_false(sx_inbox_empty(&o->inbox));
    /* Leaving runs what was queued, in order, before the token goes. */
    assert_int_equal(sx_delegate_leave_locked(&o->token, &o->inbox, o), 3);
    assert_int_equal(o->executed, 3);
    assert_int_equal(o->order_violations, 0);
    assert_int_equal(sx_stat_read(&o->inbox.requests_run), 3);
    owner_free(o);
}

static void test_enter_fails_when_busy(void **state)
{
    (void)state;
    test_owner_t *o = owner_new(1);
    size_t ran = 99;

    assert_true(sx_token_try_acquire(&o->token));
    assert_false(sx_delegate_enter(&o->token, &o->inbox, o, &ran));
    assert_int_equal(ran, 99);
    sx_delegate_leave_locked(&o->token, &o->inbox, o);
    assert_true(sx_delegate_enter(&o->token, &o->inbox, o, &ran));
    assert_int_equal(ran, 0);
    sx_delegate_leave_locked(&o->token, &o->inbox, o);
    owner_free(o);
}

/* A request that submits a follow-up to the same inbox while it runs. */
typedef struct chain_req {
    sx_inbox_req_t req;
    unsigned remaining;
    unsigned *ran;
    sx_token_t *token;
    sx_inbox_t *inbox;
} chain_req_t;

static void chain_run(void *owner, sx_inbox_req_t *req)
{
    chain_req_t *c = (chain_req_t *)req;

    (*c->ran)++;
    if (c->remaining > 0) {
        c->remaining--;
        /* The token is held by this very thread: the follow-up must be
         * queued, not run recursively, and must not deadlock. */
        assert_false(sx_delegate_submit_mpsc(c->token, c->inbox, owner, &c->req));
    }
}

static void test_submit_from_inside_a_request(void **state)
{
    (void)state;
    test_owner_t *o = owner_new(1);
    unsigned ran = 0;
    chain_req_t c = {.req.run = chain_run, .remaining = 10, .ran = &ran};
    c.token = &o->token;
    c.inbox = &o->inbox;

    assert_true(sx_delegate_submit_mpsc(&o->token, &o->inbox, o, &c.req));
    /* All follow-ups ran before the submit returned the token. */
    assert_int_equal(ran, 11);
    assert_true(sx_inbox_empty(&o->inbox));
    owner_free(o);
}

/* ------------------------------------------------------------------ */
/* Several producers, one progressing consumer.                        */

#define STRESS_PRODUCERS    4
#define STRESS_PER_PRODUCER 50000

typedef struct stress_arg {
    test_owner_t *owner;
    unsigned producer;
    test_req_t *reqs;
    atomic_uint *producers_left;
} stress_arg_t;

static void *stress_producer(void *p)
{
    stress_arg_t *a = p;

    for (uint64_t i = 0; i < STRESS_PER_PRODUCER; i++) {
        init_req(&a->reqs[i], a->producer, i);
        (void)sx_delegate_submit_mpsc(&a->owner->token, &a->owner->inbox, a->owner,
                                      &a->reqs[i].req);
    }
    atomic_fetch_sub(a->producers_left, 1);
    return NULL;
}

static void *stress_consumer(void *p)
{
    stress_arg_t *a = p;

    while (atomic_load(a->producers_left) != 0) {
        if (sx_delegate_enter(&a->owner->token, &a->owner->inbox, a->owner, NULL))
            sx_delegate_leave_locked(&a->owner->token, &a->owner->inbox, a->owner);
    }
    return NULL;
}

static void test_many_producers_exactly_once_in_order(void **state)
{
    (void)state;
    test_owner_t *o = owner_new(STRESS_PRODUCERS);
    pthread_t prod[STRESS_PRODUCERS], cons;
    stress_arg_t args[STRESS_PRODUCERS], cons_arg;
    atomic_uint left = STRESS_PRODUCERS;

    for (unsigned p = 0; p < STRESS_PRODUCERS; p++) {
        args[p] = (stress_arg_t){.owner = o, .producer = p, .producers_left = &left};
        args[p].reqs = calloc(STRESS_PER_PRODUCER, sizeof(test_req_t));
        assert_non_null(args[p].reqs);
    }
    cons_arg = (stress_arg_t){.owner = o, .producers_left = &left};
    assert_int_equal(pthread_create(&cons, NULL, stress_consumer, &cons_arg), 0);
    for (unsigned p = 0; p < STRESS_PRODUCERS; p++)
        assert_int_equal(pthread_create(&prod[p], NULL, stress_producer, &args[p]), 0);
    for (unsigned p = 0; p < STRESS_PRODUCERS; p++)
        pthread_join(prod[p], NULL);
    pthread_join(cons, NULL);

    /* No final drain: everything must already have run. A stranded request
     * would show here as a missing execution. */
    assert_true(sx_inbox_empty(&o->inbox));
    assert_int_equal(o->executed, (uint64_t)STRESS_PRODUCERS * STRESS_PER_PRODUCER);
    assert_int_equal(o->order_violations, 0);
    for (unsigned p = 0; p < STRESS_PRODUCERS; p++) {
        assert_int_equal(o->next_seq[p], STRESS_PER_PRODUCER);
        free(args[p].reqs);
    }
    owner_free(o);
}

/* ------------------------------------------------------------------ */
/* The token-release race: one thread leaves while another submits.     */

#define RACE_ROUNDS 50000

/*
 * A spinning two-thread barrier. pthread_barrier_wait wakes the waiter
 * microseconds after the last arriver runs on, which would keep the two
 * sides from ever meeting inside the race window; spinning on an atomic
 * lines them up within nanoseconds. It yields after a while so that it
 * still makes progress on a loaded machine.
 */
typedef struct spin_barrier {
    atomic_uint arrived;
    atomic_uint generation;
} spin_barrier_t;

static void spin_barrier_wait(spin_barrier_t *b)
{
    unsigned gen = atomic_load(&b->generation);
    if (atomic_fetch_add(&b->arrived, 1) == 1) {
        atomic_store(&b->arrived, 0);
        atomic_fetch_add(&b->generation, 1);
        return;
    }
    for (unsigned spins = 0; atomic_load(&b->generation) == gen; spins++) {
        if (spins > 1000)
            sched_yield();
    }
}

/* A few nanoseconds of jitter so the two sides meet at every offset. */
static void jitter(uint64_t *x)
{
    *x = *x * 6364136223846793005ull + 1442695040888963407ull;
    for (volatile unsigned i = (unsigned)(*x >> 58); i > 0; i--)
        ;
}

typedef struct race_arg {
    test_owner_t *owner;
    spin_barrier_t *barrier;
    test_req_t *reqs;
} race_arg_t;

static void *race_holder(void *p)
{
    race_arg_t *a = p;
    uint64_t x = 1;

    for (unsigned i = 0; i < RACE_ROUNDS; i++) {
        /* Take the token before the round starts (both sides finished the
         * last round, so it is free), then give it back while the
         * submitter is (maybe) enqueueing. */
        if (!sx_token_try_acquire(&a->owner->token))
            return (void *)1;
        spin_barrier_wait(a->barrier);
        jitter(&x);
        sx_delegate_leave_locked(&a->owner->token, &a->owner->inbox, a->owner);
        spin_barrier_wait(a->barrier);
    }
    return NULL;
}

static void *race_submitter(void *p)
{
    race_arg_t *a = p;
    uint64_t x = 2;
    uintptr_t first_stranded = 0;

    for (unsigned i = 0; i < RACE_ROUNDS; i++) {
        init_req(&a->reqs[i], 0, i);
        spin_barrier_wait(a->barrier);
        jitter(&x);
        (void)sx_delegate_submit_mpsc(&a->owner->token, &a->owner->inbox, a->owner,
                                      &a->reqs[i].req);
        spin_barrier_wait(a->barrier);
        /* Both sides have returned: the request must have run. The
         * executed count is read after the barrier, which orders it. Keep
         * going after a failure so the holder is not left at the barrier. */
        if (a->owner->executed != (uint64_t)i + 1 && first_stranded == 0)
            first_stranded = i + 1;
    }
    return (void *)first_stranded;
}

static void test_token_release_race(void **state)
{
    (void)state;
    test_owner_t *o = owner_new(1);
    spin_barrier_t barrier = {0};
    pthread_t holder, submitter;
    race_arg_t a = {.owner = o, .barrier = &barrier};
    void *stranded = NULL, *holder_rc = NULL;

    a.reqs = calloc(RACE_ROUNDS, sizeof(test_req_t));
    assert_non_null(a.reqs);
    assert_int_equal(pthread_create(&holder, NULL, race_holder, &a), 0);
    assert_int_equal(pthread_create(&submitter, NULL, race_submitter, &a), 0);
    pthread_join(holder, &holder_rc);
    pthread_join(submitter, &stranded);
    assert_null(holder_rc);

    if (stranded != NULL)
        fail_msg("request of round %lu was stranded", (unsigned long)(uintptr_t)stranded - 1);
    assert_int_equal(o->executed, RACE_ROUNDS);
    assert_int_equal(o->order_violations, 0);
    free(a.reqs);
    owner_free(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_submit_runs_inline_when_free),
        cmocka_unit_test(test_submit_queues_when_busy),
        cmocka_unit_test(test_enter_fails_when_busy),
        cmocka_unit_test(test_submit_from_inside_a_request),
        cmocka_unit_test(test_many_producers_exactly_once_in_order),
        cmocka_unit_test(test_token_release_race),
    };
    sx_test_filter_from_env();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
