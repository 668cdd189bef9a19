/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * libFuzzer target for the `pmix` modex (src/bootstrap/modex_pmix.c):
 * what it makes of the values and statuses a PMIx server hands back (the
 * job's size, our rank, every rank's business card, the fences' results).
 * No server is needed: this file defines the PMIx client calls the
 * backend makes (PMIx_Init, _Get, _Put, _Commit, _Fence, _Fence_nb,
 * _Finalize), and a definition in the executable takes precedence over
 * libpmix's, so the real backend, unchanged, talks to this fake. The
 * fake's answers come from the input, read front to back as the calls
 * happen; when it runs out, every byte reads as 0 (success, small values).
 * The helpers the backend uses on those answers (PMIx_Value_destruct,
 * PMIx_Info_load, the *_string functions) are libpmix's own.
 *
 * Each input opens the modex, exchanges a card, gets up to four ranks'
 * cards into buffers of fuzzed sizes, runs up to three fences and closes
 * it. Checked on the way: rank and size are what PMIx said; a card that
 * get returns is byte for byte the one PMIx handed over, and a truncated
 * one reports its size; a fence's callback runs once exactly when
 * fence_nb returned SX_OK; PMIx_Finalize is called once per successful
 * PMIx_Init.
 *
 * fuzz/make-corpus-bootstrap.sh writes the seeds (fuzz/corpus-pmix/): a
 * job of four with real cards, and the failures a server can report.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pmix.h>

#include <shardx.h>

#include "bootstrap/modex.h"
#include "common/config.h"
#include "common/log.h"

#define CARD_MAX  4096
#define GETS_MAX  4
#define FENCE_MAX 3

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* ------------------------------------------------------------ input */

static const uint8_t *in;
static size_t in_len, in_off;

static uint8_t take8(void)
{
    return in_off < in_len ? in[in_off++] : 0;
}

static uint32_t take32(void)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)take8() << (8 * i);
    return v;
}

/* A status: mostly success, else one the backend maps, else any. */
static pmix_status_t take_status(void)
{
    static const pmix_status_t st[] = {
        PMIX_ERR_NOMEM,         PMIX_ERR_NOT_FOUND, PMIX_ERR_BAD_PARAM,
        PMIX_ERR_NOT_SUPPORTED, PMIX_ERR_UNREACH,   PMIX_ERR_INIT,
        PMIX_ERR_TIMEOUT,       PMIX_ERROR,         PMIX_ERR_LOST_CONNECTION};
    uint8_t b = take8();
    if (b < 0x80)
        return PMIX_SUCCESS;
    if (b < 0x80 + sizeof(st) / sizeof(st[0]))
        return st[b - 0x80];
    return -(pmix_status_t)b; /* an error the backend knows nothing of */
}

/* ------------------------------------------------------------ the fake */

static int init_refs;      /* successful PMIx_Init not yet finalized */
static uint32_t fake_rank; /* what PMIx_Init said */
static uint32_t fake_size; /* what PMIx_Get(PMIX_JOB_SIZE) said, if a uint32 */
static bool size_ok;
/* The last card PMIx_Get handed out, to compare with what get copied. */
static uint8_t card[CARD_MAX];
static size_t card_len;
static bool card_given;
/* A PMIx_Fence_nb that PMIx "owns": completed by the harness afterwards,
 * as the PMIx progress thread would. */
static pmix_op_cbfunc_t fence_cb;
static void *fence_cbdata;
static pmix_status_t fence_status;

pmix_status_t PMIx_Init(pmix_proc_t *proc, pmix_info_t info[], size_t ninfo)
{
    (void)info;
    (void)ninfo;
    pmix_status_t rc = take_status();
    if (rc != PMIX_SUCCESS)
        return rc;
    uint8_t b = take8();
    /* Mostly small ranks, sometimes any, sometimes a wildcard. */
    fake_rank = b < 0xf0 ? b % 8u : b == 0xff ? PMIX_RANK_WILDCARD : take32();
    memset(proc, 0, sizeof(*proc));
    snprintf(proc->nspace, sizeof(proc->nspace), "fuzz-%u", take8());
    proc->rank = fake_rank;
    init_refs++;
    return PMIX_SUCCESS;
}

pmix_status_t PMIx_Finalize(const pmix_info_t info[], size_t ninfo)
{
    (void)info;
    (void)ninfo;
    if (--init_refs < 0)
        abort(); /* finalized more often than initialised */
    return take_status();
}

/* A value of one of the types a server could answer with. Allocated as
 * PMIx does, so that PMIX_VALUE_RELEASE frees it. */
static pmix_value_t *take_value(bool is_card)
{
    pmix_value_t *v = calloc(1, sizeof(*v));
    if (v == NULL)
        abort();
    uint8_t t = take8();
    /* The expected type first, so that most inputs get past the check. */
    switch (t % 8) {
    case 0:
    case 1:
    case 2:
        if (is_card) {
            size_t len = take8();
            if (len == 0xff)
                len = take32() % CARD_MAX;
            v->type = PMIX_BYTE_OBJECT;
            v->data.bo.size = len;
            v->data.bo.bytes = malloc(len ? len : 1);
            if (v->data.bo.bytes == NULL)
                abort();
            for (size_t i = 0; i < len; i++)
                card[i] = (uint8_t)(v->data.bo.bytes[i] = (char)take8());
            card_len = len;
            card_given = true;
            if (t % 8 == 2) { /* an empty object PMIx left without a buffer */
                free(v->data.bo.bytes);
                v->data.bo.bytes = NULL;
                v->data.bo.size = 0;
                card_len = 0;
            }
        } else {
            uint8_t b = take8();
            v->type = PMIX_UINT32;
            v->data.uint32 = b < 0xf0 ? b % 9u : take32();
            fake_size = v->data.uint32;
            size_ok = true;
        }
        break;
    case 3:
        v->type = is_card ? PMIX_UINT32 : PMIX_BYTE_OBJECT;
        if (!is_card) {
            v->data.bo.bytes = strdup("4");
            v->data.bo.size = 1;
        } else {
            v->data.uint32 = take32();
        }
        break;
    case 4:
        v->type = PMIX_STRING;
        v->data.string = strdup("4");
        break;
    case 5:
        v->type = PMIX_UINT64;
        v->data.uint64 = take32();
        break;
    case 6:
        v->type = PMIX_INT;
        v->data.integer = (int)take32();
        break;
    default:
        v->type = PMIX_UNDEF;
        break;
    }
    return v;
}

pmix_status_t PMIx_Get(const pmix_proc_t *proc, const char key[], const pmix_info_t info[],
                       size_t ninfo, pmix_value_t **val)
{
    (void)proc;
    (void)info;
    (void)ninfo;
    bool is_card = strcmp(key, PMIX_JOB_SIZE) != 0;
    pmix_status_t rc = take_status();
    uint8_t how = take8();
    /* Usually a value with success, sometimes a value with an error (the
     * backend must still release it) or success without one. */
    if ((rc == PMIX_SUCCESS) != (how % 8 == 7)) {
        *val = take_value(is_card);
        if (rc != PMIX_SUCCESS) /* not an answer the backend may use */
            card_given = size_ok = false;
    } else {
        *val = NULL;
    }
    return rc;
}

pmix_status_t PMIx_Put(pmix_scope_t scope, const char key[], pmix_value_t *val)
{
    if (scope != PMIX_GLOBAL || key == NULL || val == NULL || val->type != PMIX_BYTE_OBJECT)
        abort(); /* not the card as the backend publishes it */
    /* PMIx copies the value: read all of it. */
    volatile char sum = 0;
    for (size_t i = 0; i < val->data.bo.size; i++)
        sum = (char)(sum + val->data.bo.bytes[i]);
    (void)sum;
    return take_status();
}

pmix_status_t PMIx_Commit(void)
{
    return take_status();
}

pmix_status_t PMIx_Fence(const pmix_proc_t procs[], size_t nprocs, const pmix_info_t info[],
                         size_t ninfo)
{
    (void)procs;
    (void)info;
    if (nprocs != 1 || ninfo != 1)
        abort();
    return take_status();
}

pmix_status_t PMIx_Fence_nb(const pmix_proc_t procs[], size_t nprocs, const pmix_info_t info[],
                            size_t ninfo, pmix_op_cbfunc_t cbfunc, void *cbdata)
{
    (void)procs;
    (void)nprocs;
    (void)info;
    (void)ninfo;
    uint8_t b = take8();
    if (b % 4 == 3)
        return PMIX_OPERATION_SUCCEEDED; /* done at once: no callback */
    pmix_status_t rc = take_status();
    if (rc != PMIX_SUCCESS)
        return rc;
    fence_cb = cbfunc;
    fence_cbdata = cbdata;
    fence_status = b % 4 == 2 ? PMIX_ERR_TIMEOUT : PMIX_SUCCESS;
    return PMIX_SUCCESS;
}

/* ------------------------------------------------------------ harness */

static int fence_calls;

static void on_fence(void *arg, int status)
{
    (void)arg;
    (void)status;
    fence_calls++;
}

/* What PMIx puts in the environment of the processes it starts: detect()
 * looks for it. putenv keeps these strings. */
static char env_rank[] = "PMIX_RANK=0";
static char env_nspace[] = "PMIX_NAMESPACE=fuzz";

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    if (putenv(env_rank) != 0 || putenv(env_nspace) != 0)
        abort();
    /* Nothing on this path opens an engine or an OOB endpoint, which is
     * where SX_LOG_LEVEL and SX_LOG_FILE are otherwise read. */
    sx_log_init_from_env();
    return 0;
}

static void get_cards(sx_modex_t *m)
{
    static uint8_t buf[CARD_MAX];
    uint32_t n = m->size < GETS_MAX ? m->size : GETS_MAX;

    for (uint32_t r = 0; r <= n; r++) {
        /* One rank past the end too: out of range, or the last. */
        uint32_t rank = r < n ? r : m->size;
        uint8_t b = take8();
        size_t len = b == 0xff ? sizeof(buf) : b;
        card_given = false;
        int rc = m->ops->get(m, rank, len > 0 ? buf : NULL, &len);
        if (rc == SX_OK) {
            if (!card_given || len != card_len || (len > 0 && memcmp(buf, card, len) != 0))
                abort(); /* not the card PMIx handed over */
        } else if (rc == SX_ERR_TRUNCATED) {
            if (!card_given || len != card_len)
                abort(); /* truncated, but not told the card's size */
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    in = data;
    in_len = size;
    in_off = 0;
    init_refs = 0;
    size_ok = false;
    fence_cb = NULL;
    fence_calls = 0;

    sx_modex_t *m = NULL;
    int rc = sx_modex_open(SX_MODEX_PMIX, NULL, &m);
    if (rc != SX_OK) {
        if (init_refs != 0)
            abort(); /* init failed after PMIx_Init, without PMIx_Finalize */
        return 0;
    }
    if (!size_ok || m->rank != fake_rank || m->size != fake_size || m->rank >= m->size)
        abort(); /* rank and size are not what PMIx said */

    /* The first get comes before the exchange when the input says so. */
    if (take8() & 1)
        get_cards(m);
    uint8_t blob[64];
    size_t blen = take8() % sizeof(blob);
    memset(blob, 0x5a, blen);
    rc = m->ops->exchange(m, blen > 0 ? blob : NULL, blen);
    get_cards(m);

    int fences = take8() % (FENCE_MAX + 1), accepted = 0;
    for (int i = 0; i < fences; i++) {
        fence_cb = NULL;
        rc = m->ops->fence_nb(m, on_fence, NULL);
        if (rc == SX_OK)
            accepted++;
        if (fence_cb != NULL) {
            pmix_op_cbfunc_t cb = fence_cb;
            fence_cb = NULL;
            cb(fence_status, fence_cbdata);
        }
        if (fence_calls != accepted)
            abort(); /* a fence completed twice, never, or after failing */
    }
    sx_modex_close(m);
    if (init_refs != 0)
        abort(); /* PMIx_Init without its PMIx_Finalize */
    return 0;
}
