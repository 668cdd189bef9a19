/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What the parts of sx_run share: sx_run.c (options, the job, the main
 * loop), sx_run_hosts.c (-H: host lists, placement, the rendezvous
 * address other hosts can reach, the agent's command) and sx_run_remote.c
 * (the command line a launcher agent runs, and the hidden --remote-child
 * mode that runs one rank on the other host). See the top of sx_run.c.
 */
#ifndef SX_RUN_INT_H
#define SX_RUN_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <poll.h>
#include <sys/types.h>

#include "bootstrap/rendezvous.h"

#define SX_RUN_MAX_RANKS 1024
#define SX_RUN_GRACE_MS  3000
/* After SIGKILL, how long to wait for processes stuck in the kernel. */
#define SX_RUN_GIVE_UP_MS 10000
/* Room for one of sx_run's own variables, NAME=number (SX_RUN_ADDR's
 * value is added to it). */
#define SX_RUN_ENV_CAP 64

/* Exit statuses of sx_run's own failures; see the top of sx_run.c. */
enum {
    SX_RUN_EXIT_LEFT = 1, /* a rank exited 0 while others waited for it */
    SX_RUN_EXIT_USAGE = 2,
    SX_RUN_EXIT_TIMEOUT = 124,
    SX_RUN_EXIT_INTERNAL = 125,
    SX_RUN_EXIT_NOEXEC = 126,
    SX_RUN_EXIT_NOTFOUND = 127,
};

/* "sx_run: " and the formatted text on standard error, in one write. */
void sx_run_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
uint64_t sx_run_now_ns(void);
const char *sx_run_signame(int sig);

/*
 * Finds @p name as execvp() would (a name with a slash as it is, any other
 * along PATH) and returns 0 with a malloc'd *path_p, or the shell's status
 * with a message naming @p what: 127 not found, 126 not executable.
 */
int sx_run_find(const char *name, const char *what, char **path_p);

/* The self-pipe the signal handlers write the signal's number to, and
 * the signals sx_run handles (SIGCHLD, SIGINT, SIGTERM, SIGHUP). */
extern int sx_run_sigpipe[2];
int sx_run_signals_init(void);
/* In a child between fork() and exec(): default dispositions, no mask
 * (async-signal-safe). */
void sx_run_signals_reset(void);

/* Sends @p sig to each child of ours that @p spare does not claim: the
 * processes re-parented to us (a child subreaper) after their parent
 * died. */
void sx_run_kill_orphans(bool (*spare)(void *arg, pid_t pid), void *arg, int sig);

/* ------------------------------------------------------------ hosts (-H) */

typedef struct sx_run_host {
    char *name;
    unsigned slots; /* from "name:slots"; 0 when none was given */
    bool local;     /* this machine: its ranks start without the agent */
    unsigned nranks;
} sx_run_host_t;

/* Appends the hosts of "name[:slots],..." to *hosts_p / *n_p; false (with
 * a message) for a malformed list. */
bool sx_run_hosts_parse(const char *list, sx_run_host_t **hosts_p, unsigned *n_p);
void sx_run_hosts_free(sx_run_host_t *hosts, unsigned n);
/* The sum of the slots when every host has a count; 0 otherwise. */
unsigned sx_run_hosts_slots(const sx_run_host_t *hosts, unsigned n);
/* Places @p nranks ranks in blocks (see the top of sx_run_hosts.c):
 * rank_host[i] is rank i's host. False (with a message) when the hosts'
 * slots are too few. */
bool sx_run_hosts_place(sx_run_host_t *hosts, unsigned n, unsigned nranks, unsigned *rank_host);
/* Marks the hosts that are this machine (localhost, or gethostname()). */
void sx_run_hosts_mark_local(sx_run_host_t *hosts, unsigned n);

/*
 * Where the rendezvous server listens: @p opt (--rendezvous-addr,
 * "host[:port]") when given, else the source address the kernel would use
 * to reach the first remote host that resolves, else 127.0.0.1 when no
 * host is remote. 0, or sx_run's exit status with a message.
 */
int sx_run_rdv_bind(const sx_run_host_t *hosts, unsigned n, const char *opt, char *host,
                    size_t hostlen, uint16_t *port_p);

/* The agent's words, split at blanks; NULL (with a message) when there
 * are none. Free with sx_run_words_free. */
char **sx_run_agent_split(const char *cmd);
void sx_run_words_free(char **words);

/* ------------------------------------------------------------------ the job */

typedef struct sx_run_stream {
    int fd;   /* read end of the rank's pipe; -1 at end of file */
    int dest; /* 1 or 2 */
    char *buf;
    size_t len;
    size_t cap;
    bool midline; /* a piece of an over-long line went out without its end */
} sx_run_stream_t;

typedef struct sx_run_rank {
    pid_t pid;        /* also the id of the rank's process group (a remote
                         rank's: its agent's) */
    int in_fd;        /* a remote rank's agent's standard input; -1 */
    bool reaped;      /* the rank itself has been waited for */
    bool group_alive; /* its process group may still have members */
    int status;       /* waitpid status once reaped */
    sx_run_stream_t out, err;
} sx_run_rank_t;

typedef struct sx_run {
    unsigned n;
    double timeout_s; /* 0: none */
    bool no_prefix;   /* --no-prefix: lines go out as the ranks wrote them */
    char **prog_argv; /* what the user wrote after the options */
    char *path;       /* the program resolved along PATH */
    char **sh_argv;   /* "/bin/sh path args", for scripts without #! */
    char **envp;      /* environ without SX_RUN_*, then -x's, the five */
    /* SX_RUN_SIZE, _ADDR, _RANK, _LOCAL_RANK, _LOCAL_SIZE; the last three
     * are rewritten for each rank before it starts. */
    char *env_strings[5];

    /* -H: the hosts, each rank's (NULL without -H), the agent. */
    sx_run_host_t *hosts;
    unsigned nhosts;
    unsigned *rank_host;
    bool any_remote;       /* some rank is on another host */
    const char *agent_cmd; /* --agent, as given */
    char **agent;          /* its words */
    char *agent_path;      /* its first word resolved along PATH */
    const char *rdv_opt;   /* --rendezvous-addr */
    char *self;            /* sx_run's absolute path */
    char *cwd;
    const char **xenv; /* -x NAME[=VALUE], as given */
    unsigned nxenv;
    char **xenv_strings; /* NAME=VALUE for each -x (allocated for -x NAME) */
    char **remote_env;   /* what a remote rank is given: SX_*, -x's, the five */
    sx_rdv_server_t *rdv;
    sx_run_rank_t *ranks;
    unsigned reaped; /* ranks reaped */
    /* The main loop's poll set: the signal pipe, then the open streams. */
    struct pollfd *pfds;
    sx_run_stream_t **pfd_stream;
    unsigned *pfd_rank;
    int fd_limit; /* the open-file limit, for the child's descriptor sweep */
    int devnull;

    bool shutting_down;
    bool term_sent; /* SIGTERM sent */
    bool killed;    /* SIGKILL sent (and sent again as orphans come) */
    uint64_t give_up_ns;
    uint64_t kill_deadline_ns;
    int exit_code; /* -1: none yet */
    int got_signal;
    bool dest_dead[3]; /* writes to fd 1 or 2 failed with EPIPE */
} sx_run_t;

/* sx_run_args.c. 0: go on; otherwise the status to exit with (-1 for
 * --help: exit 0). */
int sx_run_parse_args(sx_run_t *r, int argc, char **argv);
/* -H: places the ranks, and finds what remote ranks need. 0, or the
 * status to exit with. */
int sx_run_hosts_setup(sx_run_t *r);

/* ---------------------------------------------------------------- remote */

/* What one remote rank's agent is to run. */
typedef struct sx_run_remote_cmd {
    char *const *agent; /* the agent's words (agent[0] as the user wrote it) */
    const char *host;
    const char *self;  /* sx_run's absolute path, the same on every host */
    const char *cwd;   /* the directory the rank starts in */
    unsigned rank;     /* for messages */
    char *const *env;  /* NAME=VALUE to set on the other side, NULL-terminated */
    const char *path;  /* the program, as resolved here */
    char *const *argv; /* its arguments, argv[0] included, NULL-terminated */
} sx_run_remote_cmd_t;

/* Whether @p s passes through an agent (and a remote shell) unchanged:
 * letters, digits and _-./:,+@= only, and not empty. */
bool sx_run_word_plain(const char *s);
/* The agent's argument vector, NULL-terminated; free with
 * sx_run_words_free. NULL when out of memory. */
char **sx_run_remote_argv(const sx_run_remote_cmd_t *c);

/* `sx_run --remote-child ...`: runs one rank on this host for an sx_run
 * elsewhere; returns the exit status. */
int sx_run_remote_child_main(int argc, char **argv);

#endif /* SX_RUN_INT_H */
