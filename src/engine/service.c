/* SPDX-License-Identifier: BSD-3-Clause */
/* The engine's service: liveness without the caller; see service.h. */
#include "engine/service.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <shardx.h>

#include "common/log.h"
#include "common/time.h"
#include "engine/engine.h"
#include "shard/shard.h"

/* Longest sleep while serving with no timer due: traffic and callers wake
 * it sooner; this only bounds what an interface that announced nothing
 * could hide. */
#define SX_SERVICE_SLEEP_MAX_NS (1000ull * 1000000ull)

static void sx_service_arm(sx_service_t *svc, uint64_t at)
{
    struct itimerspec its = {.it_value = sx_ns_to_ts(at ? at : 1)};
    if (timerfd_settime(svc->timerfd, TFD_TIMER_ABSTIME, &its, NULL) != 0)
        sx_debug("service", "timerfd_settime: %s", strerror(errno));
}

/*
 * A push while the service sleeps serving: its timer now fires at `until`
 * (sx_service_push), so its published wake-up, which kickers read
 * (env.svc_asleep_until), comes down to `until` too. Kickers leave the
 * service alone while `until` is ahead (wake.c); without this a send right
 * after the push saw the service's own later wake-up (its one-second cap)
 * and no sign that it would wake at `until` (TSan's test_progress_ofi,
 * test_service_wakes_for_a_callers_timer, on the first version of the
 * kickers' rule). The fence pairs with the service's after it publishes a
 * wake-up (sx_service_main): either this load sees that wake-up and lowers
 * it, or the service sees the new `until` and does not sleep serving. A
 * wake-up of 0 (not serving) or UINT64_MAX (mid-pass) stays. Returns
 * whether the service sleeps serving.
 */
static bool sx_service_lower_asleep(sx_service_t *svc, uint64_t until)
{
    _Atomic uint64_t *asleep = svc->engine->env.svc_asleep_until;

    atomic_thread_fence(memory_order_seq_cst);
    uint64_t cur = atomic_load_explicit(asleep, memory_order_acquire);
    while (cur != 0 && cur != UINT64_MAX && sx_u64_before(until, cur) &&
           !atomic_compare_exchange_weak_explicit(asleep, &cur, until, memory_order_release,
                                                  memory_order_acquire))
        ;
    return cur != 0 && cur != UINT64_MAX;
}

void sx_service_push(void *arg, uint64_t now)
{
    sx_service_t *svc = arg;
    uint64_t old = atomic_load_explicit(&svc->until, memory_order_relaxed);
    uint64_t until = now + svc->idle_ns;

    /* One caller of the many that may see the deadline near moves it;
     * should two timer updates land in the other order, the service wakes
     * early, sees `until` and sleeps again. Arming for `until` alone also
     * drops a flush of held sx_sendi messages asked for earlier: the
     * caller's pass that pushes flushes its shard's on leaving, and a
     * service woken for each hold while callers are active took the
     * shards' tokens from them (arming the earlier of the two took
     * `mpi_bench rate` over the BTL from 2.1-2.4 to 0.86-1.19 million
     * 8-byte messages/s). What another shard's caller's push delays waits
     * for that shard's caller or a visit (the note on issue 22 says so). */
    if (sx_u64_before(old, until) &&
        atomic_compare_exchange_strong_explicit(&svc->until, &old, until, memory_order_relaxed,
                                                memory_order_relaxed)) {
        /* A service that sleeps serving watches the interfaces, so every
         * datagram the returned caller reads first wakes it for nothing:
         * a context switch on the caller's core per datagram, for as
         * long as that sleep lasts (up to SX_SERVICE_SLEEP_MAX_NS; 224
         * wake-ups a run of sx_bench latency, whose floor blocks let the
         * service serve: perf, sched_wakeup). Woken once now, it finds `until`
         * ahead, takes the interfaces out and arms its timer for `until`
         * itself (sx_service_main), so that wake-up is the one arm this
         * push needs. A service that does not sleep serving (asleep on
         * an earlier `until`, mid-pass, or about to publish a wake-up,
         * which then sees this `until`) gets the timer moved to it. */
        sx_service_arm(svc, sx_service_lower_asleep(svc, until) ? 0 : until);
    }
}

/* The earlier of `until` and a flush asked for, for the timer. */
static uint64_t sx_service_next_wake(sx_service_t *svc)
{
    uint64_t until = atomic_load_explicit(&svc->until, memory_order_relaxed);
    uint64_t at = atomic_load_explicit(&svc->flush_at, memory_order_relaxed);
    return at != 0 && sx_u64_before(at, until) ? at : until;
}

void sx_service_hold(void *arg, uint64_t at)
{
    sx_service_t *svc = arg;
    uint64_t old = atomic_load_explicit(&svc->flush_at, memory_order_relaxed);

    while (old == 0 || sx_u64_before(at, old)) {
        if (atomic_compare_exchange_weak_explicit(&svc->flush_at, &old, at, memory_order_relaxed,
                                                  memory_order_relaxed)) {
            /* The service arms its timer and then looks at flush_at again
             * (sx_service_main), so one of the two arms sees the other. */
            sx_service_arm(svc, sx_service_next_wake(svc));
            return;
        }
    }
}

/* Reads a timer's expirations (the callers' timer, or the kick's), so
 * that it stops being readable. */
static void sx_service_drain(int fd)
{
    uint64_t v;
    if (read(fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
        sx_debug("service", "timerfd read: %s", strerror(errno));
}

static void sx_service_wait(sx_service_t *svc, uint64_t timeout_ns)
{
    struct epoll_event ev[8];
    int n = sx_engine_epoll_wait_ns(svc->epfd, ev, 8, timeout_ns);
    for (int i = 0; i < n; i++) {
        if (ev[i].data.fd == svc->timerfd || ev[i].data.fd == svc->engine->env.svc_kickfd)
            sx_service_drain(ev[i].data.fd);
    }
}

/* Puts the shards' interfaces in the epoll set, or takes them out: in
 * only while serving (service.h says why). */
static void sx_service_watch(sx_service_t *svc, bool on)
{
    struct sx_engine *e = svc->engine;

    if (svc->watching == on)
        return;
    for (unsigned i = 0; i < e->nshards; i++) {
        int rc = on ? sx_engine_epoll_add_shard(svc->epfd, e->shards[i])
                    : sx_engine_epoll_del_shard(svc->epfd, e->shards[i]);
        if (rc != SX_OK)
            sx_debug("service", "shard %u: epoll_ctl: %s", i, strerror(errno));
    }
    svc->watching = on;
}

/* One pass over every shard; returns the earliest timer among them, and
 * in *busy_p whether a shard's token was held by another thread. */
static uint64_t sx_service_pass(struct sx_engine *e, bool *busy_p)
{
    uint64_t next = UINT64_MAX;

    *busy_p = false;
    for (unsigned i = 0; i < e->nshards; i++) {
        uint64_t n;
        /* The global baseline takes its lock here too, as any entry does. */
        sx_global_enter(e);
        if (sx_shard_serve(e->shards[i], &n) < 0)
            *busy_p = true;
        sx_global_exit(e);
        if (n < next)
            next = n;
    }
    return next;
}

static void *sx_service_main(void *arg)
{
    struct sx_engine *e = arg;
    sx_service_t *svc = e->service;

    /* Named for top -H and perf: users see what runs beside them. */
    (void)pthread_setname_np(pthread_self(), "sx-service");
    _Atomic uint64_t *asleep = e->env.svc_asleep_until;

    /* Every token tenure of this thread defers callbacks (shard.h). */
    sx_shard_set_service_thread(true);
    while (!atomic_load_explicit(&svc->stop, memory_order_acquire)) {
        uint64_t now = sx_time_ns();
        uint64_t until = atomic_load_explicit(&svc->until, memory_order_relaxed);
        uint64_t at = atomic_load_explicit(&svc->flush_at, memory_order_relaxed);
        if (at != 0 && !sx_u64_before(now, at) && sx_u64_before(now, until)) {
            /* Messages sx_sendi held back are due and their callers have
             * not come back to progress: one pass sends them (each
             * shard's leave flushes). A shard whose token a caller holds
             * is flushed when that caller leaves, unless it holds more
             * back: try again, less eagerly than the hold itself, so a
             * callback that computes with the token is not polled at the
             * hold's pace. */
            atomic_store_explicit(&svc->flush_at, 0, memory_order_relaxed);
            bool busy;
            (void)sx_service_pass(e, &busy);
            if (busy)
                sx_service_hold(svc, sx_time_ns() + 8 * svc->hold_ns);
            continue;
        }
        if (sx_u64_before(now, until)) {
            /* Callers are active: sleep on the timer they keep pushing, or
             * until held messages are due. */
            sx_service_watch(svc, false);
            sx_service_arm(svc, until);
            uint64_t wake = sx_service_next_wake(svc);
            if (wake != until)
                sx_service_arm(svc, wake);
            sx_service_wait(svc, UINT64_MAX);
            continue;
        }
        sx_stat_add(&svc->wakeups, 1);
        bool busy;
        /* Serving: every pass flushes what was held. From here on another
         * thread's tenure that arms a timer kicks the service (env.h):
         * stored before the pass's tenures, so a tenure after ours on a
         * shard sees it (through the token), and one before is in the
         * pass. */
        atomic_store_explicit(asleep, UINT64_MAX, memory_order_release);
        atomic_store_explicit(&svc->flush_at, 0, memory_order_relaxed);
        uint64_t next = sx_service_pass(e, &busy);
        now = sx_time_ns();
        if (sx_u64_before(now, atomic_load_explicit(&svc->until, memory_order_relaxed))) {
            atomic_store_explicit(asleep, 0, memory_order_release);
            continue; /* a caller came back meanwhile */
        }
        uint64_t wait = SX_SERVICE_SLEEP_MAX_NS;
        if (busy)
            wait = svc->idle_ns / 2;
        wait = sx_wait_ns(now, next, wait);
        /* Publish the wake-up, unless a kick during the pass asked for an
         * earlier one: then sleep until that (its kicker armed nothing). */
        uint64_t wake = now + wait, cur = UINT64_MAX;
        while (wake < cur && !atomic_compare_exchange_weak_explicit(
                                 asleep, &cur, wake, memory_order_release, memory_order_relaxed))
            ;
        if (cur < wake)
            wait = cur > now ? cur - now : 0;
        /* A caller that came back between the look at `until` above and
         * the publication pushed it without seeing the wake-up (the other
         * side of sx_service_lower_asleep): callers are active, so the
         * service does not sleep serving. */
        atomic_thread_fence(memory_order_seq_cst);
        if (sx_u64_before(now, atomic_load_explicit(&svc->until, memory_order_relaxed))) {
            atomic_store_explicit(asleep, 0, memory_order_release);
            continue;
        }
        /* A shard whose token another thread holds (a callback that
         * computes, a long send) cannot be served now, and its interfaces
         * stay readable: watching them would spin. Retry on the timer
         * alone, twice per SX_SERVICE_US. */
        if (wait > 0) {
            sx_service_watch(svc, !busy);
            sx_service_wait(svc, wait);
        }
        atomic_store_explicit(asleep, 0, memory_order_release);
    }
    return NULL;
}

static void sx_service_free(sx_service_t *svc)
{
    int fds[3] = {svc->timerfd, svc->stopfd, svc->epfd};
    for (unsigned i = 0; i < 3; i++) {
        if (fds[i] >= 0)
            close(fds[i]);
    }
    free(svc);
}

int sx_service_start(struct sx_engine *e)
{
    if (e->cfg.service_us == 0 || e->cfg.progress == SX_PROGRESS_THREAD)
        return SX_OK;
    sx_service_t *svc = calloc(1, sizeof(*svc));
    if (svc == NULL)
        return SX_ERR_NO_MEMORY;
    svc->engine = e;
    svc->idle_ns = e->cfg.service_us * 1000u;
    svc->hold_ns = e->cfg.sendi_hold_us * 1000u;
    atomic_init(&svc->flush_at, 0);
    svc->timerfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    /* The engine's, not the service's: closed with the engine (env.h). */
    e->env.svc_kickfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    svc->stopfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    svc->epfd = epoll_create1(EPOLL_CLOEXEC);
    atomic_init(&svc->stop, false);
    /* A new engine gets SX_SERVICE_US to call in before it is served:
     * until then nobody answers its peers (start-up skew, DESIGN.md
     * section 3). */
    atomic_init(&svc->until, sx_time_coarse_ns() + svc->idle_ns);
    int rc = SX_OK;
    if (svc->timerfd < 0 || e->env.svc_kickfd < 0 || svc->stopfd < 0 || svc->epfd < 0 ||
        sx_engine_epoll_add_fd(svc->epfd, svc->timerfd) != SX_OK ||
        sx_engine_epoll_add_fd(svc->epfd, e->env.svc_kickfd) != SX_OK ||
        sx_engine_epoll_add_fd(svc->epfd, svc->stopfd) != SX_OK)
        rc = SX_ERR_IO;
    /* Try the interfaces once, so that a failure shows here and not in
     * the thread; out again until the service serves. */
    for (unsigned i = 0; rc == SX_OK && i < e->nshards; i++) {
        rc = sx_engine_epoll_add_shard(svc->epfd, e->shards[i]);
        if (rc == SX_OK)
            rc = sx_engine_epoll_del_shard(svc->epfd, e->shards[i]);
    }
    if (rc != SX_OK) {
        sx_error("service",
                 "cannot set up the engine's service thread (timerfd, eventfd, "
                 "epoll): %s",
                 strerror(errno));
        sx_service_free(svc);
        return rc;
    }
    e->service = svc;
    /* Callers' progress passes keep the service away (shard/env.h); set
     * before the thread starts, and before any caller can progress. */
    e->env.svc_half_ns = svc->idle_ns / 2;
    e->env.svc_push = sx_service_push;
    e->env.svc_hold = sx_service_hold;
    e->env.sendi_hold_ns = svc->hold_ns;
    e->env.svc_arg = svc;
    e->env.svc_until = &svc->until;
    /* The thread takes no signals; they belong to the application. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int err = pthread_create(&svc->tid, NULL, sx_service_main, e);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err != 0) {
        sx_error("service", "cannot start the engine's service thread: %s", strerror(err));
        e->env.svc_until = NULL;
        e->env.sendi_hold_ns = 0;
        e->service = NULL;
        sx_service_free(svc);
        return SX_ERR_NO_MEMORY;
    }
    svc->started = true;
    return SX_OK;
}

void sx_service_stop(struct sx_engine *e)
{
    sx_service_t *svc = e->service;

    if (svc == NULL)
        return;
    atomic_store_explicit(&svc->stop, true, memory_order_release);
    uint64_t one = 1;
    if (write(svc->stopfd, &one, sizeof(one)) != (ssize_t)sizeof(one))
        sx_warn("service", "cannot wake the service thread: %s", strerror(errno));
    if (svc->started)
        pthread_join(svc->tid, NULL);
    atomic_store_explicit(e->env.svc_asleep_until, 0, memory_order_release); /* no more kicks */
    e->env.svc_until = NULL; /* no caller pushes a service that is gone */
    e->env.sendi_hold_ns = 0;
    e->service = NULL;
    sx_service_free(svc);
}
