/* SPDX-License-Identifier: BSD-3-Clause */
/* Logging: one formatted line per call, written with a single fputs. */
#include "common/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

_Atomic int sx_log_level_g = SX_LOG_WARN;

static const char *const sx_log_level_names[] = {"error", "warn", "info", "debug", "trace"};

/* The destination changes rarely (configuration); lines are written under
 * this mutex so a file switch never races with a writer. Logging is a slow
 * path by definition: the hot path only pays for the level check. */
static pthread_mutex_t sx_log_lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *sx_log_stream; /* NULL means stderr */
static pthread_once_t sx_log_once = PTHREAD_ONCE_INIT;

const char *sx_log_level_name(sx_log_level_t level)
{
    if ((unsigned)level < sizeof(sx_log_level_names) / sizeof(sx_log_level_names[0]))
        return sx_log_level_names[level];
    return "unknown";
}

void sx_log_set_level(sx_log_level_t level)
{
    atomic_store_explicit(&sx_log_level_g, (int)level, memory_order_relaxed);
}

int sx_log_set_file(const char *path)
{
    FILE *stream = NULL;

    if (path != NULL && path[0] != '\0') {
        stream = fopen(path, "ae");
        if (stream == NULL)
            return -errno;
        setvbuf(stream, NULL, _IOLBF, 0);
    }
    pthread_mutex_lock(&sx_log_lock);
    FILE *old = sx_log_stream;
    sx_log_stream = stream;
    pthread_mutex_unlock(&sx_log_lock);
    if (old != NULL)
        fclose(old);
    return 0;
}

static void sx_log_read_env(void)
{
    const char *level = getenv("SX_LOG_LEVEL");
    const char *file = getenv("SX_LOG_FILE");

    /* Invalid values are reported by the configuration parser at engine
     * creation; here we only apply what is well formed. */
    if (level != NULL) {
        for (size_t i = 0; i < sizeof(sx_log_level_names) / sizeof(sx_log_level_names[0]); i++) {
            if (strcasecmp(level, sx_log_level_names[i]) == 0)
                sx_log_set_level((sx_log_level_t)i);
        }
    }
    if (file != NULL)
        (void)sx_log_set_file(file);
}

void sx_log_init_from_env(void)
{
    pthread_once(&sx_log_once, sx_log_read_env);
}

static void sx_log_vemit(sx_log_level_t level, const char *subsys, const char *file, int line,
                         unsigned suppressed, const char *fmt, va_list ap)
{
    char buf[1024];
    int n;

    n = snprintf(buf, sizeof(buf), "[shardx %d:%ld %s] %s: ", (int)getpid(),
                 (long)syscall(SYS_gettid), subsys, sx_log_level_name(level));
    if (n < 0 || (size_t)n >= sizeof(buf))
        n = 0;
    int m = vsnprintf(buf + n, sizeof(buf) - (size_t)n, fmt, ap);
    size_t len = (m < 0) ? (size_t)n : (size_t)n + (size_t)m;
    if (len > sizeof(buf) - 2)
        len = sizeof(buf) - 2;
    if (suppressed > 0) {
        int k =
            snprintf(buf + len, sizeof(buf) - len, " (%u similar lines suppressed)", suppressed);
        if (k > 0)
            len += (size_t)k;
        if (len > sizeof(buf) - 2)
            len = sizeof(buf) - 2;
    }
    if (level >= SX_LOG_DEBUG) {
        int k = snprintf(buf + len, sizeof(buf) - len, " (%s:%d)", file, line);
        if (k > 0)
            len += (size_t)k;
        if (len > sizeof(buf) - 2)
            len = sizeof(buf) - 2;
    }
    buf[len++] = '\n';
    buf[len] = '\0';

    sx_log_write_block(buf, len);
}

void sx_log_write_block(const char *text, size_t len)
{
    pthread_mutex_lock(&sx_log_lock);
    FILE *out = (sx_log_stream != NULL) ? sx_log_stream : stderr;
    fwrite(text, 1, len, out);
    fflush(out);
    pthread_mutex_unlock(&sx_log_lock);
}

void sx_log_emit(sx_log_level_t level, const char *subsys, const char *file, int line,
                 const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    sx_log_vemit(level, subsys, file, line, 0, fmt, ap);
    va_end(ap);
}

bool sx_log_ratelimit_pass(sx_log_ratelimit_t *rl, uint64_t now_ns, unsigned *suppressed_p)
{
    uint64_t start = atomic_load_explicit(&rl->window_start_ns, memory_order_relaxed);

    *suppressed_p = 0;
    /* A new window: whoever moves the start resets the count. Time 0 is
     * taken as "never", so a clock reading of 0 starts a window too. */
    if (start == 0 || now_ns - start >= SX_LOG_RATELIMIT_INTERVAL_NS) {
        if (atomic_compare_exchange_strong_explicit(&rl->window_start_ns, &start,
                                                    now_ns != 0 ? now_ns : 1, memory_order_relaxed,
                                                    memory_order_relaxed))
            atomic_store_explicit(&rl->printed, 0, memory_order_relaxed);
    }
    if (atomic_fetch_add_explicit(&rl->printed, 1, memory_order_relaxed) >=
        SX_LOG_RATELIMIT_BURST) {
        atomic_fetch_add_explicit(&rl->suppressed, 1, memory_order_relaxed);
        return false;
    }
    *suppressed_p = atomic_exchange_explicit(&rl->suppressed, 0, memory_order_relaxed);
    return true;
}

void sx_log_emit_ratelimited(sx_log_ratelimit_t *rl, sx_log_level_t level, const char *subsys,
                             const char *file, int line, const char *fmt, ...)
{
    struct timespec ts;
    unsigned suppressed;
    va_list ap;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    if (!sx_log_ratelimit_pass(rl, (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec,
                               &suppressed))
        return;
    va_start(ap, fmt);
    sx_log_vemit(level, subsys, file, line, suppressed, fmt, ap);
    va_end(ap);
}
