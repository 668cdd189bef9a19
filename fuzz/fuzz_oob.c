/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * libFuzzer target for the OOB frame parser (src/bootstrap/oob_conn.c):
 * the bytes another process of the job sends to an OOB endpoint over TCP.
 * Each input is the byte stream of one connection, read by the real
 * receive path (sx_oob_conn_read: header checks, HELLO, payload reads,
 * delivery to posted receives, handlers and the unexpected queue) of a
 * real endpoint. The connection is one end of a socketpair that the
 * harness writes, so the input alone decides what is read and when, and
 * a crash reproduces from it; the endpoint's progress thread runs but
 * never sees the connection (it is not in its epoll set).
 *
 * An input is [u8 flags][u8 chunk][stream]:
 *
 *   flags bit 0  the harness recomputes the CRC32C of every frame header
 *                it finds walking the stream as the receiver will, so the
 *                fuzzer gets past the checksum to what follows it
 *         bit 1  the connection is one we made (its peer is known); else
 *                one we accepted, whose first frame must be a HELLO
 *         bit 2  a receive (any source, any tag, 16 bytes) is posted first
 *         bit 3  that receive peeks      bit 4  it reports the whole length
 *         bit 5  a handler takes tag HANDLER_TAG
 *         bit 6  the harness also sets every header's magic, and every
 *                frame's source id after the first to the connection's
 *                peer
 *   chunk        0: the stream is written at once; else this many bytes
 *                at a time, with a read after each, so headers and
 *                payloads arrive split anywhere
 *
 * fuzz/make-corpus-bootstrap.sh writes the seeds (fuzz/corpus-oob/) from
 * frames a real endpoint sent.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <shardx.h>

#include "bootstrap/oob_int.h"
#include "common/time.h"
#include "common/crc32c.h"
#include "common/le.h"

#define SELF_ID     0x5e1full /* the endpoint under test */
#define FAKE_PEER   0x2aull   /* the other end of an outgoing connection */
#define HANDLER_TAG 7u
#define RECV_BYTES  16

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void die(const char *what, int rc)
{
    fprintf(stderr, "fuzz_oob: %s: %s\n", what, rc < 0 ? strerror(-rc) : sx_strerror(rc));
    abort();
}

/* Every byte of a message a handler gets must be readable: ASan checks. */
static unsigned sink;

static void on_message(void *arg, uint64_t peer, uint32_t tag, const void *data, size_t len)
{
    (void)arg;
    (void)peer;
    if (tag != HANDLER_TAG || len > SX_OOB_MSG_MAX)
        abort(); /* a handler got another tag's message, or an impossible one */
    for (size_t i = 0; i < len; i++)
        sink += ((const uint8_t *)data)[i];
}

typedef struct recv_state {
    unsigned flags;
    int completions;
} recv_state_t;

static void on_recv(void *arg, int status, uint64_t peer, uint32_t tag, size_t len)
{
    recv_state_t *r = arg;

    (void)peer;
    (void)tag;
    r->completions++;
    if (status != SX_OK && status != SX_ERR_TRUNCATED && status != SX_ERR_SHUTDOWN)
        abort(); /* nothing else can end a receive here */
    if (status == SX_OK && len > RECV_BYTES)
        abort(); /* more than the buffer, yet not truncated */
    if (status == SX_ERR_TRUNCATED && !(r->flags & SX_OOB_TRUNC) && len != RECV_BYTES)
        abort(); /* truncated without filling the buffer */
}

/* Makes the headers the receiver will see pass the checks @p flags asks
 * for. Walks the stream as sx_oob_conn_read does: a header, then as many
 * payload bytes as it says. */
static void repair(uint8_t *s, size_t n, unsigned flags)
{
    uint64_t src = FAKE_PEER;
    size_t off = 0;

    for (int frame = 0; off + SX_OOB_HDR_LEN <= n; frame++) {
        uint8_t *h = s + off;
        if (flags & 0x40) {
            sx_put32(h, SX_OOB_MAGIC);
            if (frame == 0 && !(flags & 0x02))
                src = sx_get64(h + 8); /* the HELLO names the peer */
            else
                sx_put64(h + 8, src);
        }
        if (flags & 0x01)
            sx_put32(h + 20, sx_crc32c(0, h, OOB_HDR_CRC_LEN));
        uint32_t len = sx_get32(h + 16);
        if (len > n - off - SX_OOB_HDR_LEN)
            break;
        off += SX_OOB_HDR_LEN + len;
    }
}

static size_t pending(int fd)
{
    int n = 0;

    if (ioctl(fd, FIONREAD, &n) != 0)
        die("FIONREAD", -errno);
    return n > 0 ? (size_t)n : 0;
}

/* Reads everything the socket holds (the read budget may stop one call
 * early). Returns false once the endpoint closed the connection. */
static bool read_all(sx_oob_t *oob, oob_conn_t *c, bool to_eof)
{
    bool alive = true;

    do {
        oob_fifo_t batch = {0};
        pthread_mutex_lock(&oob->lock);
        alive = sx_oob_conn_read(oob, c, &batch);
        pthread_mutex_unlock(&oob->lock);
        sx_oob_batch_run(&batch);
    } while (alive && (to_eof || pending(c->fd) > 0));
    return alive;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    unsigned flags = data[0];
    size_t chunk = data[1];
    size_t n = size - 2;
    uint8_t *stream = malloc(n ? n : 1);
    if (stream == NULL)
        abort();
    memcpy(stream, data + 2, n);
    repair(stream, n, flags);

    sx_oob_t *oob;
    int rc = sx_oob_open(SELF_ID, "127.0.0.1", 0, &oob);
    if (rc != SX_OK)
        die("sx_oob_open", rc);
    if ((flags & 0x20) && (rc = sx_oob_handler_set(oob, HANDLER_TAG, on_message, NULL)) != SX_OK)
        die("sx_oob_handler_set", rc);
    uint8_t rbuf[RECV_BYTES];
    struct iovec riov = {.iov_base = rbuf, .iov_len = sizeof(rbuf)};
    recv_state_t r = {.flags =
                          ((flags & 0x08) ? SX_OOB_PEEK : 0) | ((flags & 0x10) ? SX_OOB_TRUNC : 0)};
    if ((flags & 0x04) && (rc = sx_oob_recv_nb(oob, SX_OOB_PEER_ANY, SX_OOB_TAG_ANY, &riov, 1,
                                               r.flags, on_recv, &r)) != SX_OK)
        die("sx_oob_recv_nb", rc);

    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0)
        die("socketpair", -errno);
    /* The connection as oob_accept or oob_conn_new_outgoing leaves it. */
    oob_conn_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        abort();
    c->fd = sv[0];
    c->state = CONN_OPEN;
    snprintf(c->addr, sizeof(c->addr), "fuzz:%d", sv[1]);
    pthread_mutex_lock(&oob->lock);
    if (flags & 0x02) {
        oob_peer_t *p = sx_oob_peer_get(oob, FAKE_PEER);
        if (p == NULL)
            abort();
        c->outgoing = true;
        c->peer_known = true;
        c->peer = FAKE_PEER;
        p->conn = c;
    } else {
        c->timer_ns = sx_time_ns() + (uint64_t)OOB_HELLO_TIMEOUT_MS * 1000000u;
        oob->anon++;
    }
    c->next = oob->conns;
    oob->conns = c;
    pthread_mutex_unlock(&oob->lock);

    /* The socketpair's buffer holds far more than -max_len, so a write
     * never blocks and never comes up short. */
    bool alive = true;
    size_t step = chunk != 0 ? chunk : n;
    for (size_t off = 0; alive && off < n; off += step) {
        size_t k = n - off < step ? n - off : step;
        if (write(sv[1], stream + off, k) != (ssize_t)k)
            die("write", -errno);
        alive = read_all(oob, c, false);
    }
    /* The end of the stream: the endpoint reads EOF and closes it (c is
     * freed then, by the progress thread or sx_oob_close). */
    if (alive) {
        shutdown(sv[1], SHUT_WR);
        read_all(oob, c, true);
    }
    close(sv[1]);

    /* Later receives find what nobody took, oldest first. */
    for (int i = 0; i < 64; i++) {
        uint64_t peer = SX_OOB_PEER_ANY;
        uint32_t tag = SX_OOB_TAG_ANY;
        size_t len;
        rc = sx_oob_recv(oob, &peer, &tag, &riov, 1, r.flags & SX_OOB_TRUNC, 0, &len);
        if (rc == SX_ERR_AGAIN)
            break;
        if (rc != SX_OK && rc != SX_ERR_TRUNCATED)
            die("sx_oob_recv", rc);
        if (tag == SX_OOB_TAG_HELLO || ((flags & 0x20) && tag == HANDLER_TAG))
            abort(); /* a HELLO or a handled tag was queued */
    }
    sx_oob_close(oob);
    if ((flags & 0x04) && r.completions != 1)
        abort(); /* a posted receive completes exactly once */
    free(stream);
    return 0;
}
