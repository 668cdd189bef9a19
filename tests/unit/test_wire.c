/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The wire format (src/shard/wire.h): checksums against published vectors,
 * the header layout byte by byte, every reason sx_wire_parse_packet gives
 * for a drop, and frame decoding at and around every length boundary. The
 * parser is the first code that touches untrusted bytes, so these tests
 * aim at its edges rather than its happy path.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "shard/wire.h"
#include "test_filter.h"
#include "common/copy.h"
#include "common/crc32c.h"
#include "common/le.h"

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t le64(const uint8_t *p)
{
    return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}

/* Recomputes hdr_csum after a test edited header bytes, so the edit is
 * what the parser sees and not a checksum mismatch. */
static void fix_csum(uint8_t *pkt)
{
    pkt[42] = pkt[43] = 0;
    uint16_t c = sx_wire_csum16(pkt, SX_WIRE_HDR_LEN);
    pkt[42] = (uint8_t)(c & 0xff);
    pkt[43] = (uint8_t)(c >> 8);
}

/* RFC 1071's one's-complement sum of 16-bit little-endian words, folded
 * (not complemented), one word at a time: the reference. */
static uint16_t ref_sum16(const uint8_t *buf, size_t len)
{
    uint32_t sum = 0;
    for (size_t i = 0; i + 1 < len; i += 2)
        sum += (uint32_t)buf[i] | ((uint32_t)buf[i + 1] << 8);
    if (len & 1)
        sum += buf[len - 1];
    while (sum >> 16)
        sum = (sum & 0xffff) + (sum >> 16);
    return (uint16_t)sum;
}

/* A header whose every field has a distinct, multi-byte value, so a field
 * written at the wrong offset or in the wrong byte order shows. */
static sx_wire_hdr_t sample_hdr(uint16_t payload_len)
{
    sx_wire_hdr_t h = {
        .type = SX_PKT_DATA,
        .flags = SX_PKTF_ACK,
        .src_shard = 0x0102,
        .dst_shard = 0x0304,
        .src_epoch = 0x1112131415161718ull,
        .dst_epoch = 0x2122232425262728ull,
        .seq = 0x31323334u,
        .ack = 0x41424344u,
        .sack = 0x5152535455565758ull,
        .payload_len = payload_len,
        .rwnd_pkts = 0x61626364u,
        .rwnd_bytes = 0x71727374u,
        .ecn_ect = 0x81828384u,
        .ecn_ce = 0x91929394u,
    };
    return h;
}

/* A complete packet with @p n payload bytes (a pattern) and, if @p crc, a
 * payload CRC. Returns the datagram length. */
static size_t make_packet(uint8_t *buf, size_t n, bool crc)
{
    sx_wire_hdr_t h = sample_hdr((uint16_t)n);
    for (size_t i = 0; i < n; i++)
        buf[SX_WIRE_HDR_LEN + i] = (uint8_t)(i * 7 + 3);
    uint32_t c = sx_crc32c(0, buf + SX_WIRE_HDR_LEN, n);
    sx_wire_write_hdr(buf, &h, crc ? &c : NULL);
    return SX_WIRE_HDR_LEN + n;
}

/* ---------------------------------------------------------------- CRC32C */

/* Bit at a time, straight from the polynomial: slow, and obviously right. */
static uint32_t ref_crc32c(uint32_t crc, const uint8_t *p, size_t len)
{
    crc = ~crc;
    while (len-- > 0) {
        crc ^= *p++;
        for (int k = 0; k < 8; k++)
            crc = (crc & 1) ? (crc >> 1) ^ 0x82f63b78u : crc >> 1;
    }
    return ~crc;
}

static void test_crc32c_vectors(void **state)
{
    (void)state;
    uint8_t buf[32];

    /* RFC 3720 appendix B.4. */
    memset(buf, 0, sizeof(buf));
    assert_int_equal(sx_crc32c(0, buf, 32), 0x8A9136AAu);
    memset(buf, 0xff, sizeof(buf));
    assert_int_equal(sx_crc32c(0, buf, 32), 0x62A8AB43u);
    for (int i = 0; i < 32; i++)
        buf[i] = (uint8_t)i;
    assert_int_equal(sx_crc32c(0, buf, 32), 0x46DD794Eu);
    for (int i = 0; i < 32; i++)
        buf[i] = (uint8_t)(31 - i);
    assert_int_equal(sx_crc32c(0, buf, 32), 0x113FDB5Cu);
    /* The customary check value of CRC-32C. */
    assert_int_equal(sx_crc32c(0, "123456789", 9), 0xE3069283u);
    /* No bytes leave the running value alone. */
    assert_int_equal(sx_crc32c(0, NULL, 0), 0);
    assert_int_equal(sx_crc32c(0x12345678u, buf, 0), 0x12345678u);
}

static void test_crc32c_incremental(void **state)
{
    (void)state;
    uint8_t buf[1031];

    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (uint8_t)(i * 131 + (i >> 3));
    /* Split points around the 8-byte stride of both implementations, and
     * unaligned starts, must give the one-shot value. */
    for (size_t len = 0; len <= 64; len++) {
        uint32_t whole = sx_crc32c(0, buf + 1, len);
        for (size_t cut = 0; cut <= len; cut++) {
            uint32_t part = sx_crc32c(0, buf + 1, cut);
            assert_int_equal(sx_crc32c(part, buf + 1 + cut, len - cut), whole);
        }
    }
    uint32_t whole = sx_crc32c(0, buf, sizeof(buf));
    uint32_t run = 0;
    for (size_t off = 0; off < sizeof(buf);) {
        size_t n = (off % 13) + 1;
        if (n > sizeof(buf) - off)
            n = sizeof(buf) - off;
        run = sx_crc32c(run, buf + off, n);
        off += n;
    }
    assert_int_equal(run, whole);
    /* Whichever implementation this CPU selected (ISA-L's above 256
     * bytes, the crc32 instruction, slicing-by-8) agrees with the bitwise
     * one at every length and alignment, on both sides of that size. */
    for (size_t start = 0; start < 8; start++) {
        for (size_t len = 0; len < sizeof(buf) - 8; len = len < 300 ? len + 1 : len + 97) {
            assert_int_equal(sx_crc32c(0, buf + start, len), ref_crc32c(0, buf + start, len));
            assert_int_equal(sx_crc32c(0xa5a5a5a5u, buf + start, len),
                             ref_crc32c(0xa5a5a5a5u, buf + start, len));
        }
    }
    /* A single flipped bit anywhere changes the CRC. */
    for (size_t bit = 0; bit < 64; bit++) {
        buf[bit * 16 / 8] ^= (uint8_t)(1u << (bit % 8));
        assert_int_not_equal(sx_crc32c(0, buf, sizeof(buf)), whole);
        buf[bit * 16 / 8] ^= (uint8_t)(1u << (bit % 8));
    }
}

/* ---------------------------------------------------------------- RFC 1071 */

static void test_csum16(void **state)
{
    (void)state;
    /* RFC 1071 section 3 example: read big-endian the sum is 0xddf2. The
     * checksum is byte-order independent (section 2(B)), so summed as
     * little-endian words it is the byte swap: complement of 0xf2dd. */
    const uint8_t ex[8] = {0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7};
    assert_int_equal(sx_wire_csum16(ex, 8), (uint16_t)~0xf2ddu);

    assert_int_equal(sx_wire_csum16(NULL, 0), 0xffff);
    uint8_t zeros[7] = {0};
    assert_int_equal(sx_wire_csum16(zeros, 7), 0xffff);

    /* Odd lengths: the last byte counts as if followed by a zero byte. */
    uint8_t odd[65], even[66];
    for (size_t i = 0; i < sizeof(odd); i++)
        odd[i] = even[i] = (uint8_t)(0xa5 ^ (i * 29));
    even[65] = 0;
    for (size_t len = 1; len <= 65; len += 2) {
        uint8_t pad[66];
        memcpy(pad, odd, len);
        pad[len] = 0;
        assert_int_equal(sx_wire_csum16(odd, len), sx_wire_csum16(pad, len + 1));
    }
    assert_int_equal(sx_wire_csum16(odd, 65), sx_wire_csum16(even, 66));

    /* End-around carry: 0xffff + 0x0001 folds to 0x0001, not 0x0000. */
    const uint8_t carry[4] = {0xff, 0xff, 0x01, 0x00};
    assert_int_equal(sx_wire_csum16(carry, 4), (uint16_t)~0x0001u);

    /* Appending the checksum to the data makes the whole sum to zero
     * (RFC 1071 section 1), which is how the header check works. */
    for (size_t len = 0; len <= 64; len += 2) {
        uint8_t buf[66];
        memcpy(buf, even, len);
        uint16_t c = sx_wire_csum16(buf, len);
        buf[len] = (uint8_t)(c & 0xff);
        buf[len + 1] = (uint8_t)(c >> 8);
        assert_int_equal(sx_wire_csum16(buf, len + 2), 0);
    }
}

/* ---------------------------------------------------------------- headers */

/* Every field but version, which sx_wire_write_hdr takes from the macro. */
static void assert_hdr_equal(const sx_wire_hdr_t *got, const sx_wire_hdr_t *want)
{
    assert_int_equal(got->version, SX_WIRE_VERSION);
    assert_int_equal(got->type, want->type);
    assert_int_equal(got->flags, want->flags);
    assert_int_equal(got->src_shard, want->src_shard);
    assert_int_equal(got->dst_shard, want->dst_shard);
    assert_int_equal(got->src_epoch, want->src_epoch);
    assert_int_equal(got->dst_epoch, want->dst_epoch);
    assert_int_equal(got->seq, want->seq);
    assert_int_equal(got->ack, want->ack);
    assert_int_equal(got->sack, want->sack);
    assert_int_equal(got->payload_len, want->payload_len);
}

static void test_header_layout_and_round_trip(void **state)
{
    (void)state;
    uint8_t pkt[SX_WIRE_HDR_LEN + 16];
    sx_wire_hdr_t in = sample_hdr(16), out;
    uint32_t crc;

    memset(pkt, 0xee, sizeof(pkt));
    memset(pkt + SX_WIRE_HDR_LEN, 0x5a, 16);
    crc = sx_crc32c(0, pkt + SX_WIRE_HDR_LEN, 16);
    sx_wire_write_hdr(pkt, &in, &crc);

    /* The byte layout documented in wire.h, little-endian throughout. */
    assert_int_equal(pkt[0], SX_WIRE_VERSION);
    assert_int_equal(pkt[1], SX_PKT_DATA);
    assert_int_equal(pkt[2] | pkt[3] << 8, SX_PKTF_ACK | SX_PKTF_CRC);
    assert_int_equal(pkt[4] | pkt[5] << 8, 0x0102);
    assert_int_equal(pkt[6] | pkt[7] << 8, 0x0304);
    assert_int_equal(le64(pkt + 8), in.src_epoch);
    assert_int_equal(le64(pkt + 16), in.dst_epoch);
    assert_int_equal(le32(pkt + 24), in.seq);
    assert_int_equal(le32(pkt + 28), in.ack);
    assert_int_equal(le64(pkt + 32), in.sack);
    assert_int_equal(pkt[40] | pkt[41] << 8, 16);
    assert_int_equal(le32(pkt + 44), crc);
    assert_int_equal(le32(pkt + 48), in.rwnd_pkts);
    assert_int_equal(le32(pkt + 52), in.rwnd_bytes);
    assert_int_equal(le32(pkt + 56), in.ecn_ect);
    assert_int_equal(le32(pkt + 60), in.ecn_ce);
    /* The checksum at 42 is the plain 16-bit sum's (sx_wire_write_hdr sums
     * the words it composes, not the bytes it stored). */
    assert_int_equal(sx_wire_csum16(pkt, SX_WIRE_HDR_LEN), 0);
    uint8_t zeroed[SX_WIRE_HDR_LEN];
    memcpy(zeroed, pkt, sizeof(zeroed));
    zeroed[42] = zeroed[43] = 0;
    assert_int_equal(pkt[42] | pkt[43] << 8, (uint16_t)~ref_sum16(zeroed, sizeof(zeroed)));
    /* Nothing past the header is touched. */
    for (size_t i = SX_WIRE_HDR_LEN; i < sizeof(pkt); i++)
        assert_int_equal(pkt[i], 0x5a);

    assert_int_equal(sx_wire_parse_packet(pkt, sizeof(pkt), &out), SX_DROP_NONE);
    in.flags |= SX_PKTF_CRC;
    assert_hdr_equal(&out, &in);

    /* Extreme values survive too, and no payload CRC means none is set. */
    sx_wire_hdr_t max;
    memset(&max, 0xff, sizeof(max));
    max.type = SX_PKT_DATA;
    max.flags = 0;
    max.payload_len = 0;
    sx_wire_write_hdr(pkt, &max, NULL);
    assert_int_equal(le32(pkt + 44), 0);
    assert_int_equal(sx_wire_parse_packet(pkt, SX_WIRE_HDR_LEN, &out), SX_DROP_NONE);
    assert_hdr_equal(&out, &max);

    /* An ACK packet: no payload, ACK flag set. */
    sx_wire_hdr_t ack = {.type = SX_PKT_ACK, .flags = SX_PKTF_ACK, .ack = 77, .sack = 5};
    sx_wire_write_hdr(pkt, &ack, NULL);
    assert_int_equal(sx_wire_parse_packet(pkt, SX_WIRE_HDR_LEN, &out), SX_DROP_NONE);
    assert_int_equal(out.type, SX_PKT_ACK);
    assert_int_equal(out.ack, 77);
    assert_true(sx_wire_is_control(pkt, SX_WIRE_HDR_LEN));
    pkt[1] = SX_PKT_DATA;
    assert_false(sx_wire_is_control(pkt, SX_WIRE_HDR_LEN));
    assert_false(sx_wire_is_control(pkt, 1));
}

static void test_parse_drop_reasons(void **state)
{
    (void)state;
    uint8_t pkt[SX_WIRE_HDR_LEN + 100];
    sx_wire_hdr_t h;
    size_t len = make_packet(pkt, 100, true);

    assert_int_equal(sx_wire_parse_packet(pkt, len, &h), SX_DROP_NONE);

    /* Short: nothing, one byte, one byte less than a header. */
    assert_int_equal(sx_wire_parse_packet(NULL, 0, &h), SX_DROP_SHORT);
    assert_int_equal(sx_wire_parse_packet(pkt, 0, &h), SX_DROP_SHORT);
    assert_int_equal(sx_wire_parse_packet(pkt, 1, &h), SX_DROP_SHORT);
    assert_int_equal(sx_wire_parse_packet(pkt, SX_WIRE_HDR_LEN - 1, &h), SX_DROP_SHORT);

    /* Version: checked before the checksum, and also with a valid one. */
    uint8_t bad[sizeof(pkt)];
    const uint8_t versions[] = {0, SX_WIRE_VERSION - 1, SX_WIRE_VERSION + 1, 0xff};
    for (size_t i = 0; i < sizeof(versions); i++) {
        memcpy(bad, pkt, len);
        bad[0] = versions[i];
        assert_int_equal(sx_wire_parse_packet(bad, len, &h), SX_DROP_VERSION);
        fix_csum(bad);
        assert_int_equal(sx_wire_parse_packet(bad, len, &h), SX_DROP_VERSION);
    }

    /* Type: unknown values with a correct checksum. */
    const uint8_t types[] = {0, 4, 0x80, 0xff};
    for (size_t i = 0; i < sizeof(types); i++) {
        memcpy(bad, pkt, len);
        bad[1] = types[i];
        fix_csum(bad);
        assert_int_equal(sx_wire_parse_packet(bad, len, &h), SX_DROP_TYPE);
    }

    /* Flags: every bit outside SX_PKTF_KNOWN. */
    for (unsigned bit = 0; bit < 16; bit++) {
        if ((1u << bit) & SX_PKTF_KNOWN)
            continue;
        memcpy(bad, pkt, len);
        bad[2] |= (uint8_t)((1u << bit) & 0xff);
        bad[3] |= (uint8_t)((1u << bit) >> 8);
        fix_csum(bad);
        assert_int_equal(sx_wire_parse_packet(bad, len, &h), SX_DROP_FLAGS);
    }

    /* Header checksum: any single flipped bit of the header is caught. */
    for (unsigned bit = 8; bit < SX_WIRE_HDR_LEN * 8; bit++) {
        memcpy(bad, pkt, len);
        bad[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        assert_int_equal(sx_wire_parse_packet(bad, len, &h), SX_DROP_HDR_CSUM);
    }

    /* Length: the datagram one byte shorter or longer than the header
     * says, a payload_len claiming more than arrived, and a bare header
     * claiming a payload. */
    assert_int_equal(sx_wire_parse_packet(pkt, len - 1, &h), SX_DROP_LENGTH);
    assert_int_equal(sx_wire_parse_packet(pkt, SX_WIRE_HDR_LEN, &h), SX_DROP_LENGTH);
    uint8_t big[SX_WIRE_HDR_LEN + 101];
    memcpy(big, pkt, len);
    big[len] = 0;
    assert_int_equal(sx_wire_parse_packet(big, len + 1, &h), SX_DROP_LENGTH);
    memcpy(bad, pkt, len);
    bad[40] = 0xff;
    bad[41] = 0xff;
    fix_csum(bad);
    assert_int_equal(sx_wire_parse_packet(bad, len, &h), SX_DROP_LENGTH);

    /* An ACK packet may not carry a payload, and must say it acknowledges. */
    sx_wire_hdr_t ack = {.type = SX_PKT_ACK, .flags = SX_PKTF_ACK, .payload_len = 4};
    sx_wire_write_hdr(bad, &ack, NULL);
    assert_int_equal(sx_wire_parse_packet(bad, SX_WIRE_HDR_LEN + 4, &h), SX_DROP_LENGTH);
    ack.payload_len = 0;
    ack.flags = 0;
    sx_wire_write_hdr(bad, &ack, NULL);
    assert_int_equal(sx_wire_parse_packet(bad, SX_WIRE_HDR_LEN, &h), SX_DROP_FLAGS);

    /* Payload CRC: any flipped payload bit, and a wrong CRC field. */
    for (unsigned bit = 0; bit < 100 * 8; bit += 7) {
        memcpy(bad, pkt, len);
        bad[SX_WIRE_HDR_LEN + bit / 8] ^= (uint8_t)(1u << (bit % 8));
        assert_int_equal(sx_wire_parse_packet(bad, len, &h), SX_DROP_PAYLOAD_CRC);
    }
    memcpy(bad, pkt, len);
    bad[44] ^= 1;
    fix_csum(bad);
    assert_int_equal(sx_wire_parse_packet(bad, len, &h), SX_DROP_PAYLOAD_CRC);

    /* Without SX_PKTF_CRC the payload is not checked. */
    len = make_packet(bad, 100, false);
    bad[SX_WIRE_HDR_LEN + 3] ^= 0xff;
    assert_int_equal(sx_wire_parse_packet(bad, len, &h), SX_DROP_NONE);
    /* An empty payload with a CRC: the CRC of nothing is 0. */
    len = make_packet(bad, 0, true);
    assert_int_equal(le32(bad + 44), 0);
    assert_int_equal(sx_wire_parse_packet(bad, len, &h), SX_DROP_NONE);
}

/* Fragments (SX_PKTF_FRAG): the header's layout, a round trip, and every
 * way a fragment header can lie about itself. */
static void test_fragments(void **state)
{
    (void)state;
    uint8_t pkt[SX_WIRE_HDR_LEN + SX_WIRE_FRAG_LEN + 100];
    size_t len = sizeof(pkt);
    sx_wire_hdr_t in = sample_hdr(SX_WIRE_FRAG_LEN + 100), h;
    /* Fragment 3 of 5 of a 420-byte payload cut into 100-byte slices. */
    sx_wire_frag_t f = {.index = 3, .count = 5, .offset = 300, .total = 420}, out;

    in.flags |= SX_PKTF_FRAG;
    memset(pkt, 0x33, sizeof(pkt));
    sx_wire_write_frag(pkt + SX_WIRE_HDR_LEN, &f);
    sx_wire_write_hdr(pkt, &in, NULL);
    const uint8_t *fh = pkt + SX_WIRE_HDR_LEN;
    assert_int_equal(fh[0] | fh[1] << 8, 3);
    assert_int_equal(fh[2] | fh[3] << 8, 5);
    assert_int_equal(fh[4] | fh[5] << 8, 300);
    assert_int_equal(fh[6] | fh[7] << 8, 420);
    assert_int_equal(sx_wire_parse_packet(pkt, len, &h), SX_DROP_NONE);
    assert_true(h.flags & SX_PKTF_FRAG);
    assert_true(sx_wire_parse_frag(pkt, len, &out));
    assert_int_equal(out.index, 3);
    assert_int_equal(out.count, 5);
    assert_int_equal(out.offset, 300);
    assert_int_equal(out.total, 420);
    assert_int_equal(out.len, 100);
    assert_int_equal(out.stride, 100);
    assert_ptr_equal(out.data, pkt + SX_WIRE_HDR_LEN + SX_WIRE_FRAG_LEN);

    /* The last fragment: the rest, after count - 1 strides (a 500-byte
     * payload in 5 slices of 100), and one of a single byte (401 bytes). */
    f = (sx_wire_frag_t){.index = 4, .count = 5, .offset = 400, .total = 500};
    sx_wire_write_frag(pkt + SX_WIRE_HDR_LEN, &f);
    assert_true(sx_wire_parse_frag(pkt, len, &out));
    assert_int_equal(out.stride, 100);
    f = (sx_wire_frag_t){.index = 0, .count = 5, .offset = 0, .total = 401};
    sx_wire_write_frag(pkt + SX_WIRE_HDR_LEN, &f);
    assert_true(sx_wire_parse_frag(pkt, len, &out));
    static const sx_wire_frag_t bad[] = {
        {.index = 0, .count = 1, .offset = 0, .total = 420},   /* one fragment is no fragment */
        {.index = 0, .count = 0, .offset = 0, .total = 420},   /* none */
        {.index = 5, .count = 5, .offset = 0, .total = 420},   /* index past count */
        {.index = 0, .count = 257, .offset = 0, .total = 420}, /* above SX_WIRE_FRAG_MAX */
        {.index = 0, .count = 2, .offset = 321, .total = 420}, /* slice past total */
        {.index = 0, .count = 2, .offset = 0, .total = 99},    /* total below the slice */
        {.index = 1, .count = 2, .offset = 65535, .total = 65535},
        {.index = 2, .count = 5, .offset = 300, .total = 420}, /* not at index x stride */
        {.index = 2, .count = 4, .offset = 200, .total = 520}, /* the last would be 220 of 100 */
        {.index = 4, .count = 5, .offset = 320, .total = 420}, /* last: not 4 strides in */
        {.index = 4, .count = 5, .offset = 400, .total = 420}, /* last: not to the end */
        {.index = 4, .count = 5, .offset = 80, .total = 180},  /* last longer than a stride */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        sx_wire_write_frag(pkt + SX_WIRE_HDR_LEN, &bad[i]);
        if (sx_wire_parse_frag(pkt, len, &out))
            fail_msg("fragment header %zu was taken", i);
    }
    /* No slice, or not even a whole fragment header. */
    sx_wire_write_frag(pkt + SX_WIRE_HDR_LEN,
                       &(sx_wire_frag_t){.index = 0, .count = 2, .offset = 0, .total = 420});
    assert_false(sx_wire_parse_frag(pkt, SX_WIRE_HDR_LEN + SX_WIRE_FRAG_LEN, &out));
    assert_false(sx_wire_parse_frag(pkt, SX_WIRE_HDR_LEN + SX_WIRE_FRAG_LEN - 1, &out));
    assert_false(sx_wire_parse_frag(pkt, SX_WIRE_HDR_LEN, &out));

    /* Only data packets are cut into fragments. */
    sx_wire_hdr_t ack = {.type = SX_PKT_ACK, .flags = SX_PKTF_ACK | SX_PKTF_FRAG};
    sx_wire_write_hdr(pkt, &ack, NULL);
    assert_int_equal(sx_wire_parse_packet(pkt, SX_WIRE_HDR_LEN, &h), SX_DROP_FLAGS);
    sx_wire_hdr_t ctrl = {.type = SX_PKT_CTRL, .flags = SX_PKTF_FRAG, .payload_len = 16};
    sx_wire_write_hdr(pkt, &ctrl, NULL);
    assert_int_equal(sx_wire_parse_packet(pkt, SX_WIRE_HDR_LEN + 16, &h), SX_DROP_FLAGS);
}

/* A duplicate's report (SX_PKTF_DSACK) rides on ACK packets only, whose
 * seq names the duplicate: on a data packet the seq is the packet's own. */
static void test_dsack_flag(void **state)
{
    (void)state;
    uint8_t pkt[SX_WIRE_HDR_LEN + 16] = {0};
    sx_wire_hdr_t h;

    sx_wire_hdr_t ack = {.type = SX_PKT_ACK, .flags = SX_PKTF_ACK | SX_PKTF_DSACK, .seq = 77};
    sx_wire_write_hdr(pkt, &ack, NULL);
    assert_int_equal(sx_wire_parse_packet(pkt, SX_WIRE_HDR_LEN, &h), SX_DROP_NONE);
    assert_true(h.flags & SX_PKTF_DSACK);
    assert_int_equal(h.seq, 77);
    sx_wire_hdr_t data = {.type = SX_PKT_DATA, .flags = SX_PKTF_ACK | SX_PKTF_DSACK, .seq = 5};
    sx_wire_write_hdr(pkt, &data, NULL);
    assert_int_equal(sx_wire_parse_packet(pkt, SX_WIRE_HDR_LEN, &h), SX_DROP_FLAGS);
    sx_wire_hdr_t ctrl = {.type = SX_PKT_CTRL, .flags = SX_PKTF_DSACK, .payload_len = 16};
    sx_wire_write_hdr(pkt, &ctrl, NULL);
    assert_int_equal(sx_wire_parse_packet(pkt, SX_WIRE_HDR_LEN + 16, &h), SX_DROP_FLAGS);
}

static void test_drop_reason_names(void **state)
{
    (void)state;
    for (unsigned r = 0; r < SX_DROP_COUNT; r++) {
        const char *name = sx_drop_reason_name((sx_drop_reason_t)r);
        assert_non_null(name);
        assert_non_null(sx_drop_reason_text((sx_drop_reason_t)r));
        assert_string_not_equal(name, "unknown");
        /* Names become counter names: unique and free of spaces. */
        assert_null(strchr(name, ' '));
        for (unsigned s = 0; s < r; s++)
            assert_string_not_equal(name, sx_drop_reason_name((sx_drop_reason_t)s));
    }
    assert_string_equal(sx_drop_reason_name(SX_DROP_HDR_CSUM), "hdr_csum");
    assert_string_equal(sx_drop_reason_name(SX_DROP_COUNT), "unknown");
    assert_string_equal(sx_drop_reason_name(SX_DROP_NONE), "unknown");
    assert_string_equal(sx_drop_reason_text((sx_drop_reason_t)-1), "unknown");
}

/* The checksum sums wider words than RFC 1071's 16 bits: it must agree
 * with the plain 16-bit sum on every length, odd ones included. */
static void test_csum16_reference(void **state)
{
    (void)state;
    uint8_t buf[300];
    uint64_t x = 0x243f6a8885a308d3ull;

    for (int round = 0; round < 200; round++) {
        for (size_t i = 0; i < sizeof(buf); i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            buf[i] = (uint8_t)(round % 5 == 0 ? 0xff : x >> 56); /* all-ones stresses carries */
        }
        for (size_t len = 0; len <= sizeof(buf); len += 1 + (size_t)(round % 7))
            assert_int_equal(sx_wire_csum16(buf, len), (uint16_t)~ref_sum16(buf, len));
        /* The parser sums a header with an unrolled copy of the loop
         * (wire.c, wire_hdr_csum): a header whose checksum the plain sum
         * set passes it, and one changed byte (always a nonzero change
         * modulo 2^16 - 1) fails it. */
        uint8_t hdr[SX_WIRE_HDR_LEN];
        sx_wire_hdr_t h;
        memcpy(hdr, buf, sizeof(hdr));
        hdr[0] = SX_WIRE_VERSION;
        hdr[42] = hdr[43] = 0;
        uint16_t csum = (uint16_t)~ref_sum16(hdr, sizeof(hdr));
        hdr[42] = (uint8_t)(csum & 0xff);
        hdr[43] = (uint8_t)(csum >> 8);
        assert_int_not_equal(sx_wire_parse_packet(hdr, sizeof(hdr), &h), SX_DROP_HDR_CSUM);
        size_t at = 1 + (size_t)round % (sizeof(hdr) - 1);
        hdr[at] ^= (uint8_t)(1u << (round % 8));
        assert_int_equal(sx_wire_parse_packet(hdr, sizeof(hdr), &h), SX_DROP_HDR_CSUM);
    }
}

static void test_update_ack(void **state)
{
    (void)state;
    uint8_t pkt[SX_WIRE_HDR_LEN + 40];
    sx_wire_hdr_t h = sample_hdr(40), out;

    h.flags = 0;
    memset(pkt + SX_WIRE_HDR_LEN, 0x3c, 40);
    uint32_t crc = sx_crc32c(0, pkt + SX_WIRE_HDR_LEN, 40);
    sx_wire_write_hdr(pkt, &h, &crc);

    /* A retransmission gets the current ACK; the header stays valid, the
     * payload CRC still matches, and only ack, sack, the window, the ECN
     * counts and flags change. */
    sx_wire_hdr_t ack = {.ack = 0xdeadbeefu,
                         .sack = 0x8000000000000001ull,
                         .rwnd_pkts = 7,
                         .rwnd_bytes = 70000,
                         .ecn_ect = 0x01020304u,
                         .ecn_ce = 0xfffffffeu};
    sx_wire_update_ack(pkt, &ack, SX_PKTF_ACK);
    assert_int_equal(sx_wire_parse_packet(pkt, sizeof(pkt), &out), SX_DROP_NONE);
    assert_int_equal(out.ack, 0xdeadbeefu);
    assert_int_equal(out.sack, 0x8000000000000001ull);
    assert_int_equal(out.rwnd_pkts, 7);
    assert_int_equal(out.rwnd_bytes, 70000);
    assert_int_equal(out.ecn_ect, 0x01020304u);
    assert_int_equal(out.ecn_ce, 0xfffffffeu);
    assert_int_equal(le32(pkt + 56), 0x01020304u); /* wire.h's offsets */
    assert_int_equal(le32(pkt + 60), 0xfffffffeu);
    assert_int_equal(out.flags, SX_PKTF_ACK | SX_PKTF_CRC);
    assert_int_equal(out.seq, h.seq);
    assert_int_equal(out.src_epoch, h.src_epoch);
    assert_int_equal(out.dst_epoch, h.dst_epoch);
    assert_int_equal(out.payload_len, 40);
    assert_int_equal(le32(pkt + 44), crc);

    /* Again, with flags already set and values wrapping to zero. */
    ack = (sx_wire_hdr_t){0};
    sx_wire_update_ack(pkt, &ack, SX_PKTF_ACK);
    assert_int_equal(sx_wire_parse_packet(pkt, sizeof(pkt), &out), SX_DROP_NONE);
    assert_int_equal(out.ack, 0);
    assert_int_equal(out.sack, 0);
    assert_int_equal(out.rwnd_pkts, 0);
    ack = (sx_wire_hdr_t){
        .ack = UINT32_MAX, .sack = UINT64_MAX, .rwnd_pkts = UINT32_MAX, .rwnd_bytes = UINT32_MAX};
    sx_wire_update_ack(pkt, &ack, 0);
    assert_int_equal(sx_wire_parse_packet(pkt, sizeof(pkt), &out), SX_DROP_NONE);
    assert_int_equal(out.ack, UINT32_MAX);
    assert_int_equal(out.rwnd_bytes, UINT32_MAX);
    assert_int_equal(out.flags, SX_PKTF_ACK | SX_PKTF_CRC);
}

/* ---------------------------------------------------------------- frames */

static void test_ext_len(void **state)
{
    (void)state;
    assert_int_equal(sx_wire_ext_len(SX_FRAME_AM), 0);
    assert_int_equal(sx_wire_ext_len(SX_FRAME_AM_FIRST), 8);
    assert_int_equal(sx_wire_ext_len(SX_FRAME_AM_MORE), 0);
    assert_int_equal(sx_wire_ext_len(SX_FRAME_PUT), SX_WIRE_RMA_LEN);
    assert_int_equal(sx_wire_ext_len(SX_FRAME_GET_REQ), SX_WIRE_RMA_LEN);
    assert_int_equal(sx_wire_ext_len(SX_FRAME_RMA_RESP), SX_WIRE_RESP_LEN);
    assert_int_equal(sx_wire_ext_len(SX_FRAME_AM_REFUSE), SX_WIRE_REFUSE_LEN);
    assert_int_equal(sx_wire_ext_len(0), -1);
    assert_int_equal(sx_wire_ext_len(8), -1);
    assert_int_equal(sx_wire_ext_len(255), -1);
}

/* One frame of each kind, with distinct extension values and data. */
static const sx_wire_frame_t sample_frames[] = {
    {.kind = SX_FRAME_AM, .tag = 1, .flags = SX_FRAMEF_LAST, .len = 5},
    {.kind = SX_FRAME_AM_FIRST, .tag = 2, .len = 3, .total = 0x0102030405060708ull},
    {.kind = SX_FRAME_AM_MORE, .tag = 2, .flags = SX_FRAMEF_LAST, .len = 0},
    {.kind = SX_FRAME_PUT,
     .tag = 4,
     .flags = 0x8001,
     .len = 7,
     .rma = {.addr = 0x1111222233334444ull,
             .key = 0x5555666677778888ull,
             .op_addr = 0x9999aaaabbbbccccull,
             .op_len = 0xddddeeeeffff0000ull,
             .op_id = 0xfeedf00du}},
    {.kind = SX_FRAME_GET_REQ,
     .tag = 5,
     .len = 0,
     .rma = {.addr = 1, .key = 2, .op_addr = 3, .op_len = UINT64_MAX, .op_id = UINT32_MAX}},
    {.kind = SX_FRAME_RMA_RESP,
     .tag = 6,
     .flags = SX_FRAMEF_LAST,
     .len = 9,
     .resp = {.op_id = 0xabcdef01u, .status = -13, .offset = 0x7766554433221100ull}},
    {.kind = SX_FRAME_AM_REFUSE,
     .tag = 7,
     .len = 0,
     .refuse = {.seq = 0xfffffffeu, .frame = 63, .status = -12}},
};
#define NSAMPLES (sizeof(sample_frames) / sizeof(sample_frames[0]))

/* Writes every sample frame followed by its data; returns the length. */
static size_t write_samples(uint8_t *buf)
{
    size_t off = 0;
    for (size_t i = 0; i < NSAMPLES; i++) {
        const sx_wire_frame_t *f = &sample_frames[i];
        size_t n = sx_wire_write_frame(buf + off, f);
        assert_int_equal(n, SX_WIRE_FRAME_LEN + (size_t)sx_wire_ext_len(f->kind));
        off += n;
        for (uint32_t k = 0; k < f->len; k++)
            buf[off++] = (uint8_t)(i * 16 + k);
    }
    return off;
}

static void test_frame_round_trip(void **state)
{
    (void)state;
    uint8_t buf[512];
    size_t len = write_samples(buf), off = 0;
    sx_wire_frame_t f;

    /* The frame header layout from wire.h. */
    assert_int_equal(buf[0], SX_FRAME_AM);
    assert_int_equal(buf[1], 1);
    assert_int_equal(buf[2] | buf[3] << 8, SX_FRAMEF_LAST);
    assert_int_equal(le32(buf + 4), 5);

    for (size_t i = 0; i < NSAMPLES; i++) {
        const sx_wire_frame_t *w = &sample_frames[i];
        size_t before = off;
        memset(&f, 0, sizeof(f));
        assert_int_equal(sx_wire_next_frame(buf, len, &off, &f), 1);
        assert_int_equal(f.kind, w->kind);
        assert_int_equal(f.tag, w->tag);
        assert_int_equal(f.flags, w->flags);
        assert_int_equal(f.len, w->len);
        size_t ext = (size_t)sx_wire_ext_len(w->kind);
        assert_ptr_equal(f.data, buf + before + SX_WIRE_FRAME_LEN + ext);
        assert_int_equal(off, before + SX_WIRE_FRAME_LEN + ext + w->len);
        for (uint32_t k = 0; k < f.len; k++)
            assert_int_equal(f.data[k], (uint8_t)(i * 16 + k));
        /* Extensions: what the kind has is decoded; the rest stays zero,
         * as in the samples. The RMA reserved word is written as zero. */
        assert_int_equal(f.total, w->total);
        assert_memory_equal(&f.rma, &w->rma, sizeof(f.rma));
        assert_memory_equal(&f.resp, &w->resp, sizeof(f.resp));
        assert_memory_equal(&f.refuse, &w->refuse, sizeof(f.refuse));
        if (w->kind == SX_FRAME_AM_FIRST)
            assert_int_equal(le64(buf + before + SX_WIRE_FRAME_LEN), w->total);
    }
    /* End of payload, and it stays there. */
    assert_int_equal(sx_wire_next_frame(buf, len, &off, &f), 0);
    assert_int_equal(sx_wire_next_frame(buf, len, &off, &f), 0);
    assert_int_equal(off, len);
    /* An empty payload has no frames; an offset past the end is the end. */
    off = 0;
    assert_int_equal(sx_wire_next_frame(buf, 0, &off, &f), 0);
    off = len + 100;
    assert_int_equal(sx_wire_next_frame(buf, len, &off, &f), 0);
    /* A frame that ends exactly at the payload end is accepted. */
    off = 0;
    size_t first = SX_WIRE_FRAME_LEN + 5;
    assert_int_equal(sx_wire_next_frame(buf, first, &off, &f), 1);
    assert_int_equal(sx_wire_next_frame(buf, first, &off, &f), 0);
}

/* Writes a data packet that carries @p f alone, with @p nbytes bytes of
 * data; returns its length. */
static size_t write_alone(uint8_t *pkt, const sx_wire_frame_t *f, size_t nbytes)
{
    size_t head = SX_WIRE_HDR_LEN + sx_wire_write_frame(pkt + SX_WIRE_HDR_LEN, f);
    memset(pkt + head, 0x5a, nbytes);
    sx_wire_hdr_t h = {.type = SX_PKT_DATA,
                       .src_shard = 3,
                       .dst_shard = 1,
                       .src_epoch = 0x1122334455667788ull,
                       .dst_epoch = 9,
                       .payload_len = (uint16_t)(head - SX_WIRE_HDR_LEN + nbytes)};
    sx_wire_write_hdr(pkt, &h, NULL);
    return head + nbytes;
}

/* The landing's early looks (src/shard/land.c): a packet that carries one
 * PUT or RMA_RESP frame to its end, with its data where landings put it,
 * and nothing else. */
static void test_peek_alone(void **state)
{
    (void)state;
    static uint8_t pkt[SX_WIRE_PUT_DATA_OFF + 1000];
    sx_wire_frame_t put = {
        .kind = SX_FRAME_PUT,
        .len = 1000,
        .rma = {.addr = 0x10100, .key = 0xabcdef, .op_addr = 0x10000, .op_len = 4096, .op_id = 77}};
    sx_wire_rma_t r;
    uint64_t epoch, off;
    uint16_t lane;
    uint32_t op_id;

    size_t len = write_alone(pkt, &put, 1000);
    assert_int_equal(len, SX_WIRE_PUT_DATA_OFF + 1000);
    assert_true(sx_wire_peek_put(pkt, len, &epoch, &lane, &r));
    assert_int_equal(epoch, 0x1122334455667788ull);
    assert_int_equal(lane, 3);
    assert_int_equal(r.addr, 0x10100);
    assert_int_equal(r.key, 0xabcdef);
    assert_int_equal(r.op_addr, 0x10000);
    assert_int_equal(r.op_len, 4096);
    assert_int_equal(r.op_id, 77);
    assert_false(sx_wire_peek_resp(pkt, len, &epoch, &lane, &op_id, &off)); /* not a RESP */
    /* Shorter or longer than its frame, or than its data offset. */
    assert_false(sx_wire_peek_put(pkt, len - 1, &epoch, &lane, &r));
    assert_false(sx_wire_peek_put(pkt, SX_WIRE_PUT_DATA_OFF - 1, &epoch, &lane, &r));
    assert_false(sx_wire_peek_put(pkt, 0, &epoch, &lane, &r));
    /* A fragment, a tagged packet, another packet type: not alone. */
    pkt[2] |= SX_PKTF_FRAG;
    assert_false(sx_wire_peek_put(pkt, len, &epoch, &lane, &r));
    pkt[2] &= (uint8_t)~SX_PKTF_FRAG;
    pkt[1] = SX_PKT_ACK;
    assert_false(sx_wire_peek_put(pkt, len, &epoch, &lane, &r));
    /* Two frames: the first not to the end. */
    put.len = 400;
    len = write_alone(pkt, &put, 400);
    size_t second = sx_wire_write_frame(pkt + len, &put);
    memset(pkt + len + second, 0, 400);
    sx_put16(pkt + 40, (uint16_t)(len + second + 400 - SX_WIRE_HDR_LEN));
    assert_false(sx_wire_peek_put(pkt, len + second + 400, &epoch, &lane, &r));

    sx_wire_frame_t resp = {
        .kind = SX_FRAME_RMA_RESP, .len = 500, .resp = {.op_id = 5, .status = 0, .offset = 65536}};
    len = write_alone(pkt, &resp, 500);
    assert_int_equal(len, SX_WIRE_RESP_DATA_OFF + 500);
    assert_true(sx_wire_peek_resp(pkt, len, &epoch, &lane, &op_id, &off));
    assert_int_equal(op_id, 5);
    assert_int_equal(off, 65536);
    assert_false(sx_wire_peek_put(pkt, len, &epoch, &lane, &r));
}

/* Every strict prefix of a payload holding one frame is malformed, the
 * cut falling in the frame header, the extension or the data. */
static void test_frame_truncated(void **state)
{
    (void)state;
    uint8_t buf[512], copy[512];
    sx_wire_frame_t f;

    for (size_t i = 0; i < NSAMPLES; i++) {
        const sx_wire_frame_t *w = &sample_frames[i];
        size_t n = sx_wire_write_frame(buf, w);
        memset(buf + n, 0x77, w->len);
        n += w->len;
        for (size_t cut = 1; cut < n; cut++) {
            /* A copy of exactly cut bytes, so ASan sees any over-read. */
            uint8_t *p = copy + sizeof(copy) - cut;
            memcpy(p, buf, cut);
            size_t off = 0;
            assert_int_equal(sx_wire_next_frame(p, cut, &off, &f), -1);
        }
        size_t off = 0;
        assert_int_equal(sx_wire_next_frame(buf, n, &off, &f), 1);
        /* Behind a valid frame, a cut second frame is still malformed. */
        memcpy(buf + n, buf, n);
        for (size_t cut = n + 1; cut < 2 * n; cut++) {
            off = 0;
            assert_int_equal(sx_wire_next_frame(buf, cut, &off, &f), 1);
            assert_int_equal(sx_wire_next_frame(buf, cut, &off, &f), -1);
        }
    }
}

static void test_frame_unknown_kind(void **state)
{
    (void)state;
    uint8_t buf[64] = {0};
    sx_wire_frame_t f;
    const uint8_t kinds[] = {0, 8, 9, 0x41, 0xff};

    for (size_t i = 0; i < sizeof(kinds); i++) {
        buf[0] = kinds[i];
        size_t off = 0;
        assert_int_equal(sx_wire_next_frame(buf, sizeof(buf), &off, &f), -1);
    }
    /* An unknown kind after a good frame. */
    sx_wire_frame_t am = {.kind = SX_FRAME_AM, .len = 0};
    size_t n = sx_wire_write_frame(buf, &am);
    buf[n] = 9;
    size_t off = 0;
    assert_int_equal(sx_wire_next_frame(buf, n + SX_WIRE_FRAME_LEN, &off, &f), 1);
    assert_int_equal(sx_wire_next_frame(buf, n + SX_WIRE_FRAME_LEN, &off, &f), -1);
}

/* sx_copy_small (common/copy.h), the copy of a message's bytes into its
 * packet: every length from 0 to past its inline limit, at every
 * alignment of source and destination, copies exactly n bytes and touches
 * none around them. */
static void test_copy_small(void **state)
{
    (void)state;
    uint8_t src[256 + 16], dst[256 + 48];

    for (size_t i = 0; i < sizeof(src); i++)
        src[i] = (uint8_t)(i * 7 + 1);
    for (size_t n = 0; n <= 256; n++) {
        for (size_t so = 0; so < 8; so++) {
            for (size_t dof = 0; dof < 8; dof++) {
                memset(dst, 0xA5, sizeof(dst));
                sx_copy_small(dst + 16 + dof, src + so, n);
                for (size_t i = 0; i < sizeof(dst); i++) {
                    size_t at = 16 + dof;
                    if (i >= at && i < at + n)
                        assert_int_equal(dst[i], src[so + i - at]);
                    else
                        assert_int_equal(dst[i], 0xA5);
                }
            }
        }
    }
}

/* sx_zero_small (common/copy.h), the zeroing of an operation record and a
 * packet head: every size from 0 to past both records', at every
 * alignment, zeroes exactly n bytes and touches none around them. */
static void test_zero_small(void **state)
{
    (void)state;
    uint8_t buf[320 + 48];

    for (size_t n = 0; n <= 320; n++) {
        for (size_t off = 0; off < 8; off++) {
            memset(buf, 0xA5, sizeof(buf));
            sx_zero_small(buf + 16 + off, n);
            for (size_t i = 0; i < sizeof(buf); i++) {
                bool in = i >= 16 + off && i < 16 + off + n;
                assert_int_equal(buf[i], in ? 0 : 0xA5);
            }
        }
    }
}

/* sx_copy_bulk and its pieces (common/copy.h), the copies of payloads:
 * lengths around the piece size and a datagram's, at skews in and around
 * the window (the destination 1-31 bytes past the source modulo 4 KiB),
 * copy exactly n bytes and touch none around them, whichever way this
 * machine's measurement chose; the pieces themselves the same. */
static void copy_bulk_check(bool pieces)
{
    const size_t lens[] = {0, 1, 63, 2047, 2048, 2049, 4095, 4096, 4097, 6144, 6149, 65000, 70001};
    const size_t skews[] = {0,  1,  2,  8,    16,   31,   32,   33,   63,
                            64, 65, 80, 4064, 4065, 4095, 4096, 4097, 4127};
    const size_t cap = 24 * 4096; /* aligned_alloc: a multiple of the alignment */
    uint8_t *src = aligned_alloc(4096, cap), *dst = aligned_alloc(4096, cap);

    assert_non_null(src);
    assert_non_null(dst);
    for (size_t i = 0; i < cap; i++)
        src[i] = (uint8_t)(i * 131 + (i >> 8) + 3);
    for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
        size_t n = lens[l];
        for (size_t so = 0; so < 200; so += 72) {
            for (size_t k = 0; k < sizeof(skews) / sizeof(skews[0]); k++) {
                size_t at = so + 4096 + skews[k]; /* a page of guard bytes */
                memset(dst, 0xA5, at + n + 64);
                if (pieces)
                    sx_copy_pieces(dst + at, src + so, n);
                else
                    sx_copy_bulk(dst + at, src + so, n);
                assert_memory_equal(dst + at, src + so, n);
                for (size_t i = 0; i < at; i++)
                    assert_int_equal(dst[i], 0xA5);
                for (size_t i = at + n; i < at + n + 64; i++)
                    assert_int_equal(dst[i], 0xA5);
                /* Both buffers are page-aligned: dst + at is skews[k]
                 * past src + so modulo 4 KiB. */
                size_t skew = skews[k] & 4095;
                bool in = n > SX_COPY_PIECE && skew >= 1 && skew <= 31;
                assert_int_equal(sx_copy_is_skewed(dst + at, src + so, n), in);
            }
        }
    }
    free(src);
    free(dst);
}

static void test_copy_bulk(void **state)
{
    (void)state;
    bool chosen = sx_copy_skew_pieces();
    copy_bulk_check(false);
    copy_bulk_check(true);
    assert_int_equal(sx_copy_skew_pieces(), chosen); /* measured once */
}

/* A len field that runs past the payload, by one byte or by nearly 4 GiB:
 * the bounds check must not overflow into accepting it. */
static void test_frame_length_overflow(void **state)
{
    (void)state;
    const uint32_t lens[] = {UINT32_MAX,
                             UINT32_MAX - 1,
                             UINT32_MAX - 7,
                             UINT32_MAX - 8,
                             UINT32_MAX - 15,
                             UINT32_MAX - 47,
                             UINT32_MAX - 55,
                             0x80000000u,
                             0x7fffffffu,
                             65536,
                             1000};
    const uint8_t kinds[] = {SX_FRAME_AM,  SX_FRAME_AM_FIRST, SX_FRAME_AM_MORE,
                             SX_FRAME_PUT, SX_FRAME_GET_REQ,  SX_FRAME_RMA_RESP};
    uint8_t buf[256];
    sx_wire_frame_t f;

    for (size_t k = 0; k < sizeof(kinds); k++) {
        for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
            sx_wire_frame_t w = {.kind = kinds[k], .len = lens[i]};
            size_t n = sx_wire_write_frame(buf, &w);
            memset(buf + n, 0, sizeof(buf) - n);
            for (size_t payload = n; payload <= sizeof(buf); payload += 61) {
                size_t off = 0;
                assert_int_equal(sx_wire_next_frame(buf, payload, &off, &f), -1);
            }
            /* The same at a non-zero offset behind another frame. */
            sx_wire_frame_t am = {.kind = SX_FRAME_AM, .len = 3};
            size_t m = sx_wire_write_frame(buf, &am) + 3;
            n = sx_wire_write_frame(buf + m, &w);
            size_t off = 0;
            assert_int_equal(sx_wire_next_frame(buf, sizeof(buf), &off, &f), 1);
            assert_int_equal(off, m);
            assert_int_equal(sx_wire_next_frame(buf, sizeof(buf), &off, &f), -1);
        }
        /* Exactly the bytes that are there: accepted; one more: not. */
        sx_wire_frame_t w = {.kind = kinds[k]};
        size_t hdr = sx_wire_write_frame(buf, &w);
        w.len = (uint32_t)(sizeof(buf) - hdr);
        sx_wire_write_frame(buf, &w);
        size_t off = 0;
        assert_int_equal(sx_wire_next_frame(buf, sizeof(buf), &off, &f), 1);
        assert_int_equal(off, sizeof(buf));
        w.len++;
        sx_wire_write_frame(buf, &w);
        off = 0;
        assert_int_equal(sx_wire_next_frame(buf, sizeof(buf), &off, &f), -1);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32c_vectors),
        cmocka_unit_test(test_crc32c_incremental),
        cmocka_unit_test(test_csum16),
        cmocka_unit_test(test_header_layout_and_round_trip),
        cmocka_unit_test(test_parse_drop_reasons),
        cmocka_unit_test(test_fragments),
        cmocka_unit_test(test_dsack_flag),
        cmocka_unit_test(test_drop_reason_names),
        cmocka_unit_test(test_csum16_reference),
        cmocka_unit_test(test_update_ack),
        cmocka_unit_test(test_ext_len),
        cmocka_unit_test(test_frame_round_trip),
        cmocka_unit_test(test_peek_alone),
        cmocka_unit_test(test_frame_truncated),
        cmocka_unit_test(test_frame_unknown_kind),
        cmocka_unit_test(test_frame_length_overflow),
        cmocka_unit_test(test_copy_small),
        cmocka_unit_test(test_copy_bulk),
        cmocka_unit_test(test_zero_small),
    };
    sx_test_filter_from_env();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
