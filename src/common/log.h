/* SPDX-License-Identifier: BSD-3-Clause */
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
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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

/*
 * Rate limiting for warnings that a peer or the network can repeat at line
 * rate (a flood of messages to a tag without a handler, say): each call
 * site lets SX_LOG_RATELIMIT_BURST lines through per
 * SX_LOG_RATELIMIT_INTERVAL_NS and counts the rest; the first line of the
 * next interval says how many were suppressed. Modelled on the Linux
 * kernel's printk_ratelimit. Each site keeps its own state, so one noisy
 * site does not silence another.
 */
#define SX_LOG_RATELIMIT_BURST       10u
#define SX_LOG_RATELIMIT_INTERVAL_NS (5ull * 1000000000ull)

typedef struct sx_log_ratelimit {
    _Atomic uint64_t window_start_ns; /* 0: no line yet */
    atomic_uint printed;              /* lines let through in this window */
    atomic_uint suppressed;           /* lines held back since the last one let through */
} sx_log_ratelimit_t;

/**
 * Whether a line at @p now_ns may go out under @p rl. When it may, and
 * lines were held back before it, *suppressed_p says how many (else 0).
 * Any thread; lock-free. Racing threads at a window's edge may let a line
 * or two more through, never fewer.
 */
bool sx_log_ratelimit_pass(sx_log_ratelimit_t *rl, uint64_t now_ns, unsigned *suppressed_p);

/** Formats and writes one line, as sx_log_emit, unless @p rl holds it
 *  back; adds how many lines it held back before. */
void sx_log_emit_ratelimited(sx_log_ratelimit_t *rl, sx_log_level_t level, const char *subsys,
                             const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

#define sx_log_ratelimited(level, subsys, ...)                                          \
    do {                                                                                \
        static sx_log_ratelimit_t sx_log_rl_;                                           \
        if (sx_log_enabled(level))                                                      \
            sx_log_emit_ratelimited(&sx_log_rl_, (level), (subsys), __FILE__, __LINE__, \
                                    __VA_ARGS__);                                       \
    } while (0)

#define sx_warn_ratelimited(subsys, ...) sx_log_ratelimited(SX_LOG_WARN, subsys, __VA_ARGS__)

/**
 * Writes @p text (whole lines) to the log's destination in one piece, with
 * no prefix: multi-line reports (sx_dump, the watchdog) that must not
 * interleave with other threads' lines.
 */
void sx_log_write_block(const char *text, size_t len);

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
