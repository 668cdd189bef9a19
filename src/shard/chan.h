/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Channels: the reliable, ordered stream between one local shard and one
 * shard of a peer (DESIGN.md section 4), over unreliable datagrams.
 *
 * Sender: messages queue on the channel and are cut into packets when the
 * shard flushes; each packet gets a 32-bit sequence number, is kept in a
 * window slot and checked into the shard's hotel with a retransmission
 * deadline. Cumulative ACKs free packets and complete messages; selective
 * ACKs and duplicate ACKs trigger fast retransmission; a hotel eviction is
 * a timeout: the packet goes out again and the timeout backs off (RFC
 * 6298). No progress for the peer timeout fails the channel.
 *
 * Receiver: packets are delivered in sequence order, exactly once; packets
 * past a gap are kept aside (up to the window, and MAX_INFLIGHT bytes) and
 * the first SX_WIRE_SACK_BITS of them are reported in the SACK bitmap. ACKs ride on data packets,
 * or go alone after ACK_EVERY packets or ACK_DELAY_US, and at once when a packet arrives out of
 * order or twice.
 *
 * The code is split the way Linux splits TCP: chan.c (lifetime, the
 * operation queue), chan_tx.c (framing, aggregation, chunking, the
 * flush), chan_rx.c (reordering, reassembly, delivery),
 * chan_retransmit.c (ACK/SACK, RFC 6298 timers, RACK) and chan_rma.c (the
 * RMA target) and chan_pmtu.c (the path MTU after connect: black holes
 * and fragments); chan_int.h is what they share. The connection exchange is
 * conn.c.
 *
 * Synchronization: a channel belongs to its local shard; every function
 * here is called by the holder of that shard's token (_locked).
 */
#ifndef SX_SHARD_CHAN_H
#define SX_SHARD_CHAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/uio.h>

#include <shardx.h>

#include "common/copy.h"
#include "common/wheel.h"
#include "hotel/hotel.h"
#include "shard/cc.h"
#include "shard/conn.h"
#include "shard/inbox.h"
#include "shard/peer.h"
#include "shard/shard.h"
#include "shard/wire.h"
#include "transports/transport.h"

#define SX_OP_IOV_MAX SX_SEND_IOV_MAX /* include/shardx.h */

struct sx_mem; /* shard/mem.h */
/* Most PUT/GET a channel keeps outstanding, and most answers it queues for
 * its peer: the cap that keeps a flood of requests from costing unbounded
 * memory. A conforming initiator never exceeds it (more sx_put/sx_get wait
 * in rma_waitq until earlier ones are answered), so the target may drop
 * what exceeds it. */
#define SX_RMA_OUTSTANDING_MAX 4096

/* What an operation is. */
typedef enum sx_op_kind {
    SX_OP_AM = 0,     /* active message; completes on the cumulative ACK */
    SX_OP_PUT = 1,    /* write into remote memory; completes on the target's response */
    SX_OP_GET = 2,    /* read remote memory; completes when the last data arrives */
    SX_OP_RESP = 3,   /* a target's response to PUT or GET; internal, no completion */
    SX_OP_REFUSE = 4, /* a refusal of the peer's message (AM_REFUSE); internal */
} sx_op_kind_t;

/* An operation queued on a channel. */
typedef struct sx_op {
    sx_inbox_req_t req; /* delegation to the home shard */
    struct sx_op *next;
    struct sx_peer *peer;
    unsigned lane; /* remote shard */
    uint8_t kind;  /* sx_op_kind_t */
    uint8_t tag;
    uint8_t started; /* its first frame is on the wire */
    bool more;       /* AM: sent with SX_SEND_MORE; its push holds the shard's flush */
    bool cached;     /* from sx_op_alloc: sx_op_release may keep it (op_cache.h) */
    bool refused;    /* AM: the peer refused it (AM_REFUSE); status holds why */
    uint16_t iovcnt;
    uint32_t last_seq;    /* sequence number of the packet with its last byte */
    uint32_t first_seq;   /* AM: ... with its first frame, and that frame's index */
    uint16_t first_frame; /* (an AM_REFUSE names the message so); REFUSE: ditto */
    uint64_t len;         /* total bytes (PUT, GET: of the remote range) */
    uint64_t off;         /* bytes cut into packets so far */
    unsigned cur_iov;     /* cursor into iov for the next byte */
    size_t cur_off;
    struct iovec iov[SX_OP_IOV_MAX]; /* the data to send (AM, PUT, RESP to a GET) */
    uint64_t raddr;                  /* PUT, GET: remote address */
    uint64_t rkey;                   /* PUT, GET: remote key */
    uint32_t op_id;                  /* PUT, GET: the channel's id for it; RESP: the initiator's */
    int32_t status;                  /* GET: the first error seen; RESP: the status to report */
    uint8_t *dst;                    /* GET: where the data goes */
    uint64_t queued_ns;              /* joined its channel (sx_dump, the watchdog) */
    bool from_region;                /* RESP to a GET: data read from the region as it is sent */
    uint64_t got;                    /* GET: bytes arrived */
    sx_complete_cb_t cb;             /* NULL: nobody to tell (sendi, RESP) */
    void *ctx;
    uint8_t inline_data[]; /* sendi: the copied message */
} sx_op_t;

/* A connection method's own resolution of the peer's address (rdmacm). */
typedef enum sx_chan_resolve {
    SX_CHAN_RESOLVE_NONE = 0,    /* dest is the card's address; nothing asked */
    SX_CHAN_RESOLVE_PENDING = 1, /* asked; dest is still the card's address */
    SX_CHAN_RESOLVE_DONE = 2,    /* dest is what the method resolved */
    SX_CHAN_RESOLVE_FAILED = 3,  /* dest is the card's address; resolution failed */
} sx_chan_resolve_t;

/* A packet that has been sent and not yet acknowledged. */
typedef struct sx_txpkt {
    sx_shard_guest_t guest; /* hotel occupant; on_evict retransmits */
    struct sx_chan *chan;
    sx_hotel_key_t key;
    uint32_t seq;
    uint32_t len;       /* datagram bytes: in data[], or the first head of them there and
                         * the rest at ext */
    uint32_t head;      /* with ext: the header and frame header in data[] */
    const uint8_t *ext; /* zero copy: the payload's data, in the memory of the operation
                         * it belongs to, which lives until every packet of it is
                         * acknowledged (chan_tx.c, chan_zero_copy); NULL: all in data[] */
    struct sx_mem *pin; /* a GET answer's: ext lies in this region, read through
                         * sx_mem_pin_read_begin; let go when the packet is freed */
    uint32_t cap;       /* bytes data[] holds; a large or a full-size packet goes
                         * back to its shard's pool (chan_pkt.c, chan_pkt_pooled) */
    /* data[] and this record lie in it (chan_pkt.c, Arenas); NULL: malloc'd,
     * data[] right after the record */
    struct sx_pkt_arena *arena;
    uint64_t first_sent_ns;
    uint64_t last_sent_ns;
    uint64_t deadline_ns; /* when its hotel room evicts it (a retransmission) */
    uint16_t transmissions;
    bool sacked;
    bool queued;               /* waiting in the channel's retransmit queue */
    bool in_pipe;              /* counted in its congestion controller's flight */
    bool unstamped;            /* new, staged: its send time and hotel room come
                                * after the system call (sx_chan_stamp_locked) */
    struct sx_txpkt *rtx_next; /* also the link in the shard's pool */
    uint8_t *data;             /* header + payload: after the record, or in its arena */
} sx_txpkt_t;

/* A packet that arrived ahead of a gap. */
typedef struct sx_rxslot {
    uint8_t *buf; /* a copy of the datagram, or NULL */
    uint32_t len;
} sx_rxslot_t;

typedef struct sx_chan {
    struct sx_peer *peer;
    sx_shard_t *shard;
    unsigned lane;     /* remote shard index */
    unsigned tl;       /* which of the shard's interfaces */
    uint8_t tag_len;   /* SX_AUTH: bytes of tag after each datagram's payload (0: none) */
    sx_tl_dest_t dest; /* resolved address of the remote shard */
    int failed;        /* 0, or the status operations now fail with */

    /* Sender. */
    uint32_t snd_una; /* oldest unacknowledged sequence number */
    uint32_t snd_nxt; /* next sequence number to use */
    sx_txpkt_t **win; /* [window], indexed by seq & (window - 1) */
    size_t inflight_bytes;
    sx_op_t *sendq, *sendq_tail; /* not yet fully cut into packets */
    bool held; /* sendq holds what sx_sendi held back (SX_SENDI_HOLD_US) until the flush */
    sx_op_t *ackq, *ackq_tail; /* fully sent, waiting for the cumulative ACK */
    sx_op_t *rmaq, *rmaq_tail; /* PUT and GET sent, waiting for the target's answer */
    /* PUT and GET beyond SX_RMA_OUTSTANDING_MAX, in the order posted: each
     * answer lets the oldest go (sx_chan_rma_admit_locked). */
    sx_op_t *rma_waitq, *rma_waitq_tail;
    uint32_t next_op_id;
    unsigned rma_outstanding; /* our PUT and GET not yet answered */
    unsigned pinned_out;      /* packets sent from a region, under a pin, not yet acknowledged */
    unsigned resp_queued;     /* answers we owe the peer, not yet sent */
    /* Refusals of the peer's messages (wire.h): while `hold`, the
     * cumulative ACK stays at hold_seq, the oldest packet with a refused
     * message, and hold_sack marks what arrived after it; it lets go when
     * every AM_REFUSE frame is sent (refuse_queued 0) and acknowledged
     * (refuse_last_seq, the packet of the latest, before snd_una). */
    bool hold;
    uint32_t hold_seq;
    uint64_t hold_sack;
    unsigned refuse_queued;
    uint32_t refuse_last_seq;
    /* The op of ackq that the peer's latest refusal named, where the
     * search for the next one starts (chan_rx.c, chan_refused_op); NULL:
     * none. Always in ackq: cleared when that op leaves it. */
    struct sx_op *refuse_hint;
    sx_txpkt_t *rtx, *rtx_tail; /* packets to send again */
    uint32_t last_ack;
    unsigned dupacks;
    uint32_t recover; /* fast recovery until snd_una passes this */
    bool in_recovery;
    /* After a timeout: packets sent before it are resent as ACKs come back
     * (a doubling burst per ACK, like slow start) until snd_una passes
     * rto_recover. */
    bool in_rto_recovery;
    uint64_t rack_ns; /* latest send time of a packet known to have arrived */
    /* RACK's reordering allowance (RFC 8985 section 6.2): 1 + reo_extra
     * quarters of SRTT, one more per round trip in which the peer reported
     * a duplicate (SX_PKTF_DSACK; dsack_round: until snd_una passes it, a
     * round is open), back to one after reo_persist loss episodes without
     * one (loss_round_ns: the start of the latest; chan_retransmit.c). */
    uint8_t reo_extra;
    uint8_t reo_persist;
    bool dsack_round_open;
    uint32_t dsack_round;
    uint64_t loss_round_ns;
    uint32_t rto_recover;
    uint64_t rto_at_ns;
    unsigned rto_burst;
    uint64_t srtt_ns, rttvar_ns, rto_ns;
    uint64_t min_rtt_ns; /* the smallest RTT sample (0: none yet); RACK */
    unsigned backoff;
    /* Tail loss probes (chan_tlp.c, SX_TLP): tlp_timer fires a probe
     * timeout after tlp_mark_ns, the latest new packet sent or ACK that
     * moved snd_una, or just before the oldest packet's timeout. The
     * probe out (tlp_out: packet tlp_seq sent again at tlp_sent_ns, when
     * snd_nxt was tlp_end) ends as a repaired loss when the cumulative
     * ACK passes tlp_end, or reached it and the next probe is due with no
     * report (chan_tlp_settle), or as none when the peer reports the copy
     * as a duplicate; each such report doubles the probe timeout once
     * more (tlp_slow, down again by a repair or a timeout). */
    sx_timer_t tlp_timer;
    uint64_t tlp_mark_ns;
    uint64_t tlp_sent_ns; /* 0: no probe yet */
    uint32_t tlp_seq;
    uint32_t tlp_end;
    bool tlp_out;
    uint8_t tlp_slow;
    /* Flow control (RFC 9293 section 3.8.6): the peer's receive window
     * from its latest ACK (the ack it came with, and the packets and bytes
     * it allows from there). New packets go out while snd_nxt is before
     * peer_rwnd_ack + peer_rwnd_pkts and fewer than peer_rwnd_bytes are in
     * flight; a closed window with nothing in flight is probed by the
     * persist timer. */
    uint32_t peer_rwnd_ack;
    uint32_t peer_rwnd_pkts;
    uint32_t peer_rwnd_bytes;
    /* Congestion control (shard/cc.h): the destination host's controller,
     * shared with other channels to it; NULL where SX_CONGESTION leaves this
     * channel out. A flush it stopped re-arms cc_timer for when the
     * pacing clock or the window lets it go on. What counts against the
     * window is the pipe of RFC 6675: packets sent and neither
     * acknowledged, SACKed nor presumed lost (a retransmission enters it
     * again). */
    struct sx_cc *cc;
    sx_timer_t cc_timer;
    size_t cc_pipe; /* bytes of ours in cc's flight (the packets in_pipe) */
    /* What cc_pipe changed by and cc's shared flight has not yet: packets
     * a flush sends, and those an ACK takes out, count there once per
     * flush and per ACK instead of once each (sx_chan_cc_post_locked). */
    int64_t cc_unposted;
    uint64_t cc_pace_unposted; /* likewise, ns of the pacing clock */
    /* Our timeouts' collapse of cc's window during this timeout recovery
     * (sx_cc_lost's time), for sx_cc_undo when F-RTO finds them spurious;
     * 0 when none or the recovery ended otherwise. */
    uint64_t cc_collapse_ns;
    /* Our last halving of cc's window (sx_cc_lost's time) while duplicate
     * reports may still show it spurious (sx_chan_cc_dsack_locked), 0:
     * none; the packets its loss episode sent again that no report has
     * covered yet, bit i for seq undo_base + i; and whether a report has
     * covered one (the undo waits for the end of an ACK's processing,
     * sx_chan_cc_undo_try_locked). */
    uint64_t undo_cut_ns;
    uint64_t undo_bits;
    uint32_t undo_base;
    bool undo_heard;
    /* ECN (wire.h): the running counts of ECT and CE data datagrams
     * received, which every ACK echoes, and the peer's counts as its
     * newest ACK gave them. */
    uint32_t rx_ecn_ect, rx_ecn_ce;
    uint32_t peer_ecn_ect, peer_ecn_ce;
    bool rwnd_stalled; /* a flush stopped at the peer's window */
    bool room_wait;    /* the last flush found no room in the shard's hotel for rtx's head */
    sx_timer_t persist_timer;
    unsigned persist_backoff;
    /* Liveness (chan_retransmit.c): when the peer last proved alive (a
     * packet from it), or the current wait for it began (the first send
     * after idle, a closed window, a stall of our own); and how many
     * retransmissions and probes went out unanswered since. */
    uint64_t alive_ns;
    unsigned probes;
    /* Path MTU black holes after connect (chan_pmtu.c, RFC 8899 section
     * 4.3): the oldest packet whose timeouts are being counted, how many
     * of them in a row the peer outlived by answering our probe (and
     * since when), and the largest datagram it acknowledged since the
     * last of them. */
    bool pmtu_watch;
    uint32_t pmtu_seq;
    unsigned pmtu_lost;
    uint64_t pmtu_since_ns; /* the first of them */
    uint32_t pmtu_acked_len;

    /* Receiver. The ring, indexed by seq & (window - 1), holds the
     * backlog (rcv_dlv .. rcv_nxt: received and acknowledged, not yet
     * handed up, because the service received it or it waits behind what
     * the service received) and, beyond rcv_nxt, packets that arrived
     * ahead of a gap. Both together stay within the window and the byte
     * budget (SX_MAX_INFLIGHT), which is what the advertised receive
     * window says is left. */
    uint32_t rcv_nxt;   /* next sequence number expected */
    uint32_t rcv_dlv;   /* next sequence number to hand up */
    uint32_t dlv_off;   /* where in it the next frame starts (0: at its first; sx_handup_t) */
    uint64_t rcv_sack;  /* the SACK view: bit i set, rcv_nxt + 1 + i is kept */
    sx_rxslot_t *ooo;   /* [window], allocated at the first packet kept */
    uint64_t *ooo_bits; /* [window / 64]: which slots hold a packet */
    unsigned ooo_count; /* packets kept ahead of a gap */
    size_t ooo_bytes;
    size_t backlog_bytes;
    uint32_t rwnd_adv_pkts; /* the receive window our latest ACK advertised */
    uint32_t rwnd_adv_bytes;
    bool on_backlog; /* on the shard's list of channels with a backlog */
    struct sx_chan *backlog_next;
    unsigned ack_pending; /* message frames received since we last acknowledged */
    bool ack_now;
    bool dsack_owed; /* a packet came twice: dsack_seq, reported by the next flush */
    uint32_t dsack_seq;
    /* The delayed ACK (chan_rx.c, chan_owe_ack): due ack_delay after
     * ack_owed_ns, when the first frame we owe an ACK for came. The
     * timer may have been armed for an earlier debt that a packet of
     * ours has paid since; it then fires early and arms itself again. */
    sx_timer_t ack_timer;
    uint64_t ack_owed_ns;
    struct sx_chan_frags *frags; /* packets arriving in fragments (chan_pmtu.c) */
    /* The peer table's removal count when the peer was last seen in it
     * (chan_rx.c, chan_peer_removed). */
    unsigned rx_removals_seen;
    uint8_t *asm_buf; /* reassembly of a chunked message */
    uint64_t asm_total, asm_got;
    uint8_t asm_tag;
    bool asm_drop;      /* the message is being discarded (too large, no memory) */
    int32_t put_status; /* target: status of the PUT whose chunks are arriving */
    /* Target: that PUT's next chunk (addr) when it has more to come and
     * every chunk so far was written (Landing). */
    bool put_follow;
    sx_wire_rma_t put_next;

    /* Connection set-up (shard/conn.h). Nothing is sent before conn is
     * SX_CONN_UP; nothing is delivered before rcv_confirmed. */
    const sx_conn_method_t *conn_method; /* how this channel connects: its peer's */
    uint8_t conn;                        /* sx_conn_state_t */
    bool rcv_synced;                     /* rcv_nxt holds the peer's initial sequence number */
    bool rcv_confirmed;                  /* ... and the peer proved it (conn.h, Set-up forgeries) */
    bool conn_small_ok;                  /* handshake: the peer answered a small datagram */
    bool conn_probe_ok;                  /* handshake: ... and an MTU-sized one */
    uint32_t snd_isn;                    /* our initial sequence number */
    uint32_t rcv_isn;                    /* the peer's, once synced */
    uint32_t snd_window;                 /* packets in flight: the smaller of both windows */
    size_t dgram_max;                    /* datagram size: the smaller of both ends' */
    size_t pmtu_ceiling;                 /* ours: the route's MTU, lowered by unanswered probes */
    unsigned conn_rung_tries;            /* probes sent at this datagram size ... */
    uint64_t conn_rung_ns;               /* ... since then */
    uint64_t conn_nudge_ns;              /* our ACCEPT again, for unproven data */
    uint32_t peer_conn_nonce;            /* the peer's latest CONNECT ... */
    unsigned peer_conn_repeats;          /* ... and how often it came */
    uint32_t conn_nonce;
    unsigned conn_tries;
    uint64_t conn_start_ns;
    uint64_t conn_probe_start_ns;  /* the first probe went out (0: not yet) */
    uint64_t conn_small_answer_ns; /* the latest ACCEPT to our CONNECT */
    uint64_t conn_retry_ns;
    uint64_t last_reset_ns; /* we last told the peer it is stale */
    /* A RESET that named this channel's peer as stale, challenged
     * (conn.c): the nonce our probe carried, which the peer's new
     * incarnation echoes, and when it went out (0: none). */
    uint32_t reset_nonce;
    uint64_t reset_challenge_ns;
    sx_timer_t conn_timer;
    /* A connection method that resolves the peer's address itself
     * (rdmacm): where that stands (sx_chan_resolve_t) and the id of the
     * resolution in flight, which its answer must carry. */
    uint8_t resolve;
    uint32_t resolve_id;

    /* The shard's list of channels with something to send. */
    bool on_ready;
    struct sx_chan *ready_next;
} sx_chan_t;

/** The channel of this shard to @p peer's shard @p lane, created on first
 *  use. NULL if it cannot be created (no memory, bad address). */
sx_chan_t *sx_chan_get_locked(sx_shard_t *shard, struct sx_peer *peer, unsigned lane);

/** Frees a channel, completing every operation still on it with @p status. */
void sx_chan_destroy_locked(sx_chan_t *chan, int status);

/** Puts the channel on its shard's list of channels to flush. */
void sx_chan_kick_locked(sx_chan_t *chan);

/** Queues @p op (taking ownership) and marks the channel ready. */
void sx_chan_push_locked(sx_chan_t *chan, sx_op_t *op);

/** Lets PUT and GET that waited for room among the outstanding ones
 *  (rma_waitq) go, oldest first, after answers made room. */
void sx_chan_rma_admit_locked(sx_chan_t *chan);

/** A data datagram for @p c arrived with the ECN field @p ecn
 *  (SX_TL_ECN_*): counted for its ACKs to echo (wire.h). */
void sx_chan_cc_ecn_rx_locked(sx_chan_t *c, uint8_t ecn);

/*
 * Landing (transport.h, land): GET answers and PUT chunks read by the
 * kernel straight into where they belong, so that the kernel's copy is
 * the only one, as with an RDMA NIC's placement.
 *
 * GET answers. While a channel's GETs are answered, its shard offers the
 * transport, before each read of the data socket, the places the next
 * chunks belong: each GET's destination beyond what has arrived, chunk
 * after chunk, in the order the answers come. A datagram that was the
 * chunk its place awaits arrives with its data in place and is delivered
 * without a copy in user space (rx_landed_bytes). The kernel writes
 * whatever datagram comes into the place offered, but only ever into a
 * destination beyond what has arrived, which its owner may not read
 * before the GET completes and which the right chunk overwrites (an RDMA
 * NIC may write a destination early too). A datagram whose header names
 * another place is copied back whole before any datagram of its read is
 * handled (shard.c, sx_shard_land_sort_locked), one not delivered at once
 * (kept behind a gap) when it is handled, and those in the destination of
 * a GET that completes first before its owner can free it
 * (sx_shard_land_release_locked); rx_land_missed counts them.
 *
 * PUT chunks. When no GET answer is awaited, the shard offers instead the
 * rest of the PUT whose chunks a channel is taking, from the chunk after
 * the last one written to the operation's end: the target region, which
 * the chunk before was checked against and which is checked again (key,
 * write access, range) at each offer. The target's memory is not the
 * engine's to hold, as a GET's destination is until it completes: its
 * owner may deregister it at any time, from another thread or from a
 * callback this same poll runs. So the offer counts an access to the
 * region (shard/mem.h, Accesses), which a deregistration waits for, and
 * the access ends once the read is sorted, before any datagram of it is
 * handled: the sort copies back whole, and checks the CRC32C of, every
 * datagram while its landed bytes may still be read. After it nothing
 * reads them: a chunk that landed in its place but is not delivered at
 * once is dropped (drop_landed), its bytes already right where they
 * belong, and its retransmission brings it again; one delivered finds
 * its region checked again, as every PUT chunk is. The region beyond
 * what has arrived holds undefined bytes until the PUT completes, as
 * over RDMA.
 *
 * Both are off under SX_AUTH (the tag covers the datagram whole) and for
 * datagrams under SX_LAND_MIN bytes: GRO reads those several at a time,
 * which the transport would copy back. Landing is for loopback and
 * jumbo-frame paths. A GET under SX_LAND_MIN is never offered (nor those
 * after it in the same read): one datagram's copy saves nothing, and its
 * destination then takes no other datagram's bytes, so a refused small
 * GET leaves it as it was.
 */
#define SX_LAND_MIN 8192u
/* Reads of one datagram that look for the next PUT after one ends
 * (shard.h, land_probe): a standalone ACK or two may come first. */
#define SX_LAND_PROBES 4u

/** Where a landing of bytes the kernel read put them; NULL: nothing landed. */
typedef struct sx_landing {
    uint8_t *dst; /* the bytes of the datagram from head on */
    size_t len;
    size_t head; /* SX_WIRE_RESP_DATA_OFF or SX_WIRE_PUT_DATA_OFF */
    bool region; /* a PUT's, in a registered region: dst may be read only in the sort */
} sx_landing_t;

/** Copies landed bytes back into the datagram @p data read around them
 *  (transport.h: room stands there for them), making it whole; counted.
 *  A region's landing only before its read's access ends (Landing). */
static inline void sx_landing_undo_locked(sx_shard_t *shard, const uint8_t *data,
                                          const sx_landing_t *land)
{
    sx_copy_bulk((uint8_t *)(uintptr_t)data + land->head, land->dst, land->len);
    sx_stat_add(&shard->stats.copy_rx_bytes, land->len);
    sx_stat_add(&shard->stats.rx_land_missed, 1);
}

/** The GETs of @p c whose answers may land, in the order their answers
 *  come (the order of the requests), at most @p max, and in *step_p a
 *  chunk's length; returns how many, 0 when @p c awaits none or lands
 *  nothing. */
unsigned sx_chan_land_spans_locked(const sx_chan_t *c, sx_land_span_t *spans, unsigned max,
                                   size_t *step_p);

/** The rest of the PUT @p c takes whose chunks may land (Landing): in
 *  *span its range in the target region (dst: where the operation starts
 *  there; got: the next chunk's offset), in *step_p a chunk's length, and
 *  in *mem_p the region, whose access this call began (the caller ends
 *  it). False when @p c follows no PUT, or the region no longer admits
 *  it. */
bool sx_chan_land_put_span_locked(const sx_chan_t *c, sx_land_span_t *span, size_t *step_p,
                                  struct sx_mem **mem_p);

/** Whether @p r names a chunk of the PUT @p c follows (Landing): its id,
 *  key and range as its earlier chunks gave them. */
bool sx_chan_put_followed_locked(const sx_chan_t *c, const sx_wire_rma_t *r);

/** Whether the validated DATA packet @p hdr (@p data, its first
 *  land->head bytes) whose data landed at @p land is the chunk that
 *  belongs there and will be delivered now; false: the caller copies the
 *  landed bytes back (a GET answer's) or drops the datagram (a PUT's). */
bool sx_chan_land_fits_locked(const sx_chan_t *c, const sx_wire_hdr_t *hdr, const uint8_t *data,
                              const sx_landing_t *land);

/** Handles a validated packet addressed to this channel. @p land: its
 *  data landed in place (sx_chan_land_fits_locked said so), else NULL. */
void sx_chan_recv_locked(sx_chan_t *chan, const sx_wire_hdr_t *hdr, const uint8_t *data, size_t len,
                         const sx_landing_t *land);

/** Handles a validated fragment (SX_PKTF_FRAG) addressed to this channel:
 *  keeps it, and hands the packet to sx_chan_recv_locked once whole. */
void sx_chan_recv_frag_locked(sx_chan_t *chan, const sx_wire_hdr_t *hdr, const uint8_t *data,
                              size_t len);

/** Sends what the window allows: retransmissions first, then new packets,
 *  then a standalone ACK if one is owed. Returns datagrams posted. */
unsigned sx_chan_flush_locked(sx_chan_t *chan);

/** The shard's batch could not post a datagram of this channel's (@p pkt,
 *  or NULL for an ACK): with @p full (the interface had no room) it goes
 *  out again at the next flush; otherwise a data packet waits for its
 *  retransmission timer. */
void sx_chan_tx_refused_locked(sx_chan_t *chan, struct sx_txpkt *pkt, bool full);

/** A new data packet the shard's batch just posted (or tried to: before
 *  sx_chan_tx_refused_locked): its send time is @p sent_ns (@p now, or
 *  the time before the batch's system call), and it takes its hotel room
 *  (retransmission timer) at @p now, or waits as a retransmission where
 *  the hotel has none. Called once per packet with `unstamped` set. */
void sx_chan_stamp_locked(struct sx_txpkt *pkt, uint64_t sent_ns, uint64_t now);

/** Frees @p shard's packet arenas (chan_pkt.c, Arenas) when it is destroyed,
 *  after every packet. */
void sx_chan_pkt_arenas_free(sx_shard_t *shard);

/** Whether an operation queued now would have to wait (operations ahead of
 *  it, retransmissions, a full window or byte budget): sx_sendi's test. */
bool sx_chan_would_wait_locked(const sx_chan_t *chan);

/** The inbox request that queues an operation (sx_op_t) on its channel,
 *  on the shard the request runs on (the sender's home shard). */
void sx_op_push_run(void *owner, sx_inbox_req_t *req);

/** Fails the channel: every operation completes with @p status. */
void sx_chan_fail_locked(sx_chan_t *chan, int status);

/** The same, with the diagnosis (@p why) logged and given to the error
 *  callback's report when the peer as a whole fails. */
void sx_chan_fail_why_locked(sx_chan_t *chan, int status, const char *why);

/** Stages nothing: sends one datagram of @p len bytes at @p data (header
 *  already written) to the channel's peer at once, after what is staged.
 *  For connection control; a refused datagram is lost (the sender
 *  retries). */
int sx_chan_send_raw_locked(sx_chan_t *chan, const uint8_t *data, size_t len);

/** A liveness probe (a standalone ACK with SX_PKTF_PROBE) whose unused
 *  sequence field carries @p nonce: the RESET challenge (conn.c). */
void sx_chan_send_challenge_locked(sx_chan_t *chan, uint32_t nonce);

/** 32 bits from the kernel's CSPRNG (getrandom), never 0; should it fail,
 *  the clock mixed (unpredictable is then best effort). Any thread. */
uint32_t sx_chan_random32(void);

/** Points the channel at another address of the same remote shard, in the
 *  interface's card format: a connection method resolved a better one
 *  than the card's (rdmacm: the path the connection manager found). What
 *  is staged goes to the old destination first; the old one is then
 *  forgotten. On error (the transport refuses the address) the channel
 *  keeps its destination. */
int sx_chan_set_dest_locked(sx_chan_t *chan, const void *addr, size_t len);

/** Completes @p op with @p status and frees it: runs its callback (a
 *  message without one that the peer refused goes to the error callback
 *  instead: shardx.h, sx_error_cb_t), or, on the engine's service thread,
 *  leaves it for the next caller. Token holder of @p shard. */
void sx_op_complete_locked(sx_shard_t *shard, sx_op_t *op, int status);

/** Hands the channel's backlog up, in order, as far as @p budget allows
 *  (a caller's progress, never the service); what is left puts the
 *  channel back on the shard's backlog list. Returns the frames handed
 *  up. */
unsigned sx_chan_deliver_backlog_locked(sx_chan_t *chan, sx_handup_t *budget);

/** Takes the ACK the shard holds (sx_chan_ack_hold_locked), if any: at the
 *  start of each pass, before each datagram is parsed, before a due timer
 *  fires, and when its channel fails. Returns 1 if one was taken. Token
 *  holder of @p shard. */
int sx_chan_ack_release_locked(sx_shard_t *shard);

#endif /* SX_SHARD_CHAN_H */
