/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * mpi_bench: the MPI figures behind `make bench-mpi` (bench/bench_mpi.sh
 * runs it over each transport). Two ranks (ring: any number); rank 0 prints
 * one JSON object.
 *
 *   mpi_bench pingpong   one-way latency (half the round trip) per size
 *   mpi_bench rate       8-byte messages per second, windows of 64 Isends
 *   mpi_bench mt N [I [S]]  S-byte (8) latency with N threads per rank, each
 *                        ping-ponging on its own tag (MPI_THREAD_MULTIPLE),
 *                        I round trips per thread and batch (500)
 *   mpi_bench mtrate N   8-byte messages per second with N threads per
 *                        rank (MPI_THREAD_MULTIPLE), each streaming windows
 *                        of 64 Isends on its own tag; all threads together
 *   mpi_bench ring [R]   any number of ranks: R (20) rounds in which every
 *                        rank sends to the next and receives from the one
 *                        before (MPI_Sendrecv), at each size from 0 B to
 *                        1 MiB + 17 (those of our MPI suite's threads test);
 *                        the mean time per exchange at each size and the
 *                        whole loop's time. Run with more ranks than cores
 *                        (and beside busy loops) it shows how a transport
 *                        fares when every step waits for a descheduled rank
 *   mpi_bench coll [S [W]]  any number of ranks: MPI_Allreduce (S bytes
 *                        of doubles, summed), MPI_Alltoall (S bytes to each
 *                        rank, as osu_alltoall counts) and MPI_Bcast of S
 *                        bytes (1 MiB); the time of one call, the slowest
 *                        rank's, each after two calls of warm-up or, with
 *                        W, after W seconds of calls
 *   mpi_bench incast [S [T [W]]]  any number of ranks: ranks 1..N-1 each
 *                        keep W (8) MPI_Isends of S bytes (1 MiB) in
 *                        flight to rank 0 for T (5) seconds; rank 0
 *                        reports each sender's goodput and messages, the
 *                        total and Jain's fairness index over the senders
 *                        (bench/bench_incast.sh, the tcp BTL's figure for
 *                        shardx's congestion control to be read against)
 *
 * Each figure is the median of several batches, so one batch slowed by
 * a busy machine does not set it. The program prints figures; it never
 * passes or fails on them.
 */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BATCHES 5
static int rank;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Round trips on (comm, tag); returns the one-way latency in µs. */
static double pingpong(MPI_Comm comm, int tag, char *buf, int size, int iters)
{
    int peer = 1 - rank;
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; i++) {
        if (rank == 0) {
            MPI_Send(buf, size, MPI_BYTE, peer, tag, comm);
            MPI_Recv(buf, size, MPI_BYTE, peer, tag, comm, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(buf, size, MPI_BYTE, peer, tag, comm, MPI_STATUS_IGNORE);
            MPI_Send(buf, size, MPI_BYTE, peer, tag, comm);
        }
    }
    return (MPI_Wtime() - t0) * 1e6 / iters / 2;
}

static void bench_pingpong(void)
{
    static const int sizes[] = {0,     8,      64,      512,     4096,    8192,
                                32768, 262144, 1048576, 4194304, 16777216};
    const int n = sizeof(sizes) / sizeof(sizes[0]);
    char *buf = calloc(1, 16777216);

    if (rank == 0)
        printf("{\"test\": \"pingpong\", \"results\": [");
    for (int k = 0; k < n; k++) {
        int iters = sizes[k] <= 4096      ? 2000
                    : sizes[k] <= 262144  ? 200
                    : sizes[k] <= 4194304 ? 20
                                          : 6;
        double lat[BATCHES];
        pingpong(MPI_COMM_WORLD, 1, buf, sizes[k], iters / 10 + 1); /* warm-up */
        for (int b = 0; b < BATCHES; b++) {
            MPI_Barrier(MPI_COMM_WORLD);
            lat[b] = pingpong(MPI_COMM_WORLD, 1, buf, sizes[k], iters);
        }
        double med = median(lat, BATCHES);
        if (rank == 0)
            printf("%s{\"size\": %d, \"latency_us\": %.3f, \"bandwidth_MBps\": %.1f}",
                   k ? ", " : "", sizes[k], med, med > 0 ? sizes[k] / med : 0.0);
    }
    if (rank == 0)
        printf("]}\n");
    free(buf);
}

#define WINDOW 64
static void bench_rate(void)
{
    const int windows = 400;
    char buf[WINDOW][8];
    MPI_Request req[WINDOW];
    double rate[BATCHES];
    int peer = 1 - rank;

    memset(buf, 1, sizeof(buf));
    for (int b = -1; b < BATCHES; b++) { /* b = -1: warm-up */
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int w = 0; w < windows; w++) {
            for (int i = 0; i < WINDOW; i++) {
                if (rank == 0)
                    MPI_Isend(buf[i], 8, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &req[i]);
                else
                    MPI_Irecv(buf[i], 8, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &req[i]);
            }
            MPI_Waitall(WINDOW, req, MPI_STATUSES_IGNORE);
            /* The receiver acknowledges each window, so the sender measures
             * delivered messages, not queued ones. */
            if (rank == 0)
                MPI_Recv(NULL, 0, MPI_BYTE, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            else
                MPI_Send(NULL, 0, MPI_BYTE, peer, 3, MPI_COMM_WORLD);
        }
        double t = MPI_Wtime() - t0;
        if (b >= 0)
            rate[b] = (double)windows * WINDOW / t;
    }
    if (rank == 0)
        printf("{\"test\": \"rate\", \"size\": 8, \"window\": %d, \"messages_per_s\": %.0f}\n",
               WINDOW, median(rate, BATCHES));
}

typedef struct mt_arg {
    int t;
    int iters;
    int size;
    pthread_barrier_t *start;
    double lat;
} mt_arg_t;

static void *mt_thread(void *p)
{
    mt_arg_t *a = p;
    char *buf = calloc(1, (size_t)a->size + 1);
    pingpong(MPI_COMM_WORLD, 10 + a->t, buf, a->size, a->iters / 10 + 1); /* warm-up */
    pthread_barrier_wait(a->start);
    a->lat = pingpong(MPI_COMM_WORLD, 10 + a->t, buf, a->size, a->iters);
    free(buf);
    return NULL;
}

static void bench_mt(int nthreads, int iters, int size)
{
    double lat[BATCHES];
    pthread_t th[64];
    mt_arg_t args[64];
    pthread_barrier_t start;

    for (int b = 0; b < BATCHES; b++) {
        pthread_barrier_init(&start, NULL, (unsigned)nthreads);
        MPI_Barrier(MPI_COMM_WORLD);
        for (int t = 0; t < nthreads; t++) {
            args[t] = (mt_arg_t){.t = t, .iters = iters, .size = size, .start = &start};
            pthread_create(&th[t], NULL, mt_thread, &args[t]);
        }
        double sum = 0;
        for (int t = 0; t < nthreads; t++) {
            pthread_join(th[t], NULL);
            sum += args[t].lat;
        }
        pthread_barrier_destroy(&start);
        lat[b] = sum / nthreads; /* each thread's own latency, averaged */
    }
    if (rank == 0)
        printf("{\"test\": \"mt\", \"threads\": %d, \"size\": %d, \"latency_us\": %.3f}\n",
               nthreads, size, median(lat, BATCHES));
}

/* mtrate: thread t streams windows on tag 20 + t; the receiver's thread t
 * answers each window with a zero-byte message, as in bench_rate. */
typedef struct mtrate_arg {
    int t;
    int windows;
    pthread_barrier_t *start;
    double t0, t1;
} mtrate_arg_t;

static void *mtrate_thread(void *p)
{
    mtrate_arg_t *a = p;
    char buf[WINDOW][8];
    MPI_Request req[WINDOW];
    int peer = 1 - rank, tag = 20 + a->t;

    memset(buf, 1, sizeof(buf));
    pthread_barrier_wait(a->start);
    a->t0 = MPI_Wtime();
    for (int w = 0; w < a->windows; w++) {
        for (int i = 0; i < WINDOW; i++) {
            if (rank == 0)
                MPI_Isend(buf[i], 8, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &req[i]);
            else
                MPI_Irecv(buf[i], 8, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &req[i]);
        }
        MPI_Waitall(WINDOW, req, MPI_STATUSES_IGNORE);
        if (rank == 0)
            MPI_Recv(NULL, 0, MPI_BYTE, peer, tag + 1000, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        else
            MPI_Send(NULL, 0, MPI_BYTE, peer, tag + 1000, MPI_COMM_WORLD);
    }
    a->t1 = MPI_Wtime();
    return NULL;
}

static void bench_mtrate(int nthreads)
{
    const int windows = 800 / nthreads + 1;
    double rate[BATCHES];
    pthread_t th[64];
    mtrate_arg_t args[64];
    pthread_barrier_t start;

    for (int b = -1; b < BATCHES; b++) { /* b = -1: warm-up */
        pthread_barrier_init(&start, NULL, (unsigned)nthreads);
        MPI_Barrier(MPI_COMM_WORLD);
        for (int t = 0; t < nthreads; t++) {
            args[t] = (mtrate_arg_t){.t = t, .windows = windows, .start = &start};
            pthread_create(&th[t], NULL, mtrate_thread, &args[t]);
        }
        double t0 = 1e300, t1 = 0;
        for (int t = 0; t < nthreads; t++) {
            pthread_join(th[t], NULL);
            t0 = args[t].t0 < t0 ? args[t].t0 : t0;
            t1 = args[t].t1 > t1 ? args[t].t1 : t1;
        }
        pthread_barrier_destroy(&start);
        if (b >= 0)
            rate[b] = (double)windows * WINDOW * nthreads / (t1 - t0);
    }
    if (rank == 0)
        printf("{\"test\": \"mtrate\", \"threads\": %d, \"size\": 8, \"window\": %d, "
               "\"messages_per_s\": %.0f}\n",
               nthreads, WINDOW, median(rate, BATCHES));
}

static void bench_ring(int rounds, int nranks)
{
    static const int sizes[] = {0, 8, 512, 8000, 9000, 65536, 200000, 1048576 + 17};
    const int n = sizeof(sizes) / sizeof(sizes[0]);
    char *sb = calloc(1, 1048576 + 17), *rb = calloc(1, 1048576 + 17);
    double per[sizeof(sizes) / sizeof(sizes[0])] = {0};
    int right = (rank + 1) % nranks, left = (rank + nranks - 1) % nranks;

    for (int k = 0; k < n; k++) /* warm-up: connections and registrations */
        MPI_Sendrecv(sb, sizes[k], MPI_BYTE, right, 1, rb, sizes[k], MPI_BYTE, left, 1,
                     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Barrier(MPI_COMM_WORLD);
    double t00 = MPI_Wtime();
    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < n; k++) {
            double t0 = MPI_Wtime();
            MPI_Sendrecv(sb, sizes[k], MPI_BYTE, right, 1, rb, sizes[k], MPI_BYTE, left, 1,
                         MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            per[k] += MPI_Wtime() - t0;
        }
    }
    double total = MPI_Wtime() - t00;
    if (rank == 0) {
        printf("{\"test\": \"ring\", \"ranks\": %d, \"rounds\": %d, \"seconds\": %.4f, "
               "\"results\": [",
               nranks, rounds, total);
        for (int k = 0; k < n; k++)
            printf("%s{\"size\": %d, \"exchange_us\": %.1f}", k ? ", " : "", sizes[k],
                   per[k] * 1e6 / rounds);
        printf("]}\n");
    }
    free(sb);
    free(rb);
}

/* One collective @p iters times; the slowest rank's time per call, in µs. */
static double coll_time(int which, char *a, char *b, int size, int nranks, int iters)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; i++) {
        if (which == 0)
            MPI_Allreduce(a, b, size / 8, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        else if (which == 1)
            MPI_Alltoall(a, size, MPI_BYTE, b, size, MPI_BYTE, MPI_COMM_WORLD);
        else
            MPI_Bcast(a, size, MPI_BYTE, 0, MPI_COMM_WORLD);
    }
    double t = (MPI_Wtime() - t0) * 1e6 / iters;
    (void)nranks;
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return t;
}

/*
 * Warm-up of one collective: two calls (connections, registrations), then
 * more in batches of ten until @p warm_s seconds have passed since the
 * first, rank 0's clock deciding for all. osu_allreduce and its siblings
 * reach 1 MiB only after a sweep of every smaller size, so their figure is
 * that of a job well past its start; with warm_s 0 this one is that of
 * the first calls after MPI_Init.
 */
static void coll_warm_up(int which, char *a, char *b, int size, int nranks, double warm_s)
{
    double t0 = MPI_Wtime();
    int more;

    coll_time(which, a, b, size, nranks, 2);
    if (warm_s <= 0)
        return; /* every rank has the same argument */
    do {
        more = MPI_Wtime() - t0 < warm_s;
        MPI_Bcast(&more, 1, MPI_INT, 0, MPI_COMM_WORLD);
        if (more)
            coll_time(which, a, b, size, nranks, 10);
    } while (more);
}

static void bench_coll(int size, int nranks, double warm_s)
{
    static const char *const names[] = {"allreduce", "alltoall", "bcast"};
    size_t room = (size_t)size * (size_t)nranks;
    char *a = calloc(1, room), *b = calloc(1, room);
    const int iters = 10;

    if (rank == 0)
        printf("{\"test\": \"coll\", \"ranks\": %d, \"size\": %d, \"warmup_s\": %g", nranks, size,
               warm_s);
    for (int k = 0; k < 3; k++) {
        double t[BATCHES];
        coll_warm_up(k, a, b, size, nranks, warm_s);
        for (int i = 0; i < BATCHES; i++)
            t[i] = coll_time(k, a, b, size, nranks, iters);
        if (rank == 0)
            printf(", \"%s_us\": %.1f", names[k], median(t, BATCHES));
    }
    if (rank == 0)
        printf("}\n");
    free(a);
    free(b);
}

/* Incast: every rank but 0 streams S-byte messages to rank 0, W in
 * flight, for T seconds, then W empty messages. They share one tag, so
 * MPI's order between a pair of ranks puts the empty ones after the data,
 * and rank 0, which keeps W receives posted per sender and posts another
 * for each data message, has none left once all W empty ones came: nothing
 * to cancel. Rank 0 times each sender from the common start (a barrier
 * after one warm-up message each, which sets up the connections) to that
 * sender's last data message, and the total up to the last of them. */
static void bench_incast(int size, double seconds, int window, int nranks)
{
    const int tag = 7, nsend = nranks - 1;
    char *buf = malloc((size_t)size * (size_t)window * (rank == 0 ? (size_t)nsend : 1));
    MPI_Request *req = malloc(sizeof(*req) * (size_t)window * (size_t)(rank == 0 ? nsend : 1));
    char host[MPI_MAX_PROCESSOR_NAME] = {0}, *hosts = NULL;
    int len;

    if (!buf || !req) {
        fprintf(stderr, "mpi_bench: incast: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    memset(buf, 0x5a, (size_t)size * (size_t)window);
    MPI_Get_processor_name(host, &len);
    if (rank == 0)
        hosts = calloc((size_t)nranks, MPI_MAX_PROCESSOR_NAME);
    MPI_Gather(host, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, hosts, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0,
               MPI_COMM_WORLD);
    if (rank != 0) {
        MPI_Send(buf, size, MPI_BYTE, 0, tag + 1, MPI_COMM_WORLD); /* warm-up */
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int i = 0; i < window; i++)
            MPI_Isend(buf + (size_t)i * (size_t)size, size, MPI_BYTE, 0, tag, MPI_COMM_WORLD,
                      &req[i]);
        for (;;) {
            int i;
            MPI_Waitany(window, req, &i, MPI_STATUS_IGNORE);
            if (MPI_Wtime() - t0 >= seconds)
                break;
            MPI_Isend(buf + (size_t)i * (size_t)size, size, MPI_BYTE, 0, tag, MPI_COMM_WORLD,
                      &req[i]);
        }
        MPI_Waitall(window, req, MPI_STATUSES_IGNORE);
        for (int i = 0; i < window; i++)
            MPI_Isend(NULL, 0, MPI_BYTE, 0, tag, MPI_COMM_WORLD, &req[i]);
        MPI_Waitall(window, req, MPI_STATUSES_IGNORE);
    } else {
        double *last = calloc((size_t)nranks, sizeof(double));
        long long *msgs = calloc((size_t)nranks, sizeof(long long));
        int open = nsend * window;

        for (int r = 1; r < nranks; r++)
            MPI_Recv(buf, size, MPI_BYTE, r, tag + 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        for (int r = 1; r < nranks; r++)
            for (int i = 0; i < window; i++) {
                int k = (r - 1) * window + i;
                MPI_Irecv(buf + (size_t)k * (size_t)size, size, MPI_BYTE, r, tag, MPI_COMM_WORLD,
                          &req[k]);
            }
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime(), end = t0;
        while (open > 0) {
            MPI_Status st;
            int k, count;
            MPI_Waitany(nsend * window, req, &k, &st);
            MPI_Get_count(&st, MPI_BYTE, &count);
            if (count == 0) { /* one of the sender's closing messages */
                open--;
                continue;
            }
            int r = st.MPI_SOURCE;
            msgs[r]++;
            last[r] = MPI_Wtime();
            if (last[r] > end)
                end = last[r];
            MPI_Irecv(buf + (size_t)k * (size_t)size, size, MPI_BYTE, r, tag, MPI_COMM_WORLD,
                      &req[k]);
        }
        double total = 0, sum = 0, sumsq = 0;
        printf("{\"test\": \"incast\", \"ranks\": %d, \"size\": %d, \"seconds\": %g, "
               "\"window\": %d, \"host\": \"%s\", \"senders\": [",
               nranks, size, seconds, window, hosts);
        for (int r = 1; r < nranks; r++) {
            double bytes = (double)msgs[r] * size, t = last[r] - t0;
            double mbps = t > 0 ? bytes / t / 1e6 : 0;
            total += bytes;
            sum += mbps;
            sumsq += mbps * mbps;
            printf("%s{\"rank\": %d, \"host\": \"%s\", \"mbps\": %.1f, \"msgs\": %lld}",
                   r > 1 ? ", " : "", r, hosts + (size_t)r * MPI_MAX_PROCESSOR_NAME, mbps, msgs[r]);
        }
        /* Jain's index, (sum x)^2 / (n sum x^2) (Jain, Chiu and Hawe, DEC-TR-301,
         * 1984): 1 when every sender got the same rate, 1/n when one got it all. */
        printf("], \"goodput_mbps\": %.1f, \"jain\": %.3f}\n",
               end > t0 ? total / (end - t0) / 1e6 : 0.0,
               sumsq > 0 ? sum * sum / (nsend * sumsq) : 0.0);
        free(last);
        free(msgs);
    }
    free(hosts);
    free(req);
    free(buf);
}

int main(int argc, char **argv)
{
    const char *test = argc > 1 ? argv[1] : "pingpong";
    int mt = strcmp(test, "mt") == 0 || strcmp(test, "mtrate") == 0;
    int nthreads = argc > 2 ? atoi(argv[2]) : 2;
    int provided, size;

    MPI_Init_thread(&argc, &argv, mt ? MPI_THREAD_MULTIPLE : MPI_THREAD_SINGLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int ring =
        strcmp(test, "ring") == 0 || strcmp(test, "coll") == 0 || strcmp(test, "incast") == 0;
    if ((ring ? size < 2 : size != 2) ||
        (mt && (provided < MPI_THREAD_MULTIPLE || nthreads < 1 || nthreads > 64))) {
        if (rank == 0)
            fprintf(stderr, "mpi_bench: needs 2 ranks, 2 or more for ring, coll and incast "
                            "(and MPI_THREAD_MULTIPLE, 1..64 threads for mt)\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (strcmp(test, "incast") == 0)
        bench_incast(argc > 2 && atoi(argv[2]) > 0 ? atoi(argv[2]) : 1048576,
                     argc > 3 && atof(argv[3]) > 0 ? atof(argv[3]) : 5.0,
                     argc > 4 && atoi(argv[4]) > 0 ? atoi(argv[4]) : 8, size);
    else if (strcmp(test, "coll") == 0)
        bench_coll(argc > 2 && atoi(argv[2]) >= 8 ? atoi(argv[2]) : 1048576, size,
                   argc > 3 && atof(argv[3]) > 0 ? atof(argv[3]) : 0.0);
    else if (ring)
        bench_ring(argc > 2 && atoi(argv[2]) > 0 ? atoi(argv[2]) : 20, size);
    else if (strcmp(test, "pingpong") == 0)
        bench_pingpong();
    else if (strcmp(test, "rate") == 0)
        bench_rate();
    else if (strcmp(test, "mt") == 0)
        bench_mt(nthreads, argc > 3 ? atoi(argv[3]) : 500, argc > 4 ? atoi(argv[4]) : 8);
    else if (mt)
        bench_mtrate(nthreads);
    else if (rank == 0)
        fprintf(stderr,
                "mpi_bench: unknown test '%s' (pingpong, rate, mt N, mtrate N, ring R, coll S W, "
                "incast S T W)\n",
                test);
    fflush(stdout);
    MPI_Finalize();
    return 0;
}
