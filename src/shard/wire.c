/* SPDX-License-Identifier: BSD-3-Clause */
/* Wire encoding, validation and checksums; see wire.h. */
#include "common/le.h"
#include "shard/wire.h"
#include "common/crc32c.h"
#include "common/hot.h"

#include <endian.h>
#include <string.h>

static const char *const sx_drop_texts[] = {
#define SX_DROP_TEXT_ENTRY_(name, short_name, text) [name] = text,
    SX_DROP_TABLE(SX_DROP_TEXT_ENTRY_)
#undef SX_DROP_TEXT_ENTRY_
};

static const char *const sx_drop_names[] = {
#define SX_DROP_NAME_ENTRY_(name, short_name, text) [name] = short_name,
    SX_DROP_TABLE(SX_DROP_NAME_ENTRY_)
#undef SX_DROP_NAME_ENTRY_
};

const char *sx_drop_reason_name(sx_drop_reason_t reason)
{
    if ((unsigned)reason < SX_DROP_COUNT)
        return sx_drop_names[reason];
    return "unknown";
}

const char *sx_drop_reason_text(sx_drop_reason_t reason)
{
    if ((unsigned)reason < SX_DROP_COUNT)
        return sx_drop_texts[reason];
    return "unknown";
}

/*
 * The Internet checksum (RFC 1071): one's-complement sum of 16-bit words.
 * It is cheap and catches the header corruption a CRC would, for a 64-byte
 * header; payloads get CRC32C, which is much stronger over long data.
 * Every header sent and received is summed, so it adds 32-bit
 * little-endian words into a 64-bit accumulator and folds once at the end
 * (RFC 1071 section 2(B): the sum may be taken in wider units, since
 * 2^16 is 1 modulo 2^16 - 1), which gives the same result as summing the
 * 16-bit words one by one. The words are read eight bytes at a time and
 * their two halves added (no carry is lost: each step adds under 2^33).
 */
uint16_t sx_wire_csum16(const uint8_t *data, size_t len)
{
    uint64_t sum = 0;
    size_t i = 0;

    for (; i + 8 <= len; i += 8) {
        uint64_t w = sx_get64(data + i);
        sum += (w & 0xffffffffu) + (w >> 32);
    }
    for (; i + 4 <= len; i += 4)
        sum += sx_get32(data + i);
    for (; i + 1 < len; i += 2)
        sum += sx_get16(data + i);
    if (len & 1)
        sum += data[len - 1];
    while (sum >> 16)
        sum = (sum & 0xffff) + (sum >> 16);
    return (uint16_t)~sum;
}

/*
 * sx_wire_csum16 of a header (SX_WIRE_HDR_LEN bytes) given as its eight
 * little-endian 64-bit words, unrolled, with a fixed number of folds (the
 * sum stays under 2^36, so three bring it under 2^16). Every packet's
 * header is summed when it is written and when it is parsed: the loop was
 * 121 instructions a header (callgrind of sx_bench latency), this is about
 * a quarter of that. The words are arguments, not an array: an array
 * filled by a loop was not kept in registers (a loop of
 * sx_wire_update_ack: 33 against 19 ns a call).
 */
static inline uint16_t wire_sum_words(uint64_t w0, uint64_t w1, uint64_t w2, uint64_t w3,
                                      uint64_t w4, uint64_t w5, uint64_t w6, uint64_t w7)
{
    const uint64_t lo = 0xffffffffu;
    uint64_t sum = (w0 & lo) + (w0 >> 32) + (w1 & lo) + (w1 >> 32) + (w2 & lo) + (w2 >> 32) +
                   (w3 & lo) + (w3 >> 32) + (w4 & lo) + (w4 >> 32) + (w5 & lo) + (w5 >> 32) +
                   (w6 & lo) + (w6 >> 32) + (w7 & lo) + (w7 >> 32);
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    return (uint16_t)~sum;
}

/* The checksum of a header in memory (0 for a header that includes its own). */
static inline uint16_t wire_hdr_csum(const uint8_t *h)
{
    _Static_assert(SX_WIRE_HDR_LEN == 64, "a header is 8 words");
    return wire_sum_words(sx_get64(h), sx_get64(h + 8), sx_get64(h + 16), sx_get64(h + 24),
                          sx_get64(h + 32), sx_get64(h + 40), sx_get64(h + 48), sx_get64(h + 56));
}

/* Word 5 (bytes 40..47) holds the checksum in its bits 16..31. */
#define WIRE_W5_CSUM_SHIFT 16

/* A header word of two 32-bit fields, @p lo at the lower offset. */
static inline uint64_t wire_word32x2(uint32_t lo, uint32_t hi)
{
    return (uint64_t)lo | (uint64_t)hi << 32;
}

/* ---------------------------------------------------------------- packets */

/*
 * One field of the caller's header struct, read on its own. GCC merges
 * reads of neighbouring fields into one wider load where an expression
 * puts them side by side, as the words below do (seq and ack, say); a
 * wide load of fields that the caller has just stored one by one waits
 * for those stores to leave the store buffer, as summing a header just
 * written does (below; perf annotate put a third of sx_wire_write_hdr's
 * samples on such a load). A volatile read is never merged.
 */
#define WIRE_FIELD(f) (*(const volatile __typeof__(f) *)&(f))

/*
 * The header is composed as its eight little-endian words in registers,
 * summed there, and stored a word at a time: summing it back out of
 * memory right after writing it field by field made each of the sum's
 * 8-byte loads wait for several narrower stores to leave the store buffer
 * (a load that several stores feed cannot be forwarded from them: Intel's
 * optimization reference manual, "store forwarding"). That put this
 * function, some 30 instructions, at a fifth of the time of sx_bench mt's
 * injection-only run at one thread (perf, cpu-clock); a loop of headers
 * written took 23 ns a header that way and 6-7 ns this way. Same bytes on
 * the wire (test_wire's layout test).
 */
SX_HOT void sx_wire_write_hdr(uint8_t *out, const sx_wire_hdr_t *hdr, const uint32_t *payload_crc)
{
    uint16_t flags = WIRE_FIELD(hdr->flags);

    if (payload_crc != NULL)
        flags |= SX_PKTF_CRC;
    uint64_t w0 = (uint64_t)SX_WIRE_VERSION | (uint64_t)WIRE_FIELD(hdr->type) << 8 |
                  (uint64_t)flags << 16 | (uint64_t)WIRE_FIELD(hdr->src_shard) << 32 |
                  (uint64_t)WIRE_FIELD(hdr->dst_shard) << 48;
    uint64_t w3 = wire_word32x2(WIRE_FIELD(hdr->seq), WIRE_FIELD(hdr->ack));
    uint64_t w5 = wire_word32x2(hdr->payload_len, payload_crc != NULL ? *payload_crc : 0);
    uint64_t w6 = wire_word32x2(WIRE_FIELD(hdr->rwnd_pkts), WIRE_FIELD(hdr->rwnd_bytes));
    uint64_t w7 = wire_word32x2(WIRE_FIELD(hdr->ecn_ect), WIRE_FIELD(hdr->ecn_ce));
    w5 |= (uint64_t)wire_sum_words(w0, hdr->src_epoch, hdr->dst_epoch, w3, hdr->sack, w5, w6, w7)
          << WIRE_W5_CSUM_SHIFT;
    sx_put64(out, w0);
    sx_put64(out + 8, hdr->src_epoch);
    sx_put64(out + 16, hdr->dst_epoch);
    sx_put64(out + 24, w3);
    sx_put64(out + 32, hdr->sack);
    sx_put64(out + 40, w5);
    sx_put64(out + 48, w6);
    sx_put64(out + 56, w7);
}

bool sx_wire_reflect_ack(const uint8_t *pkt, size_t len, uint8_t ack_out[SX_WIRE_HDR_LEN],
                         uint32_t *seq_p)
{
    if (pkt == NULL || len < SX_WIRE_HDR_LEN || pkt[0] != SX_WIRE_VERSION ||
        pkt[1] != SX_PKT_DATA || wire_hdr_csum(pkt) != 0)
        return false;
    uint32_t seq = sx_get32(pkt + 24);
    sx_wire_hdr_t h = {
        .type = SX_PKT_ACK,
        .flags = SX_PKTF_ACK,
        .src_shard = sx_get16(pkt + 6),
        .dst_shard = sx_get16(pkt + 4),
        .src_epoch = sx_get64(pkt + 16),
        .dst_epoch = sx_get64(pkt + 8),
        .ack = seq + 1, /* wraps like every sequence number */
        .rwnd_pkts = UINT32_MAX,
        .rwnd_bytes = UINT32_MAX,
    };
    sx_wire_write_hdr(ack_out, &h, NULL);
    *seq_p = seq;
    return true;
}

void sx_wire_update_ack(uint8_t *pkt, const sx_wire_hdr_t *ack, uint16_t flags_set)
{
    /* Read, changed and summed in registers, then stored, for the reason
     * sx_wire_write_hdr gives (19 -> 6 ns a call in a loop); words 1 and 2
     * (the epochs) stay as they are. */
    uint64_t w0 = sx_get64(pkt) | (uint64_t)flags_set << 16;
    uint64_t w1 = sx_get64(pkt + 8), w2 = sx_get64(pkt + 16);
    uint64_t w3 = wire_word32x2((uint32_t)sx_get64(pkt + 24), WIRE_FIELD(ack->ack));
    uint64_t w5 = sx_get64(pkt + 40) & ~((uint64_t)0xffff << WIRE_W5_CSUM_SHIFT);
    uint64_t w6 = wire_word32x2(WIRE_FIELD(ack->rwnd_pkts), WIRE_FIELD(ack->rwnd_bytes));
    uint64_t w7 = wire_word32x2(WIRE_FIELD(ack->ecn_ect), WIRE_FIELD(ack->ecn_ce));
    w5 |= (uint64_t)wire_sum_words(w0, w1, w2, w3, ack->sack, w5, w6, w7) << WIRE_W5_CSUM_SHIFT;
    sx_put64(pkt, w0);
    sx_put64(pkt + 24, w3);
    sx_put64(pkt + 32, ack->sack);
    sx_put64(pkt + 40, w5);
    sx_put64(pkt + 48, w6);
    sx_put64(pkt + 56, w7);
}

/* sx_wire_parse_packet up to the payload CRC32C. */
SX_HOT static sx_drop_reason_t wire_parse_hdr(const uint8_t *data, size_t len, sx_wire_hdr_t *hdr)
{
    if (data == NULL || len < SX_WIRE_HDR_LEN)
        return SX_DROP_SHORT;
    if (data[0] != SX_WIRE_VERSION)
        return SX_DROP_VERSION;
    /* The checksum of a header that includes its own checksum is zero. */
    if (wire_hdr_csum(data) != 0)
        return SX_DROP_HDR_CSUM;
    hdr->version = data[0];
    hdr->type = data[1];
    hdr->flags = sx_get16(data + 2);
    hdr->src_shard = sx_get16(data + 4);
    hdr->dst_shard = sx_get16(data + 6);
    hdr->src_epoch = sx_get64(data + 8);
    hdr->dst_epoch = sx_get64(data + 16);
    hdr->seq = sx_get32(data + 24);
    hdr->ack = sx_get32(data + 28);
    hdr->sack = sx_get64(data + 32);
    hdr->payload_len = sx_get16(data + 40);
    hdr->rwnd_pkts = sx_get32(data + 48);
    hdr->rwnd_bytes = sx_get32(data + 52);
    hdr->ecn_ect = sx_get32(data + 56);
    hdr->ecn_ce = sx_get32(data + 60);
    if (hdr->type != SX_PKT_DATA && hdr->type != SX_PKT_ACK && hdr->type != SX_PKT_CTRL)
        return SX_DROP_TYPE;
    if (hdr->flags & ~SX_PKTF_KNOWN)
        return SX_DROP_FLAGS;
    size_t tag = (hdr->flags & SX_PKTF_AUTH) ? SX_WIRE_TAG_LEN : 0;
    if (len - SX_WIRE_HDR_LEN < tag || (size_t)hdr->payload_len != len - SX_WIRE_HDR_LEN - tag)
        return SX_DROP_LENGTH;
    if (hdr->type == SX_PKT_ACK && hdr->payload_len != 0)
        return SX_DROP_LENGTH;
    if (hdr->type == SX_PKT_ACK && !(hdr->flags & SX_PKTF_ACK))
        return SX_DROP_FLAGS; /* an ACK that acknowledges nothing */
    if (hdr->type != SX_PKT_ACK && (hdr->flags & SX_PKTF_DSACK))
        return SX_DROP_FLAGS; /* its seq is the packet's own */
    if ((hdr->flags & SX_PKTF_FRAG) && hdr->type != SX_PKT_DATA)
        return SX_DROP_FLAGS; /* only data packets are fragmented */
    return SX_DROP_NONE;
}

SX_HOT sx_drop_reason_t sx_wire_parse_packet(const uint8_t *data, size_t len, sx_wire_hdr_t *hdr)
{
    return sx_wire_parse_packet_landed(data, len, SX_WIRE_HDR_LEN, NULL, 0, hdr);
}

SX_HOT sx_drop_reason_t sx_wire_parse_packet_landed(const uint8_t *data, size_t len, size_t head,
                                                    const uint8_t *landed, size_t nlanded,
                                                    sx_wire_hdr_t *hdr)
{
    sx_drop_reason_t why = wire_parse_hdr(data, len, hdr);
    if (why != SX_DROP_NONE || !(hdr->flags & SX_PKTF_CRC))
        return why;
    /* The payload in up to three pieces: before the landing, the landed
     * bytes, after them (CRC32C runs on, piece by piece). */
    size_t end = SX_WIRE_HDR_LEN + hdr->payload_len;
    if (nlanded == 0)
        head = end;
    if (head < SX_WIRE_HDR_LEN || head > end || nlanded > end - head)
        return SX_DROP_LENGTH;
    uint32_t crc = sx_crc32c(0, data + SX_WIRE_HDR_LEN, head - SX_WIRE_HDR_LEN);
    if (nlanded != 0)
        crc = sx_crc32c(crc, landed, nlanded);
    crc = sx_crc32c(crc, data + head + nlanded, end - head - nlanded);
    return crc == sx_get32(data + 44) ? SX_DROP_NONE : SX_DROP_PAYLOAD_CRC;
}

sx_drop_reason_t sx_wire_parse_packet_crc_checked(const uint8_t *data, size_t len,
                                                  sx_wire_hdr_t *hdr)
{
    return wire_parse_hdr(data, len, hdr);
}

/* Decodes a PUT or GET_REQ frame's extension (SX_WIRE_RMA_LEN bytes). */
static void wire_get_rma(const uint8_t *e, sx_wire_rma_t *r)
{
    r->addr = sx_get64(e);
    r->key = sx_get64(e + 8);
    r->op_addr = sx_get64(e + 16);
    r->op_len = sx_get64(e + 24);
    r->op_id = sx_get32(e + 32);
    r->reserved = sx_get32(e + 36);
}

/* Whether @p data looks like a data packet whose one frame, of @p kind,
 * runs from its header on to the end with its data from @p data_off. */
static bool wire_peek_alone(const uint8_t *data, size_t len, uint8_t kind, size_t data_off)
{
    if (len < data_off || data[1] != SX_PKT_DATA ||
        (sx_get16(data + 2) & (SX_PKTF_AUTH | SX_PKTF_FRAG)) != 0 ||
        sx_get16(data + 40) != len - SX_WIRE_HDR_LEN)
        return false;
    const uint8_t *f = data + SX_WIRE_HDR_LEN;
    return f[0] == kind && sx_get32(f + 4) == len - data_off; /* the one frame, to the end */
}

bool sx_wire_peek_put(const uint8_t *data, size_t len, uint64_t *src_epoch_p, uint16_t *src_shard_p,
                      sx_wire_rma_t *rma_p)
{
    if (!wire_peek_alone(data, len, SX_FRAME_PUT, SX_WIRE_PUT_DATA_OFF))
        return false;
    *src_epoch_p = sx_get64(data + 8);
    *src_shard_p = sx_get16(data + 4);
    wire_get_rma(data + SX_WIRE_HDR_LEN + SX_WIRE_FRAME_LEN, rma_p);
    return true;
}

bool sx_wire_peek_resp(const uint8_t *data, size_t len, uint64_t *src_epoch_p,
                       uint16_t *src_shard_p, uint32_t *op_id_p, uint64_t *offset_p)
{
    if (!wire_peek_alone(data, len, SX_FRAME_RMA_RESP, SX_WIRE_RESP_DATA_OFF))
        return false;
    const uint8_t *f = data + SX_WIRE_HDR_LEN;
    *src_epoch_p = sx_get64(data + 8);
    *src_shard_p = sx_get16(data + 4);
    *op_id_p = sx_get32(f + SX_WIRE_FRAME_LEN);
    *offset_p = sx_get64(f + SX_WIRE_FRAME_LEN + 8);
    return true;
}

bool sx_wire_parse_frag(const uint8_t *data, size_t len, sx_wire_frag_t *frag)
{
    if (len < SX_WIRE_HDR_LEN + SX_WIRE_FRAG_LEN)
        return false;
    const uint8_t *p = data + SX_WIRE_HDR_LEN;
    frag->index = sx_get16(p);
    frag->count = sx_get16(p + 2);
    frag->offset = sx_get16(p + 4);
    frag->total = sx_get16(p + 6);
    frag->data = p + SX_WIRE_FRAG_LEN;
    frag->len = len - SX_WIRE_HDR_LEN - SX_WIRE_FRAG_LEN;
    if (frag->count < 2 || frag->count > SX_WIRE_FRAG_MAX || frag->index >= frag->count ||
        frag->len == 0 || (size_t)frag->offset + frag->len > frag->total)
        return false;
    uint32_t before_last = frag->count - 1u;
    if (frag->index == before_last) {
        /* The last: the rest of the packet, after count - 1 strides. */
        if ((size_t)frag->offset + frag->len != frag->total || frag->offset % before_last != 0)
            return false;
        frag->stride = frag->offset / before_last;
        return frag->stride >= frag->len;
    }
    frag->stride = (uint32_t)frag->len;
    uint32_t last_at = before_last * frag->stride; /* at most 255 * 65535 */
    return frag->offset == frag->index * frag->stride && last_at < frag->total &&
           frag->total - last_at <= frag->stride;
}

void sx_wire_write_frag(uint8_t *out, const sx_wire_frag_t *frag)
{
    sx_put16(out, frag->index);
    sx_put16(out + 2, frag->count);
    sx_put16(out + 4, frag->offset);
    sx_put16(out + 6, frag->total);
}

int sx_wire_is_control(const void *data, size_t len)
{
    return len >= 2 && ((const uint8_t *)data)[1] == SX_PKT_ACK;
}

/* ---------------------------------------------------------------- frames */

SX_HOT int sx_wire_ext_len(uint8_t kind)
{
    /* The usual frames ahead of the switch, which the compiler makes a
     * lookup table in read-only data: a page of its own (common/hot.h). */
    if (kind == SX_FRAME_AM || kind == SX_FRAME_AM_MORE)
        return 0;
    switch (kind) {
    case SX_FRAME_AM_FIRST:
        return 8;
    case SX_FRAME_PUT:
    case SX_FRAME_GET_REQ:
        return SX_WIRE_RMA_LEN;
    case SX_FRAME_RMA_RESP:
        return SX_WIRE_RESP_LEN;
    case SX_FRAME_AM_REFUSE:
        return SX_WIRE_REFUSE_LEN;
    default:
        return -1;
    }
}

SX_HOT size_t sx_wire_write_frame(uint8_t *out, const sx_wire_frame_t *f)
{
    uint8_t *p = out + SX_WIRE_FRAME_LEN;

    out[0] = f->kind;
    out[1] = f->tag;
    sx_put16(out + 2, f->flags);
    sx_put32(out + 4, f->len);
    switch (f->kind) {
    case SX_FRAME_AM_FIRST:
        sx_put64(p, f->total);
        p += 8;
        break;
    case SX_FRAME_PUT:
    case SX_FRAME_GET_REQ:
        sx_put64(p, f->rma.addr);
        sx_put64(p + 8, f->rma.key);
        sx_put64(p + 16, f->rma.op_addr);
        sx_put64(p + 24, f->rma.op_len);
        sx_put32(p + 32, f->rma.op_id);
        sx_put32(p + 36, 0);
        p += SX_WIRE_RMA_LEN;
        break;
    case SX_FRAME_RMA_RESP:
        sx_put32(p, f->resp.op_id);
        sx_put32(p + 4, (uint32_t)f->resp.status);
        sx_put64(p + 8, f->resp.offset);
        p += SX_WIRE_RESP_LEN;
        break;
    case SX_FRAME_AM_REFUSE:
        sx_put32(p, f->refuse.seq);
        sx_put16(p + 4, f->refuse.frame);
        sx_put16(p + 6, 0);
        sx_put32(p + 8, (uint32_t)f->refuse.status);
        sx_put32(p + 12, 0);
        p += SX_WIRE_REFUSE_LEN;
        break;
    default:
        break;
    }
    return (size_t)(p - out);
}

SX_HOT int sx_wire_next_frame(const uint8_t *payload, size_t payload_len, size_t *offset,
                              sx_wire_frame_t *f)
{
    size_t off = *offset;

    if (off >= payload_len)
        return 0;
    if (payload_len - off < SX_WIRE_FRAME_LEN)
        return -1;
    const uint8_t *p = payload + off;
    int ext = sx_wire_ext_len(p[0]);
    if (ext < 0)
        return -1;
    f->kind = p[0];
    f->tag = p[1];
    f->flags = sx_get16(p + 2);
    f->len = sx_get32(p + 4);
    size_t avail = payload_len - off - SX_WIRE_FRAME_LEN;
    if ((size_t)ext > avail || f->len > avail - (size_t)ext)
        return -1;
    const uint8_t *e = p + SX_WIRE_FRAME_LEN;
    switch (f->kind) {
    case SX_FRAME_AM_FIRST:
        f->total = sx_get64(e);
        break;
    case SX_FRAME_PUT:
    case SX_FRAME_GET_REQ:
        wire_get_rma(e, &f->rma);
        break;
    case SX_FRAME_RMA_RESP:
        f->resp.op_id = sx_get32(e);
        f->resp.status = (int32_t)sx_get32(e + 4);
        f->resp.offset = sx_get64(e + 8);
        break;
    case SX_FRAME_AM_REFUSE:
        f->refuse.seq = sx_get32(e);
        f->refuse.frame = sx_get16(e + 4);
        f->refuse.reserved = sx_get16(e + 6);
        f->refuse.status = (int32_t)sx_get32(e + 8);
        f->refuse.reserved2 = sx_get32(e + 12);
        break;
    default:
        break;
    }
    f->data = e + ext;
    *offset = off + SX_WIRE_FRAME_LEN + (size_t)ext + f->len;
    return 1;
}
