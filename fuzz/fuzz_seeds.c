/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Writes the seed corpora of the start-up fuzzers (fuzz_oob,
 * fuzz_rendezvous, fuzz_pmix) into <dir>/corpus-oob, corpus-rendezvous and
 * corpus-pmix, which must exist. Run by fuzz/make-corpus-bootstrap.sh.
 *
 * The seeds are real traffic where there is any: the OOB frames are the
 * bytes a real endpoint wrote to a TCP socket; the launcher's answers in
 * the rendezvous seeds are what a real sx_run rendezvous server sent two
 * ranks; the cards are the real business cards of fuzz/corpus-card/. The
 * rest (the messages ranks send, the fake PMIx server's answers) follow
 * the formats in src/bootstrap/oob.h and the harnesses' comments. Each
 * harness's comment describes its input format.
 */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <unistd.h>

#include <shardx.h>

#include "bootstrap/oob.h"
#include "bootstrap/rendezvous.h"
#include "common/crc32c.h"
#include "common/le.h"

#define FAKE_PEER 0x2aull   /* fuzz_oob.c's peer of an outgoing connection */
#define SELF_ID   0x5e1full /* fuzz_oob.c's endpoint */

static const char *dir;
static uint8_t buf[16384];
static size_t len;

static void fail(const char *what, int rc)
{
    fprintf(stderr, "fuzz_seeds: %s: %s\n", what, rc < 0 ? strerror(-rc) : sx_strerror(rc));
    exit(1);
}

static void put(const void *p, size_t n)
{
    if (n == 0)
        return;
    if (len + n > sizeof(buf))
        fail("seed too large", -EOVERFLOW);
    memcpy(buf + len, p, n);
    len += n;
}

static void put8(unsigned v)
{
    uint8_t b = (uint8_t)v;
    put(&b, 1);
}

static void put16(unsigned v)
{
    uint8_t b[2];
    sx_put16(b, (uint16_t)v);
    put(b, 2);
}

static void put32(uint32_t v)
{
    uint8_t b[4];
    sx_put32(b, v);
    put(b, 4);
}

static void save(const char *corpus, const char *name)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s/%s", dir, corpus, name);
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(buf, 1, len, f) != len || fclose(f) != 0)
        fail(path, -errno);
    len = 0;
}

/* A real card from fuzz/corpus-card/. */
static size_t card(const char *name, uint8_t *out, size_t cap)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/corpus-card/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        fail(path, -errno);
    size_t n = fread(out, 1, cap, f);
    fclose(f);
    return n;
}

/* ------------------------------------------------------------ OOB */

/* What a real endpoint with id FAKE_PEER writes on a new connection when
 * it sends @p n messages: its HELLO, then a frame for each. */
static size_t capture_oob(uint8_t *out, size_t cap)
{
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(lfd, 1) != 0 ||
        getsockname(lfd, (struct sockaddr *)&sa, &sl) != 0)
        fail("listener", -errno);
    char addr[SX_OOB_ADDR_MAX];
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", (unsigned)ntohs(sa.sin_port));

    sx_oob_t *oob;
    int rc = sx_oob_open(FAKE_PEER, "127.0.0.1", 0, &oob);
    if (rc != SX_OK || (rc = sx_oob_peer_set(oob, SELF_ID, addr)) != SX_OK)
        fail("sx_oob_open", rc);
    static const char hello[] = "a message for the handler";
    uint8_t rdv[12];
    sx_put32(rdv, 1);
    sx_put32(rdv + 4, 2);
    memcpy(rdv + 8, "blob", 4);
    uint8_t forty[40];
    for (int i = 0; i < 40; i++)
        forty[i] = (uint8_t)(i * 7);
    struct {
        uint32_t tag;
        const void *p;
        size_t n;
    } msgs[] = {{7, hello, sizeof(hello) - 1},
                {1, forty, sizeof(forty)},
                {0x1234, NULL, 0},
                {SX_OOB_TAG_RDV_PUT, rdv, sizeof(rdv)}};
    size_t want = SX_OOB_HDR_LEN;
    for (size_t i = 0; i < sizeof(msgs) / sizeof(msgs[0]); i++) {
        struct iovec iov = {.iov_base = (void *)msgs[i].p, .iov_len = msgs[i].n};
        rc = sx_oob_send(oob, SELF_ID, msgs[i].tag, &iov, msgs[i].n > 0 ? 1 : 0, 5000);
        if (rc != SX_OK)
            fail("sx_oob_send", rc);
        want += SX_OOB_HDR_LEN + msgs[i].n;
    }
    int fd = accept(lfd, NULL, NULL);
    if (fd < 0)
        fail("accept", -errno);
    size_t got = 0;
    while (got < want && got < cap) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 5000) != 1)
            fail("the endpoint's frames did not come", -ETIMEDOUT);
        ssize_t n = read(fd, out + got, cap - got);
        if (n <= 0)
            fail("read", n < 0 ? -errno : -ECONNRESET);
        got += (size_t)n;
    }
    close(fd);
    close(lfd);
    sx_oob_close(oob);
    return got;
}

/* A frame header with a correct checksum. */
static void frame(uint32_t tag, uint64_t src, uint32_t plen)
{
    uint8_t h[SX_OOB_HDR_LEN];
    sx_put32(h, SX_OOB_MAGIC);
    sx_put32(h + 4, tag);
    sx_put64(h + 8, src);
    sx_put32(h + 16, plen);
    sx_put32(h + 20, sx_crc32c(0, h, 20));
    put(h, sizeof(h));
}

static void oob_seeds(void)
{
    uint8_t wire[4096];
    size_t n = capture_oob(wire, sizeof(wire));

    /* An accepted connection: the endpoint's bytes exactly, with a
     * handler for tag 7 and a posted receive; then split in 5-byte
     * pieces with the receive peeking and reporting whole lengths. */
    put8(0x24), put8(0), put(wire, n);
    save("corpus-oob", "accepted");
    put8(0x3c), put8(5), put(wire, n);
    save("corpus-oob", "accepted-split");
    /* A connection we made: the frames without the HELLO. */
    put8(0x06), put8(0), put(wire + SX_OOB_HDR_LEN, n - SX_OOB_HDR_LEN);
    save("corpus-oob", "outgoing");
    /* The same with every checksum wrong, which flags bit 0 repairs. */
    put8(0x23), put8(0);
    size_t at = len;
    put(wire + SX_OOB_HDR_LEN, n - SX_OOB_HDR_LEN);
    for (size_t off = at; off + SX_OOB_HDR_LEN <= len;) {
        memset(buf + off + 20, 0, 4);
        off += SX_OOB_HDR_LEN + sx_get32(buf + off + 16);
    }
    save("corpus-oob", "outgoing-repaired");

    /* Each check of the header, behind good checksums. */
    put8(0x02), put8(0), frame(1, FAKE_PEER, SX_OOB_MSG_MAX + 1);
    save("corpus-oob", "too-long");
    put8(0x02), put8(0), frame(1, FAKE_PEER + 1, 0);
    save("corpus-oob", "wrong-source");
    put8(0x02), put8(0), frame(SX_OOB_TAG_HELLO, FAKE_PEER, 0);
    save("corpus-oob", "hello-late");
    put8(0x00), put8(0), frame(1, FAKE_PEER, 0);
    save("corpus-oob", "no-hello");
    put8(0x00), put8(0), frame(SX_OOB_TAG_HELLO, FAKE_PEER, 4), put32(0);
    save("corpus-oob", "hello-payload");
    put8(0x00), put8(0), frame(SX_OOB_TAG_HELLO, SELF_ID, 0);
    save("corpus-oob", "hello-self");
    put8(0x02), put8(3), frame(1, FAKE_PEER, 100), put("cut short", 9);
    save("corpus-oob", "ends-inside");
    put8(0x02), put8(0), put(wire + SX_OOB_HDR_LEN, 10);
    save("corpus-oob", "ends-inside-header");
    put8(0x02), put8(0), put8(0x53), put8(0x58), put8(0x4f), put8(0x32), put(wire + 4, 20);
    save("corpus-oob", "bad-magic");
}

/* ------------------------------------------------------------ rendezvous */

static void must(int rc, const char *what)
{
    if (rc != SX_OK)
        fail(what, rc);
}

/* What a real server of @p job ranks answers: its RDV_ALL for the given
 * cards, and its RDV_DONE for fence rounds 1 and 2. */
static void capture_rdv(uint32_t job, const uint8_t *const *cards, const size_t *clen, uint8_t *all,
                        size_t *all_len, uint8_t done[2][4])
{
    sx_rdv_server_t *srv;
    char addr[SX_OOB_ADDR_MAX];
    sx_oob_t *rank[4];

    must(sx_rdv_server_open(job, &srv), "sx_rdv_server_open");
    must(sx_rdv_server_address(srv, addr, sizeof(addr)), "sx_rdv_server_address");
    for (uint32_t r = 0; r < job; r++) {
        must(sx_oob_open(0x100 + r, "127.0.0.1", 0, &rank[r]), "sx_oob_open");
        must(sx_oob_peer_set(rank[r], SX_OOB_ID_LAUNCHER, addr), "sx_oob_peer_set");
        uint8_t hdr[8];
        sx_put32(hdr, r);
        sx_put32(hdr + 4, job);
        struct iovec iov[2] = {{hdr, 8}, {(void *)cards[r], clen[r]}};
        must(sx_oob_send(rank[r], SX_OOB_ID_LAUNCHER, SX_OOB_TAG_RDV_PUT, iov, 2, 5000), "PUT");
    }
    for (uint32_t r = 0; r < job; r++) {
        uint64_t peer = SX_OOB_ID_LAUNCHER;
        uint32_t tag = SX_OOB_TAG_RDV_ALL;
        struct iovec iov = {all, 4096};
        must(sx_oob_recv(rank[r], &peer, &tag, &iov, 1, 0, 5000, all_len), "RDV_ALL");
    }
    for (uint32_t round = 1; round <= 2; round++) {
        for (uint32_t r = 0; r < job; r++) {
            uint8_t msg[8];
            sx_put32(msg, r);
            sx_put32(msg + 4, round);
            struct iovec iov = {msg, 8};
            must(sx_oob_send(rank[r], SX_OOB_ID_LAUNCHER, SX_OOB_TAG_RDV_FENCE, &iov, 1, 5000),
                 "FENCE");
        }
        for (uint32_t r = 0; r < job; r++) {
            uint64_t peer = SX_OOB_ID_LAUNCHER;
            uint32_t tag = SX_OOB_TAG_RDV_DONE;
            size_t n;
            struct iovec iov = {done[round - 1], 4};
            must(sx_oob_recv(rank[r], &peer, &tag, &iov, 1, 0, 5000, &n), "RDV_DONE");
        }
    }
    must(sx_rdv_server_status(srv), "the server failed");
    for (uint32_t r = 0; r < job; r++)
        sx_oob_close(rank[r]);
    sx_rdv_server_close(srv);
}

/* A server-mode message: [ctl][len][payload]; ctl bits 1-2 the rank. */
static void srv_msg(int fence, uint32_t rank, uint32_t a, uint32_t b, const void *blob, size_t blen)
{
    put8((fence ? 1u : 0u) | rank << 1), put8((unsigned)(8 + blen)), put32(a), put32(b);
    put(blob, blen);
}

static void rdv_seeds(void)
{
    uint8_t c0[512], c1[512], all[4096], done[2][4];
    size_t clen[2] = {card("bound-ipv4", c0, sizeof(c0)), card("default", c1, sizeof(c1))};
    const uint8_t *cards[2] = {c0, c1};
    size_t all_len;

    /* The server: a whole job of two, then each fault it checks for. */
    put8(0), put8(1);
    srv_msg(0, 0, 0, 2, c0, clen[0]), srv_msg(0, 1, 1, 2, c1, clen[1]);
    for (uint32_t round = 1; round <= 2; round++)
        srv_msg(1, 0, 0, round, NULL, 0), srv_msg(1, 1, 1, round, NULL, 0);
    save("corpus-rendezvous", "server-job2");
    put8(0), put8(1);
    srv_msg(1, 1, 1, 1, NULL, 0), srv_msg(1, 0, 0, 1, NULL, 0), srv_msg(1, 0, 0, 2, NULL, 0);
    srv_msg(0, 0, 0, 2, c0, clen[0]), srv_msg(0, 1, 1, 2, NULL, 0);
    save("corpus-rendezvous", "server-fence-first");
    put8(0), put8(1), srv_msg(0, 0, 0, 2, c0, clen[0]), srv_msg(0, 0, 0, 2, c0, clen[0]);
    save("corpus-rendezvous", "server-put-twice");
    put8(0), put8(1), srv_msg(0, 0, 0, 2, NULL, 0), srv_msg(0, 1, 0, 2, NULL, 0);
    save("corpus-rendezvous", "server-rank-claimed");
    put8(0), put8(3), srv_msg(0, 0, 0, 3, NULL, 0), srv_msg(0, 1, 7, 4, NULL, 0);
    srv_msg(1, 2, 2, 5, NULL, 0), put8(1), put8(3), put("abc", 3);
    save("corpus-rendezvous", "server-faults");

    /* The rank: a real server's answers for a job of two. */
    capture_rdv(2, cards, clen, all, &all_len, done);
    for (uint32_t rank = 0; rank < 2; rank++) {
        put8(1), put8(1), put8(rank), put8(2);
        put8(0), put16((unsigned)all_len), put(all, all_len);
        put8(1), put16(4), put(done[0], 4);
        put8(1), put16(4), put(done[1], 4);
        save("corpus-rendezvous", rank == 0 ? "rank0-job2" : "rank1-job2");
    }
    /* Answers out of order: a DONE before the ALL, a DONE for the wrong
     * round, then an RDV_ERROR; and an ALL for another job's size. */
    put8(1), put8(1), put8(0), put8(3);
    put8(1), put16(4), put(done[1], 4);
    put8(0), put16((unsigned)all_len), put(all, all_len);
    put8(1), put16(4), put(done[1], 4);
    static const char err[] = "rank 1 sent PUT twice";
    put8(2), put16(sizeof(err) - 1), put(err, sizeof(err) - 1);
    save("corpus-rendezvous", "rank0-disorder");
    put8(1), put8(2), put8(0), put8(0);
    put8(0), put16((unsigned)all_len), put(all, all_len);
    save("corpus-rendezvous", "rank0-wrong-size");
    /* RDV_ERRORs that carry a status (text, NUL, i32), as sx_run's do: one
     * for the PUT with SX_ERR_INTERNAL, the status of the input CI's
     * fuzzing found (2306381), and one for a fence after a good ALL. */
    static const char left[] = "rank 1 left";
    put8(1), put8(1), put8(0), put8(1);
    put8(2), put16(sizeof(left) + 4), put(left, sizeof(left)), put32((uint32_t)SX_ERR_INTERNAL);
    save("corpus-rendezvous", "rank0-error-status");
    put8(1), put8(1), put8(0), put8(1);
    put8(0), put16((unsigned)all_len), put(all, all_len);
    put8(2), put16(sizeof(left) + 4), put(left, sizeof(left));
    put32((uint32_t)SX_ERR_PEER_UNREACHABLE);
    save("corpus-rendezvous", "rank0-fence-error");

    uint8_t c4[512];
    size_t c4len = card("four-shards", c4, sizeof(c4));
    const uint8_t *one[1] = {c4};
    capture_rdv(1, one, &c4len, all, &all_len, done);
    put8(1), put8(0), put8(0), put8(1);
    put8(0), put16((unsigned)all_len), put(all, all_len);
    put8(1), put16(4), put(done[0], 4);
    save("corpus-rendezvous", "rank0-job1");
}

/* ------------------------------------------------------------ PMIx */

/* The fake server's answers, in the order fuzz_pmix.c's calls read them:
 * PMIx_Init (status, rank, namespace), PMIx_Get(job size) (status, how,
 * type, size), whether a get comes before exchange, the card's length,
 * Put, Commit and Fence (statuses), one PMIx_Get per rank and one past
 * the end (buffer length, status, how, type, card), the fences (count,
 * then mode and status each), PMIx_Finalize (status). */
static void pmix_card(unsigned buflen, const uint8_t *c, size_t n)
{
    put8(buflen), put8(0), put8(0), put8(0);
    if (n < 0xff)
        put8((unsigned)n);
    else
        put8(0xff), put32((uint32_t)n);
    put(c, n);
}

static void pmix_seeds(void)
{
    const char *names[] = {"bound-ipv4", "default", "four-shards", "default"};
    uint8_t c[4][512];
    size_t n[4];
    for (int i = 0; i < 4; i++)
        n[i] = card(names[i], c[i], sizeof(c[i]));

    /* A job of four, rank 2: every card fetched, three fences. */
    put8(0), put8(2), put8(1), put8(0), put8(0), put8(0), put8(4);
    put8(0), put8(48), put8(0), put8(0), put8(0);
    for (int i = 0; i < 4; i++)
        pmix_card(0xff, c[i], n[i]);
    put8(0xff);
    put8(3), put8(0), put8(0), put8(3), put8(2), put8(0), put8(0);
    save("corpus-pmix", "job4");
    /* The same, each card into a buffer too small for it. */
    put8(0), put8(2), put8(1), put8(0), put8(0), put8(0), put8(4);
    put8(0), put8(48), put8(0), put8(0), put8(0);
    for (int i = 0; i < 4; i++)
        pmix_card(16, c[i], n[i]);
    put8(0), put8(0), put8(0);
    save("corpus-pmix", "job4-truncated");
    /* Failures: PMIx_Init has no server; the job size is not a uint32;
     * a rank beyond the size; get before exchange; a failing fence. */
    put8(0x84);
    save("corpus-pmix", "init-unreachable");
    put8(0), put8(0), put8(0), put8(0), put8(0), put8(4);
    save("corpus-pmix", "size-not-uint32");
    put8(0), put8(5), put8(0), put8(0), put8(0), put8(0), put8(4), put8(0);
    save("corpus-pmix", "rank-beyond-size");
    put8(0), put8(0), put8(0), put8(0), put8(0), put8(0), put8(1);
    put8(1), put8(0xff), put8(16), put8(0x81), put8(0x81);
    put8(0), put8(1), put8(0), put8(0x86);
    save("corpus-pmix", "failures");
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: fuzz_seeds <fuzz dir>\n");
        return 2;
    }
    dir = argv[1];
    oob_seeds();
    rdv_seeds();
    pmix_seeds();
    return 0;
}
