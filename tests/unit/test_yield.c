/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * SX_YIELD=auto's verdict (src/engine/yield.c): whether the machine is
 * oversubscribed. The machine's load is read from files the test writes
 * in place of /proc/loadavg and /proc/pressure/cpu, and every verdict is
 * made at a time the test gives, so nothing depends on how busy the
 * machine running the test is.
 *
 * The case that made the pressure part of it: a runnable count above the
 * online CPUs, in a snapshot, while hardly anything waited for a CPU (a
 * task that woke for a moment beside two spinning ranks) is not
 * oversubscription; the same count while tasks waited for a tenth of the
 * interval or more is.
 *
 * Also the count of runnable tasks beyond the job's own on the node
 * (the launcher's local size), and what a caller that yields to its
 * runtime does with it: an unbound caller of a one-shard engine lets the
 * runtime yield while none are seen, waits once two verdicts in a row saw
 * them, and always waits where the launcher gave no local size.
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/time.h"
#include "test_filter.h"
#include "engine/yield.h"

#define MS 1000000ull

typedef struct files {
    char dir[64], loadavg[96], pressure[96];
} files_t;

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

/* /proc/loadavg with @p running runnable tasks; false if the file was
 * not written. Without cmocka's assertions, for after_thread (they may
 * not fail off the test's own thread); set_runnable asserts. */
static bool runnable_quiet(const files_t *fs, unsigned running)
{
    FILE *f = fopen(fs->loadavg, "w");
    if (f == NULL)
        return false;
    bool ok = fprintf(f, "0.50 0.40 0.30 %u/200 4242\n", running) > 0;
    return fclose(f) == 0 && ok;
}

static void set_runnable(const files_t *fs, unsigned running)
{
    assert_true(runnable_quiet(fs, running));
}

/* /proc/pressure/cpu with @p total_us microseconds of "some" stall. */
static void set_stall(const files_t *fs, uint64_t total_us)
{
    char text[192];
    snprintf(text, sizeof(text),
             "some avg10=1.00 avg60=0.50 avg300=0.10 total=%llu\n"
             "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
             (unsigned long long)total_us);
    write_file(fs->pressure, text);
}

static int setup(void **state)
{
    files_t *fs = calloc(1, sizeof(*fs));
    assert_non_null(fs);
    snprintf(fs->dir, sizeof(fs->dir), "/tmp/sx_test_yield.XXXXXX");
    assert_non_null(mkdtemp(fs->dir));
    snprintf(fs->loadavg, sizeof(fs->loadavg), "%s/loadavg", fs->dir);
    snprintf(fs->pressure, sizeof(fs->pressure), "%s/cpu", fs->dir);
    *state = fs;
    return 0;
}

static int teardown(void **state)
{
    files_t *fs = *state;
    (void)unlink(fs->loadavg);
    (void)unlink(fs->pressure);
    (void)rmdir(fs->dir);
    free(fs);
    return 0;
}

/* An engine's yield state on a 2-CPU machine, reading @p fs; its first
 * interval starts at init, with @p stall_us of stall so far. */
static void init_2cpu(sx_yield_t *y, const files_t *fs, uint64_t stall_us, uint64_t *t0)
{
    set_runnable(fs, 1);
    set_stall(fs, stall_us);
    sx_yield_init_at(y, SX_YIELD_AUTO, 2, fs->loadavg, fs->pressure);
    assert_true(y->loadavg_fd >= 0);
    assert_true(y->pressure_fd >= 0);
    y->online = 2;
    *t0 = sx_time_ns();
}

/* Too many runnable tasks counts only while tasks have waited for a CPU
 * for a tenth of the interval or more. */
static void test_runnable_counts_only_under_pressure(void **state)
{
    const files_t *fs = *state;
    sx_yield_t y;
    uint64_t t;

    init_2cpu(&y, fs, 1000, &t);
    set_runnable(fs, 3); /* the two spinning ranks and a passer-by */
    t += 10 * MS;
    set_stall(fs, 1000 + 2000); /* a fifth: counts */
    assert_true(sx_yield_verdict(&y, t));
    t += 10 * MS;
    set_stall(fs, 3000 + 100); /* 0.1 ms of 10: 1 % */
    assert_false(sx_yield_verdict(&y, t));
    assert_false(atomic_load(&y.over));
    t += 10 * MS;
    set_stall(fs, 3100 + 5000); /* half the interval */
    assert_true(sx_yield_verdict(&y, t));
    assert_true(atomic_load(&y.over));

    /* Just under and just at the threshold (SX_YIELD_PRESSURE_PERMILLE). */
    t += 10 * MS;
    set_stall(fs, 8100 + 999);
    assert_false(sx_yield_verdict(&y, t));
    t += 10 * MS;
    set_stall(fs, 9099 + 1000);
    assert_true(sx_yield_verdict(&y, t));

    /* Tasks waited, but no more are runnable than CPUs now. */
    set_runnable(fs, 2);
    t += 10 * MS;
    set_stall(fs, 10099 + 9000);
    assert_false(sx_yield_verdict(&y, t));

    /* A long interval averages: 30 ms stalled in 1 s is 3 %. */
    set_runnable(fs, 5);
    t += 1000 * MS;
    set_stall(fs, 19099 + 30000);
    assert_false(sx_yield_verdict(&y, t));
    assert_int_equal(atomic_load(&y.over_checks), 3);
    sx_yield_fini(&y);
}

/* Without the pressure file (CONFIG_PSI off, psi=0), or with one that
 * does not read as PSI, the runnable count decides alone, as it did
 * before PSI was read. */
static void test_without_pressure_runnable_decides(void **state)
{
    const files_t *fs = *state;
    sx_yield_t y;
    uint64_t t = sx_time_ns();

    set_runnable(fs, 3);
    sx_yield_init_at(&y, SX_YIELD_AUTO, 2, fs->loadavg, "/nonexistent/pressure/cpu");
    y.online = 2;
    assert_int_equal(y.pressure_fd, -1);
    assert_true(sx_yield_verdict(&y, t + 10 * MS));
    set_runnable(fs, 2);
    assert_false(sx_yield_verdict(&y, t + 20 * MS));
    sx_yield_fini(&y);

    static const char *const bad[] = {
        "",                                                 /* empty */
        "full avg10=0.00 avg60=0.00 avg300=0.00 total=9\n", /* no "some" line first */
        "some avg10=0.00 avg60=0.00 avg300=0.00\n",         /* no total */
        "some avg10=0.00 avg60=0.00 avg300=0.00 total=x\n", /* no number */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        write_file(fs->pressure, bad[i]);
        set_runnable(fs, 3);
        sx_yield_init_at(&y, SX_YIELD_AUTO, 2, fs->loadavg, fs->pressure);
        y.online = 2;
        assert_int_equal(y.pressure_fd, -1);
        assert_true(sx_yield_verdict(&y, t + 10 * MS));
        sx_yield_fini(&y);
    }

    /* A file that reads as PSI at init and stops (or runs backwards)
     * leaves the verdict to the runnable count too. */
    init_2cpu(&y, fs, 5000, &t);
    set_runnable(fs, 3);
    write_file(fs->pressure, "garbage\n");
    assert_true(sx_yield_verdict(&y, t + 10 * MS));
    set_stall(fs, 100);
    assert_true(sx_yield_verdict(&y, t + 20 * MS));
    set_stall(fs, 100); /* no stall since: the count alone no longer decides */
    assert_false(sx_yield_verdict(&y, t + 30 * MS));
    sx_yield_fini(&y);
}

/* More callers than the cpuset's CPUs is oversubscription whatever the
 * machine shows; a caller's mark comes from a coarse clock, which may be
 * a tick ahead of the verdict's, and still counts. */
static void test_callers_outnumber_cpus(void **state)
{
    const files_t *fs = *state;
    sx_yield_t y;
    uint64_t t;

    init_2cpu(&y, fs, 0, &t);
    set_runnable(fs, 1);
    t += 10 * MS;
    atomic_store(&y.seen_ns[0], t - 5 * MS);
    atomic_store(&y.seen_ns[1], t + 4 * MS);
    assert_false(sx_yield_verdict(&y, t)); /* two callers, two CPUs */
    atomic_store(&y.seen_ns[2], t);
    assert_true(sx_yield_verdict(&y, t));
    /* Marks older than SX_YIELD_CALLER_NS no longer count. */
    assert_false(sx_yield_verdict(&y, t + SX_YIELD_CALLER_NS + 5 * MS));
    sx_yield_fini(&y);
}

/* Verdicts count the runnable tasks beyond the launcher's local size,
 * SX_YIELD_FOREIGN or more, in a row; a verdict below resets the count,
 * and without a local size nothing is counted. */
static void test_foreign_tasks_counted_in_a_row(void **state)
{
    const files_t *fs = *state;
    sx_yield_t y;
    uint64_t t;

    init_2cpu(&y, fs, 0, &t);
    y.local_tasks = 4;
    set_runnable(fs, 4 + SX_YIELD_FOREIGN);
    (void)sx_yield_verdict(&y, t += 10 * MS);
    (void)sx_yield_verdict(&y, t += 10 * MS);
    assert_int_equal(atomic_load(&y.foreign), 2);
    set_runnable(fs, 4 + SX_YIELD_FOREIGN - 1); /* the job's own and one more */
    (void)sx_yield_verdict(&y, t += 10 * MS);
    assert_int_equal(atomic_load(&y.foreign), 0);
    y.local_tasks = 0;
    set_runnable(fs, 40);
    (void)sx_yield_verdict(&y, t += 10 * MS);
    assert_int_equal(atomic_load(&y.foreign), 0);
    sx_yield_fini(&y);
}

/* What an unbound caller that yields to its runtime (caller_yields) does
 * at an empty call while the machine is oversubscribed: SX_YIELD_SPIN
 * (return 0: the runtime's sched_yield gives the core up) for a one-shard
 * engine whose launcher gave a local size, until two verdicts in a row see
 * foreign tasks; SX_YIELD_WAIT_ANY otherwise. Runs on a thread of its own,
 * unbound, so that the per-thread state starts afresh. */
typedef struct after_run {
    const files_t *fs;
    sx_yield_action_t quiet, foreign, no_size, two_shards;
    bool bound;   /* the thread turned out to be bound to one CPU */
    bool written; /* every loadavg file was written */
} after_run_t;

static sx_yield_action_t after_verdict(sx_yield_t *y)
{
    /* The next empty call makes a verdict: the last is SX_YIELD_CHECK_NS old. */
    atomic_store(&y->checked_ns, sx_time_ns() - 2 * SX_YIELD_CHECK_NS);
    return sx_yield_after(y, 0, false);
}

static void *after_thread(void *arg)
{
    after_run_t *r = arg;
    sx_yield_t y;
    cpu_set_t set;

    r->bound = sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) == 1;
    r->written = runnable_quiet(r->fs, 4);
    sx_yield_init_at(&y, SX_YIELD_AUTO, 2, r->fs->loadavg, NULL);
    y.online = 2;
    y.one_shard = true;
    y.local_tasks = 4;
    atomic_store(&y.caller_yields, true);
    r->quiet = after_verdict(&y); /* 4 runnable on 2 CPUs: the job's own */
    r->written = runnable_quiet(r->fs, 4 + SX_YIELD_FOREIGN) && r->written;
    (void)after_verdict(&y); /* one verdict: not yet */
    r->foreign = after_verdict(&y);
    r->written = runnable_quiet(r->fs, 4) && r->written;
    y.local_tasks = 0;
    atomic_store(&y.foreign, 0);
    r->no_size = after_verdict(&y);
    y.local_tasks = 4;
    y.one_shard = false;
    r->two_shards = after_verdict(&y);
    sx_yield_fini(&y);
    return NULL;
}

static void test_single_shard_caller_lets_its_runtime_yield(void **state)
{
    after_run_t r = {.fs = *state};
    pthread_t t;

    assert_int_equal(pthread_create(&t, NULL, after_thread, &r), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_true(r.written);
    if (r.bound) {
        print_message("    skipped: this runner is bound to one CPU\n");
        return;
    }
    assert_int_equal(r.quiet, SX_YIELD_SPIN);
    assert_int_equal(r.foreign, SX_YIELD_WAIT_ANY);
    assert_int_equal(r.no_size, SX_YIELD_WAIT_ANY);
    assert_int_equal(r.two_shards, SX_YIELD_WAIT_ANY);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_runnable_counts_only_under_pressure, setup, teardown),
        cmocka_unit_test_setup_teardown(test_without_pressure_runnable_decides, setup, teardown),
        cmocka_unit_test_setup_teardown(test_callers_outnumber_cpus, setup, teardown),
        cmocka_unit_test_setup_teardown(test_foreign_tasks_counted_in_a_row, setup, teardown),
        cmocka_unit_test_setup_teardown(test_single_shard_caller_lets_its_runtime_yield, setup,
                                        teardown),
    };
    sx_test_filter_from_env();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
