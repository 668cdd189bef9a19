/*
 * The out-of-band channel over TCP; oob.h has the contract and the frame
 * format.
 *
 * Structure. An endpoint owns a listener, an eventfd and an epoll set, and
 * one progress thread that does every socket operation after sx_oob_open:
 * accept, connect, read and write. Application threads only queue work
 * under the endpoint's mutex (arming EPOLLOUT or writing the eventfd), and
 * blocking calls wait on the endpoint's condition variable (CLOCK_MONOTONIC)
 * with their timeout. This is start-up code, so one mutex for everything
 * is enough; the sockets are nonblocking, so the progress thread holds it
 * only for short system calls, never across epoll_wait.
 *
 * Synchronization:
 *
 *   what                               who touches it           protection
 *   peers, conns, queues, handlers     any thread               oob->lock
 *   sockets (fd), rx/tx progress       progress thread*         oob->lock
 *   callbacks and handlers             run with no lock held    -
 *
 *   * and sx_oob_close once the thread has been joined.
 *
 * Callbacks and handlers never run under the lock: completions are
 * gathered in a batch (oob_fifo_t) while it is held and run after it is
 * released, in the order they happened, so a callback may call the _nb
 * functions again. An operation is in exactly one list at any time (a
 * connection's transmit queue, the posted receives, or a batch) and leaves
 * it when it completes, which is what makes every completion happen once.
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
 * queued sends completing with SX_ERR_PROTO. At most one message buffer
 * (SX_OOB_MSG_MAX bytes at most) is allocated per connection before its
 * payload has arrived.
 *
 * Matching (in the shape of Open MPI's mca_oob, MCA_OOB_PEEK and
 * MCA_OOB_TRUNC): an arriving message is offered to the posted receives in
 * posting order; a PEEK receive that matches completes with a copy and the
 * message goes on to the next; the first matching receive without PEEK
 * consumes it. A message no receive consumed goes to the handler of its
 * tag if there is one, else to the unexpected queue, where later receives
 * find it (oldest first). A handler set while messages of its tag wait in
 * that queue gets them, on the progress thread.
 *
 * Choices the contract leaves open: sending with tag SX_OOB_TAG_ANY or
 * SX_OOB_TAG_HELLO, to SX_OOB_PEER_ANY or to our own id is
 * SX_ERR_INVALID_PARAM; a send to a peer with neither an address nor a
 * connection fails at once with SX_ERR_PEER_UNREACHABLE (no callback); the
 * listener refuses the wildcard address, because sx_oob_address must name
 * an address peers can reach; blocking calls with a nonzero timeout from a
 * callback (the progress thread) fail with SX_ERR_INVALID_PARAM instead of
 * deadlocking.
 */
#include "bootstrap/oob.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <shardx.h>

#include "common/log.h"
#include "common/time.h"
#include "shard/wire.h"

#define OOB                    "oob" /* log subsystem */
#define OOB_CONNECT_TRIES      6
#define OOB_RETRY_FIRST_MS     25
#define OOB_CONNECT_TIMEOUT_MS 20000
#define OOB_EVENTS             64
#define OOB_READ_BUDGET        64 /* reads per readiness event, for fairness */
#define OOB_HDR_CRC_LEN        20
#define OOB_NAME_MAX           (SX_OOB_ADDR_MAX + 48)

/* ------------------------------------------------------------ structures */

/* The first member of operations and messages, so both can wait in one
 * batch in the order they completed. */
enum oob_item_kind { OOB_ITEM_OP, OOB_ITEM_MSG };

typedef struct oob_item {
    struct oob_item *next;
    uint8_t kind;
} oob_item_t;

typedef struct oob_fifo {
    oob_item_t *head, *tail;
} oob_fifo_t;

/* A received message: on the unexpected queue, or in a batch on its way to
 * a handler. */
typedef struct oob_msg {
    oob_item_t item;
    uint64_t peer;
    uint32_t tag;
    uint32_t len;
    sx_oob_handler_t handler; /* set when it goes to a handler */
    void *handler_arg;
    uint8_t data[];
} oob_msg_t;

enum oob_op_kind {
    OOB_OP_SEND,
    OOB_OP_RECV,
    OOB_OP_HELLO, /* a connection's first frame; completes silently */
};

typedef struct oob_op {
    oob_item_t item;
    uint8_t kind;
    bool sync;      /* a blocking call waits for it on oob->cond */
    bool done;      /* sync: it completed; the results below are valid */
    bool abandoned; /* sync send: the caller timed out; completion frees it */
    int status;     /* results */
    size_t len;
    uint64_t peer; /* destination, or the source to match (then the message's) */
    uint32_t tag;
    sx_oob_cb_t cb;
    void *arg;
    /* send: header and payload in one buffer */
    uint8_t *frame;
    size_t frame_len, sent;
    /* receive: a copy of the caller's iovec array */
    unsigned flags;
    int iovcnt;
    struct iovec iov[];
} oob_op_t;

enum oob_conn_state {
    CONN_WAIT,       /* no socket; connect at timer_ns */
    CONN_CONNECTING, /* connect() in progress; give up at timer_ns */
    CONN_OPEN,
};

typedef struct oob_conn {
    struct oob_conn *next;
    int fd;
    enum oob_conn_state state;
    bool outgoing;
    bool peer_known; /* outgoing: always; accepted: after HELLO */
    bool dead;       /* closed, waiting in oob->dead to be freed */
    uint64_t peer;
    char addr[SX_OOB_ADDR_MAX]; /* where we connect, or where it came from */
    struct sockaddr_in sa;      /* outgoing: where we connect */
    int tries;
    uint64_t timer_ns;
    uint32_t events; /* registered epoll events; 0: not registered */
    oob_fifo_t txq;  /* oob_op_t, HELLO first on an outgoing connection */
    uint8_t rx_hdr[SX_OOB_HDR_LEN];
    size_t rx_hdr_got;
    oob_msg_t *rx_msg; /* the payload being read */
    size_t rx_got;
} oob_conn_t;

/* What we know about a peer: where it listens, and the connection sends
 * to it use. */
typedef struct oob_peer {
    struct oob_peer *next;
    uint64_t id;
    bool has_addr;
    struct sockaddr_in sa;
    char addr[SX_OOB_ADDR_MAX];
    oob_conn_t *conn;
} oob_peer_t;

typedef struct oob_handler {
    uint32_t tag;
    sx_oob_handler_t fn;
    void *arg;
} oob_handler_t;

struct sx_oob {
    uint64_t self_id;              /* immutable */
    char addr[SX_OOB_ADDR_MAX];    /* immutable */
    int listen_fd, wake_fd, ep_fd; /* immutable until close */
    pthread_t thread;              /* written before the thread runs */
    pthread_mutex_t lock;          /* everything below */
    pthread_cond_t cond;           /* blocking calls, close, handler_set */
    bool closing;                  /* sx_oob_close has begun */
    bool dispatching;              /* the progress thread runs a batch */
    bool redispatch;               /* a handler was set: look at the queue */
    uint64_t dispatch_seq;         /* batches run so far */
    unsigned waiters;              /* threads inside blocking calls */
    oob_conn_t *conns;             /* live connections */
    oob_conn_t *dead;              /* closed, freed by the progress loop */
    oob_peer_t *peers;             /* address book */
    oob_fifo_t posted;             /* posted receives, in posting order */
    oob_fifo_t unexpected;         /* messages nobody took yet */
    oob_handler_t *handlers;       /* by tag */
    size_t nhandlers, handlers_cap;
};

/* The endpoint whose progress thread this is, if any. */
static _Thread_local sx_oob_t *oob_current;

/* ------------------------------------------------------------ helpers */

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const uint8_t *p)
{
    return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

static void oob_hdr_write(uint8_t *h, uint32_t tag, uint64_t src, uint32_t len)
{
    put32(h, SX_OOB_MAGIC);
    put32(h + 4, tag);
    put64(h + 8, src);
    put32(h + 16, len);
    put32(h + 20, sx_crc32c(0, h, OOB_HDR_CRC_LEN));
}

static void fifo_push(oob_fifo_t *q, oob_item_t *it)
{
    it->next = NULL;
    if (q->tail != NULL)
        q->tail->next = it;
    else
        q->head = it;
    q->tail = it;
}

static oob_item_t *fifo_pop(oob_fifo_t *q)
{
    oob_item_t *it = q->head;

    if (it != NULL) {
        q->head = it->next;
        if (q->head == NULL)
            q->tail = NULL;
        it->next = NULL;
    }
    return it;
}

/* Unlinks @p it, which follows @p prev (NULL: it is the head). */
static void fifo_unlink(oob_fifo_t *q, oob_item_t *prev, oob_item_t *it)
{
    if (prev != NULL)
        prev->next = it->next;
    else
        q->head = it->next;
    if (q->tail == it)
        q->tail = prev;
    it->next = NULL;
}

static void oob_wake(sx_oob_t *oob)
{
    uint64_t one = 1;
    ssize_t n;

    do
        n = write(oob->wake_fd, &one, sizeof(one));
    while (n < 0 && errno == EINTR);
    /* EAGAIN: the counter is saturated, so the thread is awake anyway. */
}

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

static void oob_format_addr(const struct sockaddr_in *sa, char *buf, size_t len)
{
    char ip[INET_ADDRSTRLEN];

    if (inet_ntop(AF_INET, &sa->sin_addr, ip, sizeof(ip)) == NULL)
        snprintf(ip, sizeof(ip), "?");
    snprintf(buf, len, "%s:%u", ip, (unsigned)ntohs(sa->sin_port));
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

static oob_peer_t *oob_peer_find(sx_oob_t *oob, uint64_t id)
{
    for (oob_peer_t *p = oob->peers; p != NULL; p = p->next) {
        if (p->id == id)
            return p;
    }
    return NULL;
}

static oob_peer_t *oob_peer_get(sx_oob_t *oob, uint64_t id)
{
    oob_peer_t *p = oob_peer_find(oob, id);

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

static void oob_op_free(oob_op_t *op)
{
    free(op->frame);
    free(op);
}

/* ------------------------------------------------------------ completion */

/*
 * Completes @p op (under the lock): a waiting blocking call is woken, an
 * abandoned one freed, and a nonblocking one goes to @p batch, whose
 * callbacks run once the lock is released.
 */
static void oob_op_complete(sx_oob_t *oob, oob_op_t *op, int status, size_t len, uint64_t peer,
                            uint32_t tag, oob_fifo_t *batch)
{
    op->status = status;
    op->len = len;
    op->peer = peer;
    op->tag = tag;
    if (op->kind == OOB_OP_HELLO) {
        oob_op_free(op);
    } else if (op->sync) {
        if (op->abandoned) {
            oob_op_free(op);
        } else {
            op->done = true;
            pthread_cond_broadcast(&oob->cond);
        }
    } else {
        fifo_push(batch, &op->item);
    }
}

/* Runs a batch's callbacks and handlers; without the lock. */
static void oob_batch_run(oob_fifo_t *batch)
{
    oob_item_t *it;

    while ((it = fifo_pop(batch)) != NULL) {
        if (it->kind == OOB_ITEM_OP) {
            oob_op_t *op = (oob_op_t *)it;
            if (op->cb != NULL)
                op->cb(op->arg, op->status, op->peer, op->tag, op->len);
            oob_op_free(op);
        } else {
            oob_msg_t *m = (oob_msg_t *)it;
            m->handler(m->handler_arg, m->peer, m->tag, m->data, m->len);
            free(m);
        }
    }
}

static bool oob_match(const oob_op_t *op, const oob_msg_t *m)
{
    return (op->peer == SX_OOB_PEER_ANY || op->peer == m->peer) &&
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
static void oob_deliver(sx_oob_t *oob, oob_msg_t *m, oob_fifo_t *batch)
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
        oob_op_complete(oob, op, op->status, op->len, m->peer, m->tag, batch);
        if (!(op->flags & SX_OOB_PEEK)) {
            free(m);
            return;
        }
        it = next;
    }
    oob_handler_t *h = oob_handler_find(oob, m->tag);
    if (h != NULL) {
        m->handler = h->fn;
        m->handler_arg = h->arg;
        fifo_push(batch, &m->item);
        return;
    }
    fifo_push(&oob->unexpected, &m->item);
}

/* Hands messages waiting in the unexpected queue to handlers set since
 * they arrived. Under the lock, on the progress thread. */
static void oob_redispatch(sx_oob_t *oob, oob_fifo_t *batch)
{
    oob_item_t *prev = NULL, *it = oob->unexpected.head;

    oob->redispatch = false;
    while (it != NULL) {
        oob_item_t *next = it->next;
        oob_msg_t *m = (oob_msg_t *)it;
        oob_handler_t *h = oob_handler_find(oob, m->tag);
        if (h != NULL) {
            fifo_unlink(&oob->unexpected, prev, it);
            m->handler = h->fn;
            m->handler_arg = h->arg;
            fifo_push(batch, &m->item);
        } else {
            prev = it;
        }
        it = next;
    }
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

/*
 * Logs why (at @p level, naming the peer), closes the connection and
 * completes its queued sends with @p status. The connection goes to
 * oob->dead, because epoll events already fetched may still point at it.
 */
__attribute__((format(printf, 6, 7))) static void oob_conn_fail(sx_oob_t *oob, oob_conn_t *c,
                                                                int status, oob_fifo_t *batch,
                                                                sx_log_level_t level,
                                                                const char *fmt, ...)
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
        oob_op_complete(oob, op, status, 0, op->peer, op->tag, batch);
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

    /* Sends to this peer move to another connection it has, if any (but
     * not to one made to an address it no longer has). */
    oob_peer_t *p = c->peer_known ? oob_peer_find(oob, c->peer) : NULL;
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

static void oob_reap_dead(sx_oob_t *oob)
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
        oob_conn_fail(oob, c, SX_ERR_IO, batch, SX_LOG_ERROR, "epoll_ctl: %s", strerror(-rc));
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
    oob_conn_fail(oob, c, SX_ERR_IO, batch, SX_LOG_ERROR, "connect to %s failed: %s (%d attempt%s)",
                  c->addr, strerror(err), c->tries, c->tries == 1 ? "" : "s");
}

static void oob_connect_start(sx_oob_t *oob, oob_conn_t *c, oob_fifo_t *batch)
{
    int fd, rc;

    c->tries++;
    fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        oob_conn_fail(oob, c, SX_ERR_IO, batch, SX_LOG_ERROR, "socket: %s", strerror(errno));
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
        oob_conn_fail(oob, c, SX_ERR_IO, batch, SX_LOG_ERROR, "epoll_ctl: %s", strerror(-rc));
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
    oob_hdr_write(frame, SX_OOB_TAG_HELLO, oob->self_id, 0);
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

static void oob_accept(sx_oob_t *oob)
{
    for (;;) {
        struct sockaddr_in sa;
        socklen_t sl = sizeof(sa);
        int fd = accept4(oob->listen_fd, (struct sockaddr *)&sa, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                sx_warn(OOB, "accept on %s: %s", oob->addr, strerror(errno));
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
        oob_format_addr(&sa, c->addr, sizeof(c->addr));
        int rc = oob_conn_arm(oob, c);
        if (rc != 0) {
            sx_error(OOB, "epoll_ctl for the connection from %s: %s", c->addr, strerror(-rc));
            close(fd);
            free(c);
            continue;
        }
        c->next = oob->conns;
        oob->conns = c;
        sx_debug(OOB, "accepted a connection from %s", c->addr);
    }
}

/* Binds an accepted connection to the id its HELLO names. */
static bool oob_hello(sx_oob_t *oob, oob_conn_t *c, uint64_t src, oob_fifo_t *batch)
{
    if (src == SX_OOB_PEER_ANY || src == oob->self_id) {
        oob_conn_fail(oob, c, SX_ERR_PROTO, batch, SX_LOG_ERROR,
                      "HELLO names an invalid id %#" PRIx64, src);
        return false;
    }
    oob_peer_t *p = oob_peer_get(oob, src);
    if (p == NULL) {
        oob_conn_fail(oob, c, SX_ERR_IO, batch, SX_LOG_ERROR, "no memory for peer %#" PRIx64, src);
        return false;
    }
    c->peer_known = true;
    c->peer = src;
    if (p->conn == NULL)
        p->conn = c;
    sx_debug(OOB, "connection from %s is peer %#" PRIx64, c->addr, src);
    return true;
}

/*
 * Checks the header just read, before anything else looks at it. Returns
 * false if the connection was closed.
 */
static bool oob_frame_header(sx_oob_t *oob, oob_conn_t *c, oob_fifo_t *batch)
{
    const uint8_t *h = c->rx_hdr;
    uint32_t magic = get32(h), tag = get32(h + 4), len = get32(h + 16), crc = get32(h + 20);
    uint64_t src = get64(h + 8);

    if (magic != SX_OOB_MAGIC) {
        oob_conn_fail(oob, c, SX_ERR_PROTO, batch, SX_LOG_ERROR, "bad frame magic %#010x", magic);
        return false;
    }
    if (sx_crc32c(0, h, OOB_HDR_CRC_LEN) != crc) {
        oob_conn_fail(oob, c, SX_ERR_PROTO, batch, SX_LOG_ERROR, "bad frame header checksum");
        return false;
    }
    if (len > SX_OOB_MSG_MAX) {
        oob_conn_fail(oob, c, SX_ERR_PROTO, batch, SX_LOG_ERROR,
                      "frame length %" PRIu32 " over the limit of %u bytes", len, SX_OOB_MSG_MAX);
        return false;
    }
    if (!c->peer_known) {
        if (tag != SX_OOB_TAG_HELLO) {
            oob_conn_fail(oob, c, SX_ERR_PROTO, batch, SX_LOG_ERROR,
                          "first frame has tag %#x, not HELLO", tag);
            return false;
        }
        if (len != 0) {
            oob_conn_fail(oob, c, SX_ERR_PROTO, batch, SX_LOG_ERROR,
                          "HELLO with %" PRIu32 " bytes of payload", len);
            return false;
        }
        c->rx_hdr_got = 0;
        return oob_hello(oob, c, src, batch);
    }
    if (tag == SX_OOB_TAG_HELLO) {
        oob_conn_fail(oob, c, SX_ERR_PROTO, batch, SX_LOG_ERROR, "unexpected HELLO frame");
        return false;
    }
    if (src != c->peer) {
        oob_conn_fail(oob, c, SX_ERR_PROTO, batch, SX_LOG_ERROR, "frame claims source id %#" PRIx64,
                      src);
        return false;
    }
    oob_msg_t *m = malloc(sizeof(*m) + len);
    if (m == NULL) {
        oob_conn_fail(oob, c, SX_ERR_IO, batch, SX_LOG_ERROR,
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
        oob_deliver(oob, m, batch);
    } else {
        c->rx_msg = m;
        c->rx_got = 0;
    }
    return true;
}

/* Reads what the socket has, up to a budget. Returns false if the
 * connection was closed. */
static bool oob_conn_read(sx_oob_t *oob, oob_conn_t *c, oob_fifo_t *batch)
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
            oob_conn_fail(oob, c, SX_ERR_IO, batch, SX_LOG_ERROR, "receive: %s", strerror(errno));
            return false;
        }
        if (n == 0) {
            if (c->rx_msg != NULL)
                oob_conn_fail(oob, c, SX_ERR_IO, batch, SX_LOG_ERROR,
                              "connection closed inside a frame (%zu of %" PRIu32 " payload bytes)",
                              c->rx_got, c->rx_msg->len);
            else if (c->rx_hdr_got > 0)
                oob_conn_fail(oob, c, SX_ERR_IO, batch, SX_LOG_ERROR,
                              "connection closed inside a frame (%zu of %d header bytes)",
                              c->rx_hdr_got, SX_OOB_HDR_LEN);
            else if (c->txq.head != NULL)
                oob_conn_fail(oob, c, SX_ERR_IO, batch, SX_LOG_ERROR,
                              "connection closed by the peer with sends queued");
            else
                oob_conn_fail(oob, c, SX_ERR_IO, batch, SX_LOG_DEBUG, "closed by the peer");
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
                c->rx_msg = NULL;
                oob_deliver(oob, m, batch);
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
        while (op->sent < op->frame_len) {
            ssize_t n = send(c->fd, op->frame + op->sent, op->frame_len - op->sent, MSG_NOSIGNAL);
            if (n < 0) {
                if (errno == EINTR)
                    continue;
                if (errno == EAGAIN || errno == EWOULDBLOCK)
                    goto out;
                oob_conn_fail(oob, c, SX_ERR_IO, batch, SX_LOG_ERROR, "send: %s", strerror(errno));
                return false;
            }
            op->sent += (size_t)n;
        }
        fifo_pop(&c->txq);
        oob_op_complete(oob, op, SX_OK, op->frame_len - SX_OOB_HDR_LEN, op->peer, op->tag, batch);
    }
out:;
    int rc = oob_conn_arm(oob, c);
    if (rc != 0) {
        oob_conn_fail(oob, c, SX_ERR_IO, batch, SX_LOG_ERROR, "epoll_ctl: %s", strerror(-rc));
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
    if ((events & (EPOLLIN | EPOLLERR | EPOLLHUP)) && !oob_conn_read(oob, c, batch))
        return;
    if (events & EPOLLOUT)
        oob_conn_write(oob, c, batch);
}

/* Starts due connection attempts and gives up on slow ones; returns the
 * epoll_wait timeout until the next timer (-1: none). */
static int oob_timers(sx_oob_t *oob, oob_fifo_t *batch)
{
    uint64_t now = sx_time_ns(), next = UINT64_MAX;
    oob_conn_t *c = oob->conns;

    while (c != NULL) {
        oob_conn_t *following = c->next; /* c may move to oob->dead */
        if (c->state == CONN_WAIT && sx_u64_before_eq(c->timer_ns, now))
            oob_connect_start(oob, c, batch);
        else if (c->state == CONN_CONNECTING && sx_u64_before_eq(c->timer_ns, now))
            oob_connect_failed(oob, c, ETIMEDOUT, batch);
        c = following;
    }
    now = sx_time_ns();
    for (c = oob->conns; c != NULL; c = c->next) {
        if ((c->state == CONN_WAIT || c->state == CONN_CONNECTING) && c->timer_ns < next)
            next = c->timer_ns;
    }
    if (next == UINT64_MAX)
        return -1;
    if (sx_u64_before_eq(next, now))
        return 0;
    uint64_t ms = (next - now + 999999u) / 1000000u;
    return ms > INT_MAX ? INT_MAX : (int)ms;
}

/* ------------------------------------------------------------ progress thread */

static void *oob_progress(void *arg)
{
    sx_oob_t *oob = arg;
    struct epoll_event ev[OOB_EVENTS];
    oob_fifo_t batch = {0};

    oob_current = oob;
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
        for (int i = 0; i < n; i++) {
            if (ev[i].data.ptr == &oob->listen_fd) {
                oob_accept(oob);
            } else if (ev[i].data.ptr == &oob->wake_fd) {
                uint64_t v;
                while (read(oob->wake_fd, &v, sizeof(v)) < 0 && errno == EINTR)
                    ;
            } else {
                oob_conn_event(oob, ev[i].data.ptr, ev[i].events, &batch);
            }
        }
        if (oob->redispatch)
            oob_redispatch(oob, &batch);
        oob_reap_dead(oob);
        if (batch.head != NULL) {
            oob->dispatching = true;
            pthread_mutex_unlock(&oob->lock);
            oob_batch_run(&batch);
            pthread_mutex_lock(&oob->lock);
            oob->dispatching = false;
            oob->dispatch_seq++;
            pthread_cond_broadcast(&oob->cond);
        }
    }
    pthread_mutex_unlock(&oob->lock);
    /* A batch gathered when closing began still has to run. */
    oob_batch_run(&batch);
    return NULL;
}

/* ------------------------------------------------------------ open, close */

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
        oob_format_addr(&sa, addr, sizeof(addr));
        sx_error(OOB, "cannot listen on %s: %s", addr, strerror(err));
        rc = SX_ERR_IO;
        goto fail;
    }
    oob_format_addr(&sa, oob->addr, sizeof(oob->addr));

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
    rc = pthread_create(&oob->thread, NULL, oob_progress, oob);
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
    if (oob_current == oob) {
        sx_error(OOB, "sx_oob_close called from a callback; the endpoint stays open");
        return;
    }
    pthread_mutex_lock(&oob->lock);
    oob->closing = true;
    pthread_mutex_unlock(&oob->lock);
    oob_wake(oob);
    pthread_join(oob->thread, NULL);

    /* Only callers still inside blocking calls share the endpoint now. */
    pthread_mutex_lock(&oob->lock);
    while (oob->conns != NULL)
        oob_conn_fail(oob, oob->conns, SX_ERR_SHUTDOWN, &batch, SX_LOG_DEBUG,
                      "the endpoint closes");
    oob_reap_dead(oob);
    while ((it = fifo_pop(&oob->posted)) != NULL) {
        oob_op_t *op = (oob_op_t *)it;
        oob_op_complete(oob, op, SX_ERR_SHUTDOWN, 0, op->peer, op->tag, &batch);
    }
    while ((it = fifo_pop(&oob->unexpected)) != NULL)
        free(it);
    while (oob->waiters > 0)
        pthread_cond_wait(&oob->cond, &oob->lock);
    pthread_mutex_unlock(&oob->lock);
    oob_batch_run(&batch);

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
    oob_peer_t *p = oob->closing ? NULL : oob_peer_get(oob, peer);
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
    oob_hdr_write(frame, tag, oob->self_id, (uint32_t)total);
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

/* Queues a send on its peer's connection, making one if needed. Under the
 * lock. */
static int oob_send_queue(sx_oob_t *oob, oob_op_t *op)
{
    if (oob->closing)
        return SX_ERR_SHUTDOWN;
    oob_peer_t *p = oob_peer_find(oob, op->peer);
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
        oob_wake(oob);
        return SX_OK;
    }
    fifo_push(&c->txq, &op->item);
    if (c->state == CONN_OPEN) {
        int rc = oob_conn_arm(oob, c);
        if (rc != 0) {
            /* The progress thread notices the broken socket on its own
             * only if it reads; make it look. */
            sx_warn(OOB, "epoll_ctl for peer %#" PRIx64 ": %s", op->peer, strerror(-rc));
            oob_wake(oob);
        }
    }
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
    rc = oob_send_queue(oob, op);
    pthread_mutex_unlock(&oob->lock);
    if (rc != SX_OK)
        oob_op_free(op);
    return rc;
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

    if (oob != NULL && oob_current == oob && timeout_ms != 0) {
        sx_error(OOB, "blocking sx_oob_send from a callback; use sx_oob_send_nb");
        return SX_ERR_INVALID_PARAM;
    }
    rc = oob_send_op_new(oob, peer, tag, iov, iovcnt, NULL, NULL, &op);
    if (rc != SX_OK)
        return rc;
    op->sync = true;
    pthread_mutex_lock(&oob->lock);
    rc = oob_send_queue(oob, op);
    if (rc != SX_OK) {
        pthread_mutex_unlock(&oob->lock);
        oob_op_free(op);
        return rc;
    }
    oob->waiters++;
    if (oob_wait(oob, op, timeout_ms)) {
        rc = op->status;
        oob_op_free(op);
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
        oob_op_complete(oob, op, op->status, op->len, op->peer, op->tag, &batch);
    } else {
        fifo_push(&oob->posted, &op->item);
    }
    pthread_mutex_unlock(&oob->lock);
    if (rc != SX_OK)
        oob_op_free(op);
    /* The receive completed at once: its callback runs here. */
    oob_batch_run(&batch);
    return rc;
}

int sx_oob_recv(sx_oob_t *oob, uint64_t *peer_p, uint32_t *tag_p, const struct iovec *iov,
                int iovcnt, unsigned flags, int timeout_ms, size_t *len_p)
{
    oob_op_t *op;
    int rc;

    if (oob == NULL || peer_p == NULL || tag_p == NULL)
        return SX_ERR_INVALID_PARAM;
    if (oob_current == oob && timeout_ms != 0) {
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
    oob_op_free(op);
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
        oob_wake(oob);
    }
    /* A batch the progress thread is running may still call the handler
     * this replaced; wait for it, so that the old one is never called
     * after this returns (unless we are that thread). */
    if (rc == SX_OK && oob_current != oob && oob->dispatching) {
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
