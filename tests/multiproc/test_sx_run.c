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

#define WAIT_MS   120000 /* for anything that should take a moment */
#define MAX_RANKS 8
#define MAX_ARGS  16

static const char *sx_run_path;
static const char *child_path;

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
    char path[256];
    for (int r = 0; r < MAX_RANKS; r++) {
        snprintf(path, sizeof(path), "%s/gc-%d.pid", dir, r);
        unlink(path);
    }
    snprintf(path, sizeof(path), "%s/fifo", dir);
    unlink(path);
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

/* The pids of the ranks that printed "ready" (by rank; 0 when not). */
static int ready_pids(const job_t *j, pid_t *pids, int n)
{
    int found = 0;

    memset(pids, 0, sizeof(*pids) * (size_t)n);
    for (const char *p = j->text[0]; (p = strstr(p, "] ready ")) != NULL; p++) {
        int r, pid;
        if (sscanf(p, "] ready %d %d", &r, &pid) == 2 && r >= 0 && r < n) {
            pids[r] = pid;
            found++;
        }
    }
    return found;
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

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s SX_RUN SX_RUN_CHILD\n", argv[0]);
        return 2;
    }
    sx_run_path = argv[1];
    child_path = argv[2];
    /* Orphans of an sx_run killed with SIGKILL come to us, to be reaped. */
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
        perror("PR_SET_CHILD_SUBREAPER");
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);

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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
