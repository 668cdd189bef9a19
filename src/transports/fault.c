/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * fault: a decorator that injects loss, duplication, reordering, corruption
 * and delay into any other transport, for reliability tests (DESIGN.md
 * section 7).
 *
 * The specification (config->fault, SX_FAULT) is a comma-separated list of
 * key=value items, each key at most once, no spaces:
 *
 *   loss=P              drop a datagram with probability P
 *   ctrl_loss=P         also drop a control datagram with probability P
 *   dup=P               send a datagram twice
 *   reorder=P           hold a datagram back until the next one to the same
 *                       destination has gone out (or the next poll); with
 *                       probability P while none to that destination is
 *                       held (one at a time: the draws of a hold's datagrams
 *                       are spent), so fewer than a share P come late
 *   reorder_us=N        ... instead for N microseconds or a little longer,
 *                       however many go out meanwhile (the first post or
 *                       poll once it is due releases it): a datagram late
 *                       by more than the reordering RACK allows, so that
 *                       its resend was not needed (needs reorder)
 *   corrupt=P           flip one random bit of a private copy (never of the
 *                       caller's buffer); a 0-byte datagram has no bit to flip
 *   delay_us=N          hold every datagram N microseconds; poll releases it
 *   stall_us=N          return from every post that sent a datagram N
 *                       microseconds after the inner transport took them,
 *                       as a sendmmsg(2) that the scheduler stopped before it
 *                       returned would: the peer may answer before the call
 *                       returns (test_am's test_batch_send_time_before_call)
 *   seed=N              PRNG seed (decimal or 0x hex; default 0)
 *   blackhole=S+D       drop everything sent from S ms to S+D ms after the
 *                       interface's first datagram, sent or received
 *   ctrl_blackout=S+D   drop control datagrams sent in that window
 *   path_mtu=N          drop every datagram longer than N bytes, as a link
 *                       with a smaller MTU on the path would (no PRNG draw)
 *   path_mtu_after=N    ... only after the first N datagrams: a path that
 *                       shrinks under an established channel (needs path_mtu)
 *   tx_credits=N        advertise N send credits (fewer than the inner
 *                       transport's), so the layer above must ration them
 *   ce=P                on receipt, mark an ECN-capable datagram (ECT(0) or
 *                       ECT(1) in the event's ecn) CE with probability P, as
 *                       a router that marks instead of dropping would
 *
 * Why the windows count from the first datagram, not from open: an engine
 * opens its interfaces at sx_engine_create, and how long its peers take to
 * start and reach it is the launcher's and the machine's (a second or more
 * to load libfabric's providers on a loaded machine). A window counted from
 * open could pass before the first peer said anything; one counted from the
 * first datagram covers the same stretch of the conversation whatever the
 * start-up took.
 *
 * P is a decimal probability in [0, 1]. "Control" is what
 * config->is_control says of a datagram's iov[0] (NULL: nothing is); the
 * wire header must therefore sit whole in iov[0].
 *
 * Determinism: each interface has its own xoshiro256** generator (Blackman
 * and Vigna, "Scrambled linear pseudorandom number generators", 2018)
 * seeded through splitmix64 from `seed` and the shard index. Every datagram
 * draws one number per configured probability, in a fixed order, whatever
 * the outcome, plus one for the bit position when corrupt is set; so the
 * same seed and the same sequence of sends give the same decisions, and
 * adding, say, a blackhole window does not shift the loss pattern. A send
 * refused by the inner transport (SX_ERR_AGAIN) rolls the generator back.
 * ce draws from a second generator (rx_rng), once per ECN-capable datagram
 * received, so receiving never shifts the send side's pattern.
 *
 * What is supported: inner transports with caps.sync_send (udp, self, ofi). The
 * decorator then copies only what it holds (reordered, delayed) or changes
 * (corrupted); everything else goes straight through. An inner transport
 * without sync_send is refused at open with SX_ERR_UNSUPPORTED. Faults are
 * applied on the send side, but for ce: poll passes the inner events
 * through, with ce the ECN field of some rewritten.
 *
 * wait_fds are the inner ones: they do not wake for a delayed or held
 * datagram falling due. An owner that sleeps on them must also wake for its
 * timers (the shard's timer wheel does), or poll now and then.
 *
 * Datagrams held or delayed when their destination is removed, or when
 * the interface closes, are dropped, as a network drops what is in flight
 * to a host that left: the destination's slot may go to another peer.
 */
#include "transports/transport.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <shardx.h>

#include "common/log.h"
#include "common/time.h"

#define FAULT_DELAY_US_MAX  60000000ull /* one minute */
#define FAULT_WINDOW_MS_MAX 86400000ull /* one day */

/* A datagram the decorator keeps: held for reorder, queued for delay, or
 * a corrupted copy on its way out. */
typedef struct fault_pkt {
    struct fault_pkt *next;
    uint64_t due_ns;
    sx_tl_dest_t dest;
    unsigned copies; /* 2 when it is also to be duplicated */
    size_t len;
    uint8_t data[];
} fault_pkt_t;

typedef struct fault_spec {
    double loss, ctrl_loss, dup, reorder, corrupt, ce;
    uint64_t delay_ns;
    uint64_t reorder_ns; /* 0: until the next datagram */
    uint64_t stall_ns;   /* 0: off */
    uint64_t seed;
    bool blackhole, ctrl_blackout;
    uint64_t path_mtu;       /* 0: off */
    uint64_t path_mtu_after; /* datagrams that pass before path_mtu applies */
    uint64_t tx_credits;     /* 0: the inner transport's */
    uint64_t blackhole_start_ns, blackhole_end_ns;
    uint64_t ctrl_blackout_start_ns, ctrl_blackout_end_ns;
} fault_spec_t;

typedef struct fault_iface {
    sx_tl_iface_t base;
    sx_tl_iface_t *inner;
    fault_spec_t spec;
    int (*is_control)(const void *data, size_t len);
    uint64_t t0_ns; /* the first datagram sent or received; 0: none yet */
    uint64_t rng[4];
    uint64_t rx_rng[4];                   /* ce's */
    fault_pkt_t *held;                    /* reorder: at most one per destination */
    fault_pkt_t *delay_head, *delay_tail; /* FIFO; the delay is uniform, so FIFO is due order */
    uint8_t *live;                        /* live[dest]: inserted and not removed */
    uint32_t nlive;
    sx_tl_fault_stats_t fstats;
} fault_iface_t;

/* ------------------------------------------------------------------ */
/* PRNG                                                                */

static uint64_t fault_splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t fault_rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t fault_next_of(uint64_t *s)
{
    uint64_t result = fault_rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;

    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = fault_rotl(s[3], 45);
    return result;
}

static uint64_t fault_next(fault_iface_t *f)
{
    return fault_next_of(f->rng);
}

/* One Bernoulli(p) trial; draws only when p is configured, so that an
 * unset fault costs nothing and does not consume the stream. */
static bool fault_draw(fault_iface_t *f, double p)
{
    if (p <= 0.0)
        return false;
    /* The top 53 bits give a uniform double in [0, 1). */
    double u = (double)(fault_next(f) >> 11) * 0x1.0p-53;
    return u < p;
}

/* ------------------------------------------------------------------ */
/* Specification                                                       */

static int fault_bad(const char *key, const char *value, const char *allowed)
{
    sx_error("fault", "SX_FAULT: key '%s' has value '%s'; allowed: %s", key, value, allowed);
    return SX_ERR_INVALID_PARAM;
}

static int fault_parse_prob(const char *key, const char *value, double *out)
{
    char *end = NULL;

    /* strtod alone would take "inf", "nan", hex floats and leading blanks:
     * allow a decimal number only. */
    if (((value[0] < '0' || value[0] > '9') && value[0] != '.') ||
        value[strspn(value, "0123456789.eE+-")] != '\0')
        return fault_bad(key, value, "a probability in [0, 1], e.g. 0.05");
    errno = 0;
    double p = strtod(value, &end);
    if (errno != 0 || *end != '\0' || !isfinite(p) || p < 0.0 || p > 1.0)
        return fault_bad(key, value, "a probability in [0, 1], e.g. 0.05");
    *out = p;
    return SX_OK;
}

/* Parses a decimal or 0x-hex unsigned integer up to @p max, ending at
 * @p stop (or the end of the string). */
static int fault_parse_uint(const char *text, char stop, uint64_t max, uint64_t *out,
                            const char **end_p)
{
    char *end = NULL;

    if (text[0] < '0' || text[0] > '9')
        return SX_ERR_INVALID_PARAM;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 0);
    if (errno != 0 || end == text || *end != stop || v > max)
        return SX_ERR_INVALID_PARAM;
    *out = v;
    if (end_p != NULL)
        *end_p = end;
    return SX_OK;
}

/* delay_us and stall_us: microseconds up to FAULT_DELAY_US_MAX, as ns. */
static int fault_parse_us(const char *key, const char *value, uint64_t *ns_p)
{
    uint64_t v;

    if (fault_parse_uint(value, '\0', FAULT_DELAY_US_MAX, &v, NULL) != SX_OK)
        return fault_bad(key, value, "microseconds, an integer from 0 to 60000000");
    *ns_p = v * 1000u;
    return SX_OK;
}

static int fault_parse_window(const char *key, const char *value, uint64_t *start_ns,
                              uint64_t *end_ns)
{
    const char *plus = NULL;
    uint64_t start, dur;
    static const char allowed[] = "START_MS+DURATION_MS, two integers up to 86400000";

    if (fault_parse_uint(value, '+', FAULT_WINDOW_MS_MAX, &start, &plus) != SX_OK ||
        fault_parse_uint(plus + 1, '\0', FAULT_WINDOW_MS_MAX, &dur, NULL) != SX_OK)
        return fault_bad(key, value, allowed);
    *start_ns = start * 1000000u;
    *end_ns = (start + dur) * 1000000u;
    return SX_OK;
}

/* Parses one key=value item. @p seen has one bit per key, for duplicates. */
static int fault_parse_item(const char *key, const char *value, fault_spec_t *spec, unsigned *seen)
{
    static const char *const keys[] = {
        "loss",       "ctrl_loss",      "dup",       "reorder",       "corrupt",
        "delay_us",   "seed",           "blackhole", "ctrl_blackout", "path_mtu",
        "tx_credits", "path_mtu_after", "ce",        "stall_us",      "reorder_us"};
    unsigned k;

    for (k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
        if (strcmp(key, keys[k]) == 0)
            break;
    }
    if (k == sizeof(keys) / sizeof(keys[0]))
        return fault_bad(key, value,
                         "the keys loss, ctrl_loss, dup, reorder, corrupt, delay_us, seed, "
                         "blackhole, ctrl_blackout, path_mtu, tx_credits, path_mtu_after, ce, "
                         "stall_us, reorder_us");
    if (*seen & (1u << k))
        return fault_bad(key, value, "each key at most once");
    *seen |= 1u << k;

    switch (k) {
    case 0:
        return fault_parse_prob(key, value, &spec->loss);
    case 1:
        return fault_parse_prob(key, value, &spec->ctrl_loss);
    case 2:
        return fault_parse_prob(key, value, &spec->dup);
    case 3:
        return fault_parse_prob(key, value, &spec->reorder);
    case 4:
        return fault_parse_prob(key, value, &spec->corrupt);
    case 5:
        return fault_parse_us(key, value, &spec->delay_ns);
    case 6:
        if (fault_parse_uint(value, '\0', UINT64_MAX, &spec->seed, NULL) != SX_OK)
            return fault_bad(key, value, "an unsigned 64-bit integer, decimal or 0x hex");
        return SX_OK;
    case 7:
        spec->blackhole = true;
        return fault_parse_window(key, value, &spec->blackhole_start_ns, &spec->blackhole_end_ns);
    case 9:
        if (fault_parse_uint(value, '\0', UINT32_MAX, &spec->path_mtu, NULL) != SX_OK ||
            spec->path_mtu == 0)
            return fault_bad(key, value, "bytes, an integer from 1 to 4294967295");
        return SX_OK;
    case 10:
        if (fault_parse_uint(value, '\0', 65536, &spec->tx_credits, NULL) != SX_OK ||
            spec->tx_credits == 0)
            return fault_bad(key, value, "credits, an integer from 1 to 65536");
        return SX_OK;
    case 11:
        if (fault_parse_uint(value, '\0', UINT64_MAX, &spec->path_mtu_after, NULL) != SX_OK)
            return fault_bad(key, value, "datagrams, an unsigned 64-bit integer");
        return SX_OK;
    case 12:
        return fault_parse_prob(key, value, &spec->ce);
    case 13:
        return fault_parse_us(key, value, &spec->stall_ns);
    case 14:
        return fault_parse_us(key, value, &spec->reorder_ns);
    default:
        spec->ctrl_blackout = true;
        return fault_parse_window(key, value, &spec->ctrl_blackout_start_ns,
                                  &spec->ctrl_blackout_end_ns);
    }
}

static int fault_parse(const char *text, fault_spec_t *spec)
{
    memset(spec, 0, sizeof(*spec));
    if (text == NULL || text[0] == '\0')
        return SX_OK; /* no faults: a plain pass-through */

    char *copy = strdup(text);
    if (copy == NULL)
        return SX_ERR_NO_MEMORY;
    unsigned seen = 0;
    int status = SX_OK;
    char *item = copy;
    for (;;) {
        char *comma = strchr(item, ',');
        if (comma != NULL)
            *comma = '\0';
        char *eq = strchr(item, '=');
        if (eq == NULL || eq == item || eq[1] == '\0') {
            sx_error("fault",
                     "SX_FAULT: item '%s' of '%s' is not key=value; allowed: "
                     "comma-separated key=value items, e.g. loss=0.05,seed=7",
                     item, text);
            status = SX_ERR_INVALID_PARAM;
            break;
        }
        *eq = '\0';
        status = fault_parse_item(item, eq + 1, spec, &seen);
        if (status != SX_OK || comma == NULL)
            break;
        item = comma + 1;
    }
    free(copy);
    if (status == SX_OK && (seen & (1u << 11)) && spec->path_mtu == 0) {
        sx_error("fault", "SX_FAULT: path_mtu_after in '%s' needs path_mtu (the size it applies)",
                 text);
        status = SX_ERR_INVALID_PARAM;
    }
    if (status == SX_OK && (seen & (1u << 14)) && spec->reorder <= 0.0) {
        sx_error("fault", "SX_FAULT: reorder_us in '%s' needs reorder (which datagrams it holds)",
                 text);
        status = SX_ERR_INVALID_PARAM;
    }
    return status;
}

/* ------------------------------------------------------------------ */
/* Held and delayed datagrams                                          */

static fault_pkt_t *fault_copy(const sx_tl_tx_t *tx, size_t len, unsigned copies)
{
    fault_pkt_t *p = malloc(sizeof(*p) + len);
    size_t off = 0;

    if (p == NULL)
        return NULL;
    p->next = NULL;
    p->due_ns = 0;
    p->dest = tx->dest;
    p->copies = copies;
    p->len = len;
    for (unsigned i = 0; i < tx->iovcnt; i++) {
        if (tx->iov[i].iov_len > 0)
            memcpy(p->data + off, tx->iov[i].iov_base, tx->iov[i].iov_len);
        off += tx->iov[i].iov_len;
    }
    return p;
}

static void fault_free_list(fault_pkt_t *p)
{
    while (p != NULL) {
        fault_pkt_t *next = p->next;
        free(p);
        p = next;
    }
}

/* Posts @p copies identical datagrams to the inner interface. SX_OK when
 * at least the first was taken: a duplicate the inner interface had no
 * room for is simply not sent, and not counted. */
static int fault_inner_send(fault_iface_t *f, const sx_tl_tx_t *tx, unsigned copies)
{
    sx_tl_tx_t txs[2] = {*tx, *tx};
    unsigned posted = 0;
    int rc = f->inner->ops->post_send(f->inner, txs, copies, &posted);

    if (posted == 2)
        f->fstats.duplicated++;
    return posted > 0 ? SX_OK : rc;
}

static sx_tl_tx_t fault_pkt_tx(const fault_pkt_t *p)
{
    sx_tl_tx_t tx = {.dest = p->dest, .iovcnt = 1};
    tx.iov[0] = (struct iovec){.iov_base = (void *)p->data, .iov_len = p->len};
    return tx;
}

/*
 * Sends a datagram on, through the delay queue when delay_us is set.
 * Takes ownership of @p pkt when it is not NULL (then @p tx describes it);
 * otherwise copies @p tx if it must keep it. SX_ERR_AGAIN or an inner
 * error leaves @p pkt with the caller.
 */
static int fault_emit(fault_iface_t *f, const sx_tl_tx_t *tx, size_t len, unsigned copies,
                      fault_pkt_t *pkt)
{
    if (f->spec.delay_ns > 0) {
        if (pkt == NULL && (pkt = fault_copy(tx, len, copies)) == NULL)
            return SX_ERR_NO_MEMORY;
        pkt->copies = copies;
        pkt->due_ns = sx_time_ns() + f->spec.delay_ns;
        pkt->next = NULL;
        if (f->delay_tail != NULL)
            f->delay_tail->next = pkt;
        else
            f->delay_head = pkt;
        f->delay_tail = pkt;
        f->fstats.delayed++;
        return SX_OK;
    }
    int rc = fault_inner_send(f, tx, copies);
    if (rc == SX_OK)
        free(pkt); /* the inner transport is sync_send: done with the bytes */
    return rc;
}

/* Releases held datagrams (all of them, or those for @p dest only) that
 * are due at @p now: any with reorder_us unset. */
static void fault_release_held(fault_iface_t *f, bool all, sx_tl_dest_t dest, uint64_t now)
{
    fault_pkt_t **pp = &f->held;

    while (*pp != NULL) {
        fault_pkt_t *p = *pp;
        if ((!all && p->dest != dest) || sx_u64_before(now, p->due_ns)) {
            pp = &p->next;
            continue;
        }
        sx_tl_tx_t tx = fault_pkt_tx(p);
        fault_pkt_t *next = p->next;
        int rc = fault_emit(f, &tx, p->len, p->copies, p);
        if (rc == SX_ERR_AGAIN || rc == SX_ERR_NO_MEMORY) {
            pp = &p->next; /* keep it; the next poll tries again */
            continue;
        }
        if (rc != SX_OK) {
            sx_debug("fault", "dropping a held datagram: %s", sx_strerror(rc));
            free(p);
        }
        *pp = next;
    }
}

/* Releases the delayed datagrams that are due. */
static void fault_release_delayed(fault_iface_t *f, uint64_t now)
{
    while (f->delay_head != NULL && sx_u64_before_eq(f->delay_head->due_ns, now)) {
        fault_pkt_t *p = f->delay_head;
        sx_tl_tx_t tx = fault_pkt_tx(p);
        int rc = fault_inner_send(f, &tx, p->copies);
        if (rc == SX_ERR_AGAIN)
            return;
        if (rc != SX_OK)
            sx_debug("fault", "dropping a delayed datagram: %s", sx_strerror(rc));
        f->delay_head = p->next;
        if (f->delay_head == NULL)
            f->delay_tail = NULL;
        free(p);
    }
}

/* ------------------------------------------------------------------ */
/* Sending                                                             */

static bool fault_in_window(uint64_t elapsed, uint64_t start, uint64_t end)
{
    return elapsed >= start && elapsed < end;
}

/* Time since the interface's first datagram, which starts the timed
 * windows (the file comment says why); @p now_ns is the current time. */
static uint64_t fault_elapsed(fault_iface_t *f, uint64_t now_ns)
{
    if (f->t0_ns == 0)
        f->t0_ns = now_ns;
    return now_ns - f->t0_ns;
}

/*
 * Decides the fate of one datagram and carries it out. Draws from the PRNG
 * first and acts afterwards, so that the caller can roll the generator
 * back when the inner transport refuses the datagram.
 */
static int fault_send_one(fault_iface_t *f, const sx_tl_tx_t *tx, size_t len)
{
    const fault_spec_t *sp = &f->spec;
    bool ctrl = false;

    if (f->is_control != NULL)
        ctrl = tx->iovcnt > 0 ? f->is_control(tx->iov[0].iov_base, tx->iov[0].iov_len) != 0
                              : f->is_control("", 0) != 0;

    bool lost = fault_draw(f, sp->loss);
    bool ctrl_lost = fault_draw(f, sp->ctrl_loss) && ctrl;
    bool dup = fault_draw(f, sp->dup);
    bool reorder = fault_draw(f, sp->reorder);
    bool corrupt = fault_draw(f, sp->corrupt) && len > 0;
    uint64_t bit = sp->corrupt > 0.0 ? fault_next(f) : 0;

    uint64_t now = sx_time_ns();
    uint64_t elapsed = fault_elapsed(f, now);
    if (sp->blackhole && fault_in_window(elapsed, sp->blackhole_start_ns, sp->blackhole_end_ns))
        lost = true;
    if (ctrl && sp->ctrl_blackout &&
        fault_in_window(elapsed, sp->ctrl_blackout_start_ns, sp->ctrl_blackout_end_ns))
        lost = true;
    if (sp->path_mtu != 0 && len > sp->path_mtu && f->base.stats.tx_datagrams >= sp->path_mtu_after)
        lost = true;
    if (lost || ctrl_lost) {
        f->fstats.dropped++;
        if (ctrl)
            f->fstats.ctrl_dropped++;
        return SX_OK;
    }

    unsigned copies = dup ? 2 : 1;
    fault_pkt_t *pkt = NULL;
    sx_tl_tx_t out = *tx;
    if (corrupt) {
        pkt = fault_copy(tx, len, copies);
        if (pkt == NULL)
            return SX_ERR_NO_MEMORY;
        /* Modulo bias over 2^64 is far below anything a test can see. */
        bit %= (uint64_t)len * 8;
        pkt->data[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        out = fault_pkt_tx(pkt);
    }

    bool have_prior = false;
    for (fault_pkt_t *p = f->held; p != NULL; p = p->next)
        have_prior = have_prior || p->dest == tx->dest;
    if (reorder && !have_prior) {
        if (pkt == NULL && (pkt = fault_copy(tx, len, copies)) == NULL)
            return SX_ERR_NO_MEMORY;
        pkt->due_ns = sp->reorder_ns != 0 ? now + sp->reorder_ns : 0;
        pkt->next = f->held;
        f->held = pkt;
        f->fstats.reordered++;
    } else {
        int rc = fault_emit(f, &out, len, copies, pkt);
        if (rc != SX_OK) {
            free(pkt);
            return rc;
        }
        /* This datagram has overtaken the one held for its destination. */
        if (have_prior)
            fault_release_held(f, false, tx->dest, sp->reorder_ns != 0 ? now : 0);
    }
    if (corrupt)
        f->fstats.corrupted++;
    return SX_OK;
}

static int fault_check(fault_iface_t *f, const sx_tl_tx_t *tx, size_t *len_p)
{
    size_t len = 0;

    if (tx->dest >= f->nlive || !f->live[tx->dest] || tx->iovcnt > SX_TL_IOV_MAX)
        return SX_ERR_INVALID_PARAM;
    for (unsigned i = 0; i < tx->iovcnt; i++) {
        if (tx->iov[i].iov_len > f->base.caps.mtu - len)
            return SX_ERR_INVALID_PARAM;
        len += tx->iov[i].iov_len;
    }
    *len_p = len;
    return SX_OK;
}

/* stall_us: the calling thread sleeps @p ns in all (signals do not cut it
 * short), holding whatever the caller holds, as a thread the scheduler
 * stopped inside a system call would. */
static void fault_stall(fault_iface_t *f, uint64_t ns)
{
    struct timespec until = sx_ns_to_ts(sx_time_ns() + ns);
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) == EINTR)
        ;
    f->fstats.stalled++;
}

static int fault_post_send(sx_tl_iface_t *iface, const sx_tl_tx_t *tx, unsigned count,
                           unsigned *posted_p)
{
    fault_iface_t *f = (fault_iface_t *)iface;
    unsigned i;
    int status = SX_OK;

    for (i = 0; i < count; i++) {
        uint64_t saved[4];
        size_t len = 0;

        /* Checked here, so that a dropped datagram fails the same way a
         * delivered one would. */
        status = fault_check(f, &tx[i], &len);
        if (status != SX_OK)
            break;
        memcpy(saved, f->rng, sizeof(saved));
        status = fault_send_one(f, &tx[i], len);
        if (status != SX_OK) {
            memcpy(f->rng, saved, sizeof(saved));
            break;
        }
        f->base.stats.tx_datagrams++;
    }
    if (status == SX_ERR_AGAIN)
        f->base.stats.tx_again++;
    if (i > 0 && f->spec.stall_ns != 0)
        fault_stall(f, f->spec.stall_ns);
    if (posted_p != NULL)
        *posted_p = i;
    return status;
}

/* ------------------------------------------------------------------ */
/* Ops                                                                 */

static int fault_open(const sx_tl_config_t *config, sx_tl_iface_t **iface_p)
{
    fault_spec_t spec;
    int status;

    if (config == NULL || iface_p == NULL)
        return SX_ERR_INVALID_PARAM;
    if (config->inner_ops == NULL || config->inner_ops == &sx_tl_fault_ops) {
        sx_error("fault",
                 "the fault transport needs another transport to wrap "
                 "(config->inner_ops), not %s",
                 config->inner_ops == NULL ? "none" : "itself");
        return SX_ERR_INVALID_PARAM;
    }
    status = fault_parse(config->fault, &spec);
    if (status != SX_OK)
        return status;

    fault_iface_t *f = calloc(1, sizeof(*f));
    if (f == NULL)
        return SX_ERR_NO_MEMORY;
    status = config->inner_ops->open(config, &f->inner);
    if (status != SX_OK) {
        free(f);
        return status;
    }
    if (!f->inner->caps.sync_send) {
        sx_error("fault",
                 "cannot wrap '%s': it does not send synchronously (sync_send), "
                 "which the fault transport requires",
                 config->inner_ops->name);
        config->inner_ops->close(f->inner);
        free(f);
        return SX_ERR_UNSUPPORTED;
    }
    f->base.ops = &sx_tl_fault_ops;
    f->base.caps = f->inner->caps;
    f->spec = spec;
    if (spec.tx_credits != 0 && spec.tx_credits < f->base.caps.tx_credits)
        f->base.caps.tx_credits = (unsigned)spec.tx_credits;
    f->is_control = config->is_control;
    uint64_t x = spec.seed ^ ((uint64_t)config->shard * 0xd1b54a32d192ed03ull);
    for (unsigned i = 0; i < 4; i++)
        f->rng[i] = fault_splitmix64(&x);
    for (unsigned i = 0; i < 4; i++)
        f->rx_rng[i] = fault_splitmix64(&x);
    sx_debug("fault", "shard %u: wrapping %s with '%s'", config->shard, config->inner_ops->name,
             config->fault != NULL ? config->fault : "");
    *iface_p = &f->base;
    return SX_OK;
}

static void fault_close(sx_tl_iface_t *iface)
{
    fault_iface_t *f = (fault_iface_t *)iface;

    if (f == NULL)
        return;
    fault_free_list(f->held);
    fault_free_list(f->delay_head);
    f->inner->ops->close(f->inner);
    free(f->live);
    free(f);
}

static int fault_local_addr(sx_tl_iface_t *iface, void *buf, size_t *len_p)
{
    sx_tl_iface_t *inner = ((fault_iface_t *)iface)->inner;
    return inner->ops->local_addr(inner, buf, len_p);
}

static void fault_addr_str(sx_tl_iface_t *iface, const void *addr, size_t len, char *buf,
                           size_t cap)
{
    sx_tl_iface_t *inner = ((fault_iface_t *)iface)->inner;
    if (inner->ops->addr_str != NULL)
        inner->ops->addr_str(inner, addr, len, buf, cap);
    else
        snprintf(buf, cap, "(an address of %zu bytes)", len);
}

static int fault_addr_insert(sx_tl_iface_t *iface, const void *addr, size_t len,
                             sx_tl_dest_t *dest_p)
{
    fault_iface_t *f = (fault_iface_t *)iface;
    sx_tl_dest_t dest;

    if (dest_p == NULL)
        return SX_ERR_INVALID_PARAM;
    int rc = f->inner->ops->addr_insert(f->inner, addr, len, &dest);
    if (rc != SX_OK)
        return rc;
    if (dest >= f->nlive) {
        uint32_t n = f->nlive != 0 ? f->nlive : 16;
        while (n <= dest)
            n *= 2;
        uint8_t *live = realloc(f->live, n);
        if (live == NULL) {
            f->inner->ops->addr_remove(f->inner, dest);
            return SX_ERR_NO_MEMORY;
        }
        memset(live + f->nlive, 0, n - f->nlive);
        f->live = live;
        f->nlive = n;
    }
    f->live[dest] = 1;
    *dest_p = dest;
    return SX_OK;
}

static bool fault_src_matches(sx_tl_iface_t *iface, sx_tl_dest_t dest, const void *src,
                              size_t src_len)
{
    sx_tl_iface_t *inner = ((fault_iface_t *)iface)->inner;
    return inner->ops->src_matches == NULL || inner->ops->src_matches(inner, dest, src, src_len);
}

/* Drops what @p list holds for @p dest; returns the new last element. */
static fault_pkt_t *fault_drop_dest(fault_pkt_t **list, sx_tl_dest_t dest)
{
    fault_pkt_t **pp = list, *last = NULL;

    while (*pp != NULL) {
        fault_pkt_t *p = *pp;
        if (p->dest == dest) {
            *pp = p->next;
            free(p);
        } else {
            last = p;
            pp = &p->next;
        }
    }
    return last;
}

static void fault_addr_remove(sx_tl_iface_t *iface, sx_tl_dest_t dest)
{
    fault_iface_t *f = (fault_iface_t *)iface;

    if (dest < f->nlive)
        f->live[dest] = 0;
    /* The inner transport may give the slot to the next peer inserted. */
    (void)fault_drop_dest(&f->held, dest);
    f->delay_tail = fault_drop_dest(&f->delay_head, dest);
    f->inner->ops->addr_remove(f->inner, dest);
}

static int fault_poll(sx_tl_iface_t *iface, sx_tl_event_t *events, unsigned max)
{
    fault_iface_t *f = (fault_iface_t *)iface;

    /* Nothing stays held forever: a reordered datagram goes out at the
     * latest here (once due, with reorder_us), then whatever delay has
     * run out. */
    uint64_t now = f->held != NULL || f->delay_head != NULL ? sx_time_ns() : 0;
    if (f->held != NULL)
        fault_release_held(f, true, 0, f->spec.reorder_ns != 0 ? now : 0);
    if (f->delay_head != NULL)
        fault_release_delayed(f, now);
    int rc = f->inner->ops->poll(f->inner, events, max);
    if (f->t0_ns == 0 && rc > 0) {
        for (int i = 0; i < rc; i++) {
            if (events[i].type == SX_TL_EV_RECV) {
                (void)fault_elapsed(f, sx_time_ns());
                break;
            }
        }
    }
    for (int i = 0; i < rc && f->spec.ce > 0.0; i++) {
        sx_tl_event_t *ev = &events[i];
        if (ev->type != SX_TL_EV_RECV || (ev->ecn != SX_TL_ECN_ECT0 && ev->ecn != SX_TL_ECN_ECT1))
            continue;
        if ((double)(fault_next_of(f->rx_rng) >> 11) * 0x1.0p-53 < f->spec.ce) {
            ev->ecn = SX_TL_ECN_CE;
            f->fstats.ce_marked++;
        }
    }
    f->base.rx_left = f->inner->rx_left;
    const sx_tl_stats_t *in = &f->inner->stats;
    f->base.stats.rx_datagrams = in->rx_datagrams;
    f->base.stats.rx_truncated = in->rx_truncated;
    f->base.stats.rx_kernel_drops = in->rx_kernel_drops;
    f->base.stats.tx_refused = in->tx_refused;
    /* The inner transport's own counts of what went out on its ACK path:
     * the decorator's tx_datagrams counts datagrams it handed down. */
    f->base.stats.tx_ack_path = in->tx_ack_path;
    f->base.stats.rx_ack_socket = in->rx_ack_socket;
    f->base.stats.tx_gso = in->tx_gso;
    f->base.stats.tx_gso_joined = in->tx_gso_joined;
    f->base.stats.rx_gro = in->rx_gro;
    f->base.stats.rx_hot = in->rx_hot;
    f->base.stats.hot_connects = in->hot_connects;
    return rc;
}

static unsigned fault_wait_fds(sx_tl_iface_t *iface, int fds[SX_TL_WAIT_FDS])
{
    sx_tl_iface_t *inner = ((fault_iface_t *)iface)->inner;
    return inner->ops->wait_fds(inner, fds);
}

static int fault_addr_check(sx_tl_iface_t *iface, const void *addr, size_t len)
{
    sx_tl_iface_t *inner = ((fault_iface_t *)iface)->inner;
    return inner->ops->addr_check != NULL ? inner->ops->addr_check(inner, addr, len) : SX_OK;
}

static void fault_variant(sx_tl_iface_t *iface, char *buf, size_t cap)
{
    sx_tl_iface_t *inner = ((fault_iface_t *)iface)->inner;
    if (inner->ops->variant != NULL)
        inner->ops->variant(inner, buf, cap);
    else if (cap > 0)
        buf[0] = '\0';
}

static int fault_arm(sx_tl_iface_t *iface)
{
    sx_tl_iface_t *inner = ((fault_iface_t *)iface)->inner;
    return inner->ops->arm != NULL ? inner->ops->arm(inner) : SX_OK;
}

static size_t fault_dest_mtu(sx_tl_iface_t *iface, sx_tl_dest_t dest)
{
    sx_tl_iface_t *inner = ((fault_iface_t *)iface)->inner;
    return inner->ops->dest_mtu != NULL ? inner->ops->dest_mtu(inner, dest) : inner->caps.mtu;
}

static void fault_dest_str(sx_tl_iface_t *iface, sx_tl_dest_t dest, char *buf, size_t cap)
{
    sx_tl_iface_t *inner = ((fault_iface_t *)iface)->inner;
    if (inner->ops->dest_str != NULL)
        inner->ops->dest_str(inner, dest, buf, cap);
    else
        snprintf(buf, cap, "(destination %u)", (unsigned)dest);
}

static uint64_t fault_dest_host(sx_tl_iface_t *iface, sx_tl_dest_t dest)
{
    sx_tl_iface_t *inner = ((fault_iface_t *)iface)->inner;
    return inner->ops->dest_host != NULL ? inner->ops->dest_host(inner, dest) : 0;
}

static void fault_ecn_report(sx_tl_iface_t *iface)
{
    sx_tl_iface_t *inner = ((fault_iface_t *)iface)->inner;
    if (inner->ops->ecn_report != NULL)
        inner->ops->ecn_report(inner);
}

/* Every fault applies where datagrams are sent (the receive side only
 * marks CE, which reads no payload), so what the inner transport reads
 * may land as the caller asked. */
static void fault_land(sx_tl_iface_t *iface, size_t head, const struct iovec *spans,
                       unsigned nspans, size_t step)
{
    sx_tl_iface_t *inner = ((fault_iface_t *)iface)->inner;
    if (inner->ops->land != NULL)
        inner->ops->land(inner, head, spans, nspans, step);
}

static int fault_addr_next(sx_tl_iface_t *iface, sx_tl_dest_t dest, char *why, size_t cap)
{
    sx_tl_iface_t *inner = ((fault_iface_t *)iface)->inner;
    return inner->ops->addr_next != NULL ? inner->ops->addr_next(inner, dest, why, cap)
                                         : SX_ERR_NOT_FOUND;
}

int sx_tl_fault_stats_get(const sx_tl_iface_t *iface, sx_tl_fault_stats_t *stats_p)
{
    if (iface == NULL || stats_p == NULL || iface->ops != &sx_tl_fault_ops)
        return SX_ERR_INVALID_PARAM;
    *stats_p = ((const fault_iface_t *)iface)->fstats;
    return SX_OK;
}

const sx_tl_ops_t sx_tl_fault_ops = {
    .name = "fault",
    /* Parses config->fault strictly, then opens config->inner_ops with the
     * same config; may block as long as the inner open does. */
    .open = fault_open,
    /* Frees held and delayed datagrams, then closes the inner interface;
     * token holder. */
    .close = fault_close,
    /* The inner interface's address; any thread. */
    .local_addr = fault_local_addr,
    /* Delegates, and remembers the destination as live so that sends the
     * decorator drops fail like delivered ones; token holder. */
    .addr_insert = fault_addr_insert,
    .addr_str = fault_addr_str,
    /* The inner interface's answers; any thread (arm: token holder). */
    .addr_check = fault_addr_check,
    .variant = fault_variant,
    .arm = fault_arm,
    /* The inner interface's answers and address change; token holder. */
    .dest_mtu = fault_dest_mtu,
    .dest_str = fault_dest_str,
    .dest_host = fault_dest_host,
    .ecn_report = fault_ecn_report,
    /* Delegates; token holder. */
    .land = fault_land,
    .addr_next = fault_addr_next,
    .src_matches = fault_src_matches,
    /* Drops the datagrams held or delayed for it, then delegates; token
     * holder. */
    .addr_remove = fault_addr_remove,
    /* Applies the faults per datagram and passes the survivors on; copies
     * only what it holds or corrupts, so the caller owns its buffers again
     * on return (sync_send); token holder; never blocks. */
    .post_send = fault_post_send,
    /* Releases held and due delayed datagrams, then polls the inner
     * interface; its data stays valid until the next poll; token holder. */
    .poll = fault_poll,
    /* The inner interface's fds; see the note on delays above; any thread. */
    .wait_fds = fault_wait_fds,
};
