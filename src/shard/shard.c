/* SPDX-License-Identifier: BSD-3-Clause */
/* Shard lifetime, progress and receive dispatch (shard_tx.c flushes); see shard.h. */
#include "shard/shard.h"

#include <shardx.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "common/hot.h"
#include "common/le.h"
#include "common/log.h"
#include "locks/rcu_table.h"
#include "common/time.h"
#include "shard/chan.h"
#include "shard/conn.h"
#include "shard/handlers.h"
#include "shard/mem.h"
#include "shard/peer.h"

static void sx_shard_on_evict(void *occupant, void *arg)
{
    sx_shard_t *shard = arg;
    sx_shard_guest_t *guest = occupant;

    guest->on_evict(shard, guest);
}

void sx_shard_wake(sx_shard_t *shard)
{
    uint64_t one = 1;

    if (shard->wake_fd >= 0 && write(shard->wake_fd, &one, sizeof(one)) < 0)
        sx_debug("shard", "shard %u: eventfd write failed", shard->index);
}

/* The engine's service thread and its other threads (shard.h), whose
 * token tenures run no callback. */
static _Thread_local bool sx_shard_on_service_thread;
static _Thread_local bool sx_shard_on_engine_thread;
static _Thread_local bool sx_shard_deferring;

void sx_shard_set_service_thread(bool on)
{
    sx_shard_on_service_thread = on;
}

void sx_shard_set_engine_thread(void)
{
    sx_shard_on_engine_thread = true;
}

void sx_shard_set_deferring(bool on)
{
    sx_shard_deferring = on;
}

/* Called by every thread that takes the token, before it runs anything. */
SX_HOT_PASS static void sx_shard_acquire_hook(void *owner)
{
    sx_shard_t *shard = owner;

    shard->serving = sx_shard_on_service_thread || sx_shard_on_engine_thread || sx_shard_deferring;
}

/* Called by every token holder before it releases the token. */
SX_HOT_PASS static void sx_shard_flush_hook(void *owner)
{
    sx_shard_t *shard = owner;
    uint64_t next;

    if (shard->hold_flush)
        shard->hold_flush = false; /* SX_SEND_MORE: the caller has more to add */
    else
        sx_shard_flush_locked(shard);
    /* The service sleeps until the earliest timer, which this flush may
     * just have armed (a retransmission deadline), or at once, when an
     * interface holds what its fd will not announce (udp: the rest of a
     * GRO read). The service's own tenures note it: it reads the note
     * after its pass (sx_shard_serve). Another thread's tenure, unless a
     * caller's progress pass, kicks the service, should it sleep serving
     * past a timer the tenure armed (wake.c). */
    bool pass = shard->pass_tenure;
    shard->pass_tenure = false;
    if (sx_shard_on_service_thread) {
        if (sx_wheel_next_deadline(shard->wheel, &next) != SX_OK)
            next = UINT64_MAX;
        if (sx_shard_ifaces_hold_locked(shard))
            next = 0;
        shard->svc_next_ns = next;
        (void)sx_wheel_take_added_min(shard->wheel); /* seen: the kick's mark (wake.c) */
    } else if (!pass && shard->env != NULL &&
               atomic_load_explicit(shard->env->svc_asleep_until, memory_order_relaxed) != 0) {
        sx_shard_kick_service_locked(shard); /* rarely: the service serves */
    }
    /* Only with sx_engine_fd in use: no call otherwise (a hot path). */
    if (atomic_load_explicit(&shard->fd_timer, memory_order_relaxed) >= 0)
        sx_shard_fd_timer_locked(shard);
    /* A sleeping progress thread computed its wake-up before we armed our
     * timers: wake it if one of ours is due earlier, or if this tenure's
     * poll left datagrams in an interface's buffers. The thread published
     * `sleeping` before it released the token we now hold (acquire/release
     * through the token), so we cannot miss it. Likewise when work waits
     * on the deferred lists: callbacks an engine thread deferred for it
     * (SX_PROGRESS=thread has no service, but the OOB thread may take the
     * token), or a backlog that a caller's pass left to the next one
     * (sx_handup_t). */
    if (atomic_load_explicit(&shard->sleeping, memory_order_relaxed) &&
        (shard->deferred ||
         (sx_wheel_next_deadline(shard->wheel, &next) == SX_OK &&
          next < atomic_load_explicit(&shard->sleep_until_ns, memory_order_relaxed)) ||
         sx_shard_ifaces_hold_locked(shard)))
        sx_shard_wake(shard);
}

bool sx_shard_prepare_sleep(sx_shard_t *shard, uint64_t *timeout_ns_p)
{
    uint64_t next;

    if (!sx_delegate_enter(&shard->token, &shard->inbox, shard, NULL))
        return false;
    /* An interface whose fd needs arming (libfabric's fi_trywait) may have
     * something that its fd will not announce, and an engine thread may
     * have deferred callbacks since the last pass: poll again instead. */
    bool armed = !shard->deferred;
    for (unsigned t = 0; t < SX_SHARD_TL_COUNT && armed; t++) {
        sx_tl_iface_t *iface = shard->ifaces[t];
        if (iface != NULL && iface->ops->arm != NULL)
            armed = iface->ops->arm(iface) == SX_OK;
    }
    if (!armed) {
        (void)sx_delegate_leave_locked(&shard->token, &shard->inbox, shard);
        return false;
    }
    uint64_t until = (sx_wheel_next_deadline(shard->wheel, &next) == SX_OK) ? next : UINT64_MAX;
    atomic_store_explicit(&shard->sleep_until_ns, until, memory_order_relaxed);
    atomic_store_explicit(&shard->sleeping, 1, memory_order_relaxed);
    size_t ran = sx_delegate_leave_locked(&shard->token, &shard->inbox, shard);
    if (ran > 0) {
        atomic_store_explicit(&shard->sleeping, 0, memory_order_relaxed);
        return false;
    }
    *timeout_ns_p = until;
    return true;
}

static int sx_shard_open_ifaces(sx_shard_t *s, const sx_shard_conf_t *conf)
{
    int rc = conf->net_ops->open(&conf->net_config, &s->ifaces[SX_SHARD_TL_NET]);
    if (rc != SX_OK) {
        sx_error("shard", "shard %u: cannot open the %s transport: %s", conf->index,
                 conf->net_ops->name, sx_strerror(rc));
        return rc;
    }
    rc = sx_tl_self_ops.open(&conf->self_config, &s->ifaces[SX_SHARD_TL_SELF]);
    if (rc != SX_OK)
        sx_error("shard", "shard %u: cannot open the self transport: %s", conf->index,
                 sx_strerror(rc));
    return rc;
}

int sx_shard_create(const sx_shard_conf_t *conf, sx_shard_t **shard_p)
{
    sx_shard_t *s;
    int rc;

    if (conf == NULL || shard_p == NULL || conf->tick_ns == 0 ||
        (conf->env != NULL && conf->net_ops == NULL))
        return SX_ERR_INVALID_PARAM;
    /* Aligned so the token and the inbox ends sit on their own lines, and
     * the fields before the batch (txq) on one page. */
    if (posix_memalign((void **)&s, 4096, sizeof(*s)) != 0)
        return SX_ERR_NO_MEMORY;
    memset(s, 0, sizeof(*s));
    sx_token_init(&s->token);
    sx_inbox_init(&s->inbox, sx_shard_flush_hook, sx_shard_acquire_hook);
    s->index = conf->index;
    s->core = conf->core;
    s->first_pu = conf->first_pu;
    s->numa_node = conf->numa_node;
    s->env = conf->env;
    s->seq_start = conf->seq_start;
    s->seq_random = conf->seq_random;
    s->wake_fd = -1;
    atomic_init(&s->fd_timer, -1);
    s->fd_timer_at = UINT64_MAX;
    atomic_init(&s->sleeping, 0);
    atomic_init(&s->sleep_until_ns, UINT64_MAX);
    s->cpuset = (conf->cpuset != NULL) ? hwloc_bitmap_dup(conf->cpuset) : hwloc_bitmap_alloc();
    if (s->cpuset == NULL) {
        free(s);
        return SX_ERR_NO_MEMORY;
    }
    rc = sx_wheel_init(conf->tick_ns, 0, sx_time_ns(), &s->wheel);
    if (rc == SX_OK)
        rc = sx_hotel_init(s->wheel, conf->hotel_rooms, sx_shard_on_evict, s, &s->hotel);
    if (rc == SX_OK && conf->env != NULL)
        rc = sx_shard_open_ifaces(s, conf);
    if (rc != SX_OK) {
        sx_shard_destroy(s);
        return rc;
    }
    *shard_p = s;
    return SX_OK;
}

void sx_shard_destroy(sx_shard_t *shard)
{
    if (shard == NULL)
        return;
    sx_inbox_fini(&shard->inbox, shard);
    sx_hotel_fini(shard->hotel);
    sx_wheel_fini(shard->wheel);
    while (shard->pkt_pool != NULL) {
        sx_txpkt_t *pkt = shard->pkt_pool;
        shard->pkt_pool = pkt->rtx_next;
        free(pkt);
    }
    free(shard->pkt_spare);
    sx_chan_pkt_arenas_free(shard);
    for (unsigned i = 0; i < SX_SHARD_TL_COUNT; i++) {
        if (shard->ifaces[i] != NULL)
            shard->ifaces[i]->ops->close(shard->ifaces[i]);
    }
    if (shard->wake_fd >= 0)
        close(shard->wake_fd);
    if (atomic_load(&shard->fd_timer) >= 0)
        close(atomic_load(&shard->fd_timer));
    hwloc_bitmap_free(shard->cpuset);
    free(shard);
}

SX_HOT bool sx_shard_submit_mpsc(sx_shard_t *shard, sx_inbox_req_t *req)
{
    return sx_delegate_submit_mpsc(&shard->token, &shard->inbox, shard, req);
}

void sx_shard_unlink_ready_locked(sx_shard_t *shard, struct sx_chan *chan)
{
    sx_chan_t *prev = NULL;

    if (!chan->on_ready)
        return;
    for (sx_chan_t *c = shard->ready_head; c != NULL; prev = c, c = c->ready_next) {
        if (c != chan)
            continue;
        if (prev != NULL)
            prev->ready_next = c->ready_next;
        else
            shard->ready_head = c->ready_next;
        if (shard->ready_tail == c)
            shard->ready_tail = prev;
        break;
    }
    chan->on_ready = false;
}

static void sx_shard_drop(sx_shard_t *shard, sx_drop_reason_t why)
{
    sx_stat_add(&shard->stats.drops[why], 1);
    sx_debug("shard", "shard %u: packet dropped: %s", shard->index, sx_drop_reason_text(why));
}

void sx_shard_recv_locked(sx_shard_t *shard, const uint8_t *data, size_t len)
{
    sx_shard_recv_from_locked(shard, SX_SHARD_TL_NET, data, len, NULL, 0, SX_TL_ECN_NOT_ECT);
}

SX_HOT bool sx_shard_src_ok_locked(sx_shard_t *shard, sx_chan_t *c, const void *src, size_t src_len)
{
    sx_tl_iface_t *iface = shard->ifaces[c->tl];

    /* Packets accepted only from the address the channel was set up with
     * (issue 25; TCP demultiplexes by the whole 4-tuple, RFC 9293 section
     * 3.2): a forger off the path must then spoof its source, which a
     * network with source address validation (BCP 38, RFC 2827) stops. */
    if (src == NULL || !shard->env->conf.check_source || iface->ops->src_matches == NULL ||
        iface->ops->src_matches(iface, c->dest, src, src_len))
        return true;
    sx_stat_add(&shard->stats.drops[SX_DROP_SOURCE], 1);
    char addr[96] = "?";
    if (iface->ops->dest_str != NULL)
        iface->ops->dest_str(iface, c->dest, addr, sizeof(addr));
    sx_warn_ratelimited("shard",
                        "shard %u: datagram naming %s shard %u (which we reach at %s) came from "
                        "an address its card does not offer: dropped (counter drop_source; "
                        "SX_CHECK_SOURCE=no where a NAT rewrites sources)",
                        shard->index, c->peer->name, c->lane, addr);
    return false;
}

/* The channel a checked packet belongs to, created on first use; NULL
 * with *why_p set when there is none. */
SX_HOT static sx_chan_t *sx_shard_chan_of(sx_shard_t *shard, unsigned tl, const sx_wire_hdr_t *h,
                                          sx_drop_reason_t *why_p)
{
    const sx_shard_env_t *env = shard->env;
    sx_chan_t *c = shard->rx_chan;

    /* Datagrams come in runs from one peer's shard: the last one's
     * channel, while no peer was removed since it was found (a removed
     * peer's datagrams must not find it: sx_peer_table_remove). In a
     * ping-pong the lookup below was ~290 of the ~1,150 instructions
     * from a datagram to its handler (callgrind of sx_bench latency). */
    unsigned removals = atomic_load_explicit(&env->peers->removals, memory_order_acquire);
    if (c != NULL && c->peer->epoch == h->src_epoch && c->lane == h->src_shard && c->tl == tl &&
        shard->rx_chan_removals == removals)
        return c;
    c = NULL;
    /* The peer table is read under RCU; a peer stays allocated while any
     * shard still has a channel to it, so the channel outlives the read
     * section. */
    sx_rcu_read_lock();
    struct sx_peer *peer = sx_peer_lookup_rcu(env->peers, h->src_epoch);
    if (peer == NULL)
        *why_p = SX_DROP_UNKNOWN_PEER;
    else if (h->src_shard >= peer->nshards)
        *why_p = SX_DROP_SHARD;
    else if (peer->is_self != (tl == SX_SHARD_TL_SELF))
        /* Our own packets only ever come through the self transport; one
         * with our epoch from the network is forged (and would upset the
         * self channel), and another engine's through self is impossible. */
        *why_p = SX_DROP_WRONG_IFACE;
    else if ((c = sx_chan_get_locked(shard, peer, h->src_shard)) == NULL)
        *why_p = SX_DROP_NO_BUFFER;
    sx_rcu_read_unlock(&env->peers->rcu);
    if (c != NULL) {
        shard->rx_chan = c;
        shard->rx_chan_removals = removals;
    }
    return c;
}

/* Checks an SX_AUTH tag and takes it off (*len_p); the drop reason. */
static sx_drop_reason_t sx_shard_auth_check(sx_shard_t *shard, const sx_wire_hdr_t *h,
                                            const uint8_t *data, size_t *len_p)
{
    const sx_auth_t *auth = &shard->env->auth;
    bool tagged = (h->flags & SX_PKTF_AUTH) != 0;

    if (!auth->required && !tagged)
        return SX_DROP_NONE;
    /* SX_AUTH=job before sx_engine_join brought the key: no peer can be
     * added until then, so this is a faster rank's first datagram, not a
     * forgery; its retransmission will find the key. */
    if (auth->required && !sx_auth_on(auth))
        return SX_DROP_UNKNOWN_PEER;
    if (!tagged || !auth->required || !sx_auth_check(auth, data, *len_p)) {
        sx_warn_ratelimited("shard", "shard %u: datagram dropped: %s (SX_AUTH; counter drop_auth)",
                            shard->index,
                            !auth->required ? "it carries an authentication tag and this "
                                              "engine has no key"
                            : !tagged       ? "it carries no authentication tag"
                                            : "its tag is not this job's key's (forged, "
                                              "altered, or another SX_AUTH)");
        return SX_DROP_AUTH;
    }
    *len_p -= SX_WIRE_TAG_LEN;
    return SX_DROP_NONE;
}

SX_HOT static void sx_shard_recv_any_locked(sx_shard_t *shard, unsigned tl, const uint8_t *data,
                                            size_t len, bool via_oob, const void *src,
                                            size_t src_len, uint8_t ecn, size_t landed,
                                            uint8_t *landed_at)
{
    const sx_shard_env_t *env = shard->env;
    sx_landing_t land = {
        .dst = landed_at, .len = landed, .head = shard->land_head, .region = shard->land_put};
    sx_wire_hdr_t h;

    sx_stat_add(&shard->stats.rx_packets, 1);
    if (shard->ack_held_chan != NULL)
        (void)sx_chan_ack_release_locked(shard); /* taken in order: chan.h */
    /* A datagram that landed part of itself claims to be the chunk that
     * belongs there (sx_shard_land_sort_locked); it is parsed around the
     * landing, and made whole if it is not delivered now (chan.h,
     * Landing). */
    if (landed != 0 && (landed_at == NULL || shard->land_n == 0 || tl != SX_SHARD_TL_NET)) {
        sx_shard_drop(shard, SX_DROP_NO_BUFFER); /* a landing nobody offered: a transport's bug */
        return;
    }
    sx_drop_reason_t why =
        landed == 0   ? sx_wire_parse_packet(data, len, &h)
        : land.region ? sx_wire_parse_packet_crc_checked(data, len, &h) /* by the sort */
                      : sx_wire_parse_packet_landed(data, len, land.head, land.dst, landed, &h);
    /* SX_AUTH: the tag first, before any field is believed; the rest of
     * the path sees the datagram without it. The self transport never
     * leaves the process and carries no tag. */
    if (why == SX_DROP_NONE && tl != SX_SHARD_TL_SELF)
        why = sx_shard_auth_check(shard, &h, data, &len);
    if (why == SX_DROP_NONE && h.dst_shard != shard->index)
        why = SX_DROP_SHARD;
    if (why == SX_DROP_NONE && via_oob && h.type != SX_PKT_CTRL)
        why = SX_DROP_WRONG_IFACE;
    if (why != SX_DROP_NONE) {
        sx_shard_drop(shard, why);
        return;
    }
    /* A RESET names the stale epoch in its body; the sender may be new. */
    bool reset =
        h.type == SX_PKT_CTRL && h.payload_len > 0 && data[SX_WIRE_HDR_LEN] == SX_CTRL_RESET;
    if (reset && h.dst_epoch == env->epoch) {
        sx_conn_recv_reset_locked(shard, &h, data, len, src, src_len);
        return;
    }
    if (h.dst_epoch != env->epoch) {
        /* From a peer we know, addressed to an earlier incarnation of us:
         * tell it, so it stops waiting for the dead one (but never answer
         * a RESET with one). Only from an address its card offers, as
         * every datagram that names a peer (below): else a forger off the
         * path could have us send the peer a RESET for each datagram. */
        sx_drop_reason_t ignored;
        sx_chan_t *c = (!via_oob && !reset) ? sx_shard_chan_of(shard, tl, &h, &ignored) : NULL;
        if (c != NULL && !sx_shard_src_ok_locked(shard, c, src, src_len))
            return;
        sx_shard_drop(shard, SX_DROP_STALE_EPOCH);
        if (c != NULL)
            sx_conn_stale_locked(c, &h);
        return;
    }
    sx_chan_t *c = sx_shard_chan_of(shard, tl, &h, &why);
    if (c == NULL) {
        sx_shard_drop(shard, why);
        return;
    }
    if (!sx_shard_src_ok_locked(shard, c, src, src_len))
        return;
    if (h.type == SX_PKT_DATA)
        sx_chan_cc_ecn_rx_locked(c, ecn);
    if (landed != 0 && !sx_chan_land_fits_locked(c, &h, data, &land)) {
        if (land.region) {
            sx_shard_drop(shard, SX_DROP_LANDED); /* not to be read again: chan.h, Landing */
            return;
        }
        sx_landing_undo_locked(shard, data, &land);
        landed = 0;
    }
    if (h.type == SX_PKT_CTRL)
        sx_conn_recv_ctrl_locked(c, &h, data, len);
    else if (h.flags & SX_PKTF_FRAG)
        sx_chan_recv_frag_locked(c, &h, data, len);
    else
        sx_chan_recv_locked(c, &h, data, len, landed != 0 ? &land : NULL);
}

void sx_shard_recv_from_locked(sx_shard_t *shard, unsigned tl, const uint8_t *data, size_t len,
                               const void *src, size_t src_len, uint8_t ecn)
{
    shard->rx_ns = sx_time_ns();
    shard->rx_since_ns = shard->rx_ns; /* read as it came: shard.h */
    sx_shard_recv_any_locked(shard, tl, data, len, false, src, src_len, ecn, 0, NULL);
}

void sx_shard_recv_ctrl_locked(sx_shard_t *shard, const uint8_t *data, size_t len)
{
    shard->rx_ns = sx_time_ns();
    shard->rx_since_ns = shard->rx_ns;
    /* The OOB connection is the peer's own: no datagram source to check. */
    sx_shard_recv_any_locked(shard, SX_SHARD_TL_NET, data, len, true, NULL, 0, SX_TL_ECN_NOT_ECT, 0,
                             NULL);
}

/* Polls every interface; *drained_p: whether each read its queue empty
 * (transport.h, poll: fewer events than asked, and rx_left false). */
SX_HOT_PASS static int sx_shard_poll_locked(sx_shard_t *shard, bool *drained_p)
{
    sx_tl_event_t *ev = shard->poll_ev;
    int total = 0;
    bool drained = true;

    for (unsigned t = 0; t < SX_SHARD_TL_COUNT; t++) {
        sx_tl_iface_t *iface = shard->ifaces[t];
        if (iface == NULL)
            continue;
        unsigned max = SX_SHARD_POLL_BATCH;
        bool probe = false;
        if (t == SX_SHARD_TL_NET) {
            sx_shard_land_offer_locked(shard, iface);
            if (shard->land_put && shard->land_read_max < max)
                max = shard->land_read_max; /* shard.h, land_probe */
            else if ((probe = shard->land_probe != 0 && shard->land_n == 0))
                max = 1;
        }
        int n = iface->ops->poll(iface, ev, max);
        if (probe && n > 0) /* over at a datagram with a payload: shard.h */
            shard->land_probe = ev[0].type == SX_TL_EV_RECV && ev[0].len > SX_WIRE_HDR_LEN
                                    ? 0
                                    : shard->land_probe - 1;
        if (t == SX_SHARD_TL_NET && shard->land_n != 0)
            sx_shard_land_sort_locked(shard, ev, n);
        if (n < 0) {
            sx_error("shard", "shard %u: %s interface failed: %s", shard->index, iface->ops->name,
                     sx_strerror(n));
            drained = false;
            continue;
        }
        if ((unsigned)n >= max || iface->rx_left)
            drained = false;
        if (t == SX_SHARD_TL_NET && shard->land_n != 0) {
            shard->land_ev = ev;
            shard->land_ev_n = n;
        }
        for (int i = 0; i < n; i++) {
            shard->land_ev_next = i + 1;
            if (ev[i].type == SX_TL_EV_RECV)
                sx_shard_recv_any_locked(shard, t, ev[i].data, ev[i].len, false, ev[i].src,
                                         ev[i].src_len, ev[i].ecn, ev[i].landed, ev[i].landed_at);
            else if (ev[i].type == SX_TL_EV_SEND_DONE && shard->tx_inflight[t] > 0)
                shard->tx_inflight[t]--; /* a send credit comes back */
        }
        shard->land_ev = NULL;
        total += n;
    }
    *drained_p = drained;
    return total;
}

/*
 * SX_REPOLL: a caller that spins on sx_progress waiting for a datagram
 * sees one only at the moment a read looks at the socket. One that comes
 * just after waits for the next read, and between two reads a pass also
 * runs its timers, its flush, its leave, sx_progress's tail and the
 * caller's loop, then the next pass's clock, service mark and landing
 * offer. Here an empty read takes 1.0-1.4 us and that work 0.2-0.3 us,
 * so a datagram waits for the next read on average half a cycle that is
 * a fifth longer than the raw-UDP floor's, whose loop is its read. So a
 * home pass whose read found nothing, when its caller is spinning, reads
 * again up to SX_REPOLL times with only the clock between two reads, then
 * finishes as before. Spinning: the last home pass found nothing and its
 * caller came back within SX_REPOLL_GAP_READS empty reads' time of its
 * end (the read's time, measured here, scales it to the machine and to a
 * sanitizer's build), or it found something. A caller that computes
 * between its calls is not kept: its calls stay one read long, but for
 * the first after one that found work. Nor while another thread waits on
 * the inbox, something is ready to flush (SX_SEND_MORE, sx_sendi's hold),
 * or callbacks were deferred: those go at the pass's end, as before.
 * sx_progress passes 0 while its caller would give the core up (SX_YIELD,
 * engine/yield.c). Linux's busy polling (SO_BUSY_POLL, reads that spin a
 * while on an empty queue) is the same trade on one socket. Measured in
 * docs/tuning.md, "Reading again in an empty pass": a few hundredths off
 * sx_bench latency's ratio to the floor where this VM is fast, none where
 * it is slow; more reads gained nothing.
 */
#define SX_REPOLL_GAP_READS 3u

/* Reads again in an empty home pass (above): the events it found, and
 * the start of its last read in *read_at_p (the pass's read's on entry). */
SX_HOT_PASS static int sx_shard_repoll_locked(sx_shard_t *shard, unsigned repoll,
                                              uint64_t *read_at_p, bool *drained_p)
{
    uint64_t at = *read_at_p, end = shard->repoll_idle_end_ns, cost = shard->repoll_read_ns;
    int polled = 0;

    /* Not spinning (the read's time is measured by reading again once). */
    if ((end != 0 && cost != 0 && (at < end || at - end > SX_REPOLL_GAP_READS * cost)) ||
        shard->deferred || shard->ready_head != NULL)
        return 0;
    for (unsigned i = 0; i < repoll && polled == 0 && *drained_p && sx_inbox_empty(&shard->inbox);
         i++) {
        uint64_t now = sx_time_ns();
        shard->repoll_read_ns = now - at; /* the read before, which found nothing */
        /* What this read finds came after that read began (shard.h). */
        shard->rx_since_ns = shard->rx_drained_ns = at;
        shard->rx_ns = at = now;
        sx_stat_add(&shard->stats.repolls, 1);
        polled = sx_shard_poll_locked(shard, drained_p);
    }
    if (polled > 0)
        sx_stat_add(&shard->stats.repoll_found, 1);
    *read_at_p = at;
    return polled;
}

/* The interface's counters are plain fields only the token holder may
 * read; publish a copy that any thread may read. */
static void sx_shard_mirror_tl_stats(sx_shard_t *shard)
{
    const sx_tl_iface_t *iface = shard->ifaces[SX_SHARD_TL_NET];

    if (iface == NULL)
        return;
    sx_stat_set(&shard->stats.tl_tx_datagrams, iface->stats.tx_datagrams);
    sx_stat_set(&shard->stats.tl_rx_datagrams, iface->stats.rx_datagrams);
    sx_stat_set(&shard->stats.tl_tx_again, iface->stats.tx_again);
    sx_stat_set(&shard->stats.tl_rx_truncated, iface->stats.rx_truncated);
    sx_stat_set(&shard->stats.tl_rx_kernel_drops, iface->stats.rx_kernel_drops);
    sx_stat_set(&shard->stats.tl_tx_refused, iface->stats.tx_refused);
    sx_stat_set(&shard->stats.tl_tx_ack_path, iface->stats.tx_ack_path);
    sx_stat_set(&shard->stats.tl_rx_ack_socket, iface->stats.rx_ack_socket);
    sx_stat_set(&shard->stats.tl_tx_gso, iface->stats.tx_gso);
    sx_stat_set(&shard->stats.tl_tx_gso_joined, iface->stats.tx_gso_joined);
    sx_stat_set(&shard->stats.tl_rx_gro, iface->stats.rx_gro);
    sx_stat_set(&shard->stats.tl_rx_hot, iface->stats.rx_hot);
    sx_stat_set(&shard->stats.tl_hot_connects, iface->stats.hot_connects);
}

/* One progress pass; -1 (and nothing done) if another thread holds the
 * token. */
SX_HOT_PASS SX_RET_AFTER_SYSCALL static int sx_shard_pass(sx_shard_t *shard, bool home,
                                                          unsigned *passes_p, unsigned repoll)
{
    size_t ran = 0;

    if (!sx_delegate_enter(&shard->token, &shard->inbox, shard, &ran))
        return -1;
    shard->pass_tenure = true;
    uint64_t now = sx_time_ns();
    shard->pass_gap_ns = shard->pass_ns != 0 && now > shard->pass_ns ? now - shard->pass_ns : 0;
    shard->pass_ns = now;
    if (home) {
        atomic_store_explicit(&shard->home_seen_ns, now, memory_order_relaxed);
        *passes_p = ++shard->home_passes;
    }
    /* A caller is here: the engine's service stays away (service.h). One
     * load and a compare; the push itself at most twice per
     * SX_SERVICE_US. */
    const sx_shard_env_t *env = shard->env;
    if (!shard->serving)
        shard->sendi_since_progress = false; /* a caller returned to progress */
    if (!shard->serving && env != NULL && env->svc_until != NULL &&
        now + env->svc_half_ns > atomic_load_explicit(env->svc_until, memory_order_relaxed))
        env->svc_push(env->svc_arg, now);
    shard->rx_ns = now; /* what the poll reads arrived by its end: shard.h */
    if (shard->ack_held_chan != NULL) {
        ran += (size_t)sx_chan_ack_release_locked(shard);
        shard->rx_ns = sx_time_ns(); /* completions ran, which take their time */
    }
    shard->home_pass = home && !shard->serving; /* may hold an ACK: chan_retransmit.c */
    shard->rx_since_ns = shard->rx_drained_ns;  /* shard.h */
    uint64_t poll_at = shard->rx_ns;
    bool drained;
    int polled = sx_shard_poll_locked(shard, &drained);
    if (polled == 0 && drained && repoll != 0 && !shard->serving)
        polled = sx_shard_repoll_locked(shard, repoll, &poll_at, &drained);
    if (drained)
        shard->rx_drained_ns = poll_at;
    shard->home_pass = false;
    /* A timer decides on what the peer acknowledged: one due now sees a
     * held ACK taken (chan_retransmit.c). */
    uint64_t due;
    if (shard->ack_held_chan != NULL && sx_wheel_next_deadline(shard->wheel, &due) == SX_OK &&
        sx_u64_before_eq(due, now))
        ran += (size_t)sx_chan_ack_release_locked(shard);
    unsigned fired = sx_wheel_expire(shard->wheel, now);
    /* What the service received and completed while no caller came: a
     * caller's pass hands it up. */
    int deferred = shard->deferred && !shard->serving ? sx_shard_run_deferred_locked(shard) : 0;
    /* Counters are written only with the token held (single writer). */
    sx_stat_add(&shard->stats.progress_calls, 1);
    sx_stat_add(&shard->stats.timers_fired, fired);
    if (shard->serving) {
        sx_stat_add(&shard->stats.svc_passes, 1);
        sx_stat_add(&shard->stats.svc_rx_packets, (uint64_t)polled);
    }
    sx_shard_mirror_tl_stats(shard);
    /* Leaving flushes the channels (the inbox's flush hook), also what
     * sends with SX_SEND_MORE held back. */
    shard->hold_flush = false;
    /* Where this home pass found nothing, when it ended, for the next one's
     * SX_REPOLL (above); 0 where it found work. Before the leave: the
     * token holder's. */
    if (home && repoll != 0)
        shard->repoll_idle_end_ns =
            ran == 0 && polled == 0 && fired == 0 && deferred == 0 ? sx_time_ns() : 0;
    ran += sx_delegate_leave_locked(&shard->token, &shard->inbox, shard);
    return (int)ran + polled + (int)fired + deferred;
}

SX_HOT_PASS SX_RET_AFTER_SYSCALL int sx_shard_progress(sx_shard_t *shard)
{
    int n = sx_shard_pass(shard, false, NULL, 0);
    return n < 0 ? 0 : n;
}

SX_HOT_PASS SX_RET_AFTER_SYSCALL int sx_shard_progress_home(sx_shard_t *shard, unsigned *passes_p,
                                                            unsigned repoll)
{
    return sx_shard_pass(shard, true, passes_p, repoll);
}

int sx_shard_serve(sx_shard_t *shard, uint64_t *next_ns_p)
{
    /* The calling thread is the service thread: the acquisition marks the
     * tenure as serving, and the flush hook notes the next timer there
     * (svc_next_ns is the token holder's, like every shard field). */
    *next_ns_p = UINT64_MAX;
    int n = sx_shard_pass(shard, false, NULL, 0);
    if (n >= 0)
        *next_ns_p = shard->svc_next_ns;
    return n;
}

int sx_shard_checkin_locked(sx_shard_t *shard, sx_shard_guest_t *guest, uint64_t deadline_ns,
                            sx_hotel_key_t *key_p)
{
    SX_OWNERSHIP_ASSERT(sx_token_held_by_me(&shard->token));
    if (guest == NULL || guest->on_evict == NULL)
        return SX_ERR_INVALID_PARAM;
    return sx_hotel_checkin(shard->hotel, guest, deadline_ns, key_p);
}
