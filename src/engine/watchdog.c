/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The diagnostics thread: SX_DUMP_SIGNAL and the progress watchdog
 * SX_WATCHDOG_S. An engine starts it only when one of the two is set.
 *
 * Dump on a signal. A signal handler may do next to nothing, so it only
 * bumps a process-wide counter (a lock-free atomic, which is
 * async-signal-safe); each engine's diagnostics thread, awake every
 * SX_DIAG_TICK_MS, sees the counter move and writes sx_dump's report to
 * the log in one block. One counter serves every engine of the process, so
 * one signal dumps them all, and a handler never touches a file descriptor
 * that an engine being destroyed might close.
 *
 * The watchdog follows MPICH's progress timeout (MPIR_CVAR_CH4_..._
 * PROGRESS_TIMEOUT and friends): once a second it inspects every shard and
 * reports the operations that have been pending longer than SX_WATCHDOG_S
 * (how old, to which peer, what kind, where they wait) with the state of
 * their channels, and a shard whose token stayed held that long (a
 * callback that does not return). It reports again only after another
 * SX_WATCHDOG_S, so a stall produces a report per period, not a flood.
 * With SX_WATCHDOG_ABORT it aborts after the first report, for a core file
 * or a job that must not hang until the batch system kills it.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "common/log.h"
#include "common/time.h"
#include "engine/diag.h"
#include "engine/engine.h"
#include "shard/shard.h"

#define SX_DIAG_TICK_MS     100
#define SX_WATCHDOG_SCAN_NS (1000ull * 1000000ull)
#define SX_NS_PER_S         1000000000ull

typedef struct sx_diag {
    pthread_t tid;
    int stop_fd; /* eventfd: destroy rings it */
    unsigned dumps_seen;
    uint64_t next_scan_ns;
    uint64_t last_report_ns; /* 0: none yet */
    uint64_t *busy_since_ns; /* [nshards]: its token was first found held; 0: free */
} sx_diag_t;

/* Bumped by the signal handler; read by every engine's thread. */
static atomic_uint sx_dump_requests;
static pthread_mutex_t sx_signal_lock = PTHREAD_MUTEX_INITIALIZER;
static bool sx_signal_installed[65];

static void sx_dump_signal_handler(int sig)
{
    (void)sig;
    atomic_fetch_add_explicit(&sx_dump_requests, 1, memory_order_relaxed);
}

_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "the signal handler needs a lock-free counter");

static int sx_diag_install_signal(int sig)
{
    int rc = SX_OK;

    pthread_mutex_lock(&sx_signal_lock);
    if (!sx_signal_installed[sig]) {
        struct sigaction sa, old;
        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = sx_dump_signal_handler;
        sa.sa_flags = SA_RESTART;
        sigemptyset(&sa.sa_mask);
        if (sigaction(sig, &sa, &old) != 0) {
            sx_error("diag", "invalid value SX_DUMP_SIGNAL=%d: cannot catch it (%s)", sig,
                     strerror(errno));
            rc = SX_ERR_INVALID_PARAM;
        } else {
            /* It stays installed: other engines may rely on it, and an
             * engine destroyed later would otherwise restore a stale one. */
            sx_signal_installed[sig] = true;
            if (old.sa_handler != SIG_DFL && old.sa_handler != SIG_IGN)
                sx_warn("diag", "SX_DUMP_SIGNAL=%d replaces the program's own handler of it", sig);
        }
    }
    pthread_mutex_unlock(&sx_signal_lock);
    return rc;
}

static void sx_diag_dump_to_log(struct sx_engine *e)
{
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    if (m == NULL)
        return;
    (void)sx_engine_dump(e, m, SX_DIAG_SHARD_BUDGET_NS);
    fclose(m);
    sx_log_write_block(text, len);
    free(text);
}

/* Operations on @p c pending at least @p min_age_ns (coarse clock). */
static unsigned sx_chan_old_ops_locked(const sx_chan_t *c, uint64_t now_coarse, uint64_t min_age_ns)
{
    const sx_op_t *queues[3] = {c->sendq, c->ackq, c->rmaq};
    unsigned n = 0;
    for (int q = 0; q < 3; q++) {
        for (const sx_op_t *op = queues[q]; op != NULL; op = op->next) {
            if (now_coarse > op->queued_ns && now_coarse - op->queued_ns >= min_age_ns)
                n++;
        }
    }
    return n;
}

/* One watchdog pass; writes its findings to @p m and returns how many
 * operations (and busy shards) it found over the limit. */
static unsigned sx_watchdog_scan(struct sx_engine *e, sx_diag_t *d, FILE *m, uint64_t now)
{
    uint64_t limit = e->cfg.watchdog_s * SX_NS_PER_S;
    unsigned found = 0;

    for (unsigned i = 0; i < e->nshards; i++) {
        sx_shard_t *s = e->shards[i];
        if (!sx_diag_shard_enter(e, s, SX_DIAG_SHARD_BUDGET_NS)) {
            if (d->busy_since_ns[i] == 0)
                d->busy_since_ns[i] = now;
            if (now - d->busy_since_ns[i] >= limit) {
                fprintf(m,
                        "  shard %u: its token has been held for %.1f s (a callback or a "
                        "progress pass that does not return?); its operations cannot be "
                        "inspected\n",
                        i, (double)(now - d->busy_since_ns[i]) / 1e9);
                found++;
            }
            continue;
        }
        d->busy_since_ns[i] = 0;
        uint64_t now_coarse = sx_time_coarse_ns();
        sx_fairlock_lock(&e->peers.lock);
        for (const struct sx_peer *peer = e->peers.all; peer != NULL; peer = peer->all_next) {
            for (unsigned lane = 0; lane < peer->nshards; lane++) {
                const sx_chan_t *c = peer->chans[(size_t)s->index * peer->nshards + lane];
                if (c == NULL || sx_chan_old_ops_locked(c, now_coarse, limit) == 0)
                    continue;
                fprintf(m, "  shard %u:\n", i);
                found += sx_dump_chan_locked(m, c, now, limit);
            }
        }
        sx_fairlock_unlock(&e->peers.lock);
        sx_diag_shard_leave(e, s);
    }
    return found;
}

static void sx_watchdog_run(struct sx_engine *e, sx_diag_t *d, uint64_t now)
{
    uint64_t limit = e->cfg.watchdog_s * SX_NS_PER_S;
    char *body = NULL;
    size_t len = 0;

    if (d->last_report_ns != 0 && now - d->last_report_ns < limit)
        return;
    FILE *m = open_memstream(&body, &len);
    if (m == NULL)
        return;
    unsigned found = sx_watchdog_scan(e, d, m, now);
    fclose(m);
    if (found > 0) {
        char head[256];
        int n = snprintf(head, sizeof(head),
                         "[shardx %d diag] warn: watchdog (SX_WATCHDOG_S=%" PRIu64
                         "): %u operation(s) of engine %s pending longer than %" PRIu64 " s:\n",
                         (int)getpid(), e->cfg.watchdog_s, found, e->name, e->cfg.watchdog_s);
        /* One block, so the report does not interleave with other lines. */
        char *out = malloc((size_t)n + len);
        if (out != NULL) {
            memcpy(out, head, (size_t)n);
            memcpy(out + n, body, len);
            sx_log_write_block(out, (size_t)n + len);
            free(out);
        }
        d->last_report_ns = now;
        if (e->cfg.watchdog_abort) {
            sx_error("diag", "watchdog: SX_WATCHDOG_ABORT is set; aborting");
            abort();
        }
    }
    free(body);
}

static void *sx_diag_main(void *arg)
{
    struct sx_engine *e = arg;
    sx_diag_t *d = e->diag;
    struct pollfd pfd = {.fd = d->stop_fd, .events = POLLIN};

    for (;;) {
        int r = poll(&pfd, 1, SX_DIAG_TICK_MS);
        if (r > 0)
            break; /* destroy rang */
        if (e->cfg.dump_signal != 0) {
            unsigned req = atomic_load_explicit(&sx_dump_requests, memory_order_relaxed);
            if (req != d->dumps_seen) {
                d->dumps_seen = req;
                sx_diag_dump_to_log(e);
            }
        }
        uint64_t now = sx_time_ns();
        if (e->cfg.watchdog_s != 0 && now >= d->next_scan_ns) {
            d->next_scan_ns = now + SX_WATCHDOG_SCAN_NS;
            sx_watchdog_run(e, d, now);
        }
    }
    return NULL;
}

int sx_engine_diag_start(struct sx_engine *e)
{
    if (e->cfg.dump_signal == 0 && e->cfg.watchdog_s == 0)
        return SX_OK;
    int sig = (int)e->cfg.dump_signal;
    if (sig != 0 && (sig == SIGKILL || sig == SIGSTOP || sig >= NSIG)) {
        sx_error("diag", "invalid value SX_DUMP_SIGNAL=%d: that signal cannot be caught", sig);
        return SX_ERR_INVALID_PARAM;
    }
    sx_diag_t *d = calloc(1, sizeof(*d));
    if (d == NULL)
        return SX_ERR_NO_MEMORY;
    d->busy_since_ns = calloc(e->nshards, sizeof(*d->busy_since_ns));
    d->stop_fd = eventfd(0, EFD_CLOEXEC);
    /* Signals already counted before this engine existed are not ours. */
    d->dumps_seen = atomic_load_explicit(&sx_dump_requests, memory_order_relaxed);
    d->next_scan_ns = sx_time_ns() + SX_WATCHDOG_SCAN_NS;
    int rc = (d->busy_since_ns == NULL || d->stop_fd < 0) ? SX_ERR_NO_MEMORY : SX_OK;
    if (rc == SX_OK && sig != 0)
        rc = sx_diag_install_signal(sig);
    if (rc == SX_OK) {
        e->diag = d;
        if (pthread_create(&d->tid, NULL, sx_diag_main, e) != 0) {
            e->diag = NULL;
            rc = SX_ERR_NO_MEMORY;
        }
    }
    if (rc != SX_OK) {
        if (d->stop_fd >= 0)
            close(d->stop_fd);
        free(d->busy_since_ns);
        free(d);
    }
    return rc;
}

void sx_engine_diag_stop(struct sx_engine *e)
{
    sx_diag_t *d = e->diag;
    uint64_t one = 1;

    if (d == NULL)
        return;
    if (write(d->stop_fd, &one, sizeof(one)) != sizeof(one))
        sx_error("diag", "cannot stop the diagnostics thread: %s", strerror(errno));
    pthread_join(d->tid, NULL);
    close(d->stop_fd);
    free(d->busy_since_ns);
    free(d);
    e->diag = NULL;
}
