/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Hostile datagrams against a live engine. Engine B is the target; engine
 * A is a real peer of B (so B has a channel that crafted packets can reach)
 * and, at the end, proves that the channel still works. A plain UDP socket
 * sends crafted datagrams straight to B's shard-0 socket, as anyone on the
 * network could.
 *
 * Every case checks the exact set of counters that moved (the one drop
 * reason, nothing delivered, no channel failed): a packet dropped for the
 * wrong reason is as much a bug as one not dropped. Remote-memory frames
 * with hostile keys and ranges must be refused without writing a byte of
 * the guarded arena around B's registered region.
 *
 * Sequence numbers. Packets that must reach the channel's frame handling
 * carry A's epoch and the sequence number B expects next, so they use up
 * sequence numbers of the A-to-B channel. A therefore starts its channels
 * SEQ_GAP numbers after B (SEQ_START differs between the two engines, which
 * only this test does), and before A sends anything the test pads B's
 * expectation up to A's start with empty packets. B starts just below
 * 2^32, so the crafted stream also crosses the sequence wrap-around.
 *
 * Authentication (issue 25). With SXT_AUTH_KEY set (ctest's
 * test_hostile_auth), both engines run with that key as SX_AUTH, and the
 * forger has it too, as a peer of the job would: every crafted datagram
 * is tagged as it is sent (send_raw), so each case still reaches the check
 * it aims at behind the tag's. test_authentication then sends what a
 * forger without the key can: no tag, another key's tag, a tagged
 * datagram altered with its checksums made good, and a replay.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "am_util.h"
#include "test_filter.h"
#include "shard/auth.h"
#include "shard/wire.h"
#include "common/crc32c.h"

#define TAG       7
#define MAX_MSG   4096
#define B_SEQ     0xfffffff0u
#define SEQ_GAP   256u
#define LIMIT_NS  (10ull * 1000000000ull)
#define PKT_BYTES 8192

typedef struct fixture {
    sx_engine_h a, b;
    sx_peer_h a_to_b, b_to_a;
    uint64_t a_epoch, b_epoch;
    int sock;
    struct sockaddr_in b_addr;
    uint32_t next_seq; /* what B expects next on the channel from A */
    uint64_t delivered;
    size_t last_len;
    uint64_t bad_bytes; /* delivered bytes that were not the pattern */
    uint64_t completions, completion_errors;
} fixture_t;

static fixture_t fx;

/* SXT_AUTH_KEY: the job's key, which the forger holds too. */
static sx_auth_t g_auth;
static const char *g_auth_hex;

static uint8_t pattern(size_t i)
{
    return (uint8_t)(i * 13 + 5);
}

static void on_am(void *arg, uint64_t peer_id, uint8_t tag, const void *data, size_t len)
{
    fixture_t *f = arg;
    (void)peer_id;
    (void)tag;
    for (size_t i = 0; i < len; i++) {
        if (((const uint8_t *)data)[i] != pattern(i))
            f->bad_bytes++;
    }
    f->last_len = len;
    f->delivered++;
}

static void on_done(void *arg, int status)
{
    fixture_t *f = arg;
    f->completions++;
    if (status != SX_OK)
        f->completion_errors++;
}

static uint64_t card_epoch(sx_engine_h e, uint8_t *card, size_t *len_p)
{
    uint64_t epoch = 0;
    *len_p = 4096;
    assert_int_equal(sx_engine_address(e, card, len_p), SX_OK);
    for (int i = 0; i < 8; i++)
        epoch |= (uint64_t)card[8 + i] << (8 * i);
    return epoch;
}

static int group_setup(void **state)
{
    (void)state;
    char b_seq[16], a_seq[16];
    snprintf(b_seq, sizeof(b_seq), "%u", B_SEQ);
    snprintf(a_seq, sizeof(a_seq), "%u", (uint32_t)(B_SEQ + SEQ_GAP));
    /* The implicit connection method: these tests forge data packets of a
     * channel the handshake never set up (test_cpc covers forged control
     * messages and data before the handshake). */
    /* Neither engine has a service thread (SX_SERVICE_US=0): each moves
     * only when the test progresses it, so that every counter delta below
     * is the crafted datagram's. A, whose channel the test impersonates
     * and whose receive side starts SEQ_GAP ahead of B's sends, would
     * otherwise answer B's RMA responses with ACKs B never sent for. */
    g_auth_hex = getenv("SXT_AUTH_KEY");
    if (g_auth_hex != NULL) {
        uint8_t key[SX_AUTH_KEY_LEN];
        assert_true(sx_auth_available());
        assert_true(sx_auth_parse_key(g_auth_hex, key));
        sx_auth_set_key(&g_auth, key);
    }
    const char *auth = g_auth_hex != NULL ? g_auth_hex : "";
    const sx_config_kv_t kb[] = {{"SHARDS", "1"},      {"MAX_MSG_SIZE", "4096"},
                                 {"SEQ_START", b_seq}, {"CPC", "implicit"},
                                 {"SERVICE_US", "0"},  {"AUTH", auth}};
    const sx_config_kv_t ka[] = {{"SHARDS", "1"},      {"MAX_MSG_SIZE", "4096"},
                                 {"SEQ_START", a_seq}, {"CPC", "implicit"},
                                 {"SERVICE_US", "0"},  {"AUTH", auth}};
    uint8_t card[4096];
    size_t len;

    memset(&fx, 0, sizeof(fx));
    fx.a = am_engine(ka, 6);
    fx.b = am_engine(kb, 6);
    assert_int_equal(sx_thread_bind(fx.a, 0), SX_OK);
    assert_int_equal(sx_thread_bind(fx.b, 0), SX_OK);
    fx.a_to_b = am_connect(fx.a, fx.b, 2);
    fx.b_to_a = am_connect(fx.b, fx.a, 1);
    assert_int_equal(sx_am_register(fx.b, TAG, on_am, &fx), SX_OK);
    fx.a_epoch = card_epoch(fx.a, card, &len);
    fx.b_epoch = card_epoch(fx.b, card, &len);

    /* B's card: shard 0's address after a length byte. Kind 4 (8 bytes:
     * reserved 0, port little-endian, IPv4 in network order, and 2 more,
     * the ACK port, with SX_UDP_ACK_SOCKET on) or by default kind 5 (the
     * port at the same place; this host reaches it on loopback), kind 6
     * where the host has IPv6 addresses. */
    assert_true(len >= 16 + 1 + 8);
    fx.b_addr.sin_family = AF_INET;
    fx.b_addr.sin_port = htons((uint16_t)(card[19] | card[20] << 8));
    if (card[17] == 5 || card[17] == 6) {
        size_t at6 = 17 + 14 + 5 * (size_t)card[18];
        assert_int_equal(card[16], 14 + 5 * card[18] + (card[17] == 6 ? 1 + 17 * card[at6] : 0));
        fx.b_addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    } else {
        assert_true(card[16] == 8 || card[16] == 10);
        assert_int_equal(card[17], 4);
        assert_int_equal(card[18], 0);
        memcpy(&fx.b_addr.sin_addr.s_addr, card + 21, 4);
    }
    fx.sock = socket(AF_INET, SOCK_DGRAM, 0);
    assert_true(fx.sock >= 0);
    fx.next_seq = B_SEQ;
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    close(fx.sock);
    sx_engine_destroy(fx.a);
    sx_engine_destroy(fx.b);
    return 0;
}

/* ---------------------------------------------------------------- counters */

/* The counters a hostile packet may move; all others are ignored. */
enum {
    C_DELIVERED = SX_DROP_COUNT,
    C_NO_HANDLER,
    C_CHAN_FAILURES,
    C_OOO,
    C_DATA_SENT,
    C_ACK_UNSENT,
    C_RESP_EARLY,
    C_RESP_BAD_STATUS,
    C_RX,
    C_N
};

typedef struct snap {
    uint64_t v[C_N];
} snap_t;

static const char *counter_name(unsigned i)
{
    static char names[SX_DROP_COUNT][40];
    static const char *const extra[] = {"am_delivered",    "am_no_handler",   "chan_failures",
                                        "rx_out_of_order", "data_sent",       "ack_unsent",
                                        "resp_early",      "resp_bad_status", "rx_packets"};
    if (i >= SX_DROP_COUNT)
        return extra[i - SX_DROP_COUNT];
    snprintf(names[i], sizeof(names[i]), "drop_%s", sx_drop_reason_name((sx_drop_reason_t)i));
    return names[i];
}

static uint64_t counter(unsigned i)
{
    uint64_t v = 0;
    assert_int_equal(sx_stats_value(fx.b, counter_name(i), &v), SX_OK);
    return v;
}

static snap_t take_snap(void)
{
    snap_t s;
    for (unsigned i = 0; i < C_N; i++)
        s.v[i] = counter(i);
    return s;
}

/* Progresses B until it has received @p n more datagrams than in @p before,
 * then checks that exactly the counters in @p moved (index, delta pairs,
 * ending with C_N) changed, by exactly those deltas. */
static void expect(const snap_t *before, unsigned n, const unsigned *moved)
{
    uint64_t start = sx_time_ns();
    while (counter(C_RX) < before->v[C_RX] + n) {
        sx_progress(fx.b);
        if (sx_time_ns() - start > LIMIT_NS)
            fail_msg("B did not receive the crafted datagram within 10 s");
    }
    snap_t after = take_snap();
    uint64_t want[C_N] = {0};
    want[C_RX] = n;
    for (const unsigned *m = moved; *m != C_N; m += 2)
        want[m[0]] += m[1];
    for (unsigned i = 0; i < C_N; i++) {
        if (after.v[i] - before->v[i] != want[i])
            fail_msg("counter %s moved by %llu, expected %llu", counter_name(i),
                     (unsigned long long)(after.v[i] - before->v[i]), (unsigned long long)want[i]);
    }
    /* The handler's own count agrees with the engine's. */
    assert_int_equal(fx.delivered, after.v[C_DELIVERED]);
    assert_int_equal(fx.bad_bytes, 0);
}

/* ---------------------------------------------------------------- packets */

typedef struct pkt {
    uint8_t buf[PKT_BYTES];
    size_t len;
} pkt_t;

static void pkt_begin(pkt_t *p)
{
    memset(p->buf, 0, sizeof(p->buf));
    p->len = SX_WIRE_HDR_LEN;
}

/* Appends a frame whose header says @p len bytes of data, followed by
 * @p data_bytes bytes of the pattern (a liar when they differ). */
static void pkt_frame(pkt_t *p, uint8_t kind, uint16_t flags, uint32_t len, uint64_t total,
                      size_t data_bytes)
{
    sx_wire_frame_t f = {.kind = kind, .tag = TAG, .flags = flags, .len = len, .total = total};
    p->len += sx_wire_write_frame(p->buf + p->len, &f);
    for (size_t i = 0; i < data_bytes; i++)
        p->buf[p->len + i] = pattern(i);
    p->len += data_bytes;
    assert_true(p->len <= PKT_BYTES);
}

/* A data packet from A's shard 0 to B's shard 0: valid but for what the
 * caller changes in the header before sealing it. It acknowledges every
 * data packet B has sent (B sends only to A, and only to answer RMA
 * requests), so B never retransmits to A, whose channel could not
 * acknowledge them: A's receive side starts SEQ_GAP ahead of B's sends. */
static sx_wire_hdr_t pkt_hdr(const pkt_t *p, uint32_t seq)
{
    sx_wire_hdr_t h = {.type = SX_PKT_DATA,
                       .flags = SX_PKTF_ACK,
                       .src_shard = 0,
                       .dst_shard = 0,
                       .src_epoch = fx.a_epoch,
                       .dst_epoch = fx.b_epoch,
                       .seq = seq,
                       .ack = B_SEQ + (uint32_t)counter(C_DATA_SENT),
                       .sack = 0,
                       .payload_len = (uint16_t)(p->len - SX_WIRE_HDR_LEN),
                       /* A's window is open: B answers RMA at once. */
                       .rwnd_pkts = UINT32_MAX,
                       .rwnd_bytes = UINT32_MAX};
    return h;
}

static void pkt_seal(pkt_t *p, const sx_wire_hdr_t *h)
{
    uint32_t crc = sx_crc32c(0, p->buf + SX_WIRE_HDR_LEN, p->len - SX_WIRE_HDR_LEN);
    sx_wire_write_hdr(p->buf, h, &crc);
}

static void send_bytes(const void *data, size_t len)
{
    ssize_t rc =
        sendto(fx.sock, data, len, 0, (const struct sockaddr *)&fx.b_addr, sizeof(fx.b_addr));
    assert_int_equal(rc, (ssize_t)len);
}

/* Sets SX_PKTF_AUTH in a header and mends its checksum by the difference
 * alone (RFC 1624, eqn. 3: HC' = ~(~HC + ~m + m'), in the little-endian
 * 16-bit words sx_wire_csum16 sums), so a checksum a case spoiled on
 * purpose stays spoiled. */
static void set_auth_flag(uint8_t *hdr)
{
    uint16_t m = (uint16_t)(hdr[2] | hdr[3] << 8), m2 = m | SX_PKTF_AUTH;
    uint16_t hc = (uint16_t)(hdr[42] | hdr[43] << 8);
    uint32_t sum = (uint32_t)(uint16_t)~hc + (uint16_t)~m + m2;
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    hc = (uint16_t)~sum;
    hdr[2] = (uint8_t)m2;
    hdr[3] = (uint8_t)(m2 >> 8);
    hdr[42] = (uint8_t)hc;
    hdr[43] = (uint8_t)(hc >> 8);
}

/* Sends a crafted datagram; with a key, tagged under it as a peer would
 * (the flag set, the tag after the bytes given). */
static void send_raw(const void *data, size_t len)
{
    if (g_auth_hex == NULL || len < SX_WIRE_HDR_LEN) {
        send_bytes(data, len);
        return;
    }
    static uint8_t buf[PKT_BYTES + SX_AUTH_TAG_LEN];
    assert_true(len <= PKT_BYTES);
    memcpy(buf, data, len);
    set_auth_flag(buf);
    sx_auth_seal(&g_auth, buf, len, NULL, 0, buf + len);
    send_bytes(buf, len + SX_AUTH_TAG_LEN);
}

/* Seals @p p with sequence number @p seq and, unless @p ack is NULL,
 * that cumulative ACK instead of one for all B sent; sends it, and checks
 * that only the counters in @p moved moved. */
static void send_at_ack(pkt_t *p, uint32_t seq, const uint32_t *ack, const unsigned *moved)
{
    snap_t before = take_snap();
    sx_wire_hdr_t h = pkt_hdr(p, seq);
    if (ack != NULL)
        h.ack = *ack;
    pkt_seal(p, &h);
    send_raw(p->buf, p->len);
    expect(&before, 1, moved);
}

static void send_at(pkt_t *p, uint32_t seq, const unsigned *moved)
{
    send_at_ack(p, seq, NULL, moved);
}

/* The same, as the packet B expects next. */
static void send_next(pkt_t *p, const unsigned *moved)
{
    send_at(p, fx.next_seq++, moved);
}

/* Starts @p p with one frame; see pkt_frame. */
static void pkt_one(pkt_t *p, uint8_t kind, uint16_t flags, uint32_t len, uint64_t total,
                    size_t data_bytes)
{
    pkt_begin(p);
    pkt_frame(p, kind, flags, len, total, data_bytes);
}

/* What a case expects to move: (counter, delta) pairs ending with C_N. */
static const unsigned NONE[] = {C_N};
static const unsigned ONE[] = {C_DELIVERED, 1, C_N};
static const unsigned FRAME[] = {SX_DROP_FRAME, 1, C_N};
static const unsigned FRAME_AND_ONE[] = {SX_DROP_FRAME, 1, C_DELIVERED, 1, C_N};
/* A message B refuses (too large, no handler) is answered with an
 * AM_REFUSE in a data packet of its own (issue 25: refusals are never
 * silent); the forged packets that follow acknowledge it, which lets go
 * of the ACK B holds back meanwhile. */
static const unsigned TOO_LARGE[] = {SX_DROP_TOO_LARGE, 1, C_DATA_SENT, 1, C_N};
static const unsigned NO_HANDLER[] = {C_NO_HANDLER, 1, C_DATA_SENT, 1, C_N};
static const unsigned DUP[] = {SX_DROP_DUPLICATE, 1, C_N};
static const unsigned OOW[] = {SX_DROP_OUT_OF_WINDOW, 1, C_N};
static const unsigned KEPT[] = {C_OOO, 1, C_N};
static const unsigned ANSWERED[] = {C_DATA_SENT, 1, C_N};
/* An ACK for data never sent is ignored, and not a drop: the packet's
 * data, when it has any, is still taken. */
static const unsigned ACK_UNSENT[] = {C_ACK_UNSENT, 1, C_N};

/* ---------------------------------------------------------------- cases */

/* Sends a one-message packet, otherwise valid and with the sequence number
 * B expects, whose header bytes [off, off + width) hold @p value (little-
 * endian, as every field), and expects only @p reason to count it. The
 * header checksum is recomputed; a patch of the checksum itself (offset
 * 42) is XORed in instead, so it always spoils it. @p cut bytes are cut
 * off the datagram's end. */
static void send_patched(unsigned off, unsigned width, uint64_t value, size_t cut,
                         sx_drop_reason_t reason)
{
    const unsigned moved[] = {reason, 1, C_N};
    pkt_t p;

    pkt_one(&p, SX_FRAME_AM, SX_FRAMEF_LAST, 10, 0, 10);
    snap_t before = take_snap();
    sx_wire_hdr_t h = pkt_hdr(&p, fx.next_seq);
    pkt_seal(&p, &h);
    for (unsigned i = 0; i < width; i++) {
        uint8_t v = (uint8_t)(value >> (8 * i));
        p.buf[off + i] = (off == 42) ? (uint8_t)(p.buf[off + i] ^ v) : v;
    }
    if (off != 42) {
        p.buf[42] = p.buf[43] = 0;
        uint16_t c = sx_wire_csum16(p.buf, SX_WIRE_HDR_LEN);
        p.buf[42] = (uint8_t)c;
        p.buf[43] = (uint8_t)(c >> 8);
    }
    send_raw(p.buf, p.len - cut);
    expect(&before, 1, moved);
}

static void test_bad_headers(void **state)
{
    (void)state;
    const unsigned truncated[] = {SX_DROP_SHORT, 1, C_N};
    pkt_t p;

    /* Truncated: prefixes of a valid header. */
    pkt_begin(&p);
    sx_wire_hdr_t h = pkt_hdr(&p, fx.next_seq);
    pkt_seal(&p, &h);
    const size_t lens[] = {0, 1, SX_WIRE_HDR_LEN - 1};
    for (size_t i = 0; i < 3; i++) {
        snap_t before = take_snap();
        send_raw(p.buf, lens[i]);
        expect(&before, 1, truncated);
    }
    send_patched(0, 1, SX_WIRE_VERSION + 1, 0, SX_DROP_VERSION);
    send_patched(42, 1, 0x5a, 0, SX_DROP_HDR_CSUM);
    /* The payload is 18 bytes: the datagram one short, then one long. */
    send_patched(40, 2, 18, 1, SX_DROP_LENGTH);
    send_patched(40, 2, 17, 0, SX_DROP_LENGTH);
    send_patched(40, 2, 0xffff, 0, SX_DROP_LENGTH);
    send_patched(44, 4, 0x12345678, 0, SX_DROP_PAYLOAD_CRC);
}

static void test_bad_addressing(void **state)
{
    (void)state;
    send_patched(6, 2, 1, 0, SX_DROP_SHARD); /* dst_shard: B has one shard */
    send_patched(6, 2, 0xffff, 0, SX_DROP_SHARD);
    send_patched(16, 8, fx.b_epoch + 1, 0, SX_DROP_STALE_EPOCH); /* dst_epoch: B's predecessor */
    send_patched(16, 8, 0, 0, SX_DROP_STALE_EPOCH);
    send_patched(8, 8, fx.a_epoch ^ 0x5a5a5a5a5a5a5a5aull, 0, SX_DROP_UNKNOWN_PEER); /* src_epoch */
    send_patched(8, 8, fx.b_epoch, 0, SX_DROP_UNKNOWN_PEER); /* B is not its own peer */
    send_patched(4, 2, 1, 0, SX_DROP_SHARD);                 /* src_shard: A has one shard */
    send_patched(4, 2, 0xffff, 0, SX_DROP_SHARD);
}

/* A crafted message that is well formed is delivered: the control that
 * shows the crafting itself is right, so the drops below mean something. */
static void test_valid_crafted_message(void **state)
{
    (void)state;
    pkt_t p;

    pkt_one(&p, SX_FRAME_AM, SX_FRAMEF_LAST, 100, 0, 100);
    send_next(&p, ONE);
    assert_int_equal(fx.last_len, 100);
    /* Refused, and answered so (issue 25): a message in one frame that is
     * larger than MAX_MSG_SIZE (it used to pass the limit by), and one for
     * a tag that has no handler. */
    pkt_one(&p, SX_FRAME_AM, SX_FRAMEF_LAST, MAX_MSG + 1, 0, MAX_MSG + 1);
    send_next(&p, TOO_LARGE);
    pkt_one(&p, SX_FRAME_AM, SX_FRAMEF_LAST, 100, 0, 100);
    p.buf[SX_WIRE_HDR_LEN + 1] = TAG + 1;
    send_next(&p, NO_HANDLER);
    /* A message at exactly MAX_MSG_SIZE, in two chunks and two packets;
     * the second chunk's bytes continue the pattern at offset 1000. */
    pkt_one(&p, SX_FRAME_AM_FIRST, 0, 1000, MAX_MSG, 1000);
    send_next(&p, NONE);
    pkt_one(&p, SX_FRAME_AM_MORE, SX_FRAMEF_LAST, MAX_MSG - 1000, 0, MAX_MSG - 1000);
    for (size_t i = 0; i < MAX_MSG - 1000; i++)
        p.buf[p.len - (MAX_MSG - 1000) + i] = pattern(1000 + i);
    send_next(&p, ONE);
    assert_int_equal(fx.last_len, MAX_MSG);
}

static void test_malformed_frames(void **state)
{
    (void)state;
    pkt_t p;

    /* Unknown kinds. */
    const uint8_t kinds[] = {0, 9, 0xff};
    for (size_t i = 0; i < sizeof(kinds); i++) {
        pkt_one(&p, SX_FRAME_AM, SX_FRAMEF_LAST, 4, 0, 4);
        p.buf[SX_WIRE_HDR_LEN] = kinds[i];
        send_next(&p, FRAME);
    }
    /* A frame's length running past the payload: by one byte, and by
     * almost 4 GiB. */
    const uint32_t lies[] = {11, UINT32_MAX, UINT32_MAX - 7};
    for (size_t i = 0; i < 3; i++) {
        pkt_one(&p, SX_FRAME_AM, SX_FRAMEF_LAST, lies[i], 0, 10);
        send_next(&p, FRAME);
    }
    /* A good frame, a bad one, then a good one the parser must not trust:
     * the first is delivered, the rest of the packet ignored. */
    pkt_one(&p, SX_FRAME_AM, SX_FRAMEF_LAST, 3, 0, 3);
    pkt_frame(&p, 0x42, 0, 0, 0, 0);
    pkt_frame(&p, SX_FRAME_AM, SX_FRAMEF_LAST, 3, 0, 3);
    send_next(&p, FRAME_AND_ONE);
    /* A frame header cut short at the end of the payload. */
    pkt_one(&p, SX_FRAME_AM, SX_FRAMEF_LAST, 2, 0, 2);
    p.len += SX_WIRE_FRAME_LEN - 1;
    send_next(&p, FRAME_AND_ONE);
    /* AM_FIRST without room for its extension. */
    pkt_one(&p, SX_FRAME_AM_FIRST, 0, 0, 100, 0);
    p.len -= 3;
    send_next(&p, FRAME);
}

static void test_bad_chunks(void **state)
{
    (void)state;
    pkt_t p;

    /* AM_MORE with no AM_FIRST before it, with and without LAST. */
    pkt_one(&p, SX_FRAME_AM_MORE, SX_FRAMEF_LAST, 10, 0, 10);
    send_next(&p, FRAME);
    pkt_one(&p, SX_FRAME_AM_MORE, 0, 10, 0, 10);
    send_next(&p, FRAME);
    /* Larger than MAX_MSG_SIZE: refused at the first chunk, and the rest
     * of that message is discarded quietly. */
    pkt_one(&p, SX_FRAME_AM_FIRST, 0, 100, MAX_MSG + 1, 100);
    send_next(&p, TOO_LARGE);
    pkt_one(&p, SX_FRAME_AM_MORE, SX_FRAMEF_LAST, MAX_MSG + 1 - 100, 0, MAX_MSG + 1 - 100);
    send_next(&p, NONE);
    pkt_one(&p, SX_FRAME_AM_FIRST, SX_FRAMEF_LAST, 0, UINT64_MAX, 0);
    send_next(&p, TOO_LARGE);
    /* A chunk longer than the whole message. */
    pkt_one(&p, SX_FRAME_AM_FIRST, SX_FRAMEF_LAST, 20, 10, 20);
    send_next(&p, FRAME);
    /* A following chunk that overflows the total. */
    pkt_one(&p, SX_FRAME_AM_FIRST, 0, 50, 100, 50);
    send_next(&p, NONE);
    pkt_one(&p, SX_FRAME_AM_MORE, SX_FRAMEF_LAST, 60, 0, 60);
    send_next(&p, FRAME);
    /* A LAST chunk that leaves the message short. */
    pkt_one(&p, SX_FRAME_AM_FIRST, 0, 50, 100, 50);
    pkt_frame(&p, SX_FRAME_AM_MORE, SX_FRAMEF_LAST, 10, 0, 10);
    send_next(&p, FRAME);
    /* A following chunk with another tag. */
    pkt_one(&p, SX_FRAME_AM_FIRST, 0, 50, 100, 50);
    pkt_frame(&p, SX_FRAME_AM_MORE, SX_FRAMEF_LAST, 50, 0, 50);
    p.buf[p.len - 50 - SX_WIRE_FRAME_LEN + 1] = TAG + 1;
    send_next(&p, FRAME);
    /* A whole message in the middle of a chunked one: the chunked one is
     * abandoned, the whole one delivered. */
    pkt_one(&p, SX_FRAME_AM_FIRST, 0, 50, 100, 50);
    pkt_frame(&p, SX_FRAME_AM, SX_FRAMEF_LAST, 5, 0, 5);
    send_next(&p, FRAME_AND_ONE);
    assert_int_equal(fx.last_len, 5);
}

/* ---------------------------------------------------------------- RMA */

/* B's registered memory: a 64-byte window in the middle of an arena whose
 * other bytes are guards, and a read-only region. */
#define REGION_OFF 64
#define REGION_LEN 64
static uint8_t arena[REGION_OFF + REGION_LEN + 64];
static uint8_t ro_arena[32];
static sx_mem_h rw_mem, ro_mem;

static uint64_t addr_of(const void *p)
{
    return (uint64_t)(uintptr_t)p;
}

/* Sends one PUT, GET_REQ or RMA_RESP frame with @p data_len bytes of data
 * as the next packet, and checks the counters: @p moved as in expect(). */
static void send_rma(uint8_t kind, const sx_wire_rma_t *rma, const sx_wire_resp_t *resp,
                     uint32_t data_len, const unsigned *moved)
{
    pkt_t p;
    pkt_begin(&p);
    sx_wire_frame_t f = {.kind = kind, .flags = SX_FRAMEF_LAST, .len = data_len};
    if (rma != NULL)
        f.rma = *rma;
    if (resp != NULL)
        f.resp = *resp;
    p.len += sx_wire_write_frame(p.buf + p.len, &f);
    for (uint32_t i = 0; i < data_len; i++)
        p.buf[p.len + i] = pattern(i);
    p.len += data_len;
    send_next(&p, moved);
}

/* A PUT of @p len bytes at @p addr in the operation [op_addr, +op_len). */
static void put(uint64_t key, uint64_t addr, uint64_t op_addr, uint64_t op_len, uint32_t len)
{
    sx_wire_rma_t r = {.addr = addr, .key = key, .op_addr = op_addr, .op_len = op_len, .op_id = 9};
    send_rma(SX_FRAME_PUT, &r, NULL, len, ANSWERED);
}

static void get(uint64_t key, uint64_t op_addr, uint64_t op_len)
{
    sx_wire_rma_t r = {.addr = op_addr, .key = key, .op_addr = op_addr, .op_len = op_len};
    send_rma(SX_FRAME_GET_REQ, &r, NULL, 0, ANSWERED);
}

/* Remote writes with keys and ranges that must be refused: each is
 * answered (with an error status; the answer goes to A, which is not
 * listening) and none writes a byte. One valid PUT shows the way in works. */
static void test_rma_puts(void **state)
{
    (void)state;
    uint8_t *base_p = arena + REGION_OFF;
    memset(arena, 0xaa, sizeof(arena));
    memset(ro_arena, 0xbb, sizeof(ro_arena));
    assert_int_equal(sx_mem_register(fx.b, base_p, REGION_LEN,
                                     SX_MEM_REMOTE_READ | SX_MEM_REMOTE_WRITE, &rw_mem),
                     SX_OK);
    assert_int_equal(sx_mem_register(fx.b, ro_arena, sizeof(ro_arena), SX_MEM_REMOTE_READ, &ro_mem),
                     SX_OK);
    const uint64_t key = sx_mem_rkey(rw_mem), base = addr_of(base_p);

    put(key, base + 8, base + 8, 16, 16); /* valid */
    for (size_t i = 0; i < 16; i++)
        assert_int_equal(base_p[8 + i], pattern(i));
    memset(base_p + 8, 0xaa, 16);

    put(key ^ 1, base, base, 16, 16);                                     /* unknown key */
    put(0, base, base, 16, 16);                                           /* key zero */
    put(sx_mem_rkey(ro_mem), addr_of(ro_arena), addr_of(ro_arena), 8, 8); /* read-only */
    put(key, base + REGION_LEN - 4, base + REGION_LEN - 4, 8, 8);         /* past the end */
    put(key, base - 1, base - 1, 8, 8);                                   /* before the start */
    put(key, base, base, REGION_LEN + 1, 8);        /* op longer than region */
    put(key, base, base, UINT64_MAX, 8);            /* op of 2^64 - 1 */
    put(key, UINT64_MAX - 3, UINT64_MAX - 3, 8, 8); /* wraps around 2^64 */
    put(key, base + 8, base, 16, 16);               /* chunk runs past op */
    put(key, base, base + 8, 16, 8);                /* chunk before op */
    put(key, base + 8, base, 4, 4);                 /* chunk after op */
    put(key, base + 16, base, 8, 0);                /* empty chunk past op */

    /* Not one byte of the arena changed. */
    for (size_t i = 0; i < sizeof(arena); i++)
        assert_int_equal(arena[i], 0xaa);
    for (size_t i = 0; i < sizeof(ro_arena); i++)
        assert_int_equal(ro_arena[i], 0xbb);
}

static void test_rma_gets_and_responses(void **state)
{
    (void)state;
    const uint64_t key = sx_mem_rkey(rw_mem), base = addr_of(arena + REGION_OFF);

    get(key, base, 16);                              /* valid */
    get(key ^ 1, base, 16);                          /* unknown key */
    get(key, base + REGION_LEN - 8, 16);             /* past the end */
    get(key, base, MAX_MSG + 1);                     /* more than MAX_MSG_SIZE */
    get(key, base, UINT64_MAX);                      /* 2^64 - 1 bytes */
    get(key, UINT64_MAX - 7, 16);                    /* wraps around 2^64 */
    get(sx_mem_rkey(ro_mem), addr_of(ro_arena), 32); /* read-only may be read */

    /* Responses to operations B never started. */
    const sx_wire_resp_t resps[] = {{.op_id = 0, .status = SX_OK, .offset = 0},
                                    {.op_id = 12345, .status = SX_ERR_ACCESS},
                                    {.op_id = UINT32_MAX, .status = SX_OK, .offset = UINT64_MAX}};
    for (size_t i = 0; i < 3; i++)
        send_rma(SX_FRAME_RMA_RESP, NULL, &resps[i], i == 2 ? 32 : 0, FRAME);

    for (size_t i = 0; i < sizeof(arena); i++)
        assert_int_equal(arena[i], 0xaa);
    assert_int_equal(sx_mem_deregister(fx.b, rw_mem), SX_OK);
    assert_int_equal(sx_mem_deregister(fx.b, ro_mem), SX_OK);
}

/* B's own PUT and GET to A, which A never answers (the test does not
 * progress it): the forger answers them instead. */
typedef struct rma_done {
    unsigned calls;
    int status;
    void *free_me; /* freed by the completion, as a caller may */
} rma_done_t;

static void on_rma_done(void *arg, int status)
{
    rma_done_t *d = arg;
    d->calls++;
    d->status = status;
    free(d->free_me);
    d->free_me = NULL;
}

/* Progresses B until @p name has grown past @p than. */
static void b_until_above(const char *name, uint64_t than)
{
    uint64_t start = sx_time_ns(), v = 0;
    for (;;) {
        assert_int_equal(sx_stats_value(fx.b, name, &v), SX_OK);
        if (v > than)
            return;
        sx_progress(fx.b);
        if (sx_time_ns() - start > LIMIT_NS)
            fail_msg("B's %s did not move within 10 s", name);
    }
}

static uint64_t b_stat(const char *name)
{
    uint64_t v = 0;
    assert_int_equal(sx_stats_value(fx.b, name, &v), SX_OK);
    return v;
}

/* Answers B's operation @p op_id (chan.c numbers a channel's PUTs and GETs
 * from 0) with @p status in the next packet, acknowledging @p ack (NULL:
 * everything B sent). */
static void answer(uint32_t op_id, int32_t status, const uint32_t *ack, const unsigned *moved)
{
    pkt_t p;
    pkt_begin(&p);
    sx_wire_frame_t f = {.kind = SX_FRAME_RMA_RESP,
                         .flags = SX_FRAMEF_LAST,
                         .resp = {.op_id = op_id, .status = status}};
    p.len += sx_wire_write_frame(p.buf + p.len, &f);
    send_at_ack(&p, fx.next_seq++, ack, moved);
}

/*
 * A PUT completes when the target answers, and its memory is the caller's
 * again; a PUT of 1 KiB or more is sent from that memory (zero copy). An
 * answer before the ACK of the PUT's data (a faulty or forging peer; the
 * same order inside B when the ACK of the answer's packet is held while
 * its frames are handed up) must not leave packets pointing into memory
 * the completion handed back: they are copied out first (resp_early),
 * and the retransmission that follows sends the copy. The completion
 * frees the buffer, so under ASan a retransmission from it fails the
 * test. Then answers with statuses no target sends complete SX_ERR_PROTO
 * (resp_bad_status), not with what the wire said.
 */
static void test_rma_answers_from_the_wire(void **state)
{
    (void)state;
    const size_t len = 4096;
    uint8_t *src = malloc(len);
    assert_non_null(src);
    for (size_t i = 0; i < len; i++)
        src[i] = pattern(i);
    rma_done_t put_done = {.free_me = src};
    uint64_t sent = b_stat("data_sent"), copied = b_stat("copy_tx_bytes");
    assert_int_equal(sx_put(fx.b_to_a, src, len, 0x10000, 7, on_rma_done, &put_done),
                     SX_INPROGRESS);
    b_until_above("data_sent", sent);
    /* The answer acknowledges everything but the PUT's packet. */
    uint32_t ack = B_SEQ + (uint32_t)b_stat("data_sent") - 1;
    uint64_t rtx = b_stat("rtx_bytes");
    answer(0, SX_OK, &ack, (const unsigned[]){C_RESP_EARLY, 1, C_N});
    assert_int_equal(put_done.calls, 1);
    assert_int_equal(put_done.status, SX_OK);
    assert_true(b_stat("copy_tx_bytes") - copied >= len); /* copied, not pointed at */
    b_until_above("rtx_bytes", rtx); /* resent after its timeout, from the copy */
    assert_int_equal(put_done.calls, 1);

    /* GETs answered with statuses from the wire. */
    uint8_t dst[16];
    rma_done_t get_done[3] = {{0}};
    const int32_t wire[3] = {-123456, SX_ERR_AGAIN, SX_ERR_ACCESS};
    const int want[3] = {SX_ERR_PROTO, SX_ERR_PROTO, SX_ERR_ACCESS};
    for (uint32_t i = 0; i < 3; i++) {
        sent = b_stat("data_sent");
        assert_int_equal(sx_get(fx.b_to_a, dst, sizeof(dst), 0x10000, 7, on_rma_done, &get_done[i]),
                         SX_INPROGRESS);
        b_until_above("data_sent", sent);
        const unsigned bad[] = {C_RESP_BAD_STATUS, 1, C_N};
        answer(1 + i, wire[i], NULL, want[i] == SX_ERR_PROTO ? bad : NONE);
        assert_int_equal(get_done[i].calls, 1);
        assert_int_equal(get_done[i].status, want[i]);
    }
    assert_int_equal(counter(C_CHAN_FAILURES), 0);
}

static void test_sequence_numbers(void **state)
{
    (void)state;
    pkt_t p;

    /* Already delivered: the last sequence number, and one 2^31 - 1 back. */
    pkt_one(&p, SX_FRAME_AM, SX_FRAMEF_LAST, 8, 0, 8);
    send_at(&p, fx.next_seq - 1, DUP);
    send_at(&p, fx.next_seq - 0x7fffffffu, DUP);
    /* Beyond the receive window (the default WINDOW, 4096 packets): its
     * first number past the end, further, and half the sequence space
     * ahead. */
    send_at(&p, fx.next_seq + 4096, OOW);
    send_at(&p, fx.next_seq + 5000, OOW);
    send_at(&p, fx.next_seq + 0x80000000u, OOW);
    /* Ahead but inside the window: kept aside, and its copy is a duplicate.
     * Filling the gap delivers it exactly once. */
    send_at(&p, fx.next_seq + 3, KEPT);
    send_at(&p, fx.next_seq + 3, DUP);
    pkt_begin(&p);
    send_next(&p, NONE);
    send_next(&p, NONE);
    send_next(&p, ONE); /* fills the gap: the kept packet goes up with it */
    fx.next_seq++;
    /* An ACK-only packet acknowledging data B never sent. */
    sx_wire_hdr_t h = pkt_hdr(&p, 0);
    h.type = SX_PKT_ACK;
    h.ack += 1000;
    sx_wire_write_hdr(p.buf, &h, NULL);
    snap_t before = take_snap();
    send_raw(p.buf, SX_WIRE_HDR_LEN);
    expect(&before, 1, ACK_UNSENT);
    /* The same ACK on a data packet: its message is delivered, the ACK
     * ignored, and nothing counts as dropped (an issue-25 forgery poisoned
     * a lane this way: its packets' data was taken while each was counted
     * drop_out_of_window). */
    pkt_one(&p, SX_FRAME_AM, SX_FRAMEF_LAST, 8, 0, 8);
    h = pkt_hdr(&p, fx.next_seq);
    h.ack += 1000;
    pkt_seal(&p, &h);
    before = take_snap();
    send_raw(p.buf, p.len);
    expect(&before, 1, (const unsigned[]){C_DELIVERED, 1, C_ACK_UNSENT, 1, C_N});
    fx.next_seq++;
}

/* Fragments (SX_PKTF_FRAG) of the packet @p p, cut into slices of
 * @p stride bytes: sends fragment @p index of them as packet @p seq, and
 * checks that only the counters in @p moved moved. @p count and @p offset
 * override the header's (0: what the cut says), to lie. */
static void send_frag(const pkt_t *p, uint32_t seq, unsigned stride, unsigned index, unsigned count,
                      unsigned offset, const unsigned *moved)
{
    size_t total = p->len - SX_WIRE_HDR_LEN;
    size_t real_off = (size_t)index * stride;
    size_t len = total - real_off < stride ? total - real_off : stride;
    sx_wire_frag_t f = {.index = (uint16_t)index,
                        .count = (uint16_t)(count ? count : (total + stride - 1) / stride),
                        .offset = (uint16_t)(offset ? offset : real_off),
                        .total = (uint16_t)total};
    pkt_t q;
    pkt_begin(&q);
    sx_wire_write_frag(q.buf + SX_WIRE_HDR_LEN, &f);
    memcpy(q.buf + SX_WIRE_HDR_LEN + SX_WIRE_FRAG_LEN, p->buf + SX_WIRE_HDR_LEN + real_off, len);
    q.len = SX_WIRE_HDR_LEN + SX_WIRE_FRAG_LEN + len;
    snap_t before = take_snap();
    sx_wire_hdr_t h = pkt_hdr(&q, seq);
    h.flags |= SX_PKTF_FRAG;
    pkt_seal(&q, &h);
    send_raw(q.buf, q.len);
    expect(&before, 1, moved);
}

static void test_fragments(void **state)
{
    (void)state;
    static const unsigned FRAG[] = {SX_DROP_FRAGMENT, 1, C_N};
    pkt_t p;

    /* One message of 1000 bytes (1008 of payload): 3 fragments of 400,
     * 400 and 208 bytes, out of order; delivered once, when whole. */
    pkt_one(&p, SX_FRAME_AM, SX_FRAMEF_LAST, 1000, 0, 1000);
    uint32_t seq = fx.next_seq++;
    send_frag(&p, seq, 400, 2, 0, 0, NONE);
    send_frag(&p, seq, 400, 0, 0, 0, NONE);
    send_frag(&p, seq, 400, 0, 0, 0, DUP); /* the same piece again */
    send_frag(&p, seq, 400, 1, 0, 0, ONE);
    assert_int_equal(fx.last_len, 1000);
    /* A piece of it again, now that it was delivered. */
    send_frag(&p, seq, 400, 1, 0, 0, DUP);

    /* Fragment headers that lie about the cut: a count that does not
     * match the stride, an offset that is not index x stride. */
    seq = fx.next_seq;
    send_frag(&p, seq, 400, 0, 1, 0, FRAG);
    send_frag(&p, seq, 400, 1, 2, 0, FRAG);
    send_frag(&p, seq, 400, 1, 0, 401, FRAG);
    send_frag(&p, seq, 400, 2, 0, 808, FRAG);
    /* Cut once at 400, then again at 600 (a sender that stepped down in
     * between would, the other way round): the piece of the old cut is
     * given up and counted, the new cut completes the packet. */
    send_frag(&p, seq, 400, 0, 0, 0, NONE);
    send_frag(&p, seq, 600, 1, 0, 0, FRAG);
    send_frag(&p, seq, 600, 0, 0, 0, ONE);
    fx.next_seq++;

    /* Outside the receive window. */
    send_frag(&p, fx.next_seq + 4096, 400, 0, 0, 0, OOW);
    /* Pieces of five packets ahead (N is the next expected): the channel
     * keeps four in reassembly, and the fifth takes the slot touched
     * longest ago, N + 1's, whose piece is counted. The others complete
     * and are kept aside, whole, ahead of the gap; N and N + 1 (whole,
     * this time) fill it, and all five messages go up in order. */
    uint32_t n = fx.next_seq;
    for (unsigned k = 1; k <= 4; k++)
        send_frag(&p, n + k, 400, 0, 0, 0, NONE);
    send_frag(&p, n + 5, 400, 0, 0, 0, FRAG);
    for (unsigned k = 2; k <= 5; k++) {
        send_frag(&p, n + k, 400, 1, 0, 0, NONE);
        send_frag(&p, n + k, 400, 2, 0, 0, KEPT);
    }
    static const unsigned FIVE[] = {C_DELIVERED, 5, C_N};
    pkt_t empty;
    pkt_begin(&empty);
    send_next(&empty, NONE);
    send_next(&p, FIVE);
    fx.next_seq = n + 6;
    assert_int_equal(fx.last_len, 1000);
}

/* After all that, the channel from A still works: real traffic from A is
 * delivered exactly once. */
/* A one-message packet with the sequence number B expects, its header
 * written, its tag after it under @p auth (NULL: no tag, no flag); the
 * datagram's length. */
static size_t tagged_next(pkt_t *p, const sx_auth_t *auth)
{
    pkt_one(p, SX_FRAME_AM, SX_FRAMEF_LAST, 10, 0, 10);
    sx_wire_hdr_t h = pkt_hdr(p, fx.next_seq);
    if (auth != NULL)
        h.flags |= SX_PKTF_AUTH;
    pkt_seal(p, &h);
    if (auth == NULL)
        return p->len;
    sx_auth_seal(auth, p->buf, p->len, NULL, 0, p->buf + p->len);
    return p->len + SX_AUTH_TAG_LEN;
}

/*
 * What a forger without the key can send (issue 25, item 2), each a
 * message B would take if it were genuine: no tag; a tag under another
 * key; a tagged datagram altered, its CRC and header checksum made good
 * again; and a replay of a genuine datagram (the sequence numbers under
 * the tag see to that). Without a key B drops a tagged datagram: it
 * cannot check it.
 */
static void test_authentication(void **state)
{
    (void)state;
    static const unsigned AUTH[] = {SX_DROP_AUTH, 1, C_N};
    pkt_t p;
    snap_t before;
    size_t len;

    if (g_auth_hex == NULL) {
        sx_auth_t any = {0};
        static const uint8_t key[SX_AUTH_KEY_LEN] = {1, 2, 3};
        sx_auth_set_key(&any, key);
        len = tagged_next(&p, &any);
        before = take_snap();
        send_bytes(p.buf, len);
        expect(&before, 1, AUTH);
        return;
    }
    len = tagged_next(&p, NULL);
    before = take_snap();
    send_bytes(p.buf, len);
    expect(&before, 1, AUTH);

    sx_auth_t other = {0};
    static const uint8_t other_key[SX_AUTH_KEY_LEN] = {0xee};
    sx_auth_set_key(&other, other_key);
    len = tagged_next(&p, &other);
    before = take_snap();
    send_bytes(p.buf, len);
    expect(&before, 1, AUTH);

    len = tagged_next(&p, &g_auth);
    p.buf[len - SX_AUTH_TAG_LEN - 1] ^= 0x01; /* the message's last byte */
    uint32_t crc = sx_crc32c(0, p.buf + SX_WIRE_HDR_LEN, p.len - SX_WIRE_HDR_LEN);
    for (int i = 0; i < 4; i++)
        p.buf[44 + i] = (uint8_t)(crc >> (8 * i));
    p.buf[42] = p.buf[43] = 0;
    uint16_t c = sx_wire_csum16(p.buf, SX_WIRE_HDR_LEN);
    p.buf[42] = (uint8_t)c;
    p.buf[43] = (uint8_t)(c >> 8);
    before = take_snap();
    send_bytes(p.buf, len);
    expect(&before, 1, AUTH);

    /* A genuine one is delivered; the same bytes again are a duplicate. */
    len = tagged_next(&p, &g_auth);
    fx.next_seq++;
    before = take_snap();
    send_bytes(p.buf, len);
    expect(&before, 1, ONE);
    before = take_snap();
    send_bytes(p.buf, len);
    expect(&before, 1, DUP);
}

static void test_channel_still_works(void **state)
{
    (void)state;
    uint8_t msg[300];
    pkt_t p;

    /* Bring B's expectation to where A's channel starts. */
    assert_true((uint32_t)(B_SEQ + SEQ_GAP - fx.next_seq) < SEQ_GAP);
    while (fx.next_seq != (uint32_t)(B_SEQ + SEQ_GAP)) {
        pkt_begin(&p);
        send_next(&p, NONE);
    }
    uint64_t delivered = fx.delivered;
    for (size_t i = 0; i < sizeof(msg); i++)
        msg[i] = pattern(i);
    struct iovec iov = {msg, sizeof(msg)};
    assert_int_equal(sx_send(fx.a_to_b, TAG, &iov, 1, on_done, &fx), SX_INPROGRESS);
    assert_true(am_progress_until(fx.a, fx.b, &fx.completions, 1));
    assert_int_equal(fx.completion_errors, 0);
    assert_int_equal(fx.delivered, delivered + 1);
    assert_int_equal(fx.last_len, sizeof(msg));
    for (int i = 0; i < 1000; i++) {
        sx_progress(fx.a);
        sx_progress(fx.b);
    }
    assert_int_equal(fx.delivered, delivered + 1);
    assert_int_equal(fx.bad_bytes, 0);
    assert_int_equal(counter(C_CHAN_FAILURES), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_headers),
        cmocka_unit_test(test_bad_addressing),
        cmocka_unit_test(test_valid_crafted_message),
        cmocka_unit_test(test_malformed_frames),
        cmocka_unit_test(test_bad_chunks),
        cmocka_unit_test(test_rma_puts),
        cmocka_unit_test(test_rma_gets_and_responses),
        cmocka_unit_test(test_rma_answers_from_the_wire),
        cmocka_unit_test(test_sequence_numbers),
        cmocka_unit_test(test_fragments),
        cmocka_unit_test(test_authentication),
        cmocka_unit_test(test_channel_still_works),
    };
    sx_test_filter_from_env();
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
