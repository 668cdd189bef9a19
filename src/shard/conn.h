/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Connection set-up, the channel's side: the exchange that brings a
 * channel up (CONNECT / ACCEPT / ACK / PROBE / RESET), its control body on
 * the wire, and the interface a connection method implements for it.
 *
 * The exchange is channel protocol and lives here; how a channel gets its
 * path, and which method a peer's channels use, is the connection
 * methods' business (src/cpc/). A method is a const table of slots
 * (sx_conn_ops_t) that a channel calls; the methods that run the exchange
 * (handshake, oob, rdmacm) call back into the functions below, and carry
 * its messages either as SX_PKT_CTRL datagrams over the channel's own
 * transport (handshake, rdmacm) or inside OOB messages (oob).
 *
 * A control message is a packet header (wire.h; type SX_PKT_CTRL, no
 * sequence number) and this 40-byte body, little-endian:
 *
 *    0  u8   op         SX_CTRL_*
 *    1  u8   cpc        the connection method's id
 *    2  u16  reserved   zero
 *    4  u32  mtu        largest datagram the sender accepts
 *    8  u32  window     the sender's window, in packets (a power of two)
 *   12  u32  isn        the sender's initial sequence number
 *   16  u32  nonce      CONNECT/PROBE: chosen by the sender; echoed back.
 *                       RESET: the sequence field of the stale packet it
 *                       answers (a challenge's nonce, see Restarts)
 *   20  u32  probe_len  PROBE: this datagram's length; PROBE_ACK: what arrived
 *   24  u64  epoch      RESET: the stale epoch that was refused
 *   32  u64  reserved   zero
 *
 * then, for PROBE only, padding up to probe_len.
 *
 * The exchange (each side connects on its own first send; both may at
 * once, and nothing needs resolving: each direction's state is its own):
 *
 *   CONNECT(isn, window, mtu)  ->  the receiver records isn (rcv_synced,
 *                                  not yet rcv_confirmed), answers ACCEPT
 *                                  with its own isn
 *   ACCEPT(isn, window, mtu)   ->  the connector records isn; the peer now
 *                                  knows ours; it answers ACK; over the
 *                                  datagram path it then sends PROBE of the
 *                                  negotiated datagram size and is up at
 *                                  PROBE_ACK (usnic's connectivity check)
 *   ACK(isn, nonce = the       ->  the acceptor knows the connector knows
 *       acceptor's isn)            its isn (rcv_confirmed): its own sends
 *                                  may start. Its direction of the path is
 *                                  not probed, so a small MTU there shows
 *                                  only as the peer timeout
 *                                  (SX_ERR_PEER_UNREACHABLE)
 *
 * Data from the peer also proves it has our isn (it sends only after an
 * ACCEPT from us, and its ACK field is our isn), so a lost ACK costs
 * nothing. A side that is not up yet still acknowledges what it receives.
 *
 * Set-up forgeries: a CONNECT is all in clear, and one forged with the
 * peer's epochs would otherwise set up the receiving direction at an isn
 * of the forger's choice, and data forged at that number would be
 * delivered (the cluster attack test's blind_setup, on any channel not
 * used yet). So a CONNECT's isn is provisional (a later CONNECT replaces
 * it, and nothing is delivered from it) until the peer proves it saw our
 * ACCEPT, which went to its address only: its ACK echoes our random isn
 * and carries its own, which we then take whatever CONNECTs came before
 * (RFC 9293 section 3.5: TCP's third segment acknowledges the server's
 * ISN), or its data acknowledges our isn at a sequence number inside the
 * window the held CONNECT opens. Unproven data whose ACK field is right
 * gets our ACCEPT again (at most once per RTO floor), which draws the
 * ACK from a connector that is up. An ACCEPT proves itself by echoing
 * our CONNECT's nonce. CONNECT is repeated with
 * exponential back-off from SX_RTO_INIT_US until SX_CONNECT_TIMEOUT_MS;
 * then the channel fails with SX_ERR_PEER_UNREACHABLE (no answer at all)
 * or SX_ERR_PATH_MTU (answers to small datagrams, none to the probe).
 *
 * Restarts: an engine that receives a packet addressed to an older epoch
 * of itself from a peer it knows answers RESET (at most once per RTO
 * floor per channel, but always to a challenge). A RESET is not believed
 * on its word, since all it says is in clear on the wire (RFC 5961
 * section 3's challenge ACK): the peer answers it with a challenge, a
 * liveness probe to the old incarnation whose sequence field (unused in
 * an ACK) holds a nonce from the CSPRNG, at most one per RTO floor. A
 * restarted engine takes that probe as stale and RESETs it, echoing the
 * nonce; only then does the peer fail its channels to the old
 * incarnation with SX_ERR_PEER_RESTARTED, an RTT later than the first
 * RESET and long before the peer timeout. An old incarnation that lives
 * answers the probe with an ACK, and a forged RESET changes nothing.
 * The new incarnation is a new peer (a new card) and connects afresh.
 */
#ifndef SX_SHARD_CONN_H
#define SX_SHARD_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sx_chan;
struct sx_shard;
struct sx_wire_hdr;

typedef struct sx_conn_method sx_conn_method_t;

/*
 * The slots a channel calls on its connection method. A method provides a
 * const table of them; the engine picks one method per peer (src/cpc/)
 * and every channel to that peer calls it. Every slot runs on the
 * channel's shard with its token held (_locked) and must not block; the
 * channel and its buffers stay the caller's.
 */
typedef struct sx_conn_ops {
    const char *name; /* for log lines and sx_dump */
    uint8_t id;       /* sx_cpc_id_t: in cards and in every control message */
    /** Whether the exchange probes the path with an MTU-sized datagram
     *  (only a method that carries its messages over that path can). */
    bool probe;
    /** A channel chose this method: sets its initial connection state
     *  (sx_conn_ep_init_up_locked or sx_conn_ep_init_idle_locked). Never
     *  NULL. */
    void (*ep_init_locked)(const sx_conn_method_t *method, struct sx_chan *chan);
    /** Work is queued on a channel that is not up: start connecting
     *  (sends, arms the retry timer). Never NULL. */
    void (*start_connect_locked)(const sx_conn_method_t *method, struct sx_chan *chan);
    /** The channel goes away: cancel timers. May be NULL. */
    void (*ep_finalize_locked)(const sx_conn_method_t *method, struct sx_chan *chan);
    /** Carries one control message (a whole packet, wire.h; @p data is
     *  the caller's and valid only during the call) to the channel's
     *  peer; never blocks; a lost message is retried by the exchange.
     *  NULL for a method without an exchange (implicit). */
    int (*send_ctrl_locked)(const sx_conn_method_t *method, struct sx_chan *chan,
                            const uint8_t *data, size_t len);
} sx_conn_ops_t;

/* A method as one engine runs it: its slots, and the state they get back. */
struct sx_conn_method {
    const sx_conn_ops_t *ops;
    void *ctx; /* the method's own (src/cpc/: the component's instance) */
};

/* Bytes of a method's own data in a business card. */
#define SX_CONN_BLOB_MAX 64

/* A peer's offer of a connection method, from its business card: which
 * method, at what priority (0-100), and the method's own bytes (oob: where
 * the peer's OOB endpoint listens; rdmacm: its listener). */
typedef struct sx_conn_offer {
    uint8_t id;
    uint8_t priority;
    uint8_t blob_len;
    uint8_t blob[SX_CONN_BLOB_MAX];
} sx_conn_offer_t;

#define SX_CTRL_LEN 40

typedef enum sx_ctrl_op {
    SX_CTRL_CONNECT = 1,
    SX_CTRL_ACCEPT = 2,
    SX_CTRL_ACK = 3,
    SX_CTRL_PROBE = 4,
    SX_CTRL_PROBE_ACK = 5,
    SX_CTRL_RESET = 6,
} sx_ctrl_op_t;

typedef enum sx_conn_state {
    SX_CONN_IDLE = 0,       /* nothing sent yet */
    SX_CONN_CONNECTING = 1, /* CONNECT or PROBE outstanding */
    SX_CONN_UP = 2,         /* data may flow */
} sx_conn_state_t;

/** A decoded control body. */
typedef struct sx_ctrl {
    uint8_t op;
    uint8_t cpc;
    uint32_t mtu;
    uint32_t window;
    uint32_t isn;
    uint32_t nonce;
    uint32_t probe_len;
    uint64_t epoch;
} sx_ctrl_t;

/** Encodes @p ctrl into SX_CTRL_LEN bytes at @p out. */
void sx_ctrl_write(uint8_t *out, const sx_ctrl_t *ctrl);

/** Decodes and checks a body of @p len bytes: false for a short body, an
 *  unknown op or non-zero reserved fields. */
bool sx_ctrl_parse(const uint8_t *in, size_t len, sx_ctrl_t *ctrl);

/** Sets a channel up at once (implicit, self). */
void sx_conn_ep_init_up_locked(struct sx_chan *chan);

/** Leaves a channel to be connected by the exchange. */
void sx_conn_ep_init_idle_locked(struct sx_chan *chan);

/** Starts the exchange through the channel's method. */
void sx_conn_start_locked(struct sx_chan *chan);

/** Cancels the retry timer. */
void sx_conn_ep_fini_locked(struct sx_chan *chan);

/**
 * Handles a control packet for @p chan (its header already checked and
 * matched to the channel), whichever carrier brought it; answers go
 * through the channel's method. Bad bodies are dropped and counted
 * (SX_DROP_CTRL).
 */
void sx_conn_recv_ctrl_locked(struct sx_chan *chan, const struct sx_wire_hdr *hdr,
                              const uint8_t *data, size_t len);

/** Handles a RESET (which names an epoch, not a channel) from @p src
 *  (sx_shard_src_ok_locked). */
void sx_conn_recv_reset_locked(struct sx_shard *shard, const struct sx_wire_hdr *hdr,
                               const uint8_t *data, size_t len, const void *src, size_t src_len);

/** A packet addressed to a stale epoch of ours arrived from @p chan's peer:
 *  tells the peer, rate-limited. */
void sx_conn_stale_locked(struct sx_chan *chan, const struct sx_wire_hdr *hdr);

/** Data (header @p hdr) arrived on a channel that is not up: whether it
 *  may be taken (and the channel is now up). */
bool sx_conn_data_ok_locked(struct sx_chan *chan, const struct sx_wire_hdr *hdr);

/*
 * How long datagrams of one size must go unanswered, while small ones are
 * answered, before a smaller size is tried: at connect (at most a
 * sixteenth of SX_CONNECT_TIMEOUT_MS, so that every size fits in it) and
 * on an established channel (chan_pmtu.c). A receiver's socket buffer
 * that overflows (a burst into a process that is behind, on an
 * oversubscribed machine) also drops large datagrams and takes small ones,
 * since the kernel counts it in bytes; but it drains in milliseconds to a
 * few hundred, where a path's MTU stays. Seen on the namespace cluster
 * with six ranks on two cores and 2 % loss on every port: three probes of
 * 65000 bytes on loopback, and an established channel's first packet
 * three times, lost within 100-200 ms.
 */
#define SX_PMTU_PERSIST_NS 1000000000ull

/** The largest datagram size the handshake steps down through (the
 *  payloads of 9000-, 1500- and 1280-byte IPv4 paths, then 576 bytes)
 *  below @p size; 0 when there is none. The path MTU's search after
 *  connect (chan_pmtu.c) steps through the same sizes. */
size_t sx_conn_size_below(size_t size);

#endif /* SX_SHARD_CONN_H */
