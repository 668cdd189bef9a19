/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Progress threads (SX_PROGRESS=thread) and the engine's pollable fd.
 *
 * One thread per shard progresses it while there is work, keeps polling
 * for SX_SPIN_US after the last event (a sleep and wake-up costs tens of
 * microseconds on a VM, more than a message), and then sleeps in epoll on
 * the shard's transport fds and its wake eventfd, until the earliest timer
 * at the latest. Threads are never pinned unless SX_BIND_PROGRESS says so:
 * hybrid MPI+OpenMP programs pin their own threads.
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/time.h"
#include "engine/engine.h"
#include "shard/shard.h"

/* Longest sleep: timers live in the wheel, but the fault transport holds
 * delayed datagrams that no fd announces, so with faults on wake often. */
#define SX_SLEEP_CAP_NS       (100ull * 1000000ull)
#define SX_SLEEP_CAP_FAULT_NS (1ull * 1000000ull)

typedef struct sx_progress_thread {
    pthread_t tid;
    struct sx_engine *engine;
    sx_shard_t *shard;
    int epfd;
    bool started;
} sx_progress_thread_t;

int sx_engine_epoll_add_fd(int epfd, int fd)
{
    struct epoll_event ev = {.events = EPOLLIN};
    ev.data.fd = fd;
    return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) == 0 ? SX_OK : SX_ERR_IO;
}

unsigned sx_engine_shard_wait_fds(const sx_shard_t *shard, int *fds)
{
    unsigned n = 0;

    for (unsigned t = 0; t < SX_SHARD_TL_COUNT; t++) {
        sx_tl_iface_t *iface = shard->ifaces[t];
        if (iface != NULL)
            n += iface->ops->wait_fds(iface, fds + n);
    }
    return n;
}

/* Adds the shard's interfaces' fds to @p epfd, each tagged with itself
 * (data.fd) or, with @p by_index, with the shard's index (data.u32). */
static int sx_engine_epoll_add_ifaces(int epfd, sx_shard_t *shard, bool by_index)
{
    int fds[SX_SHARD_WAIT_FDS];
    unsigned n = sx_engine_shard_wait_fds(shard, fds);

    for (unsigned i = 0; i < n; i++) {
        struct epoll_event ev = {.events = EPOLLIN};
        if (by_index)
            ev.data.u32 = shard->index;
        else
            ev.data.fd = fds[i];
        if (epoll_ctl(epfd, EPOLL_CTL_ADD, fds[i], &ev) != 0)
            return SX_ERR_IO;
    }
    return SX_OK;
}

int sx_engine_epoll_add_shard(int epfd, sx_shard_t *shard)
{
    return sx_engine_epoll_add_ifaces(epfd, shard, false);
}

int sx_engine_epoll_wait_ns(int epfd, struct epoll_event *ev, int max, uint64_t timeout_ns)
{
    struct timespec ts = sx_ns_to_ts(timeout_ns);

    /* epoll_pwait2 takes nanoseconds: a 50 us delayed ACK must not round
     * up to a millisecond, as epoll_wait's timeout would (the fallback for
     * kernels before 5.11). */
    int n = epoll_pwait2(epfd, ev, max, timeout_ns == UINT64_MAX ? NULL : &ts, NULL);
    if (n < 0 && errno == ENOSYS)
        n = epoll_wait(epfd, ev, max,
                       timeout_ns == UINT64_MAX ? -1 : (int)((timeout_ns + 999999) / 1000000));
    return n;
}

int sx_engine_epoll_del_shard(int epfd, sx_shard_t *shard)
{
    int fds[SX_SHARD_WAIT_FDS];
    unsigned n = sx_engine_shard_wait_fds(shard, fds);
    int rc = SX_OK;

    for (unsigned i = 0; i < n; i++)
        if (epoll_ctl(epfd, EPOLL_CTL_DEL, fds[i], NULL) != 0)
            rc = SX_ERR_IO;
    return rc;
}

/* Builds the set that SX_YIELD_WAIT_ANY waits on; its builder's thread. */
static int sx_engine_wait_build(struct sx_engine *e)
{
    int epfd = epoll_create1(EPOLL_CLOEXEC);
    if (epfd < 0) {
        sx_warn("progress",
                "epoll_create1 for the wait on every shard: %s; idle callers wait "
                "on their home shard",
                strerror(errno));
        return SX_ERR_IO;
    }
    for (unsigned i = 0; i < e->nshards; i++) {
        if (sx_engine_epoll_add_ifaces(epfd, e->shards[i], true) != SX_OK) {
            sx_warn("progress",
                    "shard %u: epoll_ctl for the wait on every shard: %s; idle "
                    "callers wait on their home shard",
                    i, strerror(errno));
            close(epfd);
            return SX_ERR_IO;
        }
    }
    e->wait_fd = epfd;
    return SX_OK;
}

/*
 * Built by the first wait, not at creation: a socket that an epoll set
 * watches costs every datagram that arrives a wake-up callback in the
 * kernel, in the sender's send call over loopback (transport.h, wait_fds),
 * and most engines never have a caller that yields when idle. Once built
 * the set stays: such callers wait at nearly every idle call. A caller
 * that finds another building it (or the build failed) waits on its home
 * shard this time.
 */
bool sx_engine_wait_any_ready(struct sx_engine *e)
{
    int st = atomic_load_explicit(&e->wait_state, memory_order_acquire);
    if (st == SX_WAIT_SET_READY)
        return true;
    if (st != SX_WAIT_SET_NONE ||
        !atomic_compare_exchange_strong_explicit(&e->wait_state, &st, SX_WAIT_SET_BUILDING,
                                                 memory_order_acq_rel, memory_order_acquire))
        return false;
    int rc = sx_engine_wait_build(e);
    atomic_store_explicit(&e->wait_state, rc == SX_OK ? SX_WAIT_SET_READY : SX_WAIT_SET_FAILED,
                          memory_order_release);
    return rc == SX_OK;
}

unsigned sx_engine_wait_any(struct sx_engine *e, uint64_t timeout_ns, unsigned *ready, unsigned max)
{
    struct epoll_event ev[16];
    unsigned found = 0;

    if (!sx_engine_wait_any_ready(e))
        return 0;
    if (max > sizeof(ev) / sizeof(ev[0]))
        max = sizeof(ev) / sizeof(ev[0]);
    int n = sx_engine_epoll_wait_ns(e->wait_fd, ev, (int)max, timeout_ns);
    for (int i = 0; i < n; i++) {
        unsigned k = 0;
        while (k < found && ready[k] != ev[i].data.u32)
            k++;
        if (k == found)
            ready[found++] = ev[i].data.u32;
    }
    return found;
}

static void sx_progress_sleep(sx_progress_thread_t *t, uint64_t until)
{
    struct epoll_event ev[8];
    uint64_t now = sx_time_ns();
    uint64_t cap = (t->engine->cfg.fault != NULL && t->engine->cfg.fault[0] != '\0')
                       ? SX_SLEEP_CAP_FAULT_NS
                       : SX_SLEEP_CAP_NS;
    uint64_t wait = sx_wait_ns(now, until, cap);
    if (wait > 0)
        (void)sx_engine_epoll_wait_ns(t->epfd, ev, 8, wait);
    uint64_t drained;
    if (read(t->shard->wake_fd, &drained, sizeof(drained)) < 0 && errno != EAGAIN)
        sx_debug("progress", "shard %u: eventfd read failed", t->shard->index);
    atomic_store_explicit(&t->shard->sleeping, 0, memory_order_relaxed);
}

static void *sx_progress_main(void *arg)
{
    sx_progress_thread_t *t = arg;
    struct sx_engine *e = t->engine;
    uint64_t spin_ns = e->cfg.spin_us * 1000u;
    uint64_t last_busy = sx_time_ns();

    if (e->cfg.bind_progress &&
        hwloc_set_cpubind(e->topo.topology, t->shard->cpuset, HWLOC_CPUBIND_THREAD) != 0)
        sx_warn("progress", "shard %u: could not bind the progress thread to its core",
                t->shard->index);
    /* The thread's home is its shard, so callbacks that send from it stay
     * on it. */
    (void)sx_thread_bind(e, t->shard->index);
    while (!atomic_load_explicit(&e->progress_stop, memory_order_acquire)) {
        /* The global baseline takes its lock here too, as any entry does. */
        sx_global_enter(e);
        int n = sx_shard_progress(t->shard);
        sx_global_exit(e);
        if (n > 0) {
            last_busy = sx_time_ns();
            continue;
        }
        if (sx_time_ns() - last_busy < spin_ns)
            continue;
        uint64_t until;
        sx_global_enter(e);
        bool may_sleep = sx_shard_prepare_sleep(t->shard, &until);
        sx_global_exit(e);
        if (!may_sleep)
            continue;
        if (atomic_load_explicit(&e->progress_stop, memory_order_acquire)) {
            atomic_store_explicit(&t->shard->sleeping, 0, memory_order_relaxed);
            break;
        }
        sx_progress_sleep(t, until);
        last_busy = sx_time_ns();
    }
    return NULL;
}

int sx_engine_progress_start(struct sx_engine *e)
{
    if (e->cfg.progress != SX_PROGRESS_THREAD)
        return SX_OK;
    e->progress = calloc(e->nshards, sizeof(sx_progress_thread_t));
    if (e->progress == NULL)
        return SX_ERR_NO_MEMORY;
    atomic_init(&e->progress_stop, false);
    for (unsigned i = 0; i < e->nshards; i++)
        ((sx_progress_thread_t *)e->progress)[i].epfd = -1;
    for (unsigned i = 0; i < e->nshards; i++) {
        sx_progress_thread_t *t = &((sx_progress_thread_t *)e->progress)[i];
        t->engine = e;
        t->shard = e->shards[i];
        t->shard->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        t->epfd = epoll_create1(EPOLL_CLOEXEC);
        if (t->shard->wake_fd < 0 || t->epfd < 0 ||
            sx_engine_epoll_add_fd(t->epfd, t->shard->wake_fd) != SX_OK ||
            sx_engine_epoll_add_shard(t->epfd, t->shard) != SX_OK) {
            sx_error("progress", "shard %u: cannot set up epoll for its progress thread", i);
            return SX_ERR_IO;
        }
        if (pthread_create(&t->tid, NULL, sx_progress_main, t) != 0) {
            sx_error("progress", "shard %u: cannot start a progress thread", i);
            return SX_ERR_NO_MEMORY;
        }
        t->started = true;
    }
    return SX_OK;
}

void sx_engine_progress_stop(struct sx_engine *e)
{
    sx_progress_thread_t *threads = e->progress;

    if (threads == NULL)
        return;
    atomic_store_explicit(&e->progress_stop, true, memory_order_release);
    for (unsigned i = 0; i < e->nshards; i++) {
        if (threads[i].started) {
            sx_shard_wake(threads[i].shard);
            pthread_join(threads[i].tid, NULL);
        }
        if (threads[i].epfd >= 0)
            close(threads[i].epfd);
    }
    free(threads);
    e->progress = NULL;
}

SX_API int sx_engine_fd(sx_engine_h e, int *fd_p)
{
    if (e == NULL || fd_p == NULL)
        return sx_api_null("sx_engine_fd", e == NULL ? "the engine" : "fd_p");
    sx_global_enter(e);
    pthread_mutex_lock(&e->event_fd_lock);
    int rc = SX_OK;
    if (e->event_fd < 0) {
        int epfd = epoll_create1(EPOLL_CLOEXEC);
        int *timers = calloc(e->nshards, sizeof(*timers));
        rc = (epfd >= 0 && timers != NULL) ? SX_OK : SX_ERR_IO;
        for (unsigned i = 0; timers != NULL && i < e->nshards; i++)
            timers[i] = -1;
        for (unsigned i = 0; rc == SX_OK && i < e->nshards; i++) {
            rc = sx_engine_epoll_add_shard(epfd, e->shards[i]);
            if (rc == SX_OK) {
                timers[i] = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
                rc = timers[i] >= 0 ? sx_engine_epoll_add_fd(epfd, timers[i]) : SX_ERR_IO;
            }
        }
        if (rc == SX_OK) {
            /* Each shard's token holder arms its timer from now on
             * (sx_shard_fd_timer_locked). Fired at once, so the first
             * progress call arms it for timers already pending; the
             * deadline is written before the fd is published, and no
             * holder touches it until it sees the fd. */
            for (unsigned i = 0; i < e->nshards; i++) {
                struct itimerspec now = {.it_value = {.tv_nsec = 1}};
                e->shards[i]->fd_timer_at = 0;
                (void)timerfd_settime(timers[i], 0, &now, NULL);
                atomic_store_explicit(&e->shards[i]->fd_timer, timers[i], memory_order_release);
            }
            e->event_fd = epfd;
        } else {
            sx_error("progress", "sx_engine_fd: cannot set up its epoll set and timers: %s",
                     strerror(errno));
            for (unsigned i = 0; timers != NULL && i < e->nshards; i++)
                if (timers[i] >= 0)
                    close(timers[i]);
            if (epfd >= 0)
                close(epfd);
        }
        free(timers);
    }
    if (rc == SX_OK)
        *fd_p = e->event_fd;
    pthread_mutex_unlock(&e->event_fd_lock);
    sx_global_exit(e);
    return rc;
}
