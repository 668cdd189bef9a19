/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Diagnostics (issue 9): sx_dump, SX_DUMP_SIGNAL, the progress watchdog
 * (SX_WATCHDOG_S, SX_WATCHDOG_ABORT) and log rate limiting.
 *
 * The watchdog tests stall a real peer process deliberately: SIGSTOP in
 * one test, a peer that simply stops calling sx_progress in another, and an
 * active-message handler that does not return in a third. The
 * stalled operation then stays pending for as long as the test wants, so
 * the tests wait for the watchdog's output itself (with a deadline of
 * minutes that only stops a broken build from hanging), never for a
 * guessed time: on a loaded machine the report comes later, not wrongly.
 * Peer timeouts are set to an hour so that the stall is never turned into
 * a channel failure while the test waits.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <cmocka.h>

#include "common/log.h"
#include "test_filter.h"
#include "common/time.h"
#include "log_capture.h"
#include "mp_util.h"

#define TAG            5
#define WAIT_MS        (300 * 1000) /* deadline for anything to happen */
#define MSG_MODE       (MP_MSG_USER + 0)
#define MSG_QUIT       (MP_MSG_USER + 1)
#define MSG_COUNT      (MP_MSG_USER + 2)
#define MSG_READY      (MP_MSG_USER + 3)
#define MSG_STOPPED    (MP_MSG_USER + 4)
#define MODE_SINK      1 /* receive, count, and report the count at quit */
#define MODE_ABORTER   2 /* send to the parent with the watchdog set to abort */
#define MODE_SEND_ONE  3 /* send one message to the parent, then as MODE_SINK */
#define PEER_TIMEOUT   "3600000"
#define ABORT_LOG_PATH 128

typedef struct mode_msg {
    uint32_t mode;
    char log_path[ABORT_LOG_PATH];
} mode_msg_t;

static void count_message(void *arg, uint64_t peer_id, uint8_t tag, const void *data, size_t len)
{
    (void)peer_id;
    (void)tag;
    (void)data;
    (void)len;
    (*(uint64_t *)arg)++;
}

static void on_complete(void *ctx, int status)
{
    *(int *)ctx = status;
}

/* Sends one message to @p peer; *status_p becomes its completion status. */
static int send_one(sx_peer_h peer, int *status_p)
{
    static char payload[100] = "watch me";
    struct iovec iov = {.iov_base = payload, .iov_len = sizeof(payload)};
    *status_p = SX_INPROGRESS;
    return sx_send(peer, TAG, &iov, 1, on_complete, status_p);
}

/* Progresses until *status_p is no longer SX_INPROGRESS. */
static void wait_complete(sx_engine_h engine, int *status_p)
{
    uint64_t deadline = sx_time_ns() + (uint64_t)WAIT_MS * 1000000u;
    while (*(volatile int *)status_p == SX_INPROGRESS && sx_time_ns() < deadline)
        sx_progress(engine);
}

/* ---------------------------------------------------------------- child */

static int child_main(int rfd, int wfd)
{
    mode_msg_t mode;
    sx_engine_h engine;
    sx_peer_h parent;
    uint64_t received = 0;

    if (!mp_read_exact(rfd, WAIT_MS, MSG_MODE, &mode, sizeof(mode)))
        return 10;
    if (mode.mode == MODE_ABORTER) {
        /* The abort is the expected end: no core file for it. */
        struct rlimit none = {0, 0};
        setrlimit(RLIMIT_CORE, &none);
        sx_config_kv_t kv[] = {{"WATCHDOG_S", "1"},
                               {"WATCHDOG_ABORT", "yes"},
                               {"PEER_TIMEOUT_MS", PEER_TIMEOUT},
                               {"LOG_FILE", mode.log_path}};
        sx_engine_params_t params = {
            .field_mask = SX_ENGINE_PARAM_CONFIG, .config = kv, .config_count = 4};
        if (sx_engine_create(&params, &engine) != SX_OK)
            return 11;
    } else {
        sx_config_kv_t kv[] = {{"PEER_TIMEOUT_MS", PEER_TIMEOUT}};
        sx_engine_params_t params = {
            .field_mask = SX_ENGINE_PARAM_CONFIG, .config = kv, .config_count = 1};
        if (sx_engine_create(&params, &engine) != SX_OK)
            return 11;
    }
    sx_am_register(engine, TAG, count_message, &received);
    /* Home shard 0 everywhere, so every message uses lane 0. */
    if (sx_thread_bind(engine, 0) != SX_OK)
        return 18;
    if (!mp_send_card(engine, wfd) || mp_recv_card(engine, rfd, WAIT_MS, 0, &parent) != SX_OK)
        return 12;

    if (mode.mode == MODE_ABORTER) {
        int st;
        if (send_one(parent, &st) != SX_INPROGRESS)
            return 13;
        wait_complete(engine, &st);
        if (st != SX_OK || !mp_write_msg(wfd, MSG_READY, NULL, 0))
            return 14;
        /* The parent has stopped progressing: this one is never ACKed, and
         * the watchdog must report it and abort. */
        if (!mp_read_exact(rfd, WAIT_MS, MSG_STOPPED, NULL, 0))
            return 19;
        if (send_one(parent, &st) != SX_INPROGRESS)
            return 15;
        for (;;)
            sx_progress(engine);
    }

    if (mode.mode == MODE_SEND_ONE) {
        int st;
        if (send_one(parent, &st) != SX_INPROGRESS)
            return 20;
        wait_complete(engine, &st);
        if (st != SX_OK)
            return 21;
    }
    /* MODE_SINK: progress until the parent says quit, then report. */
    struct pollfd pfd = {.fd = rfd, .events = POLLIN};
    for (unsigned i = 0;; i++) {
        sx_progress(engine);
        if ((i & 255) == 0 && poll(&pfd, 1, 0) > 0)
            break;
    }
    if (!mp_read_exact(rfd, WAIT_MS, MSG_QUIT, NULL, 0))
        return 16;
    /* Our ACKs are out: the parent saw its sends complete before quit. */
    int ok = mp_write_msg(wfd, MSG_COUNT, &received, sizeof(received));
    sx_engine_destroy(engine);
    return ok ? 0 : 17;
}

/* ---------------------------------------------------------------- parent */

typedef struct pair {
    mp_child_t child;
    sx_engine_h engine;
    sx_peer_h peer;
} pair_t;

static void pair_start_mode(pair_t *p, const sx_config_kv_t *kv, size_t nkv, uint32_t child_mode)
{
    sx_engine_params_t params = {
        .field_mask = SX_ENGINE_PARAM_CONFIG, .config = kv, .config_count = nkv};
    assert_int_equal(sx_engine_create(&params, &p->engine), SX_OK);
    assert_int_equal(sx_thread_bind(p->engine, 0), SX_OK);
    assert_true(mp_spawn(&p->child));
    mode_msg_t mode = {.mode = child_mode};
    assert_true(mp_write_msg(p->child.to_fd, MSG_MODE, &mode, sizeof(mode)));
    assert_true(mp_send_card(p->engine, p->child.to_fd));
    assert_int_equal(mp_recv_card(p->engine, p->child.from_fd, WAIT_MS, 1, &p->peer), SX_OK);
}

static void pair_start(pair_t *p, const sx_config_kv_t *kv, size_t nkv)
{
    pair_start_mode(p, kv, nkv, MODE_SINK);
}

/* Tells the sink to quit; checks it received @p expect messages and exited 0. */
static void pair_finish(pair_t *p, uint64_t expect)
{
    uint64_t got = 0;
    char why[64];
    assert_true(mp_write_msg(p->child.to_fd, MSG_QUIT, NULL, 0));
    /* Keep serving the child's acknowledgements while it winds down. */
    struct pollfd pfd = {.fd = p->child.from_fd, .events = POLLIN};
    uint64_t deadline = sx_time_ns() + (uint64_t)WAIT_MS * 1000000u;
    while (poll(&pfd, 1, 0) == 0 && sx_time_ns() < deadline)
        sx_progress(p->engine);
    assert_true(mp_read_exact(p->child.from_fd, WAIT_MS, MSG_COUNT, &got, sizeof(got)));
    assert_int_equal(got, expect);
    assert_true(mp_reap(&p->child, WAIT_MS));
    if (!WIFEXITED(p->child.status) || WEXITSTATUS(p->child.status) != 0)
        fail_msg("child %s", mp_status_text(p->child.status, why, sizeof(why)));
    sx_engine_destroy(p->engine);
}

/* Progresses until the log holds @p needle (re-read every 50 ms). */
static char *progress_until_logged(sx_engine_h engine, const char *needle)
{
    uint64_t deadline = sx_time_ns() + (uint64_t)WAIT_MS * 1000000u, next_look = 0;
    static char text[65536];
    for (;;) {
        sx_progress(engine);
        uint64_t now = sx_time_ns();
        if (now < next_look)
            continue;
        next_look = now + 50 * 1000000u;
        FILE *f = fopen(log_capture_path, "r");
        assert_non_null(f);
        text[fread(text, 1, sizeof(text) - 1, f)] = '\0';
        fclose(f);
        if (strstr(text, needle) != NULL)
            return text;
        if (now > deadline)
            fail_msg("no \"%s\" in the log after %d s:\n%s", needle, WAIT_MS / 1000, text);
    }
}

static void test_watchdog_reports_stopped_peer(void **state)
{
    (void)state;
    pair_t p = {0};
    int st1, st2;
    sx_config_kv_t kv[] = {{"WATCHDOG_S", "1"}, {"PEER_TIMEOUT_MS", PEER_TIMEOUT}};

    capture_start();
    pair_start(&p, kv, 2);
    /* One message through first: the channel is up before the stall. */
    assert_int_equal(send_one(p.peer, &st1), SX_INPROGRESS);
    wait_complete(p.engine, &st1);
    assert_int_equal(st1, SX_OK);

    /* Stall the peer: stopped, it cannot acknowledge anything. */
    assert_int_equal(kill(p.child.pid, SIGSTOP), 0);
    int ws;
    assert_int_equal(waitpid(p.child.pid, &ws, WUNTRACED), p.child.pid);
    assert_true(WIFSTOPPED(ws));
    assert_int_equal(send_one(p.peer, &st2), SX_INPROGRESS);

    char *log = progress_until_logged(p.engine, "op am to peer 1");
    assert_contains(log, "watchdog (SX_WATCHDOG_S=1)");
    assert_contains(log, "pending longer than 1 s");
    assert_contains(log, "channel to peer 1 lane 0 (remote");
    assert_contains(log, "sent, waiting for the ACK");
    assert_int_equal(st2, SX_INPROGRESS);

    /* sx_dump shows the same stall. */
    char *dump = dump_text(p.engine);
    assert_contains(dump, "=== shardx dump: engine");
    assert_contains(dump, "inbox depth");
    assert_contains(dump, "channel to peer 1 lane 0 (remote");
    assert_contains(dump, "1 un-ACKed");
    assert_contains(dump, "next retransmit in");
    assert_contains(dump, "op am to peer 1 lane 0 tag 5, 100 bytes");
    assert_contains(dump, "=== end of shardx dump ===");
    free(dump);

    /* Resumed, the peer acknowledges and the operation completes. */
    assert_int_equal(kill(p.child.pid, SIGCONT), 0);
    wait_complete(p.engine, &st2);
    assert_int_equal(st2, SX_OK);
    pair_finish(&p, 2);
    free(capture_stop());
}

/* Reads the captured log into @p buf; whether it holds @p needle. */
static bool log_holds(char *buf, size_t cap, const char *needle)
{
    FILE *f = fopen(log_capture_path, "r");
    if (f == NULL)
        return false;
    buf[fread(buf, 1, cap - 1, f)] = '\0';
    fclose(f);
    return strstr(buf, needle) != NULL;
}

/*
 * A handler that does not return: it holds its shard's token until the
 * watchdog has reported the shard as busy, which it checks in the log
 * itself, so the stall lasts exactly as long as the test needs.
 */
static void blocking_handler(void *arg, uint64_t peer_id, uint8_t tag, const void *data, size_t len)
{
    static char text[65536];
    uint64_t deadline = sx_time_ns() + (uint64_t)WAIT_MS * 1000000u;
    (void)peer_id;
    (void)tag;
    (void)data;
    (void)len;
    while (!log_holds(text, sizeof(text), "its token has been held") && sx_time_ns() < deadline)
        poll(NULL, 0, 50); /* not synchronisation: the loop waits for the log line */
    (*(uint64_t *)arg)++;
}

static void test_watchdog_reports_blocked_callback(void **state)
{
    (void)state;
    pair_t p = {0};
    uint64_t handled = 0;
    static char text[65536];
    sx_config_kv_t kv[] = {{"WATCHDOG_S", "1"}, {"PEER_TIMEOUT_MS", PEER_TIMEOUT}};

    capture_start();
    pair_start_mode(&p, kv, 2, MODE_SEND_ONE);
    assert_int_equal(sx_am_register(p.engine, TAG, blocking_handler, &handled), SX_OK);
    uint64_t deadline = sx_time_ns() + (uint64_t)WAIT_MS * 1000000u;
    while (handled == 0 && sx_time_ns() < deadline)
        sx_progress(p.engine);
    assert_int_equal(handled, 1);
    assert_true(log_holds(text, sizeof(text), "shard 0: its token has been held for"));
    assert_contains(text, "a callback or a progress pass that does not return?");
    pair_finish(&p, 0);
    free(capture_stop());
}

static void test_dump_on_signal(void **state)
{
    (void)state;
    pair_t p = {0};
    int st;
    char sig[8];
    snprintf(sig, sizeof(sig), "%d", SIGUSR1);
    sx_config_kv_t kv[] = {{"DUMP_SIGNAL", sig}};

    capture_start();
    pair_start(&p, kv, 1);
    assert_int_equal(send_one(p.peer, &st), SX_INPROGRESS);
    wait_complete(p.engine, &st);
    assert_int_equal(st, SX_OK);
    assert_int_equal(kill(getpid(), SIGUSR1), 0);
    char *log = progress_until_logged(p.engine, "=== end of shardx dump ===");
    assert_contains(log, "=== shardx dump: engine shardx");
    assert_contains(log, "shard 0 (core");
    assert_contains(log, "channel to peer 1 lane 0 (remote, epoch");
    assert_contains(log, "0 un-ACKed");
    assert_contains(log, "rto ");
    pair_finish(&p, 1);
    free(capture_stop());
}

static void test_watchdog_abort(void **state)
{
    (void)state;
    mp_child_t child = {0};
    sx_engine_h engine;
    sx_peer_h peer;
    uint64_t received = 0;
    mode_msg_t mode = {.mode = MODE_ABORTER};
    char why[64];

    snprintf(mode.log_path, sizeof(mode.log_path), "/tmp/sx_test_watchdog_XXXXXX");
    int fd = mkstemp(mode.log_path);
    assert_true(fd >= 0);
    close(fd);
    /* This engine's library must stop answering when the test stops
     * progressing it: without its service thread (SX_SERVICE_US=0), a
     * caller that stops is a library that stops. */
    const sx_config_kv_t kv[] = {{"SERVICE_US", "0"}};
    sx_engine_params_t params = {
        .field_mask = SX_ENGINE_PARAM_CONFIG, .config = kv, .config_count = 1};
    assert_int_equal(sx_engine_create(&params, &engine), SX_OK);
    assert_int_equal(sx_thread_bind(engine, 0), SX_OK);
    sx_am_register(engine, TAG, count_message, &received);
    assert_true(mp_spawn(&child));
    assert_true(mp_write_msg(child.to_fd, MSG_MODE, &mode, sizeof(mode)));
    assert_true(mp_send_card(engine, child.to_fd));
    assert_int_equal(mp_recv_card(engine, child.from_fd, WAIT_MS, 1, &peer), SX_OK);
    /* Serve the child until its first message is acknowledged... */
    struct pollfd pfd = {.fd = child.from_fd, .events = POLLIN};
    uint64_t deadline = sx_time_ns() + (uint64_t)WAIT_MS * 1000000u;
    while (poll(&pfd, 1, 0) == 0 && sx_time_ns() < deadline)
        sx_progress(engine);
    assert_true(mp_read_exact(child.from_fd, WAIT_MS, MSG_READY, NULL, 0));
    assert_int_equal(received, 1);
    /* ...then stall: no more progress here, and only now does the child
     * send its second message, which is never acknowledged: its watchdog
     * must report it and abort. */
    assert_true(mp_write_msg(child.to_fd, MSG_STOPPED, NULL, 0));
    mp_reap(&child, WAIT_MS);
    if (!WIFSIGNALED(child.status) || WTERMSIG(child.status) != SIGABRT)
        fail_msg("the child should have aborted; it %s",
                 mp_status_text(child.status, why, sizeof(why)));
    FILE *f = fopen(mode.log_path, "r");
    assert_non_null(f);
    static char text[65536];
    text[fread(text, 1, sizeof(text) - 1, f)] = '\0';
    fclose(f);
    unlink(mode.log_path);
    assert_contains(text, "op am to peer 0 lane 0 tag 5, 100 bytes");
    assert_contains(text, "SX_WATCHDOG_ABORT is set; aborting");
    sx_engine_destroy(engine);
}

static void test_ratelimit(void **state)
{
    (void)state;
    sx_log_ratelimit_t rl = {0};
    unsigned suppressed, passed = 0;
    uint64_t t0 = 5 * 1000000000ull;

    for (int i = 0; i < 100; i++) {
        if (sx_log_ratelimit_pass(&rl, t0 + (uint64_t)i, &suppressed)) {
            passed++;
            assert_int_equal(suppressed, 0);
        }
    }
    assert_int_equal(passed, SX_LOG_RATELIMIT_BURST);
    /* Still inside the interval: held back. */
    assert_false(sx_log_ratelimit_pass(&rl, t0 + SX_LOG_RATELIMIT_INTERVAL_NS - 1, &suppressed));
    /* The next interval lets a line through and counts what was held. */
    assert_true(sx_log_ratelimit_pass(&rl, t0 + SX_LOG_RATELIMIT_INTERVAL_NS, &suppressed));
    assert_int_equal(suppressed, 100 - SX_LOG_RATELIMIT_BURST + 1);
    assert_true(sx_log_ratelimit_pass(&rl, t0 + SX_LOG_RATELIMIT_INTERVAL_NS + 1, &suppressed));
    assert_int_equal(suppressed, 0);

    /* Through the macro: a flood from one call site yields the burst. */
    capture_start();
    for (int i = 0; i < 50; i++)
        sx_warn_ratelimited("test", "flood line %d", i);
    sx_warn("test", "a different site");
    char *log = capture_stop();
    int lines = 0;
    for (const char *q = log; (q = strstr(q, "flood line")) != NULL; q++)
        lines++;
    assert_int_equal(lines, SX_LOG_RATELIMIT_BURST);
    assert_contains(log, "a different site");
    free(log);
}

static void test_invalid_signal(void **state)
{
    (void)state;
    sx_engine_h engine;
    char sig[8];
    snprintf(sig, sizeof(sig), "%d", SIGKILL);
    sx_config_kv_t kv[] = {{"DUMP_SIGNAL", sig}};
    sx_engine_params_t params = {
        .field_mask = SX_ENGINE_PARAM_CONFIG, .config = kv, .config_count = 1};
    capture_start();
    assert_int_equal(sx_engine_create(&params, &engine), SX_ERR_INVALID_PARAM);
    char *log = capture_stop();
    assert_contains(log, "SX_DUMP_SIGNAL=9");
    free(log);
    assert_int_equal(sx_dump(NULL, stderr), SX_ERR_INVALID_PARAM);
}

static int teardown(void **state)
{
    (void)state;
    (void)capture_abandon(); /* one that a failed assertion left running */
    mp_kill_all();
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], MP_CHILD_FLAG) == 0)
        return child_main(atoi(argv[2]), atoi(argv[3]));
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ratelimit),
        cmocka_unit_test(test_invalid_signal),
        cmocka_unit_test_teardown(test_watchdog_reports_stopped_peer, teardown),
        cmocka_unit_test_teardown(test_watchdog_reports_blocked_callback, teardown),
        cmocka_unit_test_teardown(test_dump_on_signal, teardown),
        cmocka_unit_test_teardown(test_watchdog_abort, teardown),
    };
    sx_test_filter_from_env();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
