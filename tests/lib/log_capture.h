/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Capturing shardx's log lines in tests: capture_start() sends them to a
 * fresh temporary file, capture_stop() restores standard error and returns
 * what was logged (the caller frees it), capture_abandon() restores it in a
 * teardown after a failure; dump_text() is what sx_dump()
 * writes, the same way. Include after cmocka.h.
 */
#ifndef SX_TESTS_LOG_CAPTURE_H
#define SX_TESTS_LOG_CAPTURE_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <shardx.h>

#include "common/log.h"

static char log_capture_path[64];
static bool log_capture_active;

static inline void capture_start(void)
{
    snprintf(log_capture_path, sizeof(log_capture_path), "/tmp/sx_test_log_XXXXXX");
    int fd = mkstemp(log_capture_path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(sx_log_set_file(log_capture_path), 0);
    log_capture_active = true;
}

/* What has been logged so far (the caller frees it). */
static inline char *capture_read(void)
{
    FILE *f = fopen(log_capture_path, "r");
    assert_non_null(f);
    size_t cap = 1u << 20;
    char *text = calloc(1, cap);
    assert_non_null(text);
    text[fread(text, 1, cap - 1, f)] = '\0';
    fclose(f);
    return text;
}

/* Whether what has been logged so far says @p needle. */
static inline bool capture_has(const char *needle)
{
    char *text = capture_read();
    bool found = strstr(text, needle) != NULL;
    free(text);
    return found;
}

static inline char *capture_stop(void)
{
    assert_int_equal(sx_log_set_file(NULL), 0);
    log_capture_active = false;
    char *text = capture_read();
    unlink(log_capture_path);
    return text;
}

/* For a test's teardown: ends a capture that a failed assertion left
 * running, so that the tests after it log to standard error again. */
static inline int capture_abandon(void)
{
    if (!log_capture_active)
        return 0;
    log_capture_active = false;
    unlink(log_capture_path);
    return sx_log_set_file(NULL) == 0 ? 0 : -1;
}

static inline void assert_contains(const char *text, const char *needle)
{
    if (strstr(text, needle) == NULL)
        fail_msg("expected \"%s\" in the log:\n%s", needle, text);
}

/* What sx_dump() writes for @p engine, as a string the caller frees. Not
 * inlined: GCC's -Wdangling-pointer then takes the text for the address of
 * the local that open_memstream fills. */
static __attribute__((unused, noinline)) char *dump_text(sx_engine_h engine)
{
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    assert_non_null(m);
    assert_int_equal(sx_dump(engine, m), SX_OK);
    fclose(m);
    return text;
}

#endif /* SX_TESTS_LOG_CAPTURE_H */
