/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * libFuzzer target for the sx_run rendezvous protocol (messages in
 * src/bootstrap/oob.h), both sides of it. The first byte of an input
 * selects the side:
 *
 *   even: the launcher's server (rendezvous.c), which parses what ranks
 *         send it. A real server (sx_rdv_server_open, a job of
 *         1 + byte[1] % 4 ranks) gets the rest of the input as messages,
 *         each [u8 ctl][u8 len][len bytes] (a short last one takes what is
 *         left), handed to its RDV_PUT (ctl bit 0 clear) or RDV_FENCE
 *         (bit 0 set) handler as coming from endpoint 0x100 + ctl bits 1-2,
 *         the way its OOB endpoint would. With ctl bit 3, a PUT's size
 *         field is set to the job's size first. Its answers go nowhere
 *         (those endpoints are unknown to it), which the server tolerates
 *         as it does ranks that have exited.
 *
 *   odd:  a rank's `sxrun` modex (modex_sxrun.c), which parses what the
 *         launcher answers. byte[1] gives the job's size (1 + b % 4),
 *         byte[2] the rank (b % 5, so sometimes out of range), byte[3] the
 *         number of fences (b % 4). A fake launcher (a real OOB endpoint
 *         with id SX_OOB_ID_LAUNCHER) answers the rank's PUT and each of
 *         its FENCEs over TCP with the rest of the input, a script of
 *         replies [u8 kind][u16 len, little-endian][len bytes]: kind % 3
 *         is RDV_ALL, RDV_DONE or RDV_ERROR. It sends replies until one
 *         that ends the request (ALL or ERROR for the PUT, DONE or ERROR
 *         for a FENCE) and an RDV_ERROR when the script runs out, so no
 *         call waits for its timeout. When exchange succeeds, every
 *         rank's blob that get returns is checked against the RDV_ALL the
 *         launcher sent, split by the harness on its own.
 *
 * Every input opens its own endpoints, so it reproduces alone.
 * fuzz/make-corpus-bootstrap.sh writes the seeds (fuzz/corpus-rendezvous/)
 * from a real server's answers.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <shardx.h>

#include "bootstrap/modex.h"
#include "bootstrap/oob.h"
#include "bootstrap/rendezvous.h"
#include "bootstrap/rendezvous_int.h"
#include "common/config.h"
#include "common/le.h"

#define RANK_ID_BASE 0x100u
#define FENCE_WAIT_S 20 /* a fence whose answer is on its way never takes this long */
#define BLOB_MAX     256

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The environment of a process sx_run started (putenv keeps these). */
static char env_addr[sizeof(SX_RUN_ENV_ADDR) + SX_OOB_ADDR_MAX];
static char env_rank[sizeof(SX_RUN_ENV_RANK) + 16];
static char env_size[sizeof(SX_RUN_ENV_SIZE) + 16];

static void die(const char *what, int rc)
{
    fprintf(stderr, "fuzz_rendezvous: %s: %s\n", what, sx_strerror(rc));
    abort();
}

/* ------------------------------------------------------------ server */

static void fuzz_server(const uint8_t *data, size_t size)
{
    uint32_t job = 1 + data[1] % 4;
    sx_rdv_server_t *srv;
    int rc = sx_rdv_server_open(job, &srv);

    if (rc != SX_OK)
        die("sx_rdv_server_open", rc);
    size_t off = 2;
    int status = SX_OK;
    while (off + 2 <= size) {
        uint8_t ctl = data[off];
        size_t len = data[off + 1];
        off += 2;
        if (len > size - off)
            len = size - off;
        /* An exact-size copy, as the OOB hands a handler its payload. */
        uint8_t *msg = malloc(len ? len : 1);
        if (msg == NULL)
            abort();
        memcpy(msg, data + off, len);
        off += len;
        uint64_t peer = RANK_ID_BASE + ((ctl >> 1) & 3u);
        if (ctl & 1) {
            sx_rdv_on_fence(srv, peer, SX_OOB_TAG_RDV_FENCE, msg, len);
        } else {
            if ((ctl & 8) && len >= 8)
                sx_put32(msg + 4, job);
            sx_rdv_on_put(srv, peer, SX_OOB_TAG_RDV_PUT, msg, len);
        }
        free(msg);
        /* A failed job stays failed. */
        int now = sx_rdv_server_status(srv);
        if (status != SX_OK && now != status)
            abort();
        if (now != SX_OK && now != SX_ERR_PROTO)
            abort();
        status = now;
    }
    sx_rdv_server_close(srv);
}

/* ------------------------------------------------------------ client */

enum { REPLY_ALL, REPLY_DONE, REPLY_ERROR };

typedef struct launcher {
    sx_oob_t *oob;
    const uint8_t *script;
    size_t len, off;
    /* The first RDV_ALL sent: the one the rank's exchange receives. */
    const uint8_t *all;
    size_t all_len;
    bool sent_all;
    /* The status the first RDV_ERROR sent carries (error_status); SX_OK
     * until one is sent. */
    int error;
} launcher_t;

static const uint32_t reply_tag[] = {SX_OOB_TAG_RDV_ALL, SX_OOB_TAG_RDV_DONE, SX_OOB_TAG_RDV_ERROR};

/* What status a rank reads from an RDV_ERROR of @p len bytes: after its
 * text, a NUL and an i32 status, where the launcher says which; else
 * SX_ERR_PROTO. The harness's own reading of modex_sxrun.c's rule, which
 * keeps the first SX_MODEX_SXRUN_ERROR_MAX - 1 bytes. */
static int error_status(const uint8_t *p, size_t len)
{
    size_t n = len < SX_MODEX_SXRUN_ERROR_MAX - 1 ? len : SX_MODEX_SXRUN_ERROR_MAX - 1;
    const uint8_t *nul = memchr(p, 0, n);
    if (nul == NULL || n - (size_t)(nul - p) != 5)
        return SX_ERR_PROTO;
    int32_t code = (int32_t)sx_get32(nul + 1);
    return code < 0 && strcmp(sx_status_name(code), "unknown") != 0 ? code : SX_ERR_PROTO;
}

/* Sends script replies to @p peer until one of kind @p ends (or an
 * error) has gone; an RDV_ERROR if the script runs out first. On the
 * launcher's progress thread. */
static void launcher_answer(launcher_t *l, uint64_t peer, int ends)
{
    for (;;) {
        if (l->len - l->off < 3) {
            static const char text[] = "the fuzzer's script ended";
            struct iovec iov = {.iov_base = (void *)text, .iov_len = sizeof(text) - 1};
            if (l->error == SX_OK)
                l->error = SX_ERR_PROTO;
            sx_oob_send_nb(l->oob, peer, SX_OOB_TAG_RDV_ERROR, &iov, 1, NULL, NULL);
            return;
        }
        const uint8_t *r = l->script + l->off;
        int kind = r[0] % 3;
        size_t len = sx_get16(r + 1);
        l->off += 3;
        if (len > l->len - l->off)
            len = l->len - l->off;
        struct iovec iov = {.iov_base = (void *)(r + 3), .iov_len = len};
        l->off += len;
        if (kind == REPLY_ERROR && l->error == SX_OK)
            l->error = error_status(r + 3, len);
        int rc = sx_oob_send_nb(l->oob, peer, reply_tag[kind], &iov, 1, NULL, NULL);
        if (rc != SX_OK)
            die("launcher: sx_oob_send_nb", rc);
        if (kind == REPLY_ALL && !l->sent_all) {
            l->sent_all = true;
            l->all = r + 3;
            l->all_len = len;
        }
        if (kind == ends || kind == REPLY_ERROR)
            return;
    }
}

static void on_put(void *arg, uint64_t peer, uint32_t tag, const void *data, size_t len)
{
    (void)tag;
    (void)data;
    (void)len;
    launcher_answer(arg, peer, REPLY_ALL);
}

static void on_fence(void *arg, uint64_t peer, uint32_t tag, const void *data, size_t len)
{
    (void)tag;
    (void)data;
    (void)len;
    launcher_answer(arg, peer, REPLY_DONE);
}

typedef struct fence_wait {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int calls;
    int status;
} fence_wait_t;

static void on_fence_done(void *arg, int status)
{
    fence_wait_t *w = arg;

    pthread_mutex_lock(&w->lock);
    w->calls++;
    w->status = status;
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

/* The harness's own reading of an RDV_ALL: rank @p rank's blob, or false
 * if the message is not a well-formed one for a job of @p job ranks. */
static bool split_all(const uint8_t *p, size_t len, uint32_t job, uint32_t rank,
                      const uint8_t **blob_p, size_t *blen_p)
{
    if (len < 4 || sx_get32(p) != job)
        return false;
    size_t off = 4;
    for (uint32_t r = 0; r < job; r++) {
        if (len - off < 4)
            return false;
        size_t blen = sx_get32(p + off);
        off += 4;
        if (blen > len - off)
            return false;
        if (r == rank) {
            *blob_p = p + off;
            *blen_p = blen;
        }
        off += blen;
    }
    return off == len;
}

static void check_blobs(sx_modex_t *m, const launcher_t *l, uint32_t job)
{
    static uint8_t buf[1u << 16];

    for (uint32_t r = 0; r < job; r++) {
        const uint8_t *want = NULL;
        size_t want_len = 0;
        if (!l->sent_all || !split_all(l->all, l->all_len, job, r, &want, &want_len))
            abort(); /* exchange accepted an RDV_ALL the harness does not */
        size_t len = 0;
        int rc = m->ops->get(m, r, NULL, &len);
        if (want_len > 0 ? rc != SX_ERR_TRUNCATED || len != want_len : rc != SX_OK || len != 0)
            abort(); /* a zero-byte buffer: the blob's size, or the empty blob */
        len = sizeof(buf);
        rc = m->ops->get(m, r, buf, &len);
        if (rc != SX_OK || len != want_len || (len > 0 && memcmp(buf, want, len) != 0))
            abort(); /* not the blob the launcher sent */
    }
    size_t len = sizeof(buf);
    if (m->ops->get(m, job, buf, &len) != SX_ERR_OUT_OF_RANGE)
        abort();
}

static void fuzz_client(const uint8_t *data, size_t size)
{
    if (size < 4)
        return;
    uint32_t job = 1 + data[1] % 4, rank = data[2] % 5;
    int fences = data[3] % 4;
    launcher_t l = {.script = data + 4, .len = size - 4};
    sx_oob_t *oob;
    char addr[SX_OOB_ADDR_MAX];

    int rc = sx_oob_open(SX_OOB_ID_LAUNCHER, "127.0.0.1", 0, &l.oob);
    if (rc != SX_OK)
        die("sx_oob_open (launcher)", rc);
    if ((rc = sx_oob_handler_set(l.oob, SX_OOB_TAG_RDV_PUT, on_put, &l)) != SX_OK ||
        (rc = sx_oob_handler_set(l.oob, SX_OOB_TAG_RDV_FENCE, on_fence, &l)) != SX_OK)
        die("sx_oob_handler_set", rc);
    sx_oob_address(l.oob, addr, sizeof(addr));
    rc = sx_oob_open(RANK_ID_BASE + rank, "127.0.0.1", 0, &oob);
    if (rc != SX_OK)
        die("sx_oob_open (rank)", rc);

    /* What sx_run tells the processes it starts. The strings were given
     * to putenv once and are rewritten in place: setenv would allocate
     * on every input, and libFuzzer answers any input that allocates more
     * than it frees with a whole leak scan, which would cost most of the
     * time. */
    snprintf(env_addr, sizeof(env_addr), "%s=%s", SX_RUN_ENV_ADDR, addr);
    snprintf(env_rank, sizeof(env_rank), "%s=%u", SX_RUN_ENV_RANK, rank);
    snprintf(env_size, sizeof(env_size), "%s=%u", SX_RUN_ENV_SIZE, job);

    sx_modex_t *m = NULL;
    rc = sx_modex_open(SX_MODEX_SXRUN, oob, &m);
    if (rc == SX_OK) {
        if (m->rank != rank || m->size != job)
            abort();
        uint8_t blob[BLOB_MAX];
        size_t blen = 8 + rank * 17 % BLOB_MAX;
        for (size_t i = 0; i < blen; i++)
            blob[i] = (uint8_t)(i * 31 + rank);
        rc = m->ops->exchange(m, blob, blen);
        if (rc == SX_OK)
            check_blobs(m, &l, job);
        else if (rc != SX_ERR_PROTO && rc != l.error)
            die("exchange", rc); /* the launcher answered: PROTO, or the status it sent */

        fence_wait_t w = {.calls = 0};
        pthread_mutex_init(&w.lock, NULL);
        pthread_cond_init(&w.cond, NULL);
        for (int i = 0; i < fences; i++) {
            pthread_mutex_lock(&w.lock);
            int before = w.calls;
            pthread_mutex_unlock(&w.lock);
            rc = m->ops->fence_nb(m, on_fence_done, &w);
            pthread_mutex_lock(&w.lock);
            if (rc == SX_OK) {
                struct timespec until;
                clock_gettime(CLOCK_REALTIME, &until);
                until.tv_sec += FENCE_WAIT_S;
                while (w.calls == before &&
                       pthread_cond_timedwait(&w.cond, &w.lock, &until) != ETIMEDOUT)
                    ;
                if (w.calls != before + 1)
                    abort(); /* the answer came, yet the fence never completed */
            } else if (w.calls != before) {
                abort(); /* refused, yet its callback ran */
            }
            pthread_mutex_unlock(&w.lock);
        }
        /* Every fence has completed, so none can call back after this. */
        sx_modex_close(m);
        pthread_cond_destroy(&w.cond);
        pthread_mutex_destroy(&w.lock);
    } else if (rank < job) {
        die("sx_modex_open", rc);
    }
    sx_oob_close(oob);
    sx_oob_close(l.oob);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    snprintf(env_addr, sizeof(env_addr), "%s=", SX_RUN_ENV_ADDR);
    snprintf(env_rank, sizeof(env_rank), "%s=", SX_RUN_ENV_RANK);
    snprintf(env_size, sizeof(env_size), "%s=", SX_RUN_ENV_SIZE);
    if (putenv(env_addr) != 0 || putenv(env_rank) != 0 || putenv(env_size) != 0)
        abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    if (data[0] & 1)
        fuzz_client(data, size);
    else
        fuzz_server(data, size);
    return 0;
}
