/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * SX_TEST_FILTER=pattern (a cmocka glob, e.g. 'test_refusal_flood' or
 * 'test_listener_bounds*') runs only the matching tests of a binary, to
 * repeat one under load. Include after <cmocka.h>; call before
 * cmocka_run_group_tests. The variable is then taken out of the
 * environment: the engines this process and its children make would
 * otherwise warn about an SX_ variable they do not know.
 */
#ifndef SX_TESTS_TEST_FILTER_H
#define SX_TESTS_TEST_FILTER_H

#include <stdlib.h>
#include <string.h>

static inline void sx_test_filter_from_env(void)
{
    const char *filter = getenv("SX_TEST_FILTER");
    if (filter == NULL)
        return;
    /* cmocka keeps the pointer: a copy that outlives unsetenv. */
    char *copy = strdup(filter);
    if (copy == NULL)
        return;
    cmocka_set_test_filter(copy);
    unsetenv("SX_TEST_FILTER");
}

#endif
