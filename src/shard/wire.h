/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The wire format (DESIGN.md section 4). Everything is little-endian and
 * every field that comes off the wire is untrusted: sx_wire_parse_packet
 * and sx_wire_next_frame check lengths, versions and checksums before any
 * other code looks at a byte, and a bad packet is dropped with a reason.
 *
 * A datagram is one packet header followed by zero or more frames:
 *
 *   packet header (64 bytes)
 *     0  u8   version            SX_WIRE_VERSION
 *     1  u8   type               SX_PKT_DATA, SX_PKT_ACK or SX_PKT_CTRL
 *     2  u16  flags              SX_PKTF_*
 *     4  u16  src_shard          sender's shard index
 *     6  u16  dst_shard          receiver's shard index
 *     8  u64  src_epoch          sender engine's epoch (random per engine)
 *    16  u64  dst_epoch          receiver's epoch as the sender knows it
 *    24  u32  seq                DATA: this packet's sequence number
 *    28  u32  ack                cumulative ACK: every seq before it arrived
 *    32  u64  sack               bit i set: packet ack + 1 + i arrived
 *    40  u16  payload_len        bytes of frames after the header
 *    42  u16  hdr_csum           RFC 1071 checksum of the 48 header bytes
 *    44  u32  payload_crc        CRC32C of the payload (SX_PKTF_CRC)
 *    48  u32  rwnd_pkts          receive window: packets the sender may send
 *                                from `ack` on (its right edge is ack + rwnd_pkts)
 *    52  u32  rwnd_bytes         receive window: bytes the receiver can still
 *                                hold beyond `ack`
 *    56  u32  ecn_ect            ECN: DATA datagrams of this channel received
 *                                with ECT(0) or ECT(1), mod 2^32
 *    60  u32  ecn_ce             ECN: those received marked CE, mod 2^32
 *
 *   frame header (8 bytes), then a kind-specific extension, then data
 *     0  u8   kind               SX_FRAME_*
 *     1  u8   tag                active-message tag
 *     2  u16  flags              SX_FRAMEF_*
 *     4  u32  len                bytes of data after the extension
 *
 * ack, sack and the receive window are valid with SX_PKTF_ACK. The window
 * is flow control (RFC 9293 section 3.8.6): data that arrived and was
 * acknowledged but not yet delivered to the application takes room in the
 * receiver, and the sender keeps what it has in flight inside what the
 * latest ACK advertised. ecn_ect and ecn_ce, valid with SX_PKTF_ACK too,
 * are running counts of the ECN field of the DATA datagrams received (RFC
 * 3168; counts, not a flag, as QUIC's ACK_ECN frame has them, RFC 9000
 * section 13.4.1): the sender takes a count that grew as a congestion
 * signal (shard/cc.h), and a lost ACK loses nothing, the next one carries
 * the total. SX_PKTF_PROBE asks for an ACK at once: a closed
 * window's probe (the persist timer) and a liveness probe both use it.
 *
 * SX_PKTF_DSACK, on an ACK packet only: its seq field, unused otherwise,
 * names a DATA packet that arrived again after it had arrived (RFC 2883's
 * duplicate SACK): a retransmission the network did not need, because
 * the first copy was late, not lost. The sender widens RACK's reordering
 * allowance on it (RFC 8985 section 6.2, step 4; shard/chan_retransmit.c).
 * An engine older than the flag drops such an ACK (SX_DROP_FLAGS) and
 * loses only that: the next ACK carries the same acknowledgement.
 *
 * SX_PKTF_AUTH: the datagram ends with a 16-byte tag after the payload
 * (payload_len does not count it), a keyed MAC of everything before it
 * (SX_AUTH; shard/auth.h). An engine with a key takes only datagrams
 * whose tag checks; one without takes none that carry a tag.
 *
 * SX_PKTF_FRAG marks a piece of a DATA packet too large for the path as it
 * is now (shard/chan_pmtu.c): a packet built before the channel's datagram
 * size stepped down is retransmitted as fragments, each a full header
 * (the packet's own, with the current acknowledgement) followed by a
 * fragment header and a slice of the packet's payload; payload_len and
 * payload_crc describe the fragment. The receiver puts the payload back
 * together and handles the packet as if it had arrived whole. Sequence
 * numbers stay per packet, so nothing else in the protocol changes.
 *
 *   fragment header (8 bytes), at the start of the payload
 *     0  u16  index              this fragment's number, from 0
 *     2  u16  count              fragments of the packet (2..SX_WIRE_FRAG_MAX)
 *     4  u16  offset             where its slice goes in the packet's payload
 *     6  u16  total              the packet's payload length
 *
 * Epochs play the part of connection epochs: an engine draws a fresh one
 * when it starts, so packets of a previous incarnation of either side
 * (wrong src_epoch for the peer, or a dst_epoch that is not ours) are
 * dropped as stale.
 *
 * Departure from DESIGN.md section 4, which names "the sender's channel id
 * at the receiver": a channel is found instead by (src_epoch, src_shard)
 * at the receiving shard (dst_shard). A channel id would have to be
 * learned in a handshake before the first packet; epoch and shard indexes
 * come from the business card, so the first packet can set the channel up
 * (the implicit connection), and the same fields reject stale incarnations.
 * The receiver still checks both indexes against its own bounds.
 *
 * Frames of remote memory access: PUT carries its chunk and, in every
 * chunk, the whole operation's range and key, so the target can refuse the
 * operation before writing a byte; GET_REQ carries no data; the target
 * answers both with RMA_RESP frames (the status, and for GET the data at
 * its offset), the last one flagged SX_FRAMEF_LAST.
 *
 * Refusals (issue 25): a receiver that will not deliver a message (larger
 * than its SX_MAX_MSG_SIZE, or for a tag without a handler) answers with
 * an AM_REFUSE frame in its own stream, and holds its cumulative ACK at
 * the packet that carried the message's first frame (acknowledging what
 * came after it in the SACK bits) until that frame is acknowledged. The
 * sender, whose message completes only when the cumulative ACK passes
 * its last packet, so always learns of the refusal first and completes
 * the message with its status, exactly once, instead of SX_OK.
 */
#ifndef SX_SHARD_WIRE_H
#define SX_SHARD_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SX_WIRE_VERSION   3 /* 2: the receive window (flow control); 3: ECN counts */
#define SX_WIRE_HDR_LEN   64
#define SX_WIRE_FRAME_LEN 8
#define SX_WIRE_SACK_BITS 64
#define SX_WIRE_FRAG_LEN  8
#define SX_WIRE_FRAG_MAX  256 /* fragments of one packet at most */

enum sx_pkt_type {
    SX_PKT_DATA = 1, /* carries frames; sequenced and acknowledged */
    SX_PKT_ACK = 2,  /* acknowledgement only; no sequence number, no payload */
    SX_PKT_CTRL = 3, /* connection set-up (shard/conn.h); not sequenced */
};

enum sx_pkt_flags {
    SX_PKTF_ACK = 1u << 0,   /* ack, sack and the receive window are valid */
    SX_PKTF_CRC = 1u << 1,   /* payload_crc is valid */
    SX_PKTF_PROBE = 1u << 2, /* answer with an ACK at once (window or liveness probe) */
    SX_PKTF_FRAG = 1u << 3,  /* DATA only: a fragment of a packet (fragment header first) */
    SX_PKTF_AUTH = 1u << 4,  /* a 16-byte tag follows the payload (shard/auth.h) */
    SX_PKTF_DSACK = 1u << 5, /* ACK only: seq came twice (a duplicate; RFC 2883's D-SACK) */
};
#define SX_PKTF_KNOWN \
    (SX_PKTF_ACK | SX_PKTF_CRC | SX_PKTF_PROBE | SX_PKTF_FRAG | SX_PKTF_AUTH | SX_PKTF_DSACK)
/* Bytes of the tag after the payload of an SX_PKTF_AUTH datagram. */
#define SX_WIRE_TAG_LEN 16

enum sx_frame_kind {
    SX_FRAME_AM = 1,        /* a whole active message */
    SX_FRAME_AM_FIRST = 2,  /* first chunk of a large message; ext: u64 total */
    SX_FRAME_AM_MORE = 3,   /* a following chunk, appended in order */
    SX_FRAME_PUT = 4,       /* ext: sx_wire_rma_t; data written at addr */
    SX_FRAME_GET_REQ = 5,   /* ext: sx_wire_rma_t; no data */
    SX_FRAME_RMA_RESP = 6,  /* ext: sx_wire_resp_t; GET data or none */
    SX_FRAME_AM_REFUSE = 7, /* ext: sx_wire_refuse_t; no data */
};

enum sx_frame_flags {
    SX_FRAMEF_LAST = 1u << 0, /* the last chunk of its message or operation */
    /* Never meaningful on the wire: a receiver marks a message frame of a
     * packet it keeps as refused (chan_rx.c), and clears it first. */
    SX_FRAMEF_REFUSED = 1u << 15,
};

/* Why a packet or frame was dropped; each has a counter. */
#define SX_DROP_TABLE(X)                                                                     \
    X(SX_DROP_SHORT, "short", "shorter than a packet header")                                \
    X(SX_DROP_VERSION, "version", "unknown wire version")                                    \
    X(SX_DROP_TYPE, "type", "unknown packet type")                                           \
    X(SX_DROP_FLAGS, "flags", "unknown packet flags")                                        \
    X(SX_DROP_HDR_CSUM, "hdr_csum", "header checksum mismatch")                              \
    X(SX_DROP_LENGTH, "length", "payload length disagrees with datagram size")               \
    X(SX_DROP_PAYLOAD_CRC, "payload_crc", "payload CRC32C mismatch")                         \
    X(SX_DROP_SHARD, "shard", "shard index out of range")                                    \
    X(SX_DROP_STALE_EPOCH, "stale_epoch", "stale or foreign epoch")                          \
    X(SX_DROP_UNKNOWN_PEER, "unknown_peer", "sender is not a known peer")                    \
    X(SX_DROP_WRONG_IFACE, "wrong_iface", "arrived on an interface its sender does not use") \
    X(SX_DROP_OUT_OF_WINDOW, "out_of_window", "sequence number outside the receive window")  \
    X(SX_DROP_DUPLICATE, "duplicate", "duplicate packet")                                    \
    X(SX_DROP_FRAME, "frame", "malformed frame")                                             \
    X(SX_DROP_TOO_LARGE, "too_large", "message larger than the receive limit")               \
    X(SX_DROP_NO_BUFFER, "no_buffer", "no memory to hold the packet")                        \
    X(SX_DROP_CHANNEL_FAILED, "channel_failed", "channel has failed")                        \
    X(SX_DROP_NOT_CONNECTED, "not_connected", "data before the connection was set up")       \
    X(SX_DROP_CTRL, "ctrl", "malformed or unexpected connection control message")            \
    X(SX_DROP_FRAGMENT, "fragment", "malformed fragment, or one of a packet not kept")       \
    X(SX_DROP_AUTH, "auth", "no valid authentication tag (forged, altered, or another key)") \
    X(SX_DROP_SOURCE, "source", "from an address the sender's card does not offer")          \
    X(SX_DROP_LANDED, "landed",                                                              \
      "a PUT chunk that landed in place but could not be delivered at once")

/* SX_DROP_NONE means "not dropped" (a well-formed packet, a packet kept
 * aside) and has no counter; SX_DROP_COUNT is how many reasons there are,
 * the size of the counter arrays. */
#define SX_DROP_ENUM_ENTRY_(name, short_name, text) name,
typedef enum sx_drop_reason {
    SX_DROP_NONE = -1,
    SX_DROP_TABLE(SX_DROP_ENUM_ENTRY_) SX_DROP_COUNT
} sx_drop_reason_t;
#undef SX_DROP_ENUM_ENTRY_

const char *sx_drop_reason_text(sx_drop_reason_t reason);

/** A short name for counters: "hdr_csum", "stale_epoch", ... */
const char *sx_drop_reason_name(sx_drop_reason_t reason);

/** A decoded packet header. */
typedef struct sx_wire_hdr {
    uint8_t version;
    uint8_t type;
    uint16_t flags;
    uint16_t src_shard;
    uint16_t dst_shard;
    uint64_t src_epoch;
    uint64_t dst_epoch;
    uint32_t seq;
    uint32_t ack;
    uint64_t sack;
    uint16_t payload_len;
    uint32_t rwnd_pkts;
    uint32_t rwnd_bytes;
    uint32_t ecn_ect;
    uint32_t ecn_ce;
} sx_wire_hdr_t;

/** A decoded fragment header (SX_PKTF_FRAG); data points at its slice. */
typedef struct sx_wire_frag {
    uint16_t index, count, offset, total;
    const uint8_t *data;
    size_t len;      /* bytes of the slice */
    uint32_t stride; /* the slice of every fragment but the last, as this one implies */
} sx_wire_frag_t;

/** Extension of PUT and GET_REQ frames (40 bytes on the wire). */
typedef struct sx_wire_rma {
    uint64_t addr;    /* target address of this chunk */
    uint64_t key;     /* memory key at the target */
    uint64_t op_addr; /* start of the whole operation's range */
    uint64_t op_len;  /* length of the whole operation */
    uint32_t op_id;   /* initiator's operation id, echoed in the response */
    uint32_t reserved;
} sx_wire_rma_t;
#define SX_WIRE_RMA_LEN 40

/** Extension of RMA_RESP frames (16 bytes on the wire). */
typedef struct sx_wire_resp {
    uint32_t op_id;
    int32_t status;  /* SX_OK or a negative status */
    uint64_t offset; /* GET: where in the operation this data goes */
} sx_wire_resp_t;
#define SX_WIRE_RESP_LEN 16
/* Where the data of a packet that carries one RMA_RESP frame alone
 * begins: a GET answer's chunks that fill their datagrams are sent so
 * (chan_tx.c), and a receiver lands them from there on (chan.h,
 * Landing). */
#define SX_WIRE_RESP_DATA_OFF (SX_WIRE_HDR_LEN + SX_WIRE_FRAME_LEN + SX_WIRE_RESP_LEN)
/* The same for a packet that carries one PUT frame alone: a PUT's chunks
 * after its first fill their datagrams so. */
#define SX_WIRE_PUT_DATA_OFF (SX_WIRE_HDR_LEN + SX_WIRE_FRAME_LEN + SX_WIRE_RMA_LEN)

/** Extension of AM_REFUSE frames (16 bytes on the wire): a receiver
 *  refuses a message it will not deliver, naming it by where its first
 *  frame travelled in the sender's stream. */
typedef struct sx_wire_refuse {
    uint32_t seq;   /* the sender's packet that carried the message's first frame */
    uint16_t frame; /* that frame's index in the packet, from 0 */
    uint16_t reserved;
    int32_t status; /* why: SX_ERR_TRUNCATED (too large), SX_ERR_NOT_FOUND (no handler) */
    uint32_t reserved2;
} sx_wire_refuse_t;
#define SX_WIRE_REFUSE_LEN 16

/** A decoded frame; data points into the packet. */
typedef struct sx_wire_frame {
    uint8_t kind;
    uint8_t tag;
    uint16_t flags;
    uint32_t len;
    uint64_t total;          /* AM_FIRST */
    sx_wire_rma_t rma;       /* PUT, GET_REQ */
    sx_wire_resp_t resp;     /* RMA_RESP */
    sx_wire_refuse_t refuse; /* AM_REFUSE */
    const uint8_t *data;
} sx_wire_frame_t;

/** Bytes of the extension that follows a frame header of @p kind, or -1. */
int sx_wire_ext_len(uint8_t kind);

/**
 * Writes the header for @p hdr into @p out, computing hdr_csum and,
 * when @p payload_crc is not NULL, setting SX_PKTF_CRC with that CRC.
 */
void sx_wire_write_hdr(uint8_t *out, const sx_wire_hdr_t *hdr, const uint32_t *payload_crc);

/**
 * Rewrites the acknowledgement fields (ack, sack, the receive window) and
 * flags of an already written header (a retransmitted packet carries the
 * current acknowledgement) and its checksum. @p ack supplies ack, sack,
 * rwnd_pkts, rwnd_bytes, ecn_ect and ecn_ce; @p flags_set is ORed in.
 */
void sx_wire_update_ack(uint8_t *pkt, const sx_wire_hdr_t *ack, uint16_t flags_set);

/**
 * Whether the datagram @p data of @p len bytes looks like a data packet
 * that carries one RMA_RESP frame whose data starts at
 * SX_WIRE_RESP_DATA_OFF (a GET answer's chunk, sent alone), reading only
 * its first SX_WIRE_RESP_DATA_OFF bytes and checking nothing else (no
 * checksum): then *src_epoch_p and *src_shard_p are its sender as its
 * header names it, *op_id_p and *offset_p what its frame says. For
 * deciding early where a landed datagram's bytes belong; the packet is
 * validated in full later.
 */
bool sx_wire_peek_resp(const uint8_t *data, size_t len, uint64_t *src_epoch_p,
                       uint16_t *src_shard_p, uint32_t *op_id_p, uint64_t *offset_p);

/**
 * sx_wire_peek_resp for a data packet that carries one PUT frame whose
 * data starts at SX_WIRE_PUT_DATA_OFF (a PUT's chunk, sent alone): its
 * sender as its header names it, and in *rma_p its frame's extension.
 */
bool sx_wire_peek_put(const uint8_t *data, size_t len, uint64_t *src_epoch_p, uint16_t *src_shard_p,
                      sx_wire_rma_t *rma_p);

/** Writes a frame header and its extension; returns the bytes written. */
size_t sx_wire_write_frame(uint8_t *out, const sx_wire_frame_t *frame);

/**
 * Validates and decodes the packet header of a datagram: size, version,
 * type, flags, header checksum, payload length against the datagram
 * size (less the tag, with SX_PKTF_AUTH; the tag itself is the caller's
 * to check), and (when flagged) the payload CRC32C. Returns SX_DROP_NONE when
 * the packet is well formed, else the reason to drop it.
 */
sx_drop_reason_t sx_wire_parse_packet(const uint8_t *data, size_t len, sx_wire_hdr_t *hdr);

/**
 * sx_wire_parse_packet for a datagram read around a landing (transport.h,
 * land): its bytes @p head .. head + @p nlanded are at @p landed, not in
 * @p data; the payload CRC32C, when flagged, runs over the pieces. With
 * @p nlanded 0 it is sx_wire_parse_packet. SX_DROP_LENGTH when the
 * landed bytes do not lie within the payload.
 */
sx_drop_reason_t sx_wire_parse_packet_landed(const uint8_t *data, size_t len, size_t head,
                                             const uint8_t *landed, size_t nlanded,
                                             sx_wire_hdr_t *hdr);

/**
 * sx_wire_parse_packet without the payload CRC32C: for a datagram read
 * around a landing whose CRC was checked, over the pieces, while the
 * landed bytes could still be read (chan.h, Landing: a PUT's chunk).
 */
sx_drop_reason_t sx_wire_parse_packet_crc_checked(const uint8_t *data, size_t len,
                                                  sx_wire_hdr_t *hdr);

/**
 * Decodes the fragment header of a parsed SX_PKTF_FRAG packet (@p data,
 * @p len: the whole datagram) and checks it against itself: index below
 * count, count within 2..SX_WIRE_FRAG_MAX, the slice non-empty, and the
 * cut a sender makes: every fragment but the last one slice of `stride`
 * bytes at index * stride, the last the rest, from (count - 1) * stride
 * to total, no longer than stride. So fragments with the same count,
 * total and stride and every index cover the packet exactly once.
 * Returns false for a malformed one.
 */
bool sx_wire_parse_frag(const uint8_t *data, size_t len, sx_wire_frag_t *frag);

/** Writes a fragment header. */
void sx_wire_write_frag(uint8_t *out, const sx_wire_frag_t *frag);

/**
 * Decodes the frame at *offset of a payload of @p payload_len bytes and
 * advances *offset past it. Returns 1 for a frame, 0 at the end of the
 * payload, -1 for a malformed frame (unknown kind, or lengths running past
 * the payload); the rest of the packet must then be ignored.
 */
int sx_wire_next_frame(const uint8_t *payload, size_t payload_len, size_t *offset,
                       sx_wire_frame_t *frame);

/**
 * For the sink transport: writes to @p ack_out the standalone ACK a peer
 * that got every packet in order would send for the data packet @p pkt
 * (the header is read from the first @p len bytes, which must hold it
 * whole; the payload is not looked at), with a window that never closes,
 * and sets *seq_p to its sequence number. Returns false, writing nothing, for anything but a
 * well-formed DATA header. Any thread; no state.
 */
bool sx_wire_reflect_ack(const uint8_t *pkt, size_t len, uint8_t ack_out[SX_WIRE_HDR_LEN],
                         uint32_t *seq_p);

/** RFC 1071 Internet checksum. */
uint16_t sx_wire_csum16(const uint8_t *data, size_t len);

/** Whether a datagram is an ACK-only packet; for the fault transport's
 *  control-loss options. Looks at the type byte only. */
int sx_wire_is_control(const void *data, size_t len);

#endif /* SX_SHARD_WIRE_H */
