/*
 * Capturing shardx's log lines in tests: capture_start() sends them to a
 * fresh temporary file, capture_stop() restores standard error and returns
 * what was logged (the caller frees it). Include after cmocka.h.
 */
#ifndef SX_TESTS_LOG_CAPTURE_H
#define SX_TESTS_LOG_CAPTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"

static char log_capture_path[64];

static inline void capture_start(void)
{
    snprintf(log_capture_path, sizeof(log_capture_path), "/tmp/sx_test_log_XXXXXX");
    int fd = mkstemp(log_capture_path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(sx_log_set_file(log_capture_path), 0);
}

static inline char *capture_stop(void)
{
    assert_int_equal(sx_log_set_file(NULL), 0);
    FILE *f = fopen(log_capture_path, "r");
    assert_non_null(f);
    char *text = calloc(1, 65536);
    assert_non_null(text);
    text[fread(text, 1, 65535, f)] = '\0';
    fclose(f);
    unlink(log_capture_path);
    return text;
}

static inline void assert_contains(const char *text, const char *needle)
{
    if (strstr(text, needle) == NULL)
        fail_msg("expected \"%s\" in the log:\n%s", needle, text);
}

#endif /* SX_TESTS_LOG_CAPTURE_H */
