/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * sx_run's ranks on other hosts (-H). For each, sx_run runs the launcher
 * agent (ssh by default) as
 *
 *   AGENT... HOST SX_RUN --remote-child 1 HOST RANK CWD NENV ENV... PATH ARGV...
 *
 * where SX_RUN is sx_run's own absolute path, which must name sx_run on
 * the other host too (as Open MPI's orted must be there): the rank is
 * started by a copy of sx_run on its host, which is what lets it be
 * stopped. Killing an ssh client does not kill what it started; this
 * remote side does, when its standard input (a pipe from sx_run, which the
 * agent forwards; sx_run writes one byte to it at the start and closes it
 * to stop the job) reaches end of file, or when it gets SIGTERM, SIGHUP or
 * SIGINT. Then it stops the rank as sx_run stops a local one: SIGTERM to
 * the rank's process group and to the processes re-parented to it (it is a
 * child subreaper), SIGKILL after SX_RUN_GRACE_MS; the rank has SIGKILL as
 * its parent-death signal, so it also dies with this side. When the rank
 * ends on its own, what it left behind is stopped the same way, and this
 * side exits with the rank's status (128+S for a signal S, which it names
 * on standard error, since an agent passes on exit codes only).
 *
 * The words after SX_RUN are encoded so that they arrive unchanged through
 * any agent: one that runs its arguments as they are (a script doing
 * `exec "$@"`, `ip netns exec`) and one that joins them with spaces for a
 * remote shell to split (ssh). Letters, digits and _-./:,+@= stand for
 * themselves (except a leading '='), every other byte is %XX, and the empty
 * string is a lone %: no word has a character a shell would expand, split
 * or quote. SX_RUN itself is not encoded (the shell must find it), so it
 * must be plain: sx_run refuses to use an agent otherwise.
 *
 * The remote side is single-threaded: a poll() over its standard input and
 * the signal self-pipe, reaping after every wake-up.
 */
#include "sx_run_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

/* The version of the words after --remote-child: a remote sx_run of
 * another version refuses them rather than misreading them. */
#define SX_RUN_REMOTE_VERSION "1"
/* How often a stopping remote side looks whether the rank's process group
 * is gone: its members need not be our children, so no SIGCHLD says so. */
#define SX_RUN_REMOTE_TICK_MS 50

static bool sx_run_char_plain(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           strchr("_-./:,+@=", c) != NULL;
}

bool sx_run_word_plain(const char *s)
{
    if (s[0] == '\0' || s[0] == '=')
        return false;
    for (; *s != '\0'; s++) {
        if (!sx_run_char_plain(*s))
            return false;
    }
    return true;
}

static char *sx_run_word_encode(const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    char *out = malloc(3 * strlen(s) + 2);

    if (out == NULL)
        return NULL;
    if (*s == '\0')
        return strcpy(out, "%");
    char *o = out;
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++) {
        /* A leading '=' is zsh's command-path expansion. */
        if (sx_run_char_plain((char)*p) && !(*p == '=' && p == (const unsigned char *)s)) {
            *o++ = (char)*p;
        } else {
            *o++ = '%';
            *o++ = hex[*p >> 4];
            *o++ = hex[*p & 15];
        }
    }
    *o = '\0';
    return out;
}

static int sx_run_hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* Decodes in place; false for a word no sx_run would have written. */
static bool sx_run_word_decode(char *s)
{
    char *o = s;

    if (strcmp(s, "%") == 0) {
        *s = '\0';
        return true;
    }
    for (const char *p = s; *p != '\0'; p++) {
        if (*p != '%') {
            *o++ = *p;
            continue;
        }
        int hi = sx_run_hexval(p[1]);
        int lo = hi < 0 ? -1 : sx_run_hexval(p[2]);
        if (lo < 0 || (hi == 0 && lo == 0))
            return false;
        *o++ = (char)(hi << 4 | lo);
        p += 2;
    }
    *o = '\0';
    return true;
}

char **sx_run_remote_argv(const sx_run_remote_cmd_t *c)
{
    size_t nagent = 0, nenv = 0, nargv = 0;

    while (c->agent[nagent] != NULL)
        nagent++;
    while (c->env[nenv] != NULL)
        nenv++;
    while (c->argv[nargv] != NULL)
        nargv++;
    size_t total = nagent + 8 + nenv + 1 + nargv + 1;
    char **v = calloc(total, sizeof(char *));
    if (v == NULL)
        return NULL;
    size_t k = 0;
    bool ok = true;
    char num[24];
    for (size_t i = 0; i < nagent; i++)
        ok = ok && (v[k++] = strdup(c->agent[i])) != NULL;
    ok = ok && (v[k++] = strdup(c->host)) != NULL;
    ok = ok && (v[k++] = strdup(c->self)) != NULL;
    ok = ok && (v[k++] = strdup("--remote-child")) != NULL;
    ok = ok && (v[k++] = strdup(SX_RUN_REMOTE_VERSION)) != NULL;
    ok = ok && (v[k++] = sx_run_word_encode(c->host)) != NULL;
    snprintf(num, sizeof(num), "%u", c->rank);
    ok = ok && (v[k++] = strdup(num)) != NULL;
    ok = ok && (v[k++] = sx_run_word_encode(c->cwd)) != NULL;
    snprintf(num, sizeof(num), "%zu", nenv);
    ok = ok && (v[k++] = strdup(num)) != NULL;
    for (size_t i = 0; i < nenv; i++)
        ok = ok && (v[k++] = sx_run_word_encode(c->env[i])) != NULL;
    ok = ok && (v[k++] = sx_run_word_encode(c->path)) != NULL;
    for (size_t i = 0; i < nargv; i++)
        ok = ok && (v[k++] = sx_run_word_encode(c->argv[i])) != NULL;
    if (!ok) {
        sx_run_words_free(v);
        return NULL;
    }
    return v;
}

/* ---------------------------------------------------------- the remote side */

typedef struct sx_run_rc {
    const char *host;
    unsigned rank;
    pid_t pid; /* the rank, leader of its own process group */
    bool reaped;
    int status;
    bool stdin_open;
    bool hello; /* sx_run's byte came through standard input */
    bool stopping;
    bool signaled; /* a stop signal came (stdin's end is not one) */
    bool term_sent;
    bool killed;
    uint64_t kill_at_ns;
    uint64_t give_up_ns;
} sx_run_rc_t;

static bool sx_run_rc_is_rank(void *arg, pid_t pid)
{
    return ((sx_run_rc_t *)arg)->pid == pid;
}

static void sx_run_rc_stop(sx_run_rc_t *c, const char *why)
{
    if (c->stopping)
        return;
    if (why != NULL && !c->reaped)
        sx_run_msg("%s: stopping rank %u: %s", c->host, c->rank, why);
    c->stopping = true;
    c->kill_at_ns = sx_run_now_ns() + (uint64_t)SX_RUN_GRACE_MS * 1000000u;
}

static void sx_run_rc_kill(sx_run_rc_t *c, int sig)
{
    if (c->pid > 0)
        kill(-c->pid, sig);
    sx_run_kill_orphans(sx_run_rc_is_rank, c, sig);
}

/* Reaps what has ended; false once we have no child left. */
static bool sx_run_rc_reap(sx_run_rc_t *c)
{
    for (;;) {
        int st;
        pid_t pid = waitpid(-1, &st, WNOHANG);
        if (pid < 0 && errno == EINTR)
            continue;
        if (pid <= 0)
            return pid == 0;
        if (pid == c->pid) {
            c->reaped = true;
            c->status = st;
            if (WIFSIGNALED(st) && !c->term_sent)
                sx_run_msg("%s: rank %u (pid %d) was killed by signal %d (SIG%s%s)", c->host,
                           c->rank, (int)pid, WTERMSIG(st), sx_run_signame(WTERMSIG(st)),
                           WCOREDUMP(st) ? ", core dumped" : "");
            /* What the rank left behind goes now: once we exit, nothing
             * on this host would stop it. */
            sx_run_rc_stop(c, NULL);
        }
    }
}

static void sx_run_rc_on_signals(sx_run_rc_t *c)
{
    unsigned char sigs[64];
    ssize_t n;

    while ((n = read(sx_run_sigpipe[0], sigs, sizeof(sigs))) > 0) {
        for (ssize_t i = 0; i < n; i++) {
            if (sigs[i] == SIGCHLD)
                continue;
            if (c->signaled) {
                c->kill_at_ns = sx_run_now_ns(); /* a second signal: no grace */
                continue;
            }
            /* Quietly: it is sx_run's shutdown (SIGTERM to the agent's
             * group), which sx_run explains, or the agent's end. The same
             * shutdown also closes our standard input, in either order:
             * only a second signal skips the grace (it had taken every
             * remote rank's grace away, and with it what the rank still
             * wrote on its way out). */
            c->signaled = true;
            sx_run_rc_stop(c, NULL);
        }
    }
}

/* Starts the rank: its own process group, /dev/null as standard input,
 * our standard output and error (the agent's), SIGKILL when we die.
 * Returns 0 or the status to exit with. */
static int sx_run_rc_spawn(sx_run_rc_t *c, const char *path, char **argv)
{
    int execp[2];
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    extern char **environ;

    if (devnull < 0 || pipe2(execp, O_CLOEXEC) != 0) {
        sx_run_msg("%s: rank %u: cannot start: %s", c->host, c->rank, strerror(errno));
        if (devnull >= 0)
            close(devnull);
        return SX_RUN_EXIT_INTERNAL;
    }
    size_t argc = 0;
    while (argv[argc] != NULL)
        argc++;
    char **sh_argv = calloc(argc + 2, sizeof(char *));
    if (sh_argv == NULL) {
        sx_run_msg("out of memory");
        close(devnull);
        close(execp[0]);
        close(execp[1]);
        return SX_RUN_EXIT_INTERNAL;
    }
    sh_argv[0] = "/bin/sh";
    sh_argv[1] = (char *)path;
    for (size_t j = 1; j < argc; j++)
        sh_argv[j + 1] = argv[j];

    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        sx_run_signals_reset();
        setpgid(0, 0);
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
            _exit(SX_RUN_EXIT_INTERNAL);
        if (dup2(devnull, 0) < 0)
            _exit(SX_RUN_EXIT_INTERNAL);
        /* Nothing but standard input, output and error reaches the rank
         * (whatever the agent's shell left open, too). */
        close_range(3, ~0u, CLOSE_RANGE_CLOEXEC);
        execve(path, argv, environ);
        if (errno == ENOEXEC)
            execve("/bin/sh", sh_argv, environ);
        int e = errno;
        (void)!write(execp[1], &e, sizeof(e));
        _exit(e == ENOENT ? SX_RUN_EXIT_NOTFOUND : SX_RUN_EXIT_NOEXEC);
    }
    int err = errno;
    close(execp[1]);
    close(devnull);
    free(sh_argv);
    if (pid < 0) {
        close(execp[0]);
        sx_run_msg("%s: rank %u: cannot start: %s", c->host, c->rank, strerror(err));
        return SX_RUN_EXIT_INTERNAL;
    }
    setpgid(pid, pid);
    c->pid = pid;
    int child_errno = 0;
    ssize_t n;
    do
        n = read(execp[0], &child_errno, sizeof(child_errno));
    while (n < 0 && errno == EINTR);
    close(execp[0]);
    if (n > 0) {
        sx_run_msg("%s: rank %u: cannot execute %s: %s", c->host, c->rank, path,
                   strerror(child_errno));
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
        c->pid = 0;
        return child_errno == ENOENT ? SX_RUN_EXIT_NOTFOUND : SX_RUN_EXIT_NOEXEC;
    }
    return 0;
}

static void sx_run_rc_loop(sx_run_rc_t *c)
{
    for (;;) {
        bool children = sx_run_rc_reap(c);
        uint64_t now = sx_run_now_ns();

        if (c->stopping) {
            bool group = c->pid > 0 && (kill(-c->pid, 0) == 0 || errno != ESRCH);
            if (!children && !group)
                return;
            if (!c->term_sent) {
                c->term_sent = true;
                sx_run_rc_kill(c, SIGTERM);
            }
            if (!c->killed && now >= c->kill_at_ns) {
                c->killed = true;
                c->give_up_ns = now + (uint64_t)SX_RUN_GIVE_UP_MS * 1000000u;
            }
            if (c->killed) {
                sx_run_rc_kill(c, SIGKILL);
                if (now >= c->give_up_ns) {
                    sx_run_msg("%s: processes of rank %u survive SIGKILL for %d s; giving up "
                               "on them",
                               c->host, c->rank, SX_RUN_GIVE_UP_MS / 1000);
                    return;
                }
            }
        }
        struct pollfd pfd[2] = {{.fd = sx_run_sigpipe[0], .events = POLLIN},
                                {.fd = 0, .events = POLLIN}};
        int rc = poll(pfd, c->stdin_open ? 2 : 1, c->stopping ? SX_RUN_REMOTE_TICK_MS : -1);
        if (rc < 0 && errno != EINTR) {
            sx_run_msg("%s: poll: %s", c->host, strerror(errno));
            sx_run_rc_stop(c, "internal error");
            c->kill_at_ns = now;
            continue;
        }
        if (rc <= 0)
            continue;
        if (pfd[0].revents != 0)
            sx_run_rc_on_signals(c);
        if (c->stdin_open && pfd[1].revents != 0) {
            char buf[256];
            ssize_t n = read(0, buf, sizeof(buf));
            if (n > 0)
                c->hello = true;
            if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
                /* sx_run stopped the job (it said why), or died; unless
                 * its first byte never came: the agent does not forward
                 * standard input, and the rank cannot run. */
                c->stdin_open = false;
                sx_run_rc_stop(c, c->hello ? NULL
                                           : "standard input closed before sx_run's first "
                                             "byte came: the agent must forward standard input "
                                             "(no ssh -n)");
            }
        }
    }
}

static bool sx_run_rc_number(const char *s, unsigned long max, unsigned long *v_p)
{
    unsigned long v = 0;

    if (*s == '\0')
        return false;
    for (; *s != '\0'; s++) {
        if (*s < '0' || *s > '9')
            return false;
        v = v * 10 + (unsigned long)(*s - '0');
        if (v > max)
            return false;
    }
    *v_p = v;
    return true;
}

int sx_run_remote_child_main(int argc, char **argv)
{
    sx_run_rc_t rc_state = {.host = "?", .stdin_open = true};
    sx_run_rc_t *c = &rc_state;
    unsigned long rank, nenv;

    /* sx_run --remote-child VERSION HOST RANK CWD NENV ENV... PATH ARGV0 [ARGS...] */
    if (argc < 8 || strcmp(argv[2], SX_RUN_REMOTE_VERSION) != 0) {
        sx_run_msg("--remote-child is for sx_run itself; this sx_run speaks version %s and was "
                   "given %s (is sx_run at the same path the same build on every host?)",
                   SX_RUN_REMOTE_VERSION, argc > 2 ? argv[2] : "nothing");
        return SX_RUN_EXIT_INTERNAL;
    }
    if (!sx_run_word_decode(argv[3]) || !sx_run_rc_number(argv[4], SX_RUN_MAX_RANKS, &rank) ||
        !sx_run_word_decode(argv[5]) || !sx_run_rc_number(argv[6], 1u << 20, &nenv) ||
        (unsigned long)argc < 7 + nenv + 2) {
        sx_run_msg("--remote-child: malformed arguments");
        return SX_RUN_EXIT_INTERNAL;
    }
    c->host = argv[3];
    c->rank = (unsigned)rank;
    for (int i = 7; i < argc; i++) {
        if (!sx_run_word_decode(argv[i])) {
            sx_run_msg("%s: --remote-child: malformed argument %d", c->host, i);
            return SX_RUN_EXIT_INTERNAL;
        }
    }
    for (unsigned long i = 0; i < nenv; i++) {
        char *e = argv[7 + i];
        if (e[0] == '=' || strchr(e, '=') == NULL || putenv(e) != 0) {
            sx_run_msg("%s: --remote-child: malformed variable '%s'", c->host, e);
            return SX_RUN_EXIT_INTERNAL;
        }
    }
    if (chdir(argv[5]) != 0) {
        sx_run_msg("%s: rank %u: cannot change to directory %s: %s", c->host, c->rank, argv[5],
                   strerror(errno));
        return SX_RUN_EXIT_INTERNAL;
    }
    const char *path = argv[7 + nenv];
    char **prog_argv = &argv[7 + nenv + 1];

    if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
        sx_run_msg("%s: warning: cannot become a child subreaper: %s", c->host, strerror(errno));
    if (sx_run_signals_init() != 0) {
        sx_run_msg("%s: cannot set up signal handling: %s", c->host, strerror(errno));
        return SX_RUN_EXIT_INTERNAL;
    }
    int code = sx_run_rc_spawn(c, path, prog_argv);
    if (code != 0)
        return code;
    sx_run_rc_loop(c);
    if (!c->reaped)
        return SX_RUN_EXIT_INTERNAL;
    if (WIFEXITED(c->status))
        return WEXITSTATUS(c->status);
    return 128 + WTERMSIG(c->status);
}
