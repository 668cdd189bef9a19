/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * sx_bench: shared declarations of the benchmark driver (sx_bench.c), the
 * raw-UDP floor (sx_bench_udp.c), the shardx benchmarks (sx_bench_am.c),
 * the multithreaded scaling benchmark (sx_bench_mt.c) and incast
 * (sx_bench_incast.c).
 *
 * Two processes take part: rank 0 (the parent, which prints) and rank 1
 * (a child it forks before anything else runs). They talk over a pair of
 * pipes, the control channel, for business cards, UDP ports, barriers and
 * the figures rank 1 measured. Every wait is bounded by SXB_WAIT_LIMIT_NS
 * and watches for the other process's death, so a crash or a hang on one
 * side turns into an error on the other instead of a stuck pair.
 *
 * incast is the exception: a launcher may start any number of ranks, and
 * they meet through the engine's own sx_engine_join and sx_job_barrier
 * instead of a control channel (sxb_ctl_t.job); run alone, it forks one
 * sender and uses the channel like the others.
 */
#ifndef SX_BENCH_H
#define SX_BENCH_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <time.h>

#include <shardx.h>

/* A hang detector only: no benchmark step is meant to come near it. */
#define SXB_WAIT_LIMIT_NS (120ull * 1000000000ull)
/* The whole run, as a last resort when a step blocks somewhere unexpected. */
#define SXB_RUN_LIMIT_S 1800u

/*
 * The functions of a ping-pong's loop, shardx's and the raw-UDP floor's
 * alike, side by side in the text (GNU ld sorts .text.sorted.* by name;
 * src/common/hot.h): on a kernel that flushes the TLB at every system
 * call each page of code a round trip runs costs a miss, and the
 * harness's loops should cost each side the same, not whatever their
 * files' layout gives. shardx's loop took two pages where the floor's
 * took one. SXB_LOOP_FIRST (one function) starts them on a page of their
 * own; the rest, under 3 KB, follow it.
 */
#if defined(__GNUC__)
#define SXB_LOOP_FIRST __attribute__((section(".text.sorted.sxbench.0"), aligned(4096), noinline))
#define SXB_LOOP       __attribute__((section(".text.sorted.sxbench.1")))
#else
#define SXB_LOOP_FIRST
#define SXB_LOOP
#endif

/* Largest payload of one raw UDP datagram the floor uses (as shardx's udp
 * transport does on loopback). */
#define SXB_UDP_MAX 65000u

typedef enum sxb_cmd {
    SXB_LATENCY,
    SXB_FLOOR,
    SXB_LOSS,
    SXB_RATE,
    SXB_MT,
    SXB_BW,
    SXB_INCAST,
} sxb_cmd_t;

/* mt: most threads per rank (the tag of a message is its thread's index,
 * and tags are 8 bits) and most entries in a --threads list. */
#define SXB_MT_MAX_THREADS  256u
#define SXB_MAX_THREAD_LIST 64u

/* mt: which thread modes run (--mode). */
enum { SXB_MODE_SHARDED = 1u << 0, SXB_MODE_GLOBAL = 1u << 1 };

/* bw --op: active messages (sx_send), or emulated RMA into or out of
 * rank 1's registered region (sx_put, sx_get). */
typedef enum sxb_op { SXB_OP_AM, SXB_OP_PUT, SXB_OP_GET } sxb_op_t;

typedef struct sxb_opts {
    sxb_cmd_t cmd;
    bool json;
    bool csv;
    const char *json_file; /* --json-file: the JSON object goes there too */
    const char *transport; /* --transport: SX_TRANSPORTS for every engine; NULL: as set */
    bool size_set;
    bool iters_set;
    bool window_set;
    bool bind; /* pin the r-th rank of a host to the r-th CPU of the inherited
                * affinity mask (sx_bench.c, sxb_bind) */
    size_t size;
    uint64_t iters;
    unsigned window;
    uint64_t seed; /* fault-injection seed for `loss` */
    /* mt only */
    unsigned modes;                        /* SXB_MODE_* bits; 0: the default (both) */
    unsigned nthreads;                     /* entries in threads[]; 0: the default list */
    unsigned threads[SXB_MAX_THREAD_LIST]; /* --threads, in the order given */
    bool oversubscribe;                    /* allow more threads than online CPUs */
    /* incast only */
    double seconds; /* --seconds: how long the senders stream */
    bool seconds_set;
    bool verify; /* --verify: check every byte, every sequence number */
    bool probe;  /* --probe: the last rank ping-pongs with rank 0 instead */
    /* bw only: what moves the bytes */
    sxb_op_t op;
} sxb_opts_t;

/* The control channel to the other rank. */
typedef struct sxb_ctl {
    int rank;
    int rfd;       /* nonblocking */
    int wfd;       /* forked: blocking pipe; launched: the same socket as rfd */
    pid_t child;   /* forked, rank 0: rank 1's pid */
    bool launched; /* started by sx_run or a PMIx launcher (sx_bench_ctl.c) */
    /* A launched job of any size (incast): no control channel (rfd and wfd
     * are -1); rank is the launcher's, and the engine's sx_engine_join and
     * sx_job_barrier stand in for the channel's card exchange and barrier. */
    bool job;
} sxb_ctl_t;

/* Called while a control-channel read waits, e.g. to keep an engine
 * progressing; returns 0, or -1 to abandon the wait. */
typedef int (*sxb_idle_fn)(void *arg);

/* ---- result records (rank 0) ---------------------------------------------- */

#define SXB_MAX_METRICS 24

typedef struct sxb_metric {
    const char *key; /* static string */
    double value;
} sxb_metric_t;

typedef struct sxb_record {
    const char *bench; /* static strings */
    const char *mode;
    unsigned threads;
    uint64_t size;
    unsigned nmetrics;
    sxb_metric_t m[SXB_MAX_METRICS];
} sxb_record_t;

/* Starts a record; add metrics with sxb_metric(), then sxb_record_add(). */
sxb_record_t sxb_record(const char *bench, const char *mode, uint64_t size);
void sxb_metric(sxb_record_t *r, const char *key, double value);
void sxb_record_add(const sxb_record_t *r);

/* Engine counters read at the end of an engine session, both ranks. */
enum { SXB_NCOUNTERS = 21 };

/* Their names, as sx_stats_value() knows them; defined in sx_bench.c with
 * exactly SXB_NCOUNTERS entries (the compiler checks the two agree). */
extern const char *const sxb_counter_names[SXB_NCOUNTERS];

/* Reads the counters of @p e by name; UINT64_MAX for a counter the engine
 * does not have. */
void sxb_counters_read(sx_engine_h e, uint64_t v[SXB_NCOUNTERS]);

/* Records the counters of one session (label: what ran, e.g. "loss=0.01");
 * UINT64_MAX marks a counter the engine does not have. */
void sxb_counters_add(const char *bench, const char *label, const uint64_t rank0[SXB_NCOUNTERS],
                      const uint64_t rank1[SXB_NCOUNTERS]);
/* How many sessions' counters are recorded so far. */
size_t sxb_counters_count(void);
/* Counter @p num over counter @p den, summed over rank @p rank's sessions
 * from @p first on; NaN when the engine lacks either or @p den is 0. */
double sxb_counters_ratio(size_t first, int rank, const char *num, const char *den);
/* Prints the counters of sessions @p first .. the last as a table, one row
 * per counter and one column per session and rank. */
void sxb_counters_print(size_t first);

/* ---- the two ranks and the control channel (sx_bench_ctl.c) ---------------- */

/* Whether a launcher (sx_run, or mpirun and other PMIx servers) started us. */
bool sxb_launched(void);
/* A launcher's number: environment variable @p name, in decimal, at most
 * @p max, into *v_p; false when unset, empty, malformed or too large. */
bool sxb_env_uint(const char *name, unsigned long long max, unsigned long long *v_p);
/* Becomes rank 0 or 1: meets the other process through the launcher's
 * modex, or forks it. With @p job and a launcher, takes the launcher's
 * rank from the environment and meets nobody (sxb_ctl_t.job). Returns 0,
 * or -1 after printing why. */
int sxb_ctl_start(sxb_ctl_t *ctl, bool job);
/* Ends the run with status @p rc: a forked rank 1 exits here; rank 0 reaps
 * it (killing it when @p rc says the run failed). Returns the run's status. */
int sxb_ctl_finish(sxb_ctl_t *ctl, int rc);
/* Whether a read would find data now; never blocks. */
bool sxb_ctl_readable(const sxb_ctl_t *ctl);

/* ---- helpers (sx_bench.c) ------------------------------------------------- */

static inline uint64_t sxb_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Human output goes to stdout on rank 0 unless --json or --csv. */
bool sxb_human(const sxb_ctl_t *ctl, const sxb_opts_t *opts);

/* Prints "sx_bench[rank R]: ..." to stderr; returns -1 for `return sxb_fail(...)`. */
int sxb_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* 0 while the other rank may still be alive and @p deadline_ns is ahead;
 * otherwise prints why (naming @p what) and returns -1. Cheap enough for
 * busy loops that call it every few thousand spins. */
int sxb_check(const sxb_ctl_t *ctl, uint64_t deadline_ns, const char *what);

int sxb_ctl_write(const sxb_ctl_t *ctl, const void *buf, size_t len);
/* Reads exactly @p len bytes, calling @p idle (if not NULL) while none
 * are there; bounded by SXB_WAIT_LIMIT_NS. */
int sxb_ctl_read(const sxb_ctl_t *ctl, void *buf, size_t len, sxb_idle_fn idle, void *arg);
/* Both ranks pass it before either goes on. */
int sxb_ctl_barrier(const sxb_ctl_t *ctl, sxb_idle_fn idle, void *arg);

/* Sorts @p v and returns its median and p-th quantile (nearest rank). */
void sxb_quantiles(uint64_t *v, size_t n, double p, uint64_t *median_p, uint64_t *pq_p);

/* Latency sizes: --size, or the default ladder. Returns the count. */
size_t sxb_latency_sizes(const sxb_opts_t *opts, size_t *sizes, size_t max);
/* Round trips measured for @p size (after a warm-up of a tenth). */
uint64_t sxb_latency_iters(const sxb_opts_t *opts, size_t size);

/* ---- raw-UDP floor (sx_bench_udp.c) --------------------------------------- */

typedef struct sxb_udp {
    int fd;
    uint8_t *buf;            /* SXB_UDP_MAX bytes */
    struct sockaddr_in peer; /* what the socket is connected to */
    /* The shared-socket pair: sfd, unconnected, receives (every peer would
     * send to it); tfd, connected to the other rank's sfd, sends. */
    int sfd, tfd;
    struct sockaddr_in tpeer; /* the other rank's tfd: where its datagrams come from */
    uint32_t seq;             /* rank 0: the last ping's number (sxb_udp_pingpong) */
} sxb_udp_t;

/* Opens a nonblocking socket on 127.0.0.1 and connects it to the other
 * rank's, and the shared-socket pair (ports go over the control channel). */
int sxb_udp_open(const sxb_ctl_t *ctl, sxb_udp_t *u);
void sxb_udp_close(sxb_udp_t *u);

/* Ping-pong of @p size bytes; on rank 0 fills @p rtt_ns[0..iters). A
 * round trip that loses a datagram (no answer within SXB_UDP_RESEND_NS,
 * or ten times the fastest round trip if longer) is run again with a new
 * ping and counted in @p *lost_p (rank 0; may be NULL): the floor is what
 * the network does when it loses nothing. Pings of 1 byte or more carry
 * up to 4 bytes of their number, so a late answer is told from the one
 * awaited; a 0-byte ping cannot, and is never resent. The plain floor sends and reads on connected
 * sockets (send(2), recv(2)). With @p shared, the kernel path of a transport whose one socket
 * serves every peer, as shardx's udp transport's does: datagrams arrive at an unconnected socket,
 * read with recvfrom(2) and the sender's address, which is checked (SX_CHECK_SOURCE), and leave
 * from a socket connected to the peer's (SX_UDP_CONNECT). An unconnected socket gets no early
 * demultiplexing: the kernel looks the route up for each datagram it
 * receives, on loopback inside the sender's sendto(2). */
int sxb_udp_pingpong(const sxb_ctl_t *ctl, sxb_udp_t *u, size_t size, bool shared, uint64_t warmup,
                     uint64_t iters, uint64_t *rtt_ns, uint64_t *lost_p);

/* One-way stream of @p count datagrams of @p size bytes, rank 0 to rank 1,
 * one send() each; rank 0 gets the rates (received / first-to-last receive
 * time, NAN where fewer than two arrived; sent / send time) and the
 * fraction lost. Pointers may be NULL. */
int sxb_udp_rate(const sxb_ctl_t *ctl, sxb_udp_t *u, size_t size, uint64_t count, double *rx_rate_p,
                 double *tx_rate_p, double *loss_p);

int sxb_bench_floor(const sxb_ctl_t *ctl, const sxb_opts_t *opts);

/* ---- shardx benchmarks (sx_bench_am.c) ------------------------------------ */

int sxb_bench_latency(const sxb_ctl_t *ctl, const sxb_opts_t *opts);
int sxb_bench_rate(const sxb_ctl_t *ctl, const sxb_opts_t *opts);
int sxb_bench_bw(const sxb_ctl_t *ctl, const sxb_opts_t *opts);
int sxb_bench_loss(const sxb_ctl_t *ctl, const sxb_opts_t *opts);
/* Swaps business cards with the other rank over the control channel and
 * adds it as a peer whose id is its rank. 0, or -1 with the reason printed. */
int sxb_card_swap(const sxb_ctl_t *ctl, sx_engine_h e, sx_peer_h *peer_p);

/* ---- incast (sx_bench_incast.c) ------------------------------------------- */

/* Ranks 1..N-1 stream into rank 0 (the last one ping-pongs with --probe). */
int sxb_bench_incast(const sxb_ctl_t *ctl, const sxb_opts_t *opts);
/* Rank 0, after a successful run: incast's one-line JSON object. */
void sxb_incast_json(FILE *out);

/* ---- multithreaded scaling (sx_bench_mt.c) -------------------------------- */

int sxb_bench_mt(const sxb_ctl_t *ctl, const sxb_opts_t *opts);
/* mt's engines (sx_bench_mt.c): THREAD_MODE @p mode; with @p sink, over
 * the sink transport and the implicit connection. 0, or -1 with the
 * reason printed. */
int sxb_mt_engine(const char *mode, const char *name, bool sink, sx_engine_h *e_p);
/* n zeroed elements of @p size, a multiple of the cache line, aligned to
 * it (so threads' counters share no line). */
void *sxb_mt_calloc_aligned(size_t n, size_t size);
/* mt's one-process variant (sx_bench_mt_local.c): rank 0's T threads over
 * two engines of its own, T at most the online CPUs; rank 1 waits. */
int sxb_mt_local(const sxb_ctl_t *ctl, const sxb_opts_t *opts, bool human, unsigned modes,
                 const unsigned *list, unsigned nlist, size_t size, const uint8_t *buf);

#endif /* SX_BENCH_H */
