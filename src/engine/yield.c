/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Yielding when threads outnumber cores: yield.h says what and why.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "bootstrap/modex.h"
#include "common/hot.h"
#include "common/log.h"
#include "common/time.h"
#include "engine/yield.h"

/* Per thread, across engines: empty calls in a row, the caller slot and
 * when this thread last marked it. */
static _Thread_local unsigned sx_yield_streak;
static _Thread_local unsigned sx_yield_slot; /* slot + 1; 0: none yet */
static _Thread_local uint64_t sx_yield_marked_ns;
static atomic_uint sx_yield_next_slot;
/* A bound or single-shard caller whose runtime yields (yield.h, "Bound or
 * single-shard callers"): whether this thread may run on one CPU only (0:
 * not looked yet, 1: yes, 2: no), when it last returned 0 for the runtime
 * to yield on (0: its last call did not), whether the last such gap it
 * measured was slow, until when it waits instead, and how long the next
 * such verdict lasts. */
static _Thread_local unsigned char sx_yield_bound;
static _Thread_local uint64_t sx_yield_rt_at;
static _Thread_local bool sx_yield_rt_slow;
static _Thread_local uint64_t sx_yield_rt_wait_until;
static _Thread_local uint64_t sx_yield_rt_backoff;
/* The calling thread's scheduling policy as last looked up, and when;
 * -1: not yet. Until sx_yield_late_until its waits run SCHED_OTHER, after
 * one that came back late (yield.h, "Waits that preempt"). */
static _Thread_local int sx_yield_policy = -1;
static _Thread_local uint64_t sx_yield_policy_ns;
static _Thread_local uint64_t sx_yield_late_until;
static _Thread_local uint64_t sx_yield_late_backoff;

/* A sign that a task which does not give the CPU back shares this one:
 * act on it until *until_p, for SX_YIELD_SLOW_WAIT_MIN_NS, doubling up to
 * SX_YIELD_SLOW_WAIT_MAX_NS while the sign comes again. */
static void sx_yield_back_off(uint64_t now, uint64_t *backoff_p, uint64_t *until_p)
{
    uint64_t b = *backoff_p == 0 ? SX_YIELD_SLOW_WAIT_MIN_NS : 2 * *backoff_p;
    *backoff_p = b < SX_YIELD_SLOW_WAIT_MAX_NS ? b : SX_YIELD_SLOW_WAIT_MAX_NS;
    *until_p = now + *backoff_p;
}

/* Open MPI's bool MCA values. */
static bool sx_yield_truthy(const char *v)
{
    static const char *const yes[] = {"1", "true", "yes", "on", "enabled", "t", "y"};
    if (v == NULL)
        return false;
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        if (strcasecmp(v, yes[i]) == 0)
            return true;
    }
    return false;
}

/* How many of the job's processes the launcher started on this node:
 * Open MPI's, shardx's sx_run's and MPICH's Hydra's word for it; 0 where
 * none says (yield.h, "Bound or single-shard callers"). */
static unsigned sx_yield_local_tasks(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", SX_RUN_ENV_LOCAL_SIZE,
                                       "MPI_LOCALNRANKS"};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        const char *v = getenv(vars[i]);
        char *end;
        if (v == NULL || *v == '\0')
            continue;
        unsigned long n = strtoul(v, &end, 10);
        if (*end == '\0' && n > 0 && n <= 65536)
            return (unsigned)n;
    }
    return 0;
}

void sx_yield_init(sx_yield_t *y, int mode, unsigned cpus)
{
    sx_yield_init_at(y, mode, cpus, "/proc/loadavg", "/proc/pressure/cpu");
}

static uint64_t sx_yield_stall_us(const sx_yield_t *y, bool *ok);

void sx_yield_init_at(sx_yield_t *y, int mode, unsigned cpus, const char *loadavg,
                      const char *pressure)
{
    memset(y, 0, sizeof(*y));
    y->mode = mode;
    y->cpus = cpus ? cpus : 1;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    y->online = online > 0 ? (unsigned)online : 1;
    /* mpirun exports it to every rank when it places more ranks than a
     * node has slots (Open MPI's rmaps; also settable by the user). */
    y->hint = sx_yield_truthy(getenv("OMPI_MCA_mpi_yield_when_idle"));
    y->local_tasks = sx_yield_local_tasks();
    y->loadavg_fd = -1;
    y->pressure_fd = -1;
    atomic_init(&y->stall_us, 0);
    atomic_init(&y->stall_ns, 0);
    if (mode == SX_YIELD_AUTO) {
        y->loadavg_fd = loadavg != NULL ? open(loadavg, O_RDONLY | O_CLOEXEC) : -1;
        if (y->loadavg_fd < 0)
            sx_debug("yield", "%s: %s; oversubscription judged from the cpuset alone",
                     loadavg != NULL ? loadavg : "the load average", strerror(errno));
        y->pressure_fd = pressure != NULL ? open(pressure, O_RDONLY | O_CLOEXEC) : -1;
        bool ok = false;
        uint64_t stall = y->pressure_fd >= 0 ? sx_yield_stall_us(y, &ok) : 0;
        if (!ok) {
            sx_debug("yield", "%s: %s; the runnable count decides alone",
                     pressure != NULL ? pressure : "CPU pressure",
                     y->pressure_fd < 0 ? strerror(errno) : "no \"some ... total=\" line");
            if (y->pressure_fd >= 0)
                close(y->pressure_fd);
            y->pressure_fd = -1;
        }
        atomic_store_explicit(&y->stall_us, stall, memory_order_relaxed);
        atomic_store_explicit(&y->stall_ns, sx_time_ns(), memory_order_relaxed);
    }
    atomic_init(&y->over, false);
    atomic_init(&y->foreign, 0);
    atomic_init(&y->caller_yields, false);
    atomic_init(&y->wakeups, 0);
    atomic_init(&y->checked_ns, 0);
}

void sx_yield_fini(sx_yield_t *y)
{
    if (y->loadavg_fd >= 0)
        close(y->loadavg_fd);
    y->loadavg_fd = -1;
    if (y->pressure_fd >= 0)
        close(y->pressure_fd);
    y->pressure_fd = -1;
}

/* Runnable tasks on the machine now: the fourth field of /proc/loadavg is
 * "running/total" (proc(5)). 0 when unreadable. */
static unsigned sx_yield_runnable(const sx_yield_t *y)
{
    char buf[128];

    if (y->loadavg_fd < 0)
        return 0;
    ssize_t n = pread(y->loadavg_fd, buf, sizeof(buf) - 1, 0);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    const char *p = buf;
    for (int field = 0; field < 3 && p != NULL; field++) {
        p = strchr(p, ' ');
        if (p != NULL)
            p++;
    }
    if (p == NULL)
        return 0;
    char *end;
    unsigned long running = strtoul(p, &end, 10);
    return (end != p && *end == '/') ? (unsigned)running : 0;
}

/* The first line of /proc/pressure/cpu is "some avg10=A avg60=B
 * avg300=C total=N", N the microseconds during which some runnable task
 * waited for a CPU since boot (Documentation/accounting/psi.rst). *ok
 * says whether that line was there. */
static uint64_t sx_yield_stall_us(const sx_yield_t *y, bool *ok)
{
    char buf[256];

    *ok = false;
    ssize_t n = pread(y->pressure_fd, buf, sizeof(buf) - 1, 0);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    char *eol = strchr(buf, '\n');
    if (eol != NULL)
        *eol = '\0';
    const char *p = strstr(buf, " total=");
    if (strncmp(buf, "some ", 5) != 0 || p == NULL)
        return 0;
    p += strlen(" total=");
    char *end;
    unsigned long long v = strtoull(p, &end, 10);
    if (end == p)
        return 0;
    *ok = true;
    return (uint64_t)v;
}

/* Whether runnable tasks waited for a CPU for SX_YIELD_PRESSURE_PERMILLE
 * of the time since the last look; true where that cannot be told (the
 * runnable count then decides alone, as without PSI). */
static bool sx_yield_stalled(sx_yield_t *y, uint64_t now_ns)
{
    bool ok;

    if (y->pressure_fd < 0)
        return true;
    uint64_t stall = sx_yield_stall_us(y, &ok);
    if (!ok)
        return true;
    uint64_t prev = atomic_exchange_explicit(&y->stall_us, stall, memory_order_relaxed);
    uint64_t prev_ns = atomic_exchange_explicit(&y->stall_ns, now_ns, memory_order_relaxed);
    if (now_ns <= prev_ns || stall < prev)
        return true;
    /* microseconds stalled * 1000 (ns) * 1000 (permille) against ns */
    return (stall - prev) * 1000000u >= (uint64_t)SX_YIELD_PRESSURE_PERMILLE * (now_ns - prev_ns);
}

bool sx_yield_verdict(sx_yield_t *y, uint64_t now_ns)
{
    unsigned callers = 0;
    for (unsigned i = 0; i < SX_YIELD_CALLERS; i++) {
        uint64_t seen = atomic_load_explicit(&y->seen_ns[i], memory_order_relaxed);
        /* seen is a coarse clock's (it may be a tick ahead of now_ns) */
        if (seen != 0 && (int64_t)(now_ns - seen) < (int64_t)SX_YIELD_CALLER_NS)
            callers++;
    }
    /* Read the pressure at every verdict, so that the next one's interval
     * starts here even when this one needs no pressure. */
    bool stalled = sx_yield_stalled(y, now_ns);
    unsigned runnable = sx_yield_runnable(y);
    bool over = callers > y->cpus || (runnable > y->online && stalled);
    /* Tasks beyond the job's own (yield.h, "Bound or single-shard
     * callers"): one verdict more in a row, or none. */
    unsigned foreign = atomic_load_explicit(&y->foreign, memory_order_relaxed);
    bool beyond = y->local_tasks > 0 && runnable >= y->local_tasks + SX_YIELD_FOREIGN;
    atomic_store_explicit(&y->foreign, beyond ? foreign + 1 : 0, memory_order_relaxed);
    if (over || y->hint)
        atomic_fetch_add_explicit(&y->over_checks, 1, memory_order_relaxed);
    atomic_store_explicit(&y->over, over, memory_order_relaxed);
    return over;
}

/* What the machine shows (sx_yield_verdict), re-measured by one thread at
 * most every SX_YIELD_CHECK_NS. The launcher's hint is not part of it
 * (sx_yield_after adds it where it applies). */
static bool sx_yield_measured(sx_yield_t *y, uint64_t now)
{
    uint64_t last = atomic_load_explicit(&y->checked_ns, memory_order_relaxed);
    if (now - last < SX_YIELD_CHECK_NS ||
        !atomic_compare_exchange_strong_explicit(&y->checked_ns, &last, now, memory_order_relaxed,
                                                 memory_order_relaxed))
        return atomic_load_explicit(&y->over, memory_order_relaxed);
    return sx_yield_verdict(y, sx_time_ns());
}

/*
 * For a caller that yields itself on 0 (caller_yields) and found nothing,
 * while threads outnumber cores: whether to return 0 and let the
 * runtime's sched_yield hand the core over, rather than wait for a
 * datagram. Only a thread bound to one CPU, or a caller of an engine with
 * one shard in a job whose launcher said how many of its processes share
 * the node, does, and only while no task that does not yield back shares
 * the CPUs (yield.h, "Bound or single-shard callers").
 */
static bool sx_yield_runtime_yields(const sx_yield_t *y)
{
    if (sx_yield_bound == 0) {
        cpu_set_t set;
        sx_yield_bound =
            (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) == 1) ? 1 : 2;
    }
    if (sx_yield_bound != 1 && (!y->one_shard || y->local_tasks == 0))
        return false;
    uint64_t now = sx_time_ns();
    uint64_t at = sx_yield_rt_at;
    sx_yield_rt_at = 0;
    if (at != 0 && now - at > SX_YIELD_SLOW_NS) {
        /* The runtime's last yield kept this thread off its CPU that
         * long: a task that does not give the CPU back shares it. Or the
         * caller computed between two calls (the gap is all this can
         * time), which a quick yield after it shows. So at the second
         * slow gap with no quick one between, wait for datagrams for a
         * while, longer each time it happens again. */
        if (sx_yield_rt_slow)
            sx_yield_back_off(now, &sx_yield_rt_backoff, &sx_yield_rt_wait_until);
        sx_yield_rt_slow = true;
    } else if (at != 0) {
        sx_yield_rt_slow = false;
        if (now >= sx_yield_rt_wait_until)
            sx_yield_rt_backoff = 0; /* a yield came back in time */
    }
    if (now >= sx_yield_rt_wait_until &&
        atomic_load_explicit(&y->foreign, memory_order_relaxed) >= SX_YIELD_FOREIGN_VERDICTS)
        sx_yield_back_off(now, &sx_yield_rt_backoff, &sx_yield_rt_wait_until);
    if (now < sx_yield_rt_wait_until)
        return false;
    sx_yield_rt_at = now;
    return true;
}

SX_HOT_PASS sx_yield_action_t sx_yield_after(sx_yield_t *y, int n, bool busy)
{
    if (n != 0) {
        sx_yield_streak = 0;
        sx_yield_rt_at = 0;
        return SX_YIELD_SPIN;
    }
    if (y->mode == SX_YIELD_NEVER)
        return SX_YIELD_SPIN;
    /* A caller that yields itself on 0 has no spin to bound: its runtime
     * yields after every empty call (yield.h). */
    bool caller_yields = atomic_load_explicit(&y->caller_yields, memory_order_relaxed);
    unsigned s = sx_yield_streak;
    if (s < SX_YIELD_SPINS)
        sx_yield_streak = ++s;
    if (s < SX_YIELD_SPINS && !busy && !caller_yields)
        return SX_YIELD_SPIN;
    bool give_up = true;
    if (y->mode == SX_YIELD_AUTO) {
        uint64_t now = sx_time_coarse_ns();
        /* This thread spins here: count it as a caller (once a millisecond). */
        if (now - sx_yield_marked_ns >= 1000000u) {
            if (sx_yield_slot == 0)
                sx_yield_slot =
                    atomic_fetch_add_explicit(&sx_yield_next_slot, 1, memory_order_relaxed) %
                        SX_YIELD_CALLERS +
                    1;
            sx_yield_marked_ns = now;
            atomic_store_explicit(&y->seen_ns[sx_yield_slot - 1], now, memory_order_relaxed);
        }
        /* The launcher's hint says the runtime yields, not that anything
         * else wants the core: for such a caller only the machine's own
         * state counts (yield.h). */
        give_up = sx_yield_measured(y, now) || (y->hint && !caller_yields);
    }
    if (!give_up)
        return SX_YIELD_SPIN;
    if (caller_yields && sx_yield_runtime_yields(y))
        return SX_YIELD_SPIN; /* the runtime's sched_yield gives the core up */
    atomic_fetch_add_explicit(&y->yields, 1, memory_order_relaxed);
    if (caller_yields)
        return SX_YIELD_WAIT_ANY;
    return busy ? SX_YIELD_SCHED : SX_YIELD_WAIT;
}

SX_HOT_PASS unsigned sx_yield_repoll(const sx_yield_t *y, unsigned repoll)
{
    if (repoll == 0 || y->mode == SX_YIELD_ALWAYS ||
        atomic_load_explicit(&y->caller_yields, memory_order_relaxed))
        return 0;
    if (y->mode == SX_YIELD_AUTO &&
        (y->hint || atomic_load_explicit(&y->over, memory_order_relaxed)))
        return 0;
    return repoll;
}

int sx_yield_wait_begin(uint64_t *start_p)
{
    uint64_t now = sx_time_ns();
    *start_p = now;
    if (sx_yield_policy < 0 || now - sx_yield_policy_ns >= SX_YIELD_CHECK_NS) {
        sx_yield_policy = sched_getscheduler(0);
        sx_yield_policy_ns = now;
    }
    if (sx_yield_policy != SCHED_BATCH || now >= sx_yield_late_until)
        return -1;
    struct sched_param sp = {.sched_priority = 0};
    return sched_setscheduler(0, SCHED_OTHER, &sp) == 0 ? SCHED_BATCH : -1;
}

void sx_yield_wait_end(int saved, uint64_t start)
{
    struct sched_param sp = {.sched_priority = 0};
    if (saved >= 0) {
        if (sched_setscheduler(0, saved, &sp) != 0)
            sx_yield_policy = -1; /* look it up again at the next wait */
        return;
    }
    if (sx_yield_policy != SCHED_BATCH)
        return;
    /* A wait lasts SX_YIELD_WAIT_NS at most: one that returned much later
     * was woken and then kept off the CPU. */
    uint64_t now = sx_time_ns();
    if (now - start > SX_YIELD_WAIT_NS + SX_YIELD_SLOW_NS)
        sx_yield_back_off(now, &sx_yield_late_backoff, &sx_yield_late_until);
    else if (now >= sx_yield_late_until)
        sx_yield_late_backoff = 0; /* back in time */
}
