/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * sx_run end to end: it is started as a real process with its stdout and
 * stderr on pipes, running sx_run_child (tests/multiproc/sx_run_child.c)
 * as its ranks. Usage: test_sx_run SX_RUN SX_RUN_CHILD.
 *
 * Nothing waits on time: the test reads sx_run's output until the lines it
 * expects are there (ranks print "ready RANK PID" once their grandchild's
 * pid file is written), a failing rank waits on a FIFO the test writes to,
 * and deaths are awaited through pidfds. The deadlines only stop a broken
 * sx_run from hanging the test.
 *
 * The test process is a child subreaper, so the ranks of an sx_run killed
 * with SIGKILL become its children and it can see them die and reap them.
 *
 * Ranks on other hosts (-H) go through a launcher agent that the test
 * writes (agent_script below): it runs the remote command on this machine
 * in a clean environment, as ssh would run it on the host, and says which
 * host it was asked for in TEST_AGENT_HOST.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test_filter.h"

#define WAIT_MS   120000 /* for anything that should take a moment */
#define MAX_RANKS 8
#define MAX_ARGS  48

static const char *sx_run_path;
static const char *child_path;
static const char *job_cwd; /* where sx_run starts; NULL: here */

typedef struct job {
    pid_t pid;
    int fd[2]; /* stdout, stderr; -1 at end of file */
    char *text[2];
    size_t len[2], cap[2];
    int status;
} job_t;

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Starts sx_run with @p args (NULL-terminated, without argv[0]). */
static void job_start(job_t *j, const char *const *args)
{
    int p[2][2];
    const char *argv[MAX_ARGS + 2];
    int n = 0;

    memset(j, 0, sizeof(*j));
    argv[n++] = "sx_run";
    for (int i = 0; args[i] != NULL; i++) {
        assert_true(n < MAX_ARGS);
        argv[n++] = args[i];
    }
    argv[n] = NULL;
    assert_int_equal(pipe2(p[0], O_CLOEXEC), 0);
    assert_int_equal(pipe2(p[1], O_CLOEXEC), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(p[0][1], 1);
        dup2(p[1][1], 2);
        if (job_cwd != NULL && chdir(job_cwd) != 0)
            _exit(125);
        execv(sx_run_path, (char *const *)argv);
        _exit(126);
    }
    close(p[0][1]);
    close(p[1][1]);
    j->pid = pid;
    j->fd[0] = p[0][0];
    j->fd[1] = p[1][0];
    for (int k = 0; k < 2; k++) {
        j->cap[k] = 4096;
        j->text[k] = calloc(1, j->cap[k]);
        assert_non_null(j->text[k]);
    }
}

/* Reads what is there, waiting up to @p timeout_ms for something. */
static void job_read(job_t *j, int timeout_ms)
{
    struct pollfd pfd[2];
    int n = 0, which[2];

    for (int k = 0; k < 2; k++) {
        if (j->fd[k] >= 0) {
            pfd[n].fd = j->fd[k];
            pfd[n].events = POLLIN;
            which[n++] = k;
        }
    }
    if (n == 0 || poll(pfd, (nfds_t)n, timeout_ms) <= 0)
        return;
    for (int i = 0; i < n; i++) {
        if (pfd[i].revents == 0)
            continue;
        int k = which[i];
        if (j->cap[k] - j->len[k] < 65537) {
            j->cap[k] = j->cap[k] * 2 + 65537;
            j->text[k] = realloc(j->text[k], j->cap[k]);
            assert_non_null(j->text[k]);
        }
        ssize_t got = read(j->fd[k], j->text[k] + j->len[k], 65536);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) {
            close(j->fd[k]);
            j->fd[k] = -1;
            continue;
        }
        j->len[k] += (size_t)got;
        j->text[k][j->len[k]] = '\0';
    }
}

static int count_of(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p++)
        n++;
    return n;
}

/* Reads stdout until it holds @p count lines containing @p needle. */
static void job_wait_for(job_t *j, const char *needle, int count)
{
    uint64_t deadline = now_ms() + WAIT_MS;

    while (count_of(j->text[0], needle) < count) {
        if (now_ms() > deadline || (j->fd[0] < 0 && j->fd[1] < 0))
            fail_msg("waited for %d x '%s'; stdout:\n%s\nstderr:\n%s", count, needle, j->text[0],
                     j->text[1]);
        job_read(j, 1000);
    }
}

/* Reads to the end of both pipes and reaps sx_run; returns its status. */
static int job_finish(job_t *j)
{
    uint64_t deadline = now_ms() + WAIT_MS;

    while (j->fd[0] >= 0 || j->fd[1] >= 0) {
        if (now_ms() > deadline) {
            kill(j->pid, SIGKILL);
            fail_msg("sx_run did not finish; stdout:\n%s\nstderr:\n%s", j->text[0], j->text[1]);
        }
        job_read(j, 1000);
    }
    while (j->pid > 0 && waitpid(j->pid, &j->status, 0) < 0)
        assert_int_equal(errno, EINTR);
    j->pid = 0;
    return j->status;
}

static void job_free(job_t *j)
{
    if (j->pid > 0) {
        kill(j->pid, SIGKILL);
        waitpid(j->pid, NULL, 0);
    }
    for (int k = 0; k < 2; k++) {
        if (j->fd[k] >= 0)
            close(j->fd[k]);
        free(j->text[k]);
    }
}

/* The exit code sx_run returned (it must have exited, not been killed). */
static int exit_code(const job_t *j)
{
    if (!WIFEXITED(j->status))
        fail_msg("sx_run did not exit (status 0x%x); stderr:\n%s", j->status, j->text[1]);
    return WEXITSTATUS(j->status);
}

static void assert_has(const char *text, const char *needle)
{
    if (strstr(text, needle) == NULL)
        fail_msg("expected '%s' in:\n%s", needle, text);
}

/* Runs sx_run to the end. */
static void run(job_t *j, const char *const *args)
{
    job_start(j, args);
    job_finish(j);
}

/* A temporary directory for pid files and FIFOs. */
static void make_dir(char *dir, size_t len)
{
    snprintf(dir, len, "/tmp/sx_run_test_XXXXXX");
    assert_non_null(mkdtemp(dir));
}

static void remove_dir(const char *dir)
{
    static const char *const files[] = {"fifo", "agent.sh", "agent.log"};
    char path[256];
    for (int r = 0; r < MAX_RANKS; r++) {
        snprintf(path, sizeof(path), "%s/gc-%d.pid", dir, r);
        unlink(path);
        snprintf(path, sizeof(path), "%s/term-%d", dir, r);
        unlink(path);
    }
    for (size_t f = 0; f < sizeof(files) / sizeof(files[0]); f++) {
        snprintf(path, sizeof(path), "%s/%s", dir, files[f]);
        unlink(path);
    }
    rmdir(dir);
}

static pid_t read_pid_file(const char *dir, int rank)
{
    char path[256];
    int pid = 0;

    snprintf(path, sizeof(path), "%s/gc-%d.pid", dir, rank);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        fail_msg("no pid file %s: %s", path, strerror(errno));
    assert_int_equal(fscanf(f, "%d", &pid), 1);
    fclose(f);
    return (pid_t)pid;
}

/* The pids of the ranks that printed "ready" (by rank; 0 when not), and
 * their parents' (@p ppids may be NULL). */
static int ready_pids2(const job_t *j, pid_t *pids, pid_t *ppids, int n)
{
    int found = 0;

    memset(pids, 0, sizeof(*pids) * (size_t)n);
    if (ppids != NULL)
        memset(ppids, 0, sizeof(*ppids) * (size_t)n);
    for (const char *p = j->text[0]; (p = strstr(p, "] ready ")) != NULL; p++) {
        int r, pid, ppid;
        if (sscanf(p, "] ready %d %d %d", &r, &pid, &ppid) == 3 && r >= 0 && r < n) {
            pids[r] = pid;
            if (ppids != NULL)
                ppids[r] = ppid;
            found++;
        }
    }
    return found;
}

static int ready_pids(const job_t *j, pid_t *pids, int n)
{
    return ready_pids2(j, pids, NULL, n);
}

static void assert_gone(pid_t pid, const char *what)
{
    if (kill(pid, 0) == 0 || errno != ESRCH)
        fail_msg("%s (pid %d) is still there", what, (int)pid);
}

/* ------------------------------------------------------------------ output */

static void test_output_prefixes(void **state)
{
    (void)state;
    static const char *const counts[] = {"1", "2", "4", "8"};
    char *longline = malloc(300000 + 32);
    assert_non_null(longline);

    for (size_t c = 0; c < 4; c++) {
        int n = atoi(counts[c]);
        job_t j;
        run(&j, (const char *const[]){"-n", counts[c], child_path, "print", NULL});
        assert_int_equal(exit_code(&j), 0);
        for (int r = 0; r < n; r++) {
            char line[64];
            snprintf(line, sizeof(line), "[%d] out %d line 1\n", r, r);
            assert_has(j.text[0], line);
            snprintf(line, sizeof(line), "[%d] out %d line 2\n", r, r);
            assert_has(j.text[0], line);
            snprintf(line, sizeof(line), "[%d] tail %d\n", r, r);
            assert_has(j.text[0], line);
            snprintf(line, sizeof(line), "[%d] err %d line 1\n", r, r);
            assert_has(j.text[1], line);
            int k = snprintf(longline, 32, "[%d] long %d ", r, r);
            memset(longline + k, 'x', 300000);
            strcpy(longline + k + 300000, "\n");
            assert_has(j.text[0], longline);
        }
        /* Every line has a prefix, and nothing else came. */
        assert_int_equal(count_of(j.text[0], "\n"), 4 * n);
        assert_int_equal(count_of(j.text[0], "\n["), 4 * n - 1);
        assert_int_equal(j.text[0][0], '[');
        assert_int_equal(count_of(j.text[1], "\n"), n);
        job_free(&j);
    }
    free(longline);
}

/* --no-prefix: the same whole lines, none prefixed (sx_bench --json). */
static void test_output_no_prefix(void **state)
{
    (void)state;
    job_t j;

    run(&j, (const char *const[]){"-n", "2", "--no-prefix", child_path, "print", NULL});
    assert_int_equal(exit_code(&j), 0);
    for (int r = 0; r < 2; r++) {
        char line[64];
        snprintf(line, sizeof(line), "out %d line 1\n", r);
        assert_has(j.text[0], line);
        snprintf(line, sizeof(line), "tail %d\n", r);
        assert_has(j.text[0], line);
        snprintf(line, sizeof(line), "err %d line 1\n", r);
        assert_has(j.text[1], line);
    }
    assert_int_equal(count_of(j.text[0], "\n"), 8);
    assert_int_equal(count_of(j.text[0], "["), 0);
    assert_int_equal(count_of(j.text[1], "["), 0);
    job_free(&j);
}

/* A line longer than sx_run's 1 MiB line buffer still comes out whole,
 * with one prefix. */
static void test_very_long_line(void **state)
{
    (void)state;
    const size_t big = 3u << 20;
    job_t j;

    run(&j, (const char *const[]){"-n", "1", child_path, "bigline", "3145728", NULL});
    assert_int_equal(exit_code(&j), 0);
    assert_int_equal(j.len[0], 4 + big + 1);
    assert_memory_equal(j.text[0], "[0] ", 4);
    for (size_t i = 4; i < 4 + big; i++) {
        if (j.text[0][i] != 'y')
            fail_msg("byte %zu is 0x%02x", i, (unsigned char)j.text[0][i]);
    }
    assert_int_equal(j.text[0][4 + big], '\n');
    job_free(&j);
}

static void test_environment(void **state)
{
    (void)state;
    job_t j;

    /* A stale SX_RUN_RANK in sx_run's environment must not reach ranks. */
    setenv("SX_RUN_RANK", "99", 1);
    run(&j, (const char *const[]){"-n", "4", child_path, "env", NULL});
    unsetenv("SX_RUN_RANK");
    assert_int_equal(exit_code(&j), 0);
    for (int r = 0; r < 4; r++) {
        char want[64];
        snprintf(want, sizeof(want), "[%d] env %d 4 127.0.0.1:", r, r);
        assert_has(j.text[0], want);
        /* All four on this host: the local rank is the rank. */
        snprintf(want, sizeof(want), "local=%d/4 stdin", r);
        assert_has(j.text[0], want);
    }
    assert_int_equal(count_of(j.text[0], "stdin=empty"), 4);
    job_free(&j);
}

/* ------------------------------------------------------------ exit status */

static void test_exit_status(void **state)
{
    (void)state;
    job_t j;

    run(&j, (const char *const[]){"-n", "1", child_path, "exit", "0", NULL});
    assert_int_equal(exit_code(&j), 0);
    job_free(&j);
    run(&j, (const char *const[]){"-n", "1", child_path, "exit", "7", NULL});
    assert_int_equal(exit_code(&j), 7);
    assert_has(j.text[1], "rank 0 (pid ");
    assert_has(j.text[1], "exited with status 7");
    job_free(&j);
    run(&j, (const char *const[]){"-n", "8", child_path, "exit", "0", NULL});
    assert_int_equal(exit_code(&j), 0);
    assert_int_equal(j.len[1], 0);
    job_free(&j);
    /* Killed by a signal: 128 + S, and the signal named. */
    run(&j, (const char *const[]){"-n", "2", child_path, "signal", "10", NULL});
    assert_int_equal(exit_code(&j), 128 + 10);
    assert_has(j.text[1], "killed by signal 10 (SIGUSR1)");
    job_free(&j);
}

/*
 * One rank exits 3 while the others sleep: sx_run exits 3, names the rank,
 * and no rank or grandchild is left (the failing rank's grandchild too:
 * its group outlives its leader).
 */
static void test_failure_stops_the_job(void **state)
{
    (void)state;
    static const char *const counts[] = {"2", "4", "8"};

    for (size_t c = 0; c < 3; c++) {
        int n = atoi(counts[c]);
        char dir[64], fifo[128], failing[16];
        pid_t pids[MAX_RANKS], gcs[MAX_RANKS];
        job_t j;

        make_dir(dir, sizeof(dir));
        snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
        assert_int_equal(mkfifo(fifo, 0600), 0);
        snprintf(failing, sizeof(failing), "%d", n - 1);
        job_start(&j, (const char *const[]){"-n", counts[c], child_path, "fail", failing, "3", fifo,
                                            dir, NULL});
        job_wait_for(&j, "] ready ", n);
        assert_int_equal(ready_pids(&j, pids, n), n);
        for (int r = 0; r < n; r++)
            gcs[r] = read_pid_file(dir, r);

        int fd = open(fifo, O_WRONLY);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, "x", 1), 1);
        close(fd);

        job_finish(&j);
        assert_int_equal(exit_code(&j), 3);
        char want[64];
        snprintf(want, sizeof(want), "rank %d (pid %d) exited with status 3", n - 1,
                 (int)pids[n - 1]);
        assert_has(j.text[1], want);
        for (int r = 0; r < n; r++) {
            assert_gone(pids[r], "a rank");
            assert_gone(gcs[r], "a rank's grandchild");
        }
        job_free(&j);
        remove_dir(dir);
    }
}

/* ---------------------------------------------------------------- timeout */

static void check_timeout(const char *n_s, const char *timeout, bool noterm)
{
    int n = atoi(n_s);
    char dir[64];
    pid_t pids[MAX_RANKS];
    job_t j;

    make_dir(dir, sizeof(dir));
    job_start(&j, (const char *const[]){"-n", n_s, "--timeout", timeout, child_path, "hang", dir,
                                        noterm ? "noterm" : NULL, NULL});
    job_finish(&j);
    assert_int_equal(exit_code(&j), 124);
    assert_has(j.text[1], "timeout");
    /* Ranks that got as far as their ready line: they and their
     * grandchildren are gone (on a slow machine a rank may be stopped
     * before it printed it; then it had no grandchild to check). */
    ready_pids(&j, pids, n);
    for (int r = 0; r < n; r++) {
        if (pids[r] == 0)
            continue;
        assert_gone(pids[r], "a rank");
        assert_gone(read_pid_file(dir, r), "a rank's grandchild");
    }
    job_free(&j);
    remove_dir(dir);
}

static void test_timeout(void **state)
{
    (void)state;
    check_timeout("4", "3", false);
    /* Ranks that ignore SIGTERM get SIGKILL after the grace period. */
    check_timeout("2", "1.5", true);
}

/* ---------------------------------------------------------------- signals */

static void start_hanging(job_t *j, const char *n_s, char *dir, size_t dlen, pid_t *pids,
                          pid_t *gcs)
{
    int n = atoi(n_s);

    make_dir(dir, dlen);
    job_start(j, (const char *const[]){"-n", n_s, child_path, "hang", dir, NULL});
    job_wait_for(j, "] ready ", n);
    assert_int_equal(ready_pids(j, pids, n), n);
    for (int r = 0; r < n; r++)
        gcs[r] = read_pid_file(dir, r);
}

/* SIGTERM, SIGINT, SIGHUP to sx_run: it stops the job, reaps it and dies
 * of the same signal. */
static void test_signals_stop_the_job(void **state)
{
    (void)state;
    static const int sigs[] = {SIGTERM, SIGINT, SIGHUP};

    for (size_t s = 0; s < 3; s++) {
        char dir[64];
        pid_t pids[MAX_RANKS], gcs[MAX_RANKS];
        job_t j;

        start_hanging(&j, "4", dir, sizeof(dir), pids, gcs);
        assert_int_equal(kill(j.pid, sigs[s]), 0);
        job_finish(&j);
        assert_true(WIFSIGNALED(j.status));
        assert_int_equal(WTERMSIG(j.status), sigs[s]);
        for (int r = 0; r < 4; r++) {
            assert_gone(pids[r], "a rank");
            assert_gone(gcs[r], "a rank's grandchild");
        }
        job_free(&j);
        remove_dir(dir);
    }
}

/* Waits for @p pid to end (a pidfd becomes readable), then reaps it: the
 * test is a subreaper, so an orphan of sx_run is its child. */
static int wait_dead(pid_t pid)
{
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    int st = 0;

    assert_true(pidfd >= 0);
    struct pollfd pfd = {.fd = pidfd, .events = POLLIN};
    int rc;
    do
        rc = poll(&pfd, 1, WAIT_MS);
    while (rc < 0 && errno == EINTR);
    close(pidfd);
    if (rc != 1)
        fail_msg("pid %d did not die", (int)pid);
    while (waitpid(pid, &st, 0) < 0)
        assert_int_equal(errno, EINTR);
    return st;
}

/* sx_run killed with SIGKILL can clean nothing up; the death signal it
 * asked for takes its ranks with it. (Their grandchildren, having no such
 * request, come to us: the test ends them.) */
static void test_sigkill_takes_the_ranks(void **state)
{
    (void)state;
    char dir[64];
    pid_t pids[MAX_RANKS], gcs[MAX_RANKS];
    job_t j;

    start_hanging(&j, "4", dir, sizeof(dir), pids, gcs);
    assert_int_equal(kill(j.pid, SIGKILL), 0);
    /* Not job_finish: the grandchildren hold the pipes open until the
     * end of the test. */
    while (waitpid(j.pid, &j.status, 0) < 0)
        assert_int_equal(errno, EINTR);
    j.pid = 0;
    assert_true(WIFSIGNALED(j.status));
    for (int r = 0; r < 4; r++) {
        int st = wait_dead(pids[r]);
        assert_true(WIFSIGNALED(st));
        assert_int_equal(WTERMSIG(st), SIGKILL);
    }
    for (int r = 0; r < 4; r++) {
        kill(gcs[r], SIGKILL);
        wait_dead(gcs[r]);
    }
    job_finish(&j);
    job_free(&j);
    remove_dir(dir);
}

/* -------------------------------------------------------------- arguments */

static void expect_usage_error(const char *const *args, const char *message)
{
    job_t j;

    run(&j, args);
    assert_int_equal(exit_code(&j), 2);
    assert_has(j.text[1], message);
    assert_int_equal(j.len[0], 0);
    job_free(&j);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    expect_usage_error((const char *const[]){child_path, "exit", "0", NULL}, "-n N is required");
    expect_usage_error((const char *const[]){"-n", "0", child_path, NULL}, "at least 1");
    expect_usage_error((const char *const[]){"-n", "abc", child_path, NULL},
                       "'abc' is not a number");
    expect_usage_error((const char *const[]){"-n", "-3", child_path, NULL}, "'-3' is not a number");
    expect_usage_error((const char *const[]){"-n", "100000", child_path, NULL}, "too many");
    expect_usage_error((const char *const[]){"-n", "99999999999999999999", child_path, NULL},
                       "too many");
    expect_usage_error((const char *const[]){"-n", NULL}, "-n needs a value");
    expect_usage_error((const char *const[]){"-n", "2", NULL}, "no program");
    expect_usage_error((const char *const[]){"-n", "2", "--", NULL}, "no program");
    expect_usage_error((const char *const[]){"-n", "2", "--frobnicate", child_path, NULL},
                       "unknown option '--frobnicate'");
    expect_usage_error((const char *const[]){"-n", "2", "--timeout", "soon", child_path, NULL},
                       "--timeout: 'soon'");
    expect_usage_error((const char *const[]){"-n", "2", "--timeout", "0", child_path, NULL},
                       "--timeout: '0'");

    job_t j;
    run(&j, (const char *const[]){"--help", NULL});
    assert_int_equal(exit_code(&j), 0);
    assert_has(j.text[0], "Usage: sx_run -n N");
    job_free(&j);

    /* The accepted spellings. */
    run(&j, (const char *const[]){"-n2", "--timeout=60", "--", child_path, "exit", "0", NULL});
    assert_int_equal(exit_code(&j), 0);
    job_free(&j);
    run(&j, (const char *const[]){"--np=2", child_path, "exit", "0", NULL});
    assert_int_equal(exit_code(&j), 0);
    job_free(&j);
}

static void test_program_not_found(void **state)
{
    (void)state;
    job_t j;

    run(&j, (const char *const[]){"-n", "2", "sx_no_such_program_0451", NULL});
    assert_int_equal(exit_code(&j), 127);
    assert_has(j.text[1], "sx_no_such_program_0451: command not found");
    job_free(&j);

    run(&j, (const char *const[]){"-n", "2", "/nonexistent/sx_prog", NULL});
    assert_int_equal(exit_code(&j), 127);
    assert_has(j.text[1], "/nonexistent/sx_prog: No such file or directory");
    job_free(&j);

    /* Found but not executable: 126, as a shell says. */
    char dir[64], path[128];
    make_dir(dir, sizeof(dir));
    snprintf(path, sizeof(path), "%s/fifo", dir); /* remove_dir's name */
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);
    run(&j, (const char *const[]){"-n", "1", path, NULL});
    assert_int_equal(exit_code(&j), 126);
    assert_has(j.text[1], "Permission denied");
    job_free(&j);
    remove_dir(dir);
}

/* ------------------------------------------------------------- rendezvous */

static void test_rendezvous(void **state)
{
    (void)state;
    static const char *const counts[] = {"1", "2", "4", "8"};

    for (size_t c = 0; c < 4; c++) {
        int n = atoi(counts[c]);
        job_t j;
        run(&j, (const char *const[]){"-n", counts[c], child_path, "modex", "5", NULL});
        if (exit_code(&j) != 0)
            fail_msg("-n %d: status %d\nstdout:\n%s\nstderr:\n%s", n, exit_code(&j), j.text[0],
                     j.text[1]);
        for (int r = 0; r < n; r++) {
            char want[64];
            snprintf(want, sizeof(want), "[%d] modex ok %d\n", r, r);
            assert_has(j.text[0], want);
        }
        job_free(&j);
    }
}

/* A rank sends a malformed PUT: the launcher logs it, answers the rank
 * with RDV_ERROR, and stops the job with status 125. */
static void test_malformed_put(void **state)
{
    (void)state;
    static const struct {
        const char *kind, *logged;
    } cases[] = {
        {"short", "shorter than its 8-byte header"},
        {"range", "out of range"},
        {"size", "sx_run started 2"},
    };

    for (size_t c = 0; c < 3; c++) {
        job_t j;
        run(&j, (const char *const[]){"-n", "2", child_path, "badput", cases[c].kind, "1", NULL});
        assert_int_equal(exit_code(&j), 125);
        assert_has(j.text[1], cases[c].logged);
        assert_has(j.text[1], "the rendezvous failed");
        job_free(&j);
    }
}

/*
 * A rank exits with status 0 while the others wait for it in the
 * rendezvous: before it put its blob, or before the fence round they
 * entered. They are told (SX_ERR_PEER_UNREACHABLE, naming it) and sx_run
 * stops the job with status 1; on the build before, they waited for good
 * (sx_run stopped a job only for a non-zero status), here until the
 * test's hang detector.
 */
static void agent_setup(char *dir, size_t dlen, char *agent, size_t alen);

static void test_rank_leaves(void **state)
{
    (void)state;
    static const struct {
        const char *n, *stage, *told, *logged;
    } cases[] = {
        {"2", "put", "exchange: SX_ERR_PEER_UNREACHABLE", "rank 1 left"},
        {"3", "fence", "fence: SX_ERR_PEER_UNREACHABLE", "before fence round 1"},
    };

    for (size_t c = 0; c < 2; c++) {
        job_t j;
        run(&j, (const char *const[]){"-n", cases[c].n, child_path, "leave", "1", cases[c].stage,
                                      NULL});
        if (exit_code(&j) != 1)
            fail_msg("stage %s: status %d\nstdout:\n%s\nstderr:\n%s", cases[c].stage, exit_code(&j),
                     j.text[0], j.text[1]);
        /* Each waiting rank was told, in its fence or, when the verdict
         * came before it read the RDV_ALL, in its exchange. */
        for (int r = 0; r < atoi(cases[c].n); r++) {
            char fence[96], exch[96];
            if (r == 1)
                continue;
            snprintf(fence, sizeof(fence), "[%d] %s\n", r, cases[c].told);
            snprintf(exch, sizeof(exch), "[%d] exchange: SX_ERR_PEER_UNREACHABLE\n", r);
            if (strstr(j.text[0], fence) == NULL && strstr(j.text[0], exch) == NULL)
                fail_msg("rank %d was not told:\n%s", r, j.text[0]);
        }
        assert_has(j.text[1], cases[c].logged);
        assert_has(j.text[1], "rank 1 exited with status 0 while other ranks waited for it");
        job_free(&j);
    }

    /* The same across hosts: rank 1 on hostB, started through the agent,
     * leaves before the fence rank 0 (on hostA) waits in. */
    char dir[64], agent[128];
    job_t j;
    agent_setup(dir, sizeof(dir), agent, sizeof(agent));
    run(&j,
        (const char *const[]){"-H", "hostA,hostB", "-n", "2", "--agent", agent, "--rendezvous-addr",
                              "127.0.0.1", child_path, "leave", "1", "fence", NULL});
    if (exit_code(&j) != 1)
        fail_msg("-H: status %d\nstdout:\n%s\nstderr:\n%s", exit_code(&j), j.text[0], j.text[1]);
    /* Rank 0 was told, and printed so on its way out: the remote side
     * gave it its grace (the stop came both as standard input's end and
     * as SIGTERM, and the second took the grace away: 6 of 20 runs lost
     * the line under load). */
    if (strstr(j.text[0], "[0] fence: SX_ERR_PEER_UNREACHABLE\n") == NULL &&
        strstr(j.text[0], "[0] exchange: SX_ERR_PEER_UNREACHABLE\n") == NULL)
        fail_msg("-H: rank 0 was not told:\n%s", j.text[0]);
    assert_has(j.text[1], "before fence round 1");
    assert_has(j.text[1], "[0] [shardx ");
    assert_has(j.text[1], "rank 0: the sx_run launcher reports: ");
    assert_has(j.text[1], "(SX_ERR_PEER_UNREACHABLE)");
    job_free(&j);
    remove_dir(dir);
}

/* ------------------------------------------------------------ across hosts */

/*
 * The launcher agent of the -H tests, `agent.sh HOST COMMAND...`: it runs
 * COMMAND on this machine as ssh would run it on HOST, with a clean
 * environment (PATH, the sanitizers' options, and TEST_AGENT_HOST=HOST),
 * so that whatever a rank gets came on the command line. Every call
 * appends HOST to agent.log beside it. TEST_AGENT_MODE says how:
 *
 *   exec    runs COMMAND's words as they are (as `ip netns exec` does)
 *   shell   joins them with spaces for `sh -c` (as ssh does)
 *   detach  as exec, but in a session of its own under a shell that
 *           ignores SIGTERM, SIGINT and SIGHUP: like ssh's remote end,
 *           which sx_run's signals never reach; only its standard input
 *           closing (or the agent's death) tells it the job is over
 */
static const char agent_script[] =
    "#!/bin/sh\n"
    "host=$1\n"
    "shift\n"
    "echo \"$host\" >>\"${0%/*}/agent.log\"\n"
    "case ${TEST_AGENT_MODE:-exec} in\n"
    "exec)\n"
    "    exec env -i PATH=\"$PATH\" ASAN_OPTIONS=\"${ASAN_OPTIONS-}\" "
    "UBSAN_OPTIONS=\"${UBSAN_OPTIONS-}\" TSAN_OPTIONS=\"${TSAN_OPTIONS-}\" "
    "TEST_AGENT_HOST=\"$host\" \"$@\" ;;\n"
    "shell)\n"
    "    exec env -i PATH=\"$PATH\" ASAN_OPTIONS=\"${ASAN_OPTIONS-}\" "
    "UBSAN_OPTIONS=\"${UBSAN_OPTIONS-}\" TSAN_OPTIONS=\"${TSAN_OPTIONS-}\" "
    "TEST_AGENT_HOST=\"$host\" sh -c \"$*\" ;;\n"
    "detach)\n"
    "    trap '' TERM INT HUP\n"
    "    setsid env -i PATH=\"$PATH\" ASAN_OPTIONS=\"${ASAN_OPTIONS-}\" "
    "UBSAN_OPTIONS=\"${UBSAN_OPTIONS-}\" TSAN_OPTIONS=\"${TSAN_OPTIONS-}\" "
    "TEST_AGENT_HOST=\"$host\" \"$@\" ;;\n"
    "esac\n";

/* A temporary directory with the agent in it; @p agent gets its path. */
static void agent_setup(char *dir, size_t dlen, char *agent, size_t alen)
{
    make_dir(dir, dlen);
    snprintf(agent, alen, "%s/agent.sh", dir);
    FILE *f = fopen(agent, "w");
    assert_non_null(f);
    assert_int_equal(fputs(agent_script, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(chmod(agent, 0755), 0);
}

/* How many times the agent was asked for @p host. */
static int agent_calls(const char *dir, const char *host)
{
    char path[256], line[256];
    int n = 0;

    snprintf(path, sizeof(path), "%s/agent.log", dir);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        line[strcspn(line, "\n")] = '\0';
        n += strcmp(line, host) == 0;
    }
    fclose(f);
    return n;
}

/* What sx_run_child's show mode prints for @p s. */
static void hex_of(const char *s, char *out, size_t len)
{
    size_t k = 0;

    if (s == NULL) {
        snprintf(out, len, "unset");
        return;
    }
    if (*s == '\0') {
        snprintf(out, len, "empty");
        return;
    }
    for (; *s != '\0' && k + 3 < len; s++)
        k += (size_t)snprintf(out + k, len - k, "%02x", (unsigned char)*s);
}

/* Runs `sx_run -H ... show -` and checks each rank's host. */
static void check_placement(const char *dir, const char *const *args, const char *const *want,
                            int n)
{
    job_t j;

    run(&j, args);
    if (exit_code(&j) != 0)
        fail_msg("status %d\nstdout:\n%s\nstderr:\n%s", exit_code(&j), j.text[0], j.text[1]);
    for (int r = 0; r < n; r++) {
        char line[128];
        snprintf(line, sizeof(line), "[%d] show %d host=%s cwd=", r, r, want[r]);
        assert_has(j.text[0], line);
    }
    assert_int_equal(count_of(j.text[0], "] show "), n);
    job_free(&j);
    (void)dir;
}

/* Ranks go to the hosts in blocks; HOST:SLOTS takes SLOTS of them; a host
 * that is this machine starts its ranks without the agent. */
static void test_hosts_placement(void **state)
{
    (void)state;
    char dir[64], agent[128];

    agent_setup(dir, sizeof(dir), agent, sizeof(agent));
    check_placement(dir,
                    (const char *const[]){"-H", "hostA,hostB,hostC", "-n", "5", "--agent", agent,
                                          "--rendezvous-addr", "127.0.0.1", child_path, "show", "-",
                                          NULL},
                    (const char *const[]){"hostA", "hostA", "hostB", "hostB", "hostC"}, 5);
    assert_int_equal(agent_calls(dir, "hostA"), 2);
    assert_int_equal(agent_calls(dir, "hostC"), 1);
    check_placement(dir,
                    (const char *const[]){"-H", "hostA:1,hostB:3", "-n", "4", "--agent", agent,
                                          "--rendezvous-addr", "127.0.0.1", child_path, "show", "-",
                                          NULL},
                    (const char *const[]){"hostA", "hostB", "hostB", "hostB"}, 4);
    /* Counted hosts take their slots; the others share the rest. Two -H
     * add up; without -n, the slots say how many. */
    check_placement(dir,
                    (const char *const[]){"-H", "hostC,hostD:2", "-H", "hostE", "-n", "5",
                                          "--agent", agent, "--rendezvous-addr", "127.0.0.1",
                                          child_path, "show", "-", NULL},
                    (const char *const[]){"hostC", "hostC", "hostD", "hostD", "hostE"}, 5);
    check_placement(dir,
                    (const char *const[]){"-H", "hostF:2,hostG:1", "--agent", agent,
                                          "--rendezvous-addr", "127.0.0.1", child_path, "show", "-",
                                          NULL},
                    (const char *const[]){"hostF", "hostF", "hostG"}, 3);
    /* localhost: started here, not through the agent. */
    check_placement(dir,
                    (const char *const[]){"-H", "localhost,hostH", "-n", "4", "--agent", agent,
                                          "--rendezvous-addr", "127.0.0.1", child_path, "show", "-",
                                          NULL},
                    (const char *const[]){"-", "-", "hostH", "hostH"}, 4);
    assert_int_equal(agent_calls(dir, "hostH"), 2);
    assert_int_equal(agent_calls(dir, "localhost"), 0);
    remove_dir(dir);
}

/* The rendezvous across hosts: with the address given, and with the one
 * sx_run finds towards the hosts (127.0.0.2 is reached from 127.0.0.1);
 * through both kinds of agent, and with ranks here and there. */
static void test_hosts_rendezvous(void **state)
{
    (void)state;
    static const char *const modes[] = {"exec", "shell"};
    char dir[64], agent[128];
    job_t j;

    agent_setup(dir, sizeof(dir), agent, sizeof(agent));
    for (size_t m = 0; m < 2; m++) {
        setenv("TEST_AGENT_MODE", modes[m], 1);
        const char *const *cases[] = {
            (const char *const[]){"-H", "hostA,hostB,hostC", "-n", "5", "--agent", agent,
                                  "--rendezvous-addr", "127.0.0.1", child_path, "modex", "5", NULL},
            (const char *const[]){"-H", "127.0.0.1,127.0.0.2", "-n", "4", "--agent", agent,
                                  child_path, "modex", "3", NULL},
            (const char *const[]){"-H", "localhost:2,hostB", "-n", "4", "--agent", agent,
                                  "--rendezvous-addr", "127.0.0.1", child_path, "modex", "3", NULL},
        };
        static const int counts[] = {5, 4, 4};
        for (size_t c = 0; c < 3; c++) {
            run(&j, cases[c]);
            if (exit_code(&j) != 0)
                fail_msg("%s, case %zu: status %d\nstdout:\n%s\nstderr:\n%s", modes[m], c,
                         exit_code(&j), j.text[0], j.text[1]);
            for (int r = 0; r < counts[c]; r++) {
                char want[64];
                snprintf(want, sizeof(want), "[%d] modex ok %d\n", r, r);
                assert_has(j.text[0], want);
            }
            job_free(&j);
        }
    }
    unsetenv("TEST_AGENT_MODE");

    /* What the ranks are told, and their standard input: /dev/null, not
     * the agent's. */
    run(&j, (const char *const[]){"-H", "127.0.0.2", "-n", "2", "--agent", agent, child_path, "env",
                                  NULL});
    assert_int_equal(exit_code(&j), 0);
    assert_has(j.text[0], "[0] env 0 2 127.0.0.1:");
    assert_has(j.text[0], "[1] env 1 2 127.0.0.1:");
    assert_int_equal(count_of(j.text[0], "stdin=empty"), 2);
    assert_int_equal(count_of(j.text[0], "local=0/2 stdin"), 1);
    assert_int_equal(count_of(j.text[0], "local=1/2 stdin"), 1);
    job_free(&j);

    /* The local rank counts the ranks of the same host, also when the
     * host is listed twice: 0 and 3 share hostA, 1-2 are on hostB. */
    run(&j, (const char *const[]){"-H", "hostA:1,hostB:2,hostA:1", "--agent", agent,
                                  "--rendezvous-addr", "127.0.0.1", child_path, "env", NULL});
    if (exit_code(&j) != 0)
        fail_msg("status %d\nstdout:\n%s\nstderr:\n%s", exit_code(&j), j.text[0], j.text[1]);
    static const char *const locals[] = {"local=0/2", "local=0/2", "local=1/2", "local=1/2"};
    for (int r = 0; r < 4; r++) {
        char want[64];
        snprintf(want, sizeof(want), "[%d] env %d 4 ", r, r);
        const char *line = strstr(j.text[0], want);
        assert_non_null(line);
        if (strncmp(strstr(line, "local="), locals[r], strlen(locals[r])) != 0)
            fail_msg("rank %d: want %s in: %.*s", r, locals[r], (int)strcspn(line, "\n"), line);
    }
    job_free(&j);
    remove_dir(dir);
}

/* Arguments and variables with blanks, quotes and shell syntax arrive
 * intact, through either kind of agent, with the working directory. */
static void test_hosts_environment_and_arguments(void **state)
{
    (void)state;
    static const char *const weird[] = {
        "a b", "it's", "\"q\" \\", "",          "$(echo no) `echo no` ${HOME}",
        "*",   "~",    "#c",       "new\nline", "%41",
        "%",   "=x",   "-x",       "\xc3\xa9",  "a;b|c&d>e<f",
        "'",   NULL};
    static const char *const modes[] = {"exec", "shell"};
    const char *fwd = "v a l 'q' \"d\" $HOME ~ # % %41 \\ ;|&\nline 2";
    char dir[64], agent[128], cwd[4096];

    agent_setup(dir, sizeof(dir), agent, sizeof(agent));
    assert_non_null(realpath(dir, cwd));
    setenv("SX_TEST_FWD", fwd, 1);
    setenv("TEST_X_INHERIT", "in herit", 1);
    setenv("NOTSX_VAR", "here only", 1);
    for (size_t m = 0; m < 2; m++) {
        const char *args[MAX_ARGS];
        int n = 0;
        static const char *const head[] = {"-H", "localhost,hostB,hostC", "-n", "3", "--agent",
                                           NULL};
        for (int i = 0; head[i] != NULL; i++)
            args[n++] = head[i];
        args[n++] = agent;
        static const char *const mid[] = {"--rendezvous-addr",
                                          "127.0.0.1",
                                          "-x",
                                          "TEST_X_INHERIT",
                                          "-x",
                                          "TEST_X_SET=x=y z",
                                          "--env=TEST_X_SET=final value",
                                          NULL};
        for (int i = 0; mid[i] != NULL; i++)
            args[n++] = mid[i];
        args[n++] = child_path;
        args[n++] = "show";
        args[n++] = "SX_TEST_FWD,TEST_X_INHERIT,TEST_X_SET,NOTSX_VAR";
        for (int i = 0; weird[i] != NULL; i++)
            args[n++] = weird[i];
        args[n] = NULL;

        setenv("TEST_AGENT_MODE", modes[m], 1);
        job_cwd = dir;
        job_t j;
        run(&j, args);
        job_cwd = NULL;
        if (exit_code(&j) != 0)
            fail_msg("%s: status %d\nstdout:\n%s\nstderr:\n%s", modes[m], exit_code(&j), j.text[0],
                     j.text[1]);
        static const char *const hosts[] = {"-", "hostB", "hostC"};
        for (int r = 0; r < 3; r++) {
            static char want[16384];
            char hex[4096];
            size_t k = 0;
            k += (size_t)snprintf(want + k, sizeof(want) - k, "[%d] show %d host=%s cwd=", r, r,
                                  hosts[r]);
            hex_of(cwd, hex, sizeof(hex));
            k += (size_t)snprintf(want + k, sizeof(want) - k, "%s env=", hex);
            const char *vals[] = {fwd, "in herit", "final value", r == 0 ? "here only" : NULL};
            for (int v = 0; v < 4; v++) {
                hex_of(vals[v], hex, sizeof(hex));
                k += (size_t)snprintf(want + k, sizeof(want) - k, "%s%s", v > 0 ? "|" : "", hex);
            }
            k += (size_t)snprintf(want + k, sizeof(want) - k, " args=");
            for (int i = 0; weird[i] != NULL; i++) {
                hex_of(weird[i], hex, sizeof(hex));
                k += (size_t)snprintf(want + k, sizeof(want) - k, "%s%s", i > 0 ? "," : "", hex);
            }
            snprintf(want + k, sizeof(want) - k, "\n");
            if (strstr(j.text[0], want) == NULL)
                fail_msg("%s: rank %d: want\n%s\nin:\n%s\nstderr:\n%s", modes[m], r, want,
                         j.text[0], j.text[1]);
        }
        job_free(&j);
    }
    unsetenv("TEST_AGENT_MODE");
    unsetenv("SX_TEST_FWD");
    unsetenv("TEST_X_INHERIT");
    unsetenv("NOTSX_VAR");
    remove_dir(dir);
}

/* Every rank, grandchild and remote side of a job that has ended is gone
 * (ranks that never printed their ready line are skipped). */
static void assert_job_gone(const job_t *j, const char *dir, int n)
{
    pid_t pids[MAX_RANKS], ppids[MAX_RANKS];

    ready_pids2(j, pids, ppids, n);
    for (int r = 0; r < n; r++) {
        if (pids[r] == 0)
            continue;
        assert_gone(pids[r], "a rank");
        assert_gone(read_pid_file(dir, r), "a rank's grandchild");
        assert_gone(ppids[r], "a rank's parent (the remote side)");
    }
}

/* A remote rank fails: its status is sx_run's, the rank and host named;
 * a remote rank killed by a signal is named by its remote side. */
static void test_hosts_failure(void **state)
{
    (void)state;
    char dir[64], agent[128], fifo[128];
    pid_t pids[MAX_RANKS];
    job_t j;

    agent_setup(dir, sizeof(dir), agent, sizeof(agent));
    snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    job_start(&j, (const char *const[]){"-H", "hostA,hostB", "-n", "4", "--agent", agent,
                                        "--rendezvous-addr", "127.0.0.1", child_path, "fail", "3",
                                        "3", fifo, dir, NULL});
    job_wait_for(&j, "] ready ", 4);
    assert_int_equal(ready_pids(&j, pids, 4), 4);
    int fd = open(fifo, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "x", 1), 1);
    close(fd);
    job_finish(&j);
    assert_int_equal(exit_code(&j), 3);
    assert_has(j.text[1], "rank 3 (on hostB, agent pid ");
    assert_has(j.text[1], "exited with status 3; stopping the job");
    assert_job_gone(&j, dir, 4);
    job_free(&j);

    run(&j, (const char *const[]){"-H", "hostA", "-n", "1", "--agent", agent, "--rendezvous-addr",
                                  "127.0.0.1", child_path, "signal", "10", NULL});
    assert_int_equal(exit_code(&j), 128 + 10);
    assert_has(j.text[1], "[0] sx_run: hostA: rank 0 (pid ");
    assert_has(j.text[1], "was killed by signal 10 (SIGUSR1)");
    assert_has(j.text[1], "rank 0 (on hostA, agent pid ");
    job_free(&j);
    remove_dir(dir);
}

static void check_hosts_timeout(const char *n_s, const char *timeout, const char *how)
{
    char dir[64], agent[128];
    job_t j;

    agent_setup(dir, sizeof(dir), agent, sizeof(agent));
    job_start(&j, (const char *const[]){"-H", "hostA,hostB", "-n", n_s, "--timeout", timeout,
                                        "--agent", agent, "--rendezvous-addr", "127.0.0.1",
                                        child_path, "hang", dir, how, NULL});
    job_finish(&j);
    assert_int_equal(exit_code(&j), 124);
    assert_has(j.text[1], "timeout");
    assert_job_gone(&j, dir, atoi(n_s));
    job_free(&j);
    remove_dir(dir);
}

/* The timeout stops remote ranks, their grandchildren and remote sides;
 * ranks that ignore SIGTERM too (their remote side's SIGKILL, or its
 * death's). */
static void test_hosts_timeout(void **state)
{
    (void)state;
    check_hosts_timeout("4", "6", NULL);
    check_hosts_timeout("2", "4", "noterm");
}

/* The agent's process tree killed with SIGKILL: the rank goes with its
 * remote side, sx_run reports the signal and stops the rest. */
static void test_hosts_agent_killed(void **state)
{
    (void)state;
    char dir[64], agent[128];
    pid_t pids[MAX_RANKS], ppids[MAX_RANKS];
    job_t j;

    agent_setup(dir, sizeof(dir), agent, sizeof(agent));
    job_start(&j, (const char *const[]){"-H", "hostA,hostB", "-n", "4", "--agent", agent,
                                        "--rendezvous-addr", "127.0.0.1", child_path, "hang", dir,
                                        NULL});
    job_wait_for(&j, "] ready ", 4);
    assert_int_equal(ready_pids2(&j, pids, ppids, 4), 4);
    /* The exec agent became the remote side: its group is the agent's. */
    pid_t pgid = getpgid(ppids[3]);
    assert_int_equal(pgid, ppids[3]);
    assert_int_equal(kill(-pgid, SIGKILL), 0);
    job_finish(&j);
    assert_int_equal(exit_code(&j), 128 + SIGKILL);
    char want[128];
    snprintf(want, sizeof(want), "rank 3 (on hostB): its agent (pid %d) was killed by signal 9",
             (int)pgid);
    assert_has(j.text[1], want);
    assert_job_gone(&j, dir, 4);
    job_free(&j);
    remove_dir(dir);
}

/* Waits for @p pid to end and to be reaped: by us once it is ours (an
 * orphan comes to us, the subreaper), or by its parent. Between its end
 * and its reaping it is a zombie whose parent may itself be dying; that
 * short moment is polled. */
static void wait_ended(pid_t pid)
{
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);

    if (pidfd < 0) {
        assert_int_equal(errno, ESRCH);
        return;
    }
    struct pollfd pfd = {.fd = pidfd, .events = POLLIN};
    int rc;
    do
        rc = poll(&pfd, 1, WAIT_MS);
    while (rc < 0 && errno == EINTR);
    close(pidfd);
    if (rc != 1)
        fail_msg("pid %d did not end", (int)pid);
    uint64_t deadline = now_ms() + WAIT_MS;
    while (waitpid(pid, NULL, WNOHANG) != pid && kill(pid, 0) == 0) {
        if (now_ms() > deadline)
            fail_msg("pid %d ended but was never reaped", (int)pid);
        poll(NULL, 0, 5);
    }
}

/* An agent like ssh, whose remote end no signal of sx_run reaches: the
 * remote side stops its rank (with SIGTERM, which the rank records) when
 * its standard input closes: when sx_run stops the job, and when sx_run
 * is killed with SIGKILL. */
static void test_hosts_input_closed(void **state)
{
    (void)state;
    char dir[64], agent[128], path[256];
    pid_t pids[MAX_RANKS], ppids[MAX_RANKS];
    job_t j;

    setenv("TEST_AGENT_MODE", "detach", 1);
    for (int kill9 = 0; kill9 < 2; kill9++) {
        agent_setup(dir, sizeof(dir), agent, sizeof(agent));
        job_start(&j, (const char *const[]){"-H", "hostA,hostB", "-n", "2", "--agent", agent,
                                            "--rendezvous-addr", "127.0.0.1", child_path, "hang",
                                            dir, "termfile", NULL});
        job_wait_for(&j, "] ready ", 2);
        assert_int_equal(ready_pids2(&j, pids, ppids, 2), 2);
        assert_int_equal(kill(j.pid, kill9 ? SIGKILL : SIGTERM), 0);
        if (kill9) {
            /* The remote sides outlive sx_run and its agents, and come
             * to us: they end once they have stopped their ranks. */
            while (waitpid(j.pid, &j.status, 0) < 0)
                assert_int_equal(errno, EINTR);
            j.pid = 0;
            for (int r = 0; r < 2; r++)
                wait_ended(ppids[r]);
        }
        job_finish(&j);
        assert_true(WIFSIGNALED(j.status));
        assert_int_equal(WTERMSIG(j.status), kill9 ? SIGKILL : SIGTERM);
        /* sx_run's end does not wait for the detached remote sides: they
         * stop their ranks after it (a fresh clone's TSan run checked the
         * files before rank 1's was written). */
        if (!kill9)
            for (int r = 0; r < 2; r++)
                wait_ended(ppids[r]);
        for (int r = 0; r < 2; r++) {
            snprintf(path, sizeof(path), "%s/term-%d", dir, r);
            if (access(path, F_OK) != 0)
                fail_msg("rank %d got no SIGTERM from its remote side; stderr:\n%s", r, j.text[1]);
        }
        assert_job_gone(&j, dir, 2);
        job_free(&j);
        remove_dir(dir);
    }
    unsetenv("TEST_AGENT_MODE");
}

static void test_hosts_bad_arguments(void **state)
{
    (void)state;
    expect_usage_error((const char *const[]){"-H", "", "-n", "1", child_path, NULL},
                       "-H needs a list of hosts");
    expect_usage_error((const char *const[]){"-H", "a:0", "-n", "1", child_path, NULL},
                       "'a:0': the slots must be a number");
    expect_usage_error((const char *const[]){"-H", "a,,b", "-n", "1", child_path, NULL},
                       "is not a host name");
    expect_usage_error((const char *const[]){"-H", "-oProxyCommand=x", "-n", "1", child_path, NULL},
                       "is not a host name");
    expect_usage_error((const char *const[]){"-H", "a b", "-n", "1", child_path, NULL},
                       "is not a host name");
    expect_usage_error((const char *const[]){"-H", "a:1,b:1", "-n", "3", child_path, NULL},
                       "the hosts given (-H) have 2 slots");
    expect_usage_error((const char *const[]){"-H", "a,b", child_path, NULL}, "-n N is required");
    expect_usage_error((const char *const[]){"-n", "1", "--agent", "ssh", child_path, NULL},
                       "there is no -H");
    expect_usage_error(
        (const char *const[]){"-H", "a", "-n", "1", "--agent", " ", child_path, NULL},
        "--agent needs a command");
    expect_usage_error((const char *const[]){"-H", "a", "-n", "1", "--rendezvous-addr",
                                             "127.0.0.1:0", child_path, NULL},
                       "the port must be");
    expect_usage_error((const char *const[]){"-n", "1", "-x", "1BAD", child_path, NULL},
                       "'1BAD' is not NAME or NAME=VALUE");
    expect_usage_error(
        (const char *const[]){"-n", "1", "-x", "SX_TEST_NEVER_SET_0451", child_path, NULL},
        "SX_TEST_NEVER_SET_0451 is not set here");

    job_t j;
    run(&j, (const char *const[]){"-H", "hostA", "-n", "1", "--agent", "sx_no_such_agent_0451",
                                  "--rendezvous-addr", "127.0.0.1", child_path, "exit", "0", NULL});
    assert_int_equal(exit_code(&j), 127);
    assert_has(j.text[1], "the agent sx_no_such_agent_0451: command not found");
    job_free(&j);
    /* -x reaches ranks here too; the last value of a name wins. */
    run(&j, (const char *const[]){"-x", "TEST_X_SET=one", "-xTEST_X_SET=two", "-n", "1", child_path,
                                  "show", "TEST_X_SET", NULL});
    assert_int_equal(exit_code(&j), 0);
    assert_has(j.text[0], "env=74776f args=");
    job_free(&j);
    /* The hidden mode refuses a caller of another version. */
    run(&j, (const char *const[]){"--remote-child", "0", "h", "0", "%2F", "0", "/bin/true", "true",
                                  NULL});
    assert_int_equal(exit_code(&j), 125);
    assert_has(j.text[1], "speaks version 1");
    job_free(&j);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s SX_RUN SX_RUN_CHILD\n", argv[0]);
        return 2;
    }
    /* Absolute: some tests start sx_run in another directory. */
    sx_run_path = realpath(argv[1], NULL);
    child_path = realpath(argv[2], NULL);
    if (sx_run_path == NULL || child_path == NULL) {
        perror("realpath");
        return 2;
    }
    /* Orphans of an sx_run killed with SIGKILL come to us, to be reaped. */
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
        perror("PR_SET_CHILD_SUBREAPER");
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    sx_test_filter_from_env();

    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_program_not_found),
        cmocka_unit_test(test_output_prefixes),
        cmocka_unit_test(test_output_no_prefix),
        cmocka_unit_test(test_very_long_line),
        cmocka_unit_test(test_environment),
        cmocka_unit_test(test_exit_status),
        cmocka_unit_test(test_failure_stops_the_job),
        cmocka_unit_test(test_timeout),
        cmocka_unit_test(test_signals_stop_the_job),
        cmocka_unit_test(test_sigkill_takes_the_ranks),
        cmocka_unit_test(test_rendezvous),
        cmocka_unit_test(test_malformed_put),
        cmocka_unit_test(test_rank_leaves),
        cmocka_unit_test(test_hosts_bad_arguments),
        cmocka_unit_test(test_hosts_placement),
        cmocka_unit_test(test_hosts_rendezvous),
        cmocka_unit_test(test_hosts_environment_and_arguments),
        cmocka_unit_test(test_hosts_failure),
        cmocka_unit_test(test_hosts_timeout),
        cmocka_unit_test(test_hosts_agent_killed),
        cmocka_unit_test(test_hosts_input_closed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
