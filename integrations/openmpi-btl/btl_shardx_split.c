/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A large get between two ranks of one host, copied by both of them
 * (btl_shardx_split).
 *
 * Why. The single copy of btl_shardx_cma.c runs on one core, and
 * process_vm_readv is slow per byte: it pins and maps every page, 78-98 us
 * a MiB on the 2-core test VM against 21-24 for a memcpy. The tcp BTL
 * copies twice, but on both cores at once (the sender into the socket,
 * the receiver out of it), so in the VM's fast stretches a 1 MiB ping-pong
 * took 126 us over the single copy against tcp's 119 (issue 22, run AI).
 * ob1's RGET leaves the data's owner idle meanwhile: it waits in progress
 * for the FIN. So it can copy part, as two cores copy two halves in about
 * half the time (39-44 us for half a MiB here).
 *
 * How. The getter (R) cuts the get into chunks (64 KiB or more, at most
 * 64) and puts them on its board: a page of memory it shares (a memfd),
 * with one slot per get, whose claim word is (generation << 32 | next
 * chunk). R asks the owner (S) to help (SHARDX_TAG_SPLIT_ASK: the board,
 * the slot, the addresses) and copies chunks itself with process_vm_readv
 * in its progress calls; S, in its progress calls, maps R's board (once per
 * peer, through /proc/R/fd/N, which the kernel lets S open exactly when it
 * may ptrace R, as process_vm_writev needs anyway) and writes chunks into
 * R's buffer with process_vm_writev until none are left. Either side takes
 * a chunk with a compare-and-swap that names the generation and counts it
 * done after copying it; the get completes in R when every chunk is done.
 * So:
 *  - nothing waits for S: a rank that computes without MPI calls, one that
 *    is descheduled or never saw the request: R takes every chunk S did
 *    not and copies it itself. R waits only for chunks S took, which S
 *    copies before it looks at anything else;
 *  - S never writes after the get completed: every chunk taken is done
 *    before the count is full, and a request S reads late names a
 *    generation the slot no longer has, so its first claim fails;
 *  - a chunk S could not write (the kernel refused) is marked failed and
 *    copied again by R; if R cannot either, the whole get goes through
 *    shardx's datagrams, as any refused single copy does;
 *  - S tells R when it finished the last chunk (SHARDX_TAG_SPLIT_DONE),
 *    so that an R waiting for datagrams (an idle wait) wakes up;
 *  - both copy outside shardx's receive callbacks (after sx_progress
 *    returns), so no shard waits behind a long copy.
 * UCX's cma transport and Open MPI's vader copy on one side only; this is
 * the two-sided pipeline of tcp, without its second copy.
 *
 * Trust. S copies the range R names from its own memory without finding
 * it in its registrations: the request comes from a rank of this job on
 * this host (shardx checked the sender), which the kernel already lets
 * read all of S's memory itself; the single copy relies on exactly that,
 * and S allowed it where Yama asks (mca_btl_shardx_cma_allow_peers). A
 * request that fails a check (its sizes, its board, its cookie) is dropped
 * with a line at verbosity 5: R then copies every chunk itself.
 *
 * Concurrency. Any thread may start a get or run progress: slots and help
 * entries change hands by compare-and-swap, chunks by the claim word, and
 * a get completes in the one thread that moves its slot out of ACTIVE.
 */
#include "btl_shardx.h"

#include "opal/mca/hwloc/base/base.h"
#include "opal/util/output.h"
#include "opal/util/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#define SPLIT_SLOTS      63
#define SPLIT_HELPS      64 /* a getter has at most 63 shared gets at once */
#define SPLIT_MAX_CHUNKS 64u
#define SPLIT_MIN_CHUNK  (64u * 1024u)
#define SPLIT_MAGIC      0x73686172645f7370ull /* "shard_sp" */

/* One shared get, in the board. 64 bytes: slots do not share lines. */
struct split_slot {
    _Atomic uint64_t claim;  /* generation << 32 | next chunk to take */
    _Atomic uint64_t failed; /* chunks the owner could not write, a bit each */
    _Atomic uint32_t done;   /* chunks copied or failed, by either side */
    uint32_t pad[11];
};

/* R's board: one page, shared with the owners of its gets. */
struct mca_btl_shardx_board {
    uint64_t magic;
    uint64_t cookie; /* random: a request must know it */
    uint32_t pid;
    uint32_t nslots;
    uint8_t pad[40];
    struct split_slot slot[SPLIT_SLOTS];
};
_Static_assert(sizeof(struct split_slot) == 64, "a slot is a cache line");
_Static_assert(sizeof(struct mca_btl_shardx_board) == 4096, "the board is a page");

/* A get's slot: FREE; ACTIVE (waiting for chunks or a thread); WORKING (one
 * thread copies our chunks or finishes it, so the op cannot go away under
 * it); DEAD (its owner died holding chunks: never reused). */
enum { SLOT_FREE, SLOT_ACTIVE, SLOT_WORKING, SLOT_DEAD };
enum { HELP_FREE, HELP_FILLING, HELP_QUEUED, HELP_RUNNING };

struct split_help {
    _Atomic int state;
    uint64_t peer_id; /* the asking rank's slot (mca_btl_shardx_slot_t *) */
    struct mca_btl_shardx_split_ask ask;
};

struct mca_btl_shardx_split {
    struct mca_btl_shardx_board *board; /* ours */
    int fd;
    /* Our gets: slot i of the board is gets[i]'s. */
    struct {
        _Atomic int state;
        mca_btl_shardx_rdma_op_t *_Atomic op;
    } gets[SPLIT_SLOTS];
    struct split_help helps[SPLIT_HELPS];
    _Atomic unsigned busy; /* active gets plus queued helps: progress has work */
};

static _Atomic int split_making; /* one thread makes the board */

static void split_note(const char *what, int err, const char *then)
{
    opal_output_verbose(5, mca_btl_shardx_component.output, "btl shardx: shared gets: %s (%s): %s",
                        what, strerror(err), then);
}

#define SPLIT_ALONE   "this rank's gets are copied by this rank alone"
#define SPLIT_NO_HELP "the peer copies that get alone"

/* A peer's request that failed a check: said at verbosity 5 and counted
 * (cma_help_refused), and the peer copies that get alone. */
static void help_refused(mca_btl_shardx_module_t *m, const char *what, int err)
{
    split_note(what, err, SPLIT_NO_HELP);
    SHARDX_COUNT(m, n_cma_help_refused);
}

/* Our board and its state, made by the first shared get; NULL while
 * another thread makes it or when it could not be made. */
static struct mca_btl_shardx_split *split_state(mca_btl_shardx_module_t *m)
{
    struct mca_btl_shardx_split *sp = atomic_load_explicit(&m->split, memory_order_acquire);
    int zero = 0;

    if (sp != NULL || !atomic_compare_exchange_strong(&split_making, &zero, 1))
        return sp;
    sp = calloc(1, sizeof(*sp));
    int fd = sp != NULL ? memfd_create("shardx-split-board", MFD_CLOEXEC) : -1;
    void *page = MAP_FAILED;
    uint64_t cookie = 0;
    if (fd < 0 || ftruncate(fd, sizeof(struct mca_btl_shardx_board)) != 0 ||
        (page = mmap(NULL, sizeof(struct mca_btl_shardx_board), PROT_READ | PROT_WRITE, MAP_SHARED,
                     fd, 0)) == MAP_FAILED ||
        getrandom(&cookie, sizeof(cookie), 0) != sizeof(cookie)) {
        split_note("cannot make the board", errno, SPLIT_ALONE);
        if (page != MAP_FAILED)
            munmap(page, sizeof(struct mca_btl_shardx_board));
        if (fd >= 0)
            close(fd);
        free(sp);
        return NULL; /* split_making stays 1: no second try */
    }
    sp->fd = fd;
    sp->board = page;
    sp->board->cookie = cookie;
    sp->board->pid = mca_btl_shardx_component.cma_pid;
    sp->board->nslots = SPLIT_SLOTS;
    sp->board->magic = SPLIT_MAGIC;
    atomic_store_explicit(&m->split, sp, memory_order_release);
    return sp;
}

/* Moves @p state from @p from to @p to; false if it was not @p from (a
 * plain load first, so a busy entry costs no exclusive cache line). */
static bool take(_Atomic int *state, int from, int to)
{
    return atomic_load_explicit(state, memory_order_relaxed) == from &&
           atomic_compare_exchange_strong(state, &from, to);
}

/* Takes the next chunk of generation @p gen, if any. */
static bool split_claim(struct split_slot *s, uint32_t gen, uint32_t nchunks, uint32_t *k)
{
    uint64_t w = atomic_load_explicit(&s->claim, memory_order_acquire);

    for (;;) {
        if ((uint32_t)(w >> 32) != gen || (uint32_t)w >= nchunks)
            return false;
        if (atomic_compare_exchange_weak_explicit(&s->claim, &w, w + 1, memory_order_acq_rel,
                                                  memory_order_acquire)) {
            *k = (uint32_t)w;
            return true;
        }
    }
}

/* Sends a small control message with sx_send, not sx_sendi: a second
 * sx_sendi between two progress calls is held back (SX_SENDI_HOLD_US) to
 * share a datagram, and a held request reached the owner only after the
 * getter had copied every chunk itself (4 MiB ping-pong 415-452 us
 * against 257-279). sx_send goes out when the shard is free, flushing
 * what was held; inside a receive callback, when the pass ends. */
static void split_send_free(void *ctx, int status)
{
    (void)status;
    free(ctx);
}

static int split_send(sx_peer_h peer, uint8_t tag, const void *msg, size_t len)
{
    void *copy = malloc(len);
    if (copy == NULL)
        return SX_ERR_NO_MEMORY;
    memcpy(copy, msg, len);
    struct iovec iov = {.iov_base = copy, .iov_len = len};
    int rc = sx_send(peer, tag, &iov, 1, split_send_free, copy);
    if (rc != SX_INPROGRESS)
        free(copy);
    return rc == SX_INPROGRESS ? SX_OK : rc;
}

static int get_progress(mca_btl_shardx_module_t *m, struct mca_btl_shardx_split *sp, unsigned i,
                        bool wait);

/*
 * Sharing a get pays only where the two ranks run at once. On a host with
 * more ranks of the job than CPUs they take turns: the owner's half waits
 * for the owner to be scheduled, and an owner descheduled while it holds
 * a chunk keeps the getter waiting for up to a time slice. Four ranks on
 * two cores (mpi_bench coll, 1 MiB, unbound as mpirun leaves an
 * oversubscribed job; 10 alternated rounds) took 1,710 us an allreduce
 * sharing gets against 1,448 copying alone (tcp: 1,337), alltoall 2,224
 * against 1,301, bcast 570 against 440. Counted once, at start-up: Open
 * MPI knows how many ranks share the node
 * (opal_process_info.num_local_peers), and the topology it loaded
 * (opal_hwloc_topology) which CPUs the job may use: hwloc's allowed set
 * is what a cgroup cpuset leaves it (Slurm's task/cgroup, a container
 * started with a cpuset), which sysconf's count of online CPUs does not
 * see. A rank's own affinity mask is not counted: mpirun binds each rank
 * to a share of the job's CPUs, so one rank's mask says nothing of how
 * many the job has. Nor is a cgroup's CPU quota (cpu.max, a container's
 * --cpus), which hwloc does not read: there gets are still shared. Only
 * while btl_shardx_cma_split is left at its default: a value set by the
 * user shares gets anyway (the tests of this path do so, whatever the
 * machine's CPU count).
 */
static long split_job_cpus(const char **which_p)
{
    /* Open MPI's start-up loaded it (or adopted mpirun's); this loads it
     * where a launch did not. The pointer is read only after a load that
     * succeeded: one that fails may leave it set to a topology half loaded
     * or already destroyed (opal_hwloc_base_get_topology, Open MPI 4.1). */
    bool have = opal_hwloc_topology != NULL || opal_hwloc_base_get_topology() == OPAL_SUCCESS;
    if (have && opal_hwloc_topology != NULL) {
        hwloc_const_cpuset_t allowed = hwloc_topology_get_allowed_cpuset(opal_hwloc_topology);
        int n = allowed != NULL ? hwloc_bitmap_weight(allowed) : -1;
        if (n > 0) {
            *which_p = "allowed (hwloc)";
            return n;
        }
    }
    *which_p = "online (no hwloc topology)";
    return sysconf(_SC_NPROCESSORS_ONLN);
}

bool mca_btl_shardx_split_fits(int output)
{
    const char *which;
    long cpus = split_job_cpus(&which);
    long ranks = (long)opal_process_info.num_local_peers + 1;

    if (cpus <= 0) {
        opal_output_verbose(10, output,
                            "btl shardx: %ld ranks on this host, CPU count unknown: gets of "
                            "btl_shardx_cma_split bytes and more may be shared",
                            ranks);
        return true;
    }
    if (ranks <= cpus) {
        opal_output_verbose(10, output,
                            "btl shardx: %ld ranks on this host, %ld CPUs %s: gets of "
                            "btl_shardx_cma_split bytes and more may be shared",
                            ranks, cpus, which);
        return true;
    }
    opal_output_verbose(5, output,
                        "btl shardx: %ld ranks on this host, %ld CPUs %s: gets between them "
                        "are copied by the getter alone (no btl_shardx_cma_split)",
                        ranks, cpus, which);
    return false;
}

int mca_btl_shardx_split_get(mca_btl_shardx_module_t *m, sx_peer_h peer,
                             mca_btl_shardx_rdma_op_t *op,
                             const mca_btl_base_registration_handle_t *remote_handle)
{
    mca_btl_shardx_component_t *c = &mca_btl_shardx_component;

    if (c->cma_split == 0 || !c->split_fits || op->size < c->cma_split ||
        op->size < 2 * SPLIT_MIN_CHUNK)
        return OPAL_ERR_NOT_AVAILABLE;
    uint32_t pid =
        mca_btl_shardx_cma_owner(op->endpoint, remote_handle, op->remote_address, op->size, false);
    struct mca_btl_shardx_split *sp = pid != 0 ? split_state(m) : NULL;
    if (sp == NULL)
        return OPAL_ERR_NOT_AVAILABLE;
    unsigned i;
    for (i = 0; i < SPLIT_SLOTS; i++)
        if (take(&sp->gets[i].state, SLOT_FREE, SLOT_WORKING))
            break; /* ours; ACTIVE once filled in */
    if (i == SPLIT_SLOTS)
        return OPAL_ERR_NOT_AVAILABLE; /* 63 shared gets at once: copy this one alone */

    /* Chunks of 64 KiB, or larger so that there are at most 64, whole pages. */
    size_t chunk = (op->size + SPLIT_MAX_CHUNKS - 1) / SPLIT_MAX_CHUNKS;
    chunk = (chunk + 4095) & ~(size_t)4095;
    if (chunk < SPLIT_MIN_CHUNK)
        chunk = SPLIT_MIN_CHUNK;
    struct split_slot *s = &sp->board->slot[i];
    op->chunk = chunk;
    op->nchunks = (uint32_t)((op->size + chunk - 1) / chunk);
    op->gen = (uint32_t)(atomic_load_explicit(&s->claim, memory_order_relaxed) >> 32) + 1;
    op->pid = pid;
    /* The request is made before the get is published: once it is
     * ACTIVE another thread may finish it and reuse the op. */
    struct mca_btl_shardx_split_ask ask = {
        .version = SHARDX_SPLIT_VERSION,
        .pid = c->cma_pid,
        .fd = sp->fd,
        .slot = i,
        .cookie = sp->board->cookie,
        .gen = op->gen,
        .nchunks = op->nchunks,
        .chunk = chunk,
        .size = op->size,
        .dst = (uint64_t)(uintptr_t)op->local_address,
        .src = op->remote_address,
    };
    atomic_store_explicit(&s->done, 0, memory_order_relaxed);
    atomic_store_explicit(&s->failed, 0, memory_order_relaxed);
    atomic_store_explicit(&s->claim, (uint64_t)op->gen << 32, memory_order_release);
    atomic_store_explicit(&sp->gets[i].op, op, memory_order_relaxed);
    atomic_fetch_add_explicit(&sp->busy, 1, memory_order_relaxed);
    atomic_store_explicit(&sp->gets[i].state, SLOT_ACTIVE, memory_order_release);

    int rc = split_send(peer, SHARDX_TAG_SPLIT_ASK, &ask, sizeof(ask));
    if (rc != SX_OK)
        opal_output_verbose(5, c->output,
                            "btl shardx: shared get: cannot ask for help (%s): this get copies "
                            "alone",
                            sx_strerror(rc));
    SHARDX_COUNT(m, n_cma_split);
    /* Outside shardx's callbacks the request has left: copy our share
     * now, as the single copy did. Called by the application (an
     * MPI_Irecv that matched a message already here), also wait for the
     * chunks the owner holds, so that a caller who computes next does not
     * hold the owner's FIN back; from our own progress (ob1's next get,
     * started by the last one's completion) the thread goes back to
     * progress, which finishes it: waiting there cost four ranks on two
     * cores ~10 % of a 1 MiB allreduce. Inside a callback the request
     * leaves only when the pass ends: progress copies then. */
    if (mca_btl_shardx_in_callback == 0 && take(&sp->gets[i].state, SLOT_ACTIVE, SLOT_WORKING))
        (void)get_progress(m, sp, i, mca_btl_shardx_in_progress == 0);
    return OPAL_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* The getter: its chunks, and the end of its gets                      */
/* ------------------------------------------------------------------ */

/* Where chunk @p k of a get of @p size bytes in chunks of @p chunk lies. */
static void chunk_span(uint64_t size, uint64_t chunk, uint32_t k, uint64_t *off, uint64_t *len)
{
    *off = (uint64_t)k * chunk;
    *len = size - *off < chunk ? size - *off : chunk;
}

/* Copies chunk @p k of @p op from its owner; false if the kernel refused. */
static bool get_chunk(const mca_btl_shardx_rdma_op_t *op, uint32_t k)
{
    uint64_t off, len;
    chunk_span(op->size, op->chunk, k, &off, &len);
    return mca_btl_shardx_cma_move(op->pid, (char *)op->local_address + off,
                                   op->remote_address + off, len, false) == OPAL_SUCCESS;
}

/* Every chunk is done (and the slot WORKING): copy again what failed,
 * free the slot, call ob1 back (or hand the get to shardx's datagrams). */
static void get_finish(mca_btl_shardx_module_t *m, struct mca_btl_shardx_split *sp, unsigned i)
{
    struct split_slot *s = &sp->board->slot[i];
    mca_btl_shardx_rdma_op_t *op = atomic_load_explicit(&sp->gets[i].op, memory_order_acquire);
    uint64_t failed = atomic_load_explicit(&s->failed, memory_order_acquire);
    bool ok = true;

    for (uint32_t k = 0; ok && k < op->nchunks; k++)
        if (failed & (1ull << k))
            ok = get_chunk(op, k);
    /* Closed: a request read late names this generation and finds nothing. */
    atomic_store_explicit(&s->claim, (uint64_t)op->gen << 32 | UINT32_MAX, memory_order_release);
    atomic_store_explicit(&sp->gets[i].op, NULL, memory_order_relaxed);
    atomic_store_explicit(&sp->gets[i].state, SLOT_FREE, memory_order_release);
    atomic_fetch_sub_explicit(&sp->busy, 1, memory_order_release);
    if (ok) {
        SHARDX_COUNT(m, n_cma_get);
        mca_btl_shardx_rdma_complete(op, SX_OK);
        return;
    }
    SHARDX_COUNT(m, n_cma_fallback);
    mca_btl_base_endpoint_t *ep = op->endpoint;
    sx_peer_h peer = atomic_load_explicit(&ep->removed, memory_order_acquire) ? NULL : ep->peer;
    int rc = peer == NULL ? SX_ERR_NOT_FOUND
                          : sx_get(peer, op->local_address, op->size, op->remote_address, op->rkey,
                                   mca_btl_shardx_rdma_done, op);
    if (rc != SX_INPROGRESS)
        mca_btl_shardx_rdma_complete(op, rc);
}

/* Our share of get @p i, and its end if every chunk is done; the caller
 * moved it to WORKING. With @p wait, also waits for the chunks the owner
 * holds: it took them one at a time and copies each without a pause
 * (64 KiB in ~5 us), so this ends unless the owner is descheduled, for
 * which it yields the core (four ranks on two cores), or dies, which the
 * BTL's report of the rank ends. */
static int get_progress(mca_btl_shardx_module_t *m, struct mca_btl_shardx_split *sp, unsigned i,
                        bool wait)
{
    struct split_slot *s = &sp->board->slot[i];
    mca_btl_shardx_rdma_op_t *op = atomic_load_explicit(&sp->gets[i].op, memory_order_acquire);
    int did = 0;
    uint32_t k;

    while (split_claim(s, op->gen, op->nchunks, &k)) {
        if (!get_chunk(op, k))
            atomic_fetch_or_explicit(&s->failed, 1ull << k, memory_order_relaxed);
        atomic_fetch_add_explicit(&s->done, 1, memory_order_acq_rel);
        did++;
    }
    for (unsigned spins = 0;
         wait && atomic_load_explicit(&s->done, memory_order_acquire) < op->nchunks &&
         !atomic_load_explicit(&op->endpoint->reported, memory_order_acquire);
         spins++) {
        if (spins >= 1000)
            sched_yield();
    }
    if (atomic_load_explicit(&s->done, memory_order_acquire) == op->nchunks) {
        get_finish(m, sp, i);
        return did + 1;
    }
    /* The owner holds chunks. Only its death ends the wait without them,
     * and then the job ends: the BTL has reported the rank to ob1. */
    if (atomic_load_explicit(&op->endpoint->reported, memory_order_acquire)) {
        atomic_store_explicit(&sp->gets[i].op, NULL, memory_order_relaxed);
        atomic_store_explicit(&sp->gets[i].state, SLOT_DEAD, memory_order_release);
        atomic_fetch_sub_explicit(&sp->busy, 1, memory_order_release);
        mca_btl_shardx_rdma_complete(op, SX_ERR_PEER_UNREACHABLE);
        return did + 1;
    }
    atomic_store_explicit(&sp->gets[i].state, SLOT_ACTIVE, memory_order_release);
    return did;
}

/* ------------------------------------------------------------------ */
/* The owner: helping a peer's get                                      */
/* ------------------------------------------------------------------ */

void mca_btl_shardx_split_asked(mca_btl_shardx_module_t *m, uint64_t peer_id, const void *data,
                                size_t len)
{
    mca_btl_shardx_component_t *c = &mca_btl_shardx_component;
    struct mca_btl_shardx_split_ask ask;

    if (len != sizeof(ask)) {
        help_refused(m, "a request of the wrong length", EMSGSIZE);
        return;
    }
    memcpy(&ask, data, sizeof(ask));
    if (c->cma_host == 0 || atomic_load_explicit(&c->cma_refused, memory_order_relaxed))
        return; /* we cannot copy: the getter does it all */
    /* Our own state holds the queue; a rank that never got anything
     * large makes its board here. */
    struct mca_btl_shardx_split *sp = split_state(m);
    if (sp == NULL)
        return;
    for (unsigned i = 0; i < SPLIT_HELPS; i++) {
        struct split_help *h = &sp->helps[i];
        if (!take(&h->state, HELP_FREE, HELP_FILLING))
            continue;
        h->peer_id = peer_id;
        h->ask = ask;
        /* Counted before it can be taken (and the count dropped). */
        atomic_fetch_add_explicit(&sp->busy, 1, memory_order_relaxed);
        atomic_store_explicit(&h->state, HELP_QUEUED, memory_order_release);
        return;
    }
    /* SPLIT_HELPS requests waiting (several peers' gets at once): the
     * getter copies this one alone. */
    SHARDX_COUNT(m, n_cma_help_busy);
}

/* The board of the rank @p slot names, mapped at its first request. */
static struct mca_btl_shardx_board *peer_board(mca_btl_shardx_module_t *m,
                                               mca_btl_shardx_slot_t *slot,
                                               const struct mca_btl_shardx_split_ask *a)
{
    struct mca_btl_shardx_board *b = atomic_load_explicit(&slot->board, memory_order_acquire);
    char path[64];
    struct stat st;

    if (b == NULL) {
        /* Looked at before it is opened: a request names any file of
         * any process, and opening some (a device, a FIFO) does more than
         * open them. A board is a regular file of one page. */
        snprintf(path, sizeof(path), "/proc/%u/fd/%d", (unsigned)a->pid, (int)a->fd);
        int err = stat(path, &st) != 0 ? errno : 0;
        if (err == 0 && (!S_ISREG(st.st_mode) || st.st_size != (off_t)sizeof(*b)))
            err = EINVAL;
        if (err != 0) {
            help_refused(m, "a peer's board is not one", err);
            return NULL;
        }
        int fd = open(path, O_RDWR | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        if (fd < 0) {
            help_refused(m, "cannot open a peer's board", errno);
            return NULL;
        }
        void *page = MAP_FAILED;
        errno = 0;
        if (fstat(fd, &st) == 0 && st.st_size == (off_t)sizeof(*b))
            page = mmap(NULL, sizeof(*b), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        err = errno;
        close(fd);
        if (page == MAP_FAILED) {
            help_refused(m, "a peer's board is not one", err == 0 ? EINVAL : err);
            return NULL;
        }
        b = page;
        if (b->magic != SPLIT_MAGIC || b->pid != a->pid || b->nslots != SPLIT_SLOTS) {
            munmap(page, sizeof(*b));
            help_refused(m, "a peer's board is not one", EINVAL);
            return NULL;
        }
        struct mca_btl_shardx_board *none = NULL;
        if (!atomic_compare_exchange_strong(&slot->board, &none, b)) {
            munmap(page, sizeof(*b));
            b = none;
        }
    }
    if (b->pid != a->pid || b->cookie != a->cookie) {
        help_refused(m, "a request does not match its sender's board", EINVAL);
        return NULL;
    }
    return b;
}

static void help_run(mca_btl_shardx_module_t *m, const struct split_help *h)
{
    const struct mca_btl_shardx_split_ask *a = &h->ask;
    mca_btl_shardx_slot_t *slot = (mca_btl_shardx_slot_t *)(uintptr_t)h->peer_id;

    /* Sizes that describe chunks of one get; the ranges cannot wrap. */
    if (a->version != SHARDX_SPLIT_VERSION || a->slot >= SPLIT_SLOTS || a->nchunks < 2 ||
        a->nchunks > SPLIT_MAX_CHUNKS || a->chunk == 0 || a->size > UINT64_MAX / SPLIT_MAX_CHUNKS ||
        a->chunk > a->size || a->chunk * (a->nchunks - 1) >= a->size ||
        a->chunk * a->nchunks < a->size || a->dst > UINT64_MAX - a->size ||
        a->src > UINT64_MAX - a->size) {
        help_refused(m, "a request with sizes that do not fit", EINVAL);
        return;
    }
    struct mca_btl_shardx_board *b = peer_board(m, slot, a);
    if (b == NULL)
        return;
    struct split_slot *s = &b->slot[a->slot];
    bool last = false;
    /* The getter asks after the data was registered and announced (ob1's
     * RGET), over the network. */
    SHARDX_TSAN_ACQUIRE(&mca_btl_shardx_tsan_registered);
    uint32_t k;
    while (split_claim(s, a->gen, a->nchunks, &k)) {
        uint64_t off, len;
        chunk_span(a->size, a->chunk, k, &off, &len);
        bool ok = mca_btl_shardx_cma_move(a->pid, (void *)(uintptr_t)(a->src + off), a->dst + off,
                                          len, true) == OPAL_SUCCESS;
        if (ok) {
            SHARDX_COUNT(m, n_cma_helped);
        } else {
            atomic_fetch_or_explicit(&s->failed, 1ull << k, memory_order_relaxed);
            SHARDX_COUNT(m, n_cma_help_failed);
        }
        if (atomic_fetch_add_explicit(&s->done, 1, memory_order_acq_rel) + 1 == a->nchunks)
            last = true;
        if (!ok)
            break; /* the getter copies the rest */
    }
    /* We finished the get: its rank may be asleep waiting for a datagram. */
    sx_peer_h peer = slot->peer;
    if (last && peer != NULL) {
        uint32_t which[2] = {a->slot, a->gen};
        (void)split_send(peer, SHARDX_TAG_SPLIT_DONE, which, sizeof(which));
    }
}

int mca_btl_shardx_split_progress(mca_btl_shardx_module_t *m)
{
    struct mca_btl_shardx_split *sp = atomic_load_explicit(&m->split, memory_order_acquire);
    int did = 0;

    if (sp == NULL || atomic_load_explicit(&sp->busy, memory_order_acquire) == 0)
        return 0;
    /* Help first: the getter is copying meanwhile, and waits for us. */
    for (unsigned i = 0; i < SPLIT_HELPS; i++) {
        struct split_help *h = &sp->helps[i];
        if (!take(&h->state, HELP_QUEUED, HELP_RUNNING))
            continue;
        help_run(m, h);
        atomic_store_explicit(&h->state, HELP_FREE, memory_order_release);
        atomic_fetch_sub_explicit(&sp->busy, 1, memory_order_release);
        did++;
    }
    for (unsigned i = 0; i < SPLIT_SLOTS; i++)
        if (take(&sp->gets[i].state, SLOT_ACTIVE, SLOT_WORKING))
            did += get_progress(m, sp, i, false);
    return did;
}

void mca_btl_shardx_split_slot_fini(mca_btl_shardx_slot_t *slot)
{
    struct mca_btl_shardx_board *b = atomic_exchange(&slot->board, NULL);
    if (b != NULL)
        munmap(b, sizeof(*b));
}

void mca_btl_shardx_split_fini(mca_btl_shardx_module_t *m)
{
    struct mca_btl_shardx_split *sp = atomic_exchange(&m->split, NULL);
    if (sp == NULL)
        return;
    munmap(sp->board, sizeof(*sp->board));
    close(sp->fd);
    free(sp);
    atomic_store(&split_making, 0);
}
