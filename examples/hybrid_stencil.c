/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * hybrid_stencil: a 2-D Jacobi stencil over MPI-style processes, each
 * running OpenMP threads, the hybrid MPI+OpenMP shape shardx is built for.
 * Start it with the built-in launcher or with Open MPI's mpirun:
 *
 *   sx_run -n 2 ./hybrid_stencil -t 2
 *   mpirun -np 2 --bind-to none ./hybrid_stencil -t 2
 *
 * The grid's interior rows are cut into one horizontal strip per thread of
 * every process (process p's thread t owns strip p * T + t). Each thread
 * binds to its own home shard (sx_thread_bind) and, every iteration, sends
 * its first and last rows straight to the threads that own the
 * neighbouring strips, through its own shard and onto the lane of the
 * receiving thread's shard, whether that thread lives in another process or
 * in this one (the self peer). No thread funnels another's messages, and
 * no thread waits on a lock: that is the MPI_THREAD_MULTIPLE pattern.
 *
 * Every process then computes the whole grid serially with the same
 * kernel and compares its strips with it bit for bit; the exit status is 0
 * only when they match. Rank 0 prints iterations per second, and with
 * --scaling it repeats the run for 1, 2, ... T threads and prints a table.
 *
 * Options: -x COLS (default 256), -y ROWS (interior rows, default 256),
 * -i ITERATIONS (default 200), -t THREADS (default: OpenMP's),
 * --scaling, --no-verify.
 */
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <omp.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <shardx.h>

#define TAG 9

enum { SIDE_TOP = 0, SIDE_BOTTOM = 1 };

/* The message: this header, then one row of doubles. */
typedef struct halo_hdr {
    uint32_t run;   /* which solve (--scaling runs several) */
    uint32_t strip; /* the receiving strip */
    uint32_t iter;  /* the iteration whose values these are */
    uint32_t side;  /* SIDE_TOP: the row above the strip; SIDE_BOTTOM: below */
} halo_hdr_t;

/*
 * A strip's incoming halos. A neighbour can be at most one iteration ahead
 * (it needs our rows of iteration k to compute k + 1), so two slots, by
 * iteration parity, suffice. ready[slot][side] holds iter + 1 once the row
 * of that iteration is in place: the handler stores it with release after
 * copying, the owner loads it with acquire before reading.
 */
typedef struct strip strip_t;

struct strip {
    uint32_t row0, rows; /* first interior row (1-based) and how many */
    double *ghost[2][2]; /* [slot][side], a row each */
    atomic_uint ready[2][2];
    /* Outgoing rows, by the same parity: sx_send reads a buffer (header
     * and row) until its completion runs, so a slot is refilled only after
     * the send made from it two iterations ago has completed. */
    struct out_slot {
        double *buf; /* halo_hdr_t in the first two doubles, then the row */
        atomic_int busy;
        struct strip *owner;
    } out[2][2];
    atomic_int failed;
};

typedef struct solve {
    uint32_t run;
    uint32_t nx, ny, iters;
    uint32_t rank, size, threads, nstrips;
    strip_t *strips; /* this process's strips only: [threads] */
    atomic_uint bad_messages;
} solve_t;

/* The handler looks up the solve in progress; it is set (and the previous
 * one retired) only between runs, when no halo is in flight. */
static _Atomic(solve_t *) current;
static sx_engine_h engine;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The initial grid, a function of the global position only, so that every
 * strip and the serial reference start from the same values. Row 0 and
 * row ny + 1, column 0 and column nx - 1 are fixed boundaries. */
static double initial(uint32_t row, uint32_t col, uint32_t nx, uint32_t ny)
{
    if (row == 0)
        return 1.0;
    if (row == ny + 1)
        return -0.5;
    if (col == 0 || col == nx - 1)
        return 0.25;
    return sin(0.01 * row * col) * 0.1;
}

/*
 * The kernel, shared by the strips and the serial reference so that both
 * evaluate every point with the same expression in the same order: rows
 * 1 .. rows of @p out from rows 0 .. rows + 1 of @p in (0 and rows + 1 are
 * the halos), the boundary columns copied.
 */
static void relax(const double *in, double *out, uint32_t rows, uint32_t nx)
{
    for (uint32_t i = 1; i <= rows; i++) {
        const double *up = in + (size_t)(i - 1) * nx, *mid = in + (size_t)i * nx,
                     *down = in + (size_t)(i + 1) * nx;
        double *o = out + (size_t)i * nx;
        o[0] = mid[0];
        for (uint32_t j = 1; j + 1 < nx; j++)
            o[j] = 0.25 * ((up[j] + down[j]) + (mid[j - 1] + mid[j + 1]));
        o[nx - 1] = mid[nx - 1];
    }
}

/* The whole grid, serially: rows 0 .. ny + 1 after @p iters iterations. */
static double *serial_grid(uint32_t nx, uint32_t ny, uint32_t iters)
{
    size_t n = (size_t)(ny + 2) * nx;
    double *a = malloc(n * sizeof(double)), *b = malloc(n * sizeof(double));
    if (a == NULL || b == NULL) {
        free(a);
        free(b);
        return NULL;
    }
    for (uint32_t r = 0; r < ny + 2; r++)
        for (uint32_t c = 0; c < nx; c++)
            a[(size_t)r * nx + c] = b[(size_t)r * nx + c] = initial(r, c, nx, ny);
    for (uint32_t k = 0; k < iters; k++) {
        relax(a, b, ny, nx);
        double *t = a;
        a = b;
        b = t;
    }
    free(b);
    return a;
}

static void on_halo(void *arg, uint64_t peer_id, uint8_t tag, const void *data, size_t len)
{
    solve_t *s = atomic_load_explicit(&current, memory_order_acquire);
    halo_hdr_t h;
    (void)arg;
    (void)peer_id;
    (void)tag;
    if (s == NULL || len != sizeof(h) + (size_t)s->nx * sizeof(double)) {
        if (s != NULL)
            atomic_fetch_add(&s->bad_messages, 1);
        return;
    }
    memcpy(&h, data, sizeof(h));
    uint32_t first = s->rank * s->threads;
    if (h.run != s->run || h.strip < first || h.strip >= first + s->threads || h.side > 1) {
        atomic_fetch_add(&s->bad_messages, 1);
        return;
    }
    strip_t *st = &s->strips[h.strip - first];
    memcpy(st->ghost[h.iter & 1][h.side], (const uint8_t *)data + sizeof(h),
           (size_t)s->nx * sizeof(double));
    atomic_store_explicit(&st->ready[h.iter & 1][h.side], h.iter + 1, memory_order_release);
}

static void on_sent(void *ctx, int status)
{
    struct out_slot *slot = ctx;
    if (status != SX_OK)
        atomic_store(&slot->owner->failed, status);
    atomic_store_explicit(&slot->busy, 0, memory_order_release);
}

static void on_error(void *arg, uint64_t peer_id, int status)
{
    (void)arg;
    fprintf(stderr, "peer %" PRIu64 " failed: %s\n", peer_id, sx_strerror(status));
}

/* Progresses the calling thread's shard; yields when there was nothing to
 * do, so that ranks and threads sharing a core still get their turn. */
static void progress_or_yield(void)
{
    if (sx_progress(engine) <= 0)
        sched_yield();
}

/* Sends row @p row (values of iteration @p iter) to strip @p dst as its
 * halo on @p side, from the calling thread's home shard to the lane of the
 * receiving thread's. */
static int send_halo(solve_t *s, strip_t *st, const double *row, uint32_t dst, uint32_t iter,
                     uint32_t side)
{
    struct out_slot *slot = &st->out[iter & 1][side];
    /* The slot was last used two iterations ago; its send must be done. */
    while (atomic_load_explicit(&slot->busy, memory_order_acquire))
        progress_or_yield();
    halo_hdr_t h = {.run = s->run, .strip = dst, .iter = iter, .side = side};
    _Static_assert(sizeof(h) <= 2 * sizeof(double), "the header fits in front of the row");
    memcpy(slot->buf, &h, sizeof(h));
    memcpy(slot->buf + 2, row, (size_t)s->nx * sizeof(double));
    struct iovec iov[2] = {{.iov_base = slot->buf, .iov_len = sizeof(h)},
                           {.iov_base = slot->buf + 2, .iov_len = (size_t)s->nx * sizeof(double)}};
    sx_send_params_t params = {.field_mask = SX_SEND_PARAM_LANE, .lane = dst % s->threads};
    int rc;
    atomic_store_explicit(&slot->busy, 1, memory_order_relaxed);
    /* sx_send_ex queues behind a full window; it never says "again". */
    rc = sx_send_ex(sx_job_peer(engine, dst / s->threads), TAG, iov, 2, &params, on_sent, slot);
    if (rc != SX_INPROGRESS) {
        atomic_store_explicit(&slot->busy, 0, memory_order_relaxed);
        return rc;
    }
    return SX_OK;
}

/* One thread's part of a solve: its strip, every iteration; then it
 * compares the strip with @p ref (NULL: no check). Returns 0 or -1. */
static int solve_strip(solve_t *s, unsigned t, unsigned nshards, const double *ref)
{
    strip_t *st = &s->strips[t];
    uint32_t g = s->rank * s->threads + t, nx = s->nx, rows = st->rows;
    size_t n = (size_t)(rows + 2) * nx;
    double *a = malloc(n * sizeof(double)), *b = malloc(n * sizeof(double));
    int rc = -1;

    if (sx_thread_bind(engine, t % nshards) != SX_OK || a == NULL || b == NULL)
        goto out;
    /* Rows row0 - 1 .. row0 + rows: the halos start out as the neighbours'
     * (or the boundary's) initial values, which every strip can compute. */
    for (uint32_t i = 0; i < rows + 2; i++)
        for (uint32_t c = 0; c < nx; c++)
            a[(size_t)i * nx + c] = b[(size_t)i * nx + c] = initial(st->row0 - 1 + i, c, nx, s->ny);

    for (uint32_t k = 0; k < s->iters; k++) {
        if (k > 0) {
            for (uint32_t side = 0; side < 2; side++) {
                if ((side == SIDE_TOP && g == 0) || (side == SIDE_BOTTOM && g == s->nstrips - 1))
                    continue; /* the fixed boundary row stays in place */
                atomic_uint *ready = &st->ready[k & 1][side];
                while (atomic_load_explicit(ready, memory_order_acquire) != k + 1) {
                    if (atomic_load(&st->failed) != 0)
                        goto out;
                    progress_or_yield();
                }
                memcpy(a + (side == SIDE_TOP ? 0 : (size_t)(rows + 1) * nx), st->ghost[k & 1][side],
                       (size_t)nx * sizeof(double));
            }
        }
        relax(a, b, rows, nx);
        double *tmp = a;
        a = b;
        b = tmp;
        if (k + 1 == s->iters)
            break;
        if (g > 0 && send_halo(s, st, a + nx, g - 1, k + 1, SIDE_BOTTOM) != SX_OK)
            goto out;
        if (g + 1 < s->nstrips &&
            send_halo(s, st, a + (size_t)rows * nx, g + 1, k + 1, SIDE_TOP) != SX_OK)
            goto out;
    }
    rc = ref != NULL && memcmp(a + nx, ref + (size_t)st->row0 * nx,
                               (size_t)rows * nx * sizeof(double)) != 0
             ? -1
             : 0;
out:
    /* Every send must complete (an error completes it too) before the
     * buffers it reads go away. */
    for (int i = 0; i < 4; i++)
        while (atomic_load_explicit(&st->out[i / 2][i % 2].busy, memory_order_acquire))
            progress_or_yield();
    if (atomic_load(&st->failed) != 0)
        rc = -1;
    free(a);
    free(b);
    return rc;
}

/* One solve with @p threads threads per process. Returns 0 when every
 * strip of this process completed (and matched @p ref), with the solve's
 * wall time, barrier to barrier, in *seconds_p. */
static int solve(uint32_t run, const sx_job_info_t *job, uint32_t nx, uint32_t ny, uint32_t iters,
                 unsigned threads, unsigned nshards, const double *ref, double *seconds_p)
{
    solve_t s = {.run = run,
                 .nx = nx,
                 .ny = ny,
                 .iters = iters,
                 .rank = job->rank,
                 .size = job->size,
                 .threads = threads,
                 .nstrips = job->size * threads};
    s.strips = calloc(threads, sizeof(strip_t));
    double *mem = calloc((size_t)threads * 8, ((size_t)nx + 2) * sizeof(double));
    if (s.strips == NULL || mem == NULL)
        return -1;
    for (unsigned t = 0; t < threads; t++) {
        strip_t *st = &s.strips[t];
        uint32_t g = job->rank * threads + t;
        st->row0 = 1 + (uint32_t)((uint64_t)g * ny / s.nstrips);
        st->rows = 1 + (uint32_t)((uint64_t)(g + 1) * ny / s.nstrips) - st->row0;
        for (int i = 0; i < 4; i++)
            st->out[i / 2][i % 2].owner = st;
        for (int i = 0; i < 8; i++) {
            double *row = mem + ((size_t)t * 8 + i) * (nx + 2);
            if (i < 4)
                st->ghost[i / 2][i % 2] = row;
            else
                st->out[(i - 4) / 2][(i - 4) % 2].buf = row;
        }
    }
    atomic_store_explicit(&current, &s, memory_order_release);

    /* OpenMP's fork and join already order the threads' work with this
     * thread's; the release/acquire pairs on go and finished only make that
     * visible to ThreadSanitizer, which cannot see into libgomp. */
    atomic_int failures = 0, finished = 0, go = 0;
    int rc = sx_job_barrier(engine); /* everyone's handler sees this run */
    double t0 = now_s();
    atomic_store_explicit(&go, 1, memory_order_release);
#pragma omp parallel num_threads(threads)
    {
        (void)atomic_load_explicit(&go, memory_order_acquire);
        if (omp_get_num_threads() != (int)threads ||
            solve_strip(&s, omp_get_thread_num(), nshards, ref) != 0)
            atomic_fetch_add(&failures, 1);
        atomic_fetch_add_explicit(&finished, 1, memory_order_release);
    }
    (void)atomic_load_explicit(&finished, memory_order_acquire);
    /* Leave together: peers may still wait for our acknowledgements. */
    if (rc == SX_OK)
        rc = sx_job_barrier(engine);
    *seconds_p = now_s() - t0;
    atomic_store_explicit(&current, NULL, memory_order_release);
    int bad = atomic_load(&s.bad_messages) != 0;
    free(mem);
    free(s.strips);
    return rc == SX_OK && atomic_load(&failures) == 0 && !bad ? 0 : -1;
}

int main(int argc, char **argv)
{
    uint32_t nx = 256, ny = 256, iters = 200;
    unsigned threads = (unsigned)omp_get_max_threads();
    int scaling = 0, verify = 1;
    static const struct option opts[] = {{"scaling", no_argument, NULL, 's'},
                                         {"no-verify", no_argument, NULL, 'n'},
                                         {NULL, 0, NULL, 0}};
    for (int c; (c = getopt_long(argc, argv, "x:y:i:t:", opts, NULL)) != -1;) {
        switch (c) {
        case 'x':
            nx = (uint32_t)strtoul(optarg, NULL, 10);
            break;
        case 'y':
            ny = (uint32_t)strtoul(optarg, NULL, 10);
            break;
        case 'i':
            iters = (uint32_t)strtoul(optarg, NULL, 10);
            break;
        case 't':
            threads = (unsigned)strtoul(optarg, NULL, 10);
            break;
        case 's':
            scaling = 1;
            break;
        case 'n':
            verify = 0;
            break;
        default:
            fprintf(stderr,
                    "usage: %s [-x cols] [-y rows] [-i iterations] [-t threads] "
                    "[--scaling] [--no-verify]\n",
                    argv[0]);
            return 2;
        }
    }
    if (nx < 3 || iters < 1 || threads < 1 || threads > 1024) {
        fprintf(stderr, "hybrid_stencil: need cols >= 3, iterations >= 1, 1..1024 threads\n");
        return 2;
    }

    sx_job_info_t job;
    unsigned nshards;
    int rc = sx_engine_create(NULL, &engine);
    if (rc != SX_OK) {
        fprintf(stderr, "sx_engine_create: %s\n", sx_strerror(rc));
        return 1;
    }
    sx_am_register(engine, TAG, on_halo, NULL);
    sx_error_register(engine, on_error, NULL);
    sx_engine_shard_count(engine, &nshards);
    rc = sx_engine_join(engine, &job);
    if (rc != SX_OK) {
        fprintf(stderr, "sx_engine_join: %s\n", sx_strerror(rc));
        sx_engine_destroy(engine);
        return 1;
    }
    if (ny < job.size * threads) {
        if (job.rank == 0)
            fprintf(stderr, "hybrid_stencil: %u rows cannot feed %u strips\n", ny,
                    job.size * threads);
        sx_engine_destroy(engine);
        return 2;
    }
    double *ref = verify ? serial_grid(nx, ny, iters) : NULL;
    if (verify && ref == NULL) {
        sx_engine_destroy(engine);
        return 1;
    }

    int ok = 1;
    uint32_t run = 0;
    if (scaling && job.rank == 0)
        printf("hybrid_stencil scaling: %u processes, %ux%u grid, %u iterations\n"
               "threads   it/s        Mpoints/s   speed-up\n",
               job.size, ny, nx, iters);
    double base = 0;
    for (unsigned t = scaling ? 1 : threads; t <= threads; t++) {
        double secs = 0;
        int r = solve(run++, &job, nx, ny, iters, t, nshards, ref, &secs);
        ok = ok && r == 0;
        double ips = iters / secs, mpts = ips * nx * ny * 1e-6;
        if (t == (scaling ? 1u : threads))
            base = ips;
        if (job.rank == 0 && scaling)
            printf("%7u   %-10.1f  %-10.2f  %.2f\n", t, ips, mpts, ips / base);
        else if (job.rank == 0)
            printf("hybrid_stencil: %u processes x %u threads, %ux%u grid, %u iterations: "
                   "%.1f iterations/s (%.2f Mpoints/s)\n",
                   job.size, t, ny, nx, iters, ips, mpts);
    }
    printf("rank %u of %u (%s): %u threads on %u shards, %s\n", job.rank, job.size, job.modex,
           threads, nshards,
           !ok      ? "FAILED"
           : verify ? "strips match the serial grid bit for bit: ok"
                    : "ok");
    free(ref);
    sx_engine_destroy(engine);
    return ok ? 0 : 1;
}
