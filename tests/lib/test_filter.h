/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * SX_TEST_FILTER=pattern (a cmocka glob, e.g. 'test_refusal_flood' or
 * 'test_listener_bounds*') runs only the matching tests of a binary, to
 * repeat one under load. Include after <cmocka.h>; call before
 * cmocka_run_group_tests.
 */
#ifndef SX_TESTS_TEST_FILTER_H
#define SX_TESTS_TEST_FILTER_H

#include <stdlib.h>

static inline void sx_test_filter_from_env(void)
{
    const char *filter = getenv("SX_TEST_FILTER");
    if (filter != NULL)
        cmocka_set_test_filter(filter);
}

#endif
