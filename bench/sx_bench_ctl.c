/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * sx_bench's two ranks and the control channel between them.
 *
 * Started by a launcher (`sx_run -n 2 sx_bench ...`, `mpirun -np 2
 * sx_bench ...`), each process learns its rank from the launcher and the
 * two meet through the job's modex (src/bootstrap/modex.h: the sx_run
 * rendezvous or PMIx): rank 1 listens on a TCP port of every interface
 * and publishes it with its address (the one towards sx_run's rendezvous,
 * else its first interface's: sx_oob_pick_host), rank 0 connects, and that
 * one stream is the control channel. The ranks may be on two hosts (the
 * engines then find each other with their defaults, SX_BIND_ADDR).
 *
 * Started on its own, sx_bench forks its peer: once, before any engine or
 * thread exists (a fork copies only the calling thread, so forking later
 * could leave the child with locks held by threads it does not have). The
 * parent is rank 0; the child is rank 1; a pair of pipes is the channel.
 *
 * Every wait is bounded by SXB_WAIT_LIMIT_NS and watches for the other
 * rank's death (SIGCHLD and the parent pid when forked; the stream's
 * hang-up when launched), so a crash or a hang on one side becomes an
 * error on the other instead of a stuck pair.
 */

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <shardx.h>

#include "bootstrap/modex.h"
#include "bootstrap/oob.h"
#include "common/config.h"
#include "sx_bench.h"

/* ---- process lifetime ----------------------------------------------------- */

static volatile sig_atomic_t g_child_exited;
static volatile pid_t g_child_pid;
static pid_t g_parent_pid;
static int g_rank;

static void sxb_on_sigchld(int sig)
{
    (void)sig;
    g_child_exited = 1;
}

/* The last-resort watchdog: something blocked past every bounded wait. */
static void sxb_on_sigalrm(int sig)
{
    static const char msg[] = "sx_bench: run time limit exceeded; killing both ranks\n";
    (void)sig;
    if (g_child_pid > 0)
        kill(g_child_pid, SIGKILL);
    ssize_t w = write(STDERR_FILENO, msg, sizeof(msg) - 1);
    (void)w;
    _exit(3);
}

int sxb_fail(const char *fmt, ...)
{
    va_list ap;
    char line[512];

    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    fprintf(stderr, "sx_bench[rank %d]: %s\n", g_rank, line);
    return -1;
}

/* Launched: whether the other end of the stream hung up. Data still
 * queued is read first by sxb_ctl_read, so a peer that wrote its last
 * words and exited is not mistaken for a dead one before they are read. */
static bool sxb_ctl_hung_up(const sxb_ctl_t *ctl)
{
    struct pollfd pfd = {.fd = ctl->rfd, .events = POLLIN | POLLRDHUP};

    if (poll(&pfd, 1, 0) <= 0)
        return false;
    if (pfd.revents & (POLLERR | POLLHUP))
        return true;
    if ((pfd.revents & POLLRDHUP) == 0)
        return false;
    char c;
    return recv(ctl->rfd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

/* Whether the other rank is gone (exited or hung up). */
static bool sxb_other_gone(const sxb_ctl_t *ctl)
{
    if (ctl->job)
        return false; /* no channel; the launcher ends a job whose rank failed */
    if (ctl->launched)
        return sxb_ctl_hung_up(ctl);
    if (ctl->rank == 0)
        return g_child_exited != 0;
    return getppid() != g_parent_pid;
}

int sxb_check(const sxb_ctl_t *ctl, uint64_t deadline_ns, const char *what)
{
    int other = 1 - ctl->rank;

    if (ctl->launched && !ctl->job && sxb_ctl_hung_up(ctl))
        return sxb_fail("rank %d closed the control channel (it exited) while waiting for %s",
                        other, what);
    if (!ctl->launched && ctl->rank == 0 && g_child_exited)
        return sxb_fail("rank 1 exited while waiting for %s", what);
    /* PR_SET_PDEATHSIG normally kills rank 1 first; this covers the rest. */
    if (!ctl->launched && ctl->rank == 1 && getppid() != g_parent_pid)
        return sxb_fail("rank 0 exited while waiting for %s", what);
    if (sxb_now_ns() > deadline_ns)
        return sxb_fail("timed out after %llu s waiting for %s",
                        (unsigned long long)(SXB_WAIT_LIMIT_NS / 1000000000ull), what);
    return 0;
}

/* ---- control channel ------------------------------------------------------ */

int sxb_ctl_write(const sxb_ctl_t *ctl, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    uint64_t deadline = sxb_now_ns() + SXB_WAIT_LIMIT_NS;

    while (len > 0) {
        ssize_t n = write(ctl->wfd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN) {
            /* Launched: the socket is nonblocking both ways. */
            struct pollfd pfd = {.fd = ctl->wfd, .events = POLLOUT};
            (void)poll(&pfd, 1, 10);
            if (sxb_check(ctl, deadline, "room on the control channel") != 0)
                return -1;
            continue;
        }
        if (n < 0)
            return sxb_fail("control channel write: %s", strerror(errno));
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

bool sxb_ctl_readable(const sxb_ctl_t *ctl)
{
    struct pollfd pfd = {.fd = ctl->rfd, .events = POLLIN};
    return poll(&pfd, 1, 0) > 0;
}

/* sxb_check for a reader: a rank that wrote its last words and exited
 * between our empty read and this check is not a failure while those
 * words wait to be read. Looking for them after seeing it gone is
 * race-free: a process's writes precede its exit. */
static int sxb_ctl_read_check(const sxb_ctl_t *ctl, uint64_t deadline)
{
    if (sxb_other_gone(ctl) && sxb_ctl_readable(ctl))
        return 0;
    return sxb_check(ctl, deadline, "the control channel");
}

int sxb_ctl_read(const sxb_ctl_t *ctl, void *buf, size_t len, sxb_idle_fn idle, void *arg)
{
    uint8_t *p = buf;
    uint64_t deadline = sxb_now_ns() + SXB_WAIT_LIMIT_NS;
    unsigned spins = 0;

    while (len > 0) {
        ssize_t n = read(ctl->rfd, p, len);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n == 0)
            return sxb_fail("rank %d closed the control channel (it exited)", 1 - ctl->rank);
        if (errno != EAGAIN && errno != EINTR)
            return sxb_fail("control channel read: %s", strerror(errno));
        if (idle != NULL) {
            /* Keep the engine going: the other rank may be waiting for
             * our ACKs before it can write what we wait for. */
            if (idle(arg) != 0)
                return -1;
            if ((++spins & 1023) == 0 && sxb_ctl_read_check(ctl, deadline) != 0)
                return -1;
        } else {
            struct pollfd pfd = {.fd = ctl->rfd, .events = POLLIN};
            (void)poll(&pfd, 1, 10);
            if (sxb_ctl_read_check(ctl, deadline) != 0)
                return -1;
        }
    }
    return 0;
}

int sxb_ctl_barrier(const sxb_ctl_t *ctl, sxb_idle_fn idle, void *arg)
{
    uint8_t token = 0xb5, got = 0;

    if (sxb_ctl_write(ctl, &token, 1) != 0 || sxb_ctl_read(ctl, &got, 1, idle, arg) != 0)
        return -1;
    if (got != token)
        return sxb_fail("control channel out of step (barrier read 0x%02x)", got);
    return 0;
}

/* ---- launched: meet through the modex ------------------------------------- */

bool sxb_launched(void)
{
    return sx_modex_sxrun_ops.detect() || sx_modex_pmix_ops.detect();
}

bool sxb_env_uint(const char *name, unsigned long long max, unsigned long long *v_p)
{
    const char *v = getenv(name);
    char *end = NULL;

    if (v == NULL || *v == '\0')
        return false;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (errno != 0 || *end != '\0' || n > max)
        return false;
    *v_p = n;
    return true;
}

/* Rank 1's listener: every interface, any port. */
static int sxb_listen(uint16_t *port_p)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
    socklen_t sl = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd < 0)
        return sxb_fail("control channel socket: %s", strerror(errno));
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(fd, 1) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &sl) != 0) {
        sxb_fail("control channel listener: %s", strerror(errno));
        close(fd);
        return -1;
    }
    *port_p = ntohs(sa.sin_port);
    return fd;
}

/* Rank 1 waits (bounded) for rank 0 to connect. */
static int sxb_accept(int lfd)
{
    struct pollfd pfd = {.fd = lfd, .events = POLLIN};
    int ms = (int)(SXB_WAIT_LIMIT_NS / 1000000ull);

    int r = poll(&pfd, 1, ms);
    if (r <= 0)
        return sxb_fail("rank 0 did not connect to the control channel within %d s%s%s", ms / 1000,
                        r < 0 ? ": " : "", r < 0 ? strerror(errno) : "");
    int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0)
        return sxb_fail("control channel accept: %s", strerror(errno));
    return fd;
}

static int sxb_connect(uint32_t ip, uint16_t port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = ip, .sin_port = htons(port)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    char text[INET_ADDRSTRLEN] = "?";

    if (fd < 0)
        return sxb_fail("control channel socket: %s", strerror(errno));
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        inet_ntop(AF_INET, &sa.sin_addr, text, sizeof(text));
        sxb_fail("cannot connect to rank 1's control channel at %s:%u: %s", text, port,
                 strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

/* The blob each rank publishes. */
typedef struct sxb_meet {
    uint32_t magic; /* SXB_MEET_MAGIC: the job really is sx_bench's */
    uint16_t port;  /* rank 1's control-channel port; 0 from rank 0 */
    uint16_t pad;
    uint32_t ip; /* rank 1's address, network order */
} sxb_meet_t;

#define SXB_MEET_MAGIC 0x53584232u /* "SXB2" */

static int sxb_ctl_meet(sxb_ctl_t *ctl)
{
    sx_oob_t *oob = NULL;
    sx_modex_t *m = NULL;
    int lfd = -1, fd = -1, rc;
    sxb_meet_t mine = {.magic = SXB_MEET_MAGIC}, theirs;
    size_t len = sizeof(theirs);

    /* The sx_run rendezvous talks over an OOB endpoint; PMIx needs none.
     * Any id but the launcher's (0) will do: nobody else addresses us. */
    char host[64];
    sx_oob_pick_host(getenv("SX_RUN_ADDR"), host, sizeof(host));
    if (sx_modex_sxrun_ops.detect() && !sx_modex_pmix_ops.detect() &&
        (rc = sx_oob_open(((uint64_t)getpid() << 1) | 1u, host, 0, &oob)) != SX_OK)
        return sxb_fail("cannot open an OOB endpoint for the sx_run rendezvous: %s",
                        sx_strerror(rc));
    rc = sx_modex_open(SX_MODEX_AUTO, oob, &m);
    if (rc != SX_OK) {
        sxb_fail("cannot reach the launcher's modex: %s", sx_strerror(rc));
        goto out;
    }
    if (m->size != 2) {
        sxb_fail("sx_bench runs with exactly 2 processes; the launcher started %u (use "
                 "sx_run -n 2 or mpirun -np 2)",
                 m->size);
        goto out;
    }
    ctl->rank = (int)m->rank;
    g_rank = ctl->rank;
    if (ctl->rank == 1 && (lfd = sxb_listen(&mine.port)) < 0)
        goto out;
    struct in_addr me;
    mine.ip = inet_pton(AF_INET, host, &me) == 1 ? me.s_addr : htonl(INADDR_LOOPBACK);
    if ((rc = m->ops->exchange(m, &mine, sizeof(mine))) != SX_OK ||
        (rc = m->ops->get(m, (uint32_t)(1 - ctl->rank), &theirs, &len)) != SX_OK) {
        sxb_fail("modex exchange with rank %d: %s", 1 - ctl->rank, sx_strerror(rc));
        goto out;
    }
    if (len != sizeof(theirs) || theirs.magic != SXB_MEET_MAGIC ||
        (ctl->rank == 0 && theirs.port == 0)) {
        sxb_fail("rank %d published no sx_bench control-channel address (%zu bytes): is it "
                 "running the same sx_bench?",
                 1 - ctl->rank, len);
        goto out;
    }
    fd = ctl->rank == 1 ? sxb_accept(lfd) : sxb_connect(theirs.ip, theirs.port);
out:
    if (lfd >= 0)
        close(lfd);
    sx_modex_close(m);
    if (oob != NULL)
        sx_oob_close(oob);
    if (fd < 0)
        return -1;
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    ctl->rfd = ctl->wfd = fd;
    ctl->launched = true;
    return 0;
}

/* ---- start and finish ----------------------------------------------------- */

static int sxb_ctl_fork(sxb_ctl_t *ctl)
{
    int p2c[2], c2p[2];

    /* Installed before the fork so that an early death is never missed. */
    struct sigaction sa = {.sa_handler = sxb_on_sigchld, .sa_flags = SA_RESTART | SA_NOCLDSTOP};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGCHLD, &sa, NULL);
    if (pipe(p2c) != 0 || pipe(c2p) != 0)
        return sxb_fail("pipe: %s", strerror(errno));
    fflush(NULL);
    g_parent_pid = getpid();
    pid_t pid = fork();
    if (pid < 0)
        return sxb_fail("fork: %s", strerror(errno));
    if (pid == 0) {
        /* Rank 1 dies with rank 0, also when rank 0 is killed outright. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != g_parent_pid)
            _exit(1);
        signal(SIGCHLD, SIG_DFL);
        g_rank = 1;
        close(p2c[1]);
        close(c2p[0]);
        *ctl = (sxb_ctl_t){.rank = 1, .rfd = p2c[0], .wfd = c2p[1], .child = 0};
    } else {
        close(p2c[0]);
        close(c2p[1]);
        g_child_pid = pid;
        *ctl = (sxb_ctl_t){.rank = 0, .rfd = c2p[0], .wfd = p2c[1], .child = pid};
    }
    fcntl(ctl->rfd, F_SETFL, fcntl(ctl->rfd, F_GETFL) | O_NONBLOCK);
    return 0;
}

/*
 * A launched job of any size (incast): the rank comes from the launcher's
 * environment, read here only so that rank 0 alone prints the header and
 * errors name their rank; the engine's sx_engine_join reads the modex
 * (which allows one exchange per process: meeting here as well would
 * spend it) and sxb_bench_incast checks that the two agree.
 */
static int sxb_ctl_job(sxb_ctl_t *ctl)
{
    static const char *const vars[] = {SX_RUN_ENV_RANK, "PMIX_RANK", "OMPI_COMM_WORLD_RANK"};
    unsigned long long rank = 0;
    bool found = false;

    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]) && !found; i++)
        found = sxb_env_uint(vars[i], (1u << 20) - 1, &rank);
    if (!found)
        return sxb_fail("started by a launcher, but none of %s, PMIX_RANK, OMPI_COMM_WORLD_RANK "
                        "gives this process's rank",
                        SX_RUN_ENV_RANK);
    *ctl = (sxb_ctl_t){.rank = (int)rank, .rfd = -1, .wfd = -1, .launched = true, .job = true};
    g_rank = ctl->rank;
    return 0;
}

int sxb_ctl_start(sxb_ctl_t *ctl, bool job)
{
    *ctl = (sxb_ctl_t){.rank = 0, .rfd = -1, .wfd = -1};
    /* Writes to a dead rank's pipe or socket must fail with EPIPE, not
     * kill us. */
    signal(SIGPIPE, SIG_IGN);
    int rc = !sxb_launched() ? sxb_ctl_fork(ctl) : job ? sxb_ctl_job(ctl) : sxb_ctl_meet(ctl);
    if (rc != 0)
        return rc;
    signal(SIGALRM, sxb_on_sigalrm);
    alarm(SXB_RUN_LIMIT_S);
    return 0;
}

/* Waits (bounded) for rank 1 to exit; kills it when it does not. */
static int sxb_reap(pid_t child, bool kill_first)
{
    int status = 0;
    uint64_t deadline = sxb_now_ns() + 10ull * 1000000000ull;

    if (kill_first) {
        /* Say how rank 1 ended if it already has: that is usually why the
         * run failed. */
        pid_t r = waitpid(child, &status, WNOHANG);
        if (r == child && WIFSIGNALED(status))
            return sxb_fail("rank 1 was killed by signal %d", WTERMSIG(status));
        if (r == child)
            return sxb_fail("rank 1 exited with status %d", WEXITSTATUS(status));
        kill(child, SIGKILL);
    }
    for (;;) {
        pid_t r = waitpid(child, &status, WNOHANG);
        if (r == child)
            break;
        if (r < 0 && errno != EINTR)
            return sxb_fail("waitpid: %s", strerror(errno));
        if (sxb_now_ns() > deadline) {
            sxb_fail("rank 1 did not exit; killing it");
            kill(child, SIGKILL);
            deadline = UINT64_MAX;
        }
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    if (kill_first)
        return -1;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    if (WIFSIGNALED(status))
        return sxb_fail("rank 1 was killed by signal %d", WTERMSIG(status));
    return sxb_fail("rank 1 exited with status %d", WEXITSTATUS(status));
}

int sxb_ctl_finish(sxb_ctl_t *ctl, int rc)
{
    fflush(NULL);
    /* A job has no channel: its last sx_job_barrier was the goodbye, and
     * the launcher reports a rank that failed. */
    if (ctl->job)
        return rc;
    if (!ctl->launched && ctl->rank == 1)
        _exit(rc == 0 ? 0 : 1); /* rank 0 reaps us */
    if (!ctl->launched)
        return sxb_reap(ctl->child, rc != 0) == 0 ? rc : -1;
    /* Launched: rank 0 waits for rank 1's goodbye (its end of the stream
     * closing) so that the job ends with both ranks' verdicts known; the
     * launcher reports a rank that failed. */
    if (ctl->rank == 0 && rc == 0) {
        char c;
        uint64_t deadline = sxb_now_ns() + 10ull * 1000000000ull;
        while (read(ctl->rfd, &c, 1) != 0 && sxb_now_ns() < deadline) {
            struct pollfd pfd = {.fd = ctl->rfd, .events = POLLIN};
            (void)poll(&pfd, 1, 10);
        }
    }
    close(ctl->rfd);
    ctl->rfd = ctl->wfd = -1;
    return rc;
}
