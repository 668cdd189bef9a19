/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The OOB channel's connections and progress thread (see oob.c for the
 * whole picture and oob_int.h for the locking).
 *
 * Connections. A send to a peer with no connection creates one in state
 * CONN_WAIT with a HELLO frame at the head of its transmit queue; the
 * progress thread connects. A refused connection (ECONNREFUSED) is tried
 * again OOB_CONNECT_TRIES times in all, with delays doubling from
 * OOB_RETRY_FIRST_MS (25 + 50 + 100 + 200 + 400 ms, about 0.8 s), for a
 * peer whose listener is still starting; any other error, or
 * OOB_CONNECT_TIMEOUT_MS without an answer, fails the queued sends with
 * SX_ERR_IO at once. The next send to that peer starts a new connection,
 * so there is one round of attempts per batch of sends, never an endless
 * retry. An accepted connection belongs to no peer until its HELLO
 * arrives; then sends to that id may use it. When both sides connect to
 * each other, both connections stay: each side sends on the one it chose
 * first and receives on both.
 *
 * Every frame from the wire is checked before use (magic, header CRC32C,
 * length against SX_OOB_MSG_MAX, HELLO first and only first on an accepted
 * connection, the source id against the connection's peer); a failure is
 * logged with the peer and the cause, and the connection is closed, its
 * queued sends completing with SX_ERR_PROTO. Only then is the payload's
 * buffer allocated, so a connection holds at most one message buffer of
 * at most SX_OOB_MSG_MAX bytes before its payload has arrived. A
 * connection that ends inside a frame, or any socket error, fails the
 * queued sends with SX_ERR_IO.
 *
 * The sockets are nonblocking, so the progress thread holds the lock only
 * for short system calls, never across epoll_wait; epoll is level
 * triggered, and a read budget per event keeps one busy peer from
 * starving the others.
 */
#include "common/le.h"
#include "bootstrap/oob_int.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <shardx.h>

#include "common/time.h"
#include "common/crc32c.h"

_Thread_local sx_oob_t *sx_oob_current;

void sx_oob_hdr_write(uint8_t *h, uint32_t tag, uint64_t src, uint32_t len)
{
    sx_put32(h, SX_OOB_MAGIC);
    sx_put32(h + 4, tag);
    sx_put64(h + 8, src);
    sx_put32(h + 16, len);
    sx_put32(h + 20, sx_crc32c(0, h, OOB_HDR_CRC_LEN));
}

void sx_oob_wake(sx_oob_t *oob)
{
    uint64_t one = 1;
    ssize_t n;

    do
        n = write(oob->wake_fd, &one, sizeof(one));
    while (n < 0 && errno == EINTR);
    /* EAGAIN: the counter is saturated, so the thread is awake anyway. */
}

/* "peer 0x2a (127.0.0.1:4000)", or the address alone before HELLO. */
static const char *oob_conn_name(const oob_conn_t *c, char *buf, size_t len)
{
    if (c->peer_known)
        snprintf(buf, len, "peer %#" PRIx64 " (%s)", c->peer, c->addr);
    else
        snprintf(buf, len, "connection from %s (peer not yet known)", c->addr);
    return buf;
}

/* ------------------------------------------------------------ connections */

/* Registers the events the connection's state calls for. */
static int oob_conn_arm(sx_oob_t *oob, oob_conn_t *c)
{
    uint32_t want;

    if (c->fd < 0)
        return 0;
    if (c->state == CONN_CONNECTING)
        want = EPOLLOUT;
    else
        want = EPOLLIN | (c->txq.head != NULL ? EPOLLOUT : 0);
    if (want == c->events)
        return 0;
    struct epoll_event ev = {.events = want, .data.ptr = c};
    if (epoll_ctl(oob->ep_fd, c->events == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, c->fd, &ev) != 0)
        return -errno;
    c->events = want;
    return 0;
}

static void oob_conn_close_fd(sx_oob_t *oob, oob_conn_t *c)
{
    if (c->fd < 0)
        return;
    if (c->events != 0)
        epoll_ctl(oob->ep_fd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->fd = -1;
    c->events = 0;
}

bool sx_oob_peer_connected(const sx_oob_t *oob, uint64_t peer)
{
    for (const oob_conn_t *o = oob->conns; o != NULL; o = o->next) {
        if (o->peer_known && o->peer == peer)
            return true;
    }
    return false;
}

/*
 * Receives posted for endpoint @p peer by its id, when @p c was the last
 * connection to it: they complete with @p status. An endpoint that closed
 * its last connection (it exited or was killed; nothing in the OOB closes
 * a connection that works) sends nothing more, and a receive from it
 * would wait for good: a rank's fence, whose answer only the sx_run
 * launcher can send, spun forever in sx_job_barrier after the launcher
 * was killed. Under the lock.
 */
static void oob_fail_receives_from(sx_oob_t *oob, const oob_conn_t *c, int status,
                                   oob_fifo_t *batch)
{
    if (sx_oob_peer_connected(oob, c->peer))
        return; /* another connection may still carry it */
    unsigned failed = 0;
    oob_item_t *prev = NULL, *it = oob->posted.head;
    while (it != NULL) {
        oob_item_t *next = it->next;
        oob_op_t *op = (oob_op_t *)it;
        if (op->peer != c->peer) {
            prev = it;
            it = next;
            continue;
        }
        fifo_unlink(&oob->posted, prev, it);
        if (op->kind != OOB_OP_WATCH)
            failed++; /* a watch has ended as it should */
        sx_oob_op_complete(oob, op, status, 0, op->peer, op->tag, batch);
        it = next;
    }
    if (failed > 0 && status != SX_ERR_SHUTDOWN) { /* not this endpoint's own close */
        char name[OOB_NAME_MAX];
        sx_warn(OOB, "%s: no connection to it is left; %u receive%s waiting for it fail%s (%s)",
                oob_conn_name(c, name, sizeof(name)), failed, failed == 1 ? "" : "s",
                failed == 1 ? "s" : "", sx_status_name(status));
    }
}

/*
 * Logs why (at @p level, naming the peer), closes the connection and
 * completes its queued sends with @p status, and the receives posted for
 * the peer if no other connection to it is left. The connection goes to
 * oob->dead, because epoll events already fetched may still point at it.
 */
void sx_oob_conn_fail(sx_oob_t *oob, oob_conn_t *c, int status, oob_fifo_t *batch,
                      sx_log_level_t level, const char *fmt, ...)
{
    char name[OOB_NAME_MAX], cause[256];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(cause, sizeof(cause), fmt, ap);
    va_end(ap);
    sx_log(level, OOB, "%s: %s; closing the connection", oob_conn_name(c, name, sizeof(name)),
           cause);

    oob_conn_close_fd(oob, c);
    oob_item_t *it;
    while ((it = fifo_pop(&c->txq)) != NULL) {
        oob_op_t *op = (oob_op_t *)it;
        sx_oob_op_complete(oob, op, status, 0, op->peer, op->tag, batch);
    }
    free(c->rx_msg);
    c->rx_msg = NULL;

    for (oob_conn_t **pp = &oob->conns; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    }
    c->dead = true;
    c->next = oob->dead;
    oob->dead = c;
    if (oob_conn_anon(c))
        sx_oob_anon_gone(oob);
    if (c->peer_known)
        oob_fail_receives_from(oob, c, status, batch);

    /* Sends to this peer move to another connection it has, if any (but
     * not to one made to an address it no longer has). */
    oob_peer_t *p = c->peer_known ? sx_oob_peer_find(oob, c->peer) : NULL;
    if (p != NULL && p->conn == c) {
        p->conn = NULL;
        for (oob_conn_t *o = oob->conns; o != NULL; o = o->next) {
            if (o->peer_known && o->peer == c->peer &&
                (!o->outgoing || strcmp(o->addr, p->addr) == 0)) {
                p->conn = o;
                break;
            }
        }
    }
}

void sx_oob_reap_dead(sx_oob_t *oob)
{
    while (oob->dead != NULL) {
        oob_conn_t *c = oob->dead;
        oob->dead = c->next;
        free(c);
    }
}

static void oob_set_nodelay(int fd)
{
    int one = 1;

    /* Frames are small and latency matters more than segment count. */
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static void oob_connected(sx_oob_t *oob, oob_conn_t *c, oob_fifo_t *batch)
{
    int rc;

    c->state = CONN_OPEN;
    sx_debug(OOB, "connected to peer %#" PRIx64 " at %s", c->peer, c->addr);
    rc = oob_conn_arm(oob, c);
    if (rc != 0)
        sx_oob_conn_fail(oob, c, SX_ERR_IO, batch, SX_LOG_ERROR, "epoll_ctl: %s", strerror(-rc));
}

/* A connection attempt failed with @p err: try again later, or give up. */
static void oob_connect_failed(sx_oob_t *oob, oob_conn_t *c, int err, oob_fifo_t *batch)
{
    oob_conn_close_fd(oob, c);
    if (err == ECONNREFUSED && c->tries < OOB_CONNECT_TRIES) {
        uint64_t delay_ms = (uint64_t)OOB_RETRY_FIRST_MS << (c->tries - 1);
        c->state = CONN_WAIT;
        c->timer_ns = sx_time_ns() + delay_ms * 1000000u;
        sx_debug(OOB, "connect to %s (peer %#" PRIx64 ") refused; again in %" PRIu64 " ms", c->addr,
                 c->peer, delay_ms);
        return;
    }
    sx_oob_conn_fail(oob, c, SX_ERR_IO, batch, SX_LOG_ERROR,
                     "connect to %s failed: %s (%d attempt%s)", c->addr, strerror(err), c->tries,
                     c->tries == 1 ? "" : "s");
}

static void oob_connect_start(sx_oob_t *oob, oob_conn_t *c, oob_fifo_t *batch)
{
    int fd, rc;

    c->tries++;
    fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        sx_oob_conn_fail(oob, c, SX_ERR_IO, batch, SX_LOG_ERROR, "socket: %s", strerror(errno));
        return;
    }
    oob_set_nodelay(fd);
    do
        rc = connect(fd, (const struct sockaddr *)&c->sa, sizeof(c->sa));
    while (rc != 0 && errno == EINTR);
    if (rc != 0 && errno != EINPROGRESS) {
        int err = errno;
        close(fd);
        oob_connect_failed(oob, c, err, batch);
        return;
    }
    c->fd = fd;
    if (rc == 0) {
        oob_connected(oob, c, batch);
        return;
    }
    c->state = CONN_CONNECTING;
    c->timer_ns = sx_time_ns() + (uint64_t)OOB_CONNECT_TIMEOUT_MS * 1000000u;
    rc = oob_conn_arm(oob, c);
    if (rc != 0)
        sx_oob_conn_fail(oob, c, SX_ERR_IO, batch, SX_LOG_ERROR, "epoll_ctl: %s", strerror(-rc));
}

/* A new outgoing connection to @p p, with its HELLO queued; the progress
 * thread connects. Under the lock. */
static oob_conn_t *oob_conn_new_outgoing(sx_oob_t *oob, oob_peer_t *p)
{
    oob_conn_t *c = calloc(1, sizeof(*c));
    oob_op_t *hello = calloc(1, sizeof(*hello));
    uint8_t *frame = malloc(SX_OOB_HDR_LEN);

    if (c == NULL || hello == NULL || frame == NULL) {
        free(c);
        free(hello);
        free(frame);
        return NULL;
    }
    sx_oob_hdr_write(frame, SX_OOB_TAG_HELLO, oob->self_id, 0);
    hello->item.kind = OOB_ITEM_OP;
    hello->kind = OOB_OP_HELLO;
    hello->peer = p->id;
    hello->tag = SX_OOB_TAG_HELLO;
    hello->frame = frame;
    hello->frame_len = SX_OOB_HDR_LEN;

    c->fd = -1;
    c->state = CONN_WAIT;
    c->outgoing = true;
    c->peer_known = true;
    c->peer = p->id;
    c->sa = p->sa;
    memcpy(c->addr, p->addr, sizeof(c->addr));
    c->timer_ns = sx_time_ns();
    fifo_push(&c->txq, &hello->item);
    c->next = oob->conns;
    oob->conns = c;
    p->conn = c;
    return c;
}

/* Stops watching the listener until @p until (sx_time_ns), or until
 * oob_listen_resume. */
static void oob_listen_pause(sx_oob_t *oob, uint64_t until)
{
    struct epoll_event ev = {.events = 0, .data.ptr = &oob->listen_fd};
    epoll_ctl(oob->ep_fd, EPOLL_CTL_MOD, oob->listen_fd, &ev);
    oob->accept_resume_ns = until;
}

void sx_oob_listen_resume(sx_oob_t *oob)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &oob->listen_fd};
    epoll_ctl(oob->ep_fd, EPOLL_CTL_MOD, oob->listen_fd, &ev);
    oob->accept_resume_ns = 0;
}

void sx_oob_anon_gone(sx_oob_t *oob)
{
    /* A listener paused for want of room (oob_anon_room) has it now. */
    if (oob->anon-- == OOB_ANON_MAX + 1 && oob->accept_resume_ns != 0 && !oob->closing)
        sx_oob_listen_resume(oob);
}

/*
 * One connection more than OOB_ANON_MAX has not said who it is: the
 * oldest, if it has had OOB_ANON_GRACE_MS to say so, is closed. Otherwise
 * the listener pauses until that grace has passed or one of them speaks
 * (or goes), so that at most one more waits: a job whose ranks all
 * connect at once (sx_run's rendezvous) is accepted as fast as their
 * HELLOs are read, and none of them is closed for being quick. Returns
 * whether to go on accepting.
 */
static bool oob_anon_room(sx_oob_t *oob, oob_fifo_t *batch)
{
    oob_conn_t *oldest = NULL;

    /* The oldest that has sent nothing at all, else the oldest: a peer
     * whose HELLO is half read is slow, not silent. */
    for (int pass = 0; pass < 2 && oldest == NULL; pass++) {
        for (oob_conn_t *c = oob->conns; c != NULL; c = c->next) {
            if (oob_conn_anon(c) && (pass == 1 || c->rx_hdr_got == 0) &&
                (oldest == NULL || sx_u64_before(c->timer_ns, oldest->timer_ns)))
                oldest = c;
        }
    }
    uint64_t accepted = oldest->timer_ns - (uint64_t)OOB_HELLO_TIMEOUT_MS * 1000000u;
    uint64_t grace_end = accepted + (uint64_t)OOB_ANON_GRACE_MS * 1000000u;
    if (sx_u64_before(sx_time_ns(), grace_end)) {
        oob_listen_pause(oob, grace_end);
        return false;
    }
    /* Logged at the first and every 1000th: a flood of them would flood
     * the log too. */
    oob->anon_closed++;
    sx_oob_conn_fail(oob, oldest, SX_ERR_FULL, batch,
                     oob->anon_closed % 1000 == 1 ? SX_LOG_WARN : SX_LOG_DEBUG,
                     "the oldest of %d accepted connections that have not said who they are "
                     "(no HELLO in %d ms), and another came (%" PRIu64 " closed so far)",
                     OOB_ANON_MAX + 1, OOB_ANON_GRACE_MS, oob->anon_closed);
    return true;
}

static void oob_accept(sx_oob_t *oob, oob_fifo_t *batch)
{
    for (;;) {
        struct sockaddr_in sa;
        socklen_t sl = sizeof(sa);
        int fd = accept4(oob->listen_fd, (struct sockaddr *)&sa, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return;
            /* Out of descriptors or memory: the listener would stay
             * readable and spin us, so stop watching it for a while. */
            sx_warn(OOB, "accept on %s: %s; pausing for %d ms", oob->addr, strerror(errno),
                    OOB_ACCEPT_PAUSE_MS);
            oob_listen_pause(oob, sx_time_ns() + (uint64_t)OOB_ACCEPT_PAUSE_MS * 1000000u);
            return;
        }
        oob_conn_t *c = calloc(1, sizeof(*c));
        if (c == NULL) {
            sx_error(OOB, "no memory for a connection; refusing one");
            close(fd);
            continue;
        }
        oob_set_nodelay(fd);
        c->fd = fd;
        c->state = CONN_OPEN;
        sx_oob_format_addr(&sa, c->addr, sizeof(c->addr));
        int rc = oob_conn_arm(oob, c);
        if (rc != 0) {
            sx_error(OOB, "epoll_ctl for the connection from %s: %s", c->addr, strerror(-rc));
            close(fd);
            free(c);
            continue;
        }
        c->next = oob->conns;
        oob->conns = c;
        c->timer_ns = sx_time_ns() + (uint64_t)OOB_HELLO_TIMEOUT_MS * 1000000u;
        oob->anon++;
        sx_debug(OOB, "accepted a connection from %s", c->addr);
        while (oob->anon > OOB_ANON_MAX) {
            if (!oob_anon_room(oob, batch))
                return;
        }
    }
}

/* Binds an accepted connection to the id its HELLO names. */
static bool oob_hello(sx_oob_t *oob, oob_conn_t *c, uint64_t src, oob_fifo_t *batch)
{
    if (src == SX_OOB_PEER_ANY || src == oob->self_id) {
        sx_oob_conn_fail(oob, c, SX_ERR_PROTO, batch, SX_LOG_ERROR,
                         "HELLO names an invalid id %#" PRIx64, src);
        return false;
    }
    oob_peer_t *p = sx_oob_peer_get(oob, src);
    if (p == NULL) {
        sx_oob_conn_fail(oob, c, SX_ERR_IO, batch, SX_LOG_ERROR, "no memory for peer %#" PRIx64,
                         src);
        return false;
    }
    sx_oob_anon_gone(oob);
    c->peer_known = true;
    c->peer = src;
    if (p->conn == NULL)
        p->conn = c;
    sx_debug(OOB, "connection from %s is peer %#" PRIx64, c->addr, src);
    return true;
}

/* A message no receive or handler takes found the unexpected queue full:
 * the connection that brought it is closed (OOB_UNEXPECTED_MAX). */
static void oob_unexpected_full(sx_oob_t *oob, oob_conn_t *c, oob_fifo_t *batch, uint32_t tag,
                                uint32_t len)
{
    sx_oob_conn_fail(oob, c, SX_ERR_FULL, batch, SX_LOG_ERROR,
                     "a %" PRIu32 "-byte message with tag %#" PRIx32
                     " that no receive or handler takes does not fit: such messages take %zu "
                     "bytes already (at most %zu)",
                     len, tag, oob->unexpected_bytes, OOB_UNEXPECTED_MAX);
}

/*
 * Checks the header just read, before anything else looks at it. Returns
 * false if the connection was closed.
 */
static bool oob_frame_header(sx_oob_t *oob, oob_conn_t *c, oob_fifo_t *batch)
{
    const uint8_t *h = c->rx_hdr;
    uint32_t magic = sx_get32(h), tag = sx_get32(h + 4), len = sx_get32(h + 16),
             crc = sx_get32(h + 20);
    uint64_t src = sx_get64(h + 8);

    if (magic != SX_OOB_MAGIC) {
        sx_oob_conn_fail(oob, c, SX_ERR_PROTO, batch, SX_LOG_ERROR, "bad frame magic %#010x",
                         magic);
        return false;
    }
    if (sx_crc32c(0, h, OOB_HDR_CRC_LEN) != crc) {
        sx_oob_conn_fail(oob, c, SX_ERR_PROTO, batch, SX_LOG_ERROR, "bad frame header checksum");
        return false;
    }
    if (len > SX_OOB_MSG_MAX) {
        sx_oob_conn_fail(oob, c, SX_ERR_PROTO, batch, SX_LOG_ERROR,
                         "frame length %" PRIu32 " over the limit of %u bytes", len,
                         SX_OOB_MSG_MAX);
        return false;
    }
    if (!c->peer_known) {
        if (tag != SX_OOB_TAG_HELLO) {
            sx_oob_conn_fail(oob, c, SX_ERR_PROTO, batch, SX_LOG_ERROR,
                             "first frame has tag %#x, not HELLO", tag);
            return false;
        }
        if (len != 0) {
            sx_oob_conn_fail(oob, c, SX_ERR_PROTO, batch, SX_LOG_ERROR,
                             "HELLO with %" PRIu32 " bytes of payload", len);
            return false;
        }
        c->rx_hdr_got = 0;
        return oob_hello(oob, c, src, batch);
    }
    if (tag == SX_OOB_TAG_HELLO) {
        sx_oob_conn_fail(oob, c, SX_ERR_PROTO, batch, SX_LOG_ERROR, "unexpected HELLO frame");
        return false;
    }
    if (src != c->peer) {
        sx_oob_conn_fail(oob, c, SX_ERR_PROTO, batch, SX_LOG_ERROR,
                         "frame claims source id %#" PRIx64, src);
        return false;
    }
    oob_msg_t *m = malloc(sizeof(*m) + len);
    if (m == NULL) {
        sx_oob_conn_fail(oob, c, SX_ERR_IO, batch, SX_LOG_ERROR,
                         "no memory for a message of %" PRIu32 " bytes", len);
        return false;
    }
    m->item.kind = OOB_ITEM_MSG;
    m->item.next = NULL;
    m->peer = src;
    m->tag = tag;
    m->len = len;
    m->handler = NULL;
    m->handler_arg = NULL;
    c->rx_hdr_got = 0;
    if (len == 0) {
        if (!sx_oob_deliver(oob, m, batch)) {
            oob_unexpected_full(oob, c, batch, tag, len);
            return false;
        }
    } else {
        c->rx_msg = m;
        c->rx_got = 0;
    }
    return true;
}

/* Reads what the socket has, up to a budget. Returns false if the
 * connection was closed. */
bool sx_oob_conn_read(sx_oob_t *oob, oob_conn_t *c, oob_fifo_t *batch)
{
    for (int round = 0; round < OOB_READ_BUDGET; round++) {
        uint8_t *dst;
        size_t want;
        if (c->rx_msg == NULL) {
            dst = c->rx_hdr + c->rx_hdr_got;
            want = SX_OOB_HDR_LEN - c->rx_hdr_got;
        } else {
            dst = c->rx_msg->data + c->rx_got;
            want = c->rx_msg->len - c->rx_got;
        }
        ssize_t n = recv(c->fd, dst, want, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return true;
            sx_oob_conn_fail(oob, c, SX_ERR_IO, batch, SX_LOG_ERROR, "receive: %s",
                             strerror(errno));
            return false;
        }
        if (n == 0) {
            if (c->rx_msg != NULL)
                sx_oob_conn_fail(oob, c, SX_ERR_IO, batch, SX_LOG_ERROR,
                                 "connection closed inside a frame (%zu of %" PRIu32
                                 " payload bytes)",
                                 c->rx_got, c->rx_msg->len);
            else if (c->rx_hdr_got > 0)
                sx_oob_conn_fail(oob, c, SX_ERR_IO, batch, SX_LOG_ERROR,
                                 "connection closed inside a frame (%zu of %d header bytes)",
                                 c->rx_hdr_got, SX_OOB_HDR_LEN);
            else if (c->txq.head != NULL)
                sx_oob_conn_fail(oob, c, SX_ERR_IO, batch, SX_LOG_ERROR,
                                 "connection closed by the peer with sends queued");
            else
                sx_oob_conn_fail(oob, c, SX_ERR_IO, batch, SX_LOG_DEBUG, "closed by the peer");
            return false;
        }
        if (c->rx_msg == NULL) {
            c->rx_hdr_got += (size_t)n;
            if (c->rx_hdr_got == SX_OOB_HDR_LEN && !oob_frame_header(oob, c, batch))
                return false;
        } else {
            c->rx_got += (size_t)n;
            if (c->rx_got == c->rx_msg->len) {
                oob_msg_t *m = c->rx_msg;
                uint32_t tag = m->tag, len = m->len;
                c->rx_msg = NULL;
                if (!sx_oob_deliver(oob, m, batch)) {
                    oob_unexpected_full(oob, c, batch, tag, len);
                    return false;
                }
            }
        }
    }
    return true;
}

/* Writes queued frames until the socket is full. Returns false if the
 * connection was closed. */
static bool oob_conn_write(sx_oob_t *oob, oob_conn_t *c, oob_fifo_t *batch)
{
    oob_item_t *it;

    while ((it = c->txq.head) != NULL) {
        oob_op_t *op = (oob_op_t *)it;
        /* The header and the payload, which may be shared (its own
         * buffer) or follow the header in the frame. */
        size_t head = op->shared != NULL ? SX_OOB_HDR_LEN : op->frame_len;
        while (op->sent < op->frame_len) {
            struct iovec v[2];
            struct msghdr mh = {.msg_iov = v, .msg_iovlen = 1};
            if (op->sent < head) {
                v[0] = (struct iovec){op->frame + op->sent, head - op->sent};
                if (op->shared != NULL && op->shared->len > 0) {
                    v[1] = (struct iovec){op->shared->data, op->shared->len};
                    mh.msg_iovlen = 2;
                }
            } else {
                v[0] =
                    (struct iovec){op->shared->data + (op->sent - head), op->frame_len - op->sent};
            }
            ssize_t n = sendmsg(c->fd, &mh, MSG_NOSIGNAL);
            if (n < 0) {
                if (errno == EINTR)
                    continue;
                if (errno == EAGAIN || errno == EWOULDBLOCK)
                    goto out;
                sx_oob_conn_fail(oob, c, SX_ERR_IO, batch, SX_LOG_ERROR, "send: %s",
                                 strerror(errno));
                return false;
            }
            op->sent += (size_t)n;
        }
        fifo_pop(&c->txq);
        sx_oob_op_complete(oob, op, SX_OK, op->frame_len - SX_OOB_HDR_LEN, op->peer, op->tag,
                           batch);
    }
out:;
    int rc = oob_conn_arm(oob, c);
    if (rc != 0) {
        sx_oob_conn_fail(oob, c, SX_ERR_IO, batch, SX_LOG_ERROR, "epoll_ctl: %s", strerror(-rc));
        return false;
    }
    return true;
}

static void oob_conn_event(sx_oob_t *oob, oob_conn_t *c, uint32_t events, oob_fifo_t *batch)
{
    if (c->dead || c->fd < 0)
        return;
    if (c->state == CONN_CONNECTING) {
        int err = 0;
        socklen_t sl = sizeof(err);
        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &sl) != 0)
            err = errno;
        if (err == 0 && !(events & (EPOLLERR | EPOLLHUP)))
            oob_connected(oob, c, batch);
        else
            oob_connect_failed(oob, c, err != 0 ? err : ECONNRESET, batch);
        return;
    }
    if ((events & (EPOLLIN | EPOLLERR | EPOLLHUP)) && !sx_oob_conn_read(oob, c, batch))
        return;
    if (events & EPOLLOUT)
        oob_conn_write(oob, c, batch);
}

/* Starts due connection attempts and gives up on slow ones; returns the
 * epoll_wait timeout until the next timer (-1: none). */
static int oob_timers(sx_oob_t *oob, oob_fifo_t *batch)
{
    uint64_t now = sx_time_ns(), next = 0;
    bool have = false;
    oob_conn_t *c = oob->conns;

    while (c != NULL) {
        oob_conn_t *following = c->next; /* c may move to oob->dead */
        if (c->state == CONN_WAIT && sx_u64_before_eq(c->timer_ns, now))
            oob_connect_start(oob, c, batch);
        else if (c->state == CONN_CONNECTING && sx_u64_before_eq(c->timer_ns, now))
            oob_connect_failed(oob, c, ETIMEDOUT, batch);
        else if (oob_conn_anon(c) && sx_u64_before_eq(c->timer_ns, now))
            sx_oob_conn_fail(oob, c, SX_ERR_PROTO, batch, SX_LOG_WARN,
                             "no HELLO within %d ms of its connection", OOB_HELLO_TIMEOUT_MS);
        c = following;
    }
    if (oob->accept_resume_ns != 0 && sx_u64_before_eq(oob->accept_resume_ns, now))
        sx_oob_listen_resume(oob);
    if (oob->accept_resume_ns != 0) {
        next = oob->accept_resume_ns;
        have = true;
    }
    for (c = oob->conns; c != NULL; c = c->next) {
        if ((c->state == CONN_WAIT || c->state == CONN_CONNECTING || oob_conn_anon(c)) &&
            (!have || sx_u64_before(c->timer_ns, next))) {
            next = c->timer_ns;
            have = true;
        }
    }
    if (!have)
        return -1;
    now = sx_time_ns();
    if (sx_u64_before_eq(next, now))
        return 0;
    uint64_t ms = (next - now + 999999u) / 1000000u;
    return ms > INT_MAX ? INT_MAX : (int)ms;
}

/* ------------------------------------------------------------ progress thread */

void *sx_oob_progress(void *arg)
{
    sx_oob_t *oob = arg;
    struct epoll_event ev[OOB_EVENTS];
    oob_fifo_t batch = {0};

    sx_oob_current = oob;
    pthread_mutex_lock(&oob->lock);
    while (!oob->closing) {
        /* A timer may already have completed something: then only look. */
        int timeout = oob_timers(oob, &batch);
        if (batch.head != NULL)
            timeout = 0;
        pthread_mutex_unlock(&oob->lock);
        int n = epoll_wait(oob->ep_fd, ev, OOB_EVENTS, timeout);
        int err = errno;
        pthread_mutex_lock(&oob->lock);
        if (oob->closing)
            break;
        if (n < 0) {
            if (err != EINTR) {
                sx_error(OOB, "epoll_wait: %s; the progress thread stops", strerror(err));
                break;
            }
            n = 0;
        }
        /* Messages that waited for a handler go before any that arrive
         * now, so a handler sees its tag's messages in order. */
        if (oob->redispatch)
            sx_oob_redispatch(oob, &batch);
        if (oob->watch_check)
            sx_oob_watch_check(oob, &batch);
        for (int i = 0; i < n; i++) {
            if (ev[i].data.ptr == &oob->listen_fd) {
                oob_accept(oob, &batch);
            } else if (ev[i].data.ptr == &oob->wake_fd) {
                uint64_t v;
                while (read(oob->wake_fd, &v, sizeof(v)) < 0 && errno == EINTR)
                    ;
            } else {
                oob_conn_event(oob, ev[i].data.ptr, ev[i].events, &batch);
            }
        }
        sx_oob_reap_dead(oob);
        if (batch.head != NULL) {
            oob->dispatching = true;
            pthread_mutex_unlock(&oob->lock);
            sx_oob_batch_run(&batch);
            pthread_mutex_lock(&oob->lock);
            oob->dispatching = false;
            oob->dispatch_seq++;
            pthread_cond_broadcast(&oob->cond);
        }
    }
    pthread_mutex_unlock(&oob->lock);
    /* A batch gathered when closing began still has to run. */
    sx_oob_batch_run(&batch);
    return NULL;
}

/* Queues a send on its peer's connection, making one if needed. Under the
 * lock. */
int sx_oob_send_queue(sx_oob_t *oob, oob_op_t *op)
{
    if (oob->closing)
        return SX_ERR_SHUTDOWN;
    oob_peer_t *p = sx_oob_peer_find(oob, op->peer);
    oob_conn_t *c = p != NULL ? p->conn : NULL;
    if (c == NULL) {
        if (p == NULL || !p->has_addr) {
            sx_debug(OOB, "send to peer %#" PRIx64 ": no address and no connection", op->peer);
            return SX_ERR_PEER_UNREACHABLE;
        }
        c = oob_conn_new_outgoing(oob, p);
        if (c == NULL)
            return SX_ERR_NO_MEMORY;
        fifo_push(&c->txq, &op->item);
        sx_oob_wake(oob);
        return SX_OK;
    }
    oob_item_t *prev = c->txq.tail;
    fifo_push(&c->txq, &op->item);
    int rc = c->state == CONN_OPEN ? oob_conn_arm(oob, c) : 0;
    if (rc != 0) {
        /* Nobody would write it: take it back. */
        fifo_unlink(&c->txq, prev, &op->item);
        sx_error(OOB, "epoll_ctl for peer %#" PRIx64 ": %s", op->peer, strerror(-rc));
        return SX_ERR_IO;
    }
    return SX_OK;
}
