/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Locks: the shard token (try-lock only), the fair ticket lock and the
 * recursive lock of the global baseline. The multi-thread tests count with
 * plain (non-atomic) variables inside the critical sections, so a lock that
 * lets two threads in loses increments and, under TSan, is reported as a
 * data race.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <shardx.h>

#include "locks/fairlock.h"
#include "test_filter.h"
#include "locks/rlock.h"
#include "locks/token.h"

#define NTHREADS     4
#define FAIR_THREADS 3

/* ---------------------------------------------------------------- helpers */

typedef struct shared {
    pthread_barrier_t start;
    sx_token_t token;
    sx_fairlock_t fair;
    sx_rlock_t rlock;
    unsigned iterations;
    /* Protected by the lock under test; plain on purpose. */
    unsigned long counter;
    unsigned inside;
    bool overlap;
} shared_t;

static void run_threads(shared_t *s, int nthreads, void *(*fn)(void *))
{
    pthread_t th[NTHREADS];

    assert_true(nthreads <= NTHREADS);
    assert_int_equal(pthread_barrier_init(&s->start, NULL, (unsigned)nthreads), 0);
    for (int i = 0; i < nthreads; i++)
        assert_int_equal(pthread_create(&th[i], NULL, fn, s), 0);
    for (int i = 0; i < nthreads; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    pthread_barrier_destroy(&s->start);
}

/*
 * The body of every critical section: a non-atomic read-modify-write with a
 * window between the read and the write, and a check that nobody else is
 * inside. Volatile keeps the compiler from folding the accesses together,
 * so a broken lock shows up as lost increments even without TSan.
 */
static void critical_section(shared_t *s)
{
    volatile unsigned *inside = &s->inside;
    volatile unsigned long *counter = &s->counter;

    if (*inside != 0)
        s->overlap = true;
    *inside = 1;
    unsigned long v = *counter;
    for (int i = 0; i < 32; i++)
        (void)*counter;
    *counter = v + 1;
    *inside = 0;
}

/* ---------------------------------------------------------------- token */

static void test_token_try_release(void **state)
{
    (void)state;
    sx_token_t t;

    sx_token_init(&t);
    assert_true(sx_token_try_acquire(&t));
    assert_true(sx_token_held_by_me(&t));
    assert_false(sx_token_try_acquire(&t)); /* held, also by the caller itself */
    assert_false(sx_token_try_acquire(&t));
    sx_token_release(&t);
#ifdef SX_DEBUG_LOCKS
    assert_false(sx_token_held_by_me(&t));
#endif
    assert_true(sx_token_try_acquire(&t));
    sx_token_release(&t);
    for (int i = 0; i < 1000; i++) {
        assert_true(sx_token_try_acquire(&t));
        assert_false(sx_token_try_acquire(&t));
        sx_token_release(&t);
    }
}

typedef struct token_probe {
    sx_token_t *token;
    bool acquired;
    bool held_by_me;
} token_probe_t;

static void *token_probe_thread(void *arg)
{
    token_probe_t *p = arg;

    p->acquired = sx_token_try_acquire(p->token);
    p->held_by_me = sx_token_held_by_me(p->token);
    if (p->acquired)
        sx_token_release(p->token);
    return NULL;
}

static void test_token_other_thread(void **state)
{
    (void)state;
    sx_token_t t;
    token_probe_t probe = {.token = &t};
    pthread_t th;

    sx_token_init(&t);
    assert_true(sx_token_try_acquire(&t));
    assert_int_equal(pthread_create(&th, NULL, token_probe_thread, &probe), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_false(probe.acquired); /* held by the main thread */
#ifdef SX_DEBUG_LOCKS
    assert_false(probe.held_by_me);
#endif
    sx_token_release(&t);

    assert_int_equal(pthread_create(&th, NULL, token_probe_thread, &probe), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_true(probe.acquired); /* free after the release */
    assert_true(probe.held_by_me);
    assert_true(sx_token_try_acquire(&t)); /* and the thread gave it back */
    sx_token_release(&t);
}

static void *token_worker(void *arg)
{
    shared_t *s = arg;

    pthread_barrier_wait(&s->start);
    for (unsigned done = 0; done < s->iterations;) {
        /* The token has no lock(): spinning is the test's own doing. */
        if (!sx_token_try_acquire(&s->token)) {
            sched_yield();
            continue;
        }
        critical_section(s);
        sx_token_release(&s->token);
        done++;
    }
    return NULL;
}

static void test_token_mutual_exclusion(void **state)
{
    (void)state;
    static shared_t s;

    sx_token_init(&s.token);
    s.iterations = 20000;
    s.counter = 0;
    s.overlap = false;
    run_threads(&s, NTHREADS, token_worker);
    assert_false(s.overlap);
    assert_int_equal(s.counter, (unsigned long)NTHREADS * s.iterations);
    assert_true(sx_token_try_acquire(&s.token));
    sx_token_release(&s.token);
}

/* ---------------------------------------------------------------- fair lock */

static void test_fairlock_single_thread(void **state)
{
    (void)state;
    sx_fairlock_t l;

    sx_fairlock_init(&l);
    for (int i = 0; i < 100; i++) {
        sx_fairlock_lock(&l);
        assert_true(sx_fairlock_held_by_me(&l));
        sx_fairlock_unlock(&l);
#ifdef SX_DEBUG_LOCKS
        assert_false(sx_fairlock_held_by_me(&l));
#endif
    }
}

static void *fair_worker(void *arg)
{
    shared_t *s = arg;

    pthread_barrier_wait(&s->start);
    for (unsigned i = 0; i < s->iterations; i++) {
        sx_fairlock_lock(&s->fair);
        critical_section(s);
        sx_fairlock_unlock(&s->fair);
    }
    return NULL;
}

static void test_fairlock_mutual_exclusion(void **state)
{
    (void)state;
    static shared_t s;

    sx_fairlock_init(&s.fair);
    /* A ticket lock hands over in arrival order and its waiters spin, so
     * when threads outnumber cores a hand-off can wait for a descheduled
     * waiter's next time slice; keep the numbers modest. */
    s.iterations = 1000;
    s.counter = 0;
    s.overlap = false;
    run_threads(&s, FAIR_THREADS, fair_worker);
    assert_false(s.overlap);
    assert_int_equal(s.counter, (unsigned long)FAIR_THREADS * s.iterations);
}

/* ---------------------------------------------------------------- recursive lock */

typedef struct rlock_probe {
    sx_rlock_t *lock;
    bool held_by_me;
} rlock_probe_t;

static void *rlock_probe_thread(void *arg)
{
    rlock_probe_t *p = arg;
    p->held_by_me = sx_rlock_held_by_me(p->lock);
    return NULL;
}

static void test_rlock_reentry(void **state)
{
    (void)state;
    sx_rlock_t l;
    rlock_probe_t probe = {.lock = &l, .held_by_me = true};
    pthread_t th;

    assert_int_equal(sx_rlock_init(&l), SX_OK);
    assert_false(sx_rlock_held_by_me(&l));
    for (unsigned d = 1; d <= 5; d++) {
        sx_rlock_lock(&l);
        assert_int_equal(l.depth, d);
        assert_true(sx_rlock_held_by_me(&l));
    }
    assert_int_equal(pthread_create(&th, NULL, rlock_probe_thread, &probe), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_false(probe.held_by_me);
    for (unsigned d = 5; d >= 1; d--) {
        assert_true(sx_rlock_held_by_me(&l));
        sx_rlock_unlock(&l);
        assert_int_equal(l.depth, d - 1);
    }
    assert_false(sx_rlock_held_by_me(&l));
    /* Usable again after full release. */
    sx_rlock_lock(&l);
    assert_int_equal(l.depth, 1);
    sx_rlock_unlock(&l);
    assert_false(sx_rlock_held_by_me(&l));
    sx_rlock_destroy(&l);
}

static void *rlock_worker(void *arg)
{
    shared_t *s = arg;

    pthread_barrier_wait(&s->start);
    for (unsigned i = 0; i < s->iterations; i++) {
        sx_rlock_lock(&s->rlock);
        sx_rlock_lock(&s->rlock); /* re-entry, as a callback into the API would */
        if (s->rlock.depth != 2 || !sx_rlock_held_by_me(&s->rlock))
            s->overlap = true;
        critical_section(s);
        sx_rlock_unlock(&s->rlock);
        if (s->rlock.depth != 1 || !sx_rlock_held_by_me(&s->rlock))
            s->overlap = true;
        critical_section(s);
        sx_rlock_unlock(&s->rlock);
    }
    return NULL;
}

static void test_rlock_mutual_exclusion(void **state)
{
    (void)state;
    static shared_t s;

    assert_int_equal(sx_rlock_init(&s.rlock), SX_OK);
    s.iterations = 5000;
    s.counter = 0;
    s.overlap = false;
    run_threads(&s, NTHREADS, rlock_worker);
    assert_false(s.overlap);
    assert_int_equal(s.counter, 2ul * NTHREADS * s.iterations);
    assert_false(sx_rlock_held_by_me(&s.rlock));
    assert_int_equal(s.rlock.depth, 0);
    sx_rlock_destroy(&s.rlock);
}

/* ---------------------------------------------------------------- ownership assertions */

#if defined(SX_DEBUG_LOCKS) && !defined(NDEBUG)
enum misuse { TOKEN_RELEASE_UNHELD, FAIRLOCK_RELOCK, FAIRLOCK_UNLOCK_UNHELD, RLOCK_UNLOCK_UNHELD };

/* Runs a misuse in a child process and expects the ownership assertion to
 * abort it (the child is single-threaded and never returns to cmocka). */
static void expect_abort(enum misuse what)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0)
            dup2(devnull, STDERR_FILENO); /* the expected assertion message */
        sx_token_t t;
        sx_fairlock_t f;
        sx_rlock_t r;
        switch (what) {
        case TOKEN_RELEASE_UNHELD:
            sx_token_init(&t);
            sx_token_release(&t);
            break;
        case FAIRLOCK_RELOCK:
            sx_fairlock_init(&f);
            sx_fairlock_lock(&f);
            sx_fairlock_lock(&f); /* would deadlock without the assertion */
            break;
        case FAIRLOCK_UNLOCK_UNHELD:
            sx_fairlock_init(&f);
            sx_fairlock_unlock(&f);
            break;
        case RLOCK_UNLOCK_UNHELD:
            if (sx_rlock_init(&r) == SX_OK)
                sx_rlock_unlock(&r);
            break;
        }
        _exit(0);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGABRT);
}

static void test_ownership_assertions(void **state)
{
    (void)state;
    expect_abort(TOKEN_RELEASE_UNHELD);
    expect_abort(FAIRLOCK_RELOCK);
    expect_abort(FAIRLOCK_UNLOCK_UNHELD);
    expect_abort(RLOCK_UNLOCK_UNHELD);
}
#else
static void test_ownership_assertions(void **state)
{
    (void)state;
    skip(); /* ownership assertions exist in SX_DEBUG_LOCKS builds only */
}
#endif

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_token_try_release),
        cmocka_unit_test(test_token_other_thread),
        cmocka_unit_test(test_token_mutual_exclusion),
        cmocka_unit_test(test_fairlock_single_thread),
        cmocka_unit_test(test_fairlock_mutual_exclusion),
        cmocka_unit_test(test_rlock_reentry),
        cmocka_unit_test(test_rlock_mutual_exclusion),
        cmocka_unit_test(test_ownership_assertions),
    };
    sx_test_filter_from_env();
    return cmocka_run_group_tests_name("locks", tests, NULL, NULL);
}
