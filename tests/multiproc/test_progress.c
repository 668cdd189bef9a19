/*
 * Progress modes: SX_PROGRESS=thread moves messages with no caller ever
 * calling sx_progress, including after the threads went to sleep (no lost
 * wake-up), and an engine is destroyed while its threads sleep in epoll;
 * sx_engine_fd becomes readable when a datagram is waiting.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <poll.h>
#include <sched.h>
#include <stdatomic.h>

#include "am_util.h"

typedef struct counters {
    atomic_ulong delivered;
    atomic_ulong completed;
    atomic_ulong failed;
} counters_t;

static void on_am(void *arg, uint64_t peer_id, uint8_t tag, const void *data, size_t len)
{
    (void)peer_id;
    (void)tag;
    (void)data;
    (void)len;
    atomic_fetch_add(&((counters_t *)arg)->delivered, 1);
}

static void on_done(void *arg, int status)
{
    counters_t *c = arg;
    atomic_fetch_add(&c->completed, 1);
    if (status != SX_OK)
        atomic_fetch_add(&c->failed, 1);
}

/* Waits (yielding, never sleeping for a fixed time) until *v reaches
 * target; the wall-clock bound only turns a hang into a failure. */
static bool wait_for(atomic_ulong *v, unsigned long target)
{
    uint64_t start = sx_time_ns();
    while (atomic_load(v) < target) {
        if (sx_time_ns() - start > AM_TEST_LIMIT_NS)
            return false;
        sched_yield();
    }
    return true;
}

static void test_threads_move_messages_and_wake_up(void **state)
{
    (void)state;
    /* SPIN_US=0: the threads go to sleep as soon as they run dry, so every
     * message below has to wake them up. */
    const sx_config_kv_t kv[] = {{"PROGRESS", "thread"}, {"SPIN_US", "0"}};
    sx_engine_h a = am_engine(kv, 2), b = am_engine(kv, 2);
    counters_t c = {0};
    uint8_t buf[2000];

    sx_peer_h to_b = am_connect(a, b, 2);
    (void)am_connect(b, a, 1);
    assert_int_equal(sx_am_register(b, 4, on_am, &c), SX_OK);
    for (unsigned long i = 0; i < 200; i++) {
        am_fill(buf, sizeof(buf), i);
        struct iovec iov = {buf, (i % 3) ? sizeof(buf) : 0};
        assert_int_equal(sx_send(to_b, 4, &iov, 1, on_done, &c), SX_INPROGRESS);
        assert_true(wait_for(&c.completed, i + 1));
        assert_true(wait_for(&c.delivered, i + 1));
    }
    assert_int_equal(atomic_load(&c.failed), 0);
    sx_engine_destroy(a);
    sx_engine_destroy(b);
}

/* The baseline with progress threads: they take the global lock too. */
static void test_threads_in_global_mode(void **state)
{
    (void)state;
    const sx_config_kv_t kv[] = {{"PROGRESS", "thread"}, {"THREAD_MODE", "global"}};
    sx_engine_h a = am_engine(kv, 2), b = am_engine(kv, 2);
    counters_t c = {0};
    uint8_t buf[300];

    sx_peer_h to_b = am_connect(a, b, 2);
    (void)am_connect(b, a, 1);
    assert_int_equal(sx_am_register(b, 4, on_am, &c), SX_OK);
    for (unsigned long i = 0; i < 50; i++) {
        struct iovec iov = {buf, sizeof(buf)};
        assert_int_equal(sx_send(to_b, 4, &iov, 1, on_done, &c), SX_INPROGRESS);
    }
    assert_true(wait_for(&c.completed, 50));
    assert_true(wait_for(&c.delivered, 50));
    assert_int_equal(atomic_load(&c.failed), 0);
    sx_engine_destroy(a);
    sx_engine_destroy(b);
}

static void test_destroy_while_threads_sleep(void **state)
{
    (void)state;
    const sx_config_kv_t kv[] = {{"PROGRESS", "thread"}, {"SPIN_US", "0"}};

    for (int i = 0; i < 20; i++) {
        sx_engine_h e = am_engine(kv, 2);
        sx_engine_destroy(e);
    }
}

static void test_engine_fd(void **state)
{
    (void)state;
    sx_engine_h a = am_engine(NULL, 0), b = am_engine(NULL, 0);
    counters_t c = {0};
    int fd = -1, fd2 = -1;
    uint8_t msg[64] = {0};

    assert_int_equal(sx_thread_bind(a, 0), SX_OK);
    assert_int_equal(sx_thread_bind(b, 0), SX_OK);
    sx_peer_h to_b = am_connect(a, b, 2);
    (void)am_connect(b, a, 1);
    assert_int_equal(sx_am_register(b, 4, on_am, &c), SX_OK);
    assert_int_equal(sx_engine_fd(b, &fd), SX_OK);
    assert_int_equal(sx_engine_fd(b, &fd2), SX_OK);
    assert_int_equal(fd, fd2);
    struct iovec iov = {msg, sizeof(msg)};
    assert_int_equal(sx_send(to_b, 4, &iov, 1, on_done, &c), SX_INPROGRESS);
    /* a's first packet (the handshake's CONNECT) went out when sx_send
     * returned: b's fd must turn readable. */
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    assert_int_equal(poll(&pfd, 1, 60000), 1);
    while (atomic_load(&c.delivered) == 0) {
        sx_progress(b);
        sx_progress(a);
    }
    assert_true(am_progress_until(a, b, (const uint64_t *)&c.completed, 1));
    assert_int_equal(sx_engine_fd(NULL, &fd), SX_ERR_INVALID_PARAM);
    sx_engine_destroy(a);
    sx_engine_destroy(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threads_move_messages_and_wake_up),
        cmocka_unit_test(test_threads_in_global_mode),
        cmocka_unit_test(test_destroy_while_threads_sleep),
        cmocka_unit_test(test_engine_fd),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
