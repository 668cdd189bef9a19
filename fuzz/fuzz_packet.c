/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * libFuzzer target for the packet parser and the receive path behind it
 * (DESIGN.md section 7). Run it with scripts/fuzz.sh.
 *
 * The first byte of an input selects the mode:
 *
 *   even: parser only. The rest is one datagram, fed to
 *         sx_wire_parse_packet; if accepted, a fragment's header is read
 *         with sx_wire_parse_frag and every frame is walked with
 *         sx_wire_next_frame, every byte of their data read, so ASan
 *         reports any slice or frame that points outside the datagram.
 *
 *   odd:  a live engine's receive path. The rest is a list of records,
 *         each [u8 ctl][u16 len, little-endian][len bytes] (a short last
 *         record takes what is left). A record is either a send (ctl bit
 *         7: the engine sends len % 4097 bytes to the fake peer, so that
 *         fuzzed ACKs have something to acknowledge; the first 8 sends of
 *         an input count) or a datagram handed to sx_shard_recv_locked on
 *         shard 0, as if it had arrived from the network. Garbage rarely passes the header
 * checksum, the epochs and the payload CRC, so ctl bits ask the harness to make those parts right
 * and let the fuzzer spend its effort on the channel behind them: bit 0  version 1, addressed to
 * this engine's shard 0 from the fake peer (its epoch; src_shard kept if below 4) bit 1 payload_len
 * matches the datagram; unknown flags cleared bit 2  seq is relative: the channel's rcv_nxt +
 * (int8)seq bit 3  ack is relative: the channel's snd_una + (int8)ack bit 4  the payload CRC is
 * recomputed (when SX_PKTF_CRC is set) and, when any of them is set, the header checksum is
 * recomputed.
 *
 * The engine is created once, before the first input. Every engine-mode
 * input ends by destroying the channels to the fake peer, so the next one
 * starts afresh: an input is a self-contained scenario (several packets:
 * chunked messages, reordering, duplicates, ACKs) and a crash reproduces
 * from the input alone.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <shardx.h>

#include "common/le.h"
#include "cpc/cpc.h"
#include "engine/engine.h"
#include "shard/chan.h"
#include "shard/peer.h"
#include "shard/shard.h"
#include "shard/wire.h"
#include "common/crc32c.h"

#define FAKE_EPOCH  0x5a46555a5a455246ull /* any fixed non-zero value */
#define FAKE_SHARDS 2
#define SEND_MAX    4096 /* bytes of one send record */
#define SENDS_MAX   8    /* send records honoured per input */
#define CTL_ADDRESS 0x01
#define CTL_LENGTH  0x02
#define CTL_SEQ     0x04
#define CTL_ACK     0x08
#define CTL_CRC     0x10
#define CTL_RMA     0x20
#define CTL_REPAIRS 0x3f /* the bits above */
#define REGION_LEN  4096
#define CTL_SEND    0x80

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static sx_engine_h engine;
static sx_shard_t *shard0;
static sx_peer_h fake;
static uint8_t send_buf[SEND_MAX];
static uint8_t get_buf[SEND_MAX];
static uint8_t *region; /* registered for remote reads and writes */
static uint64_t region_key;
static volatile uint8_t sink; /* keeps the byte reads from being optimized away */

static void touch(const uint8_t *p, size_t len)
{
    uint8_t x = 0;
    for (size_t i = 0; i < len; i++)
        x ^= p[i];
    sink ^= x;
}

static void on_am(void *arg, uint64_t peer_id, uint8_t tag, const void *data, size_t len)
{
    (void)arg;
    (void)peer_id;
    (void)tag;
    touch(data, len);
}

static void die(const char *what, int rc)
{
    fprintf(stderr, "fuzz_packet: %s: %s\n", what, sx_strerror(rc));
    abort();
}

/*
 * One engine for the whole run, with a peer whose card the harness made
 * up: its epoch is FAKE_EPOCH and its shards' addresses are a socket that
 * nobody reads, so what the engine sends it (ACKs, data) goes nowhere.
 */
static void engine_init(void)
{
    /* SERVICE_US=0: no service thread (src/engine/service.c), which would
     * take the shard's token while the harness, never calling
     * sx_progress, feeds it packets as its token holder. */
    const sx_config_kv_t kv[] = {
        {"SHARDS", "1"},  {"LOG_LEVEL", "error"},  {"MAX_MSG_SIZE", "64k"}, {"ACK_DELAY_US", "0"},
        {"WINDOW", "64"}, {"HOTEL_ROOMS", "1024"}, {"SERVICE_US", "0"},
    };
    sx_engine_params_t params = {.field_mask = SX_ENGINE_PARAM_CONFIG,
                                 .config = kv,
                                 .config_count = sizeof(kv) / sizeof(kv[0])};
    int rc = sx_engine_create(&params, &engine);
    if (rc != SX_OK)
        die("sx_engine_create", rc);
    if ((rc = sx_thread_bind(engine, 0)) != SX_OK)
        die("sx_thread_bind", rc);
    shard0 = engine->shards[0];

    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t salen = sizeof(sa);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &salen) != 0)
        die("dummy socket", SX_ERR_IO);
    /* The socket stays open (and unread) for the life of the process. */

    /* Card version 4 (src/engine/card.c): the addresses, the connection
     * methods offered (implicit only, so data packets reach the channel
     * without a handshake; the exchange's messages reach
     * sx_conn_recv_reset_locked and the implicit channel's refusal), the
     * network transport's name and variant (udp, none), and no
     * authentication. */
    uint8_t card[16 + FAKE_SHARDS * 9 + 4 + 5 + 1];
    uint16_t port = ntohs(sa.sin_port);
    memcpy(card, "SXC1", 4);
    card[4] = 4;
    card[5] = 0;
    card[6] = FAKE_SHARDS;
    card[7] = 0;
    for (int i = 0; i < 8; i++)
        card[8 + i] = (uint8_t)(FAKE_EPOCH >> (8 * i));
    for (int s = 0; s < FAKE_SHARDS; s++) {
        uint8_t *a = card + 16 + s * 9;
        a[0] = 8;
        a[1] = 4;
        a[2] = 0;
        a[3] = (uint8_t)(port & 0xff);
        a[4] = (uint8_t)(port >> 8);
        memcpy(a + 5, &sa.sin_addr.s_addr, 4);
    }
    uint8_t *offers = card + 16 + FAKE_SHARDS * 9;
    offers[0] = 1;               /* one method */
    offers[1] = SX_CPC_IMPLICIT; /* id */
    offers[2] = 50;              /* priority */
    offers[3] = 0;               /* no blob */
    uint8_t *names = offers + 4;
    names[0] = 3; /* the transport's name */
    memcpy(names + 1, "udp", 3);
    names[4] = 0; /* its variant: none */
    names[5] = 0; /* authentication: none */
    if ((rc = sx_peer_add(engine, 1, card, sizeof(card), &fake)) != SX_OK)
        die("sx_peer_add", rc);
    /* On the heap, so ASan's redzones bracket it exactly. */
    region = calloc(1, REGION_LEN);
    sx_mem_h mem;
    if (region == NULL)
        die("calloc", SX_ERR_NO_MEMORY);
    rc =
        sx_mem_register(engine, region, REGION_LEN, SX_MEM_REMOTE_READ | SX_MEM_REMOTE_WRITE, &mem);
    if (rc != SX_OK)
        die("sx_mem_register", rc);
    region_key = sx_mem_rkey(mem);
    /* Handlers on even tags only, so odd tags take the no-handler path. */
    for (unsigned t = 0; t < 256; t += 2) {
        if ((rc = sx_am_register(engine, (uint8_t)t, on_am, NULL)) != SX_OK)
            die("sx_am_register", rc);
    }
}

static void take_token(void)
{
    if (!sx_token_try_acquire(&shard0->token))
        abort(); /* single-threaded: the token is always free here */
}

static void drop_token(void)
{
    /* Also flushes the channels, which sends what the input provoked. */
    (void)sx_delegate_leave_locked(&shard0->token, &shard0->inbox, shard0);
}

/* Destroys the channels to the fake peer, so the next input starts afresh. */
static void reset_channels(void)
{
    take_token();
    for (unsigned lane = 0; lane < FAKE_SHARDS; lane++) {
        sx_chan_t *c = fake->chans[lane];
        if (c != NULL)
            sx_chan_destroy_locked(c, SX_ERR_CANCELED);
    }
    /* Destroying failed the peer; a real peer stays failed, this one is
     * revived so that sends work again. */
    atomic_store(&fake->failed, 0);
    atomic_store(&fake->error_reported, false);
    drop_token();
}

static inline uint64_t near_region(uint64_t v)
{
    return (uint64_t)(uintptr_t)region + (uint64_t)(int64_t)(int16_t)v;
}

/* Points the RMA frames of a payload at the registered region, or at the
 * operations @p c is waiting on (see CTL_RMA above). */
static void repair_rma(const sx_chan_t *c, uint8_t *payload, size_t len)
{
    size_t off = 0, start = 0;
    sx_wire_frame_t f;

    while (sx_wire_next_frame(payload, len, &off, &f) == 1) {
        uint8_t *ext = payload + start + SX_WIRE_FRAME_LEN;
        if (f.kind == SX_FRAME_PUT || f.kind == SX_FRAME_GET_REQ) {
            sx_put64(ext, near_region(f.rma.addr));
            sx_put64(ext + 8, region_key);
            sx_put64(ext + 16, near_region(f.rma.op_addr));
            sx_put64(ext + 24, (uint64_t)(int64_t)(int16_t)f.rma.op_len);
        } else if (f.kind == SX_FRAME_RMA_RESP) {
            uint32_t base = (c != NULL && c->rmaq != NULL) ? c->rmaq->op_id : 0;
            sx_put32(ext, base + (uint32_t)(int32_t)(int8_t)f.resp.op_id);
        } else if (f.kind == SX_FRAME_AM_REFUSE) {
            /* A refusal near a message the engine sent (its first frame). */
            uint32_t base = (c != NULL && c->ackq != NULL) ? c->ackq->first_seq : 0;
            sx_put32(ext, base + (uint32_t)(int32_t)(int8_t)f.refuse.seq);
        }
        start = off;
    }
}

/* Applies the repairs that @p ctl asks for to the datagram in @p pkt. */
static void repair(uint8_t ctl, uint8_t *pkt, size_t len)
{
    if (len < SX_WIRE_HDR_LEN || (ctl & CTL_REPAIRS) == 0)
        return;
    unsigned lane = pkt[4] < 4 ? pkt[4] : 0;
    if (ctl & CTL_ADDRESS) {
        pkt[0] = SX_WIRE_VERSION;
        sx_put16(pkt + 4, (uint16_t)lane);
        sx_put16(pkt + 6, 0);
        sx_put64(pkt + 8, FAKE_EPOCH);
        sx_put64(pkt + 16, engine->env.epoch);
    }
    if (ctl & CTL_LENGTH) {
        sx_put16(pkt + 2, (uint16_t)((pkt[2] | pkt[3] << 8) & SX_PKTF_KNOWN));
        sx_put16(pkt + 40, (uint16_t)(len - SX_WIRE_HDR_LEN));
    }
    /* The channel this packet will reach, if it exists yet; a new one
     * starts at the shard's seq_start on both sides. */
    sx_chan_t *c = lane < FAKE_SHARDS ? fake->chans[lane] : NULL;
    if (ctl & CTL_SEQ) {
        uint32_t base = c != NULL ? c->rcv_nxt : shard0->seq_start;
        sx_put32(pkt + 24, base + (uint32_t)(int32_t)(int8_t)pkt[24]);
    }
    if (ctl & CTL_ACK) {
        uint32_t base = c != NULL ? c->snd_una : shard0->seq_start;
        sx_put32(pkt + 28, base + (uint32_t)(int32_t)(int8_t)pkt[28]);
    }
    if (ctl & CTL_RMA)
        repair_rma(c, pkt + SX_WIRE_HDR_LEN, len - SX_WIRE_HDR_LEN);
    if ((ctl & CTL_CRC) && (pkt[2] & SX_PKTF_CRC)) {
        size_t plen = len - SX_WIRE_HDR_LEN;
        sx_put32(pkt + 44, sx_crc32c(0, pkt + SX_WIRE_HDR_LEN, plen));
    }
    sx_put16(pkt + 42, 0);
    sx_put16(pkt + 42, sx_wire_csum16(pkt, SX_WIRE_HDR_LEN));
}

static void run_parser(const uint8_t *data, size_t size)
{
    sx_wire_hdr_t h;
    sx_wire_rma_t r;
    uint64_t epoch, resp_off;
    uint16_t lane;
    uint32_t op_id;

    /* The landing's early looks (src/shard/land.c) read any datagram
     * before it is parsed: within its bytes, whatever they say. */
    (void)sx_wire_peek_put(data, size, &epoch, &lane, &r);
    (void)sx_wire_peek_resp(data, size, &epoch, &lane, &op_id, &resp_off);
    if (sx_wire_parse_packet(data, size, &h) != SX_DROP_NONE)
        return;
    if (h.payload_len != size - SX_WIRE_HDR_LEN)
        abort(); /* the parser accepted a length it should have refused */
    sx_wire_frag_t frag;
    if ((h.flags & SX_PKTF_FRAG) && sx_wire_parse_frag(data, size, &frag)) {
        /* A fragment's slice lies inside the datagram and inside the
         * packet it claims to be part of. */
        if (frag.data + frag.len != data + size || (size_t)frag.offset + frag.len > frag.total)
            abort();
        touch(frag.data, frag.len);
    }
    const uint8_t *payload = data + SX_WIRE_HDR_LEN;
    size_t off = 0, prev = 0;
    sx_wire_frame_t f;
    while (sx_wire_next_frame(payload, h.payload_len, &off, &f) == 1) {
        if (off <= prev || off > h.payload_len)
            abort(); /* no progress, or past the end: a loop or an over-read */
        touch(f.data, f.len);
        prev = off;
    }
}

static void run_engine(const uint8_t *data, size_t size)
{
    unsigned sends = 0;

    while (size > 0) {
        uint8_t ctl = data[0];
        size_t len = size >= 3 ? (size_t)(data[1] | data[2] << 8) : 0;
        size_t hdr = size >= 3 ? 3 : size;
        data += hdr;
        size -= hdr;
        if (ctl & CTL_SEND) {
            /* Sends only give ACKs something to acknowledge; a few short
             * ones do that, while many long ones would spend the fuzzer's
             * time on CRCs and copies of the send path. */
            size_t n = len % (SEND_MAX + 1);
            struct iovec iov = {send_buf, n};
            if (sends++ >= SENDS_MAX)
                continue;
            if (((ctl >> 5) & 3) == 2)
                (void)sx_put(fake, send_buf, n, 0x10000, 7, NULL, NULL);
            else if (((ctl >> 5) & 3) == 3)
                (void)sx_get(fake, get_buf, n, 0x10000, 7, NULL, NULL);
            else
                (void)sx_send(fake, (uint8_t)((ctl & 0x1f) << 1), &iov, 1, NULL, NULL);
            continue;
        }
        if (len > size)
            len = size;
        /* An exact-size copy: the receive path may read only these bytes. */
        uint8_t *pkt = malloc(len ? len : 1);
        if (pkt == NULL)
            abort();
        memcpy(pkt, data, len);
        repair(ctl, pkt, len);
        take_token();
        sx_shard_recv_locked(shard0, pkt, len);
        drop_token();
        free(pkt);
        data += len;
        size -= len;
    }
    /* Freeing everything the input allocated also keeps libFuzzer from
     * suspecting a leak after every input (it compares malloc and free
     * counts, and runs a costly leak check when they differ). */
    reset_channels();
}

/* Engine creation runs here rather than in the first input, so that the
 * string compares of topology discovery do not end up in the fuzzer's
 * dictionary and the first input is not charged for them. */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    engine_init();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    if ((data[0] & 1) == 0) {
        /* An exact-size copy, also when the datagram is empty. */
        uint8_t *copy = malloc(size - 1 ? size - 1 : 1);
        if (copy == NULL)
            abort();
        memcpy(copy, data + 1, size - 1);
        run_parser(copy, size - 1);
        free(copy);
        return 0;
    }
    run_engine(data + 1, size - 1);
    return 0;
}
