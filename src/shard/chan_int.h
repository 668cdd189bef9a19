/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What the channel's own files share, and nothing else may use: chan.c
 * (lifetime, operation queue), chan_tx.c (framing, aggregation, chunking,
 * the flush), chan_rx.c (reordering, reassembly, delivery),
 * chan_retransmit.c (ACK and SACK processing, RFC 6298 timers, RACK),
 * chan_rma.c (the RMA target, and the initiator's matching of answers) and
 * chan_pmtu.c (the path MTU after connect).
 * The layer check (tests/checks/check-layers.sh) keeps it private to src/shard/.
 *
 * Synchronization: as chan.h; every function here is called by the holder
 * of the channel's shard token.
 */
#ifndef SX_SHARD_CHAN_INT_H
#define SX_SHARD_CHAN_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "common/time.h"
#include "shard/chan.h"
#include "shard/chan_undo.h"

static inline uint32_t sx_chan_window(const sx_chan_t *c)
{
    return c->shard->env->conf.window;
}

static inline sx_tl_iface_t *sx_chan_iface(const sx_chan_t *c)
{
    return c->shard->ifaces[c->tl];
}

/* Whether a data packet's payload carries a CRC32C: SX_CHECKSUM, on paths
 * that leave this host (sx_tl_ops_t.dest_local). */
static inline bool sx_chan_wants_crc(const sx_chan_t *c)
{
    const sx_tl_iface_t *iface = sx_chan_iface(c);
    return c->shard->env->conf.checksum &&
           (iface->ops->dest_local == NULL ||
            !iface->ops->dest_local((sx_tl_iface_t *)iface, c->dest));
}

/* A channel of datagrams under SX_CHAN_SMALL_DGRAM bytes (a 1500-byte
 * path): its full packets lie end to end in the shard's arenas, and udp
 * hands the kernel each run of them as one iovec (chan_pkt.c); a
 * message's or PUT's bytes are copied into them, not sent from the
 * caller's memory (chan_tx.c, chan_zero_copy). */
#define SX_CHAN_SMALL_DGRAM 4096u

static inline bool sx_chan_small_dgrams(const sx_chan_t *c)
{
    return c->dgram_max < SX_CHAN_SMALL_DGRAM;
}

static inline void sx_op_append(sx_op_t **head, sx_op_t **tail, sx_op_t *op)
{
    op->next = NULL;
    if (*tail != NULL)
        (*tail)->next = op;
    else
        *head = op;
    *tail = op;
}

/* Whether the peer's receive window lets the next packet go out. */
static inline bool sx_chan_rwnd_open(const sx_chan_t *c)
{
    return sx_u32_before(c->snd_nxt, c->peer_rwnd_ack + c->peer_rwnd_pkts) &&
           c->inflight_bytes < c->peer_rwnd_bytes;
}

/* chan.c */

/** Queues a target's response or a refusal (SX_OP_REFUSE): an internal
 *  op, no completion; and marks the channel ready. */
void sx_chan_queue_resp_locked(sx_chan_t *c, sx_op_t *op);

/* chan_pkt.c */

/** A data packet with room for @p need bytes (header and payload), its
 *  record zeroed; NULL when out of memory. */
sx_txpkt_t *sx_chan_pkt_alloc_locked(sx_chan_t *c, size_t need);
/** Frees a data packet, or keeps it in the shard's pool of large ones or
 *  its arena's place. */
void sx_chan_pkt_free_locked(sx_chan_t *c, sx_txpkt_t *pkt);

/* chan_tx.c */

/* Copies a zero-copy packet's payload into the packet (data[] has room for
 * it) and leaves it self-contained: for the paths that cut a packet into
 * fragments. */
void sx_chan_pkt_materialize_locked(sx_chan_t *c, sx_txpkt_t *pkt);

/** Sends a probe: a standalone ACK asking for an ACK at once. */
void sx_chan_send_probe_locked(sx_chan_t *c);
/** Sends the duplicate's report still owed (dsack_owed): a standalone ACK
 *  flagged SX_PKTF_DSACK naming dsack_seq; it goes with the shard's next
 *  post. */
void sx_chan_send_owed_dsack_locked(sx_chan_t *c);

/** Fills @p h's acknowledgement fields (ack, sack, the receive window) and
 *  records the window as advertised. */
void sx_chan_ack_fields_locked(sx_chan_t *c, sx_wire_hdr_t *h);

/* chan_retransmit.c */

/** The persist timer's callback, and arming it (with back-off) while the
 *  peer's window is closed and nothing is in flight. */
void sx_chan_persist_timer(sx_timer_t *timer, void *arg);
void sx_chan_arm_persist_locked(sx_chan_t *c, uint64_t now);

/** Arms (or re-arms) @p pkt's retransmission deadline in the hotel; an
 *  error when no room is free. */
int sx_chan_arm_locked(sx_chan_t *c, sx_txpkt_t *pkt, uint64_t now);

/** Drops the retransmission timer's back-off: the RTO from the RTT
 *  estimate again (RFC 6298 section 2), or the initial one. */
void sx_chan_rto_restart_locked(sx_chan_t *c);

/** Queues @p pkt to be sent again at the next flush (once). */
void sx_chan_queue_rtx_locked(sx_chan_t *c, sx_txpkt_t *pkt);

/** The hotel's eviction of a data packet: its retransmission deadline
 *  passed (a timeout). */
void sx_chan_on_timeout(sx_shard_t *shard, sx_shard_guest_t *guest);

/** Takes the cumulative and selective ACK of a packet from the peer at
 *  @p now; the packet arrived at @p arrived_ns, where RTT samples end,
 *  and not before @p since_ns (shard.h, rx_since_ns). */
void sx_chan_process_ack_locked(sx_chan_t *c, const sx_wire_hdr_t *h, bool pure_ack, uint64_t now,
                                uint64_t arrived_ns, uint64_t since_ns);

/** Holds the ACK of in-order data packet @p h, arrived at @p now, until
 *  sx_chan_ack_release_locked takes it (false: it must be taken now). */
bool sx_chan_ack_hold_locked(sx_chan_t *c, const sx_wire_hdr_t *h, uint64_t now);

/* chan_tlp.c */

/** The tail loss probe's timer (RFC 8985 section 7): with packets in
 *  flight and no new packet or ACK for a probe timeout, sends the newest
 *  packet not known to have arrived again. */
void sx_chan_tlp_timer(sx_timer_t *timer, void *arg);

/** Arms tlp_timer a probe timeout after @p now, or just before the
 *  oldest packet's retransmission timeout if that comes first (none
 *  before the first RTT sample, or with SX_TLP=no). */
void sx_chan_tlp_arm_locked(sx_chan_t *c, uint64_t now);

/** A new packet went, or an ACK moved snd_una with packets still in
 *  flight, at @p now: the probe timeout counts from here. One store, and
 *  the timer armed only when it is not (it looks at the mark when it
 *  fires). */
static inline void sx_chan_tlp_mark_locked(sx_chan_t *c, uint64_t now)
{
    c->tlp_mark_ns = now;
    if (!sx_timer_is_pending(&c->tlp_timer))
        sx_chan_tlp_arm_locked(c, now);
}

/** With a probe out, an ACK from the peer: a cumulative ACK past what was
 *  out at the probe ends it as a repaired loss (a cut of the window). */
void sx_chan_tlp_ack_locked(sx_chan_t *c, uint64_t now);

/** The peer reported the probe's packet as a duplicate: the probe (if
 *  still out) ends with nothing lost, and the probe timeout doubles. */
void sx_chan_tlp_dsack_locked(sx_chan_t *c);

/* chan_cc.c */

/** Gives a new channel its destination host's congestion controller, as
 *  SX_CONGESTION says (NULL: none), and its retry timer. */
void sx_chan_cc_attach_locked(sx_chan_t *c);

/** Whether a new packet may go now: the host's window has room and its
 *  pacing clock allows; if not, counts the stall and arms cc_timer to
 *  kick the channel when it may. Only for a channel with a controller. */
bool sx_chan_cc_allows_locked(sx_chan_t *c, uint64_t now);

/** The ECN counts of an ACK (@p h): a CE count that grew since the last
 *  ACK is a congestion event for the window (shard/cc.h). */
void sx_chan_cc_ecn_ack_locked(sx_chan_t *c, const sx_wire_hdr_t *h, uint64_t now);

/** cc_timer's callback: the channel flushes again. */
void sx_chan_cc_timer(sx_timer_t *timer, void *arg);

/** Flushes the channel again at @p at (cc_timer), or at the earlier
 *  deadline the timer already has: what waits for the congestion window,
 *  the pacing clock or a room in the shard's hotel. */
void sx_chan_retry_at_locked(sx_chan_t *c, uint64_t at);

/** @p pkt enters the pipe (sent, or sent again after it left) or leaves
 *  it (acknowledged, SACKed, presumed lost, freed); each once. Every
 *  transmission, a retransmission of a packet still in the pipe too,
 *  takes its time on the pacing clock. No-ops without a controller. */
void sx_chan_cc_in_locked(sx_chan_t *c, sx_txpkt_t *pkt);
void sx_chan_cc_out_locked(sx_chan_t *c, sx_txpkt_t *pkt);

/** sx_chan_cc_in_locked and an ACK's sx_chan_cc_acked_out_locked change
 *  the channel's pipe at once and the host's shared flight at the next
 *  sx_chan_cc_post_locked, which a flush makes before it returns and the
 *  ACK path before it tells the controller what was acknowledged: one
 *  atomic per flush and per ACK, not per packet, on a counter that every
 *  shard sending to the host writes. sx_chan_cc_in_locked also puts every
 *  transmission's share of the pacing clock aside, which the flush posts
 *  with it (sx_chan_cc_allows_locked counts it meanwhile). */
void sx_chan_cc_acked_out_locked(sx_chan_t *c, sx_txpkt_t *pkt);
void sx_chan_cc_post_locked(sx_chan_t *c, uint64_t now);

/** Loss and round-trip signals for the controller (none: no-ops); they
 *  count the window's cuts in the shard's stats. A lost packet leaves
 *  the pipe. */
void sx_chan_cc_lost_locked(sx_chan_t *c, sx_txpkt_t *pkt, bool persistent, uint64_t now);
/* sx_chan_cc_cut_locked and the loss episode's calls: chan_undo.h. */
void sx_chan_cc_rtt_locked(sx_chan_t *c, uint64_t rtt, uint64_t now);

/** F-RTO found this channel's timeout recovery spurious: a collapse of
 *  the window it made (persistent congestion) is undone (sx_cc_undo). */
void sx_chan_cc_rto_spurious_locked(sx_chan_t *c);

/* chan_rx.c */

/** The delayed ACK's timer (RFC 1122 4.2.3.2). */
void sx_chan_ack_timer(sx_timer_t *timer, void *arg);

/** Counts a frame dropped for @p why. */
void sx_chan_drop_frame_locked(sx_chan_t *c, sx_drop_reason_t why);

/** After snd_una moved: lets go of a held acknowledgement once every
 *  refusal is sent and acknowledged (wire.h, "Refusals"). */
void sx_chan_hold_check_locked(sx_chan_t *c);

/** The receive window to advertise now: packets from rcv_nxt on, and
 *  bytes, that the ring has room for beside the backlog (SX_MAX_INFLIGHT
 *  is at most 1 GiB, so the bytes fit). Every header carries it. */
static inline void sx_chan_rwnd_locked(const sx_chan_t *c, uint32_t *pkts_p, uint32_t *bytes_p)
{
    size_t budget = c->shard->env->conf.max_inflight;

    *pkts_p = sx_chan_window(c) - (c->rcv_nxt - c->rcv_dlv);
    *bytes_p = c->backlog_bytes < budget ? (uint32_t)(budget - c->backlog_bytes) : 0;
}

/* chan_pmtu.c */

/** The oldest unacknowledged packet @p pkt timed out at @p now; @p heard:
 *  the peer sent something since its previous timeout. Counts black-hole evidence,
 *  steps the datagram size down on enough of it, and probes the peer. */
void sx_chan_pmtu_timeout_locked(sx_chan_t *c, const sx_txpkt_t *pkt, bool heard, uint64_t now);

/** Sends @p pkt, larger than the channel's datagram size, as fragments,
 *  at once (after what is staged); false when the interface cannot carry
 *  them (then it goes whole). A fragment the interface refuses is lost
 *  and resent with the packet's next retransmission; when it refused the
 *  first, nothing went, so the acknowledgement the fragments carry is
 *  owed still, and a full interface (SX_ERR_AGAIN) sends the packet
 *  again at the next flush, as it does a staged one. */
bool sx_chan_send_frags_locked(sx_chan_t *c, sx_txpkt_t *pkt);

/** Frees the packets in reassembly. */
void sx_chan_frags_free_locked(sx_chan_t *c);

/* chan_rma.c */

/** A PUT chunk, a GET request and an answer to one of ours. */
void sx_chan_recv_put_locked(sx_chan_t *c, const sx_wire_frame_t *f);
void sx_chan_recv_get_locked(sx_chan_t *c, const sx_wire_frame_t *f);
void sx_chan_recv_resp_locked(sx_chan_t *c, const sx_wire_frame_t *f);

/** @p op's request is out: a GET's answer may be landed (chan.h,
 *  Landing) when the shard awaits none yet. */
void sx_chan_land_sent_locked(sx_chan_t *c, const sx_op_t *op);

/** Writes a GET answer's frame at @p p, reading the region now; returns
 *  the end of what it wrote. With @p zc_pkt, the bytes may instead stay in
 *  the region: zc_pkt's ext and pin are then set and only the frame header
 *  written (shard/mem.h, Pins). */
uint8_t *sx_chan_write_region_frame_locked(sx_chan_t *c, sx_op_t *op, sx_wire_frame_t *f,
                                           uint8_t *p, uint32_t len, sx_txpkt_t *zc_pkt);

#endif /* SX_SHARD_CHAN_INT_H */
