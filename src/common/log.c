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

void sx_log_emit(sx_log_level_t level, const char *subsys, const char *file, int line,
                 const char *fmt, ...)
{
    char buf[1024];
    int n;
    va_list ap;

    n = snprintf(buf, sizeof(buf), "[shardx %d:%ld %s] %s: ", (int)getpid(),
                 (long)syscall(SYS_gettid), subsys, sx_log_level_name(level));
    if (n < 0 || (size_t)n >= sizeof(buf))
        n = 0;
    va_start(ap, fmt);
    int m = vsnprintf(buf + n, sizeof(buf) - (size_t)n, fmt, ap);
    va_end(ap);
    size_t len = (m < 0) ? (size_t)n : (size_t)n + (size_t)m;
    if (len > sizeof(buf) - 2)
        len = sizeof(buf) - 2;
    if (level >= SX_LOG_DEBUG) {
        int k = snprintf(buf + len, sizeof(buf) - len, " (%s:%d)", file, line);
        if (k > 0)
            len += (size_t)k;
        if (len > sizeof(buf) - 2)
            len = sizeof(buf) - 2;
    }
    buf[len++] = '\n';
    buf[len] = '\0';

    pthread_mutex_lock(&sx_log_lock);
    FILE *out = (sx_log_stream != NULL) ? sx_log_stream : stderr;
    fputs(buf, out);
    fflush(out);
    pthread_mutex_unlock(&sx_log_lock);
}
