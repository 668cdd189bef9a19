/*
 * Logging with levels and subsystem names.
 *
 * The level check is one relaxed atomic load and one branch marked
 * unlikely, so a disabled level costs a predicted branch and nothing is
 * formatted. SX_LOG_LEVEL and SX_LOG_FILE choose the level and the
 * destination (stderr by default); an engine's configuration may change
 * them at sx_engine_create().
 */
#ifndef SX_COMMON_LOG_H
#define SX_COMMON_LOG_H

#include <stdatomic.h>

typedef enum sx_log_level {
    SX_LOG_ERROR = 0,
    SX_LOG_WARN = 1,
    SX_LOG_INFO = 2,
    SX_LOG_DEBUG = 3,
    SX_LOG_TRACE = 4,
} sx_log_level_t;

/* Current level; written rarely (configuration), read on every log call. */
extern _Atomic int sx_log_level_g;

#define sx_log_enabled(level) \
    __builtin_expect((int)(level) <= atomic_load_explicit(&sx_log_level_g, memory_order_relaxed), 0)

#define sx_log(level, subsys, ...)                                           \
    do {                                                                     \
        if (sx_log_enabled(level))                                           \
            sx_log_emit((level), (subsys), __FILE__, __LINE__, __VA_ARGS__); \
    } while (0)

#define sx_error(subsys, ...) sx_log(SX_LOG_ERROR, subsys, __VA_ARGS__)
#define sx_warn(subsys, ...)  sx_log(SX_LOG_WARN, subsys, __VA_ARGS__)
#define sx_info(subsys, ...)  sx_log(SX_LOG_INFO, subsys, __VA_ARGS__)
#define sx_debug(subsys, ...) sx_log(SX_LOG_DEBUG, subsys, __VA_ARGS__)
#define sx_trace(subsys, ...) sx_log(SX_LOG_TRACE, subsys, __VA_ARGS__)

/** Formats and writes one line; thread-safe. Use sx_log() instead. */
void sx_log_emit(sx_log_level_t level, const char *subsys, const char *file, int line,
                 const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/** Sets the level; used by the configuration. */
void sx_log_set_level(sx_log_level_t level);

/**
 * Sends log lines to @p path (appending), or to stderr when @p path is
 * NULL or empty. Returns 0, or -errno when the file cannot be opened (the
 * destination is then left unchanged).
 */
int sx_log_set_file(const char *path);

/** Reads SX_LOG_LEVEL / SX_LOG_FILE once per process; idempotent. */
void sx_log_init_from_env(void);

/** Level name as written in SX_LOG_LEVEL ("warn"). */
const char *sx_log_level_name(sx_log_level_t level);

#endif /* SX_COMMON_LOG_H */
