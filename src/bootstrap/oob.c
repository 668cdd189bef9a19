/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The out-of-band channel over TCP: the API, matching and completions.
 * oob.h has the contract and the frame format; oob_int.h the structures
 * and the synchronization; oob_conn.c the connections and the progress
 * thread.
 *
 * Structure. An endpoint owns a listener, an eventfd and an epoll set, and
 * one progress thread that does every socket operation after sx_oob_open:
 * accept, connect, read and write. Application threads only queue work
 * under the endpoint's mutex (arming EPOLLOUT or writing the eventfd), and
 * blocking calls wait on the endpoint's condition variable (CLOCK_MONOTONIC)
 * with their timeout. This is start-up code, so one mutex for everything
 * is enough. An endpoint does not survive fork(): a child opens its own.
 *
 * Matching (in the shape of Open MPI's mca_oob, MCA_OOB_PEEK and
 * MCA_OOB_TRUNC): an arriving message is offered to the posted receives in
 * posting order; a PEEK receive that matches completes with a copy and the
 * message goes on to the next; the first matching receive without PEEK
 * consumes it. A message no receive consumed goes to the handler of its
 * tag if there is one, else to the unexpected queue, where later receives
 * find it (oldest first). A handler set while messages of its tag wait in
 * that queue gets them, on the progress thread. A receive that finds a
 * message longer than its buffers gets what fit and SX_ERR_TRUNCATED
 * (with SX_OOB_TRUNC, the whole length as len), and consumes it unless it
 * peeks.
 *
 * Choices the contract leaves open: sending with tag SX_OOB_TAG_ANY or
 * SX_OOB_TAG_HELLO, to SX_OOB_PEER_ANY or to our own id is
 * SX_ERR_INVALID_PARAM; a send to a peer with neither an address nor a
 * connection fails at once with SX_ERR_PEER_UNREACHABLE (no callback); the
 * listener refuses the wildcard address, because sx_oob_address must name
 * an address peers can reach; blocking calls with a nonzero timeout from a
 * callback (the progress thread) fail with SX_ERR_INVALID_PARAM instead of
 * deadlocking; sx_oob_recv writes *peer_p, *tag_p and *len_p for SX_OK and
 * SX_ERR_TRUNCATED only; sx_oob_peer_set with a new address for a peer
 * sends later messages there, not over the connection to the old one.
 */
#include "bootstrap/oob_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <inttypes.h>
#include <limits.h>
#include <net/if.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <shardx.h>

#include "common/time.h"

/* An absolute CLOCK_MONOTONIC deadline @p timeout_ms from now. */
static struct timespec oob_deadline(int timeout_ms)
{
    uint64_t t = sx_time_ns() + (uint64_t)timeout_ms * 1000000u;
    return (struct timespec){.tv_sec = (time_t)(t / 1000000000u),
                             .tv_nsec = (long)(t % 1000000000u)};
}

/* Parses "host:port" (host a.b.c.d or a name that resolves to IPv4). */
static int oob_parse_addr(const char *addr, struct sockaddr_in *sa)
{
    char host[SX_OOB_ADDR_MAX];
    const char *colon;
    char *end;

    if (addr == NULL || strlen(addr) >= SX_OOB_ADDR_MAX)
        return SX_ERR_INVALID_PARAM;
    colon = strrchr(addr, ':');
    if (colon == NULL || colon == addr || colon[1] < '0' || colon[1] > '9')
        return SX_ERR_INVALID_PARAM;
    errno = 0;
    unsigned long port = strtoul(colon + 1, &end, 10);
    if (errno != 0 || *end != '\0' || port == 0 || port > 65535)
        return SX_ERR_INVALID_PARAM;
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';

    memset(sa, 0, sizeof(*sa));
    sa->sin_family = AF_INET;
    sa->sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &sa->sin_addr) == 1)
        return SX_OK;
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    if (getaddrinfo(host, NULL, &hints, &res) != 0 || res == NULL)
        return SX_ERR_INVALID_PARAM;
    sa->sin_addr = ((const struct sockaddr_in *)(const void *)res->ai_addr)->sin_addr;
    freeaddrinfo(res);
    return SX_OK;
}

void sx_oob_format_addr(const struct sockaddr_in *sa, char *buf, size_t len)
{
    char ip[INET_ADDRSTRLEN];

    if (inet_ntop(AF_INET, &sa->sin_addr, ip, sizeof(ip)) == NULL)
        snprintf(ip, sizeof(ip), "?");
    snprintf(buf, len, "%s:%u", ip, (unsigned)ntohs(sa->sin_port));
}

oob_peer_t *sx_oob_peer_find(sx_oob_t *oob, uint64_t id)
{
    for (oob_peer_t *p = oob->peers; p != NULL; p = p->next) {
        if (p->id == id)
            return p;
    }
    return NULL;
}

oob_peer_t *sx_oob_peer_get(sx_oob_t *oob, uint64_t id)
{
    oob_peer_t *p = sx_oob_peer_find(oob, id);

    if (p == NULL) {
        p = calloc(1, sizeof(*p));
        if (p == NULL)
            return NULL;
        p->id = id;
        p->next = oob->peers;
        oob->peers = p;
    }
    return p;
}

static oob_handler_t *oob_handler_find(sx_oob_t *oob, uint32_t tag)
{
    for (size_t i = 0; i < oob->nhandlers; i++) {
        if (oob->handlers[i].tag == tag)
            return &oob->handlers[i];
    }
    return NULL;
}

void sx_oob_op_free(oob_op_t *op)
{
    if (op->shared != NULL &&
        atomic_fetch_sub_explicit(&op->shared->refs, 1, memory_order_acq_rel) == 1)
        free(op->shared);
    free(op->frame);
    free(op);
}

/* ------------------------------------------------------------ completion */

/*
 * Completes @p op (under the lock): a waiting blocking call is woken, an
 * abandoned one freed, and a nonblocking one goes to @p batch, whose
 * callbacks run once the lock is released.
 */
void sx_oob_op_complete(sx_oob_t *oob, oob_op_t *op, int status, size_t len, uint64_t peer,
                        uint32_t tag, oob_fifo_t *batch)
{
    op->status = status;
    op->len = len;
    op->peer = peer;
    op->tag = tag;
    if (op->kind == OOB_OP_HELLO) {
        sx_oob_op_free(op);
    } else if (op->sync) {
        if (op->abandoned) {
            sx_oob_op_free(op);
        } else {
            op->done = true;
            pthread_cond_broadcast(&oob->cond);
        }
    } else {
        fifo_push(batch, &op->item);
    }
}

/* Runs a batch's callbacks and handlers; without the lock. */
void sx_oob_batch_run(oob_fifo_t *batch)
{
    oob_item_t *it;

    while ((it = fifo_pop(batch)) != NULL) {
        if (it->kind == OOB_ITEM_OP) {
            oob_op_t *op = (oob_op_t *)it;
            if (op->cb != NULL)
                op->cb(op->arg, op->status, op->peer, op->tag, op->len);
            sx_oob_op_free(op);
        } else {
            oob_msg_t *m = (oob_msg_t *)it;
            m->handler(m->handler_arg, m->peer, m->tag, m->data, m->len);
            free(m);
        }
    }
}

static bool oob_match(const oob_op_t *op, const oob_msg_t *m)
{
    return op->kind == OOB_OP_RECV && (op->peer == SX_OOB_PEER_ANY || op->peer == m->peer) &&
           (op->tag == SX_OOB_TAG_ANY || op->tag == m->tag);
}

/* Copies what fits of @p m into the receive's buffers; sets its status
 * and length as the callback will see them. */
static void oob_recv_fill(oob_op_t *op, const oob_msg_t *m)
{
    size_t copied = 0;

    for (int i = 0; i < op->iovcnt && copied < m->len; i++) {
        size_t n = op->iov[i].iov_len;
        if (n > m->len - copied)
            n = m->len - copied;
        if (n > 0)
            memcpy(op->iov[i].iov_base, m->data + copied, n);
        copied += n;
    }
    op->status = copied < m->len ? SX_ERR_TRUNCATED : SX_OK;
    op->len = (op->flags & SX_OOB_TRUNC) ? m->len : copied;
}

/* A complete message from the wire: to the posted receives, a handler, or
 * the unexpected queue. Under the lock. */
bool sx_oob_deliver(sx_oob_t *oob, oob_msg_t *m, oob_fifo_t *batch)
{
    oob_item_t *prev = NULL, *it = oob->posted.head;

    while (it != NULL) {
        oob_item_t *next = it->next;
        oob_op_t *op = (oob_op_t *)it;
        if (!oob_match(op, m)) {
            prev = it;
            it = next;
            continue;
        }
        oob_recv_fill(op, m);
        fifo_unlink(&oob->posted, prev, it);
        sx_oob_op_complete(oob, op, op->status, op->len, m->peer, m->tag, batch);
        if (!(op->flags & SX_OOB_PEEK)) {
            free(m);
            return true;
        }
        it = next;
    }
    oob_handler_t *h = oob_handler_find(oob, m->tag);
    if (h != NULL) {
        m->handler = h->fn;
        m->handler_arg = h->arg;
        fifo_push(batch, &m->item);
        return true;
    }
    /* The message's whole allocation counts: empty ones are not free. */
    if (oob_msg_size(m) > OOB_UNEXPECTED_MAX - oob->unexpected_bytes) {
        free(m);
        return false;
    }
    oob->unexpected_bytes += oob_msg_size(m);
    fifo_push(&oob->unexpected, &m->item);
    return true;
}

/* Hands messages waiting in the unexpected queue to handlers set since
 * they arrived. Under the lock, on the progress thread. */
void sx_oob_redispatch(sx_oob_t *oob, oob_fifo_t *batch)
{
    oob_item_t *prev = NULL, *it = oob->unexpected.head;

    oob->redispatch = false;
    while (it != NULL) {
        oob_item_t *next = it->next;
        oob_msg_t *m = (oob_msg_t *)it;
        oob_handler_t *h = oob_handler_find(oob, m->tag);
        if (h != NULL) {
            fifo_unlink(&oob->unexpected, prev, it);
            oob->unexpected_bytes -= oob_msg_size(m);
            m->handler = h->fn;
            m->handler_arg = h->arg;
            fifo_push(batch, &m->item);
        } else {
            prev = it;
        }
        it = next;
    }
}

/* ------------------------------------------------------------ open, close */

void sx_oob_pick_host(const char *toward, char *host, size_t cap)
{
    struct sockaddr_in sa;

    snprintf(host, cap, "127.0.0.1");
    /* The source address of the route there: connect(2) on a UDP socket
     * picks it without sending anything. */
    if (toward != NULL && oob_parse_addr(toward, &sa) == SX_OK) {
        int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in me;
        socklen_t len = sizeof(me);
        bool ok = fd >= 0 && connect(fd, (const struct sockaddr *)&sa, sizeof(sa)) == 0 &&
                  getsockname(fd, (struct sockaddr *)&me, &len) == 0 &&
                  me.sin_addr.s_addr != htonl(INADDR_ANY);
        if (fd >= 0)
            close(fd);
        if (ok) {
            inet_ntop(AF_INET, &me.sin_addr, host, (socklen_t)cap);
            return;
        }
    }
    struct ifaddrs *list = NULL;
    if (getifaddrs(&list) != 0)
        return;
    for (struct ifaddrs *ifa = list; ifa != NULL; ifa = ifa->ifa_next) {
        if (ifa->ifa_addr != NULL && ifa->ifa_addr->sa_family == AF_INET &&
            (ifa->ifa_flags & IFF_UP) != 0 && (ifa->ifa_flags & IFF_LOOPBACK) == 0) {
            const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)ifa->ifa_addr;
            inet_ntop(AF_INET, &in->sin_addr, host, (socklen_t)cap);
            break;
        }
    }
    freeifaddrs(list);
}

int sx_oob_open(uint64_t self_id, const char *bind_host, uint16_t port, sx_oob_t **oob_p)
{
    char addr[SX_OOB_ADDR_MAX];
    struct sockaddr_in sa;
    socklen_t sl = sizeof(sa);
    sx_oob_t *oob;
    int rc, one = 1;

    /* The launcher opens an endpoint without an engine: read SX_LOG_* here too. */
    sx_log_init_from_env();
    if (oob_p == NULL || self_id == SX_OOB_PEER_ANY)
        return SX_ERR_INVALID_PARAM;
    if (bind_host == NULL)
        bind_host = "127.0.0.1";
    if (snprintf(addr, sizeof(addr), "%s:1", bind_host) >= (int)sizeof(addr) ||
        oob_parse_addr(addr, &sa) != SX_OK) {
        sx_error(OOB, "cannot listen on '%s': not an IPv4 address or a host name", bind_host);
        return SX_ERR_INVALID_PARAM;
    }
    if (sa.sin_addr.s_addr == htonl(INADDR_ANY)) {
        sx_error(OOB, "cannot listen on the wildcard address: peers need one they can reach");
        return SX_ERR_INVALID_PARAM;
    }
    sa.sin_port = htons(port);

    oob = calloc(1, sizeof(*oob));
    if (oob == NULL)
        return SX_ERR_NO_MEMORY;
    oob->self_id = self_id;
    oob->listen_fd = oob->wake_fd = oob->ep_fd = -1;

    oob->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (oob->listen_fd < 0) {
        sx_error(OOB, "socket: %s", strerror(errno));
        rc = SX_ERR_IO;
        goto fail;
    }
    setsockopt(oob->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(oob->listen_fd, (const struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        listen(oob->listen_fd, SOMAXCONN) != 0 ||
        getsockname(oob->listen_fd, (struct sockaddr *)&sa, &sl) != 0) {
        int err = errno;
        sx_oob_format_addr(&sa, addr, sizeof(addr));
        sx_error(OOB, "cannot listen on %s: %s", addr, strerror(err));
        rc = SX_ERR_IO;
        goto fail;
    }
    sx_oob_format_addr(&sa, oob->addr, sizeof(oob->addr));

    oob->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    oob->ep_fd = epoll_create1(EPOLL_CLOEXEC);
    if (oob->wake_fd < 0 || oob->ep_fd < 0) {
        sx_error(OOB, "eventfd/epoll_create1: %s", strerror(errno));
        rc = SX_ERR_IO;
        goto fail;
    }
    struct epoll_event lev = {.events = EPOLLIN, .data.ptr = &oob->listen_fd};
    struct epoll_event wev = {.events = EPOLLIN, .data.ptr = &oob->wake_fd};
    if (epoll_ctl(oob->ep_fd, EPOLL_CTL_ADD, oob->listen_fd, &lev) != 0 ||
        epoll_ctl(oob->ep_fd, EPOLL_CTL_ADD, oob->wake_fd, &wev) != 0) {
        sx_error(OOB, "epoll_ctl: %s", strerror(errno));
        rc = SX_ERR_IO;
        goto fail;
    }

    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&oob->cond, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&oob->lock, NULL);

    /* The progress thread takes no signals; they belong to the application. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&oob->thread, NULL, sx_oob_progress, oob);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        sx_error(OOB, "pthread_create: %s", strerror(rc));
        pthread_cond_destroy(&oob->cond);
        pthread_mutex_destroy(&oob->lock);
        rc = SX_ERR_NO_MEMORY;
        goto fail;
    }
    sx_debug(OOB, "endpoint %#" PRIx64 " listens on %s", self_id, oob->addr);
    *oob_p = oob;
    return SX_OK;

fail:
    if (oob->ep_fd >= 0)
        close(oob->ep_fd);
    if (oob->wake_fd >= 0)
        close(oob->wake_fd);
    if (oob->listen_fd >= 0)
        close(oob->listen_fd);
    free(oob);
    return rc;
}

void sx_oob_close(sx_oob_t *oob)
{
    oob_fifo_t batch = {0};
    oob_item_t *it;

    if (oob == NULL)
        return;
    if (sx_oob_current == oob) {
        sx_error(OOB, "sx_oob_close called from a callback; the endpoint stays open");
        return;
    }
    pthread_mutex_lock(&oob->lock);
    oob->closing = true;
    pthread_mutex_unlock(&oob->lock);
    sx_oob_wake(oob);
    pthread_join(oob->thread, NULL);

    /* Only callers still inside blocking calls share the endpoint now. */
    pthread_mutex_lock(&oob->lock);
    while (oob->conns != NULL)
        sx_oob_conn_fail(oob, oob->conns, SX_ERR_SHUTDOWN, &batch, SX_LOG_DEBUG,
                         "the endpoint closes");
    sx_oob_reap_dead(oob);
    while ((it = fifo_pop(&oob->posted)) != NULL) {
        oob_op_t *op = (oob_op_t *)it;
        sx_oob_op_complete(oob, op, SX_ERR_SHUTDOWN, 0, op->peer, op->tag, &batch);
    }
    while ((it = fifo_pop(&oob->unexpected)) != NULL)
        free(it);
    while (oob->waiters > 0)
        pthread_cond_wait(&oob->cond, &oob->lock);
    pthread_mutex_unlock(&oob->lock);
    sx_oob_batch_run(&batch);

    while (oob->peers != NULL) {
        oob_peer_t *p = oob->peers;
        oob->peers = p->next;
        free(p);
    }
    free(oob->handlers);
    close(oob->ep_fd);
    close(oob->wake_fd);
    close(oob->listen_fd);
    pthread_cond_destroy(&oob->cond);
    pthread_mutex_destroy(&oob->lock);
    free(oob);
}

int sx_oob_address(sx_oob_t *oob, char *buf, size_t len)
{
    if (oob == NULL || buf == NULL)
        return SX_ERR_INVALID_PARAM;
    size_t n = strlen(oob->addr) + 1;
    if (len < n)
        return SX_ERR_TRUNCATED;
    memcpy(buf, oob->addr, n);
    return SX_OK;
}

uint64_t sx_oob_id(const sx_oob_t *oob)
{
    return oob != NULL ? oob->self_id : SX_OOB_PEER_ANY;
}

int sx_oob_peer_set(sx_oob_t *oob, uint64_t peer, const char *addr)
{
    struct sockaddr_in sa;
    int rc = SX_OK;

    if (oob == NULL || peer == SX_OOB_PEER_ANY || peer == oob->self_id)
        return SX_ERR_INVALID_PARAM;
    if (oob_parse_addr(addr, &sa) != SX_OK) {
        sx_error(OOB, "peer %#" PRIx64 ": malformed address '%s' (want host:port)", peer,
                 addr != NULL ? addr : "(null)");
        return SX_ERR_INVALID_PARAM;
    }
    pthread_mutex_lock(&oob->lock);
    oob_peer_t *p = oob->closing ? NULL : sx_oob_peer_get(oob, peer);
    if (p == NULL) {
        rc = oob->closing ? SX_ERR_SHUTDOWN : SX_ERR_NO_MEMORY;
    } else {
        /* A new address means a new incarnation of the peer: later sends
         * go there, not over the connection we made to the old one (which
         * stays open until its queue drains or the peer closes it). */
        if (p->conn != NULL && p->conn->outgoing && p->has_addr && strcmp(p->addr, addr) != 0)
            p->conn = NULL;
        p->has_addr = true;
        p->sa = sa;
        snprintf(p->addr, sizeof(p->addr), "%s", addr);
    }
    pthread_mutex_unlock(&oob->lock);
    return rc;
}

/* ------------------------------------------------------------ send */

static int oob_iov_check(const struct iovec *iov, int iovcnt, size_t *total_p)
{
    size_t total = 0;

    if (iovcnt < 0 || iovcnt > IOV_MAX || (iovcnt > 0 && iov == NULL))
        return SX_ERR_INVALID_PARAM;
    for (int i = 0; i < iovcnt; i++) {
        if (iov[i].iov_len > 0 && iov[i].iov_base == NULL)
            return SX_ERR_INVALID_PARAM;
        if (iov[i].iov_len > SIZE_MAX - total)
            return SX_ERR_INVALID_PARAM;
        total += iov[i].iov_len;
    }
    *total_p = total;
    return SX_OK;
}

/* Builds a send: the frame with the payload copied in. */
static int oob_send_op_new(sx_oob_t *oob, uint64_t peer, uint32_t tag, const struct iovec *iov,
                           int iovcnt, sx_oob_cb_t cb, void *arg, oob_op_t **op_p)
{
    size_t total;

    if (oob == NULL || peer == SX_OOB_PEER_ANY || peer == oob->self_id || tag == SX_OOB_TAG_ANY ||
        tag == SX_OOB_TAG_HELLO)
        return SX_ERR_INVALID_PARAM;
    if (oob_iov_check(iov, iovcnt, &total) != SX_OK || total > SX_OOB_MSG_MAX)
        return SX_ERR_INVALID_PARAM;
    oob_op_t *op = calloc(1, sizeof(*op));
    uint8_t *frame = malloc(SX_OOB_HDR_LEN + total);
    if (op == NULL || frame == NULL) {
        free(op);
        free(frame);
        return SX_ERR_NO_MEMORY;
    }
    sx_oob_hdr_write(frame, tag, oob->self_id, (uint32_t)total);
    pthread_mutex_lock(&oob->lock);
    oob->copied_bytes += total;
    pthread_mutex_unlock(&oob->lock);
    size_t off = SX_OOB_HDR_LEN;
    for (int i = 0; i < iovcnt; i++) {
        if (iov[i].iov_len > 0)
            memcpy(frame + off, iov[i].iov_base, iov[i].iov_len);
        off += iov[i].iov_len;
    }
    op->item.kind = OOB_ITEM_OP;
    op->kind = OOB_OP_SEND;
    op->peer = peer;
    op->tag = tag;
    op->cb = cb;
    op->arg = arg;
    op->frame = frame;
    op->frame_len = off;
    *op_p = op;
    return SX_OK;
}

int sx_oob_send_nb(sx_oob_t *oob, uint64_t peer, uint32_t tag, const struct iovec *iov, int iovcnt,
                   sx_oob_cb_t cb, void *arg)
{
    oob_op_t *op;
    int rc = oob_send_op_new(oob, peer, tag, iov, iovcnt, cb, arg, &op);

    if (rc != SX_OK)
        return rc;
    pthread_mutex_lock(&oob->lock);
    rc = sx_oob_send_queue(oob, op);
    pthread_mutex_unlock(&oob->lock);
    if (rc != SX_OK)
        sx_oob_op_free(op);
    return rc;
}

int sx_oob_send_many_nb(sx_oob_t *oob, const uint64_t *peers, size_t npeers, uint32_t tag,
                        const void *data, size_t len, sx_oob_cb_t cb, void *arg, size_t *queued_p)
{
    size_t queued = 0;
    int rc = SX_OK;

    if (queued_p != NULL)
        *queued_p = 0;
    if (oob == NULL || peers == NULL || npeers == 0 || (data == NULL && len > 0) ||
        len > SX_OOB_MSG_MAX || tag == SX_OOB_TAG_ANY || tag == SX_OOB_TAG_HELLO)
        return SX_ERR_INVALID_PARAM;
    oob_shared_t *sh = malloc(sizeof(*sh) + len);
    if (sh == NULL)
        return SX_ERR_NO_MEMORY;
    atomic_init(&sh->refs, 1); /* this call's, until every send is queued */
    sh->len = len;
    if (len > 0)
        memcpy(sh->data, data, len);
    for (size_t i = 0; i < npeers; i++) {
        int one = SX_OK;
        oob_op_t *op = NULL;
        uint8_t *frame = NULL;
        if (peers[i] == SX_OOB_PEER_ANY || peers[i] == oob->self_id) {
            one = SX_ERR_INVALID_PARAM;
        } else if ((op = calloc(1, sizeof(*op))) == NULL ||
                   (frame = malloc(SX_OOB_HDR_LEN)) == NULL) {
            free(op);
            one = SX_ERR_NO_MEMORY;
        } else {
            sx_oob_hdr_write(frame, tag, oob->self_id, (uint32_t)len);
            op->item.kind = OOB_ITEM_OP;
            op->kind = OOB_OP_SEND;
            op->peer = peers[i];
            op->tag = tag;
            op->cb = cb;
            op->arg = arg;
            op->frame = frame;
            op->frame_len = SX_OOB_HDR_LEN + len;
            op->shared = sh;
            atomic_fetch_add_explicit(&sh->refs, 1, memory_order_relaxed);
            pthread_mutex_lock(&oob->lock);
            one = sx_oob_send_queue(oob, op);
            if (one == SX_OK && queued == 0)
                oob->copied_bytes += len;
            pthread_mutex_unlock(&oob->lock);
            if (one != SX_OK)
                sx_oob_op_free(op);
        }
        if (one == SX_OK)
            queued++;
        else if (rc == SX_OK)
            rc = one; /* the first failure; the other peers are still tried */
    }
    if (atomic_fetch_sub_explicit(&sh->refs, 1, memory_order_acq_rel) == 1)
        free(sh);
    if (queued_p != NULL)
        *queued_p = queued;
    return rc;
}

uint64_t sx_oob_copied_bytes(sx_oob_t *oob)
{
    pthread_mutex_lock(&oob->lock);
    uint64_t n = oob->copied_bytes;
    pthread_mutex_unlock(&oob->lock);
    return n;
}

/* Waits for a blocking call's operation; false when the deadline passed
 * first. Under the lock. */
static bool oob_wait(sx_oob_t *oob, oob_op_t *op, int timeout_ms)
{
    struct timespec deadline;

    if (timeout_ms >= 0)
        deadline = oob_deadline(timeout_ms);
    while (!op->done) {
        if (timeout_ms < 0) {
            pthread_cond_wait(&oob->cond, &oob->lock);
        } else if (pthread_cond_timedwait(&oob->cond, &oob->lock, &deadline) == ETIMEDOUT) {
            return op->done;
        }
    }
    return true;
}

int sx_oob_send(sx_oob_t *oob, uint64_t peer, uint32_t tag, const struct iovec *iov, int iovcnt,
                int timeout_ms)
{
    oob_op_t *op;
    int rc;

    if (oob != NULL && sx_oob_current == oob && timeout_ms != 0) {
        sx_error(OOB, "blocking sx_oob_send from a callback; use sx_oob_send_nb");
        return SX_ERR_INVALID_PARAM;
    }
    rc = oob_send_op_new(oob, peer, tag, iov, iovcnt, NULL, NULL, &op);
    if (rc != SX_OK)
        return rc;
    op->sync = true;
    pthread_mutex_lock(&oob->lock);
    rc = sx_oob_send_queue(oob, op);
    if (rc != SX_OK) {
        pthread_mutex_unlock(&oob->lock);
        sx_oob_op_free(op);
        return rc;
    }
    oob->waiters++;
    if (oob_wait(oob, op, timeout_ms)) {
        rc = op->status;
        sx_oob_op_free(op);
    } else {
        op->abandoned = true; /* still queued; its completion frees it */
        rc = SX_ERR_AGAIN;
    }
    oob->waiters--;
    pthread_cond_broadcast(&oob->cond);
    pthread_mutex_unlock(&oob->lock);
    return rc;
}

/* ------------------------------------------------------------ receive */

static int oob_recv_op_new(sx_oob_t *oob, uint64_t peer, uint32_t tag, const struct iovec *iov,
                           int iovcnt, unsigned flags, oob_op_t **op_p)
{
    size_t total;

    if (oob == NULL || (flags & ~(unsigned)(SX_OOB_PEEK | SX_OOB_TRUNC)) != 0 ||
        oob_iov_check(iov, iovcnt, &total) != SX_OK)
        return SX_ERR_INVALID_PARAM;
    oob_op_t *op = calloc(1, sizeof(*op) + (size_t)iovcnt * sizeof(struct iovec));
    if (op == NULL)
        return SX_ERR_NO_MEMORY;
    op->item.kind = OOB_ITEM_OP;
    op->kind = OOB_OP_RECV;
    op->peer = peer;
    op->tag = tag;
    op->flags = flags;
    op->iovcnt = iovcnt;
    if (iovcnt > 0)
        memcpy(op->iov, iov, (size_t)iovcnt * sizeof(struct iovec));
    *op_p = op;
    return SX_OK;
}

/* Looks for the oldest queued message the receive matches; if there is
 * one, fills the receive from it (consuming it unless PEEK) and returns
 * true. Under the lock. */
static bool oob_recv_match_queued(sx_oob_t *oob, oob_op_t *op)
{
    oob_item_t *prev = NULL;

    for (oob_item_t *it = oob->unexpected.head; it != NULL; prev = it, it = it->next) {
        oob_msg_t *m = (oob_msg_t *)it;
        if (!oob_match(op, m))
            continue;
        oob_recv_fill(op, m);
        op->peer = m->peer;
        op->tag = m->tag;
        if (!(op->flags & SX_OOB_PEEK)) {
            fifo_unlink(&oob->unexpected, prev, it);
            oob->unexpected_bytes -= oob_msg_size(m);
            free(m);
        }
        return true;
    }
    return false;
}

int sx_oob_recv_nb(sx_oob_t *oob, uint64_t peer, uint32_t tag, const struct iovec *iov, int iovcnt,
                   unsigned flags, sx_oob_cb_t cb, void *arg)
{
    oob_fifo_t batch = {0};
    oob_op_t *op;
    int rc = oob_recv_op_new(oob, peer, tag, iov, iovcnt, flags, &op);

    if (rc != SX_OK)
        return rc;
    op->cb = cb;
    op->arg = arg;
    pthread_mutex_lock(&oob->lock);
    if (oob->closing) {
        rc = SX_ERR_SHUTDOWN;
    } else if (oob_recv_match_queued(oob, op)) {
        sx_oob_op_complete(oob, op, op->status, op->len, op->peer, op->tag, &batch);
    } else {
        fifo_push(&oob->posted, &op->item);
    }
    pthread_mutex_unlock(&oob->lock);
    if (rc != SX_OK)
        sx_oob_op_free(op);
    /* The receive completed at once: its callback runs here. */
    sx_oob_batch_run(&batch);
    return rc;
}

int sx_oob_watch(sx_oob_t *oob, uint64_t peer, sx_oob_cb_t cb, void *arg)
{
    oob_op_t *op;

    if (peer == SX_OOB_PEER_ANY || cb == NULL)
        return SX_ERR_INVALID_PARAM;
    int rc = oob_recv_op_new(oob, peer, 0, NULL, 0, 0, &op);
    if (rc != SX_OK)
        return rc;
    op->kind = OOB_OP_WATCH;
    op->cb = cb;
    op->arg = arg;
    pthread_mutex_lock(&oob->lock);
    if (oob->closing) {
        rc = SX_ERR_SHUTDOWN;
    } else {
        fifo_push(&oob->posted, &op->item);
        if (!sx_oob_peer_connected(oob, peer)) {
            /* Completed by the progress thread, never here: a handler
             * may call this, and what the peer sent before it closed may
             * still wait in the batch being handed on. */
            oob->watch_check = true;
            sx_oob_wake(oob);
        }
    }
    pthread_mutex_unlock(&oob->lock);
    if (rc != SX_OK)
        sx_oob_op_free(op);
    return rc;
}

void sx_oob_watch_check(sx_oob_t *oob, oob_fifo_t *batch)
{
    oob_item_t *prev = NULL, *it = oob->posted.head;

    oob->watch_check = false;
    while (it != NULL) {
        oob_item_t *next = it->next;
        oob_op_t *op = (oob_op_t *)it;
        if (op->kind == OOB_OP_WATCH && !sx_oob_peer_connected(oob, op->peer)) {
            fifo_unlink(&oob->posted, prev, it);
            sx_oob_op_complete(oob, op, SX_ERR_IO, 0, op->peer, 0, batch);
        } else {
            prev = it;
        }
        it = next;
    }
}

int sx_oob_recv(sx_oob_t *oob, uint64_t *peer_p, uint32_t *tag_p, const struct iovec *iov,
                int iovcnt, unsigned flags, int timeout_ms, size_t *len_p)
{
    oob_op_t *op;
    int rc;

    if (oob == NULL || peer_p == NULL || tag_p == NULL)
        return SX_ERR_INVALID_PARAM;
    if (sx_oob_current == oob && timeout_ms != 0) {
        sx_error(OOB, "blocking sx_oob_recv from a callback; use sx_oob_recv_nb");
        return SX_ERR_INVALID_PARAM;
    }
    rc = oob_recv_op_new(oob, *peer_p, *tag_p, iov, iovcnt, flags, &op);
    if (rc != SX_OK)
        return rc;
    op->sync = true;
    pthread_mutex_lock(&oob->lock);
    if (oob->closing) {
        rc = SX_ERR_SHUTDOWN;
    } else if (oob_recv_match_queued(oob, op)) {
        rc = op->status;
    } else if (timeout_ms == 0) {
        rc = SX_ERR_AGAIN;
    } else {
        fifo_push(&oob->posted, &op->item);
        oob->waiters++;
        if (oob_wait(oob, op, timeout_ms)) {
            rc = op->status;
        } else {
            /* Not matched, so still posted: take it back. */
            oob_item_t *prev = NULL;
            for (oob_item_t *it = oob->posted.head; it != NULL; prev = it, it = it->next) {
                if (it == &op->item) {
                    fifo_unlink(&oob->posted, prev, it);
                    break;
                }
            }
            rc = SX_ERR_AGAIN;
        }
        oob->waiters--;
        pthread_cond_broadcast(&oob->cond);
    }
    pthread_mutex_unlock(&oob->lock);
    if (rc == SX_OK || rc == SX_ERR_TRUNCATED) {
        *peer_p = op->peer;
        *tag_p = op->tag;
        if (len_p != NULL)
            *len_p = op->len;
    }
    sx_oob_op_free(op);
    return rc;
}

/* ------------------------------------------------------------ handlers */

int sx_oob_handler_set(sx_oob_t *oob, uint32_t tag, sx_oob_handler_t handler, void *arg)
{
    int rc = SX_OK;

    if (oob == NULL || tag == SX_OOB_TAG_ANY || tag == SX_OOB_TAG_HELLO)
        return SX_ERR_INVALID_PARAM;
    pthread_mutex_lock(&oob->lock);
    oob_handler_t *h = oob_handler_find(oob, tag);
    if (oob->closing) {
        rc = SX_ERR_SHUTDOWN;
    } else if (handler == NULL) {
        if (h != NULL)
            *h = oob->handlers[--oob->nhandlers];
    } else if (h != NULL) {
        h->fn = handler;
        h->arg = arg;
    } else {
        if (oob->nhandlers == oob->handlers_cap) {
            size_t cap = oob->handlers_cap * 2 + 4;
            h = realloc(oob->handlers, cap * sizeof(*h));
            if (h != NULL) {
                oob->handlers = h;
                oob->handlers_cap = cap;
            }
        }
        if (oob->nhandlers < oob->handlers_cap)
            oob->handlers[oob->nhandlers++] =
                (oob_handler_t){.tag = tag, .fn = handler, .arg = arg};
        else
            rc = SX_ERR_NO_MEMORY;
    }
    if (rc == SX_OK && handler != NULL && oob->unexpected.head != NULL) {
        oob->redispatch = true;
        sx_oob_wake(oob);
    }
    /* A batch the progress thread is running may still call the handler
     * this replaced; wait for it, so that the old one is never called
     * after this returns (unless we are that thread). */
    if (rc == SX_OK && sx_oob_current != oob && oob->dispatching) {
        uint64_t seq = oob->dispatch_seq;
        oob->waiters++;
        while (oob->dispatching && oob->dispatch_seq == seq)
            pthread_cond_wait(&oob->cond, &oob->lock);
        oob->waiters--;
        pthread_cond_broadcast(&oob->cond);
    }
    pthread_mutex_unlock(&oob->lock);
    return rc;
}
