/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * inbox_bench: choose the shard inbox queue (DESIGN.md section 3).
 *
 * A shard's inbox is a multi-producer, single-consumer queue of requests:
 * application threads that lose the race for the shard's token enqueue, and
 * whichever thread holds the token drains. The candidates are liburcu's
 * wfcqueue (intrusive, unbounded, wait-free enqueue) and Concurrency Kit's
 * ck_ring (bounded ring of pointers). This program measures one item's trip
 * through each queue (enqueue + dequeue) in three scenarios:
 *
 *   uncontended  one thread enqueues a batch of 64 and drains it;
 *   1p1c         one producer thread and one consumer thread;
 *   2p1c         two producer threads and one consumer thread.
 *
 * wfcqueue is drained two ways: per-item __cds_wfcq_dequeue_nonblocking(),
 * and __cds_wfcq_splice_nonblocking() into a consumer-local queue that is
 * then walked with plain loads. The consumer is the only dequeuer (it
 * stands for the token holder), which is what makes the __cds_wfcq_*
 * variants legal without the queue's mutex. ck_ring is drained with
 * ck_ring_dequeue_mpsc(), which is the single-consumer dequeue.
 *
 * Every item carries (run, producer, sequence, checksum), and the consumer
 * aborts unless each producer's items arrive exactly once, in order, with
 * the contents written before the pointer was published.
 *
 * Build: gcc -std=c11 -O2 -Wall -Wextra -Werror -D_GNU_SOURCE
 *        $(pkg-config --cflags liburcu ck) bench/inbox_bench.c
 *        $(pkg-config --libs liburcu ck) -lpthread -o inbox_bench
 * TSan:  the same with -O1 -g -fsanitize=thread; run it with --iters 100000.
 *
 * On a machine with fewer than three CPUs, 2p1c is oversubscribed and says
 * so; the table also shows how much CPU the hypervisor and other processes
 * took during each case, because on a shared VM that is what moves figures.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

/*
 * Use liburcu's static inline fast paths, as the library itself would: the
 * out-of-line versions add a call per operation. _LGPL_SOURCE is liburcu's
 * switch for this and is only allowed for LGPL-compatible code.
 */
#define _LGPL_SOURCE 1

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <unistd.h>

#include <urcu/arch.h>
#include <urcu/wfcqueue.h>
#include <ck_ring.h>

#if defined(__SANITIZE_THREAD__)
#define IB_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define IB_TSAN 1
#endif
#endif

#ifdef IB_TSAN
#include <sanitizer/tsan_interface.h>
/*
 * Dynamic annotations exported by both GCC's and LLVM's TSan runtimes (they
 * have no public header).
 */
void AnnotateIgnoreReadsBegin(const char *file, int line);
void AnnotateIgnoreReadsEnd(const char *file, int line);
void AnnotateIgnoreWritesBegin(const char *file, int line);
void AnnotateIgnoreWritesEnd(const char *file, int line);
#endif

enum {
    MAX_PRODUCERS = 2,
    BATCH = 64,         /* items per drain call (and per uncontended round) */
    RING_SIZE = 4096,   /* ck_ring keeps one slot empty: 4095 usable */
    POOL_ITEMS = 16384, /* requests per producer, recycled once consumed */
    DEFAULT_REPS = 5,
    MAX_REPS = 15,
    YIELD_EVERY = 128, /* spins between sched_yield() calls */
    LAT_SAMPLE = 64,   /* time one enqueue in this many (two clock reads each) */
    STALL_NS = 10000,  /* a sampled enqueue slower than this counts as a stall */
    DEFAULT_ITEMS = 1000000,
};

enum queue_kind {
    Q_WFCQ_DEQUEUE,
    Q_WFCQ_SPLICE,
    Q_RING,
    Q_COUNT,
};

static const char *const queue_name[Q_COUNT] = {"wfcqueue", "wfcqueue", "ck_ring"};
static const char *const drain_name[Q_COUNT] = {"dequeue", "splice", "dequeue"};

/*
 * A request is one cache line: big enough to stand for a real send request
 * and aligned so that a producer writing item i+1 never shares a line with
 * the consumer reading item i, which would measure false sharing instead of
 * the queue.
 */
struct req {
    struct cds_wfcq_node node; /* wfcqueue is intrusive: enqueue allocates nothing */
    uint32_t producer;
    uint32_t run;   /* which run stamped it, so a stale item from an earlier run fails */
    uint64_t seq;   /* per-producer sequence: FIFO and exactly-once check */
    uint64_t check; /* function of the above: catches contents not yet visible */
    uint64_t payload[4];
} __attribute__((aligned(64)));

_Static_assert(sizeof(struct req) == 64, "a request is one cache line");

struct counters {
    uint64_t ring_full_retries; /* failed ck_ring enqueues (ring full), each retried */
    uint64_t pool_waits;        /* producer found all its requests still in flight */
    uint64_t would_block;       /* wfcqueue saw an enqueue half done */
    uint64_t empty_polls;       /* consumer drained nothing */
    uint64_t yields;            /* sched_yield() calls while spinning */
    uint64_t enq_max_ns;        /* slowest sampled successful enqueue call (a maximum) */
    uint64_t enq_stalls;        /* sampled successful enqueue calls slower than STALL_NS */
};

struct padded_u64 {
    _Alignas(64) _Atomic uint64_t v;
};

struct bench {
    /*
     * wfcqueue head and tail on separate lines, as urcu/wfcqueue.h advises:
     * producers exchange the tail, the consumer walks from the head.
     */
    _Alignas(64) struct __cds_wfcq_head head;
    _Alignas(64) struct cds_wfcq_tail tail;
    _Alignas(64) ck_ring_t ring; /* pads consumer and producer counters itself */
    ck_ring_buffer_t *ring_buf;

    enum queue_kind kind;
    unsigned producers;
    uint64_t per_producer;
    uint32_t run;
    struct req *pool[MAX_PRODUCERS];

    /*
     * How many of each producer's items the consumer has finished with.
     * Release by the consumer after it verified them, acquire by the
     * producer before it rewrites them: the pool is the inbox's bound for
     * wfcqueue, as a request pool would be in the library.
     */
    struct padded_u64 consumed[MAX_PRODUCERS];
    _Alignas(64) _Atomic unsigned ready;
    _Atomic int go;

    uint64_t t0, t1;
    struct counters prod_cnt[MAX_PRODUCERS];
    struct counters cons_cnt;
};

/* Consumer-private state; only the thread that drains touches it. */
struct consumer {
    uint64_t expected[MAX_PRODUCERS];
    uint64_t got;
    struct __cds_wfcq_head local_head;
    struct cds_wfcq_tail local_tail;
    struct cds_wfcq_node *cursor; /* next spliced node to process; NULL: local is empty */
    struct counters cnt;
};

struct producer_arg {
    struct bench *b;
    unsigned id;
};

struct result {
    double ns[MAX_REPS];
    struct counters cnt[MAX_REPS];
    uint64_t wall_ns; /* all repetitions together */
    bool cpu_known;   /* /proc/stat was readable for every repetition */
    double steal_s;   /* CPU time the hypervisor took, over all repetitions */
    double others_s;  /* CPU time other processes on this machine used */
};

/* One case over its repetitions: the median run's figures, and the spread. */
struct summary {
    double median, min, max;
    struct counters cnt; /* from the median run, so they go with its time */
    double steal_pct;    /* of all CPUs' time during the runs; negative: unknown */
    double others_pct;   /* likewise, for other processes */
};

static struct bench g_bench;

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/*
 * TSan cannot see the queues' synchronization: both libraries use inline
 * assembly and volatile accesses. Under TSan the queue calls run with access
 * tracking off, and each item's trip is annotated as the release/acquire
 * pair that both libraries document ("content written into the node before
 * enqueue is guaranteed to be consistent"). What TSan then checks is this
 * program: item stamping and reuse, the consumed counters, the start flag.
 */
static inline void tsan_queue_begin(void)
{
#ifdef IB_TSAN
    AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
    AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
#endif
}

static inline void tsan_queue_end(void)
{
#ifdef IB_TSAN
    AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
    AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
#endif
}

static inline void tsan_publish(struct req *r)
{
#ifdef IB_TSAN
    __tsan_release(r);
#else
    (void)r;
#endif
}

static inline void tsan_received(struct req *r)
{
#ifdef IB_TSAN
    __tsan_acquire(r);
#else
    (void)r;
#endif
}

/*
 * Spin politely. With two cores and three threads the thread being waited
 * for may be queued behind the spinner on the same core, so yield now and
 * then: the wait then ends within microseconds, not a scheduler time slice.
 */
static inline void backoff(uint64_t *spins, struct counters *cnt)
{
    if (++*spins % YIELD_EVERY == 0) {
        sched_yield();
        cnt->yields++;
    } else {
        caa_cpu_relax();
    }
}

static inline uint64_t req_check(uint32_t run, uint32_t producer, uint64_t seq)
{
    return (seq * 0x9e3779b97f4a7c15u) ^ ((uint64_t)run << 32 | producer);
}

static inline void req_stamp(struct req *r, uint32_t run, uint32_t producer, uint64_t seq)
{
    cds_wfcq_node_init(&r->node);
    r->producer = producer;
    r->run = run;
    r->seq = seq;
    r->check = req_check(run, producer, seq);
    tsan_publish(r);
}

static void fail(const char *what, const struct req *r)
{
    fprintf(stderr, "inbox_bench: FAILED: %s", what);
    if (r != NULL)
        fprintf(stderr, " (item %p: producer %" PRIu32 " run %" PRIu32 " seq %" PRIu64 ")",
                (const void *)r, r->producer, r->run, r->seq);
    fputc('\n', stderr);
    abort();
}

/* Exactly once and per-producer FIFO: item n of a producer must be the nth seen. */
static inline void verify(const struct bench *b, struct consumer *c, struct req *r)
{
    tsan_received(r);
    if (r->producer >= b->producers || r->run != b->run)
        fail("item from an unknown producer or an earlier run", r);
    if (r->check != req_check(r->run, r->producer, r->seq))
        fail("item contents not visible to the consumer", r);
    if (r->seq != c->expected[r->producer]) {
        fprintf(stderr, "inbox_bench: expected seq %" PRIu64 "\n", c->expected[r->producer]);
        fail(r->seq < c->expected[r->producer] ? "item delivered twice or reordered"
                                               : "item lost or reordered",
             r);
    }
    c->expected[r->producer]++;
    c->got++;
}

/* ------------------------------------------------------------------ */
/* Queue operations                                                    */
/* ------------------------------------------------------------------ */

/*
 * When asked, time the library call that succeeds, and only that one: a
 * full ring's retries are backpressure and are counted separately, while
 * time inside a successful call is what a producer pays for the queue's
 * progress guarantee. wfcqueue's enqueue is two instructions; ck_ring's
 * multi-producer enqueue waits until every producer that reserved a slot
 * before it has committed, so a preempted producer stalls the others.
 */
static inline void enqueue(struct bench *b, struct req *r, struct counters *cnt, bool timed)
{
    uint64_t spins = 0, t = 0;
    bool ok;

    if (timed)
        t = now_ns();
    if (b->kind != Q_RING) {
        tsan_queue_begin();
        cds_wfcq_enqueue(&b->head, &b->tail, &r->node);
        tsan_queue_end();
    } else {
        for (;;) {
            tsan_queue_begin();
            ok = ck_ring_enqueue_mpsc(&b->ring, b->ring_buf, r);
            tsan_queue_end();
            if (ok)
                break;
            /* Full is the ring's backpressure: a library producer would wait too. */
            cnt->ring_full_retries++;
            backoff(&spins, cnt);
            if (timed)
                t = now_ns();
        }
    }
    if (timed) {
        t = now_ns() - t;
        cnt->enq_max_ns = t > cnt->enq_max_ns ? t : cnt->enq_max_ns;
        cnt->enq_stalls += t > STALL_NS;
    }
}

static unsigned drain_ring(struct bench *b, struct consumer *c)
{
    unsigned n;
    void *p;
    bool ok;

    for (n = 0; n < BATCH; n++) {
        tsan_queue_begin();
        ok = ck_ring_dequeue_mpsc(&b->ring, b->ring_buf, &p);
        tsan_queue_end();
        if (!ok)
            break;
        verify(b, c, p);
    }
    return n;
}

static unsigned drain_wfcq_dequeue(struct bench *b, struct consumer *c)
{
    struct cds_wfcq_node *node;
    unsigned n;

    for (n = 0; n < BATCH; n++) {
        tsan_queue_begin();
        node = __cds_wfcq_dequeue_nonblocking(&b->head, &b->tail);
        tsan_queue_end();
        if (node == NULL)
            break;
        /*
         * A producer has swapped the tail but not yet linked its node. The
         * queue is left intact, so stop here and let the next drain retry,
         * as the token holder would rather than wait on a preempted thread.
         */
        if (node == CDS_WFCQ_WOULDBLOCK) {
            c->cnt.would_block++;
            break;
        }
        verify(b, c, caa_container_of(node, struct req, node));
    }
    return n;
}

/*
 * Take the whole inbox with two exchanges on it (and one on the private
 * list), then walk the private list with plain loads. The walk fetches a node's successor before
 * processing the node, because the library will recycle a request once it is processed. If a
 * successor is still being linked by its producer, remember where we are and resume at the next
 * call, without splicing again.
 */
static unsigned drain_wfcq_splice(struct bench *b, struct consumer *c)
{
    struct cds_wfcq_node *next;
    enum cds_wfcq_ret ret;
    unsigned n = 0;

    tsan_queue_begin();
    if (c->cursor == NULL) {
        /*
         * Look before splicing. The splice exchanges the head's next
         * pointer even when a producer is between its two stores, and that
         * write takes the line the producer is about to link through, so a
         * consumer that polls faster than items arrive would keep stealing
         * it. __cds_wfcq_first_nonblocking() only loads.
         */
        next = __cds_wfcq_first_nonblocking(&b->head, &b->tail);
        if (next == CDS_WFCQ_WOULDBLOCK)
            c->cnt.would_block++;
        if (next == NULL || next == CDS_WFCQ_WOULDBLOCK) {
            tsan_queue_end();
            return 0;
        }
        ret = __cds_wfcq_splice_nonblocking(&c->local_head, &c->local_tail, &b->head, &b->tail);
        if (ret == CDS_WFCQ_RET_WOULDBLOCK || ret == CDS_WFCQ_RET_SRC_EMPTY)
            fail("splice found nothing after first() found a node", NULL);
        /* Our own append linked the head, so this cannot block. */
        c->cursor = __cds_wfcq_first_nonblocking(&c->local_head, &c->local_tail);
        if (c->cursor == NULL || c->cursor == CDS_WFCQ_WOULDBLOCK)
            fail("spliced list has no first node", NULL);
    }
    for (;;) {
        next = __cds_wfcq_next_nonblocking(&c->local_head, &c->local_tail, c->cursor);
        if (next == CDS_WFCQ_WOULDBLOCK) {
            c->cnt.would_block++;
            break;
        }
        tsan_queue_end();
        verify(b, c, caa_container_of(c->cursor, struct req, node));
        n++;
        tsan_queue_begin();
        if (next == NULL) {
            __cds_wfcq_init(&c->local_head, &c->local_tail);
            c->cursor = NULL;
            break;
        }
        c->cursor = next;
    }
    tsan_queue_end();
    return n;
}

static inline unsigned drain(struct bench *b, struct consumer *c)
{
    switch (b->kind) {
    case Q_WFCQ_DEQUEUE:
        return drain_wfcq_dequeue(b, c);
    case Q_WFCQ_SPLICE:
        return drain_wfcq_splice(b, c);
    default:
        return drain_ring(b, c);
    }
}

/* ------------------------------------------------------------------ */
/* Runs                                                                */
/* ------------------------------------------------------------------ */

static void reset_queues(struct bench *b, enum queue_kind kind, unsigned producers,
                         uint64_t per_producer)
{
    static uint32_t run;

    b->kind = kind;
    b->producers = producers;
    b->per_producer = per_producer;
    b->run = ++run;
    __cds_wfcq_init(&b->head, &b->tail);
    ck_ring_init(&b->ring, RING_SIZE);
    for (unsigned p = 0; p < MAX_PRODUCERS; p++) {
        atomic_store_explicit(&b->consumed[p].v, 0, memory_order_relaxed);
        memset(&b->prod_cnt[p], 0, sizeof(b->prod_cnt[p]));
    }
    memset(&b->cons_cnt, 0, sizeof(b->cons_cnt));
    atomic_store_explicit(&b->ready, 0, memory_order_relaxed);
    atomic_store_explicit(&b->go, 0, memory_order_relaxed);
}

static void consumer_init(struct consumer *c)
{
    memset(c, 0, sizeof(*c));
    __cds_wfcq_init(&c->local_head, &c->local_tail);
    c->cursor = NULL;
}

/* After the last item: every producer complete and nothing left anywhere. */
static void check_drained(struct bench *b, struct consumer *c)
{
    for (unsigned p = 0; p < b->producers; p++)
        if (c->expected[p] != b->per_producer)
            fail("a producer's item count is wrong", NULL);
    tsan_queue_begin();
    bool wfcq_empty = cds_wfcq_empty(&b->head, &b->tail) && c->cursor == NULL;
    bool ring_empty = ck_ring_size(&b->ring) == 0;
    tsan_queue_end();
    if (!wfcq_empty)
        fail("wfcqueue not empty after the last item", NULL);
    if (!ring_empty)
        fail("ck_ring not empty after the last item", NULL);
}

/*
 * Uncontended: the cost of the operations themselves. One thread stamps and
 * enqueues a batch, then drains it; the batch reuses 64 requests, so they
 * stay in L1 and only the queue's own work is timed.
 */
static uint64_t run_uncontended(struct bench *b, enum queue_kind kind, uint64_t items)
{
    struct req *pool = b->pool[0];
    struct counters cnt = {0};
    struct consumer c;
    uint64_t seq, t0, t1;
    unsigned i, k;

    reset_queues(b, kind, 1, items);
    consumer_init(&c);
    t0 = now_ns();
    for (seq = 0; seq < items; seq += k) {
        k = items - seq < BATCH ? (unsigned)(items - seq) : BATCH;
        for (i = 0; i < k; i++) {
            struct req *r = &pool[(seq + i) % BATCH];

            req_stamp(r, b->run, 0, seq + i);
            enqueue(b, r, &cnt, false);
        }
        while (c.got < seq + k)
            if (drain(b, &c) == 0)
                fail("single-threaded drain came back empty", NULL);
    }
    t1 = now_ns();
    check_drained(b, &c);
    b->cons_cnt = c.cnt;
    b->prod_cnt[0] = cnt;
    return t1 - t0;
}

/* Start together; waiting threads yield so the main thread gets to say go. */
static void wait_for_go(struct bench *b)
{
    atomic_fetch_add_explicit(&b->ready, 1, memory_order_acq_rel);
    while (!atomic_load_explicit(&b->go, memory_order_acquire))
        sched_yield();
}

static void *producer_main(void *arg)
{
    const struct producer_arg *pa = arg;
    struct bench *b = pa->b;
    const unsigned id = pa->id;
    struct req *pool = b->pool[id];
    struct counters cnt = {0};
    uint64_t seq, limit = POOL_ITEMS, spins;

    wait_for_go(b);
    for (seq = 0; seq < b->per_producer; seq++) {
        /* Reuse a request only once the consumer is done with it. */
        spins = 0;
        while (seq >= limit) {
            limit = atomic_load_explicit(&b->consumed[id].v, memory_order_acquire) + POOL_ITEMS;
            if (seq >= limit) {
                cnt.pool_waits++;
                backoff(&spins, &cnt);
            }
        }
        struct req *r = &pool[seq % POOL_ITEMS];

        req_stamp(r, b->run, id, seq);
        /*
         * Sample enqueue latency: throughput alone cannot tell a slow queue
         * from producers stalled behind a preempted producer.
         */
        enqueue(b, r, &cnt, seq % LAT_SAMPLE == 0);
    }
    b->prod_cnt[id] = cnt;
    return NULL;
}

static void *consumer_main(void *arg)
{
    struct bench *b = arg;
    const uint64_t total = b->per_producer * b->producers;
    struct consumer c;
    uint64_t spins = 0;

    consumer_init(&c);
    wait_for_go(b);
    while (c.got < total) {
        if (drain(b, &c) == 0) {
            c.cnt.empty_polls++;
            backoff(&spins, &c.cnt);
            continue;
        }
        spins = 0;
        for (unsigned p = 0; p < b->producers; p++)
            atomic_store_explicit(&b->consumed[p].v, c.expected[p], memory_order_release);
    }
    b->t1 = now_ns();
    check_drained(b, &c);
    b->cons_cnt = c.cnt;
    return NULL;
}

static void start_thread(pthread_t *t, void *(*fn)(void *), void *arg)
{
    int rc = pthread_create(t, NULL, fn, arg);

    if (rc != 0) {
        fprintf(stderr, "inbox_bench: pthread_create: %s\n", strerror(rc));
        exit(1);
    }
}

/* Concurrent: items split evenly over the producers; time to the last item. */
static uint64_t run_threads(struct bench *b, enum queue_kind kind, unsigned producers,
                            uint64_t items)
{
    struct producer_arg pa[MAX_PRODUCERS];
    pthread_t prod[MAX_PRODUCERS], cons;
    unsigned p;

    reset_queues(b, kind, producers, items / producers);
    start_thread(&cons, consumer_main, b);
    for (p = 0; p < producers; p++) {
        pa[p] = (struct producer_arg){.b = b, .id = p};
        start_thread(&prod[p], producer_main, &pa[p]);
    }
    while (atomic_load_explicit(&b->ready, memory_order_acquire) < producers + 1)
        sched_yield();
    b->t0 = now_ns();
    atomic_store_explicit(&b->go, 1, memory_order_release);
    for (p = 0; p < producers; p++)
        pthread_join(prod[p], NULL);
    pthread_join(cons, NULL);
    return b->t1 - b->t0;
}

/* ------------------------------------------------------------------ */
/* Reporting                                                           */
/* ------------------------------------------------------------------ */

static struct counters sum_counters(const struct bench *b)
{
    struct counters s = b->cons_cnt;

    for (unsigned p = 0; p < MAX_PRODUCERS; p++) {
        s.ring_full_retries += b->prod_cnt[p].ring_full_retries;
        s.pool_waits += b->prod_cnt[p].pool_waits;
        s.would_block += b->prod_cnt[p].would_block;
        s.empty_polls += b->prod_cnt[p].empty_polls;
        s.yields += b->prod_cnt[p].yields;
        s.enq_stalls += b->prod_cnt[p].enq_stalls;
        if (b->prod_cnt[p].enq_max_ns > s.enq_max_ns)
            s.enq_max_ns = b->prod_cnt[p].enq_max_ns;
    }
    return s;
}

/* The median run (the lower middle one if reps is even), plus min and max. */
static struct summary summarize(const struct result *rs, unsigned reps)
{
    unsigned order[MAX_REPS], i, j, t;
    struct summary sum;

    for (i = 0; i < reps; i++)
        order[i] = i;
    for (i = 1; i < reps; i++)
        for (j = i; j > 0 && rs->ns[order[j - 1]] > rs->ns[order[j]]; j--) {
            t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    sum.median = rs->ns[order[(reps - 1) / 2]];
    sum.cnt = rs->cnt[order[(reps - 1) / 2]];
    sum.min = rs->ns[order[0]];
    sum.max = rs->ns[order[reps - 1]];
    sum.steal_pct = sum.others_pct = -1.0;
    double all_cpus_s = (double)rs->wall_ns * 1e-9 * (double)sysconf(_SC_NPROCESSORS_ONLN);

    /*
     * /proc/stat counts in clock ticks (10 ms at 100 Hz), so a share is only
     * worth printing over 50 ticks or more of CPU time.
     */
    if (rs->cpu_known && all_cpus_s * (double)sysconf(_SC_CLK_TCK) >= 50.0) {
        sum.steal_pct = 100.0 * rs->steal_s / all_cpus_s;
        sum.others_pct = 100.0 * rs->others_s / all_cpus_s;
        /* Tick granularity can push a tiny share just below zero. */
        sum.others_pct = sum.others_pct < 0.0 ? 0.0 : sum.others_pct;
    }
    return sum;
}

/*
 * Who else had the CPUs. On a shared VM, hypervisor steal and other
 * processes (a build next door) are what make repetitions disagree, so the
 * report shows both next to the spread. Machine-wide busy and steal time
 * come from /proc/stat (Linux); this process's own share from getrusage().
 */
struct cpu_sample {
    bool ok;
    double busy_s, steal_s, self_s;
};

static struct cpu_sample cpu_sample(void)
{
    struct cpu_sample cs = {0};
    unsigned long long f[8];
    struct rusage ru;
    FILE *fp = fopen("/proc/stat", "r");
    double tick = 1.0 / (double)sysconf(_SC_CLK_TCK);

    if (fp == NULL)
        return cs;
    /* user nice system idle iowait irq softirq steal */
    cs.ok = fscanf(fp, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &f[0], &f[1], &f[2], &f[3],
                   &f[4], &f[5], &f[6], &f[7]) == 8;
    fclose(fp);
    if (!cs.ok || getrusage(RUSAGE_SELF, &ru) != 0) {
        cs.ok = false;
        return cs;
    }
    cs.busy_s = (double)(f[0] + f[1] + f[2] + f[5] + f[6]) * tick;
    cs.steal_s = (double)f[7] * tick;
    cs.self_s = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
    return cs;
}

/* A share for the table or JSON: a dash or null where it is unknown. */
static const char *pct(char *buf, size_t len, double v, bool json)
{
    if (v < 0.0)
        snprintf(buf, len, "%s", json ? "null" : "-");
    else
        snprintf(buf, len, "%.1f", v);
    return buf;
}

static void print_row(const char *scenario, enum queue_kind q, struct summary m)
{
    char st[16], ot[16];

    printf("%-11s %-8s %-7s %9.2f %7.2f %7.2f %6s %6s %9" PRIu64 " %9" PRIu64 " %9" PRIu64
           " %10" PRIu64 " %7" PRIu64 " %10.1f %6" PRIu64 "\n",
           scenario, queue_name[q], drain_name[q], m.median, m.min, m.max,
           pct(st, sizeof(st), m.steal_pct, false), pct(ot, sizeof(ot), m.others_pct, false),
           m.cnt.ring_full_retries, m.cnt.pool_waits, m.cnt.would_block, m.cnt.empty_polls,
           m.cnt.yields, (double)m.cnt.enq_max_ns / 1e3, m.cnt.enq_stalls);
}

static void print_json(const char *scenario, unsigned producers, bool threaded, enum queue_kind q,
                       uint64_t items, unsigned reps, long cpus, struct summary m)
{
    char st[16], ot[16];

    printf("{\"bench\":\"inbox\",\"queue\":\"%s\",\"drain\":\"%s\",\"scenario\":\"%s\","
           "\"producers\":%u,\"consumer_thread\":%s,\"items\":%" PRIu64 ",\"reps\":%u,"
           "\"cpus\":%ld,\"oversubscribed\":%s,\"ns_per_op\":%.2f,\"ns_min\":%.2f,"
           "\"ns_max\":%.2f,\"steal_pct\":%s,\"other_pct\":%s,\"ring_full_retries\":%" PRIu64
           ",\"pool_waits\":%" PRIu64 ",\"would_block\":%" PRIu64 ",\"empty_polls\":%" PRIu64
           ",\"yields\":%" PRIu64 ",\"enq_max_ns\":%" PRIu64 ",\"enq_stalls\":%" PRIu64 "}\n",
           queue_name[q], drain_name[q], scenario, producers, threaded ? "true" : "false", items,
           reps, cpus, threaded && producers + 1 > cpus ? "true" : "false", m.median, m.min, m.max,
           pct(st, sizeof(st), m.steal_pct, true), pct(ot, sizeof(ot), m.others_pct, true),
           m.cnt.ring_full_retries, m.cnt.pool_waits, m.cnt.would_block, m.cnt.empty_polls,
           m.cnt.yields, m.cnt.enq_max_ns, m.cnt.enq_stalls);
}

static void usage(FILE *f, const char *argv0)
{
    fprintf(f,
            "usage: %s [--iters N] [--reps N] [--json]\n"
            "  --iters N  items through the queue per run (default %d)\n"
            "  --reps N   runs per case, median reported (default %d, at most %d)\n"
            "  --json     print only JSON lines\n",
            argv0, DEFAULT_ITEMS, DEFAULT_REPS, MAX_REPS);
}

static uint64_t parse_count(const char *s, const char *argv0)
{
    char *end;
    unsigned long long v;

    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v == 0 || s[0] == '-') {
        usage(stderr, argv0);
        exit(2);
    }
    return v;
}

static void *alloc_prefaulted(size_t size)
{
    void *p = aligned_alloc(64, size);

    if (p == NULL) {
        fprintf(stderr, "inbox_bench: out of memory\n");
        exit(1);
    }
    /* Touch it now so that page faults land outside the timed runs. */
    memset(p, 0, size);
    return p;
}

int main(int argc, char **argv)
{
    static const char *const scenario_name[3] = {"uncontended", "1p1c", "2p1c"};
    static const unsigned scenario_producers[3] = {1, 1, 2};
    struct bench *b = &g_bench;
    uint64_t items = DEFAULT_ITEMS;
    unsigned reps = DEFAULT_REPS;
    bool json_only = false;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    struct result res[3][Q_COUNT] = {0};

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            json_only = true;
        } else if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
            items = parse_count(argv[++i], argv[0]);
        } else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            reps = (unsigned)parse_count(argv[++i], argv[0]);
            if (reps > MAX_REPS) {
                usage(stderr, argv[0]);
                return 2;
            }
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout, argv[0]);
            return 0;
        } else {
            usage(stderr, argv[0]);
            return 2;
        }
    }
    /* Items split evenly over producers, so every case moves the same count. */
    items = (items + MAX_PRODUCERS - 1) / MAX_PRODUCERS * MAX_PRODUCERS;

    b->ring_buf = alloc_prefaulted(RING_SIZE * sizeof(ck_ring_buffer_t));
    for (unsigned p = 0; p < MAX_PRODUCERS; p++)
        b->pool[p] = alloc_prefaulted(POOL_ITEMS * sizeof(struct req));

    if (!json_only) {
        printf("shardx inbox benchmark: %" PRIu64 " items per run, median of %u runs, "
               "%ld CPUs online\n",
               items, reps, cpus);
        if (cpus < 3)
            printf("note: 2p1c runs 3 threads on %ld CPUs (oversubscribed)\n", cpus);
        fflush(stdout);
    }

    /*
     * Interleave the queues within each repetition, so that drift on a
     * shared machine (frequency, noisy neighbours) hits all of them alike.
     */
    for (unsigned s = 0; s < 3; s++)
        for (unsigned r = 0; r < reps; r++)
            for (unsigned q = 0; q < Q_COUNT; q++) {
                struct result *rs = &res[s][q];
                struct cpu_sample c0 = cpu_sample();
                uint64_t ns = s == 0 ? run_uncontended(b, q, items)
                                     : run_threads(b, q, scenario_producers[s], items);
                struct cpu_sample c1 = cpu_sample();

                rs->ns[r] = (double)ns / (double)items;
                rs->cnt[r] = sum_counters(b);
                rs->wall_ns += ns;
                rs->cpu_known = (r == 0 || rs->cpu_known) && c0.ok && c1.ok;
                rs->steal_s += c1.steal_s - c0.steal_s;
                rs->others_s += (c1.busy_s - c0.busy_s) - (c1.self_s - c0.self_s);
            }

    if (!json_only) {
        printf("\n%-11s %-8s %-7s %9s %7s %7s %6s %6s %9s %9s %9s %10s %7s %10s %6s\n", "scenario",
               "queue", "drain", "ns/op med", "min", "max", "steal%", "other%", "ring_full",
               "pool_wait", "would_blk", "empty_poll", "yields", "enq_max_us", "stalls");
        double worst = 0.0;

        for (unsigned s = 0; s < 3; s++)
            for (unsigned q = 0; q < Q_COUNT; q++) {
                struct summary m = summarize(&res[s][q], reps);

                print_row(scenario_name[s], q, m);
                worst = m.steal_pct + m.others_pct > worst ? m.steal_pct + m.others_pct : worst;
            }
        printf("ns/op: per item through the queue (enqueue + dequeue), median run and spread.\n"
               "steal%%, other%%: share of all CPUs that the hypervisor and other processes took\n"
               "over the runs. Counters: median run.\n"
               "enq_max_us, stalls: 1 in %d enqueues timed (the successful call, not ring-full\n"
               "retries); stalls took over %d us.\n",
               LAT_SAMPLE, STALL_NS / 1000);
        if (worst > 5.0)
            printf("WARNING: up to %.0f%% of the CPUs went to the hypervisor or other processes "
                   "during\nsome runs; those figures measure the neighbours, not the queues.\n",
                   worst);
        printf("\n");
    }
    for (unsigned s = 0; s < 3; s++)
        for (unsigned q = 0; q < Q_COUNT; q++)
            print_json(scenario_name[s], scenario_producers[s], s != 0, q, items, reps, cpus,
                       summarize(&res[s][q], reps));

    free(b->ring_buf);
    for (unsigned p = 0; p < MAX_PRODUCERS; p++)
        free(b->pool[p]);
    return 0;
}
