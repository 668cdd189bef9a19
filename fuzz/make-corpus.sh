#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Regenerates the seed corpus in fuzz/corpus/: a few well-formed packets
# and engine scenarios (chunked messages, reordering, duplicates, ACKs and
# SACKs for messages the engine sent), so the fuzzer starts from inputs
# that pass the checksums instead of rediscovering the format. The input
# format is described at the top of fuzz/fuzz_packet.c; the generator is a
# small C program that uses the library's own wire encoder.
#
#   fuzz/make-corpus.sh        (CC defaults to cc, BUILD to build)
set -eu

cd "$(dirname "$0")/.."
cc=${CC:-cc}
# The configured build whose generated headers (and, for the card seeds,
# whose library) the generators use; make test or make build makes it.
build=${BUILD:-build}
[ -f "$build/generated/build_config.h" ] || {
    echo "make-corpus.sh: no $build/generated/build_config.h; run make build first" >&2
    exit 1
}
isal=""
grep -q 'SX_HAVE_ISAL *1' "$build/generated/build_config.h" && isal="-lisal"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cat >"$tmp/gen.c" <<'EOF'
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/crc32c.h"
#include "shard/wire.h"

/* Record control bits, as in fuzz_packet.c. */
#define REPAIR_ALL 0x1f /* address, length, relative seq and ack, CRC */
#define CTL_RMA    0x20 /* RMA frames aimed at the harness's region */
#define CTL_SEND   0x80

static const char *dir;
static unsigned char buf[8192];
static size_t len;

static void begin(unsigned char mode)
{
    buf[0] = mode;
    len = 1;
}

static void save(const char *name)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(buf, 1, len, f) != len || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}

/* A packet: header (epochs left 0: the harness fills them in), then the
 * frames in @p frames (n of them, each with len bytes of data). */
static size_t packet(unsigned char *out, unsigned char type, unsigned seq, unsigned ack,
                     unsigned long long sack, const sx_wire_frame_t *frames, int n)
{
    size_t off = SX_WIRE_HDR_LEN;
    for (int i = 0; i < n; i++) {
        off += sx_wire_write_frame(out + off, &frames[i]);
        for (unsigned k = 0; k < frames[i].len; k++)
            out[off++] = (unsigned char)(k * 7 + i);
    }
    sx_wire_hdr_t h = {.type = type,
                       .flags = SX_PKTF_ACK,
                       .seq = seq,
                       .ack = ack,
                       .sack = sack,
                       .payload_len = (unsigned short)(off - SX_WIRE_HDR_LEN)};
    unsigned crc = sx_crc32c(0, out + SX_WIRE_HDR_LEN, off - SX_WIRE_HDR_LEN);
    sx_wire_write_hdr(out, &h, off > SX_WIRE_HDR_LEN ? &crc : NULL);
    return off;
}

/* Appends an engine-mode record holding a datagram. */
static void record(unsigned char ctl, unsigned char type, unsigned seq, unsigned ack,
                   unsigned long long sack, const sx_wire_frame_t *frames, int n)
{
    size_t plen = packet(buf + len + 3, type, seq, ack, sack, frames, n);
    buf[len] = ctl;
    buf[len + 1] = (unsigned char)plen;
    buf[len + 2] = (unsigned char)(plen >> 8);
    len += 3 + plen;
}

/* Appends a send record: the engine sends @p bytes to the fake peer, as
 * an active message (kind 0), a PUT (2) or a GET (3). */
static void send_record(unsigned char kind, unsigned bytes)
{
    buf[len] = (unsigned char)(CTL_SEND | kind << 5 | 1);
    buf[len + 1] = (unsigned char)bytes;
    buf[len + 2] = (unsigned char)(bytes >> 8);
    len += 3;
}

#define F(...) ((sx_wire_frame_t){__VA_ARGS__})

int main(int argc, char **argv)
{
    if (argc != 2)
        return 2;
    dir = argv[1];
    const sx_wire_frame_t am = F(.kind = SX_FRAME_AM, .tag = 2, .flags = SX_FRAMEF_LAST, .len = 16);

    /* Parser mode. */
    begin(0);
    len += packet(buf + len, SX_PKT_DATA, 1, 0, 0, &am, 1);
    save("parse-am");
    begin(0);
    const sx_wire_frame_t all[] = {
        am,
        F(.kind = SX_FRAME_AM_FIRST, .tag = 4, .len = 10, .total = 30),
        F(.kind = SX_FRAME_AM_MORE, .tag = 4, .flags = SX_FRAMEF_LAST, .len = 20),
        F(.kind = SX_FRAME_PUT, .len = 8,
          .rma = {.addr = 64, .key = 1, .op_addr = 64, .op_len = 8}),
        F(.kind = SX_FRAME_GET_REQ, .rma = {.addr = 64, .key = 1, .op_addr = 64, .op_len = 8}),
        F(.kind = SX_FRAME_RMA_RESP, .flags = SX_FRAMEF_LAST, .len = 8, .resp = {.op_id = 1}),
        F(.kind = SX_FRAME_AM_REFUSE, .refuse = {.seq = 7, .frame = 1, .status = -4}),
    };
    len += packet(buf + len, SX_PKT_DATA, 2, 0, 0, all, 7);
    save("parse-all-kinds");
    begin(0);
    len += packet(buf + len, SX_PKT_ACK, 0, 5, 0x5, NULL, 0);
    save("parse-ack");
    begin(0);
    len += packet(buf + len, SX_PKT_DATA, 3, 0, 0, NULL, 0);
    save("parse-empty");

    /* Engine mode: one message, with and without a handler for its tag. */
    begin(1);
    record(REPAIR_ALL, SX_PKT_DATA, 0, 0, 0, &am, 1);
    save("engine-am");
    begin(1);
    const sx_wire_frame_t odd = F(.kind = SX_FRAME_AM, .tag = 3, .flags = SX_FRAMEF_LAST, .len = 4);
    record(REPAIR_ALL, SX_PKT_DATA, 0, 0, 0, &odd, 1);
    save("engine-no-handler");
    /* A chunked message over two packets, then one too large. */
    begin(1);
    record(REPAIR_ALL, SX_PKT_DATA, 0, 0, 0, &all[1], 1);
    record(REPAIR_ALL, SX_PKT_DATA, 0, 0, 0, &all[2], 1);
    const sx_wire_frame_t big = F(.kind = SX_FRAME_AM_FIRST, .tag = 2, .len = 8, .total = 1 << 20);
    record(REPAIR_ALL, SX_PKT_DATA, 0, 0, 0, &big, 1);
    save("engine-chunks");
    /* Reordering: +2 and +1 are kept aside until +0 arrives; then a copy
     * of an old one (absolute seq 0: repair without the seq bit). */
    begin(1);
    record(REPAIR_ALL, SX_PKT_DATA, 2, 0, 0, &am, 1);
    record(REPAIR_ALL, SX_PKT_DATA, 1, 0, 0, &am, 1);
    record(REPAIR_ALL, SX_PKT_DATA, 0, 0, 0, &am, 1);
    record(REPAIR_ALL & ~0x04, SX_PKT_DATA, 0, 0, 0, &am, 1);
    save("engine-reorder");
    /* Sends, then ACKs: duplicate ACKs with a SACK bit (fast retransmit),
     * then a cumulative ACK for all of them. */
    begin(1);
    send_record(0, 100);
    send_record(0, 3000);
    send_record(0, 4000);
    for (int i = 0; i < 3; i++)
        record(REPAIR_ALL, SX_PKT_ACK, 0, 0, 0x2, NULL, 0);
    record(REPAIR_ALL, SX_PKT_ACK, 0, 3, 0, NULL, 0);
    save("engine-send-ack");
    /* Malformed frames behind a good header, and a raw unrepaired packet. */
    begin(1);
    const sx_wire_frame_t lie = F(.kind = SX_FRAME_AM, .tag = 2, .len = 4);
    size_t at = len;
    record(REPAIR_ALL, SX_PKT_DATA, 0, 0, 0, &lie, 1);
    buf[at + 3 + SX_WIRE_HDR_LEN + 4] = 0xff; /* frame len now past the payload */
    const sx_wire_frame_t more = F(.kind = SX_FRAME_AM_MORE, .tag = 2, .flags = 1, .len = 4);
    record(REPAIR_ALL, SX_PKT_DATA, 0, 0, 0, &more, 1);
    record(0, SX_PKT_DATA, 0, 0, 0, &am, 1);
    save("engine-malformed");
    /* RMA at this engine: a PUT and a GET inside the region, a PUT that
     * starts 8 bytes before it (offsets are int16 around its base). */
    begin(1);
    const sx_wire_frame_t rma[] = {
        F(.kind = SX_FRAME_PUT, .flags = 1, .len = 16,
          .rma = {.addr = 0, .op_addr = 0, .op_len = 16}),
        F(.kind = SX_FRAME_GET_REQ, .flags = 1, .rma = {.addr = 0, .op_addr = 0, .op_len = 32}),
        F(.kind = SX_FRAME_PUT, .flags = 1, .len = 8,
          .rma = {.addr = 0xfff8, .op_addr = 0xfff8, .op_len = 8}),
    };
    for (int i = 0; i < 3; i++)
        record(REPAIR_ALL | CTL_RMA, SX_PKT_DATA, 0, 0, 0, &rma[i], 1);
    save("engine-rma-target");
    /* RMA from this engine: a PUT and a GET, answered by the fuzzer's
     * RMA_RESP frames (op_id relative to the oldest waiting operation),
     * then acknowledged. */
    begin(1);
    send_record(2, 100);
    send_record(3, 64);
    const sx_wire_frame_t resp[] = {
        F(.kind = SX_FRAME_RMA_RESP, .flags = 1, .resp = {.op_id = 0, .status = 0}),
        F(.kind = SX_FRAME_RMA_RESP, .flags = 1, .len = 64, .resp = {.op_id = 0, .offset = 0}),
    };
    record(REPAIR_ALL | CTL_RMA, SX_PKT_DATA, 0, 2, 0, &resp[0], 1);
    record(REPAIR_ALL | CTL_RMA, SX_PKT_DATA, 0, 0, 0, &resp[1], 1);
    save("engine-rma-initiator");
    /* Refusals of messages this engine sent (issue 25): the fake peer
     * refuses the first (no handler) and the second (too large), naming
     * them by their first frame's packet relative to the oldest waiting
     * message (CTL_RMA repairs it), then acknowledges all three; then a
     * refusal of nothing the engine sent. */
    begin(1);
    send_record(0, 100);
    send_record(0, 200);
    send_record(0, 300);
    const sx_wire_frame_t refuse[] = {
        F(.kind = SX_FRAME_AM_REFUSE, .refuse = {.seq = 0, .frame = 0, .status = -4}),
        F(.kind = SX_FRAME_AM_REFUSE, .refuse = {.seq = 1, .frame = 0, .status = -12}),
        F(.kind = SX_FRAME_AM_REFUSE, .refuse = {.seq = 100, .frame = 3, .status = -12}),
    };
    record(REPAIR_ALL | CTL_RMA, SX_PKT_DATA, 0, 0, 0, &refuse[0], 1);
    record(REPAIR_ALL | CTL_RMA, SX_PKT_DATA, 0, 0, 0, &refuse[1], 1);
    record(REPAIR_ALL, SX_PKT_ACK, 0, 3, 0, NULL, 0);
    record(REPAIR_ALL | CTL_RMA, SX_PKT_DATA, 0, 0, 0, &refuse[2], 1);
    save("engine-refusals");
    return 0;
}
EOF

"$cc" -std=c11 -O1 -D_GNU_SOURCE -Isrc -I"$build/generated" -o "$tmp/gen" "$tmp/gen.c" \
    src/shard/wire.c src/common/crc32c.c -lpthread $isal
rm -rf fuzz/corpus
mkdir -p fuzz/corpus
"$tmp/gen" fuzz/corpus
ls -l fuzz/corpus

# The card fuzzer's seeds (fuzz/corpus-card/): real cards of engines of the
# library built in BUILD (default build/): the default (every interface,
# IPv6 ones too where the host has them), one bound to 127.0.0.1, one
# with four shards, and two with SX_AUTH (a given key: its id in the
# card; job: the key itself, as rank 0's card carries it).
cat >"$tmp/card.c" <<'EOF'
#include <stdio.h>
#include <stdlib.h>

#include <shardx.h>

int main(int argc, char **argv)
{
    sx_engine_h e;
    uint8_t card[65536];
    size_t len = sizeof(card);
    sx_config_kv_t kv[] = {{"SERVICE_US", "0"}, {"SHARDS", argc > 2 ? argv[2] : "1"}};
    sx_engine_params_t p = {.field_mask = SX_ENGINE_PARAM_CONFIG, .config = kv, .config_count = 2};
    if (sx_engine_create(&p, &e) != SX_OK || sx_engine_address(e, card, &len) != SX_OK)
        return 1;
    FILE *f = fopen(argv[1], "wb");
    if (f == NULL || fwrite(card, 1, len, f) != len || fclose(f) != 0)
        return 1;
    sx_engine_destroy(e);
    return 0;
}
EOF
"$cc" -std=c11 -O1 -Iinclude -o "$tmp/card" "$tmp/card.c" -L"$build" -lshardx -Wl,-rpath,"$(cd "$build" && pwd)"
rm -rf fuzz/corpus-card
mkdir -p fuzz/corpus-card
"$tmp/card" fuzz/corpus-card/default 1
SX_BIND_ADDR=127.0.0.1 "$tmp/card" fuzz/corpus-card/bound-ipv4 1
"$tmp/card" fuzz/corpus-card/four-shards 4
SX_AUTH=000102030405060708090a0b0c0d0e0f "$tmp/card" fuzz/corpus-card/auth-key 1
SX_AUTH=job "$tmp/card" fuzz/corpus-card/auth-job 1
ls -l fuzz/corpus-card
