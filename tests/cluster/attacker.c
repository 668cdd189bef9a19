/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * attacker: a forger on the network of a live shardx transfer (ctest
 * cluster_attack_*, attack_job.sh; issue 25, item 5). It runs on a third
 * host of the namespace cluster, beside the two ranks of attack_victim,
 * and sends them well-formed forged datagrams at a steady rate until told
 * to stop:
 *
 *   attacker MODE DIR [--rate N] [--if IFACE] [--tag T] [--hijack] [--seconds S]
 *
 * MODE blind (off the path): the attacker sees none of the victims'
 * unicast traffic. It reads what their business cards say, DIR/info.0 and
 * DIR/info.1 (attack_victim.c writes them: epoch, address, each shard's
 * UDP port), and guesses every sequence number.
 *
 * MODE onpath: the attacker sees every datagram. attack_job.sh makes the
 * switch a hub (bridge ageing_time 0: every frame is flooded to every
 * port), and this program reads the frames that reach its host's IFACE
 * (default sx0) through an AF_PACKET socket (every control message and
 * probe, and a random sample of the rest: sniffer_open says why), parses
 * the shardx packet header of each UDP datagram (src/shard/wire.h) and
 * learns from them the victims' addresses, ports, epochs and shard
 * indexes, the newest sequence number of every channel, the ACKs the
 * receiver sends and the nonces of RESET challenges. It reads nothing
 * from DIR but the stop file.
 *
 * What it forges, one datagram of each kind in turn, with correct header
 * checksum and payload CRC (the library's sx_wire_write_hdr, sx_crc32c
 * and sx_ctrl_write), so that they pass the format checks. Blind, the
 * direction alternates (rank 0 to rank 1, then 1 to 0) and the shard
 * indexes are drawn at random; on the path, CONNECT, RESET and DATA go to
 * the receiving end of the busiest channel seen, and the ACKs to its
 * sending end:
 *
 *   connect     CONNECT (src/shard/conn.h) with a guessed initial
 *               sequence number, for a channel that is already up
 *   reset       RESET from a made-up new epoch, naming the other victim's
 *               epoch as restarted; on the path, echoing the nonce of
 *               the newest challenge it saw (reset_echo)
 *   data        DATA with one active-message frame of tag T (default 21,
 *               attack_victim's data tag) at a sequence number inside the
 *               window: guessed (blind: random, or 0..15) or 64 to 2111
 *               ahead of the newest seen
 *   ack_unsent  ACK for data never sent
 *   ack_old     ACK for data acknowledged long ago
 *   ack_sack    ACK with every SACK bit set (on the path, at the newest
 *               cumulative ACK seen)
 *
 * Blind, an ACK's number is a guess, so each of the three ACK kinds is
 * for unsent data or for old data by chance, half each.
 *
 * Each kind goes out alternately from the attacker's own UDP socket and
 * spoofed: from a raw socket (IPPROTO_RAW, so IP_HDRINCL), with the real
 * peer's address and port as its source and a UDP header built here.
 * Datagrams of a victim that authenticates (SX_PKTF_AUTH seen on the
 * path) are forged with the flag and a random tag of SX_WIRE_TAG_LEN
 * bytes, so that only the tag is wrong. --hijack (blind) adds a seventh
 * kind, a CONNECT with an initial sequence number of the attacker's choice
 * followed by DATA at exactly that number, on a channel pair chosen at
 * random, which matters for channels not yet set up (hijack=N counts both
 * datagrams).
 *
 * N forged datagrams a second in all (default 1000), paced on a 5 ms tick.
 * Once ready (sockets open, cards read or sniffer attached) it creates
 * DIR/attacker.ready; it stops when DIR/stop exists (or after S seconds,
 * default 120), and prints what it sent of each kind as
 * `attacker: sent KIND=N (own N, spoofed N)`, the send errors, and on the
 * path what it sniffed. Exit 0 when it ran, 1 when it could not start.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <linux/filter.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/udp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "attack_util.h"
#include "common/crc32c.h"
#include "common/time.h"
#include "cpc/cpc.h"
#include "shard/conn.h"
#include "shard/wire.h"

#define MAX_SHARDS   64
#define MAX_ENGINES  8
#define MAX_FLOWS    64
#define FORGED_MAX   512
#define SNAP_LEN     256
#define SAMPLE       32 /* one data or ACK datagram in SAMPLE is read (a power of two) */
#define DATA_LEN     64 /* bytes of the forged message */
#define WINDOW_GUESS 4096
#define TICK_NS      5000000 /* 5 ms */

enum kind {
    K_CONNECT,
    K_RESET,
    K_DATA,
    K_ACK_UNSENT,
    K_ACK_OLD,
    K_ACK_SACK,
    K_HIJACK,
    K_COUNT,
};
static const char *const kind_names[K_COUNT] = {
    "connect", "reset", "data", "ack_unsent", "ack_old", "ack_sack", "hijack",
};

/* An engine: what its card says, or what the path showed of it. */
typedef struct engine {
    bool known;
    uint64_t epoch;
    struct in_addr addr;
    unsigned nshards;
    uint16_t ports[MAX_SHARDS];     /* where each shard receives */
    uint16_t src_ports[MAX_SHARDS]; /* on the path: where it was seen sending from */
    uint64_t fake_epoch;            /* its made-up "new incarnation" */
} engine_t;

/* On the path: one direction of a channel, as seen. */
typedef struct flow {
    bool used;
    uint64_t src_epoch, dst_epoch;
    uint16_t src_shard, dst_shard;
    bool has_data, has_ack;
    uint32_t max_seq;   /* the newest DATA sequence number it carried */
    uint32_t last_ack;  /* the newest cumulative ACK it carried */
    uint32_t challenge; /* the newest challenge nonce it carried (0: none) */
    bool auth;          /* its datagrams carry SX_PKTF_AUTH */
    uint64_t datagrams;
} flow_t;

typedef struct attacker {
    bool onpath, hijack;
    const char *dir;
    uint8_t tag;
    engine_t eng[MAX_ENGINES];
    unsigned neng;
    flow_t flows[MAX_FLOWS];
    int udp_fd, raw_fd, pkt_fd;
    struct in_addr self;
    uint64_t sent[K_COUNT][2]; /* [kind][0 own, 1 spoofed] */
    uint64_t reset_echo;
    uint64_t errors;
    int first_errno;
    uint64_t sniffed, sniffed_shardx, sniff_drops;
    bool auth_seen;
} attacker_t;

static uint64_t rnd64(void)
{
    uint64_t v;
    if (getrandom(&v, sizeof(v), 0) != sizeof(v))
        v = (uint64_t)rand() << 32 ^ (uint64_t)rand();
    return v;
}

static uint32_t rnd32(void)
{
    return (uint32_t)rnd64();
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ------------------------------------------------------------- the cards */

/* Reads DIR/info.RANK: "rank=R host=H epoch=HEX shards=N addr=IP
 * ports=P0,P1,..." (attack_victim.c). */
static bool read_info(attacker_t *a, unsigned rank)
{
    char path[4096], line[2048];
    snprintf(path, sizeof(path), "%s/info.%u", a->dir, rank);
    FILE *f = fopen(path, "r");
    if (f == NULL || fgets(line, sizeof(line), f) == NULL) {
        fprintf(stderr, "attacker: cannot read %s: %s\n", path, strerror(errno));
        if (f != NULL)
            fclose(f);
        return false;
    }
    fclose(f);
    engine_t *e = &a->eng[rank];
    char *save = NULL;
    for (char *tok = strtok_r(line, " \n", &save); tok != NULL;
         tok = strtok_r(NULL, " \n", &save)) {
        if (strncmp(tok, "epoch=", 6) == 0) {
            e->epoch = strtoull(tok + 6, NULL, 16);
        } else if (strncmp(tok, "shards=", 7) == 0) {
            e->nshards = (unsigned)strtoul(tok + 7, NULL, 10);
        } else if (strncmp(tok, "addr=", 5) == 0) {
            if (inet_pton(AF_INET, tok + 5, &e->addr) != 1)
                return false;
        } else if (strncmp(tok, "ports=", 6) == 0) {
            char *p = tok + 6;
            for (unsigned s = 0; s < MAX_SHARDS && *p != '\0'; s++) {
                e->ports[s] = (uint16_t)strtoul(p, &p, 10);
                if (*p == ',')
                    p++;
            }
        }
    }
    if (e->epoch == 0 || e->nshards == 0 || e->nshards > MAX_SHARDS || e->addr.s_addr == 0) {
        fprintf(stderr, "attacker: %s is not a card this attacker can read\n", path);
        return false;
    }
    for (unsigned s = 0; s < e->nshards; s++) {
        if (e->ports[s] == 0) {
            fprintf(stderr, "attacker: %s names no port for shard %u\n", path, s);
            return false;
        }
    }
    e->known = true;
    printf("attacker: card of rank %u: epoch %016" PRIx64 ", %s, %u shard(s), port %u first\n",
           rank, e->epoch, inet_ntoa(e->addr), e->nshards, e->ports[0]);
    return true;
}

/* --------------------------------------------------------------- sending */

/* The Internet checksum over the pseudo-header, the UDP header and the
 * payload (RFC 768). */
static uint16_t udp_csum(struct in_addr src, struct in_addr dst, const uint8_t *udp, size_t len)
{
    uint32_t sum = 0;
    const uint8_t *s = (const uint8_t *)&src.s_addr, *d = (const uint8_t *)&dst.s_addr;
    sum += (uint32_t)(s[0] << 8 | s[1]) + (uint32_t)(s[2] << 8 | s[3]);
    sum += (uint32_t)(d[0] << 8 | d[1]) + (uint32_t)(d[2] << 8 | d[3]);
    sum += IPPROTO_UDP + (uint32_t)len;
    for (size_t i = 0; i + 1 < len; i += 2)
        sum += (uint32_t)(udp[i] << 8 | udp[i + 1]);
    if (len & 1)
        sum += (uint32_t)udp[len - 1] << 8;
    while (sum >> 16)
        sum = (sum & 0xffff) + (sum >> 16);
    uint16_t c = (uint16_t)~sum;
    return c == 0 ? 0xffff : c;
}

/* Sends @p len bytes from engine @p from's shard @p src_shard to engine
 * @p to's shard @p dst_shard, from our own socket or spoofed. */
static void send_forged(attacker_t *a, enum kind k, bool spoof, const engine_t *from,
                        unsigned src_shard, const engine_t *to, unsigned dst_shard,
                        const uint8_t *pkt, size_t len)
{
    struct sockaddr_in dst = {
        .sin_family = AF_INET, .sin_port = htons(to->ports[dst_shard]), .sin_addr = to->addr};
    ssize_t rc;
    if (!spoof) {
        rc = sendto(a->udp_fd, pkt, len, 0, (struct sockaddr *)&dst, sizeof(dst));
    } else {
        uint8_t buf[sizeof(struct iphdr) + sizeof(struct udphdr) + FORGED_MAX];
        struct iphdr *ip = (struct iphdr *)buf;
        struct udphdr *udp = (struct udphdr *)(buf + sizeof(*ip));
        size_t ulen = sizeof(*udp) + len;
        memset(buf, 0, sizeof(*ip) + sizeof(*udp));
        ip->version = 4;
        ip->ihl = 5;
        ip->ttl = 64;
        ip->protocol = IPPROTO_UDP;
        ip->tot_len = htons((uint16_t)(sizeof(*ip) + ulen)); /* the kernel fills id, csum */
        ip->saddr = from->addr.s_addr;
        ip->daddr = to->addr.s_addr;
        udp->source = htons(from->ports[src_shard]);
        udp->dest = htons(to->ports[dst_shard]);
        udp->len = htons((uint16_t)ulen);
        memcpy(buf + sizeof(*ip) + sizeof(*udp), pkt, len);
        udp->check = htons(udp_csum(from->addr, to->addr, (const uint8_t *)udp, ulen));
        rc = sendto(a->raw_fd, buf, sizeof(*ip) + ulen, 0, (struct sockaddr *)&dst, sizeof(dst));
    }
    if (rc < 0) {
        if (a->errors++ == 0)
            a->first_errno = errno;
        return;
    }
    a->sent[k][spoof]++;
}

/* A whole packet: header and @p payload, with the payload's CRC and, for
 * a victim that authenticates, the flag and a random tag. */
static size_t forge(const attacker_t *a, uint8_t *pkt, sx_wire_hdr_t *h, const uint8_t *payload,
                    size_t payload_len)
{
    if (payload_len > 0)
        memcpy(pkt + SX_WIRE_HDR_LEN, payload, payload_len);
    h->version = SX_WIRE_VERSION;
    h->payload_len = (uint16_t)payload_len;
    if (a->auth_seen)
        h->flags |= SX_PKTF_AUTH;
    uint32_t crc = sx_crc32c(0, pkt + SX_WIRE_HDR_LEN, payload_len);
    sx_wire_write_hdr(pkt, h, &crc);
    size_t len = SX_WIRE_HDR_LEN + payload_len;
    if (a->auth_seen) {
        for (unsigned i = 0; i < SX_WIRE_TAG_LEN; i += 8) {
            uint64_t r = rnd64();
            memcpy(pkt + len + i, &r, 8);
        }
        len += SX_WIRE_TAG_LEN;
    }
    return len;
}

static size_t ctrl_payload(uint8_t *out, uint8_t op, uint32_t isn, uint32_t nonce, uint64_t epoch)
{
    sx_ctrl_t m = {.op = op,
                   .cpc = SX_CPC_HANDSHAKE,
                   .mtu = 1472,
                   .window = WINDOW_GUESS,
                   .isn = isn,
                   .nonce = nonce,
                   .epoch = epoch};
    sx_ctrl_write(out, &m);
    return SX_CTRL_LEN;
}

/* One active-message frame of the victim's data tag: if it is ever
 * delivered, the victim sees a message it did not expect. */
static size_t data_payload(const attacker_t *a, uint8_t *out)
{
    sx_wire_frame_t f = {
        .kind = SX_FRAME_AM, .tag = a->tag, .flags = SX_FRAMEF_LAST, .len = DATA_LEN};
    size_t n = sx_wire_write_frame(out, &f);
    memset(out + n, 0xa5, DATA_LEN);
    memcpy(out + n, "forged by tests/cluster/attacker", 32);
    return n + DATA_LEN;
}

/* What a forgery needs to know of the channel it aims at: both ends,
 * both shard indexes and, on the path, what was seen of it. */
typedef struct target {
    const engine_t *from, *to;
    unsigned src_shard, dst_shard;
    const flow_t *fwd; /* from -> to, as seen (on the path); may be NULL */
    const flow_t *rev; /* to -> from */
} target_t;

static const engine_t *engine_of(const attacker_t *a, uint64_t epoch)
{
    for (unsigned i = 0; i < a->neng; i++)
        if (a->eng[i].known && a->eng[i].epoch == epoch)
            return &a->eng[i];
    return NULL;
}

static const flow_t *flow_find(const attacker_t *a, uint64_t se, unsigned ss, uint64_t de,
                               unsigned ds)
{
    for (unsigned i = 0; i < MAX_FLOWS; i++) {
        const flow_t *f = &a->flows[i];
        if (f->used && f->src_epoch == se && f->src_shard == ss && f->dst_epoch == de &&
            f->dst_shard == ds)
            return f;
    }
    return NULL;
}

/*
 * Picks the channel of the next forgery. Blind: ranks 0 and 1, in the
 * direction given, on shard indexes guessed at random. On the path: a
 * channel that carried data (its receiver is `to` for data, `from` for
 * ACKs: @p toward_sender), else any channel seen, else nothing yet.
 */
static bool pick(attacker_t *a, unsigned turn, bool toward_sender, target_t *t)
{
    memset(t, 0, sizeof(*t));
    if (!a->onpath) {
        t->from = &a->eng[turn & 1];
        t->to = &a->eng[1 - (turn & 1)];
        t->src_shard = rnd32() % t->from->nshards;
        t->dst_shard = rnd32() % t->to->nshards;
        return true;
    }
    /* The busiest channel that carried data; else the busiest seen. */
    const flow_t *best = NULL;
    for (unsigned i = 0; i < MAX_FLOWS; i++) {
        const flow_t *f = &a->flows[i];
        if (!f->used || engine_of(a, f->src_epoch) == NULL || engine_of(a, f->dst_epoch) == NULL)
            continue;
        if (best == NULL || (f->has_data && !best->has_data) ||
            (f->has_data == best->has_data && f->datagrams > best->datagrams))
            best = f;
    }
    if (best == NULL)
        return false;
    const flow_t *rev =
        flow_find(a, best->dst_epoch, best->dst_shard, best->src_epoch, best->src_shard);
    if (!toward_sender) {
        t->from = engine_of(a, best->src_epoch);
        t->to = engine_of(a, best->dst_epoch);
        t->src_shard = best->src_shard;
        t->dst_shard = best->dst_shard;
        t->fwd = best;
        t->rev = rev;
    } else {
        t->from = engine_of(a, best->dst_epoch);
        t->to = engine_of(a, best->src_epoch);
        t->src_shard = best->dst_shard;
        t->dst_shard = best->src_shard;
        t->fwd = rev;
        t->rev = best;
    }
    return t->src_shard < t->from->nshards && t->dst_shard < t->to->nshards &&
           t->from->ports[t->src_shard] != 0 && t->to->ports[t->dst_shard] != 0;
}

/* Sends one forgery of kind @p k; @p turn alternates directions and
 * sources. */
static void forge_one(attacker_t *a, enum kind k, unsigned turn)
{
    uint8_t pkt[FORGED_MAX], payload[256];
    bool spoof = (turn >> 1) & 1;
    target_t t;
    /* Data goes to a data receiver; ACKs to the data sender. */
    bool toward_sender = k == K_ACK_UNSENT || k == K_ACK_OLD || k == K_ACK_SACK;
    if (!pick(a, turn, toward_sender, &t))
        return;
    sx_wire_hdr_t h = {.src_shard = (uint16_t)t.src_shard,
                       .dst_shard = (uint16_t)t.dst_shard,
                       .src_epoch = t.from->epoch,
                       .dst_epoch = t.to->epoch};
    size_t n, len;
    /* What the path showed: the newest data sequence number towards the
     * receiver, and the receiver's newest cumulative ACK. */
    const flow_t *data_flow = toward_sender ? t.rev : t.fwd;
    const flow_t *ack_flow = toward_sender ? t.fwd : t.rev;
    bool seen_data = a->onpath && data_flow != NULL && data_flow->has_data;
    bool seen_ack = a->onpath && ack_flow != NULL && ack_flow->has_ack;

    switch (k) {
    case K_CONNECT:
        /* Blind: a guess, sometimes the old fixed start (0). On the path
         * the initial number went by before the attack began: a guess. */
        n = ctrl_payload(payload, SX_CTRL_CONNECT, (turn & 4) ? rnd32() : 0, rnd32(), 0);
        h.type = SX_PKT_CTRL;
        len = forge(a, pkt, &h, payload, n);
        break;
    case K_RESET: {
        /* From "the new incarnation" of `from`, naming `from` restarted;
         * on the path, echoing the nonce of the challenge `to` sent to
         * `from` if one was seen. */
        uint32_t nonce = rnd32();
        const flow_t *ch =
            a->onpath ? flow_find(a, t.to->epoch, t.dst_shard, t.from->epoch, t.src_shard) : NULL;
        if (ch != NULL && ch->challenge != 0) {
            nonce = ch->challenge;
            a->reset_echo++;
        }
        n = ctrl_payload(payload, SX_CTRL_RESET, 0, nonce, t.from->epoch);
        h.type = SX_PKT_CTRL;
        h.src_epoch = t.from->fake_epoch;
        len = forge(a, pkt, &h, payload, n);
        break;
    }
    case K_DATA:
        h.type = SX_PKT_DATA;
        h.seq = seen_data ? data_flow->max_seq + 64 + rnd32() % 2048
                          : ((turn & 4) ? rnd32() : (turn >> 3) % 16);
        n = data_payload(a, payload);
        len = forge(a, pkt, &h, payload, n);
        break;
    case K_ACK_UNSENT:
    case K_ACK_OLD:
    case K_ACK_SACK:
        h.type = SX_PKT_ACK;
        h.flags = SX_PKTF_ACK;
        h.rwnd_pkts = WINDOW_GUESS;
        h.rwnd_bytes = 4u << 20;
        if (k == K_ACK_UNSENT)
            h.ack = seen_data ? data_flow->max_seq + 100000 + rnd32() % 100000 : rnd32();
        else if (k == K_ACK_OLD)
            h.ack = seen_ack ? ack_flow->last_ack - 10000 - rnd32() % 100000 : rnd32();
        else
            h.ack = seen_ack ? ack_flow->last_ack : rnd32();
        if (k == K_ACK_SACK)
            h.sack = ~0ull;
        len = forge(a, pkt, &h, NULL, 0);
        break;
    case K_HIJACK: {
        /* Our own initial sequence number, then data at exactly it: on a
         * channel already up the CONNECT is refused and the data falls
         * outside the window; on one not set up yet both are taken. */
        uint32_t isn = rnd32();
        n = ctrl_payload(payload, SX_CTRL_CONNECT, isn, rnd32(), 0);
        h.type = SX_PKT_CTRL;
        len = forge(a, pkt, &h, payload, n);
        send_forged(a, k, spoof, t.from, t.src_shard, t.to, t.dst_shard, pkt, len);
        h = (sx_wire_hdr_t){.type = SX_PKT_DATA,
                            .src_shard = (uint16_t)t.src_shard,
                            .dst_shard = (uint16_t)t.dst_shard,
                            .src_epoch = t.from->epoch,
                            .dst_epoch = t.to->epoch,
                            .seq = isn};
        n = data_payload(a, payload);
        len = forge(a, pkt, &h, payload, n);
        break;
    }
    default:
        return;
    }
    send_forged(a, k, spoof, t.from, t.src_shard, t.to, t.dst_shard, pkt, len);
}

/* -------------------------------------------------------------- sniffing */

/* What a datagram says of an engine: its address, and the port of its
 * shard @p shard: where it receives (@p dst: the datagram was addressed
 * to it), or where it sends from, which is another port when it sends
 * through a connected socket (SX_UDP_CONNECT), and is kept apart. */
static engine_t *engine_learn(attacker_t *a, uint64_t epoch, struct in_addr addr, unsigned shard,
                              uint16_t port, bool dst)
{
    engine_t *e = NULL;
    for (unsigned i = 0; i < a->neng; i++)
        if (a->eng[i].epoch == epoch)
            e = &a->eng[i];
    if (e == NULL) {
        if (a->neng == MAX_ENGINES || epoch == 0)
            return NULL;
        e = &a->eng[a->neng++];
        e->epoch = epoch;
        e->fake_epoch = rnd64();
        e->known = true;
        e->addr = addr;
        printf("attacker: saw engine %016" PRIx64 " at %s\n", epoch, inet_ntoa(addr));
    }
    if (shard < MAX_SHARDS) {
        if (dst)
            e->ports[shard] = port;
        else
            e->src_ports[shard] = port;
        if (shard + 1 > e->nshards)
            e->nshards = shard + 1;
    }
    return e;
}

static flow_t *flow_learn(attacker_t *a, uint64_t se, unsigned ss, uint64_t de, unsigned ds)
{
    flow_t *free_slot = NULL;
    for (unsigned i = 0; i < MAX_FLOWS; i++) {
        flow_t *f = &a->flows[i];
        if (f->used && f->src_epoch == se && f->src_shard == ss && f->dst_epoch == de &&
            f->dst_shard == ds)
            return f;
        if (!f->used && free_slot == NULL)
            free_slot = f;
    }
    if (free_slot != NULL)
        *free_slot = (flow_t){.used = true,
                              .src_epoch = se,
                              .src_shard = (uint16_t)ss,
                              .dst_epoch = de,
                              .dst_shard = (uint16_t)ds};
    return free_slot;
}

/* One IPv4 packet off the wire (a cooked AF_PACKET read: from the IP
 * header on, cut at SNAP_LEN). Only the header's fields are read, at
 * wire.h's offsets, not its checksums: what matters is what a sender
 * would put there. */
static void sniff_one(attacker_t *a, const uint8_t *p, size_t len)
{
    a->sniffed++;
    if (len < 20 || (p[0] >> 4) != 4 || p[9] != IPPROTO_UDP)
        return;
    size_t ihl = (size_t)(p[0] & 15) * 4;
    if (len < ihl + 8 + SX_WIRE_HDR_LEN)
        return;
    struct in_addr src, dst;
    memcpy(&src.s_addr, p + 12, 4);
    memcpy(&dst.s_addr, p + 16, 4);
    if (src.s_addr == a->self.s_addr)
        return; /* ours */
    const uint8_t *u = p + ihl, *w = u + 8;
    uint16_t sport = (uint16_t)(u[0] << 8 | u[1]), dport = (uint16_t)(u[2] << 8 | u[3]);
    uint8_t type = w[1];
    uint16_t flags = (uint16_t)get_le(w + 2, 2);
    if (w[0] != SX_WIRE_VERSION || type < SX_PKT_DATA || type > SX_PKT_CTRL)
        return;
    unsigned ss = (unsigned)get_le(w + 4, 2), ds = (unsigned)get_le(w + 6, 2);
    uint64_t se = get_le(w + 8, 8), de = get_le(w + 16, 8);
    uint32_t seq = (uint32_t)get_le(w + 24, 4), ack = (uint32_t)get_le(w + 28, 4);
    if (se == 0 || de == 0 || ss >= MAX_SHARDS || ds >= MAX_SHARDS)
        return;
    a->sniffed_shardx++;
    if (flags & SX_PKTF_AUTH)
        a->auth_seen = true;
    engine_learn(a, se, src, ss, sport, false);
    engine_learn(a, de, dst, ds, dport, true);
    flow_t *f = flow_learn(a, se, ss, de, ds);
    if (f == NULL)
        return;
    f->datagrams++;
    f->auth = (flags & SX_PKTF_AUTH) != 0;
    if (type == SX_PKT_DATA && (!f->has_data || sx_u32_before(f->max_seq, seq))) {
        f->max_seq = seq;
        f->has_data = true;
    }
    if (flags & SX_PKTF_ACK) {
        if (!f->has_ack || sx_u32_before(f->last_ack, ack))
            f->last_ack = ack;
        f->has_ack = true;
    }
    /* A challenge: a probe whose sequence field holds a nonce. */
    if (type == SX_PKT_ACK && (flags & SX_PKTF_PROBE) && seq != 0)
        f->challenge = seq;
}

static int sniffer_open(const char *ifname)
{
    int fd = socket(AF_PACKET, SOCK_DGRAM, htons(ETH_P_IP));
    if (fd < 0) {
        fprintf(stderr, "attacker: AF_PACKET socket: %s\n", strerror(errno));
        return -1;
    }
    unsigned idx = if_nametoindex(ifname);
    if (idx == 0) {
        fprintf(stderr, "attacker: no interface %s\n", ifname);
        close(fd);
        return -1;
    }
    /*
     * UDP only, cut at SNAP_LEN (the headers are all it reads), and of
     * those every control message and every probe (a challenge's nonce
     * is in one) but only one in SAMPLE of the rest, drawn at random by
     * the filter: the newest numbers of a stream are known well enough
     * from a sample, and the frames the filter refuses cost the victims'
     * CPUs (two cores, shared with the victims) no copy. The offsets
     * assume a 20-byte IP header, which is what the victims send.
     */
    struct sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 9), /* IP protocol */
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, IPPROTO_UDP, 0, 8),
        BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 28 + 1), /* shardx type */
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SX_PKT_CTRL, 5, 0),
        BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 28 + 2), /* flags, low byte */
        BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, SX_PKTF_PROBE, 3, 0),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, (uint32_t)(SKF_AD_OFF + SKF_AD_RANDOM)),
        BPF_STMT(BPF_ALU | BPF_AND | BPF_K, SAMPLE - 1),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SNAP_LEN),
        BPF_STMT(BPF_RET | BPF_K, 0),
    };
    struct sock_fprog prog = {.len = sizeof(code) / sizeof(code[0]), .filter = code};
    struct sockaddr_ll sll = {
        .sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_IP), .sll_ifindex = (int)idx};
    struct packet_mreq mr = {.mr_ifindex = (int)idx, .mr_type = PACKET_MR_PROMISC};
    int rcvbuf = 4 << 20;
    if (setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof(prog)) != 0 ||
        bind(fd, (struct sockaddr *)&sll, sizeof(sll)) != 0 ||
        setsockopt(fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mr, sizeof(mr)) != 0) {
        fprintf(stderr, "attacker: cannot sniff on %s: %s\n", ifname, strerror(errno));
        close(fd);
        return -1;
    }
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof(rcvbuf));
    return fd;
}

/* Reads what the sniffer holds, at most a batch per call (the socket
 * holds what came in a tick, a few hundred at most). */
static void sniff_drain(attacker_t *a)
{
    uint8_t buf[SNAP_LEN];
    for (unsigned i = 0; i < 4096; i++) {
        struct sockaddr_ll from;
        socklen_t fl = sizeof(from);
        ssize_t n =
            recvfrom(a->pkt_fd, buf, sizeof(buf), MSG_DONTWAIT, (struct sockaddr *)&from, &fl);
        if (n < 0)
            return;
        if (from.sll_pkttype == PACKET_OUTGOING)
            continue;
        sniff_one(a, buf, (size_t)n);
    }
}

/* ------------------------------------------------------------------ main */

static struct in_addr iface_addr(const char *ifname)
{
    struct in_addr none = {0};
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    if (fd < 0)
        return none;
    struct ifreq ifr;
    memset(&ifr, 0, sizeof(ifr));
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname);
    bool ok = ioctl(fd, SIOCGIFADDR, &ifr) == 0;
    close(fd);
    if (!ok)
        return none;
    return ((struct sockaddr_in *)&ifr.ifr_addr)->sin_addr;
}

static void usage(void)
{
    fprintf(stderr, "usage: attacker blind|onpath DIR [--rate N] [--if IFACE] [--tag T] "
                    "[--hijack] [--seconds S]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    if (argc < 3)
        usage();
    attacker_t a = {.tag = 21, .udp_fd = -1, .raw_fd = -1, .pkt_fd = -1};
    if (strcmp(argv[1], "onpath") == 0)
        a.onpath = true;
    else if (strcmp(argv[1], "blind") != 0)
        usage();
    a.dir = argv[2];
    double rate = 1000, seconds = 120;
    const char *ifname = "sx0";
    for (int i = 3; i < argc; i++) {
        if (strcmp(argv[i], "--rate") == 0 && i + 1 < argc)
            rate = strtod(argv[++i], NULL);
        else if (strcmp(argv[i], "--if") == 0 && i + 1 < argc)
            ifname = argv[++i];
        else if (strcmp(argv[i], "--tag") == 0 && i + 1 < argc)
            a.tag = (uint8_t)strtoul(argv[++i], NULL, 0);
        else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
            seconds = strtod(argv[++i], NULL);
        else if (strcmp(argv[i], "--hijack") == 0)
            a.hijack = true;
        else
            usage();
    }
    if (rate <= 0)
        usage();

    if (!a.onpath) {
        if (!read_info(&a, 0) || !read_info(&a, 1))
            return 1;
        a.neng = 2;
        a.eng[0].fake_epoch = rnd64();
        a.eng[1].fake_epoch = rnd64();
    }
    a.self = iface_addr(ifname);
    a.udp_fd = socket(AF_INET, SOCK_DGRAM, 0);
    a.raw_fd = socket(AF_INET, SOCK_RAW, IPPROTO_RAW);
    if (a.udp_fd < 0 || a.raw_fd < 0) {
        fprintf(stderr, "attacker: cannot open its sockets: %s\n", strerror(errno));
        return 1;
    }
    /* Never block on a full socket: a forgery that does not go counts as
     * an error, and the pace holds. */
    int sndbuf = 4 << 20;
    (void)setsockopt(a.udp_fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
    (void)setsockopt(a.raw_fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
    if (a.onpath && (a.pkt_fd = sniffer_open(ifname)) < 0)
        return 1;

    char path[4096];
    snprintf(path, sizeof(path), "%s/attacker.ready", a.dir);
    FILE *f = fopen(path, "w");
    if (f == NULL || fclose(f) != 0) {
        perror(path);
        return 1;
    }
    printf("attacker: %s, %s, %.0f forged datagrams a second: ready\n",
           a.onpath ? "on the path" : "blind", a.self.s_addr ? inet_ntoa(a.self) : "?", rate);
    fflush(stdout);

    /*
     * The pace: a tick every TICK_NS, each reading what the sniffer holds
     * and sending what the rate owes. Few wake-ups: the victims' ranks
     * spin on the same two cores, and each wake-up takes one of them.
     */
    const unsigned nkinds = a.hijack ? K_COUNT : K_HIJACK;
    double start = now_s(), owed = 0, last = start;
    unsigned turn = 0, kind = 0;
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    while (!file_exists(a.dir, "stop")) {
        if (a.onpath)
            sniff_drain(&a);
        double t = now_s();
        if (t - start > seconds)
            break;
        owed += (t - last) * rate;
        last = t;
        if (owed > rate / 10)
            owed = rate / 10; /* after a stall, catch up a little, not all */
        while (owed >= 1) {
            forge_one(&a, (enum kind)kind, turn);
            owed -= 1;
            if (++kind == nkinds) {
                kind = 0;
                turn++;
            }
        }
        next.tv_nsec += TICK_NS;
        if (next.tv_nsec >= 1000000000) {
            next.tv_nsec -= 1000000000;
            next.tv_sec++;
        }
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
    }
    double ran = now_s() - start;

    if (a.onpath) {
        struct tpacket_stats ps;
        socklen_t pl = sizeof(ps);
        if (getsockopt(a.pkt_fd, SOL_PACKET, PACKET_STATISTICS, &ps, &pl) == 0)
            a.sniff_drops = ps.tp_drops;
        printf("attacker: sniffed %" PRIu64 " datagrams (a sample), %" PRIu64
               " of them shardx (%u engines, authenticated: %s), %" PRIu64 " lost by the sniffer\n",
               a.sniffed, a.sniffed_shardx, a.neng, a.auth_seen ? "yes" : "no", a.sniff_drops);
        for (unsigned i = 0; i < a.neng; i++) {
            const engine_t *e = &a.eng[i];
            printf("attacker: engine %016" PRIx64 " at %s:", e->epoch, inet_ntoa(e->addr));
            for (unsigned s = 0; s < e->nshards; s++)
                printf(" shard %u receives on %u, sends from %u;", s, e->ports[s], e->src_ports[s]);
            printf("\n");
        }
        for (unsigned i = 0; i < MAX_FLOWS; i++) {
            const flow_t *fl = &a.flows[i];
            if (fl->used && (fl->has_data || fl->datagrams > 100))
                printf("attacker: channel %016" PRIx64 ":%u -> %016" PRIx64 ":%u: %" PRIu64
                       " datagrams, newest seq %u%s, newest ack %u%s\n",
                       fl->src_epoch, fl->src_shard, fl->dst_epoch, fl->dst_shard, fl->datagrams,
                       fl->max_seq, fl->has_data ? "" : " (none)", fl->last_ack,
                       fl->has_ack ? "" : " (none)");
        }
    }
    uint64_t own = 0, spoofed = 0;
    for (unsigned k = 0; k < nkinds; k++) {
        printf("attacker: sent %s=%" PRIu64 " (own %" PRIu64 ", spoofed %" PRIu64 ")\n",
               kind_names[k], a.sent[k][0] + a.sent[k][1], a.sent[k][0], a.sent[k][1]);
        own += a.sent[k][0];
        spoofed += a.sent[k][1];
    }
    printf("attacker: sent total=%" PRIu64 " own=%" PRIu64 " spoofed=%" PRIu64
           " reset_echo=%" PRIu64 " in %.2f s; send errors %" PRIu64 "%s%s\n",
           own + spoofed, own, spoofed, a.reset_echo, ran, a.errors, a.errors ? ": " : "",
           a.errors ? strerror(a.first_errno) : "");
    return 0;
}
