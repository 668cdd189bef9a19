/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Yielding when threads outnumber cores (SX_YIELD; DESIGN.md section 3,
 * "Oversubscription").
 *
 * A thread that calls sx_progress and keeps finding nothing spins: on a
 * machine with a core per spinning thread that is the fastest way to see
 * the next datagram. When threads outnumber cores, the spinner holds a
 * core that a runnable thread needs (the peer's receiver, the token
 * holder it waits for, the application's own work), and the work it waits
 * for waits out its time slice. So after SX_YIELD_SPINS empty calls in a
 * row a caller gives its core up on every further empty call, when
 * SX_YIELD says so: it waits on its home shard's sockets for at most
 * SX_YIELD_WAIT_NS (a datagram wakes it at once). It waits rather than
 * calling sched_yield because the threads it competes with may be
 * unrelated CPU-bound processes: sched_yield hands such a process the core
 * for the rest of its slice (milliseconds: 3.3 ms per 8-byte MPI message,
 * against tcp's 4-9 us, with two busy loops beside a 2-rank job on 2
 * cores), while a thread that sleeps and is woken by its datagram
 * preempts it (the scheduler credits sleepers). SX_YIELD decides when:
 *
 *   never   spin, as before;
 *   always  yield after the bounded spin, oversubscribed or not;
 *   auto    (default) yield only while the process or machine is found
 *           oversubscribed: the launcher said so (OMPI_MCA_mpi_yield_when_idle,
 *           which mpirun sets when it places more ranks than slots), more
 *           threads call in than the engine's cpuset has CPUs, or more tasks
 *           are runnable than the machine has online CPUs (/proc/loadavg)
 *           and have been waiting for one (/proc/pressure/cpu, below).
 *
 * The anchors: Open MPI's mpi_yield_when_idle, UPC++'s UPCXX_OVERSUBSCRIBED
 * (yield after N empty polls) and LLVM OpenMP's KMP_USE_YIELD=2 (yield only
 * when oversubscription is detected). A caller whose home shard's token is
 * held by another thread yields at once while oversubscribed: the holder
 * may be descheduled on this very core.
 *
 * The verdict is re-made at most every SX_YIELD_CHECK_NS, by one spinning
 * thread (a compare-and-swap on the check time): a pread of /proc/loadavg
 * and of /proc/pressure/cpu and a count of recent callers, a few
 * microseconds spent by a thread that had nothing to do. A caller that
 * finds work pays one thread-local store; non-oversubscribed callers in
 * auto mode one relaxed load per empty call past the spin.
 *
 * Why the pressure too. /proc/loadavg's runnable count is a snapshot, and
 * a machine whose every core spins counts any task that wakes for a moment
 * (a kernel thread, a monitoring agent) as one too many: two ranks of
 * sx_bench latency on two cores found "oversubscribed" in 7 checks a run
 * (about 3 % of snapshots showed a third runnable task), each a verdict for
 * SX_YIELD_CHECK_NS, and waited 430-840 times, which made the ping-pong's
 * p99 11-30 us against 3.8 with SX_YIELD=never (docs/tuning.md,
 * "Oversubscription"). Pressure stall information (Linux 4.20,
 * Documentation/accounting/psi.rst) counts the time that some runnable
 * task actually waited for a CPU; its "some" total over 10 ms windows was
 * under 1 % of the time for most of those runs and 64-100 % beside one or
 * two busy loops. So a snapshot that shows too many tasks counts
 * only while they have waited SX_YIELD_PRESSURE_PERMILLE of the interval;
 * without the file (CONFIG_PSI off, psi=0) the snapshot decides alone, as
 * before.
 */
#ifndef SX_ENGINE_YIELD_H
#define SX_ENGINE_YIELD_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* Word indices of SX_YIELD (config.h). */
enum { SX_YIELD_AUTO = 0, SX_YIELD_ALWAYS = 1, SX_YIELD_NEVER = 2 };

/* Empty sx_progress calls in a row before a caller may yield, while the
 * machine is oversubscribed (about 10-25 us of polling on a VM). Fewer
 * leave the core to a peer sooner, more catch an answer that is on its
 * way: two ranks of two threads on two cores (sx_bench mt) did better
 * with 4 or 16 than with 32, an MPI ping-pong of two threads per rank
 * beside two busy loops better with 16 or 32 than with 4 or 8
 * (docs/tuning.md, "Oversubscription: SX_YIELD"). */
#define SX_YIELD_SPINS 16u
/* How often the auto verdict is re-made. */
#define SX_YIELD_CHECK_NS (10ull * 1000000ull)
/* A caller counts as calling in if it spun within this long. */
#define SX_YIELD_CALLER_NS (20ull * 1000000ull)
/* Caller slots (a thread's slot is its arrival order modulo this). */
#define SX_YIELD_CALLERS 64u
/* The share of the interval since the last check, in thousandths, that
 * some task must have waited for a CPU for the runnable count to count. */
#define SX_YIELD_PRESSURE_PERMILLE 100u

typedef struct sx_yield {
    int mode;        /* SX_YIELD_AUTO / ALWAYS / NEVER */
    unsigned cpus;   /* CPUs in the creating thread's cpuset */
    unsigned online; /* online CPUs of the machine */
    bool hint;       /* the launcher said the node is oversubscribed */
    /* The engine has one shard: a caller's pass sees every datagram
     * ("Bound or single-shard callers" below). Set once by the engine
     * before any caller, read only after. */
    bool one_shard;
    /* This job's processes on this node, as the launcher said
     * (OMPI_COMM_WORLD_LOCAL_SIZE, SX_RUN_LOCAL_SIZE, MPI_LOCALNRANKS);
     * 0: not said. */
    unsigned local_tasks;
    /* sx_engine_caller_yields: the caller gives its core up whenever
     * sx_progress returns 0 (Open MPI's opal_progress under
     * mpi_yield_when_idle). Any thread writes it, any reads it. */
    atomic_bool caller_yields;
    int loadavg_fd;  /* /proc/loadavg, or -1 */
    int pressure_fd; /* /proc/pressure/cpu, or -1 */
    /* Its "some" total (us) at the last check, and when (ns); written by
     * the thread that makes a check. */
    atomic_uint_fast64_t stall_us, stall_ns;
    atomic_bool over;
    /* Verdicts in a row that saw SX_YIELD_FOREIGN or more runnable tasks
     * beyond local_tasks ("Bound or single-shard callers"). */
    atomic_uint foreign;
    atomic_uint_fast64_t checked_ns;
    atomic_uint_fast64_t seen_ns[SX_YIELD_CALLERS]; /* a caller slot's last spin */
    /* Multi-writer counters (any caller), read by sx_stats_get. */
    atomic_uint_fast64_t yields;
    atomic_uint_fast64_t over_checks; /* verdicts that found oversubscription */
    atomic_uint_fast64_t wakeups;     /* waits a datagram ended */
} sx_yield_t;

/** Reads the launcher's hint and the machine's shape. @p cpus is the
 *  number of CPUs the engine may run on. */
void sx_yield_init(sx_yield_t *y, int mode, unsigned cpus);
/** The same, reading the machine's load from @p loadavg and @p pressure
 *  instead of /proc/loadavg and /proc/pressure/cpu (tests; NULL or a
 *  path that cannot be opened: not available). */
void sx_yield_init_at(sx_yield_t *y, int mode, unsigned cpus, const char *loadavg,
                      const char *pressure);
void sx_yield_fini(sx_yield_t *y);

/**
 * Makes the auto verdict now, at @p now_ns (sx_time_ns), and stores it:
 * true while more callers spin than the cpuset has CPUs, or more tasks
 * are runnable than online CPUs and have waited for a CPU for at least
 * SX_YIELD_PRESSURE_PERMILLE of the time since the last verdict. The
 * launcher's hint is not part of it. One thread at a time (sx_yield_after
 * elects it); tests call it directly.
 */
bool sx_yield_verdict(sx_yield_t *y, uint64_t now_ns);

/* What a caller that found nothing does now (sx_yield_after). */
typedef enum sx_yield_action {
    SX_YIELD_SPIN = 0,     /* call again at once */
    SX_YIELD_WAIT = 1,     /* wait on the home shard's fds, at most SX_YIELD_WAIT_NS */
    SX_YIELD_SCHED = 2,    /* sched_yield: another thread holds the home shard */
    SX_YIELD_WAIT_ANY = 3, /* wait on every shard's fds, at most SX_YIELD_WAIT_NS:
                              the caller yields when idle (caller_yields) */
} sx_yield_action_t;

/* The longest wait of an idle caller while oversubscribed: a datagram
 * ends it at once; timers (delayed ACKs, retransmissions) of a shard
 * whose callers all wait fire up to this late. */
#define SX_YIELD_WAIT_NS (500ull * 1000ull)

/* Bound or single-shard callers (below): runnable tasks beyond the job's
 * own on this node, in SX_YIELD_FOREIGN_VERDICTS verdicts in a row, that
 * send them back to waiting. */
#define SX_YIELD_FOREIGN          2u
#define SX_YIELD_FOREIGN_VERDICTS 2u

/* Bound or single-shard callers (below): a runtime yield that keeps the
 * caller off its CPU longer than this, twice in a row, was taken by a task
 * that does not yield back; the caller then waits for datagrams for
 * SX_YIELD_SLOW_WAIT_MIN_NS, doubling up to SX_YIELD_SLOW_WAIT_MAX_NS
 * while it happens again. A busy loop's turn after a yield lasted a
 * scheduler slice (milliseconds) on the kernels this was made on; a
 * cooperating rank's, the work it found (an MPI reduction over 1 MiB,
 * about 0.1 ms here). */
#define SX_YIELD_SLOW_NS          (1000ull * 1000ull)
#define SX_YIELD_SLOW_WAIT_MIN_NS (100ull * 1000ull * 1000ull)
#define SX_YIELD_SLOW_WAIT_MAX_NS (1000ull * 1000ull * 1000ull)

/*
 * A caller that gives its core up whenever sx_progress returns 0 (it said
 * so with sx_engine_caller_yields; Open MPI's opal_progress under
 * mpi_yield_when_idle, which mpirun sets when it places more ranks than
 * slots: with Open MPI 4.1 the ranks of `mpirun -np 4 --oversubscribe` on
 * 2 cores yield without OMPI_MCA_mpi_yield_when_idle in their
 * environment, so the hint above misses it) gets SX_YIELD_WAIT_ANY from
 * its first empty call, with no spin before it, while the machine shows
 * more callers than CPUs or more runnable tasks than online CPUs (auto),
 * or always (always). When another task wants the core, the runtime's
 * sched_yield hands it over for the rest of that task's slice at every
 * empty call, while a sleeper that a datagram wakes preempts it and,
 * since sx_progress then handles what woke it, returns work, so the
 * runtime does not yield. When nothing else wants the core the runtime's
 * yield costs nothing and a wait only adds a wake-up to every message:
 * the launcher's hint alone (two ranks told to yield on two namespace
 * hosts that share two cores) does not make such a caller wait. It waits
 * on every shard, not its home one: such a runtime parks its other
 * threads (Open MPI 4.1's request wait lets one thread progress for all),
 * so nobody else watches their shards. Measured: docs/tuning.md, "Open
 * MPI BTL: callers that yield when idle".
 *
 * Bound or single-shard callers. Such a caller whose thread may run on one
 * CPU only (looked up once per thread: sched_getaffinity), or whose engine
 * has one shard in a job whose launcher said how many of its processes
 * share the node (local_tasks), returns 0 instead and lets the runtime's
 * sched_yield hand the CPU over, until a sign below says that a task which
 * does not yield back shares the CPUs; it then waits as above for
 * SX_YIELD_SLOW_WAIT_MIN_NS, doubling up to SX_YIELD_SLOW_WAIT_MAX_NS
 * while a sign comes again.
 *
 * Why. A bound thread cannot be moved, so the wait's costs are pure loss:
 * every message then costs a sleep and a wake-up where a yield costs a
 * switch (four ranks bound two to a core, exchanging 256 KiB in pairs: 21
 * context switches a round against 9), and a core whose two ranks both
 * sleep halts, which a VM pays for on every wake-up. An unbound caller
 * pays the same, and with one shard its pass reads every socket the
 * engine has, so a yield misses nothing a wait would have caught: four
 * unbound ranks of one shard each on two cores (2026-12-05, 2-core VM,
 * the build before and tcp alternated) ran an 8-byte MPI_Barrier in 36 us
 * against 88 waiting with two shards a rank (tcp 68), and a 1 MiB
 * MPI_Allreduce at 0.88 of tcp's time against 1.12 (medians of eight
 * rounds). With several shards it keeps waiting: its pass reads its home
 * shard and visits another only every SX_PROGRESS_VISIT_EVERY passes
 * (engine.c), so a datagram on another shard waited out several yields,
 * where a wait watches every shard; that allreduce with two shards a rank
 * and yields took 1.19 of tcp's time, and the 256 KiB exchange above, in
 * pairs of such ranks, 127-134 us in one run and 366-501 in others,
 * against 229-307 with the wait.
 *
 * The signs. Two runtime yields in a row that kept the caller away over
 * SX_YIELD_SLOW_NS (one alone may be the caller's own work between two
 * calls, which is all the gap can time). And, where local_tasks is known,
 * SX_YIELD_FOREIGN_VERDICTS verdicts in a row that counted SX_YIELD_FOREIGN
 * or more runnable tasks beyond the job's own: ranks that yield stay
 * runnable, so what the count shows over local_tasks others add. The
 * second is what this VM's kernel needs: beside busy loops its yields
 * come back within 20-100 us (EEVDF lets the yielder back in at its next
 * deadline, not after the loop's slice), so no yield is slow, yet each
 * hands the loop that much; with the first sign alone `mpi_bench ring`
 * over four such ranks beside two busy loops took 0.81-0.96 s against
 * 0.59-0.76 waiting, with both 0.65-0.69 against 0.67-0.72 (tcp
 * 1.20-1.45). An unbound caller whose launcher said nothing keeps waiting
 * (docs/tuning.md, "Ranks bound to a core, or of one shard").
 */

/*
 * Waits that preempt. A wait above gives the core up on the promise that
 * the datagram ending it puts the caller back at once: the scheduler
 * credits a woken sleeper, which preempts a CPU-bound task. A SCHED_BATCH
 * thread is never preempted for on wake-up (sched(7)), and Open MPI's BTL
 * moves the threads that hand the progress role to each other there
 * (btl_shardx_module.c, mca_btl_shardx_progress), so such a caller woke
 * behind a busy loop and waited out its slice: two ranks of two threads
 * beside two busy loops (mpi_bench mt 2 200, 2-core VM, 2026-11-29)
 * exchanged 8 bytes in 1,166-2,070 us, against 205-790 over the tcp BTL;
 * waiting as SCHED_OTHER, 85-106 us in the same runs. The switch there and
 * back costs two sched_setscheduler(2) calls (4.4 us here) a wait, and a
 * SCHED_OTHER wake-up also preempts the rank's own threads, which is what
 * SCHED_BATCH is there to stop. So a SCHED_BATCH caller waits as it is
 * until a wait comes back more than SX_YIELD_SLOW_NS after its longest
 * (SX_YIELD_WAIT_NS): it was woken, or its time was up, and something kept
 * it off the CPU for that long. Beside the busy loops 16-20 waits a run
 * did, most by over 2 ms; without them, 0-1. Its waits then run
 * SCHED_OTHER, the policy put back after each, for
 * SX_YIELD_SLOW_WAIT_MIN_NS, doubling up to SX_YIELD_SLOW_WAIT_MAX_NS
 * while a wait as it is comes back late again, as bound callers do above.
 * The policy is looked up at most every SX_YIELD_CHECK_NS per thread.
 *
 * sx_yield_wait_begin notes the start in *start_p and returns the policy
 * to put back, or -1 when nothing changed; sx_yield_wait_end takes both.
 * The calling thread's own policy only.
 */
int sx_yield_wait_begin(uint64_t *start_p);
void sx_yield_wait_end(int saved, uint64_t start);

/**
 * Called by every sx_progress with what it handled (@p n) and whether the
 * home shard's token was held by another thread (@p busy); says what the
 * caller should do before returning, and counts it. Any thread.
 */
sx_yield_action_t sx_yield_after(sx_yield_t *y, int n, bool busy);

/**
 * How many reads an empty home pass may make again (SX_REPOLL, @p repoll;
 * shard.c): none while a caller that finds nothing would give its core
 * up, or could be told to (always; auto while the machine was last found
 * oversubscribed or the launcher said so; a caller that yields itself),
 * since reading on would keep the core from whoever waits for it. Any
 * thread.
 */
unsigned sx_yield_repoll(const sx_yield_t *y, unsigned repoll);

#endif /* SX_ENGINE_YIELD_H */
