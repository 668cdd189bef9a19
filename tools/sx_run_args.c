/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * sx_run's command line: the options (see sx_run_usage), the program
 * found along PATH, and for -H the ranks' placement and what remote ranks
 * need (the agent, sx_run's own path, the working directory).
 */
#include "sx_run_int.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <shardx.h>

static void sx_run_usage(FILE *f)
{
    fprintf(f,
            "Usage: sx_run -n N [--timeout SECONDS] [--no-prefix] [--] PROGRAM [ARGS...]\n"
            "       sx_run -H HOST[:SLOTS],... [-n N] [--agent CMD] [-x NAME[=VALUE]]...\n"
            "              [--rendezvous-addr ADDR[:PORT]] [OPTIONS] [--] PROGRAM [ARGS...]\n"
            "\n"
            "Starts N processes of PROGRAM for a shardx job, on this machine or on the\n"
            "hosts given with -H. Each gets SX_RUN_RANK (0..N-1), SX_RUN_SIZE (N),\n"
            "SX_RUN_ADDR (the launcher's rendezvous address), SX_RUN_LOCAL_RANK and\n"
            "SX_RUN_LOCAL_SIZE (its place among the ranks on its host, and their\n"
            "number) in its environment and /dev/null as standard input. Every line a\n"
            "rank prints is prefixed with \"[RANK] \"; standard output goes to standard\n"
            "output, standard error to standard error.\n"
            "\n"
            "Options:\n"
            "  -n, -np, --np N      number of processes (1..%d)\n"
            "  --timeout SECONDS    kill the job after SECONDS (decimals allowed)\n"
            "  --no-prefix          forward whole lines without the \"[RANK] \" prefix\n"
            "                       (for output read by programs, e.g. JSON)\n"
            "  -H, --host LIST      start the ranks on these hosts (repeatable): in blocks,\n"
            "                       in order; HOST:SLOTS takes SLOTS ranks, hosts without a\n"
            "                       count share the rest evenly; -n defaults to the sum of\n"
            "                       the slots when every host has one. localhost and this\n"
            "                       machine's name start directly, others via the agent\n"
            "  --agent CMD          the launcher agent, run as CMD HOST COMMAND... (default\n"
            "                       ssh; CMD is split at blanks, e.g. \"ssh -x\")\n"
            "  --rendezvous-addr A  listen for the ranks on address A[:PORT] (default with\n"
            "                       -H: this machine's address towards the first remote\n"
            "                       host; without: 127.0.0.1)\n"
            "  -x, --env NAME[=VAL] give every rank NAME (its value here, or VAL); every\n"
            "                       SX_* variable goes to remote ranks without it\n"
            "  -h, --help           print this help\n"
            "  --version            print shardx's version\n"
            "\n"
            "A remote host needs sx_run at this sx_run's absolute path, PROGRAM at the\n"
            "path it has here, and this working directory; the agent must forward\n"
            "standard input (not ssh -n): when sx_run closes it, the remote side stops\n"
            "its rank.\n"
            "\n"
            "When a rank fails, the timeout passes, the rendezvous fails, or sx_run\n"
            "gets SIGINT, SIGTERM or SIGHUP, every rank's process group gets SIGTERM,\n"
            "then SIGKILL %d s later. Ranks also die if sx_run itself is killed.\n"
            "\n"
            "Exit status: 0 if every rank exited 0; else the first non-zero rank\n"
            "status (128+S for a rank killed by signal S); 124 on timeout; 126/127\n"
            "when PROGRAM cannot be executed / is not found; 2 for bad arguments;\n"
            "125 when sx_run itself or the rendezvous failed; 1 when a rank exited 0\n"
            "while other ranks waited for it in a fence it never entered.\n",
            SX_RUN_MAX_RANKS, SX_RUN_GRACE_MS / 1000);
}

/* ------------------------------------------------------------------ arguments */

static bool sx_run_parse_ranks(const char *s, unsigned *n_p)
{
    unsigned long v = 0;

    if (s == NULL || *s == '\0') {
        sx_run_msg("-n needs a number of processes");
        return false;
    }
    for (const char *p = s; *p != '\0'; p++) {
        if (*p < '0' || *p > '9') {
            sx_run_msg("-n: '%s' is not a number of processes", s);
            return false;
        }
        v = v * 10 + (unsigned long)(*p - '0');
        if (v > SX_RUN_MAX_RANKS) {
            sx_run_msg("-n: %s processes are too many (at most %d)", s, SX_RUN_MAX_RANKS);
            return false;
        }
    }
    if (v == 0) {
        sx_run_msg("-n: the number of processes must be at least 1");
        return false;
    }
    *n_p = (unsigned)v;
    return true;
}

static bool sx_run_parse_timeout(const char *s, double *t_p)
{
    char *end;

    if (s == NULL || *s == '\0') {
        sx_run_msg("--timeout needs a number of seconds");
        return false;
    }
    errno = 0;
    double v = strtod(s, &end);
    /* Digits and one optional fraction only: no sign, hex, inf or nan. */
    bool plain = true;
    for (const char *p = s; *p != '\0'; p++)
        plain = plain && ((*p >= '0' && *p <= '9') || *p == '.');
    if (!plain || *end != '\0' || errno != 0 || !isfinite(v) || v <= 0 || v > 1e7) {
        sx_run_msg("--timeout: '%s' is not a number of seconds (more than 0, at most 1e7)", s);
        return false;
    }
    *t_p = v;
    return true;
}

/* -x NAME or -x NAME=VALUE, NAME a shell variable's name. */
static bool sx_run_parse_xenv(sx_run_t *r, const char *a)
{
    size_t nlen = strcspn(a, "=");
    bool ok = nlen > 0 && !(a[0] >= '0' && a[0] <= '9');

    for (size_t k = 0; k < nlen && ok; k++)
        ok = (a[k] >= 'a' && a[k] <= 'z') || (a[k] >= 'A' && a[k] <= 'Z') ||
             (a[k] >= '0' && a[k] <= '9') || a[k] == '_';
    if (!ok) {
        sx_run_msg("-x: '%s' is not NAME or NAME=VALUE", a);
        return false;
    }
    if (a[nlen] == '\0' && getenv(a) == NULL) {
        sx_run_msg("-x %s: %s is not set here (give -x %s=VALUE)", a, a, a);
        return false;
    }
    const char **x = realloc(r->xenv, (r->nxenv + 1) * sizeof(*x));
    if (x == NULL) {
        sx_run_msg("out of memory");
        return false;
    }
    r->xenv = x;
    r->xenv[r->nxenv++] = a;
    return true;
}

/* Takes the value of option @p a: "--opt VALUE", "--opt=VALUE", or for a
 * one-letter option "-oVALUE". NULL when @p a is not one of @p names;
 * @p missing set when it is but has no value. */
static const char *sx_run_opt(int argc, char **argv, int *i, const char *const *names,
                              bool *missing)
{
    const char *a = argv[*i];

    for (; *names != NULL; names++) {
        size_t len = strlen(*names);
        if (strcmp(a, *names) == 0) {
            if (*i + 1 >= argc) {
                *missing = true;
                return NULL;
            }
            *i += 2;
            return argv[*i - 1];
        }
        if (strncmp(a, *names, len) == 0 && (len == 2 || a[len] == '=')) {
            *i += 1;
            return a + (len == 2 ? 2 : len + 1);
        }
    }
    return NULL;
}

/* 0: go on; otherwise the status to exit with (-1 for --help: exit 0). */
int sx_run_parse_args(sx_run_t *r, int argc, char **argv)
{
    /* -np as mpirun spells it; listed before -n, whose attached form
     * ("-n4") would otherwise read "-np" as -n with the value "p". */
    static const char *const opt_n[] = {"-np", "-n", "--np", NULL};
    static const char *const opt_timeout[] = {"--timeout", NULL};
    static const char *const opt_host[] = {"-H", "--host", NULL};
    static const char *const opt_agent[] = {"--agent", NULL};
    static const char *const opt_rdv[] = {"--rendezvous-addr", NULL};
    static const char *const opt_env[] = {"-x", "--env", NULL};
    bool have_n = false;
    int i = 1;

    while (i < argc) {
        const char *a = argv[i];
        const char *val;
        bool missing = false;
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            sx_run_usage(stdout);
            return -1;
        }
        if (strcmp(a, "--version") == 0) {
            sx_build_info_t b;
            printf("sx_run (shardx) %s\n", sx_build_info(&b) == SX_OK ? b.version : "unknown");
            return -1;
        }
        if (strcmp(a, "--no-prefix") == 0) {
            r->no_prefix = true;
            i++;
            continue;
        }
        if ((val = sx_run_opt(argc, argv, &i, opt_n, &missing)) != NULL) {
            if (!sx_run_parse_ranks(val, &r->n))
                return SX_RUN_EXIT_USAGE;
            have_n = true;
        } else if ((val = sx_run_opt(argc, argv, &i, opt_timeout, &missing)) != NULL) {
            if (!sx_run_parse_timeout(val, &r->timeout_s))
                return SX_RUN_EXIT_USAGE;
        } else if ((val = sx_run_opt(argc, argv, &i, opt_host, &missing)) != NULL) {
            if (!sx_run_hosts_parse(val, &r->hosts, &r->nhosts))
                return SX_RUN_EXIT_USAGE;
        } else if ((val = sx_run_opt(argc, argv, &i, opt_agent, &missing)) != NULL) {
            r->agent_cmd = val;
        } else if ((val = sx_run_opt(argc, argv, &i, opt_rdv, &missing)) != NULL) {
            r->rdv_opt = val;
        } else if ((val = sx_run_opt(argc, argv, &i, opt_env, &missing)) != NULL) {
            if (!sx_run_parse_xenv(r, val))
                return SX_RUN_EXIT_USAGE;
        } else if (missing) {
            sx_run_msg("%s needs a value (see sx_run --help)", a);
            return SX_RUN_EXIT_USAGE;
        } else if (a[0] == '-' && a[1] != '\0') {
            sx_run_msg("unknown option '%s' (see sx_run --help)", a);
            return SX_RUN_EXIT_USAGE;
        } else {
            break;
        }
    }
    if (!have_n && r->nhosts > 0) {
        /* As mpirun: as many ranks as the hosts have slots. */
        unsigned long slots = sx_run_hosts_slots(r->hosts, r->nhosts);
        if (slots > SX_RUN_MAX_RANKS) {
            sx_run_msg("the hosts have %lu slots: too many processes (at most %d)", slots,
                       SX_RUN_MAX_RANKS);
            return SX_RUN_EXIT_USAGE;
        }
        r->n = (unsigned)slots;
        have_n = slots > 0;
    }
    if (!have_n) {
        sx_run_msg("-n N is required: how many processes to start (see sx_run --help)");
        return SX_RUN_EXIT_USAGE;
    }
    if (r->agent_cmd != NULL && r->nhosts == 0) {
        sx_run_msg("--agent starts ranks on the hosts of -H; there is no -H");
        return SX_RUN_EXIT_USAGE;
    }
    if (i >= argc) {
        sx_run_msg("no program to run (see sx_run --help)");
        return SX_RUN_EXIT_USAGE;
    }
    r->prog_argv = &argv[i];
    return 0;
}

/* ------------------------------------------------------------- the program */

/* Whether @p path is a file we may execute; errno says why not. */
static bool sx_run_executable(const char *path)
{
    struct stat st;

    if (stat(path, &st) != 0)
        return false;
    if (S_ISDIR(st.st_mode)) {
        errno = EISDIR;
        return false;
    }
    return access(path, X_OK) == 0;
}

/*
 * Finds a program as execvp() would: a name with a slash is used as
 * it is, any other is looked up along PATH (an empty entry is the current
 * directory). Doing it here, before anything starts, gives the shell's
 * answers: 127 for a program not found, 126 for one that is not
 * executable. @p what ("" or "the agent ") leads the messages.
 */
int sx_run_find(const char *name, const char *what, char **path_p)
{
    if (name[0] == '\0') {
        sx_run_msg("%s'': command not found", what);
        return SX_RUN_EXIT_NOTFOUND;
    }
    if (strchr(name, '/') != NULL) {
        if (!sx_run_executable(name)) {
            int e = errno;
            sx_run_msg("%s%s: %s", what, name, strerror(e));
            return e == ENOENT || e == ENOTDIR ? SX_RUN_EXIT_NOTFOUND : SX_RUN_EXIT_NOEXEC;
        }
        *path_p = strdup(name);
        return *path_p != NULL ? 0 : SX_RUN_EXIT_INTERNAL;
    }

    const char *path = getenv("PATH");
    if (path == NULL)
        path = "/bin:/usr/bin";
    int denied = 0;
    size_t nlen = strlen(name);
    for (const char *p = path;;) {
        const char *colon = strchr(p, ':');
        size_t dlen = colon != NULL ? (size_t)(colon - p) : strlen(p);
        char *cand = malloc(dlen + nlen + 3);
        if (cand == NULL)
            return SX_RUN_EXIT_INTERNAL;
        if (dlen == 0)
            snprintf(cand, dlen + nlen + 3, "./%s", name);
        else
            snprintf(cand, dlen + nlen + 3, "%.*s/%s", (int)dlen, p, name);
        if (sx_run_executable(cand)) {
            *path_p = cand;
            return 0;
        }
        if (errno == EACCES || errno == EISDIR)
            denied = errno;
        free(cand);
        if (colon == NULL)
            break;
        p = colon + 1;
    }
    if (denied != 0) {
        sx_run_msg("%s%s: %s", what, name, strerror(denied));
        return SX_RUN_EXIT_NOEXEC;
    }
    sx_run_msg("%s%s: command not found", what, name);
    return SX_RUN_EXIT_NOTFOUND;
}

/* -H: places the ranks and, when some are on other hosts, finds the agent,
 * sx_run's own path and the working directory they need. 0, or the status
 * to exit with. */
int sx_run_hosts_setup(sx_run_t *r)
{
    if (r->nhosts == 0)
        return 0;
    r->rank_host = calloc(r->n, sizeof(*r->rank_host));
    if (r->rank_host == NULL)
        return SX_RUN_EXIT_INTERNAL;
    sx_run_hosts_mark_local(r->hosts, r->nhosts);
    if (!sx_run_hosts_place(r->hosts, r->nhosts, r->n, r->rank_host))
        return SX_RUN_EXIT_USAGE;
    for (unsigned h = 0; h < r->nhosts; h++)
        r->any_remote = r->any_remote || (!r->hosts[h].local && r->hosts[h].nranks > 0);
    if (!r->any_remote)
        return 0;

    r->agent = sx_run_agent_split(r->agent_cmd != NULL ? r->agent_cmd : "ssh");
    if (r->agent == NULL)
        return SX_RUN_EXIT_USAGE;
    int rc = sx_run_find(r->agent[0], "the agent ", &r->agent_path);
    if (rc != 0)
        return rc;
    char buf[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
    if (len <= 0) {
        sx_run_msg("cannot find sx_run's own path (/proc/self/exe): %s", strerror(errno));
        return SX_RUN_EXIT_INTERNAL;
    }
    buf[len] = '\0';
    if (!sx_run_word_plain(buf)) {
        /* It is the one word of the remote command that is not encoded. */
        sx_run_msg("sx_run's path %s has characters a remote shell would read; other hosts "
                   "need it at a path of letters, digits and _-./:,+@=",
                   buf);
        return SX_RUN_EXIT_USAGE;
    }
    r->self = strdup(buf);
    r->cwd = getcwd(NULL, 0);
    if (r->self == NULL || r->cwd == NULL) {
        sx_run_msg("cannot find the working directory: %s", strerror(errno));
        return SX_RUN_EXIT_INTERNAL;
    }
    return 0;
}
