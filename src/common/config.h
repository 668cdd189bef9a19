/*
 * The configuration table: every tunable of shardx in one place.
 *
 * SX_CONFIG_TABLE is the single source of the parameter list. Each row is
 *   X(NAME, TYPE, field, "default", min, max, "word|list", "description")
 * where NAME is read from the environment as SX_NAME, TYPE is the suffix of
 * an sx_param_type_t, and field is the member of sx_config_t that holds the
 * parsed value (uint64_t for UINT and SIZE, double for DOUBLE, bool for
 * BOOL, int — the word's index — for ENUM, char * for STRING). min and max
 * bound numeric types; the word list is used by ENUM only.
 *
 * Precedence: engine parameters, then the environment, then the default.
 */
#ifndef SX_COMMON_CONFIG_H
#define SX_COMMON_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <shardx.h>

#define SX_CONFIG_TABLE(X)                                                                 \
    X(SHARDS, UINT, shards, "0", 0, 1024, NULL,                                            \
      "Number of shards; 0 means one per core of the process's cpuset. More shards than "  \
      "cores is allowed (and warned about).")                                              \
    X(THREAD_MODE, ENUM, thread_mode, "sharded", 0, 0, "sharded|global",                   \
      "sharded: one shard per core, each with its own token and inbox. global: one shard " \
      "behind one recursive lock, the usnic-style baseline kept for comparison.")          \
    X(LOG_LEVEL, ENUM, log_level, "warn", 0, 0, "error|warn|info|debug|trace",             \
      "Lowest severity written to the log.")                                               \
    X(LOG_FILE, STRING, log_file, "", 0, 0, NULL,                                          \
      "Append log lines to this file instead of standard error.")                          \
    X(HOTEL_ROOMS, UINT, hotel_rooms, "4096", 16, 1048576, NULL,                           \
      "Rooms in each shard's hotel: the most packets a shard keeps waiting for an "        \
      "acknowledgement.")                                                                  \
    X(TIMER_TICK_US, UINT, timer_tick_us, "10", 1, 100000, NULL,                           \
      "Granularity of each shard's timer wheel in microseconds; timers fire up to one "    \
      "tick late, never early.")

/* Word indices of the ENUM parameters; they follow the word lists above. */
enum { SX_THREAD_MODE_SHARDED = 0, SX_THREAD_MODE_GLOBAL = 1 };

typedef struct sx_config {
    uint64_t shards;
    int thread_mode;
    int log_level;
    char *log_file;
    uint64_t hotel_rooms;
    uint64_t timer_tick_us;
} sx_config_t;

/**
 * Fills @p cfg from @p kv (may be NULL), the environment and the defaults.
 * On an invalid value or an unknown name in @p kv, logs an error naming the
 * variable, the value and what is allowed, and returns SX_ERR_INVALID_PARAM
 * with @p cfg released. Thread-safe (reads the environment only).
 */
int sx_config_load(sx_config_t *cfg, const sx_config_kv_t *kv, size_t kv_count);

/** Frees what sx_config_load allocated; safe on a zeroed config. */
void sx_config_release(sx_config_t *cfg);

/**
 * Warns once per process about each SX_* environment variable that is not a
 * parameter, naming the closest known one. Returns how many it found.
 */
size_t sx_config_check_environment(void);

/**
 * The parameter name closest to @p name by edit distance (prefix "SX_"
 * ignored), or NULL if nothing is close enough to be a plausible typo.
 */
const char *sx_config_closest(const char *name);

/**
 * Parses @p text as a value of @p type into @p field: a uint64_t for UINT
 * and SIZE, double, bool, int (the word's index in the '|'-separated
 * @p words) for ENUM, or char * for STRING (the old string is freed).
 * Numbers must lie in [min, max]. Returns 0, or -1 with @p field
 * untouched. The table parser is built on it; tests call it directly for
 * types the table does not use yet.
 */
int sx_config_parse_typed(sx_param_type_t type, const char *words, double min, double max,
                          const char *text, void *field);

/** Parses @p text as parameter @p index would; for tests. */
int sx_config_parse_one(size_t index, const char *text, sx_config_t *cfg);

/** Index of the parameter called @p name (with or without "SX_"), or -1. */
int sx_config_find(const char *name);

#endif /* SX_COMMON_CONFIG_H */
