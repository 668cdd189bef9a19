/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What an engine gives its shards: the channel protocol's settings, the
 * engine's epoch, and the three tables its receive paths read (peers,
 * handlers, registered memory). The engine fills it at creation; shards
 * and channels only read it.
 *
 * Synchronization:
 *
 *   field          | written                      | read
 *   ---------------+------------------------------+---------------------------
 *   conf, epoch,   | engine creation only         | any thread, no lock
 *   nshards        |                              |
 *   peers          | see shard/peer.h             | receive paths, under RCU
 *   handlers       | see shard/handlers.h         | receive paths (acquire)
 *   mem            | see shard/mem.h              | the RMA target, under RCU
 *   svc_*          | engine creation, before the  | callers' progress passes
 *                  | service thread starts        | (*svc_until: relaxed load)
 */
#ifndef SX_SHARD_ENV_H
#define SX_SHARD_ENV_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shard/auth.h"

struct sx_peer_table;
struct sx_handlers;
struct sx_mem_table;
struct sx_cc_table;

/* Most message frames one data packet carries (aggregation, DESIGN.md §4). */
#define SX_PKT_MAX_FRAMES 64

/* The channel protocol's settings (DESIGN.md section 4), from the
 * configuration; the same for every channel of an engine. */
typedef struct sx_chan_conf {
    uint32_t window;     /* packets per channel, a power of two */
    size_t max_inflight; /* unacknowledged bytes per channel */
    uint64_t ack_delay_ns;
    unsigned ack_every;
    uint64_t rto_min_ns;
    uint64_t rto_max_ns;
    uint64_t rto_init_ns;
    bool tlp; /* SX_TLP: tail loss probes (chan_tlp.c) */
    uint64_t peer_timeout_ns;
    uint64_t connect_timeout_ns;
    bool checksum;
    bool check_source;   /* SX_CHECK_SOURCE: drop_source for datagrams from elsewhere */
    unsigned max_frames; /* frames per packet: SX_PKT_MAX_FRAMES; 1 when SX_AGGREGATE=no */
    uint64_t max_msg;
    int cc_mode;          /* SX_CONGESTION: SX_CC_AUTO, _ON, _OFF (shard/cc.h) */
    uint64_t cc_delay_ns; /* SX_CONGESTION_DELAY_US: the delay signal's target; 0 off */
} sx_chan_conf_t;

typedef struct sx_shard_env {
    sx_chan_conf_t conf;
    uint64_t epoch;   /* the engine's, random at creation */
    unsigned nshards; /* shards of the engine */
    struct sx_peer_table *peers;
    struct sx_handlers *handlers;
    struct sx_mem_table *mem;
    struct sx_cc_table *cc; /* congestion controllers (shard/cc.h): their own atomics */
    /* The engine's service (engine/service.h), when it runs: a caller's
     * progress pass keeps it away, calling svc_push when less than
     * svc_half_ns is left before *svc_until. NULL svc_until: no service. */
    _Atomic uint64_t *svc_until;
    uint64_t svc_half_ns;
    void (*svc_push)(void *svc_arg, uint64_t now);
    void *svc_arg;
    /* SX_SENDI_HOLD_US, when the service runs (0: off): how long sx_sendi
     * may hold messages back; svc_hold asks the service to flush the
     * shards by the given time. */
    uint64_t sendi_hold_ns;
    void (*svc_hold)(void *svc_arg, uint64_t at);
    /* While the service sleeps serving (no caller's progress pass came for
     * SX_SERVICE_US), when it will wake (ns): computed from the timers its
     * last pass saw; UINT64_MAX during the pass; 0 otherwise, and always
     * without a service. A tenure (not a progress pass) that arms an
     * earlier timer of its shard lowers it and arms svc_kickfd, a timerfd
     * in the service's epoll set, for that time
     * (sx_shard_kick_service_locked, wake.c): the retransmission of a rank
     * that sends and then computes waited up to the service's one-second
     * cap. Not while *svc_until is ahead: a caller's push then armed the
     * service's timer for `until` and lowered this to it (service.c).
     * Both live as long as the engine, not the service: a thread of the
     * engine's (OOB, rdmacm) may kick while the service stops. The service
     * stores with release, kickers load with acquire (kickfd was set
     * before the service thread started). Never NULL: the engine's. */
    _Atomic uint64_t *svc_asleep_until;
    int svc_kickfd; /* -1: no service */
    /* SX_AUTH: the key every network datagram is sealed and checked with
     * (shard/auth.h). */
    sx_auth_t auth;
} sx_shard_env_t;

#endif /* SX_SHARD_ENV_H */
