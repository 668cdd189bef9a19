/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Status codes: SX_STATUS_TABLE generates the enum, sx_strerror() and
 * sx_status_name(); these tests check that the three agree and that the
 * promises of shardx.h (SX_OK is 0, SX_INPROGRESS is 1, errors are
 * negative, unknown codes have a fixed answer) hold.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <limits.h>
#include <stdbool.h>
#include <string.h>

#include <shardx.h>

#include "test_filter.h"

typedef struct status_row {
    const char *name;
    int value;
    const char *message;
    int enum_value; /* the enumerator itself, to compare with the table's number */
} status_row_t;

#define STATUS_ROW_(name_, value_, message_) \
    {.name = #name_, .value = (value_), .message = (message_), .enum_value = (int)(name_)},
static const status_row_t rows[] = {SX_STATUS_TABLE(STATUS_ROW_)};
#undef STATUS_ROW_

#define NROWS (sizeof(rows) / sizeof(rows[0]))

static bool in_table(int value)
{
    for (size_t i = 0; i < NROWS; i++) {
        if (rows[i].value == value)
            return true;
    }
    return false;
}

static void test_table_not_empty(void **state)
{
    (void)state;
    /* SX_OK, SX_INPROGRESS and at least one error. */
    assert_true(NROWS >= 3);
}

static void test_values_distinct(void **state)
{
    (void)state;
    for (size_t i = 0; i < NROWS; i++) {
        assert_int_equal(rows[i].enum_value, rows[i].value);
        for (size_t j = i + 1; j < NROWS; j++) {
            if (rows[i].value == rows[j].value)
                fail_msg("%s and %s share the value %d", rows[i].name, rows[j].name, rows[i].value);
        }
    }
}

static void test_names_distinct(void **state)
{
    (void)state;
    for (size_t i = 0; i < NROWS; i++) {
        for (size_t j = i + 1; j < NROWS; j++)
            assert_string_not_equal(rows[i].name, rows[j].name);
    }
}

static void test_ok_and_inprogress(void **state)
{
    (void)state;
    assert_int_equal(SX_OK, 0);
    assert_int_equal(SX_INPROGRESS, 1);
    assert_string_equal(sx_status_name(0), "SX_OK");
    assert_string_equal(sx_status_name(1), "SX_INPROGRESS");
    assert_string_equal(sx_strerror(SX_OK), "success");
}

static void test_errors_negative(void **state)
{
    (void)state;
    for (size_t i = 0; i < NROWS; i++) {
        bool is_error = strncmp(rows[i].name, "SX_ERR_", 7) == 0;
        if (rows[i].value == SX_OK || rows[i].value == SX_INPROGRESS) {
            assert_false(is_error);
            continue;
        }
        /* Anything that is not SX_OK or SX_INPROGRESS is an error: its
         * name says so and its value is negative. */
        if (!is_error)
            fail_msg("%s is neither SX_OK, SX_INPROGRESS nor SX_ERR_*", rows[i].name);
        if (rows[i].value >= 0)
            fail_msg("%s has the non-negative value %d", rows[i].name, rows[i].value);
    }
}

static void test_strerror_matches_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < NROWS; i++) {
        const char *msg = sx_strerror(rows[i].value);
        assert_non_null(msg);
        assert_true(msg[0] != '\0');
        assert_string_equal(msg, rows[i].message);
        assert_string_not_equal(msg, "unknown status code");
    }
}

static void test_messages_distinct(void **state)
{
    (void)state;
    for (size_t i = 0; i < NROWS; i++) {
        for (size_t j = i + 1; j < NROWS; j++)
            assert_string_not_equal(sx_strerror(rows[i].value), sx_strerror(rows[j].value));
    }
}

static void test_status_name_matches_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < NROWS; i++) {
        const char *name = sx_status_name(rows[i].value);
        assert_non_null(name);
        assert_string_equal(name, rows[i].name);
    }
}

static void test_unknown_codes(void **state)
{
    (void)state;
    static const int extremes[] = {INT_MIN, INT_MIN + 1, -1000, 1000, INT_MAX};
    int checked = 0;

    /* Every value around the table that the table does not hold. */
    for (int v = -64; v <= 64; v++) {
        if (in_table(v))
            continue;
        assert_string_equal(sx_strerror(v), "unknown status code");
        assert_string_equal(sx_status_name(v), "unknown");
        checked++;
    }
    assert_true(checked > 0);
    for (size_t i = 0; i < sizeof(extremes) / sizeof(extremes[0]); i++) {
        assert_false(in_table(extremes[i]));
        assert_string_equal(sx_strerror(extremes[i]), "unknown status code");
        assert_string_equal(sx_status_name(extremes[i]), "unknown");
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_not_empty),   cmocka_unit_test(test_values_distinct),
        cmocka_unit_test(test_names_distinct),    cmocka_unit_test(test_ok_and_inprogress),
        cmocka_unit_test(test_errors_negative),   cmocka_unit_test(test_strerror_matches_table),
        cmocka_unit_test(test_messages_distinct), cmocka_unit_test(test_status_name_matches_table),
        cmocka_unit_test(test_unknown_codes),
    };
    sx_test_filter_from_env();
    return cmocka_run_group_tests_name("status", tests, NULL, NULL);
}
