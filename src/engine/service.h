/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The engine's service: liveness without the caller (DESIGN.md section 3).
 *
 * A peer must fail only when its library stops answering, never because
 * its application computes (TCP's kernel acknowledges while the
 * application runs; UCX's UD transport has an asynchronous progress
 * context for the same reason). So one thread per engine serves the
 * shards while no caller has called sx_progress() for SX_SERVICE_US: it
 * receives and acknowledges, retransmits, answers connection requests and
 * probes, and keeps what arrives for the next caller (shard.h's deferred
 * lists); it never runs a callback. Not started with SX_PROGRESS=thread,
 * whose threads progress every shard already, nor with SX_SERVICE_US=0.
 *
 * Callers keep it away at the cost of a load and a compare per progress
 * pass (sx_shard_progress, with the time it reads anyway, through the
 * shards' env: svc_until, svc_push) and a timerfd_settime(2) at most
 * twice per SX_SERVICE_US: each pushes `until` forward when less than
 * half of it is left, and the service sleeps on that timer, so it does
 * not wake at all while callers are active. Once it serves, it sleeps in
 * epoll on the shards' interfaces until their earliest timer (at most a
 * second), so an idle engine wakes it only for its timers and traffic.
 * A caller that comes back wakes it once (its push arms the timer to fire
 * at once), and it takes the interfaces out and sleeps on `until`: left
 * in, every datagram that the caller reads first woke it for nothing,
 * on a bound caller's own core (test_progress,
 * test_service_unwatches_once_its_caller_is_back). A caller that
 * sends without progressing (it computes) arms a timer that pass did not
 * see; its tenure kicks the service for it (shard/env.h,
 * svc_asleep_until, and src/shard/wake.c).
 *
 * The interfaces are in its epoll set only while it serves: a socket that
 * an epoll set watches costs every arriving packet a wake-up callback
 * under the set's lock (one more level for udp's own epoll fd), which
 * `sx_bench mt` measured at about 4 % of the message rate on the 2-core
 * VM when the set held them for the engine's whole life.
 *
 * Synchronization:
 *
 *   field / function       | written or called by   | how
 *   -----------------------+------------------------+------------------------------
 *   until                  | callers (push), any    | relaxed load; CAS to move it
 *   flush_at               | callers (hold), the    | relaxed; CAS to move it earlier,
 *                          | service thread         | exchange to take it
 *   timerfd                | callers (push) and the | timerfd_settime, any thread
 *                          | service thread         |
 *   env.svc_asleep_until   | the service thread;    | release stores; kickers
 *                          | kickers and pushes     | and pushes acquire, CAS it
 *                          | lower it               | down (a push after a seq_cst
 *                          |                        | fence, as the service's look
 *                          |                        | at `until` after publishing)
 *   env.svc_kickfd         | kickers (wake.c)       | timerfd_settime, any thread;
 *                          |                        | re-armed earlier after a race
 *   epfd, watching         | the service thread     | epoll_ctl (start: creation)
 *   wakeups                | the service thread     | sx_stat_add; read by any
 *   sx_service_start/stop  | engine create/destroy  |
 */
#ifndef SX_ENGINE_SERVICE_H
#define SX_ENGINE_SERVICE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/stat.h"

struct sx_engine;

typedef struct sx_service {
    _Atomic uint64_t until; /* callers keep the service away until then (ns) */
    uint64_t idle_ns;       /* SX_SERVICE_US */
    /* Held sx_sendi messages (SX_SENDI_HOLD_US) must leave by then (ns;
     * 0: nothing asked): the service flushes the shards at that time,
     * callers or not. */
    _Atomic uint64_t flush_at;
    uint64_t hold_ns; /* SX_SENDI_HOLD_US */
    int timerfd;      /* fires at `until` */
    int stopfd;       /* eventfd: destruction */
    int epfd;         /* timerfd, stopfd; the shards' interfaces while serving */
    bool watching;    /* the shards' interfaces are in epfd (service thread) */
    pthread_t tid;
    bool started;
    atomic_bool stop;
    sx_stat_t wakeups; /* passes over the shards, each after a wake-up */
    struct sx_engine *engine;
} sx_service_t;

/** Starts the service when the configuration asks for one; at creation,
 *  after the shards exist. */
int sx_service_start(struct sx_engine *engine);

/** Stops and joins it; first thing at destruction. */
void sx_service_stop(struct sx_engine *engine);

/** Moves `until` to @p now plus SX_SERVICE_US and the timer with it
 *  (the shards' env svc_push, with the service as its argument). Any
 *  thread. */
void sx_service_push(void *svc, uint64_t now);

/** Asks the service to flush every shard at @p at at the latest (the
 *  shards' env svc_hold: messages sx_sendi held back). Any thread. */
void sx_service_hold(void *svc, uint64_t at);

#endif /* SX_ENGINE_SERVICE_H */
