/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * sx_run: the built-in launcher. `sx_run -n N [--timeout S] [--] prog args`
 * starts N local processes of prog with SX_RUN_RANK, SX_RUN_SIZE,
 * SX_RUN_ADDR (the rendezvous server's "host:port", see
 * src/bootstrap/rendezvous.h), SX_RUN_LOCAL_RANK and SX_RUN_LOCAL_SIZE
 * in their environment, prefixes every line
 * they print with their rank, and returns the first failure among them.
 *
 * No process outlives the job:
 *
 *  - each rank leads its own process group, and sx_run kills whole groups,
 *    so grandchildren go too;
 *  - sx_run is a child subreaper (PR_SET_CHILD_SUBREAPER), so a
 *    grandchild whose parent rank died is re-parented to sx_run and is
 *    killed and reaped by it, even one that left the rank's group;
 *  - every rank asks for SIGKILL when sx_run dies (PR_SET_PDEATHSIG), so
 *    an sx_run killed with SIGKILL takes its ranks with it.
 *
 * Shutdown (a rank failed, the timeout passed, the rendezvous failed, a
 * SIGINT/SIGTERM/SIGHUP, or the job ended with processes left behind):
 * SIGTERM to every group and to every re-parented process, SIGKILL to
 * whatever is left after SX_RUN_GRACE_MS, then reap until sx_run has no
 * children at all and every output pipe has reached end of file. A second
 * signal skips the grace period.
 *
 * Exit status: 0 when every rank exited 0; otherwise the first non-zero
 * status among the ranks in the order sx_run saw them end (a rank killed by
 * signal S counts as 128+S); 124 when the timeout passed; 126 or 127 when
 * the program cannot be executed or is not found (as a shell does); 2 for
 * bad arguments; 125 when sx_run itself failed (the rendezvous reported a
 * protocol error, a system call failed); 1 when a rank exited with status
 * 0 while other ranks waited for it in the rendezvous (a fence round it
 * never entered: as mpirun stops a job whose process "exited
 * improperly"), since those would otherwise wait for good. Ranks waiting
 * for one that failed are told too (SX_ERR_PEER_UNREACHABLE), so one of
 * them may end, with its own status, before the failed one is seen. When sx_run is stopped by a
 * signal it re-raises it after the cleanup, so its parent sees the signal.
 * A rank on another host ends with its agent's status, which the remote
 * side makes the rank's (128+S for a signal S; ssh uses 255 for its own
 * failures).
 *
 * The main loop is single-threaded and event driven: a poll() over every
 * rank's stdout and stderr pipe plus a self-pipe that the signal handlers
 * write to. The rendezvous server runs on its own OOB progress thread, so
 * between fork() and exec() a child makes async-signal-safe calls only;
 * its environment and argument vectors are built before fork().
 *
 * Across hosts (`-H host[:slots],... [--agent CMD]`): the ranks placed on
 * another host (sx_run_hosts.c says how) are started through a launcher
 * agent, ssh by default, run as `CMD HOST sx_run --remote-child ...`: a
 * copy of sx_run on that host starts the rank and stops it when its
 * standard input reaches end of file (sx_run_remote.c). Here, such a rank
 * is its agent: the agent leads the process group that sx_run kills, its
 * output is the rank's, its exit status the rank's, and sx_run holds the
 * write end of its standard input and closes it when the job stops. The
 * rendezvous server then listens on an address the other hosts reach,
 * and every SX_* variable, those named by -x, and the working directory
 * go along on the agent's command line, since an agent carries no
 * environment. Ranks on this machine start as without -H. The options
 * are parsed in sx_run_args.c.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <shardx.h>

#include "bootstrap/modex.h"
#include "bootstrap/rendezvous.h"
#include "common/log.h"
#include "sx_run_int.h"

/* A line longer than this is forwarded in pieces; only the first piece
 * carries the prefix. Keeps memory bounded for output without newlines. */
#define SX_RUN_LINE_MAX (1u << 20)
#define SX_RUN_READ_MAX 65536
/* How often the main loop looks at the rendezvous server's status, which
 * changes on the server's thread and has no file descriptor to poll. */
#define SX_RUN_RDV_CHECK_MS 100

int sx_run_sigpipe[2] = {-1, -1};
static pid_t sx_run_self;

void sx_run_msg(const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    int n = snprintf(buf, sizeof(buf), "sx_run: ");

    va_start(ap, fmt);
    int m = vsnprintf(buf + n, sizeof(buf) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof(buf) - 2)
        len = sizeof(buf) - 2;
    buf[len++] = '\n';
    const char *p = buf;
    while (len > 0) {
        ssize_t w = write(2, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        p += w;
        len -= (size_t)w;
    }
}

uint64_t sx_run_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

extern char **environ;

/* Whether environment entry @p e is one sx_run sets itself (SX_RUN_RANK,
 * _SIZE, _ADDR, _LOCAL_RANK, _LOCAL_SIZE) or a variable of a later -x. */
static bool sx_run_env_replaced(const sx_run_t *r, const char *e, unsigned from)
{
    static const char *const own[] = {SX_RUN_ENV_RANK, SX_RUN_ENV_SIZE, SX_RUN_ENV_ADDR,
                                      SX_RUN_ENV_LOCAL_RANK, SX_RUN_ENV_LOCAL_SIZE};
    size_t len = strcspn(e, "=");

    for (size_t i = 0; i < sizeof(own) / sizeof(own[0]); i++) {
        if (len == strlen(own[i]) && strncmp(e, own[i], len) == 0)
            return true;
    }
    for (unsigned x = from; x < r->nxenv; x++) {
        if (strcspn(r->xenv[x], "=") == len && strncmp(r->xenv[x], e, len) == 0)
            return true;
    }
    return false;
}

/*
 * The ranks' environment: environ without the variables sx_run sets, then
 * the -x variables (the last of a name), SX_RUN_SIZE, SX_RUN_ADDR and
 * slots for SX_RUN_RANK, _LOCAL_RANK and _LOCAL_SIZE, which sx_run_spawn
 * fills for each rank. A remote rank's agent carries no environment, so
 * it is given on the command line: every SX_* variable and the same tail.
 */
static int sx_run_build_env(sx_run_t *r, const char *addr)
{
    size_t count = 0;

    for (char **e = environ; *e != NULL; e++)
        count++;
    size_t nown = sizeof(r->env_strings) / sizeof(r->env_strings[0]);
    r->envp = calloc(count + r->nxenv + nown + 1, sizeof(char *));
    r->remote_env = calloc(count + r->nxenv + nown + 1, sizeof(char *));
    r->xenv_strings = calloc(r->nxenv + 1, sizeof(char *));
    if (r->envp == NULL || r->remote_env == NULL || r->xenv_strings == NULL)
        return SX_RUN_EXIT_INTERNAL;
    size_t k = 0, rk = 0;
    for (char **e = environ; *e != NULL; e++) {
        if (sx_run_env_replaced(r, *e, 0))
            continue;
        r->envp[k++] = *e;
        if (strncmp(*e, "SX_", 3) == 0)
            r->remote_env[rk++] = *e;
    }
    for (unsigned x = 0; x < r->nxenv; x++) {
        const char *a = r->xenv[x];
        if (strchr(a, '=') != NULL) {
            r->xenv_strings[x] = strdup(a);
        } else {
            const char *v = getenv(a);
            size_t len = strlen(a) + strlen(v) + 2;
            r->xenv_strings[x] = malloc(len);
            if (r->xenv_strings[x] != NULL)
                snprintf(r->xenv_strings[x], len, "%s=%s", a, v);
        }
        if (r->xenv_strings[x] == NULL)
            return SX_RUN_EXIT_INTERNAL;
        if (sx_run_env_replaced(r, a, x + 1))
            continue;
        r->envp[k++] = r->xenv_strings[x];
        r->remote_env[rk++] = r->xenv_strings[x];
    }
    size_t cap = SX_RUN_ENV_CAP + strlen(addr);
    for (size_t j = 0; j < nown; j++) {
        r->env_strings[j] = calloc(1, cap);
        if (r->env_strings[j] == NULL)
            return SX_RUN_EXIT_INTERNAL;
        r->envp[k++] = r->env_strings[j];
        r->remote_env[rk++] = r->env_strings[j];
    }
    snprintf(r->env_strings[0], cap, "%s=%u", SX_RUN_ENV_SIZE, r->n);
    snprintf(r->env_strings[1], cap, "%s=%s", SX_RUN_ENV_ADDR, addr);
    r->envp[k] = NULL;
    r->remote_env[rk] = NULL;

    size_t argc = 0;
    while (r->prog_argv[argc] != NULL)
        argc++;
    r->sh_argv = calloc(argc + 3, sizeof(char *));
    if (r->sh_argv == NULL)
        return SX_RUN_EXIT_INTERNAL;
    r->sh_argv[0] = "/bin/sh";
    r->sh_argv[1] = r->path;
    for (size_t j = 1; j < argc; j++)
        r->sh_argv[j + 1] = r->prog_argv[j];
    return 0;
}

/* There must be room for two pipes per rank (three for a remote one) and
 * the rendezvous server's connection to each; raise the soft limit
 * towards the hard one. */
static int sx_run_fd_limit(sx_run_t *r)
{
    struct rlimit rl;
    rlim_t need = (rlim_t)r->n * 5 + 64;

    r->fd_limit = 1024;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return 0;
    r->fd_limit = rl.rlim_cur > 65536 ? 65536 : (int)rl.rlim_cur;
    if (rl.rlim_cur >= need)
        return 0;
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need) {
        sx_run_msg("%u processes need about %lu open files; the hard limit is %lu (ulimit -Hn)",
                   r->n, (unsigned long)need, (unsigned long)rl.rlim_max);
        return SX_RUN_EXIT_USAGE;
    }
    rl.rlim_cur = need;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
        sx_run_msg("cannot raise the open-file limit to %lu: %s", (unsigned long)need,
                   strerror(errno));
        return SX_RUN_EXIT_INTERNAL;
    }
    r->fd_limit = (int)need;
    return 0;
}

/* ---------------------------------------------------------------- signals */

static void sx_run_on_signal(int sig)
{
    int saved = errno;
    unsigned char b = (unsigned char)sig;

    /* A child between fork() and its signal reset must not speak for us. */
    if (getpid() == sx_run_self)
        (void)!write(sx_run_sigpipe[1], &b, 1);
    errno = saved;
}

static const int sx_run_signals[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP};
#define SX_RUN_NSIGNALS (sizeof(sx_run_signals) / sizeof(sx_run_signals[0]))

int sx_run_signals_init(void)
{
    struct sigaction sa;

    sx_run_self = getpid();
    if (pipe2(sx_run_sigpipe, O_CLOEXEC | O_NONBLOCK) != 0)
        return -1;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = sx_run_on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    for (size_t i = 0; i < SX_RUN_NSIGNALS; i++) {
        if (sigaction(sx_run_signals[i], &sa, NULL) != 0)
            return -1;
    }
    /* A reader that went away is seen as EPIPE on the write instead. */
    sa.sa_handler = SIG_IGN;
    sa.sa_flags = 0;
    return sigaction(SIGPIPE, &sa, NULL);
}

void sx_run_signals_reset(void)
{
    struct sigaction sa;
    sigset_t none;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < SX_RUN_NSIGNALS; i++)
        sigaction(sx_run_signals[i], &sa, NULL);
    sigaction(SIGPIPE, &sa, NULL); /* ignored dispositions survive exec */
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
}

/* ------------------------------------------------------------------ spawn */

/* What a child executes: the program, or for a remote rank its agent. */
typedef struct sx_run_exec {
    const char *path;
    char *const *argv;
    char *const *sh_argv; /* for a script without #!; NULL: none */
    int in_fd;            /* its standard input */
} sx_run_exec_t;

/*
 * The child's side of fork(): async-signal-safe calls only, because the
 * rendezvous server's thread may hold locks (malloc's among them) that no
 * thread of the child would ever release.
 */
static void sx_run_child(sx_run_t *r, const sx_run_exec_t *x, pid_t parent, int out_w, int err_w,
                         int exec_w)
{
    sx_run_signals_reset();
    setpgid(0, 0);
    /* The death signal is tied to the thread that forked us: the main
     * thread, which lives as long as sx_run. If sx_run died before the
     * prctl, the signal will never come: check, and go. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
        _exit(SX_RUN_EXIT_INTERNAL);

    if (dup2(x->in_fd, 0) < 0 || dup2(out_w, 1) < 0 || dup2(err_w, 2) < 0) {
        int e = errno;
        (void)!write(exec_w, &e, sizeof(e));
        _exit(SX_RUN_EXIT_INTERNAL);
    }
    /* The rank gets standard input, output and error only: not the
     * rendezvous server's sockets, nor another rank's pipes (nor the write
     * end of another agent's standard input, which would keep it from
     * ever reaching end of file). */
    if (close_range(3, ~0u, CLOSE_RANGE_CLOEXEC) != 0) {
        for (int fd = 3; fd < r->fd_limit; fd++)
            fcntl(fd, F_SETFD, FD_CLOEXEC);
    }
    execve(x->path, x->argv, r->envp);
    if (errno == ENOEXEC && x->sh_argv != NULL)
        execve("/bin/sh", x->sh_argv, r->envp);
    int e = errno;
    (void)!write(exec_w, &e, sizeof(e));
    _exit(e == ENOENT ? SX_RUN_EXIT_NOTFOUND : SX_RUN_EXIT_NOEXEC);
}

/* Rank @p rank's host when it is started through the agent; NULL when it
 * starts here. */
static const sx_run_host_t *sx_run_remote_host(const sx_run_t *r, unsigned rank)
{
    if (r->rank_host == NULL)
        return NULL;
    const sx_run_host_t *h = &r->hosts[r->rank_host[rank]];
    return h->local ? NULL : h;
}

/* Whether ranks @p a and @p b start on the same host: both here, or on
 * hosts of the same name (a name may be listed more than once). */
static bool sx_run_same_host(const sx_run_t *r, unsigned a, unsigned b)
{
    if (r->rank_host == NULL)
        return true;
    const sx_run_host_t *ha = &r->hosts[r->rank_host[a]], *hb = &r->hosts[r->rank_host[b]];
    return (ha->local && hb->local) || strcmp(ha->name, hb->name) == 0;
}

/* Rank @p rank's own variables: SX_RUN_RANK, and its index among the ranks
 * on its host and their number (SX_RUN_LOCAL_RANK, _LOCAL_SIZE). */
static void sx_run_rank_env(sx_run_t *r, unsigned rank)
{
    unsigned local_rank = 0, local_size = 0;

    for (unsigned i = 0; i < r->n; i++) {
        if (!sx_run_same_host(r, rank, i))
            continue;
        local_rank += i < rank;
        local_size++;
    }
    snprintf(r->env_strings[2], SX_RUN_ENV_CAP, "%s=%u", SX_RUN_ENV_RANK, rank);
    snprintf(r->env_strings[3], SX_RUN_ENV_CAP, "%s=%u", SX_RUN_ENV_LOCAL_RANK, local_rank);
    snprintf(r->env_strings[4], SX_RUN_ENV_CAP, "%s=%u", SX_RUN_ENV_LOCAL_SIZE, local_size);
}

static int sx_run_spawn(sx_run_t *r, unsigned rank)
{
    sx_run_rank_t *rk = &r->ranks[rank];
    const sx_run_host_t *host = sx_run_remote_host(r, rank);
    int outp[2], errp[2], execp[2], inp[2] = {-1, -1};
    sigset_t all, old;
    sx_run_exec_t x = {
        .path = r->path, .argv = r->prog_argv, .sh_argv = r->sh_argv, .in_fd = r->devnull};
    char **agent_argv = NULL;

    int err;
    if (pipe2(outp, O_CLOEXEC) != 0) {
        err = errno;
        goto fail;
    }
    if (pipe2(errp, O_CLOEXEC) != 0) {
        err = errno;
        goto fail_out;
    }
    if (pipe2(execp, O_CLOEXEC) != 0) {
        err = errno;
        goto fail_err;
    }
    sx_run_rank_env(r, rank);
    if (host != NULL) {
        sx_run_remote_cmd_t cmd = {
            .agent = r->agent,
            .host = host->name,
            .self = r->self,
            .cwd = r->cwd,
            .rank = rank,
            .env = r->remote_env,
            .path = r->path,
            .argv = r->prog_argv,
        };
        err = ENOMEM;
        if ((agent_argv = sx_run_remote_argv(&cmd)) == NULL || pipe2(inp, O_CLOEXEC) != 0) {
            err = agent_argv == NULL ? ENOMEM : errno;
            sx_run_words_free(agent_argv);
            close(execp[0]);
            close(execp[1]);
            goto fail_err;
        }
        x = (sx_run_exec_t){.path = r->agent_path, .argv = agent_argv, .in_fd = inp[0]};
    }

    /* No handler may run in the child before it resets them. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0)
        sx_run_child(r, &x, parent, outp[1], errp[1], execp[1]);
    err = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    sx_run_words_free(agent_argv);
    close(outp[1]);
    close(errp[1]);
    close(execp[1]);
    if (inp[0] >= 0)
        close(inp[0]);
    if (pid < 0) {
        close(outp[0]);
        close(errp[0]);
        close(execp[0]);
        if (inp[1] >= 0)
            close(inp[1]);
        goto fail;
    }
    /* Both sides call setpgid, so the group exists before either goes on
     * (the parent's may fail harmlessly once the child has exec'd). */
    setpgid(pid, pid);
    rk->pid = pid;
    rk->group_alive = true;
    rk->out.fd = outp[0];
    rk->err.fd = errp[0];
    rk->in_fd = inp[1];
    /* The remote side tells "sx_run closed my input" from "the agent never
     * forwarded it" by this byte (a pipe's buffer takes it at once). */
    if (rk->in_fd >= 0)
        (void)!write(rk->in_fd, "+", 1);

    /* The exec pipe closes on a successful exec; otherwise it carries the
     * child's errno. */
    int child_errno = 0;
    ssize_t n;
    do
        n = read(execp[0], &child_errno, sizeof(child_errno));
    while (n < 0 && errno == EINTR);
    close(execp[0]);
    if (n > 0) {
        if (host != NULL)
            sx_run_msg("rank %u: cannot execute the agent %s: %s", rank, r->agent[0],
                       strerror(child_errno));
        else
            sx_run_msg("rank %u: cannot execute %s: %s", rank, r->prog_argv[0],
                       strerror(child_errno));
        return child_errno == ENOENT ? SX_RUN_EXIT_NOTFOUND : SX_RUN_EXIT_NOEXEC;
    }
    return 0;

fail_err:
    close(errp[0]);
    close(errp[1]);
fail_out:
    close(outp[0]);
    close(outp[1]);
fail:
    sx_run_msg("cannot start rank %u: %s", rank, strerror(err));
    return SX_RUN_EXIT_INTERNAL;
}

/* Closes the remote ranks' agents' standard input: their remote sides
 * stop the ranks. */
static void sx_run_close_inputs(sx_run_t *r)
{
    for (unsigned i = 0; i < r->n; i++) {
        if (r->ranks[i].in_fd >= 0) {
            close(r->ranks[i].in_fd);
            r->ranks[i].in_fd = -1;
        }
    }
}

/* ----------------------------------------------------------------- output */

static void sx_run_write(sx_run_t *r, int dest, struct iovec *iov, int cnt)
{
    if (r->dest_dead[dest])
        return;
    while (cnt > 0) {
        ssize_t w = writev(dest, iov, cnt);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0) {
            /* Nobody reads our output any more (EPIPE), or it cannot be
             * written: drop it, and keep the job running. */
            r->dest_dead[dest] = true;
            return;
        }
        size_t left = (size_t)w;
        while (cnt > 0 && left >= iov->iov_len) {
            left -= iov->iov_len;
            iov++;
            cnt--;
        }
        if (cnt > 0) {
            iov->iov_base = (char *)iov->iov_base + left;
            iov->iov_len -= left;
        }
    }
}

/* Writes @p len bytes of @p data as (part of) a line of @p rank:
 * the prefix first unless a piece of this line already went out. */
static void sx_run_emit(sx_run_t *r, unsigned rank, sx_run_stream_t *s, const char *data,
                        size_t len, bool add_newline)
{
    char prefix[24];
    struct iovec iov[3];
    int cnt = 0;

    int plen = snprintf(prefix, sizeof(prefix), "[%u] ", rank);
    if (!s->midline && !r->no_prefix) {
        iov[cnt].iov_base = prefix;
        iov[cnt++].iov_len = (size_t)plen;
    }
    if (len > 0) {
        iov[cnt].iov_base = (void *)data;
        iov[cnt++].iov_len = len;
    }
    if (add_newline) {
        iov[cnt].iov_base = "\n";
        iov[cnt++].iov_len = 1;
    }
    sx_run_write(r, s->dest, iov, cnt);
}

/* Forwards every complete line in the buffer; keeps the rest, unless it
 * has reached SX_RUN_LINE_MAX or @p eof. */
static void sx_run_flush_lines(sx_run_t *r, unsigned rank, sx_run_stream_t *s, bool eof)
{
    size_t start = 0;

    for (;;) {
        char *nl = memchr(s->buf + start, '\n', s->len - start);
        if (nl == NULL)
            break;
        size_t end = (size_t)(nl - s->buf) + 1;
        sx_run_emit(r, rank, s, s->buf + start, end - start, false);
        s->midline = false;
        start = end;
    }
    size_t rest = s->len - start;
    if (rest > 0 && (eof || rest >= SX_RUN_LINE_MAX)) {
        sx_run_emit(r, rank, s, s->buf + start, rest, eof);
        s->midline = !eof;
        start = s->len;
    } else if (eof && s->midline) {
        sx_run_emit(r, rank, s, NULL, 0, true);
        s->midline = false;
    }
    if (start > 0) {
        memmove(s->buf, s->buf + start, s->len - start);
        s->len -= start;
    }
}

static void sx_run_stream_close(sx_run_t *r, unsigned rank, sx_run_stream_t *s)
{
    sx_run_flush_lines(r, rank, s, true);
    close(s->fd);
    s->fd = -1;
    free(s->buf);
    s->buf = NULL;
    s->len = s->cap = 0;
}

/* Reads what the pipe has (one read; poll tells us when there is more). */
static void sx_run_stream_read(sx_run_t *r, unsigned rank, sx_run_stream_t *s)
{
    if (s->cap - s->len < SX_RUN_READ_MAX) {
        size_t cap = s->len + SX_RUN_READ_MAX;
        char *buf = realloc(s->buf, cap);
        if (buf == NULL) {
            /* Cannot grow: forward what we have as a piece of a line. */
            sx_run_emit(r, rank, s, s->buf, s->len, false);
            s->midline = s->len > 0 || s->midline;
            s->len = 0;
            if (s->cap < SX_RUN_READ_MAX)
                return;
        } else {
            s->buf = buf;
            s->cap = cap;
        }
    }
    ssize_t n = read(s->fd, s->buf + s->len, SX_RUN_READ_MAX);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return;
    if (n <= 0) {
        sx_run_stream_close(r, rank, s);
        return;
    }
    s->len += (size_t)n;
    sx_run_flush_lines(r, rank, s, false);
}

/* --------------------------------------------------------------- shutdown */

static void sx_run_begin_shutdown(sx_run_t *r, int exit_code)
{
    if (r->exit_code < 0)
        r->exit_code = exit_code;
    if (r->shutting_down)
        return;
    r->shutting_down = true;
    /* Ranks that go now are stopped, not gone: no more rendezvous
     * verdicts on them. */
    sx_rdv_server_quiesce(r->rdv);
    r->kill_deadline_ns = sx_run_now_ns() + (uint64_t)SX_RUN_GRACE_MS * 1000000u;
    /* A remote side stops its rank at end of file, even where our SIGTERM
     * to the agent cannot reach it (ssh's remote end). */
    sx_run_close_inputs(r);
}

/* Children hang off the thread that forked them or that an orphan was
 * given to, so every thread's list is read. */
void sx_run_kill_orphans(bool (*spare)(void *arg, pid_t pid), void *arg, int sig)
{
    DIR *tasks = opendir("/proc/self/task");

    if (tasks == NULL)
        return;
    struct dirent *de;
    while ((de = readdir(tasks)) != NULL) {
        char fname[300];
        if (de->d_name[0] == '.')
            continue;
        snprintf(fname, sizeof(fname), "/proc/self/task/%s/children", de->d_name);
        FILE *f = fopen(fname, "re");
        if (f == NULL)
            continue;
        long pid;
        while (fscanf(f, "%ld", &pid) == 1) {
            /* Not reaped yet, so the number cannot have been reused. */
            if (!spare(arg, (pid_t)pid))
                kill((pid_t)pid, sig);
        }
        fclose(f);
    }
    closedir(tasks);
}

static bool sx_run_is_rank(void *arg, pid_t pid)
{
    const sx_run_t *r = arg;

    for (unsigned i = 0; i < r->n; i++) {
        if (r->ranks[i].pid == pid)
            return true;
    }
    return false;
}

static void sx_run_kill_all(sx_run_t *r, int sig)
{
    for (unsigned i = 0; i < r->n; i++) {
        sx_run_rank_t *rk = &r->ranks[i];
        if (rk->pid <= 0 || !rk->group_alive)
            continue;
        if (kill(-rk->pid, sig) != 0 && errno == ESRCH)
            rk->group_alive = false;
    }
    sx_run_kill_orphans(sx_run_is_rank, r, sig);
}

const char *sx_run_signame(int sig)
{
    const char *s = sigabbrev_np(sig);
    return s != NULL ? s : "?";
}

/* Reaps every child that has ended; notes the ranks'. Returns false once
 * sx_run has no child left at all. */
static bool sx_run_reap(sx_run_t *r)
{
    for (;;) {
        int st;
        pid_t pid = waitpid(-1, &st, WNOHANG);
        if (pid < 0 && errno == EINTR)
            continue;
        if (pid < 0)
            return false; /* ECHILD */
        if (pid == 0)
            return true;
        for (unsigned i = 0; i < r->n; i++) {
            sx_run_rank_t *rk = &r->ranks[i];
            if (rk->pid != pid)
                continue;
            rk->reaped = true;
            rk->status = st;
            r->reaped++;
            if (rk->in_fd >= 0) {
                close(rk->in_fd);
                rk->in_fd = -1;
            }
            int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            sx_rdv_server_rank_ended(r->rdv, i);
            const sx_run_host_t *host = sx_run_remote_host(r, i);
            if (code != 0 && !r->shutting_down && host != NULL) {
                /* The agent's status is the remote side's, which is the
                 * rank's (a signal it names on its standard error). */
                if (WIFEXITED(st))
                    sx_run_msg("rank %u (on %s, agent pid %d) exited with status %d%s; stopping "
                               "the job",
                               i, host->name, (int)pid, code,
                               code == 255 ? " (as an agent does when it cannot reach the host)"
                                           : "");
                else
                    sx_run_msg("rank %u (on %s): its agent (pid %d) was killed by signal %d "
                               "(SIG%s); stopping the job",
                               i, host->name, (int)pid, WTERMSIG(st), sx_run_signame(WTERMSIG(st)));
                sx_run_begin_shutdown(r, code);
            } else if (code != 0 && !r->shutting_down) {
                if (WIFEXITED(st))
                    sx_run_msg("rank %u (pid %d) exited with status %d; stopping the job", i,
                               (int)pid, code);
                else
                    sx_run_msg("rank %u (pid %d) was killed by signal %d (SIG%s%s); stopping "
                               "the job",
                               i, (int)pid, WTERMSIG(st), sx_run_signame(WTERMSIG(st)),
                               WCOREDUMP(st) ? ", core dumped" : "");
                sx_run_begin_shutdown(r, code);
            }
            break;
        }
    }
}

/* --------------------------------------------------------------- main loop */

static void sx_run_on_signals(sx_run_t *r)
{
    unsigned char sigs[64];
    ssize_t n;

    while ((n = read(sx_run_sigpipe[0], sigs, sizeof(sigs))) > 0) {
        for (ssize_t i = 0; i < n; i++) {
            int sig = sigs[i];
            if (sig == SIGCHLD)
                continue; /* the loop reaps after every wake-up */
            if (r->got_signal != 0 || r->shutting_down) {
                /* A second request, or one during a shutdown: no more
                 * grace. */
                if (r->got_signal == 0)
                    r->got_signal = sig;
                r->kill_deadline_ns = sx_run_now_ns();
                continue;
            }
            r->got_signal = sig;
            sx_run_msg("got SIG%s; stopping the job", sx_run_signame(sig));
            sx_run_begin_shutdown(r, 128 + sig);
        }
    }
}

static bool sx_run_streams_open(const sx_run_t *r)
{
    for (unsigned i = 0; i < r->n; i++) {
        if (r->ranks[i].out.fd >= 0 || r->ranks[i].err.fd >= 0)
            return true;
    }
    return false;
}

static void sx_run_loop(sx_run_t *r)
{
    struct pollfd *pfds = r->pfds;
    uint64_t deadline_ns = 0;
    bool children = true;

    if (r->timeout_s > 0)
        deadline_ns = sx_run_now_ns() + (uint64_t)(r->timeout_s * 1e9);

    for (;;) {
        children = sx_run_reap(r);
        uint64_t now = sx_run_now_ns();

        if (!r->shutting_down) {
            /* Ranks that ended without a word are given up on after a
             * grace (rendezvous.h). */
            sx_rdv_server_tick(r->rdv);
            int st = sx_rdv_server_status(r->rdv);
            uint32_t lost = sx_rdv_server_lost_rank(r->rdv);
            if (st == SX_ERR_PEER_UNREACHABLE && lost < r->n) {
                /* A rank left while others wait for it. One that failed
                 * has stopped the job with its status already (reaped
                 * above: its connection closed first); one still running
                 * (it closed its engine) is waited for, since the others
                 * have been told and may stop the job themselves; the
                 * timeout still holds meanwhile. */
                if (r->ranks[lost].reaped) {
                    sx_run_msg("rank %u exited with status 0 while other ranks waited for it in "
                               "the rendezvous; stopping the job",
                               lost);
                    sx_run_begin_shutdown(r, SX_RUN_EXIT_LEFT);
                }
            } else if (st != SX_OK) {
                sx_run_msg("the rendezvous failed (%s); stopping the job", sx_strerror(st));
                sx_run_begin_shutdown(r, SX_RUN_EXIT_INTERNAL);
            }
            if (r->shutting_down) {
                /* decided above */
            } else if (deadline_ns != 0 && now >= deadline_ns) {
                sx_run_msg("timeout: the job did not end within %g s; stopping it", r->timeout_s);
                sx_run_begin_shutdown(r, SX_RUN_EXIT_TIMEOUT);
            } else if (r->reaped == r->n) {
                if (children)
                    sx_run_msg("every rank has ended; stopping the processes they left behind");
                sx_run_begin_shutdown(r, 0);
            }
        }
        if (r->shutting_down && children) {
            if (!r->term_sent) {
                r->term_sent = true;
                sx_run_kill_all(r, SIGTERM);
            }
            if (!r->killed && now >= r->kill_deadline_ns) {
                r->killed = true;
                r->give_up_ns = now + (uint64_t)SX_RUN_GIVE_UP_MS * 1000000u;
            }
            if (r->killed) {
                /* Again on every round: orphans re-parented to us since. */
                sx_run_kill_all(r, SIGKILL);
                if (now >= r->give_up_ns) {
                    sx_run_msg("processes of the job survive SIGKILL for %d s; giving up on them",
                               SX_RUN_GIVE_UP_MS / 1000);
                    break;
                }
            }
        }
        if (!children && !sx_run_streams_open(r))
            break;
        nfds_t n = 0;
        pfds[n].fd = sx_run_sigpipe[0];
        pfds[n++].events = POLLIN;
        for (unsigned i = 0; i < r->n; i++) {
            sx_run_stream_t *ss[2] = {&r->ranks[i].out, &r->ranks[i].err};
            for (int j = 0; j < 2; j++) {
                if (ss[j]->fd < 0)
                    continue;
                pfds[n].fd = ss[j]->fd;
                pfds[n].events = POLLIN;
                r->pfd_stream[n] = ss[j];
                r->pfd_rank[n++] = i;
            }
        }
        /* Wake for the next deadline; and now and then for the rendezvous
         * server, whose failures come without a file descriptor. */
        int timeout_ms = -1;
        if (children) {
            uint64_t wake = now + (uint64_t)SX_RUN_RDV_CHECK_MS * 1000000u;
            if (!r->shutting_down && deadline_ns != 0 && deadline_ns < wake)
                wake = deadline_ns;
            if (r->shutting_down && !r->killed && r->kill_deadline_ns < wake)
                wake = r->kill_deadline_ns;
            timeout_ms = wake > now ? (int)((wake - now + 999999) / 1000000) : 0;
        }
        int rc = poll(pfds, n, timeout_ms);
        if (rc < 0 && errno != EINTR) {
            sx_run_msg("poll: %s", strerror(errno));
            sx_run_begin_shutdown(r, SX_RUN_EXIT_INTERNAL);
            r->kill_deadline_ns = now;
            continue;
        }
        if (rc <= 0)
            continue;
        if (pfds[0].revents != 0)
            sx_run_on_signals(r);
        for (nfds_t k = 1; k < n; k++) {
            if (pfds[k].revents != 0)
                sx_run_stream_read(r, r->pfd_rank[k], r->pfd_stream[k]);
        }
    }
}

/* -------------------------------------------------------------------- main */

static void sx_run_free(sx_run_t *r)
{
    if (r->ranks != NULL) {
        for (unsigned i = 0; i < r->n; i++) {
            if (r->ranks[i].out.fd >= 0)
                close(r->ranks[i].out.fd);
            if (r->ranks[i].err.fd >= 0)
                close(r->ranks[i].err.fd);
            if (r->ranks[i].in_fd >= 0)
                close(r->ranks[i].in_fd);
            free(r->ranks[i].out.buf);
            free(r->ranks[i].err.buf);
        }
    }
    free(r->ranks);
    free(r->pfds);
    free(r->pfd_stream);
    free(r->pfd_rank);
    if (r->rdv != NULL)
        sx_rdv_server_close(r->rdv);
    for (size_t j = 0; j < sizeof(r->env_strings) / sizeof(r->env_strings[0]); j++)
        free(r->env_strings[j]);
    free(r->envp);
    free(r->remote_env);
    for (unsigned x = 0; r->xenv_strings != NULL && x < r->nxenv; x++)
        free(r->xenv_strings[x]);
    free(r->xenv_strings);
    free(r->xenv);
    free(r->sh_argv);
    free(r->path);
    sx_run_hosts_free(r->hosts, r->nhosts);
    free(r->rank_host);
    sx_run_words_free(r->agent);
    free(r->agent_path);
    free(r->self);
    free(r->cwd);
    if (r->devnull >= 0)
        close(r->devnull);
}

/* Standard input, output and error must be open, or the pipes we create
 * could take their numbers and the ranks would write into each other. */
static void sx_run_fix_stdio(void)
{
    for (int fd = 0; fd < 3; fd++) {
        if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
            int nfd = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
            if (nfd >= 0 && nfd != fd) {
                dup2(nfd, fd);
                close(nfd);
            }
        }
    }
}

int main(int argc, char **argv)
{
    sx_run_t run;
    sx_run_t *r = &run;
    char addr[SX_OOB_ADDR_MAX];
    int rc;

    memset(r, 0, sizeof(*r));
    r->exit_code = -1;
    r->devnull = -1;
    sx_run_fix_stdio();
    if (argc > 1 && strcmp(argv[1], "--remote-child") == 0)
        return sx_run_remote_child_main(argc, argv);

    rc = sx_run_parse_args(r, argc, argv);
    if (rc != 0) {
        sx_run_free(r);
        return rc < 0 ? 0 : rc;
    }
    rc = sx_run_find(r->prog_argv[0], "", &r->path);
    if (rc == 0)
        rc = sx_run_hosts_setup(r);
    if (rc == 0)
        rc = sx_run_fd_limit(r);
    if (rc != 0) {
        sx_run_free(r);
        return rc;
    }

    /* Descendants whose parent dies come to us rather than to init, so
     * that the shutdown finds and kills them too. */
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
        sx_run_msg("warning: cannot become a child subreaper: %s", strerror(errno));
    if (sx_run_signals_init() != 0) {
        sx_run_msg("cannot set up signal handling: %s", strerror(errno));
        sx_run_free(r);
        return SX_RUN_EXIT_INTERNAL;
    }

    sx_log_init_from_env();
    r->devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    r->ranks = calloc(r->n, sizeof(*r->ranks));
    for (unsigned i = 0; r->ranks != NULL && i < r->n; i++) {
        r->ranks[i].out = (sx_run_stream_t){.fd = -1, .dest = 1};
        r->ranks[i].err = (sx_run_stream_t){.fd = -1, .dest = 2};
        r->ranks[i].in_fd = -1;
    }
    r->pfds = calloc(2 * (size_t)r->n + 1, sizeof(*r->pfds));
    r->pfd_stream = calloc(2 * (size_t)r->n + 1, sizeof(*r->pfd_stream));
    r->pfd_rank = calloc(2 * (size_t)r->n + 1, sizeof(*r->pfd_rank));
    if (r->ranks == NULL || r->pfds == NULL || r->pfd_stream == NULL || r->pfd_rank == NULL) {
        sx_run_msg("out of memory");
        sx_run_free(r);
        return SX_RUN_EXIT_INTERNAL;
    }
    if (r->devnull < 0) {
        sx_run_msg("cannot open /dev/null: %s", strerror(errno));
        sx_run_free(r);
        return SX_RUN_EXIT_INTERNAL;
    }

    /* Without -H, 127.0.0.1; with it, an address the other hosts reach. */
    char bind_host[SX_OOB_ADDR_MAX];
    uint16_t bind_port;
    rc = sx_run_rdv_bind(r->hosts, r->nhosts, r->rdv_opt, bind_host, sizeof(bind_host), &bind_port);
    if (rc != 0) {
        sx_run_free(r);
        return rc;
    }
    rc = sx_rdv_server_open_at(r->n, bind_host, bind_port, &r->rdv);
    if (rc == SX_OK)
        rc = sx_rdv_server_address(r->rdv, addr, sizeof(addr));
    if (rc != SX_OK) {
        sx_run_msg("cannot open the rendezvous server: %s", sx_strerror(rc));
        sx_run_free(r);
        return SX_RUN_EXIT_INTERNAL;
    }
    rc = sx_run_build_env(r, addr);
    if (rc != 0) {
        sx_run_msg("out of memory");
        sx_run_free(r);
        return rc;
    }

    for (unsigned i = 0; i < r->n && !r->shutting_down; i++) {
        rc = sx_run_spawn(r, i);
        if (rc != 0) {
            sx_run_begin_shutdown(r, rc);
            break;
        }
        /* A signal that came while we were starting ranks stops the rest. */
        sx_run_on_signals(r);
    }
    sx_run_loop(r);

    int code = r->exit_code < 0 ? 0 : r->exit_code;
    int sig = r->got_signal;
    sx_run_free(r);
    if (sig != 0) {
        /* Die of the same signal, so that a shell sees why we stopped. */
        signal(sig, SIG_DFL);
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, sig);
        pthread_sigmask(SIG_UNBLOCK, &set, NULL);
        raise(sig);
    }
    return code;
}
