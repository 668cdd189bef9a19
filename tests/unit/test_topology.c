/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Topology: the shards follow the process's cpuset (one per core), SX_SHARDS
 * overrides the count and spreads shards round-robin over the cores, and
 * sx_engine_topology() agrees with the shards.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <hwloc.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include <shardx.h>

#include "common/log.h"
#include "test_filter.h"
#include "log_capture.h"

#define MAX_TASKS 64

/* ---------------------------------------------------------------- helpers */

static sx_engine_h create_engine(const char *shards)
{
    sx_config_kv_t kv[] = {{"LOG_LEVEL", "warn"}, {"SHARDS", shards}};
    sx_engine_params_t params = {
        .field_mask = SX_ENGINE_PARAM_CONFIG, .config = kv, .config_count = shards ? 2 : 1};
    sx_engine_h e = NULL;
    assert_int_equal(sx_engine_create(&params, &e), SX_OK);
    return e;
}

static unsigned shard_count(sx_engine_h e)
{
    unsigned n = 0;
    assert_int_equal(sx_engine_shard_count(e, &n), SX_OK);
    return n;
}

static sx_topology_info_t topology(sx_engine_h e)
{
    sx_topology_info_t t;
    assert_int_equal(sx_engine_topology(e, &t), SX_OK);
    return t;
}

static sx_shard_info_t shard(sx_engine_h e, unsigned i)
{
    sx_shard_info_t info;
    assert_int_equal(sx_engine_shard_info(e, i, &info), SX_OK);
    assert_int_equal(info.index, i);
    return info;
}

/*
 * The engine reads the binding of the whole process, which hwloc computes
 * as the union over all its threads. Threads other than the caller may
 * exist (a sanitizer runtime's, liburcu's), so restricting "the process"
 * means restricting every task in /proc/self/task, and restoring each
 * afterwards.
 */
typedef struct saved_affinity {
    int n;
    pid_t tid[MAX_TASKS];
    cpu_set_t mask[MAX_TASKS];
} saved_affinity_t;

static void restrict_process_to(int cpu, saved_affinity_t *sv)
{
    cpu_set_t one;
    DIR *d = opendir("/proc/self/task");
    struct dirent *ent;

    assert_non_null(d);
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    sv->n = 0;
    while ((ent = readdir(d)) != NULL) {
        pid_t tid = (pid_t)atoi(ent->d_name);
        if (tid <= 0)
            continue;
        assert_true(sv->n < MAX_TASKS);
        if (sched_getaffinity(tid, sizeof(cpu_set_t), &sv->mask[sv->n]) != 0) {
            assert_int_equal(errno, ESRCH); /* a helper thread that just exited */
            continue;
        }
        if (sched_setaffinity(tid, sizeof(one), &one) != 0) {
            assert_int_equal(errno, ESRCH);
            continue;
        }
        sv->tid[sv->n++] = tid;
    }
    closedir(d);
}

static void restore_process(const saved_affinity_t *sv)
{
    for (int i = 0; i < sv->n; i++) {
        if (sched_setaffinity(sv->tid[i], sizeof(cpu_set_t), &sv->mask[i]) != 0)
            assert_int_equal(errno, ESRCH);
    }
}

static hwloc_bitmap_t shard_set(const sx_shard_info_t *info)
{
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    assert_non_null(set);
    assert_int_equal(hwloc_bitmap_list_sscanf(set, info->cpuset), 0);
    return set;
}

/* ---------------------------------------------------------------- tests */

/* What check_single_cpu restricted, for teardown to put back should an
 * assertion end the test while the process runs on one CPU. */
static saved_affinity_t saved;

static void check_single_cpu(int cpu)
{
    cpu_set_t now;
    char expected[16];

    snprintf(expected, sizeof(expected), "%d", cpu);
    restrict_process_to(cpu, &saved);

    sx_engine_h e = create_engine(NULL);
    sx_topology_info_t t = topology(e);
    assert_int_equal(t.cores, 1);
    assert_int_equal(t.shards, 1);
    assert_int_equal(shard_count(e), 1);
    sx_shard_info_t info = shard(e, 0);
    assert_string_equal(info.cpuset, expected);
    assert_int_equal(info.first_pu, cpu);
    unsigned home = 99;
    assert_int_equal(sx_thread_home_shard(e, &home), SX_OK);
    assert_int_equal(home, 0);
    assert_true(sx_progress(e) >= 0);
    sx_engine_destroy(e);

    /* More shards than the one core: all of them share it. */
    capture_start();
    e = create_engine("3");
    char *log = capture_stop();
    assert_int_equal(shard_count(e), 3);
    for (unsigned i = 0; i < 3; i++)
        assert_string_equal(shard(e, i).cpuset, expected);
    sx_engine_destroy(e);
    assert_non_null(strstr(log, "SX_SHARDS=3"));
    free(log);

    /* The library left the binding alone. */
    assert_int_equal(sched_getaffinity(0, sizeof(now), &now), 0);
    assert_int_equal(CPU_COUNT(&now), 1);
    assert_true(CPU_ISSET(cpu, &now));
    restore_process(&saved);
    saved.n = 0;
}

static void test_single_cpu_cpuset(void **state)
{
    (void)state;
    cpu_set_t before, after;
    int first = -1, last = -1;

    assert_int_equal(sched_getaffinity(0, sizeof(before), &before), 0);
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (CPU_ISSET(cpu, &before)) {
            if (first < 0)
                first = cpu;
            last = cpu;
        }
    }
    assert_true(first >= 0);
    check_single_cpu(first);
    if (last != first)
        check_single_cpu(last);
    assert_int_equal(sched_getaffinity(0, sizeof(after), &after), 0);
    assert_true(CPU_EQUAL(&before, &after));
}

static void test_more_shards_than_cores(void **state)
{
    (void)state;
    char shards[16], warning[64], cores_text[64];

    sx_engine_h base = create_engine(NULL);
    unsigned ncores = topology(base).cores;
    unsigned nshards = 2 * ncores + 1;
    assert_int_equal(shard_count(base), ncores);

    snprintf(shards, sizeof(shards), "%u", nshards);
    assert_int_equal(setenv("SX_SHARDS", shards, 1), 0);
    capture_start();
    sx_engine_h e = create_engine(NULL); /* SX_SHARDS from the environment */
    char *log = capture_stop();
    unsetenv("SX_SHARDS");

    assert_int_equal(shard_count(e), nshards);
    sx_topology_info_t t = topology(e);
    assert_int_equal(t.shards, nshards);
    assert_int_equal(t.cores, ncores);
    for (unsigned i = 0; i < nshards; i++) {
        sx_shard_info_t got = shard(e, i);
        sx_shard_info_t want = shard(base, i % ncores); /* round-robin */
        assert_int_equal(got.core, want.core);
        assert_int_equal(got.first_pu, want.first_pu);
        assert_int_equal(got.numa_node, want.numa_node);
        assert_string_equal(got.cpuset, want.cpuset);
    }
    snprintf(warning, sizeof(warning), "SX_SHARDS=%u", nshards);
    snprintf(cores_text, sizeof(cores_text), "%u cores", ncores);
    if (strstr(log, warning) == NULL || strstr(log, cores_text) == NULL)
        fail_msg("no warning naming %s and %s in the log:\n%s", warning, cores_text, log);
    free(log);
    sx_engine_destroy(e);
    sx_engine_destroy(base);
}

/* The warning starts exactly where shards outnumber cores. */
static void test_warning_threshold(void **state)
{
    (void)state;
    char fit[16], over[16];

    sx_engine_h base = create_engine(NULL);
    unsigned ncores = topology(base).cores;
    sx_engine_destroy(base);
    snprintf(fit, sizeof(fit), "%u", ncores);
    snprintf(over, sizeof(over), "%u", ncores + 1);

    capture_start();
    sx_engine_destroy(create_engine(fit));
    sx_engine_destroy(create_engine("1"));
    sx_engine_destroy(create_engine("0"));
    char *log = capture_stop();
    assert_null(strstr(log, "SX_SHARDS"));
    free(log);

    capture_start();
    sx_engine_h e = create_engine(over);
    log = capture_stop();
    assert_int_equal(shard_count(e), ncores + 1);
    sx_engine_destroy(e);
    char warning[32];
    snprintf(warning, sizeof(warning), "SX_SHARDS=%u", ncores + 1);
    assert_non_null(strstr(log, warning));
    free(log);
}

static void test_one_shard_on_many_cores(void **state)
{
    (void)state;
    sx_engine_h base = create_engine(NULL);
    unsigned ncores = topology(base).cores;
    sx_engine_h e = create_engine("1");

    if (ncores < 2)
        print_message("only %u core: SX_SHARDS=1 is the default here\n", ncores);
    assert_int_equal(shard_count(e), 1);
    sx_topology_info_t t = topology(e);
    assert_int_equal(t.shards, 1);
    assert_int_equal(t.cores, ncores); /* cores are still counted */
    assert_string_equal(shard(e, 0).cpuset, shard(base, 0).cpuset);
    assert_int_equal(shard(e, 0).core, shard(base, 0).core);
    assert_int_equal(sx_engine_shard_info(e, 1, &(sx_shard_info_t){0}), SX_ERR_NOT_FOUND);
    for (unsigned i = 0; i < 100; i++) {
        unsigned home = 99;
        assert_int_equal(sx_thread_home_shard(e, &home), SX_OK);
        assert_int_equal(home, 0);
        assert_true(sx_progress(e) >= 0);
    }
    sx_engine_destroy(e);
    sx_engine_destroy(base);
}

static void test_topology_consistent(void **state)
{
    (void)state;
    cpu_set_t mask;
    sx_engine_h e = create_engine(NULL);
    sx_topology_info_t t = topology(e);
    hwloc_bitmap_t all = hwloc_bitmap_alloc();
    hwloc_bitmap_t process = hwloc_bitmap_alloc();

    assert_int_equal(sched_getaffinity(0, sizeof(mask), &mask), 0);
    assert_true(t.cores >= 1);
    assert_true(t.cores <= (unsigned)CPU_COUNT(&mask));
    assert_int_equal(t.shards, t.cores);
    assert_true(t.cores_are_pus == 0 || t.cores_are_pus == 1);
    for (unsigned i = 0; i < t.shards; i++) {
        sx_shard_info_t info = shard(e, i);
        hwloc_bitmap_t set = shard_set(&info);
        assert_false(hwloc_bitmap_iszero(set));
        assert_false(hwloc_bitmap_intersects(set, all)); /* one shard per core */
        hwloc_bitmap_or(all, all, set);
        assert_int_equal(hwloc_bitmap_first(set), info.first_pu);
        if (t.cores_are_pus)
            assert_int_equal(hwloc_bitmap_weight(set), 1);
        if (t.numa_nodes == 0)
            assert_int_equal(info.numa_node, -1);
        else
            assert_true(info.numa_node >= -1 && info.numa_node < (int)t.numa_nodes);
        for (unsigned j = 0; j < i; j++)
            assert_int_not_equal(shard(e, j).core, info.core);
        hwloc_bitmap_free(set);
    }
    /* Together the shards cover exactly the CPUs the process may use. */
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (CPU_ISSET(cpu, &mask))
            hwloc_bitmap_set(process, (unsigned)cpu);
    }
    assert_true(hwloc_bitmap_isequal(all, process));
    hwloc_bitmap_free(all);
    hwloc_bitmap_free(process);
    sx_engine_destroy(e);
}

static int setup(void **state)
{
    (void)state;
    unsetenv("SX_SHARDS");
    unsetenv("SX_THREAD_MODE");
    unsetenv("SX_LOG_FILE");
    return 0;
}

/* After each test, passed or not: a test that failed half-way leaves
 * neither its one-CPU binding, nor SX_SHARDS, nor a log capture to the
 * tests after it. */
static int teardown(void **state)
{
    (void)state;
    restore_process(&saved);
    saved.n = 0;
    unsetenv("SX_SHARDS");
    return capture_abandon();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_single_cpu_cpuset, teardown),
        cmocka_unit_test_teardown(test_more_shards_than_cores, teardown),
        cmocka_unit_test_teardown(test_warning_threshold, teardown),
        cmocka_unit_test_teardown(test_one_shard_on_many_cores, teardown),
        cmocka_unit_test_teardown(test_topology_consistent, teardown),
    };
    sx_test_filter_from_env();
    return cmocka_run_group_tests_name("topology", tests, setup, NULL);
}
