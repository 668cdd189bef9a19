/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Helpers for tests that run shardx in several processes: start a peer
 * process, talk to it over a pair of pipes with small typed messages
 * (business cards, and whatever else the test sends), make sure no child
 * outlives its test, and generate message streams a receiver can verify.
 *
 * A child is this same test binary started again: fork(), then exec() of
 * /proc/self/exe with MP_CHILD_FLAG, so main() can hand it to the child's
 * code. The exec matters: a bare fork() of a process that has already run
 * an engine is not safe, because liburcu's call_rcu worker thread does not
 * survive fork() and the child's sx_engine_destroy() then waits for it
 * forever in rcu_barrier(). The cmocka parent runs many tests one after
 * another, so every test after the first would fork such a process.
 *
 * Pipe messages are at most PIPE_BUF bytes and written with one write(),
 * which POSIX makes atomic: a reader that sees the pipe readable finds the
 * whole message there.
 */
#ifndef SX_TESTS_MP_UTIL_H
#define SX_TESTS_MP_UTIL_H

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <shardx.h>

#define MP_CHILD_FLAG   "--mp-child"
#define MP_MSG_HDR      8
#define MP_MSG_MAX      (PIPE_BUF - MP_MSG_HDR)
#define MP_MAX_CHILDREN 4

/* Message types: business cards here, the rest the test's own. */
enum { MP_MSG_CARD = 1, MP_MSG_USER = 16 };

typedef struct mp_child {
    pid_t pid;   /* 0: not running (never started, or reaped) */
    int to_fd;   /* the parent writes here */
    int from_fd; /* the parent reads here */
    int status;  /* waitpid status once reaped */
} mp_child_t;

/* Every child started and not yet reaped, so that a test that fails in an
 * assertion (cmocka longjmps out of it) still kills and reaps them in its
 * teardown. Copies, not pointers to the test's mp_child_t: most tests keep
 * those on their stack, which the longjmp leaves to the teardown's own
 * frames, so the pid a stale pointer read there could be anything, -1
 * included: kill(-1, SIGKILL) is every process a root runner may signal.
 * A child not yet reaped keeps its pid, so the copy names no one else. */
static mp_child_t mp_live[MP_MAX_CHILDREN];

static inline bool mp_write_msg(int fd, uint32_t type, const void *data, uint32_t len)
{
    uint8_t buf[PIPE_BUF];
    ssize_t n;

    if (len > MP_MSG_MAX)
        return false;
    memcpy(buf, &type, 4);
    memcpy(buf + 4, &len, 4);
    if (len > 0)
        memcpy(buf + MP_MSG_HDR, data, len);
    do
        n = write(fd, buf, MP_MSG_HDR + (size_t)len);
    while (n < 0 && errno == EINTR);
    return n == (ssize_t)(MP_MSG_HDR + len);
}

static inline bool mp_read_full(int fd, void *buf, size_t len)
{
    uint8_t *p = buf;

    while (len > 0) {
        ssize_t n = read(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        p += n;
        len -= (size_t)n;
    }
    return true;
}

/*
 * Waits up to @p timeout_ms (0: only looks) for a message on @p fd.
 * Returns 1 with the message in @p data (at most @p cap bytes), 0 if none
 * came in time, -1 at end of file (the writer has gone) or on an error.
 */
static inline int mp_read_msg(int fd, int timeout_ms, uint32_t *type_p, void *data, uint32_t cap,
                              uint32_t *len_p)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    uint32_t hdr[2];
    int r;

    do
        r = poll(&pfd, 1, timeout_ms);
    while (r < 0 && errno == EINTR);
    if (r < 0)
        return -1;
    if (r == 0)
        return 0;
    if (!mp_read_full(fd, hdr, sizeof(hdr)) || hdr[1] > cap)
        return -1;
    if (hdr[1] > 0 && !mp_read_full(fd, data, hdr[1]))
        return -1;
    *type_p = hdr[0];
    if (len_p != NULL)
        *len_p = hdr[1];
    return 1;
}

/* Reads a message of type @p type and exactly @p len bytes. */
static inline bool mp_read_exact(int fd, int timeout_ms, uint32_t type, void *data, uint32_t len)
{
    uint32_t got_type, got_len;
    return mp_read_msg(fd, timeout_ms, &got_type, data, len, &got_len) == 1 && got_type == type &&
           got_len == len;
}

/*
 * A stream of messages a receiver can check without a copy: message i of
 * the stream named by @p seed has mp_msg_size(seed, i, base) bytes and
 * contents mp_msg_fill() writes. splitmix64's finaliser mixes the bits.
 */
static inline uint64_t mp_mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Mostly small messages, some up to a datagram, some chunked; past the
 * base stream, tiny ones that keep traffic flowing through a fault. */
static inline size_t mp_msg_size(uint64_t seed, uint64_t i, uint64_t base)
{
    uint64_t x = mp_mix(seed ^ mp_mix(i + 1));
    unsigned kind = (unsigned)(x & 15);

    x >>= 4;
    if (i >= base)
        return (size_t)(x % 64);
    if (kind == 0)
        return 0;
    if (kind < 10)
        return 1 + (size_t)(x % 2000);
    if (kind < 14)
        return 2000 + (size_t)(x % 62000);
    return 65536 + (size_t)(x % (200 * 1024 - 65536));
}

/* The first 8 bytes are the message number, the rest depend on the seed
 * and the number: a lost, repeated or misplaced message cannot pass. */
static inline uint64_t mp_msg_word(uint64_t seed, uint64_t i, size_t off)
{
    return off == 0 ? i : mp_mix(seed + mp_mix(i * 0x9e3779b97f4a7c15ull + off));
}

static inline void mp_msg_fill(uint8_t *buf, size_t len, uint64_t seed, uint64_t i)
{
    for (size_t off = 0; off < len; off += 8) {
        uint64_t w = mp_msg_word(seed, i, off);
        memcpy(buf + off, &w, len - off < 8 ? len - off : 8);
    }
}

static inline bool mp_msg_verify(const uint8_t *buf, size_t len, uint64_t seed, uint64_t i)
{
    for (size_t off = 0; off < len; off += 8) {
        uint64_t w = mp_msg_word(seed, i, off);
        if (memcmp(buf + off, &w, len - off < 8 ? len - off : 8) != 0)
            return false;
    }
    return true;
}

/* Writes @p engine's business card to @p fd. */
static inline bool mp_send_card(sx_engine_h engine, int fd)
{
    uint8_t card[MP_MSG_MAX];
    size_t len = sizeof(card);

    return sx_engine_address(engine, card, &len) == SX_OK &&
           mp_write_msg(fd, MP_MSG_CARD, card, (uint32_t)len);
}

/* Reads a business card from @p fd, waiting up to @p timeout_ms, and adds
 * its engine to @p engine as peer @p id. SX_OK, or why not. */
static inline int mp_recv_card(sx_engine_h engine, int fd, int timeout_ms, uint64_t id,
                               sx_peer_h *peer_p)
{
    uint8_t card[MP_MSG_MAX];
    uint32_t type, len;

    if (mp_read_msg(fd, timeout_ms, &type, card, sizeof(card), &len) != 1 || type != MP_MSG_CARD)
        return SX_ERR_NOT_FOUND;
    return sx_peer_add(engine, id, card, len, peer_p);
}

/*
 * Where children start: MP_CHILD_EXEC, when set, is a list of command
 * prefixes separated by ';' (words separated by spaces), and the k-th
 * child this process starts runs as "PREFIX[k % n] BINARY --mp-child RFD
 * WFD": the namespace cluster (tests/cluster) puts the children on other
 * hosts with "cluster.sh exec NAME 2;cluster.sh exec NAME 3", so that a
 * suite's engines talk across a network. A prefix must exec what it is
 * given (the child's pid is then the suite's to signal) and pass open
 * file descriptors on. Read before fork: between fork and exec only
 * async-signal-safe calls are made.
 */
#define MP_EXEC_WORDS 16
typedef struct mp_exec {
    char buf[1024];
    char *argv[MP_EXEC_WORDS + 5];
    bool prefixed; /* argv[0] is the prefix's program, else this binary */
} mp_exec_t;

static unsigned mp_spawned;

/* Fills @p x with the argument vector of child @p k: the prefix's words,
 * this binary (its path: /proc/self/exe would name the prefix's program
 * after the first exec), then the child's own arguments. */
static inline void mp_exec_argv(mp_exec_t *x, unsigned k, char *rfd, char *wfd)
{
    const char *list = getenv("MP_CHILD_EXEC");
    static char self[4096];
    unsigned n = 0, w = 0;

    x->buf[0] = '\0';
    x->prefixed = false;
    if (list != NULL && list[0] != '\0') {
        unsigned entries = 1;
        for (const char *p = list; *p != '\0'; p++)
            entries += *p == ';';
        const char *p = list;
        for (unsigned i = 0; i < k % entries; i++)
            p = strchr(p, ';') + 1;
        size_t len = strcspn(p, ";");
        if (len >= sizeof(x->buf))
            len = sizeof(x->buf) - 1;
        memcpy(x->buf, p, len);
        x->buf[len] = '\0';
        for (char *save = NULL, *word = strtok_r(x->buf, " ", &save);
             word != NULL && w < MP_EXEC_WORDS; word = strtok_r(NULL, " ", &save))
            x->argv[w++] = word;
    }
    if (w == 0) {
        x->argv[n++] = "mp-child";
    } else {
        ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
        self[len > 0 ? len : 0] = '\0';
        n = w;
        x->argv[n++] = self;
        x->prefixed = true;
    }
    x->argv[n++] = MP_CHILD_FLAG;
    x->argv[n++] = rfd;
    x->argv[n++] = wfd;
    x->argv[n] = NULL;
}

/*
 * Starts this binary again as a child: "argv0 --mp-child RFD WFD", where
 * the child reads from RFD and writes to WFD (through MP_CHILD_EXEC's
 * prefix, when set). Every pipe end is close-on-exec except the child's
 * own two, so a child never holds another child's pipe open (which would
 * hide that child's end of file).
 */
static inline bool mp_spawn(mp_child_t *c)
{
    int down[2], up[2];
    char rfd[16], wfd[16];
    pid_t parent = getpid();
    mp_exec_t x;

    if (pipe2(down, O_CLOEXEC) != 0)
        return false;
    if (pipe2(up, O_CLOEXEC) != 0) {
        close(down[0]);
        close(down[1]);
        return false;
    }
    snprintf(rfd, sizeof(rfd), "%d", down[0]);
    snprintf(wfd, sizeof(wfd), "%d", up[1]);
    mp_exec_argv(&x, mp_spawned++, rfd, wfd);
    pid_t pid = fork();
    if (pid == 0) {
        /* Async-signal-safe calls only between fork() and exec(). The
         * death signal makes the kernel kill the child if the test dies;
         * it survives the prefix's execs (none is set-user-ID). */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        fcntl(down[0], F_SETFD, 0);
        fcntl(up[1], F_SETFD, 0);
        if (x.prefixed)
            execvp(x.argv[0], x.argv);
        else
            execv("/proc/self/exe", x.argv);
        _exit(127);
    }
    close(down[0]);
    close(up[1]);
    if (pid < 0) {
        close(down[1]);
        close(up[0]);
        return false;
    }
    c->pid = pid;
    c->to_fd = down[1];
    c->from_fd = up[0];
    c->status = 0;
    for (int i = 0; i < MP_MAX_CHILDREN; i++) {
        if (mp_live[i].pid == 0) {
            mp_live[i] = *c;
            break;
        }
    }
    return true;
}

static inline void mp_forget(mp_child_t *c)
{
    for (int i = 0; i < MP_MAX_CHILDREN; i++) {
        if (c->pid > 0 && mp_live[i].pid == c->pid)
            mp_live[i].pid = 0;
    }
    close(c->to_fd);
    close(c->from_fd);
    c->pid = 0;
}

/*
 * Waits up to @p timeout_ms for the child to exit (its pipe reaches end of
 * file when it does; messages still unread are discarded), then reaps it.
 * A child that does not exit in time is killed. Returns true if it exited
 * on its own; its waitpid status is in c->status either way.
 */
static inline bool mp_reap(mp_child_t *c, int timeout_ms)
{
    struct pollfd pfd = {.fd = c->from_fd, .events = POLLIN};
    uint8_t sink[PIPE_BUF];
    bool on_its_own = false;

    if (c->pid == 0)
        return true;
    for (;;) {
        int r = poll(&pfd, 1, timeout_ms);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        ssize_t n = read(c->from_fd, sink, sizeof(sink));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            on_its_own = true;
            break;
        }
    }
    if (!on_its_own)
        kill(c->pid, SIGKILL);
    while (waitpid(c->pid, &c->status, 0) < 0 && errno == EINTR)
        ;
    mp_forget(c);
    return on_its_own;
}

/* Kills and reaps every child still running; for teardown. */
static inline void mp_kill_all(void)
{
    for (int i = 0; i < MP_MAX_CHILDREN; i++) {
        mp_child_t c = mp_live[i];
        if (c.pid <= 0)
            continue;
        kill(c.pid, SIGKILL);
        while (waitpid(c.pid, &c.status, 0) < 0 && errno == EINTR)
            ;
        mp_forget(&c);
    }
}

/* "exited 0", "killed by signal 9", ... for failure messages. */
static inline const char *mp_status_text(int status, char *buf, size_t len)
{
    if (WIFEXITED(status))
        snprintf(buf, len, "exited %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, len, "killed by signal %d", WTERMSIG(status));
    else
        snprintf(buf, len, "status 0x%x", status);
    return buf;
}

#endif /* SX_TESTS_MP_UTIL_H */
