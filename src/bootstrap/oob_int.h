/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Internals of the OOB channel, shared by oob.c (the API, matching and
 * completions) and oob_conn.c (connections, frames and the progress
 * thread). Nothing outside src/bootstrap/oob*.c includes this.
 *
 * Synchronization:
 *
 *   what                                | who touches it        | protection
 *   ------------------------------------+-----------------------+-----------
 *   self_id, addr, fds, thread          | any thread            | immutable
 *   peers, conns, queues, handlers      | any thread            | oob->lock
 *   sockets and rx/tx progress (conns)  | progress thread (1)   | oob->lock
 *   callbacks and handlers              | run with no lock held | -
 *
 *   (1) and sx_oob_close once the thread has been joined.
 *
 * Callbacks and handlers never run under the lock: completions are
 * gathered in a batch (oob_fifo_t) while it is held and run after it is
 * released, in the order they happened, so a callback may call the _nb
 * functions again. An operation is in exactly one list at any time (a
 * connection's transmit queue, the posted receives, or a batch) and leaves
 * it when it completes, which is what makes every completion happen once.
 */
#ifndef SX_BOOTSTRAP_OOB_INT_H
#define SX_BOOTSTRAP_OOB_INT_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "bootstrap/oob.h"
#include "common/log.h"

#define OOB                    "oob" /* log subsystem */
#define OOB_CONNECT_TRIES      6
#define OOB_RETRY_FIRST_MS     25
#define OOB_CONNECT_TIMEOUT_MS 20000
#define OOB_EVENTS             64
#define OOB_READ_BUDGET        64 /* reads per readiness event, for fairness */
#define OOB_ACCEPT_PAUSE_MS    100
#define OOB_HDR_CRC_LEN        20
#define OOB_NAME_MAX           (SX_OOB_ADDR_MAX + 48)
/* An OOB listener carries no authentication (DESIGN.md: the job's
 * launcher and its network are trusted), but what anyone who reaches it
 * can make it keep is bounded: accepted connections that have not said who
 * they are (HELLO, sent at once by every endpoint) at most OOB_ANON_MAX,
 * the oldest closed for a new one once it has had OOB_ANON_GRACE_MS (else
 * the listener waits), and each for OOB_HELLO_TIMEOUT_MS; and
 * messages that no receive or handler took, at most OOB_UNEXPECTED_MAX
 * bytes: the connection that brings more is closed (logged). Four
 * maximal messages fit; nothing of shardx's leaves one there for long
 * (the modex posts its receives before it asks, the oob CPC has a
 * handler). */
#define OOB_ANON_MAX         64
#define OOB_HELLO_TIMEOUT_MS 30000
#define OOB_ANON_GRACE_MS    3000
#define OOB_UNEXPECTED_MAX   ((size_t)4 * SX_OOB_MSG_MAX)

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

/* What a queued message takes: its struct and payload (OOB_UNEXPECTED_MAX
 * counts both, so empty messages are bounded too). */
static inline size_t oob_msg_size(const oob_msg_t *m)
{
    return sizeof(*m) + m->len;
}

enum oob_op_kind {
    OOB_OP_SEND,
    OOB_OP_RECV,
    OOB_OP_HELLO, /* a connection's first frame; completes silently */
    OOB_OP_WATCH, /* sx_oob_watch: posted, matches no message */
};

/* A payload several sends share (sx_oob_send_many_nb): copied once, freed
 * with its last send. */
typedef struct oob_shared {
    atomic_uint refs;
    size_t len;
    uint8_t data[];
} oob_shared_t;

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
    /* send: header and payload in one buffer, or the header alone and the
     * payload in `shared`; frame_len counts both */
    uint8_t *frame;
    size_t frame_len, sent;
    oob_shared_t *shared;
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
    uint64_t timer_ns; /* connect, retry; accepted: the HELLO deadline */
    uint32_t events;   /* registered epoll events; 0: not registered */
    oob_fifo_t txq;    /* oob_op_t, HELLO first on an outgoing connection */
    uint8_t rx_hdr[SX_OOB_HDR_LEN];
    size_t rx_hdr_got;
    oob_msg_t *rx_msg; /* the payload being read */
    size_t rx_got;
} oob_conn_t;

struct sx_oob;
/** Watches the listener again (after a pause for descriptors or for
 *  connections without HELLO). Under the lock. */
void sx_oob_listen_resume(struct sx_oob *oob);
/** One connection without HELLO fewer: it spoke or closed. Under the
 *  lock. */
void sx_oob_anon_gone(struct sx_oob *oob);

/* Whether @p c was accepted and has not said who it is (OOB_ANON_MAX). */
static inline bool oob_conn_anon(const oob_conn_t *c)
{
    return !c->outgoing && !c->peer_known;
}

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
    bool watch_check;              /* a watch was posted for a peer with no connection */
    uint64_t dispatch_seq;         /* batches run so far */
    unsigned waiters;              /* threads inside blocking calls */
    uint64_t accept_resume_ns;     /* 0, or when to watch the listener again */
    oob_conn_t *conns;             /* live connections */
    oob_conn_t *dead;              /* closed, freed by the progress loop */
    oob_peer_t *peers;             /* address book */
    oob_fifo_t posted;             /* posted receives, in posting order */
    oob_fifo_t unexpected;         /* messages nobody took yet */
    size_t unexpected_bytes;       /* their memory (OOB_UNEXPECTED_MAX, oob_msg_size) */
    unsigned anon;                 /* accepted connections without HELLO (OOB_ANON_MAX) */
    uint64_t anon_closed;          /* of them, closed for room */
    uint64_t copied_bytes;         /* payload bytes sends copied (tests) */
    oob_handler_t *handlers;       /* by tag */
    size_t nhandlers, handlers_cap;
};

/* The endpoint whose progress thread this is, if any. */
extern _Thread_local sx_oob_t *sx_oob_current;

static inline void fifo_push(oob_fifo_t *q, oob_item_t *it)
{
    it->next = NULL;
    if (q->tail != NULL)
        q->tail->next = it;
    else
        q->head = it;
    q->tail = it;
}

static inline oob_item_t *fifo_pop(oob_fifo_t *q)
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
static inline void fifo_unlink(oob_fifo_t *q, oob_item_t *prev, oob_item_t *it)
{
    if (prev != NULL)
        prev->next = it->next;
    else
        q->head = it->next;
    if (q->tail == it)
        q->tail = prev;
    it->next = NULL;
}

/* ------------------------------------------------------------ oob.c */

/** Frees an operation and its frame. */
void sx_oob_op_free(oob_op_t *op);

/** Completes @p op (under the lock): wakes its blocking caller, frees it
 *  if that caller gave up, or adds it to @p batch for its callback. */
void sx_oob_op_complete(sx_oob_t *oob, oob_op_t *op, int status, size_t len, uint64_t peer,
                        uint32_t tag, oob_fifo_t *batch);

/** Runs the callbacks and handlers of @p batch; without the lock. */
void sx_oob_batch_run(oob_fifo_t *batch);

/** A complete message from the wire: to the posted receives, a handler or
 *  the unexpected queue. Under the lock; takes @p m. False, with @p m
 *  freed, when the unexpected queue has no room for it
 *  (OOB_UNEXPECTED_MAX): the caller closes the connection it came on. */
bool sx_oob_deliver(sx_oob_t *oob, oob_msg_t *m, oob_fifo_t *batch);

/** Hands queued messages to handlers set since they arrived. Under the
 *  lock, on the progress thread. */
void sx_oob_redispatch(sx_oob_t *oob, oob_fifo_t *batch);

/** Completes the watches (sx_oob_watch) of peers with no connection.
 *  Under the lock, on the progress thread, before it reads anything more:
 *  what came before such a peer's connection closed has been handed on. */
void sx_oob_watch_check(sx_oob_t *oob, oob_fifo_t *batch);

oob_peer_t *sx_oob_peer_find(sx_oob_t *oob, uint64_t id);

/** Finds or adds (NULL: no memory) the entry for @p id. Under the lock. */
oob_peer_t *sx_oob_peer_get(sx_oob_t *oob, uint64_t id);

/** "a.b.c.d:port". */
void sx_oob_format_addr(const struct sockaddr_in *sa, char *buf, size_t len);

/* ------------------------------------------------------------ oob_conn.c */

/** Writes a frame header with its checksum. */
void sx_oob_hdr_write(uint8_t *h, uint32_t tag, uint64_t src, uint32_t len);

/** Reads what @p c's socket has (at most OOB_READ_BUDGET reads), checking
 *  each frame header and delivering each complete message into @p batch.
 *  Returns false if the connection failed and was closed (it is then on
 *  oob->dead). Under the lock; the progress thread's, and
 *  fuzz/fuzz_oob.c's, which feeds it bytes from a socketpair. */
bool sx_oob_conn_read(sx_oob_t *oob, oob_conn_t *c, oob_fifo_t *batch);

/** Whether a connection to endpoint @p peer (its id known) is open or
 *  being made. Under the lock. */
bool sx_oob_peer_connected(const sx_oob_t *oob, uint64_t peer);

/** Wakes the progress thread (new connection, handler, close). */
void sx_oob_wake(sx_oob_t *oob);

/** The progress thread (pthread_create's start routine). */
void *sx_oob_progress(void *arg);

/** Queues a send on its peer's connection, making one if needed; an error
 *  status if it cannot be queued (then the caller still owns @p op). Under
 *  the lock. */
int sx_oob_send_queue(sx_oob_t *oob, oob_op_t *op);

/** Logs why at @p level, closes the connection and completes its queued
 *  sends with @p status. Under the lock. */
void sx_oob_conn_fail(sx_oob_t *oob, oob_conn_t *c, int status, oob_fifo_t *batch,
                      sx_log_level_t level, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/** Frees the connections closed since the last call. Under the lock. */
void sx_oob_reap_dead(sx_oob_t *oob);

#endif /* SX_BOOTSTRAP_OOB_INT_H */
