/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Emulated RMA between two engines over UDP loopback: PUT and GET of 0 B
 * to 8 MiB with data checked byte for byte, and every remote-access error
 * (bad key, no right, out of range, deregistered) completing with an error
 * while the target's bytes stay untouched.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <urcu-bp.h>

#include "am_util.h"
#include "test_filter.h"

typedef struct done {
    uint64_t count;
    int last_status;
    uint64_t errors;
} done_t;

static void on_done(void *arg, int status)
{
    done_t *d = arg;
    d->count++;
    d->last_status = status;
    if (status != SX_OK)
        d->errors++;
}

typedef struct rig {
    sx_engine_h a, b;
    sx_peer_h a_to_b;
    uint8_t *region; /* at b */
    size_t len;
    sx_mem_h mem;
} rig_t;

static rig_t rig_new(size_t len, unsigned access)
{
    rig_t r = {.len = len};
    r.a = am_engine(NULL, 0);
    r.b = am_engine(NULL, 0);
    assert_int_equal(sx_thread_bind(r.a, 0), SX_OK);
    assert_int_equal(sx_thread_bind(r.b, 0), SX_OK);
    r.a_to_b = am_connect(r.a, r.b, 2);
    (void)am_connect(r.b, r.a, 1);
    r.region = malloc(len);
    memset(r.region, 0x5a, len);
    assert_int_equal(sx_mem_register(r.b, r.region, len, access, &r.mem), SX_OK);
    assert_int_not_equal(sx_mem_rkey(r.mem), 0);
    return r;
}

static void rig_free(rig_t *r)
{
    if (r->mem != NULL)
        assert_int_equal(sx_mem_deregister(r->b, r->mem), SX_OK);
    sx_engine_destroy(r->a);
    sx_engine_destroy(r->b);
    free(r->region);
}

static uint64_t addr_of(const void *p)
{
    return (uint64_t)(uintptr_t)p;
}

static void test_put_get_sizes(void **state)
{
    (void)state;
    const size_t max = 8u << 20;
    rig_t r = rig_new(max, SX_MEM_REMOTE_READ | SX_MEM_REMOTE_WRITE);
    uint8_t *src = malloc(max), *back = malloc(max);

    for (size_t len = 0; len <= max; len = len ? len * 4 : 1) {
        done_t d = {0};
        am_fill(src, len, len);
        size_t off = (len * 7) % (max - len + 1); /* somewhere inside */
        assert_int_equal(
            sx_put(r.a_to_b, src, len, addr_of(r.region + off), sx_mem_rkey(r.mem), on_done, &d),
            SX_INPROGRESS);
        assert_true(am_progress_until(r.a, r.b, &d.count, 1));
        assert_int_equal(d.last_status, SX_OK);
        /* Complete means visible at the target. */
        assert_memory_equal(r.region + off, src, len);

        memset(back, 0, len);
        assert_int_equal(
            sx_get(r.a_to_b, back, len, addr_of(r.region + off), sx_mem_rkey(r.mem), on_done, &d),
            SX_INPROGRESS);
        assert_true(am_progress_until(r.a, r.b, &d.count, 2));
        assert_int_equal(d.last_status, SX_OK);
        assert_memory_equal(back, src, len);
    }
    free(src);
    free(back);
    rig_free(&r);
}

/* Every error case leaves the whole region as it was. */
static void expect_put_error(rig_t *r, uint64_t raddr, size_t len, uint64_t key, int want)
{
    uint8_t *src = malloc(len ? len : 1);
    uint8_t *copy = malloc(r->len);
    done_t d = {0};

    memset(src, 0xee, len);
    memcpy(copy, r->region, r->len);
    assert_int_equal(sx_put(r->a_to_b, src, len, raddr, key, on_done, &d), SX_INPROGRESS);
    assert_true(am_progress_until(r->a, r->b, &d.count, 1));
    assert_int_equal(d.last_status, want);
    assert_memory_equal(copy, r->region, r->len);
    free(src);
    free(copy);
}

static void expect_get_error(rig_t *r, uint64_t raddr, size_t len, uint64_t key, int want)
{
    uint8_t *dst = malloc(len ? len : 1);
    done_t d = {0};

    memset(dst, 0x11, len);
    assert_int_equal(sx_get(r->a_to_b, dst, len, raddr, key, on_done, &d), SX_INPROGRESS);
    assert_true(am_progress_until(r->a, r->b, &d.count, 1));
    assert_int_equal(d.last_status, want);
    for (size_t i = 0; i < len; i++)
        assert_int_equal(dst[i], 0x11);
    free(dst);
}

static void test_remote_access_errors(void **state)
{
    (void)state;
    const size_t len = 300000; /* several datagrams */
    rig_t r = rig_new(len, SX_MEM_REMOTE_READ | SX_MEM_REMOTE_WRITE);
    uint64_t base = addr_of(r.region), key = sx_mem_rkey(r.mem);

    expect_put_error(&r, base, 100, key ^ 1, SX_ERR_ACCESS);             /* bad key */
    expect_put_error(&r, base + len - 10, 11, key, SX_ERR_OUT_OF_RANGE); /* past the end */
    expect_put_error(&r, base - 1, 10, key, SX_ERR_OUT_OF_RANGE);        /* before it */
    expect_put_error(&r, base, len + 1, key, SX_ERR_OUT_OF_RANGE);       /* chunked, too long */
    expect_put_error(&r, UINT64_MAX - 5, 5, key, SX_ERR_OUT_OF_RANGE);   /* wrapping */
    expect_get_error(&r, base + len, 1, key, SX_ERR_OUT_OF_RANGE);
    expect_get_error(&r, base, 10, key + 7, SX_ERR_ACCESS);

    /* Deregistered: the key is gone (and the handle with it). */
    assert_int_equal(sx_mem_deregister(r.b, r.mem), SX_OK);
    expect_put_error(&r, base, 100, key, SX_ERR_ACCESS);
    expect_get_error(&r, base, 100, key, SX_ERR_ACCESS);
    r.mem = NULL;
    rig_free(&r);
}

static void test_access_rights(void **state)
{
    (void)state;
    rig_t ro = rig_new(4096, SX_MEM_REMOTE_READ);
    expect_put_error(&ro, addr_of(ro.region), 16, sx_mem_rkey(ro.mem), SX_ERR_ACCESS);
    rig_free(&ro);

    rig_t wo = rig_new(4096, SX_MEM_REMOTE_WRITE);
    expect_get_error(&wo, addr_of(wo.region), 16, sx_mem_rkey(wo.mem), SX_ERR_ACCESS);
    rig_free(&wo);
}

/*
 * A GET's answer is sent from the target's region itself (shard/mem.h,
 * Pins). The target deregisters the region, overwrites and frees it while
 * the answer is still unacknowledged: the initiator is not progressed
 * (and neither engine has a service thread to acknowledge for it) until
 * then. Every byte must still arrive as it was when the answer was sent,
 * read from the copy deregistration made; with @p fault, the target's
 * datagrams are lost, duplicated and reordered, so retransmissions read
 * the copy too; with @p thread as well, the target's own progress thread
 * sends and retransmits them while this thread deregisters (the switch to
 * the shadow under way beside a post: TSan's case). Without a pin left
 * (the answer acknowledged first), deregistration copies nothing.
 */
static void get_outlives_deregistration(const char *fault, bool thread)
{
    /* Without congestion control: behind the fault decorator (a network)
     * its window would hold most of the answer back for acknowledgements
     * that do not come, and the answer must be on its way, all of it,
     * before the deregistration. */
    const sx_config_kv_t kv[] = {
        {"SERVICE_US", "0"}, {"CONGESTION", "off"}, {"FAULT", fault}, {"PROGRESS", "thread"}};
    const sx_config_kv_t kv_thread[] = {
        {"SERVICE_US", "0"}, {"CONGESTION", "off"}, {"PROGRESS", "thread"}};
    const size_t len = 1u << 20;
    sx_engine_h a = am_engine(kv, 2);
    sx_engine_h b = fault != NULL ? am_engine(kv, thread ? 4 : 3)
                    : thread      ? am_engine(kv_thread, 3)
                                  : am_engine(kv, 2);
    assert_int_equal(sx_thread_bind(a, 0), SX_OK);
    assert_int_equal(sx_thread_bind(b, 0), SX_OK);
    sx_peer_h a_to_b = am_connect(a, b, 2);
    (void)am_connect(b, a, 1);
    uint8_t *region = malloc(len), *back = malloc(len), *want = malloc(len);
    am_fill(want, len, 77);
    memcpy(region, want, len);
    sx_mem_h mem;
    assert_int_equal(sx_mem_register(b, region, len, SX_MEM_REMOTE_READ, &mem), SX_OK);

    /* Connected, and the region answers from itself. */
    done_t d = {0};
    assert_int_equal(sx_get(a_to_b, back, len, addr_of(region), sx_mem_rkey(mem), on_done, &d),
                     SX_INPROGRESS);
    assert_true(am_progress_until(a, b, &d.count, 1));
    assert_int_equal(d.last_status, SX_OK);
    assert_memory_equal(back, want, len);
    uint64_t zc = am_stat(b, "region_zc_sent");
    const char *tl = getenv("SX_TRANSPORTS");
    if (tl == NULL || strcmp(tl, "udp") == 0)
        assert_true(zc >= len / 65536); /* loopback's 65,000-byte datagrams: every chunk */
    if (zc == 0) {
        /* Datagrams too small for a chunk to be sent from the region
         * (libfabric's udp provider: 1,472 bytes, below SX_ZC_REGION_MIN):
         * answers are copied, and nothing here outlives a deregistration. */
        print_message("no answer sent from the region over %s: the rest is skipped\n", tl);
        assert_int_equal(sx_mem_deregister(b, mem), SX_OK);
        assert_int_equal(am_stat(b, "mem_shadow_bytes"), 0);
        free(region);
        free(back);
        free(want);
        sx_engine_destroy(a);
        sx_engine_destroy(b);
        return;
    }

    /* The request reaches b, and b sends the answer; a hears none of it. */
    memset(back, 0, len);
    assert_int_equal(sx_get(a_to_b, back, len, addr_of(region), sx_mem_rkey(mem), on_done, &d),
                     SX_INPROGRESS);
    uint64_t start = sx_time_ns();
    sx_progress(a);
    /* Every packet of the answer built (as many as the first answer's):
     * a chunk built after deregistration would fail the GET with
     * SX_ERR_ACCESS instead, as it should. Only b has faults. */
    while (am_stat(b, "region_zc_sent") < 2 * zc) {
        sx_progress(b);
        assert_true(sx_time_ns() - start < AM_TEST_LIMIT_NS);
    }
    assert_int_equal(d.count, 1);
    assert_int_equal(sx_mem_deregister(b, mem), SX_OK);
    assert_int_equal(am_stat(b, "mem_shadow_bytes"), len);
    memset(region, 0xee, len);
    free(region);

    assert_true(am_progress_until(a, b, &d.count, 2));
    assert_int_equal(d.last_status, SX_OK);
    assert_memory_equal(back, want, len);
    if (fault != NULL)
        assert_true(am_stat(b, "rtx_packets") > 0);

    /* Acknowledged before deregistration: no copy. A small GET after it
     * (copied, no pin) carries a's acknowledgement of the whole answer. */
    region = malloc(len);
    memcpy(region, want, len);
    assert_int_equal(sx_mem_register(b, region, len, SX_MEM_REMOTE_READ, &mem), SX_OK);
    assert_int_equal(sx_get(a_to_b, back, len, addr_of(region), sx_mem_rkey(mem), on_done, &d),
                     SX_INPROGRESS);
    assert_true(am_progress_until(a, b, &d.count, 3));
    assert_int_equal(d.last_status, SX_OK);
    assert_memory_equal(back, want, len);
    assert_int_equal(sx_get(a_to_b, back, 16, addr_of(region), sx_mem_rkey(mem), on_done, &d),
                     SX_INPROGRESS);
    assert_true(am_progress_until(a, b, &d.count, 4));
    assert_int_equal(sx_mem_deregister(b, mem), SX_OK);
    assert_int_equal(am_stat(b, "mem_shadow_bytes"), len);
    free(region);
    free(back);
    free(want);
    sx_engine_destroy(a);
    sx_engine_destroy(b);
}

static void test_get_outlives_deregistration(void **state)
{
    (void)state;
    get_outlives_deregistration(NULL, false);
    get_outlives_deregistration("loss=0.2,dup=0.05,reorder=0.1,seed=7", false);
    get_outlives_deregistration("loss=0.2,dup=0.05,reorder=0.1,seed=8", true);
}

/* ob1's FIN: the initiator's GET completion sends a "done" message, whose
 * handler at the target deregisters the region the GET read. */
typedef struct fin {
    sx_engine_h engine;
    sx_mem_h mem;
    sx_peer_h to_target;
    done_t get, sent;
    uint64_t got;
} fin_t;

static void on_get_send_fin(void *arg, int status)
{
    fin_t *f = arg;
    on_done(&f->get, status);
    assert_int_equal(sx_send(f->to_target, 4, NULL, 0, on_done, &f->sent), SX_INPROGRESS);
}

static void on_fin(void *arg, uint64_t peer_id, uint8_t tag, const void *data, size_t len)
{
    fin_t *f = arg;
    (void)peer_id;
    (void)tag;
    (void)data;
    (void)len;
    assert_int_equal(sx_mem_deregister(f->engine, f->mem), SX_OK);
    f->got++;
}

/*
 * The FIN leaves in the pass that read the GET's last answer, so it
 * carries the acknowledgement of answer packets sent from the region
 * under a pin: that ACK must be taken before the handler runs, not held
 * (chan_retransmit.c, Holding an ACK), or the deregistration copies the
 * region for packets already acknowledged (mem_shadow_bytes; 1 MiB
 * collectives over the BTL took ten times as long). Every round's bytes
 * are checked.
 */
static void test_fin_after_get_copies_nothing(void **state)
{
    (void)state;
    const size_t len = 1u << 20;
    sx_engine_h a = am_engine(NULL, 0), b = am_engine(NULL, 0);
    assert_int_equal(sx_thread_bind(a, 0), SX_OK);
    assert_int_equal(sx_thread_bind(b, 0), SX_OK);
    fin_t fin = {.engine = b, .to_target = am_connect(a, b, 2)};
    (void)am_connect(b, a, 1);
    assert_int_equal(sx_am_register(b, 4, on_fin, &fin), SX_OK);
    uint8_t *region = malloc(len), *back = malloc(len);
    for (uint64_t round = 0; round < 8; round++) {
        am_fill(region, len, round);
        assert_int_equal(sx_mem_register(b, region, len, SX_MEM_REMOTE_READ, &fin.mem), SX_OK);
        assert_int_equal(sx_get(fin.to_target, back, len, addr_of(region), sx_mem_rkey(fin.mem),
                                on_get_send_fin, &fin),
                         SX_INPROGRESS);
        assert_true(am_progress_until(a, b, &fin.got, round + 1));
        assert_int_equal(fin.get.errors, 0);
        assert_memory_equal(back, region, len);
        assert_true(am_progress_until(a, b, &fin.sent.count, round + 1));
    }
    assert_int_equal(fin.sent.errors, 0);
    /* Over udp the answers were sent from the region; ofi copies them. */
    const char *tl = getenv("SX_TRANSPORTS");
    if (tl == NULL || strcmp(tl, "udp") == 0)
        assert_true(am_stat(b, "region_zc_sent") > 0);
    assert_int_equal(am_stat(b, "mem_shadow_bytes"), 0);
    free(region);
    free(back);
    sx_engine_destroy(a);
    sx_engine_destroy(b);
}

static void on_rma_am(void *arg, uint64_t peer_id, uint8_t tag, const void *data, size_t len)
{
    (void)peer_id;
    (void)tag;
    am_check(arg, data, len);
}

/* What the engine the data went to counted (rx_landed_bytes,
 * rx_land_missed, drop_landed). */
typedef struct lands {
    uint64_t landed, missed, dropped;
} lands_t;

/*
 * Landing (src/shard/chan.h): the kernel reads GET answers straight into
 * their destination (@p put false), or a PUT's chunks after its first
 * into the target region (@p put true). Four operations of 2 MiB at a
 * time on one channel, one after the other, for 32 MiB in all, while
 * @p nmsg active messages of 2 KiB stream the way the data goes, which
 * the landings catch, so those must be copied back whole; every byte of
 * every operation and message is checked. With @p fault on both engines
 * (loss, duplication, reordering) chunks come out of order, twice and
 * after retransmission timeouts: landings miss and are copied back, kept
 * chunks fill gaps, and a PUT's chunk that landed in place but cannot be
 * delivered at once is dropped and comes again.
 */
static lands_t rma_lands(bool put, const char *fault, size_t nmsg)
{
    /* One shard each and no service thread: every datagram is read by
     * this thread's sx_progress, which offers landings (the service,
     * which delivers nothing, offers none). */
    const sx_config_kv_t kv[] = {{"SHARDS", "1"}, {"SERVICE_US", "0"}, {"FAULT", fault}};
    const size_t len = 8u << 20, part = 2u << 20, rounds = 4, msg_len = 2048;
    sx_engine_h a = am_engine(kv, fault != NULL ? 3 : 2);
    sx_engine_h b = am_engine(kv, fault != NULL ? 3 : 2);
    assert_int_equal(sx_thread_bind(a, 0), SX_OK);
    assert_int_equal(sx_thread_bind(b, 0), SX_OK);
    sx_peer_h a_to_b = am_connect(a, b, 2);
    sx_peer_h b_to_a = am_connect(b, a, 1);
    /* a is the initiator, b the target; the data goes to b for PUT. */
    sx_engine_h to = put ? b : a;
    sx_peer_h msg_peer = put ? a_to_b : b_to_a;
    am_rx_t rx = {0};
    assert_int_equal(sx_am_register(to, 9, on_rma_am, &rx), SX_OK);
    uint8_t *region = malloc(len), *local = malloc(len), *msgs = malloc(nmsg * msg_len + 1);
    sx_mem_h mem;
    assert_int_equal(
        sx_mem_register(b, region, len, put ? SX_MEM_REMOTE_WRITE : SX_MEM_REMOTE_READ, &mem),
        SX_OK);
    for (size_t i = 0; i < nmsg; i++)
        am_fill(msgs + i * msg_len, msg_len, i);

    done_t d = {0}, sent = {0};
    size_t next_msg = 0;
    for (size_t r = 0; r < rounds; r++) {
        uint8_t *src = put ? local : region, *dst = put ? region : local;
        am_fill(src, len, (put ? 200 : 100) + r);
        memset(dst, 0xee, len);
        for (size_t o = 0; o < len; o += part) {
            int rc = put ? sx_put(a_to_b, local + o, part, addr_of(region + o), sx_mem_rkey(mem),
                                  on_done, &d)
                         : sx_get(a_to_b, local + o, part, addr_of(region + o), sx_mem_rkey(mem),
                                  on_done, &d);
            assert_int_equal(rc, SX_INPROGRESS);
        }
        uint64_t start = sx_time_ns(), want = (r + 1) * (len / part);
        while (d.count < want) {
            if (next_msg < (r + 1) * nmsg / rounds) {
                struct iovec iov = {.iov_base = msgs + next_msg * msg_len, .iov_len = msg_len};
                assert_int_equal(sx_send(msg_peer, 9, &iov, 1, on_done, &sent), SX_INPROGRESS);
                next_msg++;
            }
            sx_progress(a);
            sx_progress(b);
            assert_true(sx_time_ns() - start < AM_TEST_LIMIT_NS);
        }
        assert_int_equal(d.errors, 0);
        /* A PUT completes once the target took every chunk. */
        assert_memory_equal(dst, src, len);
    }
    for (; next_msg < nmsg; next_msg++) { /* those the operations were too quick for */
        struct iovec iov = {.iov_base = msgs + next_msg * msg_len, .iov_len = msg_len};
        assert_int_equal(sx_send(msg_peer, 9, &iov, 1, on_done, &sent), SX_INPROGRESS);
    }
    assert_true(am_progress_until(a, b, &rx.received, nmsg));
    assert_true(am_progress_until(a, b, &sent.count, nmsg));
    assert_int_equal(rx.errors, 0);
    assert_int_equal(sent.errors, 0);
    lands_t l = {am_stat(to, "rx_landed_bytes"), am_stat(to, "rx_land_missed"),
                 am_stat(to, "drop_landed")};
    print_message("%s, fault %s, %zu messages: %llu bytes landed, %llu datagrams copied back, "
                  "%llu landed chunks dropped, %llu bytes copied in\n",
                  put ? "PUT" : "GET", fault != NULL ? fault : "none", nmsg,
                  (unsigned long long)l.landed, (unsigned long long)l.missed,
                  (unsigned long long)l.dropped, (unsigned long long)am_stat(to, "copy_rx_bytes"));
    assert_int_equal(sx_mem_deregister(b, mem), SX_OK);
    free(region);
    free(local);
    free(msgs);
    sx_engine_destroy(a);
    sx_engine_destroy(b);
    return l;
}

static void test_get_lands(void **state)
{
    (void)state;
    const char *tl = getenv("SX_TRANSPORTS");
    bool udp = tl == NULL || strcmp(tl, "udp") == 0;

    /* Over udp on loopback (65,000-byte datagrams) the answers land;
     * elsewhere (ofi's 1,472-byte datagrams, below SX_LAND_MIN) nothing
     * does, and every byte must arrive all the same. */
    lands_t l = rma_lands(false, NULL, 0);
    if (udp)
        assert_true(l.landed >=
                    (24u << 20)); /* of 32 MiB: a chunk that shares its datagram does not */
    else
        assert_int_equal(l.landed, 0);
    /* Messages between the chunks: a landing catches them. */
    l = rma_lands(false, NULL, 256);
    if (udp)
        assert_true(l.landed > 0 && l.missed > 0);
    l = rma_lands(false, "loss=0.05,dup=0.02,reorder=0.05,seed=11", 256);
    if (udp)
        assert_true(l.landed > 0 && l.missed > 0);
}

/*
 * GETs whose destinations overlap (many at once into one buffer, legal
 * as over RDMA, the buffer's bytes then undefined) while messages stream
 * the other way: no place is offered to two datagrams of one read, or
 * the second would overwrite the bytes the first needs copied back.
 * Before that rule, 4 KiB GETs into one buffer lost the frames of a
 * packet the landing caught (a GET's chunk among them: SX_ERR_IO); every
 * GET must succeed and every message arrive intact.
 */
static void test_get_lands_overlapping(void **state)
{
    (void)state;
    const sx_config_kv_t kv[] = {{"SHARDS", "1"}, {"SERVICE_US", "0"}};
    const size_t part = 16u << 10, len = 4 * part, msg_len = 2048;
    const unsigned gets = 512, window = 32, nmsg = 512;
    sx_engine_h a = am_engine(kv, 2), b = am_engine(kv, 2);
    assert_int_equal(sx_thread_bind(a, 0), SX_OK);
    assert_int_equal(sx_thread_bind(b, 0), SX_OK);
    sx_peer_h a_to_b = am_connect(a, b, 2);
    sx_peer_h b_to_a = am_connect(b, a, 1);
    am_rx_t rx = {0};
    assert_int_equal(sx_am_register(a, 9, on_rma_am, &rx), SX_OK);
    uint8_t *region = malloc(len), *back = malloc(part), *msgs = malloc(nmsg * msg_len);
    sx_mem_h mem;
    assert_int_equal(sx_mem_register(b, region, len, SX_MEM_REMOTE_READ, &mem), SX_OK);
    am_fill(region, len, 7);
    for (size_t i = 0; i < nmsg; i++)
        am_fill(msgs + i * msg_len, msg_len, i);

    done_t d = {0}, sent = {0};
    unsigned posted = 0, next_msg = 0;
    uint64_t start = sx_time_ns();
    while (d.count < gets || next_msg < nmsg) {
        while (posted < gets && posted - d.count < window) {
            assert_int_equal(sx_get(a_to_b, back, part, addr_of(region + (posted % 4) * part),
                                    sx_mem_rkey(mem), on_done, &d),
                             SX_INPROGRESS);
            posted++;
        }
        if (next_msg < nmsg) {
            struct iovec iov = {.iov_base = msgs + next_msg * msg_len, .iov_len = msg_len};
            assert_int_equal(sx_send(b_to_a, 9, &iov, 1, on_done, &sent), SX_INPROGRESS);
            next_msg++;
        }
        sx_progress(a);
        sx_progress(b);
        assert_true(sx_time_ns() - start < AM_TEST_LIMIT_NS);
    }
    assert_true(am_progress_until(a, b, &rx.received, nmsg));
    assert_true(am_progress_until(a, b, &sent.count, nmsg));
    assert_int_equal(d.errors, 0);
    assert_int_equal(rx.errors, 0);
    assert_int_equal(sent.errors, 0);
    /* One GET alone: its bytes, whole. */
    assert_int_equal(
        sx_get(a_to_b, back, part, addr_of(region + part), sx_mem_rkey(mem), on_done, &d),
        SX_INPROGRESS);
    assert_true(am_progress_until(a, b, &d.count, gets + 1));
    assert_int_equal(d.errors, 0);
    assert_memory_equal(back, region + part, part);
    print_message("overlapping GETs: %llu bytes landed, %llu datagrams copied back\n",
                  (unsigned long long)am_stat(a, "rx_landed_bytes"),
                  (unsigned long long)am_stat(a, "rx_land_missed"));
    assert_int_equal(sx_mem_deregister(b, mem), SX_OK);
    free(region);
    free(back);
    free(msgs);
    sx_engine_destroy(a);
    sx_engine_destroy(b);
}

static void test_put_lands(void **state)
{
    (void)state;
    const char *tl = getenv("SX_TRANSPORTS");
    bool udp = tl == NULL || strcmp(tl, "udp") == 0;

    /* Over udp on loopback every chunk after a PUT's first lands: 2 MiB
     * PUTs of 65,000-byte datagrams, 32 of 33 chunks, 29.2 of the 32 MiB
     * on an idle machine; and the first of the next PUT comes in a read of
     * its own, so that its rest lands too (shard.h, land_probe). How many
     * land is an efficiency, which a loaded machine lowers (27.2 MiB with
     * another test beside it in a fresh-clone CI run, 31 chunks copied
     * back): the test asks for most of them, the figure is printed.
     * Elsewhere nothing lands, and every byte arrives all the same. */
    lands_t l = rma_lands(true, NULL, 0);
    if (udp)
        assert_true(l.landed >= (16u << 20));
    else
        assert_int_equal(l.landed, 0);
    assert_int_equal(l.dropped, 0); /* in order, nothing is dropped */
    l = rma_lands(true, NULL, 256);
    if (udp)
        assert_true(l.landed > 0 && l.missed > 0);
    l = rma_lands(true, "loss=0.05,dup=0.02,reorder=0.05,seed=13", 256);
    if (udp)
        assert_true(l.landed > 0 && l.missed > 0);
}

/* Completions counted from the engines' progress threads. */
typedef struct adone {
    atomic_uint_fast64_t count, ok, denied;
} adone_t;

static void on_adone(void *arg, int status)
{
    adone_t *d = arg;
    atomic_fetch_add(status == SX_OK ? &d->ok : &d->denied,
                     status == SX_OK || status == SX_ERR_ACCESS);
    atomic_fetch_add(&d->count, 1);
}

/*
 * More PUT and GET to one peer than a channel keeps outstanding (4096,
 * SX_RMA_OUTSTANDING_MAX). They used to complete SX_ERR_AGAIN beyond it,
 * for the caller to retry; Open MPI's ob1 does not retry a failed get, and
 * a job with more than 4096 gets outstanding to one peer hung. Now they
 * wait in the channel: 5,000 GETs of 8 bytes and 1,000 PUTs posted while
 * B does not progress all complete SX_OK, every byte right. Then 5,000
 * more, with the peer removed before B answers any: each completes once,
 * with an error, those that waited too.
 */
static void test_more_than_outstanding(void **state)
{
    (void)state;
    enum { GETS = 5000, PUTS = 1000 };
    /* Neither engine's service works for it (SX_SERVICE_US=0): B answers
     * only when the test progresses it, however slowly this runs. */
    const sx_config_kv_t kv[] = {{"SHARDS", "1"}, {"SERVICE_US", "0"}};
    sx_engine_h a = am_engine(kv, 2), b = am_engine(kv, 2);
    assert_int_equal(sx_thread_bind(a, 0), SX_OK);
    assert_int_equal(sx_thread_bind(b, 0), SX_OK);
    sx_peer_h a_to_b = am_connect(a, b, 2);
    (void)am_connect(b, a, 1);
    uint64_t *region = calloc(GETS + PUTS, sizeof(uint64_t));
    uint64_t *got = calloc(GETS, sizeof(uint64_t)), *put = calloc(PUTS, sizeof(uint64_t));
    am_op_t *ops = calloc(2 * GETS + PUTS, sizeof(*ops));
    assert_non_null(region);
    assert_non_null(got);
    assert_non_null(put);
    assert_non_null(ops);
    for (unsigned i = 0; i < GETS; i++)
        region[i] = 0x5eed000000000000ull + i;
    for (unsigned i = 0; i < PUTS; i++)
        put[i] = 0xfeed000000000000ull + i;
    sx_mem_h mem;
    assert_int_equal(sx_mem_register(b, region, (GETS + PUTS) * sizeof(uint64_t),
                                     SX_MEM_REMOTE_READ | SX_MEM_REMOTE_WRITE, &mem),
                     SX_OK);
    const sx_rkey_t key = sx_mem_rkey(mem);
    for (unsigned i = 0; i < GETS + PUTS; i++) {
        int rc =
            i < GETS
                ? sx_get(a_to_b, &got[i], 8, addr_of(&region[i]), key, am_op_done, &ops[i])
                : sx_put(a_to_b, &put[i - GETS], 8, addr_of(&region[i]), key, am_op_done, &ops[i]);
        assert_int_equal(rc, SX_INPROGRESS);
        if (i % 64 == 0)
            sx_progress(a);
    }
    for (int k = 0; k < 100; k++)
        sx_progress(a);
    for (unsigned i = 0; i < GETS + PUTS; i++)
        assert_int_equal(ops[i].calls, 0); /* none refused for want of room */
    uint64_t start = sx_time_ns();
    for (unsigned i = 0; i < GETS + PUTS; i++) {
        while (ops[i].calls == 0) {
            sx_progress(a);
            sx_progress(b);
            assert_true(sx_time_ns() - start < AM_TEST_LIMIT_NS);
        }
        if (ops[i].calls != 1 || ops[i].status != SX_OK)
            fail_msg("op %u: %u completions, %s", i, ops[i].calls, sx_status_name(ops[i].status));
    }
    for (unsigned i = 0; i < GETS; i++)
        assert_true(got[i] == 0x5eed000000000000ull + i);
    for (unsigned i = 0; i < PUTS; i++)
        assert_true(region[GETS + i] == 0xfeed000000000000ull + i);

    am_op_t *more = ops + GETS + PUTS;
    for (unsigned i = 0; i < GETS; i++)
        assert_int_equal(sx_get(a_to_b, &got[i], 8, addr_of(&region[i]), key, am_op_done, &more[i]),
                         SX_INPROGRESS);
    for (int k = 0; k < 100; k++)
        sx_progress(a);
    assert_int_equal(sx_peer_remove(a, a_to_b), SX_OK);
    /* The removal may run on the engine's service, which leaves the
     * completions for the next caller (a loaded machine: ASan over ofi). */
    start = sx_time_ns();
    for (unsigned i = 0; i < GETS; i++) {
        while (more[i].calls == 0) {
            sx_progress(a);
            assert_true(sx_time_ns() - start < AM_TEST_LIMIT_NS);
        }
    }
    for (int k = 0; k < 100; k++)
        sx_progress(a);
    for (unsigned i = 0; i < GETS; i++) {
        if (more[i].calls != 1 || more[i].status == SX_OK)
            fail_msg("op %u after the removal: %u completions, %s", i, more[i].calls,
                     sx_status_name(more[i].status));
    }
    assert_int_equal(sx_mem_deregister(b, mem), SX_OK);
    sx_engine_destroy(a);
    sx_engine_destroy(b);
    free(region);
    free(got);
    free(put);
    free(ops);
}

/*
 * No PUT lands in a region once its deregistration has returned, while
 * both engines' progress threads keep a stream of PUTs of @p chunk bytes
 * going: the target's copies run outside the read section that found the
 * region (shard/mem.h, Accesses), and deregistration waits for those
 * under way, and for a read that a landing of a PUT's chunks was offered
 * to (chan.h, Landing). The region, zeroed right after, must stay zero;
 * every PUT completes exactly once, those after with SX_ERR_ACCESS.
 * Returns the target's rx_landed_bytes.
 */
static uint64_t put_stops_at_deregistration(size_t chunk, unsigned puts, unsigned before)
{
    const sx_config_kv_t kv[] = {{"PROGRESS", "thread"}};
    const size_t len = 4u << 20;
    sx_engine_h a = am_engine(kv, 1), b = am_engine(kv, 1);
    sx_peer_h a_to_b = am_connect(a, b, 2);
    (void)am_connect(b, a, 1);
    uint8_t *region = malloc(len), *src = malloc(chunk);
    memset(region, 0, len);
    memset(src, 0x11, chunk);
    sx_mem_h mem;
    assert_int_equal(sx_mem_register(b, region, len, SX_MEM_REMOTE_WRITE, &mem), SX_OK);
    uint64_t key = sx_mem_rkey(mem);

    adone_t d = {0};
    uint64_t start = sx_time_ns();
    for (unsigned i = 0; i < puts; i++) {
        if (i == before) {
            while (atomic_load(&d.count) < before / 2) /* some landed */
                assert_true(sx_time_ns() - start < AM_TEST_LIMIT_NS);
            assert_int_equal(sx_mem_deregister(b, mem), SX_OK);
            memset(region, 0, len);
        }
        int rc;
        while ((rc = sx_put(a_to_b, src, chunk, addr_of(region + (i * chunk) % len), key, on_adone,
                            &d)) == SX_ERR_AGAIN)
            assert_true(sx_time_ns() - start < AM_TEST_LIMIT_NS);
        assert_int_equal(rc, SX_INPROGRESS);
    }
    while (atomic_load(&d.count) < puts)
        assert_true(sx_time_ns() - start < AM_TEST_LIMIT_NS);
    assert_int_equal(atomic_load(&d.ok) + atomic_load(&d.denied), puts);
    assert_true(atomic_load(&d.ok) >= before / 2);
    assert_true(atomic_load(&d.denied) >= puts - before);
    for (size_t i = 0; i < len; i++)
        if (region[i] != 0)
            fail_msg("byte %zu written after deregistration returned", i);
    uint64_t landed = am_stat(b, "rx_landed_bytes");
    sx_engine_destroy(a);
    sx_engine_destroy(b);
    free(region);
    free(src);
    return landed;
}

static void test_put_stops_at_deregistration(void **state)
{
    (void)state;
    const char *tl = getenv("SX_TRANSPORTS");

    (void)put_stops_at_deregistration(64u << 10, 256, 32);
    /* PUTs of 1 MiB, whose chunks after the first land in the region
     * over udp on loopback (chan.h, Landing). */
    uint64_t landed = put_stops_at_deregistration(1u << 20, 24, 8);
    print_message("1 MiB PUTs: %llu bytes landed\n", (unsigned long long)landed);
    if (tl == NULL || strcmp(tl, "udp") == 0)
        assert_true(landed > 0);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    rig_t r = rig_new(64, SX_MEM_REMOTE_WRITE);
    sx_mem_h m;
    uint8_t x;

    assert_int_equal(sx_put(NULL, &x, 1, 0, 0, NULL, NULL), SX_ERR_INVALID_PARAM);
    assert_int_equal(sx_put(r.a_to_b, NULL, 1, 0, 0, NULL, NULL), SX_ERR_INVALID_PARAM);
    assert_int_equal(sx_get(r.a_to_b, &x, 2, UINT64_MAX, 0, NULL, NULL), SX_ERR_INVALID_PARAM);
    assert_int_equal(sx_mem_register(r.b, NULL, 10, SX_MEM_REMOTE_READ, &m), SX_ERR_INVALID_PARAM);
    assert_int_equal(sx_mem_register(r.b, &x, 1, 0x80, &m), SX_ERR_INVALID_PARAM);
    assert_int_equal(sx_mem_deregister(r.a, r.mem), SX_ERR_INVALID_PARAM); /* other engine */
    rig_free(&r);
}

/*
 * A handle deregistered already, or registered with another engine, is
 * refused with SX_ERR_INVALID_PARAM and not read. A second
 * sx_mem_deregister of one handle used to read the record the first had
 * freed, and take a reference it never held (ASan: heap-use-after-free,
 * once the grace period had run). The foreign engine's refusal leaves the
 * region registered: its own engine deregisters it.
 */
static void test_deregister_twice(void **state)
{
    (void)state;
    rig_t r = rig_new(64, SX_MEM_REMOTE_WRITE);
    uint8_t buf[16];
    sx_mem_h m;

    assert_int_equal(sx_mem_register(r.a, buf, sizeof(buf), SX_MEM_REMOTE_READ, &m), SX_OK);
    assert_int_equal(sx_mem_deregister(r.b, m), SX_ERR_INVALID_PARAM);
    assert_int_equal(sx_mem_deregister(r.a, m), SX_OK);
    rcu_barrier(); /* the record is freed by now */
    assert_int_equal(sx_mem_deregister(r.a, m), SX_ERR_INVALID_PARAM);
    assert_int_equal(sx_mem_deregister(r.b, m), SX_ERR_INVALID_PARAM);
    rig_free(&r); /* B's own region, deregistered by B */
}

/* Registrations from two threads at once, through several of the key
 * pool's batches (SX_MEM_KEY_BATCH, 32): every key nonzero and unlike the
 * others, and each region answers a GET through its own key. */
#define KEYS_PER_THREAD 50

typedef struct key_worker {
    sx_engine_h engine;
    uint8_t *base; /* KEYS_PER_THREAD bytes, one region each */
    sx_mem_h mem[KEYS_PER_THREAD];
    int rc;
} key_worker_t;

static void *register_many(void *arg)
{
    key_worker_t *w = arg;
    w->rc = SX_OK;
    for (int i = 0; i < KEYS_PER_THREAD && w->rc == SX_OK; i++)
        w->rc = sx_mem_register(w->engine, w->base + i, 1, SX_MEM_REMOTE_READ, &w->mem[i]);
    return NULL;
}

static void test_keys_from_every_batch(void **state)
{
    (void)state;
    rig_t r = rig_new(64, SX_MEM_REMOTE_READ);
    uint8_t bytes[2][KEYS_PER_THREAD];
    key_worker_t w[2];
    pthread_t tid[2];

    for (int t = 0; t < 2; t++) {
        for (int i = 0; i < KEYS_PER_THREAD; i++)
            bytes[t][i] = (uint8_t)(t * KEYS_PER_THREAD + i + 1);
        w[t] = (key_worker_t){.engine = r.b, .base = bytes[t]};
        assert_int_equal(pthread_create(&tid[t], NULL, register_many, &w[t]), 0);
    }
    for (int t = 0; t < 2; t++) {
        assert_int_equal(pthread_join(tid[t], NULL), 0);
        assert_int_equal(w[t].rc, SX_OK);
    }
    uint64_t keys[2 * KEYS_PER_THREAD + 1];
    size_t n = 0;
    keys[n++] = sx_mem_rkey(r.mem);
    for (int t = 0; t < 2; t++)
        for (int i = 0; i < KEYS_PER_THREAD; i++)
            keys[n++] = sx_mem_rkey(w[t].mem[i]);
    for (size_t i = 0; i < n; i++) {
        assert_int_not_equal(keys[i], 0);
        for (size_t j = 0; j < i; j++)
            assert_int_not_equal(keys[i], keys[j]);
    }
    done_t d = {0};
    for (int t = 0; t < 2; t++) {
        for (int i = 0; i < KEYS_PER_THREAD; i += 7) {
            uint8_t got = 0;
            assert_int_equal(sx_get(r.a_to_b, &got, 1, addr_of(&bytes[t][i]),
                                    sx_mem_rkey(w[t].mem[i]), on_done, &d),
                             SX_INPROGRESS);
            assert_true(am_progress_until(r.a, r.b, &d.count, d.count + 1));
            assert_int_equal(d.last_status, SX_OK);
            assert_int_equal(got, bytes[t][i]);
        }
    }
    for (int t = 0; t < 2; t++)
        for (int i = 0; i < KEYS_PER_THREAD; i++)
            assert_int_equal(sx_mem_deregister(r.b, w[t].mem[i]), SX_OK);
    rig_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_get_sizes),
        cmocka_unit_test(test_remote_access_errors),
        cmocka_unit_test(test_access_rights),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_deregister_twice),
        cmocka_unit_test(test_keys_from_every_batch),
        cmocka_unit_test(test_get_outlives_deregistration),
        cmocka_unit_test(test_fin_after_get_copies_nothing),
        cmocka_unit_test(test_put_stops_at_deregistration),
        cmocka_unit_test(test_more_than_outstanding),
        cmocka_unit_test(test_get_lands),
        cmocka_unit_test(test_get_lands_overlapping),
        cmocka_unit_test(test_put_lands),
    };
    sx_test_filter_from_env();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
