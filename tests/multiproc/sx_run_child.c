/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The program test_sx_run starts under sx_run; what it does is chosen by
 * its arguments. SX_RUN_RANK and SX_RUN_SIZE come from sx_run.
 *
 *   print              lines on stdout and stderr, a 300 KB line, and a
 *                      last line without a newline
 *   bigline BYTES      one line of BYTES 'y's on stdout
 *   env                the SX_RUN_* variables, and whether stdin is empty
 *   exit CODE          exits with CODE
 *   signal SIG         kills itself with signal SIG
 *   hang DIR [noterm|termfile]
 *                      forks a grandchild that sleeps forever, writes its
 *                      pid to DIR/gc-RANK.pid, prints "ready RANK PID PPID"
 *                      and sleeps forever (noterm: ignoring SIGTERM;
 *                      termfile: creating DIR/term-RANK when SIGTERM comes,
 *                      then dying of it)
 *   fail RANK CODE FIFO DIR
 *                      as hang; then rank RANK reads a byte from FIFO and
 *                      exits with CODE
 *   modex ROUNDS       a modex exchange through sx_modex_sxrun_ops on an
 *                      OOB endpoint of its own, every rank's blob checked,
 *                      then ROUNDS fences (two at a time); "modex ok RANK"
 *   show NAMES ARGS... "show RANK host=H cwd=C env=V|V... args=A,A...":
 *                      H is TEST_AGENT_HOST (which the test's launcher
 *                      agent sets) or "-"; C, each V (the variables named
 *                      in NAMES, comma-separated; "-": none) and each A
 *                      (ARGS) in hex, an unset variable as "unset"
 *   badput KIND RANK   rank RANK sends a malformed RDV_PUT (KIND: short,
 *                      range, size) and prints the RDV_ERROR it gets; the
 *                      others exchange normally. Nobody exits: sx_run must
 *                      see the rendezvous fail and stop the job.
 *   leave RANK STAGE   rank RANK sets up the modex and exits 0 before its
 *                      exchange (STAGE put) or after it, before its first
 *                      fence (STAGE fence); the others exchange (and
 *                      fence), print "exchange: STATUS" or "fence:
 *                      STATUS" and wait for sx_run to stop them.
 *
 * Exit status 1 and a line on stderr when a check fails.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include <shardx.h>

#include "bootstrap/modex.h"
#include "bootstrap/oob.h"

static unsigned child_rank, child_size;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void die(const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "sx_run_child %u: ", child_rank);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

static char term_path[4096];
static bool term_wait;    /* termfile: SIGTERM is blocked and waited for */
static sigset_t term_set; /* { SIGTERM } */

/*
 * termfile takes SIGTERM with sigwaitinfo(), not with a handler. Under
 * ThreadSanitizer (GCC 12's libtsan) a handler's signal could be lost for
 * good: the runtime sets up a thread's signal state lazily, on its first
 * blocking call (this pause()), and a signal that comes in the middle of
 * that is queued where the runtime no longer looks. The rank slept on
 * until its remote side's SIGKILL, and test_hosts_input_closed failed once
 * in about 60 runs under load; a 30-line TSan program that is sent SIGTERM
 * as soon as it says it is ready lost 46 of 600 (none once it made one
 * blocking call first). A blocked signal is never delivered to a handler,
 * so no runtime stands between it and us.
 */
static void sleep_forever(void)
{
    if (term_wait) {
        while (sigwaitinfo(&term_set, NULL) != SIGTERM)
            ;
        int fd = open(term_path, O_WRONLY | O_CREAT, 0600);
        if (fd >= 0)
            close(fd);
        /* Dies of it, as the remote side expects of a rank. */
        signal(SIGTERM, SIG_DFL);
        raise(SIGTERM);
        sigprocmask(SIG_UNBLOCK, &term_set, NULL);
        die("still alive after SIGTERM");
    }
    for (;;)
        pause();
}

static void write_pid_file(const char *dir, const char *what, pid_t pid)
{
    char tmp[4096], path[4096];

    /* Written under another name and renamed, so a reader never sees a
     * half-written file. */
    snprintf(tmp, sizeof(tmp), "%s/.%s-%u.tmp", dir, what, child_rank);
    snprintf(path, sizeof(path), "%s/%s-%u.pid", dir, what, child_rank);
    FILE *f = fopen(tmp, "w");
    if (f == NULL)
        die("cannot write %s: %s", tmp, strerror(errno));
    fprintf(f, "%d\n", (int)pid);
    if (fclose(f) != 0 || rename(tmp, path) != 0)
        die("cannot write %s: %s", path, strerror(errno));
}

/* The grandchild, its pid file, the ready line. */
static void hang_setup(const char *dir, const char *how)
{
    if (strcmp(how, "noterm") == 0)
        signal(SIGTERM, SIG_IGN);
    fflush(NULL);
    pid_t gc = fork();
    if (gc < 0)
        die("fork: %s", strerror(errno));
    if (gc == 0)
        sleep_forever();
    if (strcmp(how, "termfile") == 0) {
        snprintf(term_path, sizeof(term_path), "%s/term-%u", dir, child_rank);
        sigemptyset(&term_set);
        sigaddset(&term_set, SIGTERM);
        sigprocmask(SIG_BLOCK, &term_set, NULL); /* after the fork: not the grandchild's */
        term_wait = true;
    }
    write_pid_file(dir, "gc", gc);
    printf("ready %u %d %d\n", child_rank, (int)getpid(), (int)getppid());
    fflush(stdout);
}

static void print_hex(const char *s)
{
    if (s == NULL) {
        fputs("unset", stdout);
        return;
    }
    if (*s == '\0')
        fputs("empty", stdout);
    for (; *s != '\0'; s++)
        printf("%02x", (unsigned char)*s);
}

static void do_show(const char *names, int argc, char **argv)
{
    char cwd[4096];
    const char *host = getenv("TEST_AGENT_HOST");

    if (getcwd(cwd, sizeof(cwd)) == NULL)
        die("getcwd: %s", strerror(errno));
    printf("show %u host=%s cwd=", child_rank, host != NULL ? host : "-");
    print_hex(cwd);
    fputs(" env=", stdout);
    if (strcmp(names, "-") != 0) {
        char *copy = strdup(names);
        char *save = NULL;
        bool first = true;
        for (char *n = strtok_r(copy, ",", &save); n != NULL; n = strtok_r(NULL, ",", &save)) {
            if (!first)
                putchar('|');
            first = false;
            print_hex(getenv(n));
        }
        free(copy);
    }
    fputs(" args=", stdout);
    for (int i = 0; i < argc; i++) {
        if (i > 0)
            putchar(',');
        print_hex(argv[i]);
    }
    putchar('\n');
}

static void do_print(void)
{
    printf("out %u line 1\n", child_rank);
    fprintf(stderr, "err %u line 1\n", child_rank);
    printf("out %u line 2\n", child_rank);
    printf("long %u ", child_rank);
    for (int i = 0; i < 300000; i++)
        putchar('x');
    putchar('\n');
    printf("tail %u", child_rank);
    fflush(stdout);
}

/* --------------------------------------------------------------- the modex */

static uint64_t random_id(void)
{
    uint64_t id = 0;

    while (id == 0 || id == SX_OOB_PEER_ANY) {
        if (getrandom(&id, sizeof(id), 0) != sizeof(id))
            die("getrandom: %s", strerror(errno));
    }
    return id;
}

/* Rank r's blob: r * 97 % 1000 bytes (rank 0's is empty), each a function
 * of the rank and the offset, so a blob in the wrong place cannot pass. */
static size_t blob_len(unsigned r)
{
    return (size_t)r * 97 % 1000;
}

static void blob_fill(uint8_t *b, unsigned r)
{
    for (size_t i = 0; i < blob_len(r); i++)
        b[i] = (uint8_t)(r * 31 + i * 7 + 1);
}

typedef struct fence_wait {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int done;
    int calls;
    int status;
} fence_wait_t;

static void on_fence(void *arg, int status)
{
    fence_wait_t *w = arg;

    pthread_mutex_lock(&w->lock);
    w->calls++;
    if (status != SX_OK && w->status == SX_OK)
        w->status = status;
    w->done++;
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

static void do_modex(unsigned rounds)
{
    sx_oob_t *oob;
    sx_modex_t m = {.ops = &sx_modex_sxrun_ops};
    uint8_t blob[1000], got[1000];

    if (!sx_modex_sxrun_ops.detect())
        die("detect() says sx_run did not start us");
    int rc = sx_oob_open(random_id(), NULL, 0, &oob);
    if (rc != SX_OK)
        die("sx_oob_open: %s", sx_strerror(rc));
    rc = sx_modex_sxrun_ops.init(&m, oob);
    if (rc != SX_OK)
        die("init: %s", sx_strerror(rc));
    if (m.rank != child_rank || m.size != child_size)
        die("init says rank %u of %u", m.rank, m.size);

    blob_fill(blob, m.rank);
    rc = sx_modex_sxrun_ops.exchange(&m, blob, blob_len(m.rank));
    if (rc != SX_OK)
        die("exchange: %s", sx_strerror(rc));
    for (unsigned r = 0; r < m.size; r++) {
        size_t len = sizeof(got);
        uint8_t want[1000];
        rc = sx_modex_sxrun_ops.get(&m, r, got, &len);
        blob_fill(want, r);
        if (rc != SX_OK || len != blob_len(r) || memcmp(got, want, len) != 0)
            die("rank %u's blob is wrong (%s, %zu bytes)", r, sx_strerror(rc), len);
        if (blob_len(r) > 0) {
            len = blob_len(r) - 1;
            rc = sx_modex_sxrun_ops.get(&m, r, got, &len);
            if (rc != SX_ERR_TRUNCATED || len != blob_len(r))
                die("get into a short buffer: %s, %zu", sx_strerror(rc), len);
        }
    }
    size_t len = sizeof(got);
    rc = sx_modex_sxrun_ops.get(&m, m.size, got, &len);
    if (rc != SX_ERR_OUT_OF_RANGE)
        die("get of rank %u: %s", m.size, sx_strerror(rc));

    /* Fences two at a time: the second is entered before the first is
     * done, which the launcher must allow. */
    fence_wait_t w = {.status = SX_OK};
    pthread_mutex_init(&w.lock, NULL);
    pthread_cond_init(&w.cond, NULL);
    for (unsigned k = 0; k < rounds; k += 2) {
        int want = (k + 1 < rounds) ? 2 : 1;
        pthread_mutex_lock(&w.lock);
        w.done = 0;
        pthread_mutex_unlock(&w.lock);
        for (int j = 0; j < want; j++) {
            rc = sx_modex_sxrun_ops.fence_nb(&m, on_fence, &w);
            if (rc != SX_OK)
                die("fence_nb: %s", sx_strerror(rc));
        }
        pthread_mutex_lock(&w.lock);
        while (w.done < want)
            pthread_cond_wait(&w.cond, &w.lock);
        pthread_mutex_unlock(&w.lock);
        if (w.status != SX_OK)
            die("fence failed: %s", sx_strerror(w.status));
    }
    if (w.calls != (int)rounds)
        die("%d fence callbacks for %u fences", w.calls, rounds);
    sx_modex_sxrun_ops.fini(&m);
    sx_oob_close(oob);
    pthread_cond_destroy(&w.cond);
    pthread_mutex_destroy(&w.lock);
    printf("modex ok %u\n", child_rank);
}

static void do_badput(const char *kind, unsigned bad_rank)
{
    if (child_rank != bad_rank) {
        /* A well-behaved rank: its exchange fails once the launcher gives
         * up; it waits for sx_run to stop it rather than exit first. */
        sx_oob_t *oob;
        sx_modex_t m = {.ops = &sx_modex_sxrun_ops};
        if (sx_oob_open(random_id(), NULL, 0, &oob) != SX_OK ||
            sx_modex_sxrun_ops.init(&m, oob) != SX_OK)
            die("cannot set up the modex");
        int rc = sx_modex_sxrun_ops.exchange(&m, "x", 1);
        printf("exchange: %s\n", sx_status_name(rc));
        fflush(stdout);
        sleep_forever();
    }

    sx_oob_t *oob;
    if (sx_oob_open(random_id(), NULL, 0, &oob) != SX_OK ||
        sx_oob_peer_set(oob, SX_OOB_ID_LAUNCHER, getenv(SX_RUN_ENV_ADDR)) != SX_OK)
        die("cannot reach the launcher");
    uint32_t hdr[2] = {child_rank, child_size}; /* little-endian hosts only */
    size_t len = sizeof(hdr);
    if (strcmp(kind, "short") == 0)
        len = 5;
    else if (strcmp(kind, "range") == 0)
        hdr[0] = child_size + 5;
    else if (strcmp(kind, "size") == 0)
        hdr[1] = child_size + 1;
    else
        die("unknown badput kind %s", kind);
    struct iovec iov = {.iov_base = hdr, .iov_len = len};
    int rc = sx_oob_send(oob, SX_OOB_ID_LAUNCHER, SX_OOB_TAG_RDV_PUT, &iov, 1, 30000);
    if (rc != SX_OK)
        die("send: %s", sx_strerror(rc));
    char text[1024];
    struct iovec riov = {.iov_base = text, .iov_len = sizeof(text) - 1};
    uint64_t peer = SX_OOB_ID_LAUNCHER;
    uint32_t tag = SX_OOB_TAG_RDV_ERROR;
    size_t got = 0;
    rc = sx_oob_recv(oob, &peer, &tag, &riov, 1, 0, 60000, &got);
    if (rc != SX_OK)
        die("no RDV_ERROR: %s", sx_strerror(rc));
    text[got] = '\0';
    printf("rdv error: %s\n", text);
    fflush(stdout);
    sleep_forever();
}

static void do_leave(unsigned leaver, const char *stage)
{
    sx_oob_t *oob;
    sx_modex_t m = {.ops = &sx_modex_sxrun_ops};
    bool at_fence = strcmp(stage, "fence") == 0;

    if (!at_fence && strcmp(stage, "put") != 0)
        die("unknown leave stage %s", stage);
    /* sx_run's SIGTERM waits until what this rank was told is printed. */
    sigset_t term;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    if (child_rank != leaver)
        pthread_sigmask(SIG_BLOCK, &term, NULL);
    if (sx_oob_open(random_id(), NULL, 0, &oob) != SX_OK ||
        sx_modex_sxrun_ops.init(&m, oob) != SX_OK)
        die("cannot set up the modex");
    if (child_rank == leaver && !at_fence)
        exit(0); /* the OOB endpoint's connection closes with the process */
    int rc = sx_modex_sxrun_ops.exchange(&m, "x", 1);
    if (child_rank == leaver)
        exit(rc == SX_OK ? 0 : 1);
    if (!at_fence || rc != SX_OK) {
        printf("exchange: %s\n", sx_status_name(rc));
    } else {
        fence_wait_t w = {.status = SX_OK};
        pthread_mutex_init(&w.lock, NULL);
        pthread_cond_init(&w.cond, NULL);
        rc = sx_modex_sxrun_ops.fence_nb(&m, on_fence, &w);
        if (rc != SX_OK)
            die("fence_nb: %s", sx_strerror(rc));
        pthread_mutex_lock(&w.lock);
        while (w.done < 1)
            pthread_cond_wait(&w.cond, &w.lock);
        pthread_mutex_unlock(&w.lock);
        printf("fence: %s\n", sx_status_name(w.status));
    }
    fflush(stdout);
    pthread_sigmask(SIG_UNBLOCK, &term, NULL);
    sleep_forever();
}

/* ------------------------------------------------------------------ main */

static unsigned env_uint(const char *name)
{
    const char *s = getenv(name);
    char *end;

    if (s == NULL)
        die("%s is not set", name);
    unsigned long v = strtoul(s, &end, 10);
    if (*s == '\0' || *end != '\0')
        die("%s='%s'", name, s);
    return (unsigned)v;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        die("usage: sx_run_child MODE ARGS...");
    child_rank = env_uint(SX_RUN_ENV_RANK);
    child_size = env_uint(SX_RUN_ENV_SIZE);
    const char *mode = argv[1];

    if (strcmp(mode, "print") == 0) {
        do_print();
    } else if (strcmp(mode, "bigline") == 0 && argc == 3) {
        long n = atol(argv[2]);
        for (long i = 0; i < n; i++)
            putchar('y');
        putchar('\n');
    } else if (strcmp(mode, "env") == 0) {
        char c;
        ssize_t n = read(0, &c, 1);
        printf("env %s %s %s local=%s/%s stdin=%s\n", getenv(SX_RUN_ENV_RANK),
               getenv(SX_RUN_ENV_SIZE), getenv(SX_RUN_ENV_ADDR), getenv(SX_RUN_ENV_LOCAL_RANK),
               getenv(SX_RUN_ENV_LOCAL_SIZE), n == 0 ? "empty" : "open");
    } else if (strcmp(mode, "exit") == 0 && argc == 3) {
        exit(atoi(argv[2]));
    } else if (strcmp(mode, "signal") == 0 && argc == 3) {
        signal(atoi(argv[2]), SIG_DFL);
        raise(atoi(argv[2]));
        die("still alive after signal %s", argv[2]);
    } else if (strcmp(mode, "hang") == 0 && (argc == 3 || argc == 4)) {
        hang_setup(argv[2], argc == 4 ? argv[3] : "");
        sleep_forever();
    } else if (strcmp(mode, "fail") == 0 && argc == 6) {
        hang_setup(argv[5], "");
        if (child_rank == (unsigned)atoi(argv[2])) {
            int fd = open(argv[4], O_RDONLY);
            char c;
            if (fd < 0 || read(fd, &c, 1) != 1)
                die("cannot read %s: %s", argv[4], strerror(errno));
            exit(atoi(argv[3]));
        }
        sleep_forever();
    } else if (strcmp(mode, "show") == 0 && argc >= 3) {
        do_show(argv[2], argc - 3, argv + 3);
    } else if (strcmp(mode, "modex") == 0 && argc == 3) {
        do_modex((unsigned)atoi(argv[2]));
    } else if (strcmp(mode, "leave") == 0 && argc == 4) {
        do_leave((unsigned)atoi(argv[2]), argv[3]);
    } else if (strcmp(mode, "badput") == 0 && argc == 4) {
        do_badput(argv[2], (unsigned)atoi(argv[3]));
    } else {
        die("unknown mode %s", mode);
    }
    fflush(NULL);
    return 0;
}
