/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A shard: one core's share of the engine. It owns its inbox, timer wheel,
 * hotel and counters (and, with the transports, its interfaces, channels,
 * packet pool and transmit batch). Nothing in a shard is written by
 * another shard. What the engine gives it (settings, epoch, the tables its
 * receive path reads) is shard/env.h.
 *
 * Synchronization (DESIGN.md section 3):
 *
 *   field / function          | written or called by     | how
 *   --------------------------+--------------------------+---------------------------
 *   token                     | any thread               | try-lock, never waited on
 *   inbox                     | producers: any thread    | wfcqueue, see inbox.h
 *   wheel, hotel, txq,        | the token holder         | plain accesses
 *   ready list, pkt_pool,     |                          |
 *   pkt_spare, pkt_arena      |                          |
 *   stats                     | the token holder         | sx_stat_add (no RMW);
 *                             |                          | readable from any thread
 *   index, core, cpuset, ...  | sx_shard_create only     | read-only afterwards
 *   sx_shard_submit_mpsc      | any thread               | token-or-delegate
 *   sx_shard_progress         | any thread               | returns 0 if token busy
 *   sx_shard_progress_home    | any thread               | returns -1 if token busy
 *   home_seen_ns              | sx_shard_progress_home   | relaxed atomic
 *   home_passes               | sx_shard_progress_home   | the token holder
 *   sx_shard_serve            | the service thread only  | returns 0 if token busy
 *   serving, deferred lists   | the token holder         | plain accesses
 *   *_locked functions        | the token holder only    |
 */
#ifndef SX_SHARD_SHARD_H
#define SX_SHARD_SHARD_H

#include <hwloc.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/stat.h"
#include "hotel/hotel.h"
#include "common/wheel.h"
#include "locks/token.h"
#include "shard/env.h"
#include "shard/inbox.h"
#include "shard/wire.h"
#include "transports/transport.h"

struct sx_chan;
struct sx_op;
struct sx_peer;
struct sx_txpkt;

/* A shard's interfaces: the network transport, and self for this engine. */
enum { SX_SHARD_TL_NET = 0, SX_SHARD_TL_SELF = 1, SX_SHARD_TL_COUNT = 2 };
/* A shard's fds to sleep on, all its interfaces' together, at most. */
#define SX_SHARD_WAIT_FDS (SX_SHARD_TL_COUNT * SX_TL_WAIT_FDS)

typedef struct sx_shard sx_shard_t;
typedef struct sx_shard_guest sx_shard_guest_t;

/**
 * What a hotel guest does when its deadline passes before it checks out
 * (typically: retransmit and check in again). Runs on the token holder's
 * thread, inside sx_shard_progress, after the guest's room was vacated.
 */
typedef void (*sx_shard_evict_fn)(sx_shard_t *shard, sx_shard_guest_t *guest);

/** Embed this in anything checked into a shard's hotel. */
struct sx_shard_guest {
    sx_shard_evict_fn on_evict; /* never NULL */
};

/* Per-shard counters; summed over shards by the engine. */
#define SX_SHARD_STATS_TABLE(X)                                                                  \
    X(progress_calls, "progress passes that held the token")                                     \
    X(repolls, "reads made again in a spinning caller's empty pass (SX_REPOLL)")                 \
    X(repoll_found, "passes whose read made again found a datagram (SX_REPOLL)")                 \
    X(timers_fired, "timer callbacks, evictions included")                                       \
    X(data_sent, "data packets sent for the first time")                                         \
    X(frames_sent, "message frames put into data packets")                                       \
    X(acks_sent, "standalone ACK packets")                                                       \
    X(rx_packets, "datagrams received")                                                          \
    X(rx_out_of_order, "packets kept aside ahead of a gap")                                      \
    X(rx_kept_behind, "packets in order kept aside for the next caller to deliver")              \
    X(acks_held, "ACKs of in-order data packets taken after their data was handed up")           \
    X(rtx_timeout, "retransmissions after a timeout")                                            \
    X(rtx_dupack, "fast retransmissions after three duplicate ACKs")                             \
    X(rtx_sack, "fast retransmissions of SACK holes")                                            \
    X(rtx_probe, "tail loss probes: the newest packet sent again when ACKs stopped (SX_TLP)")    \
    X(tlp_repairs, "tail loss probes that repaired a loss (no duplicate reported): window cut")  \
    X(tlp_settled, "of those, decided at the next probe: no duplicate came (a lone tail)")       \
    X(tlp_unneeded, "tail loss probes the peer reported as duplicates: its timeout doubles")     \
    X(rto_spurious, "timeouts found spurious (an original transmission was acknowledged)")       \
    X(rtx_unneeded, "duplicates the peer reported (D-SACK): RACK's reordering allowance widens") \
    X(ack_unsent, "ACKs for data never sent, ignored without moving any state")                  \
    X(resp_early, "PUT answers ahead of the ACK of its data, whose packets were then copied")    \
    X(resp_bad_status, "RMA answers with a status no target sends, completed SX_ERR_PROTO")      \
    X(window_stalls, "flushes stopped by a full window or byte budget")                          \
    X(data_bytes, "bytes of data packets sent for the first time")                               \
    X(rtx_bytes, "bytes of data packets sent again")                                             \
    X(rtx_packets, "data packets sent again, for any cause (the rtx_ counters above say which)") \
    X(cc_window_stalls, "flushes stopped by the congestion window of the destination host")      \
    X(cc_pace_waits, "flushes stopped by the pacing clock of the destination host")              \
    X(cc_loss_cuts, "congestion window halvings after a loss (once per round trip)")             \
    X(cc_delay_exits, "slow starts ended by a queue the round trips showed (HyStart++)")         \
    X(cc_collapses, "congestion window falls to its minimum (persistent congestion)")            \
    X(cc_undos, "collapses undone: an ACK showed their timeouts spurious (F-RTO)")               \
    X(cc_loss_undos,                                                                             \
      "halvings undone: the peer got every packet their loss resent twice (D-SACK)")             \
    X(cc_ecn_cuts, "congestion window cuts by CE marks the peer echoed (ECN, DCTCP)")            \
    X(rx_ecn_ce, "data datagrams received marked CE (ECN: a router's congestion signal)")        \
    X(hotel_full, "packets that waited for a hotel room")                                        \
    X(tx_again, "sends refused by a full interface")                                             \
    X(tx_no_credits, "datagrams held back for want of send credits")                             \
    X(ops_completed, "operations completed successfully")                                        \
    X(am_delivered, "active messages delivered to handlers")                                     \
    X(am_no_handler, "active messages dropped for want of a handler")                            \
    X(am_refused, "the peer's messages refused (too large, no handler): their sends fail")       \
    X(am_refused_by_peer, "our messages the peer refused: their sends fail with its reason")     \
    X(chan_failures, "channels failed")                                                          \
    X(ctrl_sent, "connection control messages sent")                                             \
    X(ctrl_received, "connection control messages accepted")                                     \
    X(reset_challenges, "RESETs not yet proven, answered with a challenge to the old peer")      \
    X(resets_proven, "RESETs that echoed our challenge: the peer restarted")                     \
    X(tl_tx_datagrams, "datagrams the network interface sent")                                   \
    X(tl_rx_datagrams, "datagrams the network interface received")                               \
    X(tl_tx_again, "sends the network interface refused for lack of room")                       \
    X(tl_rx_truncated, "datagrams longer than the MTU, dropped")                                 \
    X(tl_rx_kernel_drops, "datagrams the kernel dropped for a full socket buffer")               \
    X(tl_tx_refused, "sends refused by the destination (ICMP unreachable)")                      \
    X(tl_tx_ack_path, "ACKs sent through the udp ACK socket (ours or the peer's)")               \
    X(tl_rx_ack_socket, "datagrams received on the udp ACK socket")                              \
    X(tl_tx_gso, "udp sends that carried several datagrams at once (UDP GSO)")                   \
    X(tl_tx_gso_joined, "datagrams of those that followed the one before in memory (one iovec)") \
    X(tl_rx_gro, "udp reads that returned several datagrams at once (UDP GRO)")                  \
    X(tl_rx_hot, "datagrams received on the udp hot socket (SX_UDP_HOT)")                        \
    X(tl_hot_connects, "times the udp hot socket was connected to a destination (SX_UDP_HOT)")   \
    X(svc_passes, "passes the engine's service made over a shard no caller progressed")          \
    X(svc_rx_packets, "datagrams the service received for a shard no caller progressed")         \
    X(svc_deferred, "callbacks the service left for the next sx_progress caller")                \
    X(rwnd_stalls, "flushes stopped by the peer's receive window (flow control)")                \
    X(peer_probes, "probes of a closed window or of a peer that owes answers (persist)")         \
    X(own_stalls, "timeouts that found this process had not run: not held against a peer")       \
    X(rtt_waited, "RTT samples left out: the ACK may have waited for us longer than the RTO")    \
    X(pmtu_steps, "datagram sizes given up at connect: probes of them went unanswered")          \
    X(pmtu_blackholes, "datagram sizes given up later: large packets lost, small ones answered") \
    X(frags_sent, "fragments of packets built before a smaller datagram size was found")         \
    X(frags_assembled, "packets put back together from fragments")                               \
    X(sendi_held, "sx_sendi messages held back to share a datagram (SX_SENDI_HOLD_US)")          \
    X(crc_sent, "data packets sent with a payload CRC32C (SX_CHECKSUM, paths off this host)")    \
    X(copy_tx_bytes, "payload bytes copied in user space on the way out (sx_sendi, packets)")    \
    X(region_zc_sent, "GET answer packets sent from the registered region itself (a pin each)")  \
    X(copy_rx_bytes, "payload bytes copied in user space on the way in (reassembly, out of "     \
                     "order, fragments, PUT and GET data into memory)")                          \
    X(rx_landed_bytes, "GET answer and PUT bytes the kernel read straight into their place")     \
    X(rx_land_missed, "datagrams read around a landing that were not the chunk it awaited")

typedef struct sx_shard_stats {
#define SX_SHARD_STAT_FIELD_(name, text) sx_stat_t name;
    SX_SHARD_STATS_TABLE(SX_SHARD_STAT_FIELD_)
#undef SX_SHARD_STAT_FIELD_
    sx_stat_t drops[SX_DROP_COUNT]; /* packets and frames dropped, by reason */
    /* Requests run are counted by the inbox itself: inbox.requests_run. */
} sx_shard_stats_t;

/* Datagrams staged during a flush and posted in one batch (sendmmsg). */
#define SX_SHARD_TX_BATCH 32
typedef struct sx_shard_txq {
    unsigned n;
    unsigned fresh; /* of them, new packets (unstamped: sx_chan_stamp_locked) */
    unsigned tl;    /* every staged datagram goes out through this interface */
    sx_tl_tx_t tx[SX_SHARD_TX_BATCH];
    struct sx_chan *chan[SX_SHARD_TX_BATCH];
    struct sx_txpkt *pkt[SX_SHARD_TX_BATCH]; /* NULL for an ACK */
    /* A staged packet's pinned region (shard/mem.h, Pins), whose read
     * began at staging and ends when the batch is posted; NULL: none. */
    struct sx_mem *pin[SX_SHARD_TX_BATCH];
    /* The frames of the packet being built (chan_tx.c, chan_build_packet),
     * the token holder's alone: nothing the build calls flushes, and the
     * plan is done with before the packet is staged. On the stack its
     * 1.5 KB put every call below the build on a page further down
     * (src/common/hot.h says when pages count). */
    struct sx_frame_plan {
        struct sx_op *op;
        uint8_t kind;
        uint32_t len;
        bool last;
    } plan[SX_PKT_MAX_FRAMES];
    uint8_t ack_buf[SX_SHARD_TX_BATCH][SX_WIRE_HDR_LEN];
    uint8_t tag[SX_SHARD_TX_BATCH][SX_WIRE_TAG_LEN]; /* SX_AUTH: each datagram's tag */
} sx_shard_txq_t;

/** Offers @p iface's next read landings for the GETs of land_chan, or
 *  else the PUT of land_put_chan (chan.h, Landing); sets land_n. Not
 *  while serving. */
void sx_shard_land_offer_locked(sx_shard_t *shard, sx_tl_iface_t *iface);

/** Before the @p n events of a read whose landings were offered are
 *  handled (@p n < 0: the read failed): makes whole each datagram whose
 *  bytes landed anywhere but where its header says they belong, and ends
 *  a PUT offer's access to its region. */
void sx_shard_land_sort_locked(sx_shard_t *shard, sx_tl_event_t *ev, int n);

/** A GET that completes (@p dst, @p len: its destination) while the
 *  events of a poll are handled: datagrams of those not handled yet that
 *  landed in its destination are made whole first, before its owner may
 *  free it (chan.h, Landing). */
void sx_shard_land_release_locked(sx_shard_t *shard, const uint8_t *dst, size_t len);

/** A GET whose answer, or a PUT whose chunks, may land (chan.h,
 *  Landing): chunks of @p op_id go to @p dst; those from @p got to @p len
 *  are still to come. */
typedef struct sx_land_span {
    uint32_t op_id;
    uint8_t *dst;
    size_t got, len;
} sx_land_span_t;

/* Events one poll of one interface hands up at most. */
#define SX_SHARD_POLL_BATCH 32

struct sx_shard {
    sx_token_t token __attribute__((aligned(64)));
    sx_inbox_t inbox;
    sx_wheel_t *wheel;
    sx_hotel_t *hotel;
    sx_shard_stats_t stats __attribute__((aligned(64)));
    sx_tl_iface_t *ifaces[SX_SHARD_TL_COUNT]; /* NULL when not opened */
    struct sx_chan *ready_head, *ready_tail;  /* channels with work to send */
    /* A send with SX_SEND_MORE ran in this tenure: the flush at leave is
     * skipped once, so the next messages can share its datagram (as
     * FI_MORE and MSG_MORE do). sx_shard_progress always flushes. DESIGN.md
     * section 4 forbids holding a send back to wait for company; this is
     * not that: the engine never holds on its own, only when the caller
     * says more sends follow at once, and only until its next send
     * without the flag or its next progress call. */
    bool hold_flush;
    /* SX_SENDI_HOLD_US (send.c): an sx_sendi ran since the last caller's
     * progress pass, so the next ones may be held; what is held, and
     * whether the service was asked to flush it by the deadline. Cleared
     * by the flush. */
    bool sendi_since_progress;
    bool hold_armed;
    size_t held_bytes;
    /* Landing (chan.h): the channel whose GET answers the data socket's
     * next read is offered to land, and the GETs this poll's offer
     * covered (land_n 0: none). The token holder's. */
    struct sx_chan *land_chan;
    unsigned land_n;
    sx_land_span_t land_spans[SX_TL_LAND_SPANS];
    /* ... or, when no GET answer is awaited, the channel whose PUT's next
     * chunks it is offered to land; this poll's offer is a PUT's
     * (land_put: one span, in a region), whose access land_mem holds
     * from the offer until the read is sorted (NULL otherwise); and
     * where the offered datagrams' data begins (land_head). */
    struct sx_chan *land_put_chan;
    struct sx_mem *land_mem;
    bool land_put;
    size_t land_head;
    /* A PUT's offer reads no more datagrams than it has pieces, so that
     * the datagram after its last chunk comes in a read of its own: when
     * a followed PUT ends, reads take one datagram at a time until one
     * with a payload comes (an ACK's is none), at most land_probe reads
     * that return something (SX_LAND_PROBES). If it is the first chunk
     * of the next PUT, that PUT's rest is offered before it is read. */
    unsigned land_read_max;
    unsigned land_probe;
    /* While a poll's events are handled: them, and the first not handled
     * yet, whose landings a GET that completes first gives back
     * (sx_shard_land_release_locked). NULL between polls. */
    sx_tl_event_t *land_ev;
    int land_ev_n, land_ev_next;
    /* Large data packets kept for reuse (chan_pkt.c). */
    struct sx_txpkt *pkt_pool;
    size_t pkt_pool_bytes;
    /* The arena new full-size packets of small datagrams are carved from,
     * and emptied ones kept for the next (chan_pkt.c, Arenas). */
    struct sx_pkt_arena *pkt_arena, *pkt_arena_spare;
    unsigned pkt_arena_spares;
    unsigned tx_inflight[SX_SHARD_TL_COUNT]; /* posted, no SEND_DONE yet (async transports) */
    bool tx_again; /* this flush, an interface refused datagrams for want of room or credits */
    /* Progress thread (SX_PROGRESS=thread): it publishes that it sleeps and
     * until when; a token holder that arms an earlier timer rings wake_fd. */
    atomic_int sleeping;
    _Atomic uint64_t sleep_until_ns;
    int wake_fd; /* eventfd, -1 when the shard has no progress thread */
    /* sx_engine_fd's timer for this shard (sx_shard_fd_timer): a timerfd
     * in the engine fd's epoll set, armed by the token holder for the
     * shard's earliest timer so an event loop needs no timeout; -1 until
     * sx_engine_fd is first called (then set once, with release).
     * fd_timer_at: the deadline it is armed for, UINT64_MAX when not;
     * the token holder's. */
    atomic_int fd_timer;
    uint64_t fd_timer_at;
    /* Whether the token holder is one of the engine's own threads, which
     * never run a callback (DESIGN.md section 3): the service thread,
     * which serves a shard no caller progresses, or a thread that hands
     * the shard connection messages (the OOB's, rdmacm's): set at every
     * acquisition (the inbox's on_acquire). What it cannot run
     * waits here for the next caller's sx_shard_progress: completions,
     * peer error reports, and channels holding data received and
     * acknowledged but not yet handed to a handler (their backlog). */
    bool serving;
    bool deferred; /* any of the three lists is non-empty */
    struct sx_op *done_head, *done_tail;
    struct sx_peer *err_head, *err_tail;
    struct sx_chan *backlog_head, *backlog_tail;
    /* A held ACK (chan_retransmit.c, sx_chan_ack_hold_locked): the
     * acknowledgement an in-order data packet carried, taken after its
     * data was handed up (at the next datagram, due timer or pass, or when
     * its channel fails); its channel (NULL: none), header and arrival
     * time. */
    struct sx_chan *ack_held_chan;
    sx_wire_hdr_t ack_held;
    uint64_t ack_held_ns, ack_held_since_ns; /* rx_ns and rx_since_ns of its read */
    bool home_pass; /* while a home thread's pass polls: only it holds one */
    /* The channel the last datagram was for, and the peer table's
     * removal count when the lookup found it (sx_shard_chan_of): the
     * next datagram from the same peer's shard skips the RCU lookup.
     * NULL when its channel is destroyed. The token holder's. */
    struct sx_chan *rx_chan;
    unsigned rx_chan_removals;
    /* The last small data packet freed, kept for the next (chan_tx.c,
     * chan_pkt.c); NULL: none. Beside rx_chan, on a page a message's
     * way touches anyway. The token holder's. */
    struct sx_txpkt *pkt_spare;
    /* When the datagrams now being handled were read: their arrival
     * time for RTT samples, the delayed-ACK timer and liveness (a
     * channel's alive_ns, chan_rx.c). For a pass's poll,
     * the time just before it (sx_shard_pass): the read that finds them
     * ends one system call later, and nothing the pass sends leaves
     * before it. A clock read after the read, as before, was ~100 cycles
     * between a datagram's arrival and its delivery (rdtsc stamps in a
     * ping-pong, sx_bench latency). */
    uint64_t rx_ns;
    /* The earliest time what is now being handled could have arrived:
     * for a pass's poll, when the last poll that read every interface's
     * queue empty began (rx_drained_ns: fewer events than it asked for,
     * and no rx_left, transport.h), else rx_ns. Not the last poll's
     * start: one that read something may have left more behind (udp reads
     * a lone datagram a poll after a quiet spell, a batch is capped),
     * which waited as long as what it read. An ACK read long after both
     * its packet's send and that time may have waited for us, not for the
     * network: its RTT sample is left out (chan_retransmit.c,
     * chan_ack_waited). */
    uint64_t rx_since_ns, rx_drained_ns;
    uint64_t svc_next_ns; /* the service's last pass: its earliest timer after the flush */
    /* This tenure is a progress pass (sx_shard_pass): a caller that
     * progresses keeps the service away, so its passes never kick it; any
     * other tenure of a thread not the service's (a send, sx_sendi, the OOB
     * thread's connection answers) checks whether the service sleeps past
     * a timer it armed (the flush hook, wake.c). */
    bool pass_tenure;
    /* The last progress pass's start and how long before it the one
     * before began: how long this shard was not progressed, which is
     * pacing time its senders could not use (shard/cc.h). */
    uint64_t pass_ns, pass_gap_ns;
    /* A home pass's reads again (SX_REPOLL, sx_shard_repoll_locked): when
     * the last home pass ended, if it found nothing (0: it found work, or
     * reads again are off), and how long the last empty read took, from
     * one clock read before it to the next (0: not measured yet). The
     * token holder's. */
    uint64_t repoll_idle_end_ns, repoll_read_ns;
    /* Passes by a thread whose home this shard is (sx_progress visits
     * other shards every few of them). */
    unsigned home_passes;
    /* Read-only after creation. */
    const sx_shard_env_t *env;
    uint32_t seq_start;
    bool seq_random; /* SX_SEQ_START unset: exchanging channels start at random */
    unsigned index;
    int core;
    int first_pu;
    int numa_node;
    hwloc_bitmap_t cpuset;
    /* When a thread whose home this shard is last progressed it
     * (sx_shard_progress_home, the pass's own clock read): sx_progress
     * visits only shards that no thread has called home lately. On a line
     * of its own: the home caller writes it, visitors read it. */
    _Atomic uint64_t home_seen_ns __attribute__((aligned(64)));
    /* What a poll of an interface found (sx_shard_poll_locked): here
     * rather than on the stack, where its 2 KB put the transport's frames
     * and its system call a page below the pass's. A pass is never nested
     * in another on the same shard (the token is no recursive lock). */
    sx_tl_event_t poll_ev[SX_SHARD_POLL_BATCH] __attribute__((aligned(64)));
    /* The batch being built: 6 KB of arrays, after every other field, so
     * that the ones a pass reads share a page (sx_shard_create aligns the
     * shard to one; src/common/hot.h says why pages count). */
    sx_shard_txq_t txq __attribute__((aligned(64)));
};

typedef struct sx_shard_conf {
    unsigned index;
    int core;
    int first_pu;
    int numa_node;
    hwloc_const_bitmap_t cpuset; /* copied */
    unsigned hotel_rooms;
    uint64_t tick_ns;
    /* Transports; a shard without env has only its inbox and timers. */
    const sx_shard_env_t *env;
    const sx_tl_ops_t *net_ops;
    sx_tl_config_t net_config;
    sx_tl_config_t self_config;
    uint32_t seq_start;
    bool seq_random;
} sx_shard_conf_t;

int sx_shard_create(const sx_shard_conf_t *conf, sx_shard_t **shard_p);

/** Runs requests still queued, then frees the shard. No other thread may
 *  use it. */
void sx_shard_destroy(sx_shard_t *shard);

/**
 * Token-or-delegate: runs @p req now if the token is free, else queues it
 * for the holder. Never waits. Returns true if it ran before returning.
 */
bool sx_shard_submit_mpsc(sx_shard_t *shard, sx_inbox_req_t *req);

/**
 * One progress pass: takes the token (or returns 0 at once if busy), runs
 * the inbox, fires due timers, runs the inbox again and releases the token.
 * Returns the number of requests run and timers fired.
 */
int sx_shard_progress(sx_shard_t *shard);

/** sx_shard_progress by a thread whose home the shard is: notes the time
 *  (home_seen_ns), counts the pass into *passes_p (home_passes, this one
 *  included) and tells a busy token apart: -1 if another thread holds it
 *  (sx_progress yields on that when oversubscribed), *passes_p untouched.
 *  When its read finds nothing and the caller is spinning on sx_progress
 *  (the last home pass found work, or the caller came back within
 *  SX_REPOLL_GAP_READS empty reads' time of its end), it reads up to
 *  @p repoll more times before it finishes (SX_REPOLL, shard.c says
 *  why); 0: one read. */
int sx_shard_progress_home(sx_shard_t *shard, unsigned *passes_p, unsigned repoll);

/**
 * The engine's service (DESIGN.md section 3, "liveness without the
 * caller"): one pass over a shard that no caller progresses, from the
 * service thread only (sx_shard_set_service_thread): it receives,
 * acknowledges, retransmits and answers connection requests and probes,
 * and leaves every callback for the next caller. Returns the work done,
 * 0 if the token was busy; *next_ns_p gets the shard's earliest timer
 * after the pass (UINT64_MAX: none).
 */
int sx_shard_serve(sx_shard_t *shard, uint64_t *next_ns_p);

/** Marks the calling thread as the engine's service thread (callbacks are
 *  deferred on it) or not. */
void sx_shard_set_service_thread(bool on);

/**
 * Marks the calling thread, for its lifetime, as a thread of the engine's
 * own that is not the service: one that hands shards what arrives on
 * another channel (the OOB's connection messages, rdmacm's answers) and
 * may find a shard's token free and run the work itself. Its tenures
 * defer every callback to the next caller, as the service's do: a
 * completion of the caller's (a held ACK taken, chan_retransmit.c) or a
 * peer's failure must not run on a thread the application never gave us.
 */
void sx_shard_set_engine_thread(void);

/** Marks the calling thread's next token tenures as deferring, as an
 *  engine thread's are, until called with false: a diagnosis's (sx_dump,
 *  the watchdog) from whatever thread it runs on. */
void sx_shard_set_deferring(bool on);

/*
 * How much of the channels' backlogs one call of
 * sx_shard_run_deferred_locked hands up: at most SX_HANDUP_FRAMES frames
 * (a message, a chunk of one, a PUT or GET) and, after the first, none
 * once SX_HANDUP_NS have passed since it began. The rest waits, the
 * channels in round-robin order and a packet cut short at its next frame
 * (sx_chan_t.dlv_off), for the next pass, which polls the sockets first.
 * So a caller back from a long computation, whose service kept a window's
 * worth of messages for it, still reads, answers probes and acknowledges
 * between slices of the handing up. In one pass, its handlers (a 1.8 MB
 * backlog checked byte by byte took 243 ms under TSan) held every ACK
 * back and left its peer's probes unanswered for as long
 * (test_liveness.c, test_slow_handlers_after_computing). Linux bounds a
 * softirq's receive work the same two ways (netdev_budget, 300 packets,
 * and netdev_budget_usecs, 2 ms: Documentation/admin-guide/sysctl/
 * net.rst). Frames, not packets, because one datagram of aggregated small
 * messages holds dozens of handler calls. The time bounds slow handlers,
 * and 1 ms is half the default SX_RTO_MIN_US, so the ACKs a pass owes
 * leave before a sender's earliest retransmission timeout. The count
 * bounds fast ones and is set high, near netdev_budget: while a channel
 * has a backlog, what arrives in order is kept behind it (copied aside),
 * and a slice much smaller than what one poll reads (32 datagrams a
 * socket) would keep a streaming channel in that state, one copy per
 * datagram more. Completions and peer error reports are not counted, as
 * NAPI does not count transmit completions: they run in full, at most one
 * per operation the caller has outstanding. What a pass reads in order it
 * hands up as it reads, without this budget: a poll's read (32 datagrams
 * a socket) and the kept packets a filled gap puts in order. Taking from
 * it there, and keeping what it had no room for, was tried and taken out
 * (the note on issue 22 of 2026-12-06): NAPI leaves such packets in the
 * ring, but a pass has read them and must copy them aside, and then every
 * later packet of the channel until the backlog is handed up. Streams at
 * 64 KB copied up to 15 % of their bytes, under TSan a PUT stream landed
 * nothing (test_rma), and each kept packet is acknowledged before its
 * handler runs. Bounding that path would mean reading less, not copying.
 */
#define SX_HANDUP_FRAMES 256u
#define SX_HANDUP_NS     1000000ull

/** What one call may still hand up (SX_HANDUP_FRAMES, SX_HANDUP_NS). */
typedef struct sx_handup {
    unsigned left;     /* frames */
    uint64_t until_ns; /* checked from the second frame on */
} sx_handup_t;

/** A fresh budget, counting from now. */
void sx_handup_init(sx_handup_t *budget);

/** Takes one frame from @p budget: false, and none left from then on,
 *  when the frames or the time are spent. The first always succeeds. */
bool sx_handup_take(sx_handup_t *budget);

/** Runs what the service deferred: every completion and peer error
 *  report, and the channels' backlogs as far as a fresh sx_handup_t
 *  allows (`deferred` stays set while any remains). Returns how many it
 *  ran. Token holder, never the service; at destruction, until
 *  `deferred` clears. */
int sx_shard_run_deferred_locked(sx_shard_t *shard);

/** Defers a completion (its status in op->status), a peer's error report
 *  (holding a reference to the peer), or the delivery of a channel's
 *  backlog, to the next caller. Token holder. */
void sx_shard_defer_op_locked(sx_shard_t *shard, struct sx_op *op);
void sx_shard_defer_error_locked(sx_shard_t *shard, struct sx_peer *peer, int status);
void sx_shard_defer_backlog_locked(sx_shard_t *shard, struct sx_chan *chan);

/** Puts @p chan, whose backlog a caller is to hand up, at the end of the
 *  backlog list (if not on it) without counting a deferral: a caller's
 *  packet that arrived behind the backlog, or a backlog the budget cut
 *  short (sx_handup_t). The pass hands it up after its poll. Token
 *  holder. */
void sx_shard_queue_backlog_locked(sx_shard_t *shard, struct sx_chan *chan);

/** Takes @p chan off the backlog list (a channel being destroyed). */
void sx_shard_unlink_backlog_locked(sx_shard_t *shard, struct sx_chan *chan);

/** Sends what the shard's channels have ready. Token holder only. */
void sx_shard_flush_locked(sx_shard_t *shard);

/**
 * Stages one datagram of @p len bytes at @p data for interface @p tl to
 * @p dest in the shard's batch, posting the batch first when it is full
 * or holds another interface's datagrams. @p data must stay valid until
 * the batch is posted; @p chan and @p pkt (NULL for an ACK) say whose it
 * is, for a refusal (sx_chan_tx_refused_locked). Token holder only.
 */
void sx_shard_tx_stage_locked(sx_shard_t *shard, unsigned tl, sx_tl_dest_t dest,
                              const uint8_t *data, size_t len, struct sx_chan *chan,
                              struct sx_txpkt *pkt);

/** A buffer for a standalone ACK's header that lives until the batch is
 *  posted: the next slot's, after making room as staging does. Stage it
 *  right after. Token holder only. */
uint8_t *sx_shard_tx_ack_buf_locked(sx_shard_t *shard, unsigned tl);

/** Posts the staged datagrams in one batch, within the interface's send
 *  credits; each one the interface refuses goes back to its channel.
 *  Token holder only. */
void sx_shard_tx_post_locked(sx_shard_t *shard);

/* wake.c: what the token holder wakes before it releases the token (the
 * flush hook). */

/** Keeps the shard's sx_engine_fd timer armed for its earliest timer. */
void sx_shard_fd_timer_locked(sx_shard_t *shard);

/** Whether an interface holds datagrams its fd will not announce. */
bool sx_shard_ifaces_hold_locked(sx_shard_t *shard);

/** Wakes the service, asleep while serving, for an earlier timer this
 *  tenure armed (not a progress pass: shard/env.h, svc_asleep_until). */
void sx_shard_kick_service_locked(sx_shard_t *shard);

/** Takes @p chan off the ready list (a channel being destroyed). */
void sx_shard_unlink_ready_locked(sx_shard_t *shard, struct sx_chan *chan);

/** Wakes the shard's sleeping progress thread, if any. Any thread. */
void sx_shard_wake(sx_shard_t *shard);

/**
 * Prepares a progress thread to sleep: takes the token (false if busy),
 * notes the earliest timer, publishes that the thread sleeps, and leaves
 * (running anything that arrived). Returns true with *timeout_ns_p set
 * (UINT64_MAX: no timer) when nothing ran and the thread may sleep; the
 * thread must then clear `sleeping` when it wakes.
 */
bool sx_shard_prepare_sleep(sx_shard_t *shard, uint64_t *timeout_ns_p);

/** Handles one datagram received on interface @p tl from @p src (an
 *  event's src and src_len; NULL when the transport cannot say) with the
 *  ECN field @p ecn (SX_TL_ECN_*). Token holder only. */
void sx_shard_recv_from_locked(sx_shard_t *shard, unsigned tl, const uint8_t *data, size_t len,
                               const void *src, size_t src_len, uint8_t ecn);

/** The same for a datagram from the network interface, its source not
 *  known (the fuzzer's). */
void sx_shard_recv_locked(sx_shard_t *shard, const uint8_t *data, size_t len);

/** Whether a datagram from @p src (NULL: not known) may come from @p
 *  chan's peer (sx_tl_ops_t.src_matches, SX_CHECK_SOURCE); counts
 *  drop_source and warns, rate-limited, when not. Token holder. */
bool sx_shard_src_ok_locked(sx_shard_t *shard, struct sx_chan *chan, const void *src,
                            size_t src_len);

/** A connection control packet that came over the OOB (the oob CPC);
 *  anything but SX_PKT_CTRL is dropped. */
void sx_shard_recv_ctrl_locked(sx_shard_t *shard, const uint8_t *data, size_t len);

/** Checks @p guest into the hotel until @p deadline_ns. Token holder only.
 *  SX_ERR_FULL when every room is taken. */
int sx_shard_checkin_locked(sx_shard_t *shard, sx_shard_guest_t *guest, uint64_t deadline_ns,
                            sx_hotel_key_t *key_p);

#endif /* SX_SHARD_SHARD_H */
