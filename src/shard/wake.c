/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What sleeps on a shard and must be woken by its token holder when the
 * holder's tenure changes what the sleeper waited for (shard.c's flush
 * hook calls these): sx_engine_fd's timer, the engine's service while it
 * serves, and a sleeping progress thread's interfaces. Token holder only.
 */
#include "shard/shard.h"

#include <shardx.h>
#include <errno.h>
#include <string.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/time.h"
#include "shard/env.h"

/* Arms timerfd @p fd for @p at, on CLOCK_MONOTONIC (the wheel's clock,
 * sx_time_ns), absolute; 0 would disarm it, so 1. False, logged for
 * @p what, when the kernel refused. */
static bool timer_arm_at(const sx_shard_t *shard, int fd, uint64_t at, const char *what)
{
    struct itimerspec its = {.it_value = sx_ns_to_ts(at != 0 ? at : 1)};
    if (timerfd_settime(fd, TFD_TIMER_ABSTIME, &its, NULL) == 0)
        return true;
    sx_debug("shard", "shard %u: %s: timerfd_settime: %s", shard->index, what, strerror(errno));
    return false;
}

/*
 * Keeps the shard's sx_engine_fd timer armed for its earliest timer (the
 * token holder's, at every release). A timer that fired is read, so the
 * engine fd stops being readable once a caller has run what was due. It
 * is re-armed only for an earlier deadline (one too early costs a wasted
 * pass; one per later retransmission deadline, a system call per send).
 * The service may drain the datagram (or read the expiration) that woke
 * the loop, and keep what came for a caller (the deferred lists): then it
 * fires the timer at once (docs/design.md, section 4). So does any holder
 * that leaves the lists non-empty: a caller's pass that handed up only
 * part of a backlog (sx_handup_t), and a caller's send, whose release read
 * the expiration the service had fired while the work still waits.
 */
void sx_shard_fd_timer_locked(sx_shard_t *shard)
{
    int fd = atomic_load_explicit(&shard->fd_timer, memory_order_acquire);
    uint64_t next;

    if (fd < 0)
        return;
    if (shard->fd_timer_at != UINT64_MAX && shard->fd_timer_at <= sx_time_ns()) {
        uint64_t expirations;
        if (read(fd, &expirations, sizeof(expirations)) < 0 && errno != EAGAIN)
            sx_debug("shard", "shard %u: timerfd read: %s", shard->index, strerror(errno));
        shard->fd_timer_at = UINT64_MAX;
    }
    if (shard->deferred)
        next = 0; /* due now: a caller has work waiting */
    else if (sx_wheel_next_deadline(shard->wheel, &next) != SX_OK)
        return;
    if (next >= shard->fd_timer_at)
        return;
    if (timer_arm_at(shard, fd, next, "sx_engine_fd timer"))
        shard->fd_timer_at = next;
}

/* Whether an interface holds what its fd will not announce (udp: the
 * rest of a GRO read this tenure polled): a thread asleep on the fds
 * would not see it. */
bool sx_shard_ifaces_hold_locked(sx_shard_t *shard)
{
    for (unsigned t = 0; t < SX_SHARD_TL_COUNT; t++) {
        sx_tl_iface_t *iface = shard->ifaces[t];
        if (iface != NULL && iface->ops->arm != NULL && iface->ops->arm(iface) != SX_OK)
            return true;
    }
    return false;
}

/*
 * The service sleeps serving (no caller's progress pass came for
 * SX_SERVICE_US) until a time computed from the timers its last pass saw.
 * This tenure, not a progress pass (a send from a thread that then
 * computes, the OOB thread's answer that lets a new channel's queued
 * messages go), may have armed an earlier one, a retransmission deadline:
 * lower the published wake-up to it and arm the kick timer, or a lost
 * packet waits for the service's one-second cap instead of its RTO.
 *
 * The deadline is the earliest one added to the wheel since the service's
 * last tenure here (sx_wheel_take_added_min; the service's tenures take
 * it too): exact, where sx_wheel_next_deadline gives a slot's start, in
 * the past when the wheel's clock was last advanced long ago (a service
 * that slept), and a first version that skipped past deadlines missed
 * the kick (TSan's test_progress). One already due wakes the service now;
 * later ones in the same sleep are no earlier than that, so they arm
 * nothing. Progress passes never kick (shard.c's flush hook): a caller
 * that progresses keeps the service away anyway, and kicks from callers'
 * passes, for overdue deadlines, brought the service to take the shard's
 * token from its busy caller over and over (TSan's test_am refusal flood,
 * on the first version). During the service's pass (UINT64_MAX) a kick
 * only lowers the time the service then sleeps to. Two kickers may arm
 * the timer in the other order than they lowered the time: each looks
 * again after arming, and arms the earlier time it finds. A later arming
 * that replaces an earlier one loses nothing: the wake-up's pass looks at
 * every shard's timers.
 *
 * Nor is the service kicked while a caller's progress pass came within
 * SX_SERVICE_US (*svc_until is ahead): a service woken then only sees
 * `until` ahead and goes back to sleep on the timer that pass armed for
 * it (service.c), which the push also published as its wake-up
 * (sx_service_lower_asleep), so the kick would buy nothing. It cost
 * plenty: after a spell of serving, the service's wake-up was often past
 * while its thread waited for the CPU that its own busy-polling caller
 * held, and every send of that caller armed the kick again (the branch
 * for a past wake-up below), a timerfd_settime(2) per message for a
 * millisecond or more. sx_bench latency, whose floor blocks let the
 * service serve between its own, made 361 and 193 of them on its two
 * ranks in a run of 2,000 round trips (perf, syscall tracepoints).
 */
void sx_shard_kick_service_locked(sx_shard_t *shard)
{
    _Atomic uint64_t *asleep = shard->env->svc_asleep_until;
    uint64_t at = sx_wheel_take_added_min(shard->wheel);
    uint64_t old = atomic_load_explicit(asleep, memory_order_acquire);

    if (at == UINT64_MAX || old == 0)
        return;
    uint64_t now = sx_time_ns();
    if (shard->env->svc_until != NULL &&
        sx_u64_before(now, atomic_load_explicit(shard->env->svc_until, memory_order_relaxed)))
        return;
    if (at < now)
        at = now;
    if (at >= old) {
        /* The service wakes first, unless its wake-up is past: then it is
         * waking now, and its pass may find this shard busy (this tenure)
         * and sleep half of SX_SERVICE_US; the timer covers it. */
        if (old != UINT64_MAX && old <= now)
            (void)timer_arm_at(shard, shard->env->svc_kickfd, at, "service kick");
        return;
    }
    while (at < old && old != 0) {
        if (!atomic_compare_exchange_weak_explicit(asleep, &old, at, memory_order_acquire,
                                                   memory_order_acquire))
            continue;
        if (old == UINT64_MAX)
            return; /* mid-pass: the service sleeps no later than this */
        uint64_t armed = at, cur;
        (void)timer_arm_at(shard, shard->env->svc_kickfd, armed, "service kick");
        while ((cur = atomic_load_explicit(asleep, memory_order_acquire)) != 0 &&
               cur != UINT64_MAX && cur < armed) {
            armed = cur;
            (void)timer_arm_at(shard, shard->env->svc_kickfd, armed, "service kick");
        }
        return;
    }
}
