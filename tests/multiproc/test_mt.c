/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Multithreaded stress (DESIGN.md section 3). Everything runs in this one
 * process: several engines talk over real UDP sockets on loopback while
 * several threads call into them at once.
 *
 *  1. T sender threads in engine A, each sending to P peer engines, mixed
 *     sizes (0 B to 100 KB, some chunked), 1 % injected loss: every message
 *     arrives exactly once, intact and in per-thread order at each peer, and
 *     every completion runs exactly once with SX_OK.
 *  2. Sends from inside callbacks: a ping-pong driven by AM handlers and a
 *     chain driven by completions.
 *  3. Threads that exit with their sends in flight: others complete them.
 *  4. Destroy while progress threads sleep in epoll and sends to a peer that
 *     never answers are pending: prompt, each completion exactly once.
 *  5. Peers added and removed, handlers and memory registered, while other
 *     threads stream to a stable peer.
 * Each runs in the variants listed in main(): sharded or global, polled or
 * with progress threads.
 *
 * Worker threads and callbacks never call cmocka's asserts (they longjmp to
 * the main thread's stack): they record the first failure with mt_fail(),
 * and a test joins its threads before it asserts. Wall-clock limits only
 * turn a hang into a failure; nothing waits for time to pass.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#include "am_util.h"
#include "test_filter.h"

#define MT_LIMIT_NS    AM_TEST_LIMIT_NS
#define MT_MAX_THREADS 8
#define MT_TAG         40 /* thread t's messages carry tag MT_TAG + t */
#define MT_STAMP       16 /* u32 thread, u32 peer, u64 sequence number */
#define MT_ANY_ERROR   INT32_MIN

/* ------------------------------------------------------------- helpers */

static atomic_int mt_nfail;
static atomic_int mt_why_ready;
static char mt_why[256];

/* Any thread: keeps the first failure's text for the main thread. */
static __attribute__((format(printf, 1, 2))) void mt_fail(const char *fmt, ...)
{
    if (atomic_fetch_add(&mt_nfail, 1) != 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(mt_why, sizeof(mt_why), fmt, ap);
    va_end(ap);
    atomic_store_explicit(&mt_why_ready, 1, memory_order_release);
}

/* Main thread only, once the workers are joined. */
static void mt_check(void)
{
    int n = atomic_load(&mt_nfail);
    if (n != 0)
        fail_msg("%d failure(s); first: %s", n,
                 atomic_load_explicit(&mt_why_ready, memory_order_acquire) ? mt_why : "?");
}

static int mt_setup(void **state)
{
    (void)state;
    atomic_store(&mt_nfail, 0);
    atomic_store(&mt_why_ready, 0);
    return 0;
}

typedef struct mt_cfg {
    const char *mode;     /* SX_THREAD_MODE */
    const char *progress; /* SX_PROGRESS */
    unsigned seed;        /* loss=0.01 with this seed (plus a salt); 0: no faults */
} mt_cfg_t;

/* A test's variant (its cmocka state) as the first two initialisers. */
#define MT_VARIANT(state) ((const mt_cfg_t *)*(state))->mode, ((const mt_cfg_t *)*(state))->progress

/* @p shards: SX_SHARDS, or NULL for one per core. */
static sx_engine_h mt_engine(const mt_cfg_t *c, unsigned salt, const char *shards)
{
    char fault[64];
    /* SPIN_US=0: idle progress threads go to sleep at once, so wake-ups
     * (and destroy during a sleep) are exercised all the time. */
    sx_config_kv_t kv[5] = {{"THREAD_MODE", c->mode}, {"PROGRESS", c->progress}, {"SPIN_US", "0"}};
    size_t n = 3;

    if (shards != NULL)
        kv[n++] = (sx_config_kv_t){"SHARDS", shards};
    if (c->seed != 0) {
        snprintf(fault, sizeof(fault), "loss=0.01,seed=%u", c->seed + salt);
        kv[n++] = (sx_config_kv_t){"FAULT", fault};
    }
    return am_engine(kv, n);
}

static bool mt_threaded(const mt_cfg_t *c)
{
    return strcmp(c->progress, "thread") == 0;
}

static uint64_t mt_stat(sx_engine_h e, const char *name)
{
    uint64_t v = 0;
    if (sx_stats_value(e, name, &v) != SX_OK)
        mt_fail("no counter %s", name);
    return v;
}

static double mt_since(uint64_t start)
{
    return (double)(sx_time_ns() - start) / 1e9;
}

/* Progresses @p e once. With @p every, the caller binds itself to each
 * shard in turn and reaches all of them now rather than one every eighth
 * call: only for threads whose own sends need no fixed home (the order
 * promise is per home shard). */
static void mt_progress(sx_engine_h e, bool every)
{
    unsigned n = 1;

    if (every)
        (void)sx_engine_shard_count(e, &n);
    for (unsigned s = 0; s < n; s++) {
        if (every)
            (void)sx_thread_bind(e, s);
        (void)sx_progress(e);
    }
}

typedef struct mt_goal {
    atomic_ulong *v;
    unsigned long target;
} mt_goal_t;

/* Waits until every goal is reached, progressing @p e meanwhile (or just
 * yielding while progress threads do the work). False on a failure
 * already recorded or at the hang limit. */
static bool mt_wait(const mt_goal_t *g, size_t ng, sx_engine_h *e, size_t ne, bool every)
{
    uint64_t start = sx_time_ns();

    for (;;) {
        size_t reached = 0;
        for (size_t i = 0; i < ng; i++)
            reached += atomic_load(g[i].v) >= g[i].target;
        if (reached == ng)
            return true;
        if (atomic_load(&mt_nfail) != 0)
            return false;
        if (sx_time_ns() - start > MT_LIMIT_NS) {
            for (size_t i = 0; i < ng; i++)
                if (atomic_load(g[i].v) < g[i].target)
                    mt_fail("hang: goal %zu at %lu of %lu", i, atomic_load(g[i].v), g[i].target);
            return false;
        }
        for (size_t i = 0; i < ne; i++)
            mt_progress(e[i], every);
        if (ne == 0)
            sched_yield();
    }
}

/* A thread that progresses one engine (every shard) until told to stop. */
typedef struct mt_spinner {
    pthread_t tid;
    sx_engine_h e;
    atomic_bool stop;
} mt_spinner_t;

static void *mt_spin_main(void *arg)
{
    mt_spinner_t *s = arg;
    while (!atomic_load(&s->stop))
        mt_progress(s->e, true);
    return NULL;
}

static void mt_spin(mt_spinner_t *s, sx_engine_h e, bool on)
{
    if (on) {
        s->e = e;
        atomic_init(&s->stop, false);
        assert_int_equal(pthread_create(&s->tid, NULL, mt_spin_main, s), 0);
    } else {
        atomic_store(&s->stop, true);
        pthread_join(s->tid, NULL);
    }
}

/* ------------------------------------------------------------ messages */

/* Message seq of thread t to peer p: its size is a function of the three,
 * so a receiver checks the length too, and zero- and few-byte messages
 * (too short for the whole stamp) are checked by their position. */
static size_t mt_size(unsigned t, unsigned p, uint64_t seq)
{
    uint64_t x = (seq + 1) * 0x9e3779b97f4a7c15ull ^ ((uint64_t)t << 48) ^ ((uint64_t)p << 40);
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 29;
    unsigned r = (unsigned)(x % 100);
    x >>= 8;
    if (r < 3)
        return 0;
    if (r < 6)
        return 1 + x % (MT_STAMP - 1);
    if (r < 98)
        return MT_STAMP + x % 3000;
    return 65001 + x % 35000; /* more than one 65000-byte datagram: chunked */
}

/* Byte i of message seq of thread t to peer p: a stamp (thread, peer and
 * seq, little-endian), then a pattern derived from all three. */
static uint8_t mt_byte(unsigned t, unsigned p, uint64_t seq, size_t i)
{
    if (i < 4)
        return (uint8_t)(t >> (8 * i));
    if (i < 8)
        return (uint8_t)(p >> (8 * (i - 4)));
    if (i < MT_STAMP)
        return (uint8_t)(seq >> (8 * (i - 8)));
    return am_byte(seq ^ ((uint64_t)t << 40) ^ ((uint64_t)p << 52), i);
}

/* A receiving engine's view of the senders. */
typedef struct mt_rx {
    unsigned p;        /* the peer index senders stamp */
    unsigned nthreads; /* senders: tags MT_TAG .. MT_TAG + nthreads - 1 */
    /* Next sequence number of each sender. All of a thread's messages use
     * one lane, so only the holder of that shard's token touches its slot:
     * no lock, and the token orders successive holders. */
    uint64_t next[MT_MAX_THREADS];
    atomic_ulong *delivered; /* shared by the receivers of a test */
} mt_rx_t;

static void mt_on_am(void *arg, uint64_t peer_id, uint8_t tag, const void *data, size_t len)
{
    mt_rx_t *rx = arg;
    const uint8_t *d = data;
    unsigned t = (unsigned)tag - MT_TAG;

    (void)peer_id;
    if (t >= rx->nthreads) {
        mt_fail("peer %u: unexpected tag %u", rx->p, tag);
        return;
    }
    uint64_t seq = rx->next[t]++;
    bool ok = len == mt_size(t, rx->p, seq);
    for (size_t i = 0; ok && i < len; i++)
        ok = d[i] == mt_byte(t, rx->p, seq, i);
    if (!ok) {
        uint64_t got = 0;
        for (size_t i = MT_STAMP; len >= MT_STAMP && i-- > 8;)
            got = got << 8 | d[i];
        mt_fail("peer %u, thread %u: expected message %llu (%zu B), got %zu B stamped %llu", rx->p,
                t, (unsigned long long)seq, mt_size(t, rx->p, seq), len, (unsigned long long)got);
    }
    atomic_fetch_add(rx->delivered, 1);
}

/* One send: its buffer, and how often and how its completion ran. */
typedef struct mt_msg {
    atomic_int calls;
    atomic_int status;
    atomic_ulong *done; /* bumped by each completion */
    uint8_t *buf;
} mt_msg_t;

static void mt_on_done(void *ctx, int status)
{
    mt_msg_t *m = ctx;
    if (atomic_fetch_add(&m->calls, 1) == 0)
        atomic_store(&m->status, status);
    atomic_fetch_add(m->done, 1);
}

/* Sends message seq of thread t to peer p (an odd one in two pieces). */
static int mt_send(sx_peer_h peer, mt_msg_t *m, unsigned t, unsigned p, uint64_t seq,
                   atomic_ulong *done)
{
    size_t len = mt_size(t, p, seq);
    m->buf = malloc(len ? len : 1);
    if (m->buf == NULL)
        return SX_ERR_NO_MEMORY;
    for (size_t i = 0; i < len; i++)
        m->buf[i] = mt_byte(t, p, seq, i);
    atomic_init(&m->calls, 0);
    atomic_init(&m->status, SX_INPROGRESS);
    m->done = done;
    size_t cut = (seq & 1) ? len / 3 : len;
    struct iovec iov[2] = {{m->buf, cut}, {m->buf + cut, len - cut}};
    return sx_send(peer, (uint8_t)(MT_TAG + t), iov, (seq & 1) ? 2 : 1, mt_on_done, m);
}

/* Main thread: each of @p n sends completed once, with @p want or @p also
 * (MT_ANY_ERROR: any error). Frees the buffers. */
static void mt_check_msgs(mt_msg_t *m, size_t n, int want, int also, const char *what)
{
    bool any_error = want == MT_ANY_ERROR || also == MT_ANY_ERROR;

    for (size_t i = 0; i < n; i++) {
        int calls = atomic_load(&m[i].calls), st = atomic_load(&m[i].status);
        if (calls != 1)
            fail_msg("%s %zu: completion ran %d times", what, i, calls);
        if (st != want && st != also && !(any_error && st < 0))
            fail_msg("%s %zu: completed with %s", what, i, sx_status_name(st));
        free(m[i].buf);
        m[i].buf = NULL;
    }
}

/* A sender thread: messages 0..n-1 to each of its peers in turn, at most
 * 16 outstanding, progressing its engine while it waits (so its home
 * shard, which all its sends use, stays fixed). Or, with `leave`, all of
 * them at once, returning without progressing or waiting. */
typedef struct mt_sender {
    pthread_t tid;
    unsigned t, home;
    int bind; /* home shard to bind to, or -1: chosen by the library */
    bool leave;
    unsigned left; /* leave: sends not complete when the thread returned */
    sx_engine_h e;
    sx_peer_h *peers;
    unsigned npeers, n;
    mt_msg_t *msgs; /* [n * npeers] */
    atomic_ulong done;
    atomic_ulong *finished; /* senders that have returned */
} mt_sender_t;

static bool mt_sender_wait(mt_sender_t *s, unsigned long most, unsigned long sent, uint64_t start)
{
    while (!s->leave && sent - atomic_load(&s->done) > most) {
        (void)sx_progress(s->e);
        if (atomic_load(&mt_nfail) != 0)
            return false;
        if (sx_time_ns() - start > MT_LIMIT_NS) {
            mt_fail("thread %u: hang, %lu of %lu sends complete", s->t, atomic_load(&s->done),
                    sent);
            return false;
        }
    }
    return true;
}

static void *mt_sender_main(void *arg)
{
    mt_sender_t *s = arg;
    uint64_t start = sx_time_ns();
    unsigned long sent = 0;

    if (s->bind >= 0 && sx_thread_bind(s->e, (unsigned)s->bind) != SX_OK)
        mt_fail("thread %u: cannot bind to shard %d", s->t, s->bind);
    (void)sx_thread_home_shard(s->e, &s->home);
    for (unsigned seq = 0; seq < s->n; seq++) {
        for (unsigned p = 0; p < s->npeers; p++, sent++) {
            if (!mt_sender_wait(s, 15, sent, start))
                goto out;
            mt_msg_t *m = &s->msgs[(size_t)seq * s->npeers + p];
            int rc = mt_send(s->peers[p], m, s->t, p, seq, &s->done);
            if (rc != SX_INPROGRESS) {
                mt_fail("thread %u: sx_send: %s", s->t, sx_status_name(rc));
                goto out;
            }
        }
    }
    (void)mt_sender_wait(s, 0, sent, start);
    for (unsigned long i = 0; s->leave && i < sent; i++)
        s->left += atomic_load(&s->msgs[i].calls) == 0;
out:
    atomic_fetch_add(s->finished, 1);
    return NULL;
}

/* Starts a sender described by @p init. */
static void mt_sender_start(mt_sender_t *s, mt_sender_t init)
{
    *s = init;
    s->msgs = calloc((size_t)s->n * s->npeers, sizeof(*s->msgs));
    assert_non_null(s->msgs);
    atomic_init(&s->done, 0);
    assert_int_equal(pthread_create(&s->tid, NULL, mt_sender_main, s), 0);
}

/* Main thread, once the sender is joined: its completions (each once,
 * SX_OK) and every peer's view of its stream. */
static void mt_sender_check(mt_sender_t *s, mt_rx_t *rx)
{
    assert_int_equal(atomic_load(&s->done), (unsigned long)s->n * s->npeers);
    for (unsigned p = 0; p < s->npeers; p++)
        assert_int_equal(rx[p].next[s->t], s->n);
    mt_check_msgs(s->msgs, (size_t)s->n * s->npeers, SX_OK, SX_OK, "send");
    free(s->msgs);
}

/* ------------------------------------------------------------ 1: stress */

#define ST_THREADS 4
#define ST_PEERS   3
#define ST_MSGS    300 /* per thread and peer */

static void test_stress(void **state)
{
    const mt_cfg_t cfg = {MT_VARIANT(state), .seed = 11};
    /* Shard counts differ on each side (the global baseline runs one): a
     * thread's lane is its home modulo the peer's count, so threads share
     * lanes at some peers, and a receiver's other shards are reached only
     * by visits. */
    static const char *const shards[1 + ST_PEERS] = {"4", "3", "2", "1"};
    bool sharded = strcmp(cfg.mode, "sharded") == 0;
    sx_engine_h a = mt_engine(&cfg, 0, sharded ? shards[0] : NULL), peer_e[ST_PEERS];
    sx_peer_h to[ST_PEERS];
    mt_rx_t rx[ST_PEERS];
    mt_sender_t snd[ST_THREADS];
    atomic_ulong delivered = 0, finished = 0;
    const unsigned long total = (unsigned long)ST_THREADS * ST_PEERS * ST_MSGS;
    uint64_t start = sx_time_ns();

    for (unsigned p = 0; p < ST_PEERS; p++) {
        peer_e[p] = mt_engine(&cfg, 1 + p, sharded ? shards[1 + p] : NULL);
        to[p] = am_connect(a, peer_e[p], 2 + p);
        (void)am_connect(peer_e[p], a, 1);
        rx[p] = (mt_rx_t){.p = p, .nthreads = ST_THREADS, .delivered = &delivered};
        for (unsigned t = 0; t < ST_THREADS; t++)
            assert_int_equal(sx_am_register(peer_e[p], MT_TAG + t, mt_on_am, &rx[p]), SX_OK);
    }
    for (unsigned t = 0; t < ST_THREADS; t++)
        mt_sender_start(&snd[t], (mt_sender_t){.t = t,
                                               .bind = -1,
                                               .e = a,
                                               .peers = to,
                                               .npeers = ST_PEERS,
                                               .n = ST_MSGS,
                                               .finished = &finished});
    /* The senders progress A while they wait; this thread progresses the
     * receivers, which never send, so it may visit every shard. */
    const mt_goal_t goals[] = {{&finished, ST_THREADS}, {&delivered, total}};
    bool ok = mt_wait(goals, 2, peer_e, mt_threaded(&cfg) ? 0 : ST_PEERS, true);
    for (unsigned t = 0; t < ST_THREADS; t++)
        pthread_join(snd[t].tid, NULL);
    mt_check();
    assert_true(ok);
    /* Quiet: nothing arrives twice, no completion runs again. */
    for (int i = 0; i < 200; i++) {
        mt_progress(a, true);
        for (unsigned p = 0; p < ST_PEERS; p++)
            mt_progress(peer_e[p], true);
    }
    mt_check();
    assert_int_equal(atomic_load(&delivered), total);
    for (unsigned t = 0; t < ST_THREADS; t++)
        mt_sender_check(&snd[t], rx);
    /* The loss really happened, so the retransmission paths ran. */
    unsigned long long rtx = mt_stat(a, "rtx_packets");
    assert_true(rtx > 0);
    print_message("[   info   ] %lu messages, homes %u %u %u %u, %llu retransmissions, %.2f s\n",
                  total, snd[0].home, snd[1].home, snd[2].home, snd[3].home, rtx, mt_since(start));
    sx_engine_destroy(a);
    for (unsigned p = 0; p < ST_PEERS; p++)
        sx_engine_destroy(peer_e[p]);
}

/* --------------------------------------------- 2: sends from callbacks */

#define PP_N   400
#define PP_TAG 60 /* + kind */
enum { PP_PING, PP_PONG, PP_CHAIN, PP_KINDS };

struct pp;
typedef struct pp_op {
    struct pp *pp;
    unsigned kind, i;
    atomic_int calls;
} pp_op_t;

typedef struct pp {
    sx_engine_h a;
    sx_peer_h a_to_b, b_to_a;
    pp_op_t ops[PP_KINDS][PP_N];
    /* Deliveries of each kind, which is also the next number due: each
     * message is sent only once the previous one of its kind was delivered
     * or acknowledged. Atomic because that causality runs through the
     * kernel's sockets, where ThreadSanitizer cannot see it. */
    atomic_ulong rx[PP_KINDS];
    atomic_ulong done[PP_KINDS];
} pp_t;

static void pp_on_done(void *ctx, int status);

static void pp_send(pp_t *pp, unsigned kind, unsigned i)
{
    sx_peer_h to = (kind == PP_PONG) ? pp->b_to_a : pp->a_to_b;
    /* Message i of every kind carries i, from the op, which outlives it. */
    struct iovec iov = {&pp->ops[kind][i].i, sizeof(unsigned)};
    int rc = sx_send(to, (uint8_t)(PP_TAG + kind), &iov, 1, pp_on_done, &pp->ops[kind][i]);
    if (rc != SX_INPROGRESS)
        mt_fail("send of kind %u number %u: %s", kind, i, sx_status_name(rc));
}

/* A ping's handler (at B) answers with a pong, and a pong's handler (at A)
 * sends the next ping: every step of the ping-pong is sent from a handler. */
static void pp_on_am(void *arg, uint64_t peer_id, uint8_t tag, const void *data, size_t len)
{
    pp_t *pp = arg;
    unsigned kind = (unsigned)tag - PP_TAG;
    unsigned v = UINT_MAX;

    (void)peer_id;
    if (len == sizeof(v))
        memcpy(&v, data, sizeof(v));
    unsigned long want = kind < PP_KINDS ? atomic_fetch_add(&pp->rx[kind], 1) : 0;
    if (kind >= PP_KINDS || v != want) {
        mt_fail("tag %u: expected number %lu, got %u (%zu B)", tag, want, v, len);
        return;
    }
    if (kind == PP_PING)
        pp_send(pp, PP_PONG, v);
    else if (kind == PP_PONG && v + 1 < PP_N)
        pp_send(pp, PP_PING, v + 1);
}

/* The chain: each message's completion (at A) sends the next one. */
static void pp_on_done(void *ctx, int status)
{
    pp_op_t *op = ctx;

    if (atomic_fetch_add(&op->calls, 1) != 0)
        mt_fail("kind %u number %u: completion ran twice", op->kind, op->i);
    if (status != SX_OK)
        mt_fail("kind %u number %u: completed with %s", op->kind, op->i, sx_status_name(status));
    if (op->kind == PP_CHAIN && op->i + 1 < PP_N) {
        pp_send(op->pp, PP_CHAIN, op->i + 1);
        /* A callback may call anything but destroy: a nested progress call
         * must neither deadlock nor run anything twice. */
        (void)sx_progress(op->pp->a);
    }
    atomic_fetch_add(&op->pp->done[op->kind], 1);
}

static void test_callback_sends(void **state)
{
    const mt_cfg_t cfg = {MT_VARIANT(state), .seed = 21};
    sx_engine_h a = mt_engine(&cfg, 0, NULL), b = mt_engine(&cfg, 1, NULL);
    bool polled = !mt_threaded(&cfg);
    pp_t *pp = calloc(1, sizeof(*pp));
    mt_spinner_t spin;
    mt_goal_t goals[2 * PP_KINDS];
    uint64_t start = sx_time_ns();

    assert_non_null(pp);
    for (unsigned k = 0; k < PP_KINDS; k++) {
        for (unsigned i = 0; i < PP_N; i++)
            pp->ops[k][i] = (pp_op_t){.pp = pp, .kind = k, .i = i};
        goals[2 * k] = (mt_goal_t){&pp->rx[k], PP_N};
        goals[2 * k + 1] = (mt_goal_t){&pp->done[k], PP_N};
    }
    pp->a = a;
    pp->a_to_b = am_connect(a, b, 2);
    pp->b_to_a = am_connect(b, a, 1);
    assert_int_equal(sx_am_register(b, PP_TAG + PP_PING, pp_on_am, pp), SX_OK);
    assert_int_equal(sx_am_register(a, PP_TAG + PP_PONG, pp_on_am, pp), SX_OK);
    assert_int_equal(sx_am_register(b, PP_TAG + PP_CHAIN, pp_on_am, pp), SX_OK);
    /* Polled, a second thread drives B and this one A, so each side's
     * callbacks send from the thread that progresses it; otherwise the
     * callbacks run on progress threads. */
    if (polled)
        mt_spin(&spin, b, true);
    pp_send(pp, PP_PING, 0);
    pp_send(pp, PP_CHAIN, 0);
    bool ok = mt_wait(goals, 2 * PP_KINDS, &a, polled, false);
    if (polled)
        mt_spin(&spin, b, false);
    mt_check();
    assert_true(ok);
    print_message("[   info   ] %d round trips, %d chained sends, %llu retransmissions, %.2f s\n",
                  PP_N, PP_N,
                  (unsigned long long)(mt_stat(a, "rtx_packets") + mt_stat(b, "rtx_packets")),
                  mt_since(start));
    sx_engine_destroy(a);
    sx_engine_destroy(b);
    for (unsigned k = 0; k < PP_KINDS; k++)
        for (unsigned i = 0; i < PP_N; i++)
            assert_int_equal(atomic_load(&pp->ops[k][i].calls), 1);
    free(pp);
}

/* ------------------------------------------ 3: threads exit mid-flight */

#define EX_THREADS 4
#define EX_MSGS    200

static void test_thread_exits_in_flight(void **state)
{
    const mt_cfg_t cfg = {MT_VARIANT(state), .seed = 31};
    sx_engine_h a = mt_engine(&cfg, 0, NULL), b = mt_engine(&cfg, 1, NULL);
    bool polled = !mt_threaded(&cfg);
    mt_sender_t x[EX_THREADS];
    mt_goal_t goals[EX_THREADS + 1];
    atomic_ulong delivered = 0, finished = 0;
    mt_rx_t rx = {.p = 0, .nthreads = EX_THREADS, .delivered = &delivered};
    mt_spinner_t spin;
    unsigned na = 1, left = 0;

    assert_int_equal(sx_engine_shard_count(a, &na), SX_OK);
    sx_peer_h to_b = am_connect(a, b, 2);
    (void)am_connect(b, a, 1);
    for (unsigned t = 0; t < EX_THREADS; t++)
        assert_int_equal(sx_am_register(b, MT_TAG + t, mt_on_am, &rx), SX_OK);
    if (polled)
        mt_spin(&spin, b, true);
    /* Spread over A's shards, so some threads leave work on a shard that
     * no remaining thread calls home. */
    for (unsigned t = 0; t < EX_THREADS; t++) {
        mt_sender_start(&x[t], (mt_sender_t){.t = t,
                                             .bind = (int)(t % na),
                                             .leave = true,
                                             .e = a,
                                             .peers = &to_b,
                                             .npeers = 1,
                                             .n = EX_MSGS,
                                             .finished = &finished});
        goals[t] = (mt_goal_t){&x[t].done, EX_MSGS};
    }
    goals[EX_THREADS] = (mt_goal_t){&delivered, EX_THREADS * EX_MSGS};
    /* This thread progresses A meanwhile, so some sends meet a busy token
     * and go through an inbox; the senders return with sends in flight
     * (counted, to show it). Polled, plain sx_progress calls must reach
     * the shards of senders bound elsewhere through their visits. */
    bool ok = mt_wait(goals, EX_THREADS + 1, &a, polled, false);
    for (unsigned t = 0; t < EX_THREADS; t++)
        pthread_join(x[t].tid, NULL);
    if (polled)
        mt_spin(&spin, b, false);
    mt_check();
    assert_true(ok);
    for (int i = 0; polled && i < 200; i++) {
        mt_progress(a, true);
        mt_progress(b, true);
    }
    assert_int_equal(atomic_load(&delivered), EX_THREADS * EX_MSGS);
    for (unsigned t = 0; t < EX_THREADS; t++) {
        left += x[t].left;
        mt_sender_check(&x[t], &rx);
    }
    print_message("[   info   ] %u of %u sends in flight when their threads returned\n", left,
                  EX_THREADS * EX_MSGS);
    sx_engine_destroy(a);
    sx_engine_destroy(b);
}

/* ---------------------------------------- 4: destroy while threads sleep */

#define DS_MSGS 24

static void destroy_while_asleep(const char *mode)
{
    const mt_cfg_t thr = {mode, "thread", 0}, poll = {mode, "poll", 0};
    /* A sends to P, which nobody ever progresses, and to Q, which has
     * progress threads of its own. */
    sx_engine_h a = mt_engine(&thr, 0, NULL), p = mt_engine(&poll, 0, NULL);
    sx_engine_h q = mt_engine(&thr, 0, NULL);
    mt_msg_t to_p[2 * DS_MSGS], to_q[DS_MSGS];
    atomic_ulong done_p = 0, done_q = 0, delivered = 0;
    mt_rx_t rx = {.p = 1, .nthreads = 1, .delivered = &delivered};

    sx_peer_h a_to_p = am_connect(a, p, 2), a_to_q = am_connect(a, q, 3);
    (void)am_connect(q, a, 1);
    assert_int_equal(sx_am_register(q, MT_TAG, mt_on_am, &rx), SX_OK);
    for (unsigned k = 0; k < DS_MSGS; k++) {
        assert_int_equal(mt_send(a_to_p, &to_p[k], 0, 0, k, &done_p), SX_INPROGRESS);
        assert_int_equal(mt_send(a_to_q, &to_q[k], 0, 1, k, &done_q), SX_INPROGRESS);
    }
    /* Q's traffic done means A's threads ran dry: what is left is P's
     * retransmission timers, between which they sleep in epoll. */
    const mt_goal_t goals[] = {{&done_q, DS_MSGS}, {&delivered, DS_MSGS}};
    bool ok = mt_wait(goals, 2, NULL, 0, false);
    mt_check();
    assert_true(ok);
    assert_int_equal(atomic_load(&done_p), 0);
    /* And sends that may still sit in an inbox when destroy starts. */
    for (unsigned k = DS_MSGS; k < 2 * DS_MSGS; k++)
        assert_int_equal(mt_send(a_to_p, &to_p[k], 0, 0, k, &done_p), SX_INPROGRESS);
    uint64_t t0 = sx_time_ns();
    sx_engine_destroy(a);
    double took = mt_since(t0);
    print_message("[   info   ] destroy took %.4f s\n", took);
    assert_true(took < 10.0); /* prompt; the bound only catches a hang */
    assert_int_equal(atomic_load(&done_p), 2 * DS_MSGS);
    mt_check_msgs(to_p, 2 * DS_MSGS, MT_ANY_ERROR, MT_ANY_ERROR, "pending send");
    mt_check_msgs(to_q, DS_MSGS, SX_OK, SX_OK, "send");
    sx_engine_destroy(p);
    sx_engine_destroy(q);
}

static void test_destroy_while_asleep(void **state)
{
    /* Twice: the first engines of a process pay for set-up that later
     * ones do not, which changes the timing. */
    destroy_while_asleep(((const mt_cfg_t *)*state)->mode);
    destroy_while_asleep(((const mt_cfg_t *)*state)->mode);
}

/* ---------------------------------------------- 5: control plane churn */

#define CP_SENDERS     2
#define CP_MSGS        500
#define CP_CHURNERS    2
#define CP_CHURN_PEERS 2 /* engines per churner and round: one silent, one talking */
#define CP_ROUNDS      6
/* A removed peer cannot come back in the same incarnation (sx_peer_add
 * refuses it: its channels' sequence state is gone), so every round adds
 * engines of its own. */
#define CP_ENGINES     (CP_CHURNERS * CP_CHURN_PEERS * CP_ROUNDS)
#define CP_CHURN_MSGS  2 /* sends to a churned peer before it is removed */
#define CP_CHURN_SENDS (CP_ROUNDS * CP_CHURN_PEERS * CP_CHURN_MSGS)
#define CP_REG_ROUNDS  300
#define CP_TAG_UP      90
#define CP_TALKS(c)    ((c) % 2 == 1)

typedef struct cp {
    sx_engine_h a, b;
    /* Churned peers of A. A silent one is never progressed, so A's sends
     * to it can only end cancelled by the removal. A talking one is
     * progressed and sends to A, so A's receive path looks it up while
     * the churners add and remove it. */
    sx_engine_h churn[CP_ENGINES];
    sx_peer_h up[CP_ENGINES]; /* a talking engine's peer A */
    uint8_t card[CP_ENGINES][4096];
    size_t card_len[CP_ENGINES];
    mt_msg_t churn_msgs[CP_CHURNERS][CP_CHURN_SENDS];
    atomic_ulong churn_done, finished, up_rx, down_rx;
    mt_rx_t *rx;
    uint8_t region[2][4096];
} cp_t;

typedef struct cp_arg {
    pthread_t tid;
    cp_t *cp;
    unsigned k;
} cp_arg_t;

static void cp_unused_am(void *arg, uint64_t peer_id, uint8_t tag, const void *data, size_t len)
{
    (void)arg, (void)data, (void)len;
    mt_fail("handler of tag %u ran (from peer %llu)", tag, (unsigned long long)peer_id);
}

static void cp_count_am(void *arg, uint64_t peer_id, uint8_t tag, const void *data, size_t len)
{
    (void)peer_id, (void)tag, (void)data, (void)len;
    atomic_fetch_add((atomic_ulong *)arg, 1);
}

static void cp_on_error(void *arg, uint64_t peer_id, int status)
{
    (void)arg;
    mt_fail("peer %llu failed: %s", (unsigned long long)peer_id, sx_status_name(status));
}

/* Adds this thread's engines as peers of A, sends to them and removes
 * them again, round after round; a talking engine also sends to A. */
static void *cp_churn_main(void *arg)
{
    cp_arg_t *ca = arg;
    cp_t *cp = ca->cp;
    unsigned m = 0;
    uint8_t msg[64] = {0};
    struct iovec iov = {msg, sizeof(msg)};

    for (unsigned r = 0; r < CP_ROUNDS; r++) {
        for (unsigned j = 0; j < CP_CHURN_PEERS; j++) {
            unsigned c = (r * CP_CHURNERS + ca->k) * CP_CHURN_PEERS + j;
            sx_peer_h h = NULL;
            int rc = sx_peer_add(cp->a, 100 + c, cp->card[c], cp->card_len[c], &h);
            if (rc != SX_OK) {
                mt_fail("churn %u round %u: sx_peer_add: %s", c, r, sx_status_name(rc));
                goto out;
            }
            /* Meets A's receive path while the peer is there or going.
             * SX_ERR_AGAIN (unacknowledged data in the way) is fine. */
            if (CP_TALKS(c))
                (void)sx_sendi(cp->up[c], CP_TAG_UP, &iov, 1);
            for (unsigned i = 0; i < CP_CHURN_MSGS; i++, m++) {
                rc = mt_send(h, &cp->churn_msgs[ca->k][m], 6, c, m, &cp->churn_done);
                if (rc != SX_INPROGRESS)
                    mt_fail("churn %u: sx_send: %s", c, sx_status_name(rc));
            }
            rc = sx_peer_remove(cp->a, h);
            if (rc != SX_OK)
                mt_fail("churn %u: sx_peer_remove: %s", c, sx_status_name(rc));
            /* The same incarnation cannot be re-added. */
            rc = sx_peer_add(cp->a, 100 + c, cp->card[c], cp->card_len[c], &h);
            if (rc != SX_ERR_EXISTS)
                mt_fail("churn %u: re-adding a removed peer: %s", c, sx_status_name(rc));
        }
    }
out:
    atomic_fetch_add(&cp->finished, 1);
    return NULL;
}

/* Registers and withdraws handlers (on A; on B, the live tags' handlers
 * are replaced by identical ones while B receives), memory regions and
 * error handlers. */
static void *cp_reg_main(void *arg)
{
    cp_t *cp = ((cp_arg_t *)arg)->cp;
    sx_engine_h both[2] = {cp->a, cp->b};

    for (unsigned r = 0; r < CP_REG_ROUNDS; r++) {
        uint8_t tag = (uint8_t)(200 + r % 16);
        sx_mem_h mem;
        int rc = sx_am_register(cp->a, tag, cp_unused_am, cp);
        rc = rc ? rc : sx_am_register(cp->a, tag, NULL, NULL);
        rc = rc ? rc : sx_am_register(cp->b, MT_TAG + r % CP_SENDERS, mt_on_am, cp->rx);
        rc = rc ? rc : sx_error_register(cp->a, cp_on_error, cp);
        for (unsigned i = 0; rc == SX_OK && i < 2; i++) {
            rc = sx_mem_register(both[i], cp->region[i], sizeof(cp->region[i]),
                                 SX_MEM_REMOTE_READ | SX_MEM_REMOTE_WRITE, &mem);
            rc = rc ? rc : sx_mem_deregister(both[i], mem);
        }
        if (rc != SX_OK) {
            mt_fail("registration round %u: %s", r, sx_status_name(rc));
            break;
        }
    }
    atomic_fetch_add(&cp->finished, 1);
    return NULL;
}

static void test_control_plane(void **state)
{
    const mt_cfg_t cfg = {MT_VARIANT(state), .seed = 0};
    cp_t *cp = calloc(1, sizeof(*cp));
    mt_sender_t snd[CP_SENDERS];
    cp_arg_t churners[CP_CHURNERS], reg = {.cp = cp};
    atomic_ulong delivered = 0, senders_done = 0;
    mt_rx_t rx = {.p = 0, .nthreads = CP_SENDERS, .delivered = &delivered};
    uint64_t start = sx_time_ns();

    assert_non_null(cp);
    cp->rx = &rx;
    cp->a = mt_engine(&cfg, 0, NULL);
    cp->b = mt_engine(&cfg, 0, NULL);
    sx_peer_h to_b = am_connect(cp->a, cp->b, 2);
    (void)am_connect(cp->b, cp->a, 1);
    for (unsigned t = 0; t < CP_SENDERS; t++)
        assert_int_equal(sx_am_register(cp->b, MT_TAG + t, mt_on_am, &rx), SX_OK);
    assert_int_equal(sx_am_register(cp->a, CP_TAG_UP, cp_count_am, &cp->up_rx), SX_OK);
    for (unsigned c = 0; c < CP_ENGINES; c++) {
        cp->churn[c] = mt_engine(&cfg, 0, NULL);
        cp->card_len[c] = sizeof(cp->card[c]);
        assert_int_equal(sx_engine_address(cp->churn[c], cp->card[c], &cp->card_len[c]), SX_OK);
        if (CP_TALKS(c)) {
            cp->up[c] = am_connect(cp->churn[c], cp->a, 1);
            assert_int_equal(sx_am_register(cp->churn[c], MT_TAG + 6, cp_count_am, &cp->down_rx),
                             SX_OK);
        }
    }

    for (unsigned t = 0; t < CP_SENDERS; t++)
        mt_sender_start(&snd[t], (mt_sender_t){.t = t,
                                               .bind = -1,
                                               .e = cp->a,
                                               .peers = &to_b,
                                               .npeers = 1,
                                               .n = CP_MSGS,
                                               .finished = &senders_done});
    for (unsigned k = 0; k < CP_CHURNERS; k++) {
        churners[k] = (cp_arg_t){.cp = cp, .k = k};
        assert_int_equal(pthread_create(&churners[k].tid, NULL, cp_churn_main, &churners[k]), 0);
    }
    assert_int_equal(pthread_create(&reg.tid, NULL, cp_reg_main, &reg), 0);
    /* This thread progresses B, A for the churners (which never do), and
     * the talking engines. */
    sx_engine_h prog[2 + CP_ENGINES / 2] = {cp->a, cp->b};
    for (unsigned c = 1; c < CP_ENGINES; c += 2)
        prog[2 + c / 2] = cp->churn[c];
    const mt_goal_t goals[] = {{&senders_done, CP_SENDERS},
                               {&delivered, CP_SENDERS * CP_MSGS},
                               {&cp->finished, CP_CHURNERS + 1},
                               {&cp->churn_done, CP_CHURNERS * CP_CHURN_SENDS}};
    bool ok = mt_wait(goals, 4, prog, 2 + CP_ENGINES / 2, true);
    for (unsigned t = 0; t < CP_SENDERS; t++)
        pthread_join(snd[t].tid, NULL);
    for (unsigned k = 0; k < CP_CHURNERS; k++)
        pthread_join(churners[k].tid, NULL);
    pthread_join(reg.tid, NULL);
    mt_check();
    assert_true(ok);
    for (int i = 0; i < 200; i++) {
        mt_progress(cp->a, true);
        mt_progress(cp->b, true);
    }
    mt_check();
    assert_int_equal(atomic_load(&delivered), CP_SENDERS * CP_MSGS);
    for (unsigned t = 0; t < CP_SENDERS; t++)
        mt_sender_check(&snd[t], &rx);
    /* A silent peer never answered: its removal cancelled every send to
     * it. A talking one may have acknowledged some first. */
    for (unsigned k = 0; k < CP_CHURNERS; k++) {
        for (unsigned m = 0; m < CP_CHURN_SENDS; m++) {
            unsigned j = (m / CP_CHURN_MSGS) % CP_CHURN_PEERS;
            mt_check_msgs(&cp->churn_msgs[k][m], 1, SX_ERR_CANCELED,
                          CP_TALKS(j) ? SX_OK : SX_ERR_CANCELED, "churn send");
        }
    }
    assert_int_equal(mt_stat(cp->b, "am_no_handler"), 0);
    print_message("[   info   ] churn: %lu messages up to A, %lu down from it, %.2f s\n",
                  atomic_load(&cp->up_rx), atomic_load(&cp->down_rx), mt_since(start));
    sx_engine_destroy(cp->a);
    sx_engine_destroy(cp->b);
    for (unsigned c = 0; c < CP_ENGINES; c++)
        sx_engine_destroy(cp->churn[c]);
    free(cp);
}

/* The variants, a cmocka state each. */
static const mt_cfg_t sharded_poll = {"sharded", "poll", 0}, global_poll = {"global", "poll", 0};
static const mt_cfg_t sharded_thread = {"sharded", "thread", 0};
static const mt_cfg_t global_thread = {"global", "thread", 0};

#define MT_CASE(fn, v) ((struct CMUnitTest){#fn " " #v, fn, mt_setup, NULL, (void *)&v})

int main(void)
{
    const struct CMUnitTest tests[] = {
        MT_CASE(test_stress, sharded_poll),
        MT_CASE(test_stress, global_poll),
        /* Progress threads drive every engine, and the senders' own
         * sx_progress calls compete with them for the tokens. */
        MT_CASE(test_stress, sharded_thread),
        MT_CASE(test_callback_sends, sharded_poll),
        MT_CASE(test_callback_sends, global_poll),
        MT_CASE(test_callback_sends, sharded_thread),
        MT_CASE(test_callback_sends, global_thread),
        MT_CASE(test_thread_exits_in_flight, sharded_poll),
        MT_CASE(test_thread_exits_in_flight, global_poll),
        MT_CASE(test_thread_exits_in_flight, sharded_thread),
        MT_CASE(test_destroy_while_asleep, sharded_thread),
        MT_CASE(test_destroy_while_asleep, global_thread),
        MT_CASE(test_control_plane, sharded_poll),
        MT_CASE(test_control_plane, global_poll),
    };
    sx_test_filter_from_env();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
