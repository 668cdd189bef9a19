/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Configuration: the parsers of every parameter type in the table,
 * precedence (engine parameters > SX_* environment > default), the
 * messages for invalid values and unknown names, and the public
 * sx_param_* description of the table.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <shardx.h>

#include "common/config.h"
#include "test_filter.h"
#include "common/log.h"
#include "log_capture.h"

extern char **environ;

/* ---------------------------------------------------------------- helpers */

static size_t param_index(const char *name)
{
    int i = sx_config_find(name);
    assert_true(i >= 0);
    return (size_t)i;
}

static sx_param_info_t param(const char *name)
{
    sx_param_info_t info;
    assert_int_equal(sx_param_info(param_index(name), &info), SX_OK);
    return info;
}

/* Removes every SX_* variable from the environment. */
static void clear_sx_environment(void)
{
    for (;;) {
        char name[128] = "";
        for (char **e = environ; *e != NULL; e++) {
            if (strncmp(*e, "SX_", 3) == 0) {
                size_t len = strcspn(*e, "=");
                assert_true(len < sizeof(name));
                memcpy(name, *e, len);
                name[len] = '\0';
                break;
            }
        }
        if (name[0] == '\0')
            return;
        assert_int_equal(unsetenv(name), 0);
    }
}

static int parse(const char *name, const char *text, sx_config_t *cfg)
{
    return sx_config_parse_one(param_index(name), text, cfg);
}

/* ---------------------------------------------------------------- tests */

/*
 * sx_config_check_environment() scans the environment once per process, at
 * the first engine creation, so this test runs first: the unknown variables
 * are in place before anything in this binary creates an engine.
 */
static void test_unknown_environment_variables_warned(void **state)
{
    (void)state;
    const sx_config_kv_t kv[] = {{"LOG_LEVEL", "warn"}};
    const sx_engine_params_t params = {
        .field_mask = SX_ENGINE_PARAM_CONFIG, .config = kv, .config_count = 1};
    sx_engine_h e;

    assert_int_equal(setenv("SX_SHRADS", "4", 1), 0);
    assert_int_equal(setenv("SX_QQZZXXWWVVYY", "1", 1), 0);
    capture_start();
    assert_int_equal(sx_engine_create(&params, &e), SX_OK);
    sx_engine_destroy(e);
    char *log = capture_stop();
    assert_contains(log, "SX_SHRADS");
    assert_contains(log, "did you mean SX_SHARDS?");
    const char *line = strstr(log, "SX_QQZZXXWWVVYY");
    assert_non_null(line);
    const char *eol = strchr(line, '\n');
    const char *dym = strstr(line, "did you mean");
    assert_true(dym == NULL || (eol != NULL && dym > eol));
    free(log);

    size_t unknown = sx_config_check_environment();
    assert_true(unknown >= 2);
    /* Once per process: a later call neither rescans nor warns again. */
    assert_int_equal(setenv("SX_SHARDZ", "4", 1), 0);
    capture_start();
    assert_int_equal(sx_config_check_environment(), unknown);
    log = capture_stop();
    assert_null(strstr(log, "SX_SHARDZ"));
    free(log);
    unsetenv("SX_SHRADS");
    unsetenv("SX_QQZZXXWWVVYY");
    unsetenv("SX_SHARDZ");
}

static void test_param_info_describes_table(void **state)
{
    (void)state;
    static const char *const type_names[] = {
        [SX_PARAM_UINT] = "uint", [SX_PARAM_SIZE] = "size", [SX_PARAM_DOUBLE] = "double",
        [SX_PARAM_BOOL] = "bool", [SX_PARAM_ENUM] = "enum", [SX_PARAM_STRING] = "string"};
    size_t n = sx_param_count();

    assert_true(n >= 1);
    for (size_t i = 0; i < n; i++) {
        sx_param_info_t info;
        assert_int_equal(sx_param_info(i, &info), SX_OK);
        assert_non_null(info.name);
        assert_true(info.name[0] != '\0');
        assert_int_not_equal(strncmp(info.name, "SX_", 3), 0);
        assert_int_equal(sx_config_find(info.name), (int)i);
        assert_true((unsigned)info.type <= SX_PARAM_STRING);
        assert_string_equal(info.type_name, type_names[info.type]);
        assert_non_null(info.default_value);
        assert_non_null(info.allowed);
        assert_true(info.allowed[0] != '\0');
        assert_non_null(info.description);
        assert_true(info.description[0] != '\0');
        for (size_t j = 0; j < i; j++) {
            sx_param_info_t other;
            assert_int_equal(sx_param_info(j, &other), SX_OK);
            assert_string_not_equal(info.name, other.name);
        }
    }
    /* Past the end: SX_ERR_NOT_FOUND, and the output is not written. */
    sx_param_info_t info, untouched;
    memset(&info, 0xa5, sizeof(info));
    memcpy(&untouched, &info, sizeof(info));
    assert_int_equal(sx_param_info(n, &info), SX_ERR_NOT_FOUND);
    assert_int_equal(sx_param_info(SIZE_MAX, &info), SX_ERR_NOT_FOUND);
    assert_memory_equal(&info, &untouched, sizeof(info));
    assert_int_equal(sx_param_info(0, NULL), SX_ERR_INVALID_PARAM);
}

static void test_find_with_and_without_prefix(void **state)
{
    (void)state;
    for (size_t i = 0; i < sx_param_count(); i++) {
        sx_param_info_t info;
        char prefixed[128];
        assert_int_equal(sx_param_info(i, &info), SX_OK);
        snprintf(prefixed, sizeof(prefixed), "SX_%s", info.name);
        assert_int_equal(sx_config_find(info.name), (int)i);
        assert_int_equal(sx_config_find(prefixed), (int)i);
    }
    assert_int_equal(sx_config_find(NULL), -1);
    assert_int_equal(sx_config_find(""), -1);
    assert_int_equal(sx_config_find("SX_"), -1);
    assert_int_equal(sx_config_find("SX_SX_SHARDS"), -1);
    assert_int_equal(sx_config_find("SHARDS_"), -1);
    assert_int_equal(sx_config_find("NO_SUCH_PARAMETER"), -1);
}

static void test_closest(void **state)
{
    (void)state;
    static const char *const typos[] = {"SX_SHARD",      "SHRADS",    "shards",       "THRAED_MODE",
                                        "SX_THREADMODE", "LOG_LEVLE", "SX_HOTEL_ROOM"};
    static const char *const meant[] = {"SHARDS",      "SHARDS",    "SHARDS",     "THREAD_MODE",
                                        "THREAD_MODE", "LOG_LEVEL", "HOTEL_ROOMS"};
    static const char *const nonsense[] = {"", "SX_", "X", "COMPLETELY_UNRELATED_NAME",
                                           "SX_ZZZZZZZZZZZZ"};
    char longname[200];

    for (size_t i = 0; i < sizeof(typos) / sizeof(typos[0]); i++) {
        const char *got = sx_config_closest(typos[i]);
        if (got == NULL || strcmp(got, meant[i]) != 0)
            fail_msg("'%s' suggests %s, not %s", typos[i], got ? got : "nothing", meant[i]);
    }
    for (size_t i = 0; i < sizeof(nonsense) / sizeof(nonsense[0]); i++)
        assert_null(sx_config_closest(nonsense[i]));
    assert_null(sx_config_closest(NULL));
    memset(longname, 'Q', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    assert_null(sx_config_closest(longname));
    /* Every name is closest to itself. */
    for (size_t i = 0; i < sx_param_count(); i++) {
        sx_param_info_t info;
        assert_int_equal(sx_param_info(i, &info), SX_OK);
        assert_string_equal(sx_config_closest(info.name), info.name);
    }
}

static void test_defaults_parse(void **state)
{
    (void)state;
    sx_config_t loaded, parsed;

    memset(&parsed, 0, sizeof(parsed));
    for (size_t i = 0; i < sx_param_count(); i++) {
        sx_param_info_t info;
        assert_int_equal(sx_param_info(i, &info), SX_OK);
        if (sx_config_parse_one(i, info.default_value, &parsed) != SX_OK)
            fail_msg("default '%s' of %s does not parse", info.default_value, info.name);
    }
    clear_sx_environment();
    assert_int_equal(sx_config_load(&loaded, NULL, 0), SX_OK);
    assert_int_equal(loaded.shards, parsed.shards);
    assert_int_equal(loaded.thread_mode, parsed.thread_mode);
    assert_int_equal(loaded.log_level, parsed.log_level);
    assert_string_equal(loaded.log_file, parsed.log_file);
    assert_int_equal(loaded.hotel_rooms, parsed.hotel_rooms);
    assert_int_equal(loaded.timer_tick_us, parsed.timer_tick_us);
    /* The documented defaults. */
    assert_int_equal(loaded.shards, 0);
    assert_int_equal(loaded.thread_mode, SX_THREAD_MODE_SHARDED);
    assert_int_equal(loaded.log_level, SX_LOG_WARN);
    sx_config_release(&loaded);
    sx_config_release(&parsed);
}

static void test_uint_values(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        uint64_t value;
    } good[] = {{"0", 0}, {"7", 7}, {"1024", 1024}, {"0x10", 16}, {"0X1f", 31}, {"0x400", 1024}};
    static const char *const bad[] = {
        "1025", "0x401", "-1", "-0", "", "   ", "7x", "12abc", "0x", "0xg", "1.5", "1e3", "7 ",
        "seven", "18446744073709551615", "18446744073709551616",
        /* 2^64 + 5: a parser that wrapped would accept it as 5. */
        "18446744073709551621", "99999999999999999999999", "0x10000000000000005"};
    sx_config_t cfg;

    memset(&cfg, 0, sizeof(cfg));
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        cfg.shards = 999;
        if (parse("SHARDS", good[i].text, &cfg) != SX_OK)
            fail_msg("SHARDS='%s' rejected", good[i].text);
        assert_int_equal(cfg.shards, good[i].value);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cfg.shards = 999;
        if (parse("SHARDS", bad[i], &cfg) != SX_ERR_INVALID_PARAM)
            fail_msg("SHARDS='%s' accepted", bad[i]);
        assert_int_equal(cfg.shards, 999); /* a rejected value leaves the field alone */
    }
    /* Range ends of parameters with a non-zero minimum. */
    assert_int_equal(parse("HOTEL_ROOMS", "15", &cfg), SX_ERR_INVALID_PARAM);
    assert_int_equal(parse("HOTEL_ROOMS", "16", &cfg), SX_OK);
    assert_int_equal(cfg.hotel_rooms, 16);
    assert_int_equal(parse("HOTEL_ROOMS", "0x100000", &cfg), SX_OK);
    assert_int_equal(cfg.hotel_rooms, 1048576);
    assert_int_equal(parse("HOTEL_ROOMS", "1048577", &cfg), SX_ERR_INVALID_PARAM);
    assert_int_equal(parse("TIMER_TICK_US", "0", &cfg), SX_ERR_INVALID_PARAM);
    assert_int_equal(parse("TIMER_TICK_US", "1", &cfg), SX_OK);
    assert_int_equal(cfg.timer_tick_us, 1);
    assert_int_equal(parse("TIMER_TICK_US", "100000", &cfg), SX_OK);
    assert_int_equal(parse("TIMER_TICK_US", "100001", &cfg), SX_ERR_INVALID_PARAM);
    assert_int_equal(sx_config_parse_one(sx_param_count(), "1", &cfg), SX_ERR_INVALID_PARAM);
    assert_int_equal(parse("SHARDS", NULL, &cfg), SX_ERR_INVALID_PARAM);
}

/* shardx.h documents SX_PARAM_UINT as "decimal or 0x hex": a leading zero
 * does not switch to octal. */
static void test_uint_leading_zero_is_decimal(void **state)
{
    (void)state;
    sx_config_t cfg;

    memset(&cfg, 0, sizeof(cfg));
    assert_int_equal(parse("SHARDS", "010", &cfg), SX_OK);
    assert_int_equal(cfg.shards, 10);
    assert_int_equal(parse("SHARDS", "08", &cfg), SX_OK);
    assert_int_equal(cfg.shards, 8);
    assert_int_equal(parse("HOTEL_ROOMS", "0100", &cfg), SX_OK);
    assert_int_equal(cfg.hotel_rooms, 100);
}

static void test_enum_values(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        int value;
    } modes[] = {{"global", SX_THREAD_MODE_GLOBAL},
                 {"sharded", SX_THREAD_MODE_SHARDED},
                 {"GLOBAL", SX_THREAD_MODE_GLOBAL},
                 {"ShArDeD", SX_THREAD_MODE_SHARDED}};
    static const char *const bad[] = {
        "", "glob", "globall", "global ", " global", "sharded|global", "|", "0", "1"};
    sx_config_t cfg;

    memset(&cfg, 0, sizeof(cfg));
    for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
        cfg.thread_mode = -1;
        assert_int_equal(parse("THREAD_MODE", modes[i].text, &cfg), SX_OK);
        assert_int_equal(cfg.thread_mode, modes[i].value);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (parse("THREAD_MODE", bad[i], &cfg) != SX_ERR_INVALID_PARAM)
            fail_msg("THREAD_MODE='%s' accepted", bad[i]);
        assert_int_equal(cfg.thread_mode, SX_THREAD_MODE_SHARDED); /* unchanged */
    }
    /* LOG_LEVEL's words are the log levels, in order. */
    for (int level = SX_LOG_ERROR; level <= SX_LOG_TRACE; level++) {
        assert_int_equal(parse("LOG_LEVEL", sx_log_level_name((sx_log_level_t)level), &cfg), SX_OK);
        assert_int_equal(cfg.log_level, level);
    }
    assert_int_equal(parse("LOG_LEVEL", "warning", &cfg), SX_ERR_INVALID_PARAM);

    /* Every ENUM parameter accepts exactly the words it advertises, in any case. */
    for (size_t i = 0; i < sx_param_count(); i++) {
        sx_param_info_t info;
        char words[256], other[300];
        assert_int_equal(sx_param_info(i, &info), SX_OK);
        if (info.type != SX_PARAM_ENUM)
            continue;
        snprintf(words, sizeof(words), "%s", info.allowed);
        for (char *save = NULL, *w = strtok_r(words, "|", &save); w != NULL;
             w = strtok_r(NULL, "|", &save)) {
            assert_int_equal(sx_config_parse_one(i, w, &cfg), SX_OK);
            for (size_t k = 0; k <= strlen(w); k++)
                other[k] = (char)toupper((unsigned char)w[k]);
            assert_int_equal(sx_config_parse_one(i, other, &cfg), SX_OK);
            snprintf(other, sizeof(other), "%sx", w);
            assert_int_equal(sx_config_parse_one(i, other, &cfg), SX_ERR_INVALID_PARAM);
        }
        assert_int_equal(sx_config_parse_one(i, "no-such-word", &cfg), SX_ERR_INVALID_PARAM);
        /* The whole list is not one of its words (when it has several). */
        if (strchr(info.allowed, '|') != NULL)
            assert_int_equal(sx_config_parse_one(i, info.allowed, &cfg), SX_ERR_INVALID_PARAM);
    }
}

static void test_string_values(void **state)
{
    (void)state;
    sx_config_t cfg;
    char text[] = "/tmp/some file.log";

    memset(&cfg, 0, sizeof(cfg));
    assert_int_equal(parse("LOG_FILE", "", &cfg), SX_OK);
    assert_string_equal(cfg.log_file, "");
    assert_int_equal(parse("LOG_FILE", text, &cfg), SX_OK); /* replaces (and frees) "" */
    assert_string_equal(cfg.log_file, text);
    assert_ptr_not_equal(cfg.log_file, text);
    text[0] = 'X'; /* the value was copied */
    assert_string_equal(cfg.log_file, "/tmp/some file.log");
    sx_config_release(&cfg);
    assert_null(cfg.log_file);
    sx_config_release(&cfg); /* safe on a zeroed config */
    sx_config_release(NULL);
}

/*
 * Every value type, through the typed parser the table is built on; types
 * that no table entry uses yet are covered here all the same.
 */
/* sx_param_parse: the engine's parser, for runtimes with their own
 * parameter system (the Open MPI BTL checks btl_shardx_<name> with it). */
static void test_param_parse(void **state)
{
    (void)state;
    sx_param_value_t v;

    assert_int_equal(sx_param_parse(param_index("WINDOW"), "4096", &v), SX_OK);
    assert_int_equal(v.u, 4096);
    assert_int_equal(sx_param_parse(param_index("WINDOW"), "3", &v), SX_ERR_INVALID_PARAM);
    assert_int_equal(sx_param_parse(param_index("WINDOW"), "many", NULL), SX_ERR_INVALID_PARAM);
    assert_int_equal(sx_param_parse(param_index("MAX_INFLIGHT"), "4m", &v), SX_OK);
    assert_int_equal(v.u, 4u << 20);
    assert_int_equal(sx_param_parse(param_index("THREAD_MODE"), "global", &v), SX_OK);
    assert_int_equal(v.e, 1);
    assert_int_equal(sx_param_parse(param_index("THREAD_MODE"), "both", &v), SX_ERR_INVALID_PARAM);
    assert_int_equal(sx_param_parse(param_index("UDP_ACK_SOCKET"), "on", &v), SX_OK);
    assert_int_equal(v.b, 1);
    assert_int_equal(sx_param_parse(param_index("LOG_FILE"), "/any/text", NULL), SX_OK);
    assert_int_equal(sx_param_parse(param_index("WINDOW"), NULL, &v), SX_ERR_INVALID_PARAM);
    assert_int_equal(sx_param_parse(sx_param_count(), "1", &v), SX_ERR_NOT_FOUND);
    /* Every default parses, as the engine's loader requires. */
    for (size_t i = 0; i < sx_param_count(); i++) {
        sx_param_info_t info;
        assert_int_equal(sx_param_info(i, &info), SX_OK);
        assert_int_equal(sx_param_parse(i, info.default_value, NULL), SX_OK);
    }
}

static void test_bool_values(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        bool value;
    } good[] = {{"1", true},    {"0", false},     {"y", true},   {"n", false},
                {"yes", true},  {"no", false},    {"on", true},  {"off", false},
                {"true", true}, {"false", false}, {"YES", true}, {"Off", false}};
    static const char *const bad[] = {"", "2", "yess", "maybe", "tru", " yes", "yes ", NULL};

    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        bool v = !good[i].value;
        if (sx_config_parse_typed(SX_PARAM_BOOL, NULL, 0, 0, good[i].text, &v) != 0)
            fail_msg("bool '%s' rejected", good[i].text);
        assert_int_equal(v, good[i].value);
    }
    for (const char *const *t = bad; *t != NULL; t++) {
        bool v = true;
        if (sx_config_parse_typed(SX_PARAM_BOOL, NULL, 0, 0, *t, &v) == 0)
            fail_msg("bool '%s' accepted", *t);
        assert_true(v);
    }
}

static void test_size_values(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        uint64_t value;
    } good[] = {{"0", 0},          {"4096", 4096},     {"4k", 4096},
                {"4K", 4096},      {"4kb", 4096},      {"2m", 2u << 20},
                {"2MB", 2u << 20}, {"1g", 1ull << 30}, {"0x10k", 16384}};
    static const char *const bad[] = {"",
                                      "-1",
                                      "k",
                                      "1q",
                                      "1kk",
                                      "1kib",
                                      "1.5k",
                                      " 1k",
                                      "1k ",
                                      "99999999999999999999",
                                      "17179869184g",
                                      "0x",
                                      NULL};
    const double max = 1e18;

    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        uint64_t v = 12345;
        if (sx_config_parse_typed(SX_PARAM_SIZE, NULL, 0, max, good[i].text, &v) != 0)
            fail_msg("size '%s' rejected", good[i].text);
        assert_int_equal(v, good[i].value);
    }
    for (const char *const *t = bad; *t != NULL; t++) {
        uint64_t v = 12345;
        if (sx_config_parse_typed(SX_PARAM_SIZE, NULL, 0, max, *t, &v) == 0)
            fail_msg("size '%s' accepted", *t);
        assert_int_equal(v, 12345);
    }
    uint64_t v = 0;
    assert_int_equal(sx_config_parse_typed(SX_PARAM_SIZE, NULL, 1024, 4096, "1k", &v), 0);
    assert_int_equal(sx_config_parse_typed(SX_PARAM_SIZE, NULL, 1024, 4096, "5k", &v), -1);
    assert_int_equal(sx_config_parse_typed(SX_PARAM_SIZE, NULL, 1024, 4096, "1023", &v), -1);
}

static void test_double_values(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        double value;
    } good[] = {{"0", 0.0}, {"0.05", 0.05}, {"1", 1.0}, {"1e-3", 0.001}, {".5", 0.5}};
    static const char *const bad[] = {"",  "nan", "inf",  "-inf", "1.0x", "1e999",
                                      "x", "1.5", "-0.1", " 0.5", NULL};

    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        double v = -1;
        if (sx_config_parse_typed(SX_PARAM_DOUBLE, NULL, 0, 1, good[i].text, &v) != 0)
            fail_msg("double '%s' rejected", good[i].text);
        assert_true(v == good[i].value);
    }
    for (const char *const *t = bad; *t != NULL; t++) {
        double v = -1;
        if (sx_config_parse_typed(SX_PARAM_DOUBLE, NULL, 0, 1, *t, &v) == 0)
            fail_msg("double '%s' accepted", *t);
        assert_true(v == -1);
    }
}

static void test_precedence(void **state)
{
    (void)state;
    sx_config_t cfg;

    clear_sx_environment();
    assert_int_equal(sx_config_load(&cfg, NULL, 0), SX_OK);
    assert_int_equal(cfg.shards, 0); /* default */
    sx_config_release(&cfg);

    assert_int_equal(setenv("SX_SHARDS", "3", 1), 0);
    assert_int_equal(setenv("SX_HOTEL_ROOMS", "64", 1), 0);
    assert_int_equal(setenv("SX_THREAD_MODE", "sharded", 1), 0);
    assert_int_equal(setenv("SX_LOG_FILE", "/from/env", 1), 0);
    assert_int_equal(sx_config_load(&cfg, NULL, 0), SX_OK);
    assert_int_equal(cfg.shards, 3); /* environment beats default */
    assert_int_equal(cfg.hotel_rooms, 64);
    assert_string_equal(cfg.log_file, "/from/env");
    sx_config_release(&cfg);

    const sx_config_kv_t kv[] = {
        {"SHARDS", "5"}, {"SX_THREAD_MODE", "global"}, {"LOG_FILE", "/from/kv"}};
    assert_int_equal(sx_config_load(&cfg, kv, 3), SX_OK);
    assert_int_equal(cfg.shards, 5); /* engine parameters beat the environment */
    assert_int_equal(cfg.thread_mode, SX_THREAD_MODE_GLOBAL);
    assert_string_equal(cfg.log_file, "/from/kv");
    assert_int_equal(cfg.hotel_rooms, 64); /* not in kv: still the environment's */
    sx_config_release(&cfg);

    const sx_config_kv_t prefixed[] = {{"SX_SHARDS", "6"}};
    assert_int_equal(sx_config_load(&cfg, prefixed, 1), SX_OK);
    assert_int_equal(cfg.shards, 6);
    sx_config_release(&cfg);

    /* A bad value in kv fails even though the environment's is good. */
    const sx_config_kv_t bad[] = {{"SHARDS", "x"}};
    capture_start();
    int rc = sx_config_load(&cfg, bad, 1);
    free(capture_stop());
    assert_int_equal(rc, SX_ERR_INVALID_PARAM);
    assert_null(cfg.log_file); /* released */
    assert_int_equal(cfg.hotel_rooms, 0);
    clear_sx_environment();
}

/*
 * Invalid values and unknown names, through sx_config_load (state: false)
 * and sx_engine_create (state: true). A case with `env` set puts the value
 * in the environment as SX_<name>; otherwise it is an engine parameter.
 */
static const struct bad_case {
    bool env;
    const char *name, *value;
    const char *hint; /* for unknown names: the suggestion expected, "" for none */
} bad_cases[] = {
    {false, "SHARDS", "lots", NULL},
    {false, "SX_HOTEL_ROOMS", "8", NULL},
    {false, "HOTEL_ROOMS", "0x10000000", NULL},
    {false, "THREAD_MODE", "fast", NULL},
    {false, "LOG_LEVEL", "loud", NULL},
    {true, "SHARDS", "many", NULL},
    {true, "THREAD_MODE", "serial", NULL},
    {true, "HOTEL_ROOMS", "-5", NULL},
    {true, "TIMER_TICK_US", "0", NULL},
    {false, "SHRADS", "4", "did you mean SHARDS?"},
    {false, "SX_SHARD", "2", "did you mean SHARDS?"},
    {false, "SX_THRAED_MODE", "global", "did you mean THREAD_MODE?"},
    {false, "NOTHING_LIKE_THIS_AT_ALL", "1", ""},
};

/* Fails a configuration through the path under test; returns the log. */
static char *expect_invalid(bool engine, const sx_config_kv_t *kv, size_t n)
{
    static char dummy;
    sx_engine_params_t params = {
        .field_mask = SX_ENGINE_PARAM_CONFIG, .config = kv, .config_count = n};
    sx_engine_h e = (sx_engine_h)(void *)&dummy;
    sx_config_t cfg;
    int rc;

    capture_start();
    rc = engine ? sx_engine_create(&params, &e) : sx_config_load(&cfg, kv, n);
    char *log = capture_stop();
    assert_int_equal(rc, SX_ERR_INVALID_PARAM);
    if (engine)
        assert_ptr_equal(e, (sx_engine_h)(void *)&dummy); /* not written on failure */
    else
        assert_null(cfg.log_file); /* released */
    return log;
}

static void test_invalid_configuration(void **state)
{
    const bool engine = *(const bool *)*state;

    clear_sx_environment();
    for (size_t i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
        const struct bad_case *c = &bad_cases[i];
        /* A valid setting first, of a parameter no environment case uses:
         * an engine parameter hides the environment variable of the same
         * name (see test_param_hides_bad_environment). */
        sx_config_kv_t kv[] = {{"LOG_LEVEL", "warn"}, {c->name, c->value}};
        char var[64], quoted[64];
        char *log;

        snprintf(quoted, sizeof(quoted), "'%s'", c->value);
        if (c->env) {
            snprintf(var, sizeof(var), "SX_%s", c->name);
            assert_int_equal(setenv(var, c->value, 1), 0);
            log = expect_invalid(engine, kv, 1);
            unsetenv(var);
        } else {
            log = expect_invalid(engine, kv, 2);
        }
        if (c->hint == NULL) { /* a bad value: variable, value and what is allowed */
            sx_param_info_t info = param(c->name);
            snprintf(var, sizeof(var), "SX_%s", info.name);
            assert_contains(log, var);
            assert_contains(log, quoted);
            assert_contains(log, info.allowed);
        } else { /* an unknown name, with the closest one if any */
            assert_contains(log, c->name);
            if (c->hint[0] != '\0')
                assert_contains(log, c->hint);
            else
                assert_null(strstr(log, "did you mean"));
        }
        free(log);
    }

    const sx_config_kv_t null_name[] = {{NULL, "1"}};
    const sx_config_kv_t null_value[] = {{"SHARDS", NULL}};
    free(expect_invalid(engine, null_name, 1));
    char *log = expect_invalid(engine, null_value, 1);
    assert_contains(log, "SHARDS");
    free(log);
    if (engine) { /* LOG_FILE is checked when the engine opens it */
        const sx_config_kv_t bad_file[] = {{"LOG_FILE", "/nonexistent-sx-dir/sub/log"}};
        log = expect_invalid(engine, bad_file, 1);
        assert_contains(log, "SX_LOG_FILE");
        assert_contains(log, "/nonexistent-sx-dir/sub/log");
        free(log);
    } else {
        sx_config_t cfg;
        assert_int_equal(sx_config_load(NULL, NULL, 0), SX_ERR_INVALID_PARAM);
        assert_int_equal(sx_config_load(&cfg, NULL, 1), SX_ERR_INVALID_PARAM);
    }
}

/* An engine parameter wins over the environment, so a bad value in the
 * environment for that same parameter is never parsed and cannot fail. */
static void test_param_hides_bad_environment(void **state)
{
    (void)state;
    sx_config_t cfg;
    const sx_config_kv_t kv[] = {{"SHARDS", "3"}};

    clear_sx_environment();
    assert_int_equal(setenv("SX_SHARDS", "many", 1), 0);
    assert_int_equal(sx_config_load(&cfg, kv, 1), SX_OK);
    assert_int_equal(cfg.shards, 3);
    sx_config_release(&cfg);
    assert_int_equal(sx_config_load(&cfg, NULL, 0), SX_ERR_INVALID_PARAM);
    unsetenv("SX_SHARDS");
}

static const bool via_load = false, via_engine = true;

int main(void)
{
    const struct CMUnitTest tests[] = {
        /* Must stay first; see its comment. */
        cmocka_unit_test(test_unknown_environment_variables_warned),
        cmocka_unit_test(test_param_info_describes_table),
        cmocka_unit_test(test_find_with_and_without_prefix),
        cmocka_unit_test(test_closest),
        cmocka_unit_test(test_defaults_parse),
        cmocka_unit_test(test_uint_values),
        cmocka_unit_test(test_uint_leading_zero_is_decimal),
        cmocka_unit_test(test_enum_values),
        cmocka_unit_test(test_string_values),
        cmocka_unit_test(test_param_parse),
        cmocka_unit_test(test_bool_values),
        cmocka_unit_test(test_size_values),
        cmocka_unit_test(test_double_values),
        cmocka_unit_test(test_precedence),
        cmocka_unit_test(test_param_hides_bad_environment),
        {"test_invalid_config_load", test_invalid_configuration, NULL, NULL, (void *)&via_load},
        {"test_invalid_engine_create", test_invalid_configuration, NULL, NULL, (void *)&via_engine},
    };
    sx_test_filter_from_env();
    return cmocka_run_group_tests_name("config", tests, NULL, NULL);
}
