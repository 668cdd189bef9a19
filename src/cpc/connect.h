/*
 * The connection exchange shared by the handshake and oob components: the
 * same control messages, carried either as SX_PKT_CTRL datagrams over the
 * transport (handshake) or inside OOB messages (oob).
 *
 * A control message is a packet header (wire.h; type SX_PKT_CTRL, no
 * sequence number) and this 40-byte body, little-endian:
 *
 *    0  u8   op         SX_CTRL_*
 *    1  u8   cpc        the component's id
 *    2  u16  reserved   zero
 *    4  u32  mtu        largest datagram the sender accepts
 *    8  u32  window     the sender's window, in packets (a power of two)
 *   12  u32  isn        the sender's initial sequence number
 *   16  u32  nonce      CONNECT/PROBE: chosen by the sender; echoed back
 *   20  u32  probe_len  PROBE: this datagram's length; PROBE_ACK: what arrived
 *   24  u64  epoch      RESET: the stale epoch that was refused
 *   32  u64  reserved   zero
 *
 * then, for PROBE only, padding up to probe_len.
 *
 * The exchange (each side connects on its own first send; both may at
 * once, and nothing needs resolving: each direction's state is its own):
 *
 *   CONNECT(isn, window, mtu)  ->  the receiver records isn (rcv_synced),
 *                                  answers ACCEPT with its own isn
 *   ACCEPT(isn, window, mtu)   ->  the connector records isn; the peer now
 *                                  knows ours; it answers ACK; over the
 *                                  datagram path it then sends PROBE of the
 *                                  negotiated datagram size and is up at
 *                                  PROBE_ACK (usnic's connectivity check)
 *   ACK                        ->  the acceptor knows the connector knows
 *                                  its isn: its own sends may start. Its
 *                                  direction of the path is not probed, so
 *                                  a small MTU there shows only as the peer
 *                                  timeout (SX_ERR_PEER_UNREACHABLE)
 *
 * Data from the peer also proves it has our isn (it sends only after an
 * ACCEPT from us), so a lost ACK costs nothing. A side that is not up yet
 * still acknowledges what it receives. CONNECT is repeated with
 * exponential back-off from SX_RTO_INIT_US until SX_CONNECT_TIMEOUT_MS;
 * then the channel fails with SX_ERR_PEER_UNREACHABLE (no answer at all)
 * or SX_ERR_PATH_MTU (answers to small datagrams, none to the probe).
 *
 * Restarts: an engine that receives a packet addressed to an older epoch
 * of itself from a peer it knows answers RESET (at most once per RTO
 * floor per channel); the peer then fails its channels to the old
 * incarnation with SX_ERR_PEER_RESTARTED instead of waiting for the peer
 * timeout. The new incarnation is a new peer (a new card) and connects
 * afresh.
 */
#ifndef SX_CPC_CONNECT_H
#define SX_CPC_CONNECT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cpc/cpc.h"

struct sx_chan;
struct sx_shard;
struct sx_wire_hdr;

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

/** Starts the exchange through the channel's component. */
void sx_conn_start_locked(struct sx_chan *chan);

/** Cancels the retry timer. */
void sx_conn_ep_fini_locked(struct sx_chan *chan);

/**
 * Handles a control packet for @p chan (its header already checked and
 * matched to the channel), whichever carrier brought it; answers go
 * through the channel's component. Bad bodies are dropped and counted
 * (SX_DROP_CTRL).
 */
void sx_conn_recv_ctrl_locked(struct sx_chan *chan, const struct sx_wire_hdr *hdr,
                              const uint8_t *data, size_t len);

/** Handles a RESET (which names an epoch, not a channel). */
void sx_conn_recv_reset_locked(struct sx_shard *shard, const struct sx_wire_hdr *hdr,
                               const uint8_t *data, size_t len);

/** A packet addressed to a stale epoch of ours arrived from @p chan's peer:
 *  tells the peer, rate-limited. */
void sx_conn_stale_locked(struct sx_chan *chan, const struct sx_wire_hdr *hdr);

/** Data arrived on a channel that is not up: whether it may be taken
 *  (and the channel is now up). */
bool sx_conn_data_ok_locked(struct sx_chan *chan);

#endif /* SX_CPC_CONNECT_H */
