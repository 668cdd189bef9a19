/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * btl_suite: MPI tests for the shardx BTL, one test per run, chosen by
 * name. Run under `mpirun --mca pml ob1 --mca btl shardx,self`, so every
 * byte between ranks crosses the BTL (self only carries a rank's messages
 * to itself). Every received byte is checked against a pattern derived
 * from (sender, size, sequence); nothing depends on timing. Exit status 0
 * on success; a failure prints what differed and aborts the job.
 *
 *   btl_suite p2p [max_bytes]   blocking and nonblocking, 0 B .. 16 MiB
 *   btl_suite wildcard          MPI_ANY_SOURCE / MPI_ANY_TAG, order kept
 *   btl_suite probe             Probe, Iprobe, Mprobe of every size class
 *   btl_suite storm             thousands of unexpected small messages
 *   btl_suite threads [T]       MPI_THREAD_MULTIPLE, T (4) threads per rank
 *   btl_suite latency_mt [MAX]  what OSU's osu_latency_mt does, with every
 *                               byte checked: with 1, 2, 4 and 8 threads
 *                               per rank (MPI_THREAD_MULTIPLE), thread t of
 *                               rank 0 ping-pongs with thread t of rank 1
 *                               on MPI_COMM_WORLD and tag t, 0 B .. MAX
 *                               (4 MiB); rank 0 prints each size's mean
 *                               one-way latency over its threads
 *   btl_suite coll              barrier, bcast, allreduce, allgather, alltoall
 *   btl_suite peerfail          rank 1 stops (SIGSTOP); rank 0 keeps sending
 *                               until shardx declares the peer failed and the
 *                               BTL's error callback makes ob1 abort the job
 *                               (run_mpi.sh expects that failure)
 *   btl_suite refused SIZE      rank 1 starts with btl_shardx_max_msg_size 8k
 *                               (set before MPI_Init), rank 0 with the default,
 *                               and rank 0 sends it SIZE bytes, an eager send
 *                               on its side that rank 1's shardx refuses: the
 *                               job must abort with the BTL's diagnosis
 *                               (run_mpi.sh expects that failure), not wait
 *   btl_suite busy MS [MID]     rank 1 computes for MS milliseconds before its
 *                               first MPI call after MPI_Init, and for MID (MS
 *                               unless given) halfway through, while rank 0
 *                               sends eager and rendezvous messages (RGET or
 *                               the put pipeline) to it; nothing may fail,
 *                               every byte checked
 *   btl_suite isend_compute MS [SIZE]
 *                               rank 0 posts 16 small MPI_Isends (or one of
 *                               SIZE bytes), then computes for MS
 *                               milliseconds without an MPI call; rank 1
 *                               must have received them all before that
 *                               computation ended (the BTL lets shardx hold
 *                               a burst of eager sends back to share
 *                               datagrams, SX_SENDI_HOLD_US: the engine's
 *                               service must send them by the deadline; a
 *                               large one's get, which the receiver may
 *                               share with the sender, must not wait for
 *                               the sender's part)
 *   btl_suite irecv_compute MS [SIZE]
 *                               rank 1 posts MPI_Irecv for a message of SIZE
 *                               bytes (1 MiB) that is already there, then
 *                               computes for MS milliseconds: rank 0's
 *                               MPI_Wait must end before that computation
 *                               does
 */
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <mpi.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int rank, nranks;

#define CHECK(cond, ...)                                          \
    do {                                                          \
        if (!(cond)) {                                            \
            fprintf(stderr, "btl_suite rank %d: FAILED: ", rank); \
            fprintf(stderr, __VA_ARGS__);                         \
            fprintf(stderr, " (%s:%d)\n", __FILE__, __LINE__);    \
            MPI_Abort(MPI_COMM_WORLD, 1);                         \
        }                                                         \
    } while (0)

#define MPI_OK(call)                                             \
    do {                                                         \
        int rc_ = (call);                                        \
        CHECK(rc_ == MPI_SUCCESS, "%s returned %d", #call, rc_); \
    } while (0)

static uint8_t pattern(int src, size_t size, unsigned seq, size_t i)
{
    return (uint8_t)(src * 131 + size * 7 + seq * 31 + i + (i >> 8) * 13);
}

static void fill(uint8_t *buf, int src, size_t size, unsigned seq)
{
    for (size_t i = 0; i < size; i++)
        buf[i] = pattern(src, size, seq, i);
}

static void verify(const uint8_t *buf, int src, size_t size, unsigned seq, const char *what)
{
    for (size_t i = 0; i < size; i++)
        CHECK(buf[i] == pattern(src, size, seq, i),
              "%s: %zu-byte message %u from rank %d differs at byte %zu (%u, expected %u)", what,
              size, seq, src, i, buf[i], pattern(src, size, seq, i));
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    CHECK(p != NULL, "out of memory (%zu bytes)", n);
    return p;
}

/* 0, 1, 2, 3, then every power of two up to max with its neighbours, plus
 * the BTL's protocol boundaries (8 KiB eager, 64 KiB send fragment, 1 MiB
 * RDMA piece). */
static size_t sizes(size_t max, size_t *out)
{
    size_t n = 0;
    for (size_t s = 0; s < 4; s++)
        out[n++] = s;
    for (size_t p = 4; p <= max; p *= 2) {
        out[n++] = p - 1;
        out[n++] = p;
        if (p + 1 <= max)
            out[n++] = p + 1;
    }
    const size_t extra[] = {8192 - 64, 8192 + 64, 65536 - 100, 65536 + 100, 3 * 1048576 + 5};
    for (size_t i = 0; i < sizeof(extra) / sizeof(extra[0]); i++)
        if (extra[i] <= max)
            out[n++] = extra[i];
    return n;
}

/* Blocking pairs (rank ^ 1), then a nonblocking ring in both directions. */
static void test_p2p(size_t max)
{
    size_t list[128];
    size_t n = sizes(max, list);
    uint8_t *sbuf = xmalloc(max), *rbuf = xmalloc(max), *rbuf2 = xmalloc(max);
    uint8_t *sbuf2 = xmalloc(max);
    int partner = rank ^ 1;

    for (size_t k = 0; k < n; k++) {
        size_t size = list[k];
        unsigned seq = (unsigned)k;
        MPI_Status st;
        int count;

        if (partner < nranks) {
            fill(sbuf, rank, size, seq);
            memset(rbuf, 0xee, size);
            if (rank % 2 == 0) {
                MPI_OK(MPI_Send(sbuf, (int)size, MPI_BYTE, partner, 100, MPI_COMM_WORLD));
                MPI_OK(MPI_Recv(rbuf, (int)size, MPI_BYTE, partner, 100, MPI_COMM_WORLD, &st));
            } else {
                MPI_OK(MPI_Recv(rbuf, (int)size, MPI_BYTE, partner, 100, MPI_COMM_WORLD, &st));
                MPI_OK(MPI_Send(sbuf, (int)size, MPI_BYTE, partner, 100, MPI_COMM_WORLD));
            }
            MPI_OK(MPI_Get_count(&st, MPI_BYTE, &count));
            CHECK((size_t)count == size, "blocking: received %d bytes, expected %zu", count, size);
            verify(rbuf, partner, size, seq, "blocking");
            /* Synchronous send: completes only once matched. */
            if (rank % 2 == 0)
                MPI_OK(MPI_Ssend(sbuf, (int)size, MPI_BYTE, partner, 101, MPI_COMM_WORLD));
            else {
                MPI_OK(MPI_Recv(rbuf, (int)size, MPI_BYTE, partner, 101, MPI_COMM_WORLD, &st));
                verify(rbuf, partner, size, seq, "ssend");
            }
        }

        int right = (rank + 1) % nranks, left = (rank + nranks - 1) % nranks;
        MPI_Request req[4];
        fill(sbuf, rank, size, seq + 1000);
        fill(sbuf2, rank, size, seq + 2000);
        memset(rbuf, 0xee, size);
        memset(rbuf2, 0xee, size);
        MPI_OK(MPI_Irecv(rbuf, (int)size, MPI_BYTE, left, 200, MPI_COMM_WORLD, &req[0]));
        MPI_OK(MPI_Irecv(rbuf2, (int)size, MPI_BYTE, right, 201, MPI_COMM_WORLD, &req[1]));
        MPI_OK(MPI_Isend(sbuf, (int)size, MPI_BYTE, right, 200, MPI_COMM_WORLD, &req[2]));
        MPI_OK(MPI_Isend(sbuf2, (int)size, MPI_BYTE, left, 201, MPI_COMM_WORLD, &req[3]));
        MPI_OK(MPI_Waitall(4, req, MPI_STATUSES_IGNORE));
        verify(rbuf, left, size, seq + 1000, "nonblocking ring");
        verify(rbuf2, right, size, seq + 2000, "nonblocking ring (reverse)");
    }
    free(sbuf);
    free(sbuf2);
    free(rbuf);
    free(rbuf2);
    if (rank == 0)
        printf("p2p: %zu sizes up to %zu bytes, blocking, synchronous and nonblocking: ok\n", n,
               max);
}

/* Every other rank sends PER messages to rank 0 with tags cycling over 3;
 * rank 0 receives them all with MPI_ANY_SOURCE and MPI_ANY_TAG and checks
 * that each (source, tag) stream arrives in order (MPI's non-overtaking
 * rule) and intact. Sizes alternate between eager and rendezvous. */
#define WILD_PER 300
static size_t wild_size(unsigned i)
{
    static const size_t s[] = {0, 8, 1000, 9000, 70000, 300000};
    return s[i % 6];
}

static void test_wildcard(void)
{
    uint8_t *buf = xmalloc(300000);
    if (rank == 0) {
        int total = (nranks - 1) * WILD_PER;
        unsigned *next = calloc((size_t)nranks * 3, sizeof(unsigned));
        CHECK(next != NULL, "out of memory");
        for (int k = 0; k < total; k++) {
            MPI_Status st;
            int count;
            MPI_OK(
                MPI_Recv(buf, 300000, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
            int src = st.MPI_SOURCE, tag = st.MPI_TAG;
            CHECK(src > 0 && src < nranks && tag >= 0 && tag < 3, "bad source %d / tag %d", src,
                  tag);
            /* Message i of a sender has tag i % 3, so stream (src, tag) holds
             * i = tag, tag + 3, ... in order. */
            unsigned i = next[src * 3 + tag] * 3 + (unsigned)tag;
            next[src * 3 + tag]++;
            MPI_OK(MPI_Get_count(&st, MPI_BYTE, &count));
            CHECK((size_t)count == wild_size(i), "message %u from %d: %d bytes, expected %zu", i,
                  src, count, wild_size(i));
            verify(buf, src, (size_t)count, i, "wildcard");
        }
        for (int s = 1; s < nranks; s++)
            for (int t = 0; t < 3; t++)
                CHECK(next[s * 3 + t] == WILD_PER / 3, "rank %d tag %d: %u messages", s, t,
                      next[s * 3 + t]);
        free(next);
        printf("wildcard: %d messages from %d ranks matched by ANY_SOURCE/ANY_TAG: ok\n", total,
               nranks - 1);
    } else {
        for (unsigned i = 0; i < WILD_PER; i++) {
            fill(buf, rank, wild_size(i), i);
            MPI_OK(MPI_Send(buf, (int)wild_size(i), MPI_BYTE, 0, (int)(i % 3), MPI_COMM_WORLD));
        }
    }
    free(buf);
}

/* Rank 0 learns each message's size from a probe before receiving it:
 * MPI_Probe, then MPI_Iprobe polling, then MPI_Mprobe / MPI_Mrecv. */
static void test_probe(void)
{
    static const size_t s[] = {0, 1, 100, 8192, 20000, 65536, 1048576, 4194304 + 3};
    const unsigned ns = sizeof(s) / sizeof(s[0]);
    if (rank == 0) {
        for (int mode = 0; mode < 3; mode++) {
            for (unsigned k = 0; k < ns * (unsigned)(nranks - 1); k++) {
                MPI_Status st;
                MPI_Message msg;
                int count, flag = 0;
                if (mode == 0)
                    MPI_OK(MPI_Probe(MPI_ANY_SOURCE, 300 + mode, MPI_COMM_WORLD, &st));
                else if (mode == 1)
                    while (!flag)
                        MPI_OK(MPI_Iprobe(MPI_ANY_SOURCE, 300 + mode, MPI_COMM_WORLD, &flag, &st));
                else
                    MPI_OK(MPI_Mprobe(MPI_ANY_SOURCE, 300 + mode, MPI_COMM_WORLD, &msg, &st));
                MPI_OK(MPI_Get_count(&st, MPI_BYTE, &count));
                uint8_t *buf = xmalloc((size_t)count);
                int src = st.MPI_SOURCE;
                if (mode == 2)
                    MPI_OK(MPI_Mrecv(buf, count, MPI_BYTE, &msg, &st));
                else
                    MPI_OK(MPI_Recv(buf, count, MPI_BYTE, src, 300 + mode, MPI_COMM_WORLD, &st));
                /* Which message of that sender is it? Its size says. */
                unsigned idx = ns;
                for (unsigned j = 0; j < ns; j++)
                    if (s[j] == (size_t)count)
                        idx = j;
                CHECK(idx < ns, "probe: unexpected size %d from %d", count, src);
                verify(buf, src, (size_t)count, idx + 10 * (unsigned)mode, "probe");
                free(buf);
            }
        }
        printf("probe: Probe, Iprobe and Mprobe over %u sizes from %d ranks: ok\n", ns, nranks - 1);
    } else {
        uint8_t *buf = xmalloc(s[ns - 1]);
        for (int mode = 0; mode < 3; mode++)
            for (unsigned j = 0; j < ns; j++) {
                fill(buf, rank, s[j], j + 10 * (unsigned)mode);
                MPI_OK(MPI_Send(buf, (int)s[j], MPI_BYTE, 0, 300 + mode, MPI_COMM_WORLD));
            }
        free(buf);
    }
}

/* Each rank floods every other rank with STORM small messages before the
 * receivers post anything (they arrive unexpected), then everyone
 * receives in order per sender. A second round posts the receives first. */
#define STORM 4000
static void test_storm(void)
{
    size_t per = (size_t)STORM * (size_t)nranks;
    uint32_t *out = xmalloc(per * sizeof(uint32_t) * 2);
    uint32_t *in = xmalloc(per * sizeof(uint32_t) * 2);
    MPI_Request *req = xmalloc(per * 2 * sizeof(MPI_Request));

    for (int round = 0; round < 2; round++) {
        size_t nr = 0;
        if (round == 1)
            for (int p = 0; p < nranks; p++)
                for (unsigned i = 0; i < STORM && p != rank; i++, nr++)
                    MPI_OK(MPI_Irecv(&in[nr * 2], 2, MPI_UINT32_T, p, 400, MPI_COMM_WORLD,
                                     &req[per + nr]));
        MPI_OK(MPI_Barrier(MPI_COMM_WORLD));
        size_t ns = 0;
        for (unsigned i = 0; i < STORM; i++)
            for (int p = 0; p < nranks; p++) {
                if (p == rank)
                    continue;
                out[ns * 2] = (uint32_t)rank;
                out[ns * 2 + 1] = i * 7919u + (uint32_t)p + (uint32_t)round;
                MPI_OK(MPI_Isend(&out[ns * 2], 2, MPI_UINT32_T, p, 400, MPI_COMM_WORLD, &req[ns]));
                ns++;
            }
        if (round == 0) {
            /* Everything is in flight or unexpected at the receiver by now. */
            MPI_OK(MPI_Waitall((int)ns, req, MPI_STATUSES_IGNORE));
            MPI_OK(MPI_Barrier(MPI_COMM_WORLD));
            for (int p = 0; p < nranks; p++)
                for (unsigned i = 0; i < STORM && p != rank; i++) {
                    uint32_t v[2];
                    MPI_OK(MPI_Recv(v, 2, MPI_UINT32_T, p, 400, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
                    CHECK(v[0] == (uint32_t)p && v[1] == i * 7919u + (uint32_t)rank,
                          "storm: message %u from %d is (%u, %u)", i, p, v[0], v[1]);
                }
        } else {
            MPI_OK(MPI_Waitall((int)ns, req, MPI_STATUSES_IGNORE));
            MPI_OK(MPI_Waitall((int)nr, req + per, MPI_STATUSES_IGNORE));
            nr = 0;
            for (int p = 0; p < nranks; p++)
                for (unsigned i = 0; i < STORM && p != rank; i++, nr++)
                    CHECK(in[nr * 2] == (uint32_t)p &&
                              in[nr * 2 + 1] == i * 7919u + (uint32_t)rank + 1,
                          "storm (preposted): message %u from %d is (%u, %u)", i, p, in[nr * 2],
                          in[nr * 2 + 1]);
        }
    }
    free(out);
    free(in);
    free(req);
    if (rank == 0)
        printf("storm: %d messages per pair, unexpected and preposted, %d ranks: ok\n", STORM,
               nranks);
}

/* MPI_THREAD_MULTIPLE: THREADS threads per rank; thread t exchanges with
 * thread t of the neighbouring ranks on its own tag and communicator
 * duplicate, blocking and nonblocking, eager and rendezvous sizes. */
#define THREADS_MAX  16
#define THREAD_ITERS 150
static int THREADS = 4;
typedef struct thread_arg {
    int t;
    MPI_Comm comm;
} thread_arg_t;

static void *thread_main(void *p)
{
    thread_arg_t *a = p;
    int right = (rank + 1) % nranks, left = (rank + nranks - 1) % nranks;
    static const size_t s[] = {0, 8, 512, 8000, 9000, 65536, 200000, 1048576 + 17};
    const size_t ns = sizeof(s) / sizeof(s[0]);
    uint8_t *sb = xmalloc(s[ns - 1]), *rb = xmalloc(s[ns - 1]);
    int tag = 500 + a->t;

    for (unsigned it = 0; it < THREAD_ITERS; it++) {
        size_t size = s[(it + (unsigned)a->t) % ns];
        unsigned seq = it * THREADS + (unsigned)a->t;
        MPI_Request rq[2];
        fill(sb, rank, size, seq);
        memset(rb, 0xee, size);
        if (it % 2 == 0) {
            MPI_OK(MPI_Irecv(rb, (int)size, MPI_BYTE, left, tag, a->comm, &rq[0]));
            MPI_OK(MPI_Isend(sb, (int)size, MPI_BYTE, right, tag, a->comm, &rq[1]));
            MPI_OK(MPI_Waitall(2, rq, MPI_STATUSES_IGNORE));
        } else {
            MPI_OK(MPI_Sendrecv(sb, (int)size, MPI_BYTE, right, tag, rb, (int)size, MPI_BYTE, left,
                                tag, a->comm, MPI_STATUS_IGNORE));
        }
        verify(rb, left, size, seq, "threads");
        /* A small message on the shared communicator with a thread tag. */
        uint64_t v = ((uint64_t)rank << 32) | seq, w = 0;
        MPI_OK(MPI_Sendrecv(&v, 1, MPI_UINT64_T, right, 600 + a->t, &w, 1, MPI_UINT64_T, left,
                            600 + a->t, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        CHECK(w == (((uint64_t)left << 32) | seq), "threads: small message %llx",
              (unsigned long long)w);
    }
    free(sb);
    free(rb);
    return NULL;
}

static void test_threads(int nthreads)
{
    THREADS = nthreads;
    CHECK(THREADS >= 1 && THREADS <= THREADS_MAX, "threads: 1..%d threads, not %d", THREADS_MAX,
          THREADS);
    pthread_t th[THREADS_MAX];
    thread_arg_t args[THREADS_MAX];
    for (int t = 0; t < THREADS; t++) {
        args[t].t = t;
        MPI_OK(MPI_Comm_dup(MPI_COMM_WORLD, &args[t].comm));
    }
    for (int t = 0; t < THREADS; t++)
        CHECK(pthread_create(&th[t], NULL, thread_main, &args[t]) == 0, "pthread_create");
    for (int t = 0; t < THREADS; t++)
        pthread_join(th[t], NULL);
    for (int t = 0; t < THREADS; t++)
        MPI_OK(MPI_Comm_free(&args[t].comm));
    if (rank == 0)
        printf("threads: %d threads per rank, %d exchanges each, MPI_THREAD_MULTIPLE: ok\n",
               THREADS, THREAD_ITERS);
}

/* latency_mt: thread t of rank 0 ping-pongs with thread t of rank 1 on
 * tag 800 + t, every size from 0 B to max; ranks above 1 only take part in
 * the barriers. */
typedef struct lat_arg {
    int t;
    size_t max;
    double *usec; /* [nsizes]: this thread's mean one-way latency per size */
} lat_arg_t;

static size_t lat_size(unsigned k)
{
    return k == 0 ? 0 : (size_t)1 << (k - 1);
}

static int lat_iters(size_t size)
{
    return size <= 16384 ? 40 : size <= 262144 ? 10 : 4;
}

static void *lat_thread(void *p)
{
    lat_arg_t *a = p;
    int peer = 1 - rank, tag = 800 + a->t;
    uint8_t *sb = xmalloc(a->max ? a->max : 1), *rb = xmalloc(a->max ? a->max : 1);

    for (unsigned k = 0; lat_size(k) <= a->max; k++) {
        size_t size = lat_size(k);
        int iters = lat_iters(size);
        double t0 = MPI_Wtime();
        for (int i = 0; i < iters; i++) {
            unsigned seq = (unsigned)(k * 1000 + (unsigned)i) * THREADS_MAX + (unsigned)a->t;
            fill(sb, rank, size, seq);
            memset(rb, 0xee, size);
            if (rank == 0) {
                MPI_OK(MPI_Send(sb, (int)size, MPI_BYTE, peer, tag, MPI_COMM_WORLD));
                MPI_OK(MPI_Recv(rb, (int)size, MPI_BYTE, peer, tag, MPI_COMM_WORLD,
                                MPI_STATUS_IGNORE));
            } else {
                MPI_OK(MPI_Recv(rb, (int)size, MPI_BYTE, peer, tag, MPI_COMM_WORLD,
                                MPI_STATUS_IGNORE));
                MPI_OK(MPI_Send(sb, (int)size, MPI_BYTE, peer, tag, MPI_COMM_WORLD));
            }
            verify(rb, peer, size, seq, "latency_mt");
        }
        a->usec[k] = (MPI_Wtime() - t0) * 1e6 / iters / 2;
    }
    free(sb);
    free(rb);
    return NULL;
}

static void test_latency_mt(size_t max)
{
    static const int counts[] = {1, 2, 4, 8};
    unsigned nsizes = 0;
    while (lat_size(nsizes) <= max)
        nsizes++;
    for (unsigned c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
        int n = counts[c];
        pthread_t th[8];
        lat_arg_t args[8];
        MPI_OK(MPI_Barrier(MPI_COMM_WORLD));
        if (rank > 1)
            continue;
        for (int t = 0; t < n; t++) {
            args[t] = (lat_arg_t){.t = t, .max = max, .usec = xmalloc(nsizes * sizeof(double))};
            CHECK(pthread_create(&th[t], NULL, lat_thread, &args[t]) == 0, "pthread_create");
        }
        for (int t = 0; t < n; t++)
            pthread_join(th[t], NULL);
        if (rank == 0) {
            printf(
                "latency_mt: %d thread%s per rank, mean one-way latency (us) over the threads:\n",
                n, n > 1 ? "s" : "");
            for (unsigned k = 0; k < nsizes; k++) {
                double sum = 0;
                for (int t = 0; t < n; t++)
                    sum += args[t].usec[k];
                printf("  %9zu %10.1f\n", lat_size(k), sum / n);
            }
        }
        for (int t = 0; t < n; t++)
            free(args[t].usec);
    }
    if (rank == 0)
        printf("latency_mt: 1, 2, 4 and 8 threads per rank, 0 B .. %zu B, every byte checked: ok\n",
               max);
}

static void test_coll(void)
{
    const int counts[] = {1, 1000, 300000};
    for (unsigned k = 0; k < 3; k++) {
        int n = counts[k];
        int64_t *a = xmalloc((size_t)n * sizeof(int64_t));
        int64_t *b = xmalloc((size_t)n * sizeof(int64_t) * (size_t)nranks);
        MPI_OK(MPI_Barrier(MPI_COMM_WORLD));
        for (int root = 0; root < nranks; root++) {
            for (int i = 0; i < n; i++)
                a[i] = rank == root ? (int64_t)i * 3 + root : -1;
            MPI_OK(MPI_Bcast(a, n, MPI_INT64_T, root, MPI_COMM_WORLD));
            for (int i = 0; i < n; i++)
                CHECK(a[i] == (int64_t)i * 3 + root, "bcast[%d] = %lld", i, (long long)a[i]);
        }
        for (int i = 0; i < n; i++)
            a[i] = (int64_t)i + rank;
        MPI_OK(MPI_Allreduce(a, b, n, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD));
        for (int i = 0; i < n; i++)
            CHECK(b[i] == (int64_t)i * nranks + (int64_t)nranks * (nranks - 1) / 2,
                  "allreduce[%d] = %lld", i, (long long)b[i]);
        MPI_OK(MPI_Allgather(a, n, MPI_INT64_T, b, n, MPI_INT64_T, MPI_COMM_WORLD));
        for (int r = 0; r < nranks; r++)
            for (int i = 0; i < n; i++)
                CHECK(b[(size_t)r * n + i] == (int64_t)i + r, "allgather[%d][%d]", r, i);
        free(a);
        free(b);
        /* Alltoall: block r of rank q's send buffer goes to rank r. */
        int m = n / nranks + 1;
        int64_t *s = xmalloc((size_t)m * nranks * sizeof(int64_t));
        int64_t *d = xmalloc((size_t)m * nranks * sizeof(int64_t));
        for (int r = 0; r < nranks; r++)
            for (int i = 0; i < m; i++)
                s[(size_t)r * m + i] = (int64_t)rank * 1000003 + r * 1009 + i;
        MPI_OK(MPI_Alltoall(s, m, MPI_INT64_T, d, m, MPI_INT64_T, MPI_COMM_WORLD));
        for (int q = 0; q < nranks; q++)
            for (int i = 0; i < m; i++)
                CHECK(d[(size_t)q * m + i] == (int64_t)q * 1000003 + rank * 1009 + i,
                      "alltoall from %d [%d]", q, i);
        free(s);
        free(d);
    }
    if (rank == 0)
        printf("coll: barrier, bcast, allreduce, allgather, alltoall: ok\n");
}

/* The application computing: no MPI call for @p ms. */
static void compute(unsigned ms)
{
    double until = MPI_Wtime() + ms / 1000.0;
    volatile unsigned long x = 0;
    while (MPI_Wtime() < until)
        x++;
}

/*
 * A rank that computes for longer than the peer timeout, right after
 * MPI_Init and again mid-stream, must not be taken for dead: shardx's
 * engine answers for it (SX_SERVICE_US). Rank 0 posts every send at once
 * and waits; rank 1 receives half, computes again, receives the rest.
 */
static void test_busy(unsigned ms, unsigned mid_ms)
{
    enum { N = 24 };
    static const size_t sizes_[N] = {0,       1,  100,  4096,  8000,  8192 + 64, 65536, 100000,
                                     1048576, 8,  3000, 70000, 2,     500000,    16,    2097152,
                                     9000,    40, 64,   128,   65000, 1048577,   12,    300000};
    uint8_t *buf[N];
    MPI_Request req[N];

    if (rank > 1)
        return;
    for (int i = 0; i < N; i++)
        buf[i] = xmalloc(sizes_[i]);
    if (rank == 1) {
        compute(ms);
        for (int i = 0; i < N; i++) {
            MPI_Status st;
            int count;
            if (i == N / 2)
                compute(mid_ms);
            MPI_OK(MPI_Recv(buf[i], (int)sizes_[i], MPI_BYTE, 0, 800 + i, MPI_COMM_WORLD, &st));
            MPI_OK(MPI_Get_count(&st, MPI_BYTE, &count));
            CHECK((size_t)count == sizes_[i], "busy: received %d bytes, expected %zu", count,
                  sizes_[i]);
            verify(buf[i], 0, sizes_[i], (unsigned)i, "busy");
        }
    } else {
        for (int i = 0; i < N; i++) {
            fill(buf[i], 0, sizes_[i], (unsigned)i);
            MPI_OK(
                MPI_Isend(buf[i], (int)sizes_[i], MPI_BYTE, 1, 800 + i, MPI_COMM_WORLD, &req[i]));
        }
        MPI_OK(MPI_Waitall(N, req, MPI_STATUSES_IGNORE));
    }
    for (int i = 0; i < N; i++)
        free(buf[i]);
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/*
 * Eager sends the BTL held back (SX_SENDI_HOLD_US, 50 us) must leave
 * while their sender computes: rank 1 notes when the last one arrived
 * (CLOCK_MONOTONIC, one clock for every process of this machine, the
 * namespace cluster's hosts included) and tells rank 0, which checks it
 * against its computation's end. The computation lasts seconds, the
 * deadline microseconds: nothing here depends on timing but the order.
 * With @p size, one message of that many bytes instead: a large one is an
 * RGET whose get the receiver may share with the sender (btl_shardx_split.c),
 * and it must not wait for a sender that computes to take its part.
 */
static void test_isend_compute(unsigned ms, size_t size)
{
    enum { N = 16 };
    uint64_t msg[N];
    MPI_Request req[N];
    double arrived = 0;
    int n = size > 0 ? 1 : N;
    uint8_t *big = size > 0 ? xmalloc(size) : NULL;

    if (rank > 1) {
        free(big);
        return;
    }
    MPI_OK(MPI_Barrier(MPI_COMM_WORLD)); /* both connected, both here */
    if (rank == 1) {
        if (big != NULL) {
            MPI_OK(MPI_Recv(big, (int)size, MPI_BYTE, 0, 900, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            verify(big, 0, size, 0, "isend_compute");
        }
        for (int i = 0; big == NULL && i < n; i++) {
            MPI_OK(
                MPI_Recv(&msg[i], 1, MPI_UINT64_T, 0, 900 + i, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            CHECK(msg[i] == 0x5eed0000u + (uint64_t)i, "isend_compute: message %d is %llx", i,
                  (unsigned long long)msg[i]);
        }
        arrived = mono_s();
        MPI_OK(MPI_Send(&arrived, 1, MPI_DOUBLE, 0, 950, MPI_COMM_WORLD));
        free(big);
        return;
    }
    if (big != NULL) {
        fill(big, 0, size, 0);
        MPI_OK(MPI_Isend(big, (int)size, MPI_BYTE, 1, 900, MPI_COMM_WORLD, &req[0]));
    }
    for (int i = 0; big == NULL && i < n; i++) {
        msg[i] = 0x5eed0000u + (uint64_t)i;
        MPI_OK(MPI_Isend(&msg[i], 1, MPI_UINT64_T, 1, 900 + i, MPI_COMM_WORLD, &req[i]));
    }
    double start = mono_s(), until = start + ms / 1000.0;
    volatile unsigned long x = 0;
    while (mono_s() < until)
        x++; /* no MPI call: only shardx's own threads run for us */
    double end = mono_s();
    MPI_OK(MPI_Waitall(n, req, MPI_STATUSES_IGNORE));
    MPI_OK(MPI_Recv(&arrived, 1, MPI_DOUBLE, 1, 950, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    CHECK(arrived < end,
          "isend_compute: the %s arrived %.3f s after the computation began, which ended "
          "at %.3f s: %s waited for the sender's next MPI call",
          big != NULL ? "message" : "messages", arrived - start, end - start,
          big != NULL ? "it" : "they");
    printf("isend_compute: %d message%s of %zu bytes arrived %.1f ms into a %.1f ms "
           "computation\n",
           n, n == 1 ? "" : "s", big != NULL ? size : sizeof(uint64_t), (arrived - start) * 1e3,
           (end - start) * 1e3);
    free(big);
}

/*
 * The receiver's side of isend_compute: a large message that is already
 * here when rank 1 posts its MPI_Irecv (rank 1 first receives a small
 * message rank 0 sent after the large one's RGET header, so the header
 * waits among the unexpected ones), then rank 1 computes without an MPI
 * call. The get starts inside MPI_Irecv, outside any receive callback:
 * rank 1 must copy its share there (btl_shardx_split.c), so that rank 0's
 * MPI_Wait ends before rank 1's computation does. Only the order counts.
 */
static void test_irecv_compute(unsigned ms, size_t size)
{
    uint8_t *big = xmalloc(size);
    uint64_t token = 0;
    double t[2] = {0, 0}; /* rank 1's computation: start, end */

    if (rank > 1) {
        free(big);
        return;
    }
    MPI_OK(MPI_Barrier(MPI_COMM_WORLD));
    if (rank == 0) {
        MPI_Request req;
        fill(big, 0, size, 1);
        MPI_OK(MPI_Isend(big, (int)size, MPI_BYTE, 1, 960, MPI_COMM_WORLD, &req));
        token = 0x5eed;
        MPI_OK(MPI_Send(&token, 1, MPI_UINT64_T, 1, 961, MPI_COMM_WORLD));
        MPI_OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
        double done = mono_s();
        MPI_OK(MPI_Recv(t, 2, MPI_DOUBLE, 1, 962, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        CHECK(done < t[1],
              "irecv_compute: the send completed %.3f s into the receiver's %.3f s computation, "
              "after it: the get waited for the receiver's next MPI call",
              done - t[0], t[1] - t[0]);
        printf("irecv_compute: %zu bytes: the send completed %.1f ms into a %.1f ms computation "
               "of the receiver\n",
               size, (done - t[0]) * 1e3, (t[1] - t[0]) * 1e3);
    } else {
        MPI_Request req;
        MPI_OK(MPI_Recv(&token, 1, MPI_UINT64_T, 0, 961, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        MPI_OK(MPI_Irecv(big, (int)size, MPI_BYTE, 0, 960, MPI_COMM_WORLD, &req));
        t[0] = mono_s();
        volatile unsigned long x = 0;
        while (mono_s() < t[0] + ms / 1000.0)
            x++; /* no MPI call */
        t[1] = mono_s();
        MPI_OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
        verify(big, 0, size, 1, "irecv_compute");
        MPI_OK(MPI_Send(t, 2, MPI_DOUBLE, 0, 962, MPI_COMM_WORLD));
    }
    free(big);
}

/* Rank 1 stops for good; rank 0's messages are never acknowledged, so
 * after SX_PEER_TIMEOUT_MS shardx fails the channel and reports the peer,
 * and the BTL hands that to ob1's error callback, which aborts the job.
 * Returning from here would be the failure. */
static void test_peerfail(void)
{
    uint64_t v = 0;
    MPI_OK(MPI_Barrier(MPI_COMM_WORLD));
    if (rank == 1) {
        raise(SIGSTOP);
        /* Continued only by mpirun tearing the job down. */
        MPI_OK(MPI_Recv(&v, 1, MPI_UINT64_T, 0, 702, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    }
    if (rank == 0) {
        for (int i = 0; i < 1000; i++)
            MPI_OK(MPI_Send(&v, 1, MPI_UINT64_T, 1, 700, MPI_COMM_WORLD));
        MPI_OK(MPI_Recv(&v, 1, MPI_UINT64_T, 1, 701, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    }
    CHECK(0, "peerfail: rank %d returned although its peer stopped", rank);
}

/* Ranks started with different largest messages (main sets rank 1's): a
 * message rank 1's shardx refuses must end the job with the reason. It
 * used to be acknowledged and dropped while rank 1 waited for it. */
static void test_refused(size_t size)
{
    uint8_t *buf = calloc(size, 1);
    uint64_t v = 0;
    CHECK(buf != NULL, "out of memory");
    MPI_OK(MPI_Barrier(MPI_COMM_WORLD));
    if (rank == 0) {
        MPI_OK(MPI_Send(buf, (int)size, MPI_BYTE, 1, 800, MPI_COMM_WORLD));
        /* Continued only by mpirun tearing the job down. */
        MPI_OK(MPI_Recv(&v, 1, MPI_UINT64_T, 1, 801, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    }
    if (rank == 1) {
        MPI_Request req;
        int done = 0;
        MPI_OK(MPI_Irecv(buf, (int)size, MPI_BYTE, 0, 800, MPI_COMM_WORLD, &req));
        double start = MPI_Wtime();
        while (!done && MPI_Wtime() - start < 60.0)
            MPI_OK(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
        CHECK(0, "refused: %s",
              done ? "a message over this rank's limit arrived"
                   : "waited 60 s for a message this rank's shardx refused");
    }
    CHECK(0, "refused: rank %d returned although its peer refused the message", rank);
}

/*
 * SXT_DENY_CMA=1: make process_vm_readv and process_vm_writev fail with
 * EPERM in this rank, as Docker's default seccomp profile and Yama's
 * ptrace_scope do, so the BTL's single copy (btl_shardx_cma.c) must hand
 * every put and get to shardx's datagrams and say so. SXT_DENY_CMA=writev:
 * only process_vm_writev, which a rank uses to copy its part of a peer's
 * shared get (btl_shardx_split.c): the peer must copy that part again.
 */
#if defined(__x86_64__)
#define SXT_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define SXT_AUDIT_ARCH AUDIT_ARCH_AARCH64
#endif
static void deny_cma(bool writev_only)
{
#ifdef SXT_AUDIT_ARCH
    /* Another architecture's system call numbers pass (the last but one
     * instruction); these two get EPERM (the last). */
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SXT_AUDIT_ARCH, 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K,
                 writev_only ? __NR_process_vm_writev : __NR_process_vm_readv, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_process_vm_writev, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | 1 /* EPERM */),
    };
    struct sock_fprog prog = {.len = sizeof(f) / sizeof(f[0]), .filter = f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0)
        return;
    perror("btl_suite: SXT_DENY_CMA: prctl");
#else
    fprintf(stderr, "btl_suite: SXT_DENY_CMA: no seccomp filter for this architecture\n");
#endif
    exit(1);
}

/*
 * "cma_probe", without MPI: whether this host lets one process copy from
 * a sibling's memory (process_vm_readv), as two ranks that mpirun started
 * are. The target does what the BTL does for it under Yama
 * (mca_btl_shardx_cma_allow_peers). Exits 0 if the copy worked, 2 if the
 * kernel refused it (EPERM: Yama's ptrace_scope 2 or 3, a seccomp profile
 * without CMA, a container without CAP_SYS_PTRACE where it is needed;
 * ENOSYS), 1 on any other failure. run_mpi.sh asks before a test that
 * wants single copy, so that such a host checks the datagram fallback
 * instead of failing.
 */
static int cma_probe(void)
{
    static volatile uint64_t secret = 0x5e11c0de5e11c0deull;
    int go[2], res[2];
    if (pipe(go) != 0 || pipe(res) != 0)
        return 1;
    pid_t target = fork();
    if (target == 0) {
        char scope = 0, c;
        FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "r");
        if (f != NULL && fread(&scope, 1, 1, f) == 1 && scope == '1')
            (void)prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
        if (f != NULL)
            fclose(f);
        (void)!write(res[1], "r", 1); /* ready */
        (void)!read(go[0], &c, 1);    /* until the reader is done */
        _exit(0);
    }
    char c;
    if (target < 0 || read(res[0], &c, 1) != 1)
        return 1;
    pid_t reader = fork();
    if (reader == 0) {
        uint64_t got = 0;
        struct iovec l = {.iov_base = &got, .iov_len = sizeof(got)};
        struct iovec r = {.iov_base = (void *)&secret, .iov_len = sizeof(secret)};
        ssize_t n = process_vm_readv(target, &l, 1, &r, 1, 0);
        if (n == (ssize_t)sizeof(got) && got == secret)
            _exit(0);
        _exit(n < 0 && (errno == EPERM || errno == ENOSYS) ? 2 : 1);
    }
    int status = 1;
    if (reader > 0)
        (void)waitpid(reader, &status, 0);
    (void)!write(go[1], "g", 1);
    (void)waitpid(target, NULL, 0);
    int rc = reader > 0 && WIFEXITED(status) ? WEXITSTATUS(status) : 1;
    printf("btl_suite: cma_probe: %s\n", rc == 0   ? "a process may copy from its sibling"
                                         : rc == 2 ? "the kernel refuses copies between siblings"
                                                   : "probe failed");
    return rc;
}

int main(int argc, char **argv)
{
    const char *test = argc > 1 ? argv[1] : "";
    int provided = 0;
    int want = (strcmp(test, "threads") == 0 || strcmp(test, "latency_mt") == 0)
                   ? MPI_THREAD_MULTIPLE
                   : MPI_THREAD_SINGLE;

    const char *deny = getenv("SXT_DENY_CMA");
    if (deny != NULL && (strcmp(deny, "1") == 0 || strcmp(deny, "writev") == 0))
        deny_cma(strcmp(deny, "writev") == 0);
    if (strcmp(test, "cma_probe") == 0)
        return cma_probe();
    const char *world_rank = getenv("OMPI_COMM_WORLD_RANK");
    if (strcmp(test, "refused") == 0 && world_rank != NULL && atoi(world_rank) == 1)
        setenv("OMPI_MCA_btl_shardx_max_msg_size", "8k", 1);
    MPI_Init_thread(&argc, &argv, want, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    CHECK(provided >= want, "MPI_Init_thread provided %d, wanted %d", provided, want);
    CHECK(nranks >= 2, "needs at least 2 ranks");

    if (strcmp(test, "p2p") == 0)
        test_p2p(argc > 2 ? strtoull(argv[2], NULL, 0) : 16u << 20);
    else if (strcmp(test, "wildcard") == 0)
        test_wildcard();
    else if (strcmp(test, "probe") == 0)
        test_probe();
    else if (strcmp(test, "storm") == 0)
        test_storm();
    else if (strcmp(test, "threads") == 0)
        test_threads(argc > 2 ? atoi(argv[2]) : 4);
    else if (strcmp(test, "latency_mt") == 0)
        test_latency_mt(argc > 2 ? strtoull(argv[2], NULL, 0) : 4u << 20);
    else if (strcmp(test, "coll") == 0)
        test_coll();
    else if (strcmp(test, "peerfail") == 0)
        test_peerfail();
    else if (strcmp(test, "refused") == 0)
        test_refused(argc > 2 ? strtoull(argv[2], NULL, 0) : 16384u);
    else if (strcmp(test, "busy") == 0) {
        unsigned ms = argc > 2 ? (unsigned)strtoul(argv[2], NULL, 0) : 5000u;
        test_busy(ms, argc > 3 ? (unsigned)strtoul(argv[3], NULL, 0) : ms);
    } else if (strcmp(test, "irecv_compute") == 0)
        test_irecv_compute(argc > 2 ? (unsigned)strtoul(argv[2], NULL, 0) : 3000u,
                           argc > 3 ? strtoull(argv[3], NULL, 0) : 1048576u);
    else if (strcmp(test, "isend_compute") == 0)
        test_isend_compute(argc > 2 ? (unsigned)strtoul(argv[2], NULL, 0) : 3000u,
                           argc > 3 ? strtoull(argv[3], NULL, 0) : 0);
    else
        CHECK(0,
              "unknown test '%s' (p2p, wildcard, probe, storm, threads, latency_mt, coll, "
              "peerfail, refused, busy, isend_compute, irecv_compute)",
              test);

    MPI_OK(MPI_Barrier(MPI_COMM_WORLD));
    MPI_Finalize();
    return 0;
}
