/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * attack_victim: the live transfer that tests/cluster/attacker.c attacks
 * (ctest cluster_attack_*, attack_job.sh). Started by sx_run as 2 ranks on
 * two hosts of the namespace cluster:
 *
 *   attack_victim [--warmup all|one|none] DIR [MIB [MSG_BYTES]]
 *
 * Each rank writes DIR/info.RANK (one line, written to a temporary name
 * and renamed, so a reader never sees half of it):
 *
 *   rank=R host=HOST epoch=EPOCH shards=N addr=A.B.C.D ports=P0,P1,...
 *
 * EPOCH is the engine's epoch, bytes 8..15 of its business card read
 * little-endian, in hex; the ports are the UDP data ports of its shards
 * 0..N-1 and the address the first IPv4 address the card offers (kind 4,
 * 5 or 6 udp card addresses, src/transports/udp_card.c): what anyone who
 * saw the card knows, and what the blind attacker is given. It writes it
 * only once every channel between the two engines is set up: after
 * sx_engine_join (and DIR/shards.RANK, its shard count, for the peer),
 * each rank sends the other a message from each of its shards to each of
 * the peer's (sx_thread_bind, and the lane of sx_send_ex) and waits for
 * its own to be acknowledged and the peer's to arrive. The script starts
 * the attacker once both info files exist, so the attack is on live
 * channels; the blind_setup mode attacks their set-up instead (README.md,
 * "The attack test"). --warmup one sets up only the channel of each rank's home shard
 * (the transfer's), --warmup none not even that: the transfer's first
 * message does. The rank then keeps its engine progressing until DIR/go
 * exists (the script creates it once the attacker is ready). A rank that
 * fails before the transfer writes DIR/failed.RANK, so that the script
 * need not wait for the other's info.
 *
 * Rank 0 then sends rank 1 MIB MiB (default 256) in messages of MSG_BYTES
 * (default 65536), DEPTH in flight. Word j of message n (64-bit words,
 * little-endian) is pattern(n, j), word 0 being n itself and word 1 the
 * length: rank 1 checks every byte, that every message arrives exactly
 * once and in order, and that an END message names the count; anything
 * else, and any message at rank 0, is a failure, reported loudly. Both
 * ranks print their elapsed time, CPU time (the process's, all threads)
 * and rate over the transfer, every non-zero counter of their engine as
 * `counter NAME=VALUE`, and a result line ending in `ok` or `FAILED`;
 * the exit status is 0 only for `ok`.
 *
 * SX_AUTH per rank: where SX_AUTH_RANK<R> is set (R is SX_RUN_RANK), it
 * becomes SX_AUTH before the engine is created, so that a test can give
 * the two ranks different keys (sx_run passes every SX_* variable to
 * every rank alike); all SX_AUTH_RANK<R> variables (R < 16) are then
 * taken out of the environment, or shardx would warn of them as unknown.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <shardx.h>

#include "attack_util.h"

#define TAG_DATA 21
#define TAG_END  22
#define TAG_WARM 23
#define DEPTH    16
#define WAIT_S   100 /* a hang detector, nothing more */
#define BAD_SHOW 5   /* failures described in full */

typedef struct state {
    uint32_t rank, peer;
    size_t msg_bytes;
    uint64_t next_in; /* rank 1: the message number expected next */
    uint64_t bytes_in;
    uint64_t bad;
    bool end_seen;
    unsigned warm_seen, warm_want;
    uint64_t end_count;
    double first_in, last_in;
    uint64_t completed, failed, outstanding;
    int peer_error;
} state_t;

/* CPU seconds this process used so far, every thread's, user and system. */
static double cpu_s(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Word j >= 2 of message n: a cheap mix of both, so that a word moved
 * within a message or between messages shows. */
static uint64_t pattern(uint64_t n, uint64_t j)
{
    uint64_t x = (n + 1) * 0x9e3779b97f4a7c15ull ^ j * 0xc2b2ae3d27d4eb4full;
    return x ^ (x >> 29);
}

static void fill(uint8_t *buf, size_t len, uint64_t n)
{
    uint64_t w[2] = {n, len};
    memcpy(buf, w, sizeof(w));
    size_t words = len / 8;
    for (size_t j = 2; j < words; j++) {
        uint64_t v = pattern(n, j);
        memcpy(buf + 8 * j, &v, 8);
    }
    for (size_t i = 8 * words; i < len; i++)
        buf[i] = (uint8_t)(pattern(n, words) >> (8 * (i % 8)));
}

static void bad(state_t *st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void bad(state_t *st, const char *fmt, ...)
{
    if (st->bad++ < BAD_SHOW) {
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "attack_victim: rank %u: FAILED: ", st->rank);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        va_end(ap);
    }
}

static void on_data(void *arg, uint64_t peer_id, uint8_t tag, const void *data, size_t len)
{
    state_t *st = arg;
    const uint8_t *p = data;
    uint64_t n = UINT64_MAX, l = 0;
    (void)tag;

    if (st->rank != 1) {
        bad(st, "a data message (%zu bytes) arrived at the sender, from peer %" PRIu64, len,
            peer_id);
        return;
    }
    if (st->first_in == 0)
        st->first_in = now_s();
    if (len >= 16) {
        memcpy(&n, p, 8);
        memcpy(&l, p + 8, 8);
    }
    if (peer_id != st->peer || st->end_seen || len != st->msg_bytes || n != st->next_in ||
        l != len) {
        bad(st,
            "message from peer %" PRIu64 " of %zu bytes numbered %" PRIu64 " (length word %" PRIu64
            "), expected message %" PRIu64 " of %zu bytes from peer %u%s",
            peer_id, len, n, l, st->next_in, st->msg_bytes, st->peer,
            st->end_seen ? " (after END)" : "");
        st->next_in++;
        return;
    }
    size_t words = len / 8;
    for (size_t j = 2; j < words; j++) {
        uint64_t v, want = pattern(n, j);
        memcpy(&v, p + 8 * j, 8);
        if (v != want) {
            bad(st, "message %" PRIu64 " bytes %zu..%zu: %016" PRIx64 ", expected %016" PRIx64, n,
                8 * j, 8 * j + 7, v, want);
            st->next_in++;
            return;
        }
    }
    for (size_t i = 8 * words; i < len; i++) {
        if (p[i] != (uint8_t)(pattern(n, words) >> (8 * (i % 8)))) {
            bad(st, "message %" PRIu64 " byte %zu is wrong", n, i);
            break;
        }
    }
    st->next_in++;
    st->bytes_in += len;
    st->last_in = now_s();
}

static void on_end(void *arg, uint64_t peer_id, uint8_t tag, const void *data, size_t len)
{
    state_t *st = arg;
    (void)tag;
    if (st->rank != 1 || peer_id != st->peer || len != sizeof(uint64_t) || st->end_seen) {
        bad(st, "an unexpected END (%zu bytes from peer %" PRIu64 ")", len, peer_id);
        return;
    }
    memcpy(&st->end_count, data, sizeof(uint64_t));
    st->end_seen = true;
}

static void on_warm(void *arg, uint64_t peer_id, uint8_t tag, const void *data, size_t len)
{
    state_t *st = arg;
    (void)tag;
    /* The peer may start before we know how many to expect (warm_want 0). */
    if (peer_id != st->peer || len != 8 || (st->warm_want != 0 && st->warm_seen >= st->warm_want)) {
        uint64_t v = 0;
        memcpy(&v, data, len < 8 ? len : 8);
        bad(st,
            "an unexpected warm-up message (%zu bytes from peer %" PRIu64
            ", %u of %u seen): rank %u, shard %u to lane %u",
            len, peer_id, st->warm_seen, st->warm_want, (unsigned)(v >> 32),
            (unsigned)(v >> 16 & 0xffff), (unsigned)(v & 0xffff));
        return;
    }
    st->warm_seen++;
}

typedef struct op {
    state_t *st;
    bool busy;
} op_t;

static void on_complete(void *ctx, int status)
{
    op_t *op = ctx;
    state_t *st = op->st;
    op->busy = false;
    st->outstanding--;
    if (status == SX_OK) {
        st->completed++;
    } else {
        if (st->failed++ == 0)
            fprintf(stderr, "attack_victim: rank %u: a send failed: %s (%s)\n", st->rank,
                    sx_status_name(status), sx_strerror(status));
    }
}

static void on_error(void *arg, uint64_t peer_id, int status)
{
    state_t *st = arg;
    st->peer_error = status;
    fprintf(stderr, "attack_victim: rank %u: peer %" PRIu64 " failed: %s (%s)\n", st->rank, peer_id,
            sx_status_name(status), sx_strerror(status));
}

/* Writes @p line to DIR/NAME.RANK through a temporary name, so that a
 * reader never sees half of it. */
static bool write_file(const char *dir, const char *name, uint32_t rank, const char *line)
{
    char tmp[4096], path[4096];
    snprintf(tmp, sizeof(tmp), "%s/.%s.%u", dir, name, rank);
    snprintf(path, sizeof(path), "%s/%s.%u", dir, name, rank);
    FILE *f = fopen(tmp, "w");
    if (f == NULL || fputs(line, f) < 0 || fclose(f) != 0 || rename(tmp, path) != 0) {
        perror(path);
        return false;
    }
    return true;
}

/*
 * The line of DIR/info.RANK, from the engine's card (src/engine/card.h:
 * u32 magic, u16 version, u16 shard count, u64 epoch, then per shard a u8
 * length and the udp card address), into @p line; *nshards_p: the shard
 * count. Returns false, saying why, for a card that is not of the udp
 * transport's kinds.
 */
static bool card_line(sx_engine_h e, uint32_t rank, char *line, size_t cap, unsigned *nshards_p)
{
    size_t len = 0;
    if (sx_engine_address(e, NULL, &len) != SX_ERR_TRUNCATED || len < 16) {
        fprintf(stderr, "attack_victim: sx_engine_address gave no size\n");
        return false;
    }
    uint8_t *card = malloc(len);
    if (card == NULL || sx_engine_address(e, card, &len) != SX_OK) {
        fprintf(stderr, "attack_victim: sx_engine_address failed\n");
        free(card);
        return false;
    }
    unsigned nshards = (unsigned)get_le(card + 6, 2);
    uint64_t epoch = get_le(card + 8, 8);
    char ports[1024] = "", addr[32] = "";
    size_t off = 16, plen = 0;
    for (unsigned s = 0; s < nshards; s++) {
        if (off >= len || off + 1 + card[off] > len || card[off] < 8) {
            fprintf(stderr, "attack_victim: shard %u's card address is cut short\n", s);
            free(card);
            return false;
        }
        const uint8_t *a = card + off + 1;
        unsigned kind = a[0], alen = card[off];
        if (kind != 4 && kind != 5 && kind != 6) {
            fprintf(stderr, "attack_victim: shard %u: card address of kind %u: not udp's\n", s,
                    kind);
            free(card);
            return false;
        }
        unsigned port = (unsigned)get_le(a + 2, 2);
        plen += (size_t)snprintf(ports + plen, sizeof(ports) - plen, "%s%u", s ? "," : "", port);
        if (s == 0) {
            const uint8_t *ip = NULL;
            if (kind == 4)
                ip = a + 4;
            else if (a[1] > 0 && alen >= 19)
                ip = a + 14;
            if (ip != NULL)
                snprintf(addr, sizeof(addr), "%u.%u.%u.%u", ip[0], ip[1], ip[2], ip[3]);
        }
        off += 1 + alen;
    }
    free(card);
    if (addr[0] == '\0') {
        fprintf(stderr, "attack_victim: the card offers no IPv4 address\n");
        return false;
    }
    char host[256] = "?";
    gethostname(host, sizeof(host) - 1);
    snprintf(line, cap, "rank=%u host=%s epoch=%016" PRIx64 " shards=%u addr=%s ports=%s\n", rank,
             host, epoch, nshards, addr, ports);
    *nshards_p = nshards;
    return true;
}

static void print_counters(sx_engine_h e)
{
    size_t n = 0;
    if (sx_stats_get(e, NULL, &n) != SX_ERR_TRUNCATED || n == 0)
        return;
    sx_counter_t *c = calloc(n, sizeof(*c));
    if (c == NULL || sx_stats_get(e, c, &n) != SX_OK) {
        free(c);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if (c[i].value != 0)
            printf("counter %s=%" PRIu64 "\n", c[i].name, c[i].value);
    }
    free(c);
}

/* Sends one message of @p len bytes at @p buf on a free op of @p ops. */
static int send_one(sx_peer_h peer, state_t *st, op_t *op, uint8_t tag, void *buf, size_t len)
{
    struct iovec iov = {buf, len};
    op->busy = true;
    st->outstanding++;
    int rc = sx_send(peer, tag, &iov, 1, on_complete, op);
    if (rc != SX_INPROGRESS) {
        op->busy = false;
        st->outstanding--;
    }
    return rc;
}

enum warmup { WARM_ALL, WARM_ONE, WARM_NONE };

/* The shard count in DIR/shards.RANK, once the peer wrote it (the engine
 * keeps progressing meanwhile); 0 if it does not come. */
static unsigned info_shards(sx_engine_h e, const char *dir, uint32_t rank)
{
    char path[4096], line[2048];
    snprintf(path, sizeof(path), "%s/shards.%u", dir, rank);
    double start = now_s();
    for (uint64_t pass = 0; now_s() - start < WAIT_S; pass++) {
        FILE *f = pass % 64 == 0 ? fopen(path, "r") : NULL;
        if (f != NULL) {
            char *got = fgets(line, sizeof(line), f);
            fclose(f);
            return got != NULL ? (unsigned)strtoul(line, NULL, 10) : 0;
        }
        sx_progress(e);
    }
    return 0;
}

/*
 * Sets channels up before the attack: one message from each of our
 * shards (the calling thread bound to each in turn) to each of the peer's
 * (the lane), or with @p all false one message on the transfer's own
 * channel; waits until ours completed and the peer's arrived, and binds
 * the thread back to its home shard. *sent_p: the messages sent.
 */
static bool warm_up(sx_engine_h e, sx_peer_h peer, state_t *st, const char *dir, bool all,
                    unsigned *sent_p)
{
    unsigned mine = 1, theirs = 1, home = 0;
    if (all) {
        theirs = info_shards(e, dir, st->peer);
        if (sx_engine_shard_count(e, &mine) != SX_OK || mine == 0 || theirs == 0) {
            fprintf(stderr, "attack_victim: rank %u: FAILED: shard counts unknown\n", st->rank);
            return false;
        }
    }
    if (sx_thread_home_shard(e, &home) != SX_OK)
        return false;
    st->warm_want = mine * theirs;
    op_t *ops = calloc(mine * theirs, sizeof(*ops));
    uint64_t *msgs = calloc(mine * theirs, sizeof(*msgs));
    if (ops == NULL || msgs == NULL)
        return false;
    int rc = SX_INPROGRESS;
    for (unsigned s = 0; s < mine && rc == SX_INPROGRESS; s++) {
        if (all)
            sx_thread_bind(e, s);
        for (unsigned l = 0; l < theirs && rc == SX_INPROGRESS; l++) {
            unsigned k = s * theirs + l;
            sx_send_params_t params = {.field_mask = SX_SEND_PARAM_LANE, .lane = l};
            struct iovec iov = {&msgs[k], sizeof(msgs[k])};
            msgs[k] = (uint64_t)st->rank << 32 | s << 16 | l;
            ops[k] = (op_t){st, true};
            st->outstanding++;
            rc = sx_send_ex(peer, TAG_WARM, &iov, 1, all ? &params : NULL, on_complete, &ops[k]);
            if (rc != SX_INPROGRESS) {
                st->outstanding--;
                fprintf(stderr, "attack_victim: rank %u: FAILED: warm-up sx_send_ex: %s\n",
                        st->rank, sx_status_name(rc));
            } else {
                (*sent_p)++;
            }
        }
    }
    sx_thread_bind(e, home);
    double start = now_s();
    while (st->failed == 0 && st->peer_error == 0 &&
           (st->outstanding > 0 || st->warm_seen < st->warm_want) && now_s() - start < WAIT_S)
        sx_progress(e);
    bool ok = rc == SX_INPROGRESS && st->outstanding == 0 && st->warm_seen == st->warm_want;
    if (ok)
        printf("attack_victim: rank %u: %u channel(s) set up before the attack\n", st->rank,
               st->warm_want);
    if (st->outstanding == 0) { /* else a completion may still come: leave them */
        free(msgs);
        free(ops);
    }
    return ok;
}

int main(int argc, char **argv)
{
    enum warmup warmup = WARM_ALL;
    if (argc > 2 && strcmp(argv[1], "--warmup") == 0) {
        if (strcmp(argv[2], "one") == 0)
            warmup = WARM_ONE;
        else if (strcmp(argv[2], "none") == 0)
            warmup = WARM_NONE;
        else if (strcmp(argv[2], "all") != 0)
            argc = 0;
        argv += 2;
        argc -= 2;
    }
    if (argc < 2) {
        fprintf(stderr, "usage: attack_victim [--warmup all|one|none] DIR [MIB [MSG_BYTES]]\n");
        return 2;
    }
    const char *dir = argv[1];
    uint64_t mib = argc > 2 ? strtoull(argv[2], NULL, 10) : 256;
    size_t msg_bytes = argc > 3 ? strtoul(argv[3], NULL, 10) : 65536;
    if (msg_bytes < 16)
        msg_bytes = 16;
    uint64_t nmsg = (mib << 20) / msg_bytes;

    const char *rank_env = getenv("SX_RUN_RANK");
    if (rank_env != NULL) {
        char name[64];
        snprintf(name, sizeof(name), "SX_AUTH_RANK%s", rank_env);
        const char *key = getenv(name);
        if (key != NULL)
            setenv("SX_AUTH", key, 1);
    }
    /* shardx warns of SX_ variables it does not know: these are ours. */
    for (unsigned r = 0; r < 16; r++) {
        char name[64];
        snprintf(name, sizeof(name), "SX_AUTH_RANK%u", r);
        unsetenv(name);
    }

    state_t st = {.msg_bytes = msg_bytes};
    sx_engine_h e;
    sx_job_info_t job;
    int rc = sx_engine_create(NULL, &e);
    if (rc != SX_OK) {
        fprintf(stderr, "attack_victim: sx_engine_create: %s (%s)\n", sx_status_name(rc),
                sx_strerror(rc));
        return 1;
    }
    sx_am_register(e, TAG_DATA, on_data, &st);
    sx_am_register(e, TAG_END, on_end, &st);
    sx_am_register(e, TAG_WARM, on_warm, &st);
    sx_error_register(e, on_error, &st);
    if ((rc = sx_engine_join(e, &job)) != SX_OK || job.size != 2) {
        if (rc != SX_OK)
            fprintf(stderr, "attack_victim: sx_engine_join: %s (%s)\n", sx_status_name(rc),
                    sx_strerror(rc));
        else
            fprintf(stderr, "attack_victim: a job of %u ranks; this test needs 2\n", job.size);
        sx_engine_destroy(e);
        return 1;
    }
    st.rank = job.rank;
    st.peer = 1 - job.rank;
    sx_peer_h peer = sx_job_peer(e, st.peer);
    char info[2048], count[32];
    unsigned nshards = 0;
    if (!card_line(e, job.rank, info, sizeof(info), &nshards)) {
        sx_engine_destroy(e);
        return 1;
    }
    printf("attack_victim: card: %s", info);
    fflush(stdout);
    snprintf(count, sizeof(count), "%u\n", nshards);
    if (!write_file(dir, "shards", job.rank, count)) {
        sx_engine_destroy(e);
        return 1;
    }

    op_t ops[DEPTH + 1];
    for (unsigned i = 0; i <= DEPTH; i++)
        ops[i] = (op_t){&st, false};
    double start = now_s();

    unsigned nwarm = 0;
    if (warmup != WARM_NONE && !warm_up(e, peer, &st, dir, warmup == WARM_ALL, &nwarm))
        st.failed++;
    /* Only now what the attacker is given: it starts once both are there. */
    if (st.failed == 0 && !write_file(dir, "info", job.rank, info))
        st.failed++;

    /* The attacker's turn to get ready: the engine keeps answering. */
    for (uint64_t pass = 0; st.failed == 0 && st.peer_error == 0 && now_s() - start < WAIT_S;
         pass++) {
        if (pass % 64 == 0 && file_exists(dir, "go"))
            break;
        sx_progress(e);
    }
    bool go = st.failed == 0 && st.peer_error == 0 && file_exists(dir, "go");
    if (!go && st.failed == 0 && st.peer_error == 0)
        fprintf(stderr, "attack_victim: rank %u: FAILED: no %s/go within %d s\n", st.rank, dir,
                WAIT_S);
    if (!go) /* the script need not wait for the other rank's info */
        (void)write_file(dir, "failed", job.rank, "\n");

    double t0 = now_s(), t1 = t0, c0 = cpu_s(), c1 = c0;
    uint64_t sent = 0;
    uint8_t *bufs = NULL;
    if (go && job.rank == 0) {
        bufs = malloc(DEPTH * msg_bytes);
        if (bufs == NULL)
            return 1;
        while (st.failed == 0 && st.peer_error == 0 && now_s() - start < WAIT_S) {
            if (sent < nmsg && st.outstanding < DEPTH) {
                unsigned k = 0;
                while (ops[k].busy)
                    k++;
                uint8_t *buf = bufs + k * msg_bytes;
                fill(buf, msg_bytes, sent);
                rc = send_one(peer, &st, &ops[k], TAG_DATA, buf, msg_bytes);
                if (rc == SX_INPROGRESS) {
                    sent++;
                } else if (rc != SX_ERR_AGAIN) {
                    fprintf(stderr, "attack_victim: rank 0: sx_send: %s (%s)\n", sx_status_name(rc),
                            sx_strerror(rc));
                    st.failed++;
                }
                continue;
            }
            if (sent == nmsg && st.outstanding == 0)
                break;
            sx_progress(e);
        }
        t1 = now_s();
        c1 = cpu_s();
        /* END says how many came before it. */
        uint64_t end = sent;
        if (st.failed == 0 && st.peer_error == 0 &&
            (rc = send_one(peer, &st, &ops[DEPTH], TAG_END, &end, sizeof(end))) != SX_INPROGRESS) {
            fprintf(stderr, "attack_victim: rank 0: sx_send END: %s\n", sx_status_name(rc));
            st.failed++;
        }
        while (st.failed == 0 && st.peer_error == 0 && st.outstanding > 0 &&
               now_s() - start < WAIT_S)
            sx_progress(e);
    } else if (go) {
        while (st.failed == 0 && st.peer_error == 0 && !st.end_seen && now_s() - start < WAIT_S)
            sx_progress(e);
        t1 = now_s();
        c1 = cpu_s();
    }
    int brc = sx_job_barrier(e);
    if (brc != SX_OK)
        fprintf(stderr, "attack_victim: rank %u: sx_job_barrier: %s (%s)\n", st.rank,
                sx_status_name(brc), sx_strerror(brc));

    print_counters(e);
    uint64_t chan_failures = 0;
    sx_stats_value(e, "chan_failures", &chan_failures);
    bool ok = go && brc == SX_OK && st.failed == 0 && st.peer_error == 0 && st.bad == 0 &&
              chan_failures == 0;
    double secs = t1 - t0;
    if (job.rank == 0) {
        ok = ok && sent == nmsg && st.completed == nmsg + 1 + nwarm;
        printf("attack_victim: rank 0: sent %" PRIu64 " messages of %zu bytes (%" PRIu64
               " MiB) in %.3f s (cpu %.3f s): rate=%.1f MiB/s, failed %" PRIu64 ": %s\n",
               sent, msg_bytes, (sent * msg_bytes) >> 20, secs, c1 - c0,
               secs > 0 ? (double)(sent * msg_bytes) / secs / 1048576.0 : 0.0, st.failed,
               ok ? "ok" : "FAILED");
    } else {
        ok = ok && st.end_seen && st.next_in == st.end_count && st.end_count == nmsg;
        double span = st.last_in > st.first_in ? st.last_in - st.first_in : secs;
        printf("attack_victim: rank 1: received %" PRIu64 " of %" PRIu64 " messages (%" PRIu64
               " MiB) checked in %.3f s (%.3f s first to last, cpu %.3f s): rate=%.1f MiB/s, bad "
               "%" PRIu64 ": %s\n",
               st.next_in, st.end_count, st.bytes_in >> 20, secs, span, c1 - c0,
               secs > 0 ? (double)st.bytes_in / secs / 1048576.0 : 0.0, st.bad,
               ok ? "ok" : "FAILED");
    }
    free(bufs);
    sx_engine_destroy(e);
    return ok ? 0 : 1;
}
