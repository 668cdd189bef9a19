/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * rdmacm: the connection manager resolves the path to a peer's verbs queue
 * pair (rdmacm.h says why and what goes on the wire), then the exchange of
 * shard/conn.h runs over that path as the handshake runs it: windows, initial
 * sequence numbers and datagram sizes are negotiated and the path probed.
 * Open MPI's openib `rdma_cm` CPC has the same split between what the
 * connection manager finds and what the BTL then sets up
 * (../shared/seeds/openib_cpc_connect.h.txt).
 *
 * Offered only when the engine runs the verbs transport and librdmacm
 * works here (an RDMA device, the rdma_ucm module): each engine listens on
 * one rdma_cm identifier of RDMA_PS_UDP, bound to the IPv4 address of its
 * RDMA device, and its card blob is that listener's address.
 *
 * One thread per engine talks to librdmacm: it waits (epoll) on the event
 * channel and on an eventfd that shards ring when they hand it a request,
 * so no shard ever blocks on the connection manager. A channel's request
 * names the channel by the peer's epoch, our shard, the peer's shard and a
 * request id, never by pointer; the answer goes back to the channel's
 * shard through its inbox (env->submit), as the oob component's
 * messages do, and the shard looks the channel up again and checks the id,
 * so a channel destroyed or recreated meanwhile is never touched. Every
 * request ends exactly once: answered through the inbox, or dropped by the
 * thread when the engine closes (its channels then go with the engine).
 *
 * An engine whose shards use several devices (NIC locality) listens on
 * one of them; a path the connection manager finds runs between the two
 * listeners' ports, so a channel whose own shard, or whose peer shard, is
 * on another port keeps the card's address (the answer's ELSEWHERE flag
 * says so for the peer's side). One listener per port would lift this.
 *
 * Both directions resolve: a channel that only answers (its peer
 * connected first) starts a resolution of its own at its first answer,
 * since its ACKs would otherwise go to the card's address, which is what
 * may not route. Until then its answers take the card's address, and the
 * peer's retries cover what that loses.
 *
 * Synchronization:
 *
 *   what                      | written                  | read
 *   --------------------------+--------------------------+-----------------
 *   qps, blob, local, listen  | init only                | any thread
 *   queue, stop, broken       | under lock               | under lock
 *   active, cm_id, step       | the rdmacm thread only   | that thread
 *   chan->resolve, resolve_id | the channel's shard token holder
 *   next_id                   | any shard (relaxed RMW)  |
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <shardx.h>

#include "common/log.h"
#include "common/time.h"
#include "cpc/cpc.h"
#include "cpc/rdmacm.h"
#include "shard/chan.h"
#include "shard/conn.h"
#include "shard/peer.h"
#include "shard/shard.h"
#include "transports/transport.h"
#include "transports/verbs_addr.h"

#define RDMACM_BACKLOG  128 /* SIDR requests the kernel queues for the listener */
#define RDMACM_ADDR_STR 64

/* ------------------------------------------------------------ state */

/* What the listener answers for one of our shards: its queue pair, from
 * the shard interface's own card address. */
typedef struct rdmacm_qp {
    uint32_t qpn;
    uint32_t qkey;
    uint8_t port;
    uint8_t gid[16];
    bool elsewhere; /* behind another port than the listener's */
} rdmacm_qp_t;

/* What a request waits for. */
typedef enum rdmacm_step {
    RDMACM_QUEUED = 0,  /* the thread has not started it */
    RDMACM_ADDR = 1,    /* rdma_resolve_addr */
    RDMACM_ROUTE = 2,   /* rdma_resolve_route */
    RDMACM_CONNECT = 3, /* rdma_connect: the SIDR REQ is out */
} rdmacm_step_t;

static const char *const rdmacm_step_text[] = {
    "waiting to ask",
    "resolving the address of",
    "resolving the route to",
    "waiting for the answer of",
};

typedef struct rdmacm_req {
    sx_inbox_req_t req; /* the answer's delegation to the channel's shard */
    struct rdmacm_req *prev, *next;
    const sx_cpc_env_t *env;
    uint64_t peer_epoch;
    char peer_name[SX_PEER_NAME_MAX]; /* for log lines: the peer may be gone by then */
    unsigned shard;                   /* ours: where the answer goes */
    unsigned lane;                    /* the peer's: what its listener is asked for */
    uint32_t id;                      /* the channel's resolve_id */
    uint64_t deadline_ns;
    struct sockaddr_storage dst; /* the peer's listener */
    char dst_str[RDMACM_ADDR_STR];
    struct rdma_cm_id *cm_id; /* the thread's identifier for it */
    uint8_t step;             /* rdmacm_step_t */
    /* The answer: SX_OK with addr (addr_len 0: keep the card's address,
     * why says why), or the status the channel fails with and why. */
    int status;
    size_t addr_len;
    uint8_t addr[SX_VERBS_ADDR_LEN];
    char why[512];
} rdmacm_req_t;

typedef struct rdmacm_state {
    const sx_cpc_env_t *env;
    unsigned nshards;
    rdmacm_qp_t *qps; /* [nshards] */
    struct rdma_event_channel *ch;
    struct rdma_cm_id *listen;
    struct sockaddr_storage local; /* the listener's address */
    uint8_t local_gid[16];         /* the GID of its port */
    char local_str[RDMACM_ADDR_STR];
    uint8_t blob[SX_RDMACM_BLOB_V6_LEN];
    uint8_t blob_len;
    int epfd, evfd;
    pthread_t thread;
    bool thread_started;
    bool lock_init;
    pthread_mutex_t lock;
    rdmacm_req_t *queue, *queue_tail; /* handed over, not started */
    bool stop;                        /* the engine is closing */
    bool broken;                      /* the thread died: requests fail at once */
    atomic_uint next_id;
    rdmacm_req_t *active; /* started, waiting for the connection manager */
} rdmacm_state_t;

static void rdmacm_answer_run(void *owner, sx_inbox_req_t *req);

static uint64_t rdmacm_now(void)
{
    return sx_time_ns();
}

/* ------------------------------------------------------------ the thread */

static void rdmacm_active_add(rdmacm_state_t *st, rdmacm_req_t *r)
{
    r->prev = NULL;
    r->next = st->active;
    if (st->active != NULL)
        st->active->prev = r;
    st->active = r;
}

static void rdmacm_active_del(rdmacm_state_t *st, rdmacm_req_t *r)
{
    if (r->prev != NULL)
        r->prev->next = r->next;
    else if (st->active == r)
        st->active = r->next;
    if (r->next != NULL)
        r->next->prev = r->prev;
    r->prev = r->next = NULL;
}

/* Ends a request: forgets its identifier and hands the answer to the
 * channel's shard. Every event of the identifier has been acknowledged
 * (rdma_destroy_id would wait for them otherwise). */
static void rdmacm_finish(rdmacm_state_t *st, rdmacm_req_t *r)
{
    rdmacm_active_del(st, r);
    if (r->cm_id != NULL) {
        rdma_destroy_id(r->cm_id);
        r->cm_id = NULL;
    }
    r->req.run = rdmacm_answer_run;
    st->env->submit(st->env->submit_arg, r->shard, &r->req);
}

/* Ends a request with SX_ERR_PEER_UNREACHABLE and the reason, prefixed
 * with what was being done and to whom. */
static void rdmacm_fail(rdmacm_state_t *st, rdmacm_req_t *r, const char *fmt, ...)
{
    char detail[256];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    snprintf(r->why, sizeof(r->why),
             "rdmacm: no path to %s shard %u: %s, while %s its listener at %s", r->peer_name,
             r->lane, detail, rdmacm_step_text[r->step], r->dst_str);
    r->status = SX_ERR_PEER_UNREACHABLE;
    rdmacm_finish(st, r);
}

/* Milliseconds left before @p r's deadline, for librdmacm's own timeouts;
 * 0 when it has passed. */
static int rdmacm_ms_left(const rdmacm_req_t *r)
{
    uint64_t now = rdmacm_now();
    if (now >= r->deadline_ns)
        return 0;
    uint64_t ms = (r->deadline_ns - now + 999999) / 1000000;
    return ms > INT_MAX ? INT_MAX : (int)ms;
}

static void rdmacm_begin(rdmacm_state_t *st, rdmacm_req_t *r)
{
    struct sockaddr_storage src = st->local;

    rdmacm_active_add(st, r);
    int ms = rdmacm_ms_left(r);
    if (ms == 0) {
        rdmacm_fail(st, r, "the connect timeout (SX_CONNECT_TIMEOUT_MS) passed first");
        return;
    }
    if (rdma_create_id(st->ch, &r->cm_id, r, RDMA_PS_UDP) != 0) {
        r->cm_id = NULL;
        rdmacm_fail(st, r, "rdma_create_id: %s", strerror(errno));
        return;
    }
    /* From the listener's address, so that the path starts at the device
     * the listener (and shard 0's interface) is on; another family than
     * ours leaves the choice to the connection manager. */
    struct sockaddr *from = NULL;
    if (src.ss_family == r->dst.ss_family) {
        if (src.ss_family == AF_INET)
            ((struct sockaddr_in *)&src)->sin_port = 0;
        else
            ((struct sockaddr_in6 *)&src)->sin6_port = 0;
        from = (struct sockaddr *)&src;
    }
    r->step = RDMACM_ADDR;
    if (rdma_resolve_addr(r->cm_id, from, (struct sockaddr *)&r->dst, ms) != 0)
        rdmacm_fail(st, r, "rdma_resolve_addr: %s", strerror(errno));
}

/* @p gid, or @p fallback when it is all zero: a kernel that reports no
 * GID for an identifier (RDMA_USER_CM_QUERY_GID is recent). */
static const uint8_t *rdmacm_gid_or(const uint8_t *gid, const uint8_t *fallback)
{
    static const uint8_t zero[16];
    return memcmp(gid, zero, sizeof(zero)) != 0 ? gid : fallback;
}

/* ESTABLISHED: the peer's listener answered; build the address. */
static void rdmacm_established(rdmacm_state_t *st, rdmacm_req_t *r, const struct rdma_ud_param *ud,
                               const uint8_t *priv, size_t plen)
{
    sx_rdmacm_priv_t rep;
    sx_verbs_addr_t a;
    const char *why = NULL;

    /* The echoed shard must be the one we asked for; a bound of lane + 1
     * lets the parser check the range and the test below the value. */
    if (sx_rdmacm_priv_parse(priv, plen, SX_RDMACM_REP, r->lane + 1, &rep, &why) != SX_OK) {
        rdmacm_fail(st, r, "its answer is malformed (%s)", why);
        return;
    }
    if (rep.shard != r->lane) {
        rdmacm_fail(st, r, "it answered for shard %u", rep.shard);
        return;
    }
    if (ud->qp_num != rep.qpn) {
        rdmacm_fail(st, r, "the connection manager says queue pair %#x, the answer %#x", ud->qp_num,
                    rep.qpn);
        return;
    }
    /* The path ends at the port of the peer's listener; the peer says when
     * the shard we asked for is behind another one. */
    if (rep.flags & SX_RDMACM_REP_ELSEWHERE) {
        snprintf(r->why, sizeof(r->why),
                 "rdmacm: %s's shard %u is on another port or device than its listener "
                 "at %s: the channel keeps the card's address",
                 r->peer_name, r->lane, r->dst_str);
        r->status = SX_OK;
        r->addr_len = 0;
        rdmacm_finish(st, r);
        return;
    }
    /* It starts at the port of our listener's address (the source we
     * resolved from). A shard whose interface is on another port or device
     * (NIC locality) cannot send along it: that channel keeps the card's
     * address too. */
    const uint8_t *sgid = rdmacm_gid_or(r->cm_id->route.addr.addr.ibaddr.sgid.raw, st->local_gid);
    if (memcmp(sgid, st->qps[r->shard].gid, 16) != 0) {
        char mine[INET6_ADDRSTRLEN], theirs[INET6_ADDRSTRLEN];
        inet_ntop(AF_INET6, sgid, theirs, sizeof(theirs));
        inet_ntop(AF_INET6, st->qps[r->shard].gid, mine, sizeof(mine));
        snprintf(r->why, sizeof(r->why),
                 "rdmacm: the path to %s shard %u starts at GID %s, not at our shard %u's "
                 "GID %s (another port or device): the channel keeps the card's address",
                 r->peer_name, r->lane, theirs, r->shard, mine);
        r->status = SX_OK;
        r->addr_len = 0;
        rdmacm_finish(st, r);
        return;
    }
    if (sx_rdmacm_path_addr(&ud->ah_attr, rep.qpn, rep.qkey, rep.port, &a, &why) != SX_OK) {
        rdmacm_fail(st, r, "the path is unusable (%s)", why);
        return;
    }
    if (sx_verbs_addr_encode(&a, r->addr, sizeof(r->addr), &r->addr_len) != SX_OK) {
        rdmacm_fail(st, r, "the path's address does not encode");
        return;
    }
    r->status = SX_OK;
    rdmacm_finish(st, r);
}

/* An event on one of our requests' identifiers, already acknowledged. */
static void rdmacm_on_event(rdmacm_state_t *st, rdmacm_req_t *r, enum rdma_cm_event_type type,
                            int status, const struct rdma_ud_param *ud, const uint8_t *priv,
                            size_t plen)
{
    if (type == RDMA_CM_EVENT_ADDR_RESOLVED && r->step == RDMACM_ADDR) {
        int ms = rdmacm_ms_left(r);
        r->step = RDMACM_ROUTE;
        if (ms == 0)
            rdmacm_fail(st, r, "the connect timeout (SX_CONNECT_TIMEOUT_MS) passed");
        else if (rdma_resolve_route(r->cm_id, ms) != 0)
            rdmacm_fail(st, r, "rdma_resolve_route: %s", strerror(errno));
        return;
    }
    if (type == RDMA_CM_EVENT_ROUTE_RESOLVED && r->step == RDMACM_ROUTE) {
        uint8_t req[SX_RDMACM_PRIV_LEN];
        sx_rdmacm_priv_t m = {.kind = SX_RDMACM_REQ, .shard = (uint16_t)r->lane};
        sx_rdmacm_priv_write(req, &m);
        /* For a UD identifier without a queue pair of its own, qp_num is
         * what the connection manager reports as ours. */
        struct rdma_conn_param param = {
            .private_data = req,
            .private_data_len = sizeof(req),
            .qp_num = st->qps[r->shard].qpn,
        };
        r->step = RDMACM_CONNECT;
        if (rdma_connect(r->cm_id, &param) != 0)
            rdmacm_fail(st, r, "rdma_connect: %s", strerror(errno));
        return;
    }
    if (type == RDMA_CM_EVENT_ESTABLISHED && r->step == RDMACM_CONNECT) {
        rdmacm_established(st, r, ud, priv, plen);
        return;
    }
    /* ADDR_ERROR, ROUTE_ERROR, UNREACHABLE, REJECTED, CONNECT_ERROR,
     * DEVICE_REMOVAL, or anything out of turn. A negative status is an
     * errno; REJECTED's is the IB reject reason. */
    if (status < 0)
        rdmacm_fail(st, r, "rdma_cm reported %s (status %d: %s)", rdma_event_str(type), status,
                    strerror(-status));
    else
        rdmacm_fail(st, r, "rdma_cm reported %s (status %d)", rdma_event_str(type), status);
}

/* The listener got a SIDR REQ: answer with the wanted shard's queue pair.
 * The request's identifier is ours to destroy once answered. */
static void rdmacm_on_request(rdmacm_state_t *st, struct rdma_cm_event *ev)
{
    struct rdma_cm_id *id = ev->id;
    uint8_t priv[SX_RDMACM_PRIV_LEN];
    size_t plen = ev->param.ud.private_data_len;
    char from[RDMACM_ADDR_STR];
    sx_rdmacm_priv_t m;
    const char *why = NULL;

    if (plen > sizeof(priv))
        plen = sizeof(priv);
    if (ev->param.ud.private_data == NULL)
        plen = 0;
    if (plen > 0)
        memcpy(priv, ev->param.ud.private_data, plen);
    rdma_ack_cm_event(ev);
    sx_rdmacm_sockaddr_str(rdma_get_peer_addr(id), from, sizeof(from));
    if (sx_rdmacm_priv_parse(priv, plen, SX_RDMACM_REQ, st->nshards, &m, &why) != SX_OK) {
        sx_warn_ratelimited("cpc", "rdmacm: refused a request from %s: %s", from, why);
        if (rdma_reject(id, NULL, 0) != 0)
            sx_debug("cpc", "rdmacm: rdma_reject for %s: %s", from, strerror(errno));
        rdma_destroy_id(id);
        return;
    }
    const rdmacm_qp_t *qp = &st->qps[m.shard];
    sx_rdmacm_priv_t rep = {.kind = SX_RDMACM_REP,
                            .shard = m.shard,
                            .qpn = qp->qpn,
                            .qkey = qp->qkey,
                            .port = qp->port,
                            .flags = qp->elsewhere ? SX_RDMACM_REP_ELSEWHERE : 0};
    uint8_t out[SX_RDMACM_PRIV_LEN];
    sx_rdmacm_priv_write(out, &rep);
    struct rdma_conn_param param = {
        .private_data = out, .private_data_len = sizeof(out), .qp_num = qp->qpn};
    if (rdma_accept(id, &param) != 0)
        sx_warn_ratelimited("cpc", "rdmacm: could not answer %s for shard %u: rdma_accept: %s",
                            from, m.shard, strerror(errno));
    else
        sx_debug("cpc", "rdmacm: answered %s: shard %u is queue pair %#x", from, m.shard, qp->qpn);
    rdma_destroy_id(id);
}

static void rdmacm_events(rdmacm_state_t *st)
{
    struct rdma_cm_event *ev;

    while (rdma_get_cm_event(st->ch, &ev) == 0) {
        if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST && ev->listen_id == st->listen) {
            rdmacm_on_request(st, ev);
            continue;
        }
        if (ev->id == st->listen || ev->id->context == NULL) {
            sx_warn("cpc", "rdmacm: the listener at %s reports %s (status %d)", st->local_str,
                    rdma_event_str(ev->event), ev->status);
            rdma_ack_cm_event(ev);
            continue;
        }
        /* Copy what the event carries: acknowledging frees it. */
        rdmacm_req_t *r = ev->id->context;
        enum rdma_cm_event_type type = ev->event;
        int status = ev->status;
        struct rdma_ud_param ud = ev->param.ud;
        uint8_t priv[SX_RDMACM_PRIV_LEN];
        size_t plen = ud.private_data != NULL ? ud.private_data_len : 0;
        if (plen > sizeof(priv))
            plen = sizeof(priv);
        if (plen > 0)
            memcpy(priv, ud.private_data, plen);
        ud.private_data = NULL;
        rdma_ack_cm_event(ev);
        rdmacm_on_event(st, r, type, status, &ud, priv, plen);
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
        sx_warn_ratelimited("cpc", "rdmacm: rdma_get_cm_event: %s", strerror(errno));
}

/* Requests past their deadline fail; returns the epoll timeout until the
 * next deadline (-1: none). */
static int rdmacm_expire(rdmacm_state_t *st)
{
    uint64_t now = rdmacm_now(), next = UINT64_MAX;

    for (rdmacm_req_t *r = st->active, *nx; r != NULL; r = nx) {
        nx = r->next;
        if (now >= r->deadline_ns) {
            rdmacm_fail(st, r,
                        "no event from the connection manager before the connect timeout "
                        "(SX_CONNECT_TIMEOUT_MS)");
            continue;
        }
        if (r->deadline_ns < next)
            next = r->deadline_ns;
    }
    if (next == UINT64_MAX)
        return -1;
    uint64_t ms = (next - now + 999999) / 1000000;
    return ms > INT_MAX ? INT_MAX : (int)ms;
}

/* Frees requests without an answer: the engine is closing and their
 * channels go with it. */
static void rdmacm_drop(rdmacm_state_t *st, rdmacm_req_t *list)
{
    while (st->active != NULL) {
        rdmacm_req_t *r = st->active;
        rdmacm_active_del(st, r);
        if (r->cm_id != NULL)
            rdma_destroy_id(r->cm_id);
        free(r);
    }
    while (list != NULL) {
        rdmacm_req_t *r = list;
        list = r->next;
        free(r);
    }
}

/* The thread cannot wait any more: every request fails now, and later
 * ones at once (rdmacm_resolve_locked sees broken). */
static void rdmacm_break(rdmacm_state_t *st, const char *what)
{
    pthread_mutex_lock(&st->lock);
    st->broken = true;
    bool stop = st->stop;
    rdmacm_req_t *list = st->queue;
    st->queue = st->queue_tail = NULL;
    pthread_mutex_unlock(&st->lock);
    if (stop) {
        rdmacm_drop(st, list);
        return;
    }
    while (list != NULL) {
        rdmacm_req_t *r = list;
        list = r->next;
        rdmacm_active_add(st, r);
    }
    while (st->active != NULL)
        rdmacm_fail(st, st->active, "%s", what);
}

static void *rdmacm_thread(void *arg)
{
    rdmacm_state_t *st = arg;
    int timeout = -1;

    /* It hands answers to shards and may run them itself: no callback of
     * the application's runs here (shard.h). */
    sx_shard_set_engine_thread();

    for (;;) {
        struct epoll_event evs[2];
        int n = epoll_wait(st->epfd, evs, 2, timeout);
        if (n < 0 && errno != EINTR) {
            char what[128];
            snprintf(what, sizeof(what), "the rdmacm thread stopped (epoll_wait: %s)",
                     strerror(errno));
            sx_error("cpc", "rdmacm: %s; address resolutions fail from now on", what);
            rdmacm_break(st, what);
            return NULL;
        }
        uint64_t rings;
        if (read(st->evfd, &rings, sizeof(rings)) < 0 && errno != EAGAIN)
            sx_debug("cpc", "rdmacm: eventfd read: %s", strerror(errno));
        pthread_mutex_lock(&st->lock);
        bool stop = st->stop;
        rdmacm_req_t *list = st->queue;
        st->queue = st->queue_tail = NULL;
        pthread_mutex_unlock(&st->lock);
        if (stop) {
            rdmacm_drop(st, list);
            return NULL;
        }
        while (list != NULL) {
            rdmacm_req_t *r = list;
            list = r->next;
            rdmacm_begin(st, r);
        }
        rdmacm_events(st);
        timeout = rdmacm_expire(st);
    }
}

/* ------------------------------------------------------------ the shard */

/* The resolution of @p c's path failed (@p status, @p why). A channel
 * waiting for it fails; one that only answers its peer keeps the card's
 * address, which may still carry it (an IB subnet of its own). */
static void rdmacm_resolve_failed(sx_chan_t *c, int status, const char *why)
{
    c->resolve = SX_CHAN_RESOLVE_FAILED;
    c->resolve_id = 0;
    if (c->conn == SX_CONN_CONNECTING && !c->failed) {
        sx_chan_fail_why_locked(c, status, why);
        return;
    }
    sx_warn_ratelimited("cpc", "%s; the channel keeps the address in the peer's card", why);
}

/* Hands the thread a request for the path of @p c. */
static void rdmacm_resolve_locked(sx_chan_t *c)
{
    const sx_cpc_inst_t *inst = sx_cpc_inst_of(c->conn_method);
    rdmacm_state_t *st = inst->state;
    const sx_conn_offer_t *o = &c->peer->conn_offer;
    const char *why = NULL;
    char text[320];

    rdmacm_req_t *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        snprintf(text, sizeof(text), "rdmacm: no memory to resolve the path to %s shard %u",
                 c->peer->name, c->lane);
        rdmacm_resolve_failed(c, SX_ERR_NO_MEMORY, text);
        return;
    }
    /* peer_init checked the blob; a second parse costs less than keeping
     * the address per peer. */
    if (sx_rdmacm_blob_parse(o->blob, o->blob_len, &r->dst, &why) != SX_OK) {
        free(r);
        snprintf(text, sizeof(text), "rdmacm: %s's listener address is malformed: %s",
                 c->peer->name, why);
        rdmacm_resolve_failed(c, SX_ERR_PEER_UNREACHABLE, text);
        return;
    }
    sx_rdmacm_sockaddr_str((struct sockaddr *)&r->dst, r->dst_str, sizeof(r->dst_str));
    r->env = inst->env;
    r->peer_epoch = c->peer->epoch;
    memcpy(r->peer_name, c->peer->name, sizeof(r->peer_name));
    r->shard = c->shard->index;
    r->lane = c->lane;
    uint64_t start = c->conn == SX_CONN_CONNECTING ? c->conn_start_ns : sx_time_ns();
    r->deadline_ns = start + c->shard->env->conf.connect_timeout_ns;
    uint32_t id;
    do
        id = atomic_fetch_add_explicit(&st->next_id, 1, memory_order_relaxed) + 1;
    while (id == 0);
    r->id = id;

    pthread_mutex_lock(&st->lock);
    bool stop = st->stop, broken = st->broken;
    if (!stop && !broken) {
        if (st->queue_tail != NULL)
            st->queue_tail->next = r;
        else
            st->queue = r;
        st->queue_tail = r;
    }
    pthread_mutex_unlock(&st->lock);
    if (stop) {
        free(r); /* the engine is closing; the channel goes with it */
        return;
    }
    if (broken) {
        free(r);
        snprintf(text, sizeof(text),
                 "rdmacm: no path to %s shard %u: the rdmacm thread has stopped", c->peer->name,
                 c->lane);
        rdmacm_resolve_failed(c, SX_ERR_PEER_UNREACHABLE, text);
        return;
    }
    c->resolve = SX_CHAN_RESOLVE_PENDING;
    c->resolve_id = id;
    uint64_t one = 1;
    if (write(st->evfd, &one, sizeof(one)) != (ssize_t)sizeof(one))
        sx_debug("cpc", "rdmacm: eventfd write: %s", strerror(errno));
}

/* The answer reached the channel's shard, and the channel is still the
 * one that asked. */
static void rdmacm_apply_locked(sx_chan_t *c, const rdmacm_req_t *r)
{
    char why[448];

    c->resolve_id = 0;
    if (r->status != SX_OK) {
        rdmacm_resolve_failed(c, r->status, r->why);
        return;
    }
    if (r->addr_len == 0) {
        sx_info("cpc", "%s", r->why);
    } else {
        int rc = sx_chan_set_dest_locked(c, r->addr, r->addr_len);
        if (rc != SX_OK) {
            snprintf(why, sizeof(why),
                     "rdmacm: the %s transport refused the path to %s shard %u: %s",
                     c->shard->ifaces[c->tl]->ops->name, c->peer->name, c->lane, sx_strerror(rc));
            rdmacm_resolve_failed(c, SX_ERR_PEER_UNREACHABLE, why);
            return;
        }
        char addr[128];
        sx_verbs_addr_str(r->addr, r->addr_len, addr, sizeof(addr));
        sx_debug("cpc", "rdmacm: shard %u: the path to %s shard %u is %s", c->shard->index,
                 c->peer->name, c->lane, addr);
    }
    c->resolve = SX_CHAN_RESOLVE_DONE;
    if (c->conn == SX_CONN_CONNECTING && !c->failed) {
        /* The exchange starts now; SX_CONNECT_TIMEOUT_MS bounds the
         * resolution and the exchange together, so its clock keeps the
         * channel's first connect attempt. */
        uint64_t start = c->conn_start_ns;
        c->conn = SX_CONN_IDLE;
        sx_conn_start_locked(c);
        c->conn_start_ns = start;
    }
}

static void rdmacm_answer_run(void *owner, sx_inbox_req_t *req)
{
    rdmacm_req_t *r = (rdmacm_req_t *)req;
    sx_shard_t *shard = owner;

    if (atomic_load(r->env->closing)) {
        free(r);
        return;
    }
    /* The channel by its names: a peer stays allocated while any shard
     * has a channel to it, so the channel outlives the read section. */
    const sx_shard_env_t *env = shard->env;
    sx_chan_t *c = NULL;
    sx_rcu_read_lock();
    struct sx_peer *peer = sx_peer_lookup_rcu(env->peers, r->peer_epoch);
    if (peer != NULL && !peer->is_self && shard->index < peer->local_shards &&
        r->lane < peer->nshards)
        c = peer->chans[(size_t)shard->index * peer->nshards + r->lane];
    sx_rcu_read_unlock(&env->peers->rcu);
    if (c != NULL && c->conn_method->ops == &sx_cpc_rdmacm.ep && !c->failed &&
        c->resolve == SX_CHAN_RESOLVE_PENDING && c->resolve_id == r->id)
        rdmacm_apply_locked(c, r);
    else
        sx_debug("cpc",
                 "rdmacm: shard %u: the path to %s shard %u found no channel waiting for it "
                 "(destroyed, failed or connected anew meanwhile)",
                 shard->index, r->peer_name, r->lane);
    free(r);
}

/* ------------------------------------------------------------ component */

static void rdmacm_state_free(rdmacm_state_t *st)
{
    if (st == NULL)
        return;
    /* The thread has gone (rdmacm_stop): nothing else touches these. */
    rdmacm_drop(st, st->queue);
    if (st->listen != NULL)
        rdma_destroy_id(st->listen);
    if (st->ch != NULL)
        rdma_destroy_event_channel(st->ch);
    if (st->epfd >= 0)
        close(st->epfd);
    if (st->evfd >= 0)
        close(st->evfd);
    if (st->lock_init)
        pthread_mutex_destroy(&st->lock);
    free(st->qps);
    free(st);
}

/* Each shard's queue pair, from its interface's card address. */
static int rdmacm_read_qps(const sx_cpc_env_t *env, rdmacm_state_t *st, char *why, size_t cap)
{
    st->qps = calloc(env->nshards, sizeof(*st->qps));
    if (st->qps == NULL) {
        snprintf(why, cap, "out of memory");
        return SX_ERR_NO_MEMORY;
    }
    for (unsigned s = 0; s < env->nshards; s++) {
        sx_tl_iface_t *iface = env->shards[s]->ifaces[SX_SHARD_TL_NET];
        uint8_t buf[SX_TL_ADDR_MAX];
        size_t len = sizeof(buf);
        sx_verbs_addr_t a;
        int rc = iface->ops->local_addr(iface, buf, &len);
        if (rc == SX_OK)
            rc = sx_verbs_addr_decode(buf, len, &a);
        if (rc != SX_OK) {
            snprintf(why, cap, "shard %u's verbs address is unreadable (%s)", s, sx_strerror(rc));
            return rc;
        }
        st->qps[s] = (rdmacm_qp_t){.qpn = a.qpn, .qkey = a.qkey, .port = a.port};
        memcpy(st->qps[s].gid, a.gid, sizeof(a.gid));
    }
    return SX_OK;
}

/*
 * The listener's IPv4 address: SX_BIND_ADDR unless it is loopback (its
 * default, for udp), else the address in shard 0's GID when that is an
 * IPv4-mapped IPv6 address (RFC 4291, 2.5.5.2), as RoCE v2 GIDs of IPv4
 * interfaces are.
 */
static int rdmacm_listen_addr(const sx_cpc_env_t *env, const rdmacm_state_t *st,
                              struct sockaddr_in *sin, char *why, size_t cap)
{
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    const char *bind = env->bind_addr != NULL ? env->bind_addr : "";
    struct in_addr a;

    memset(sin, 0, sizeof(*sin));
    sin->sin_family = AF_INET;
    sin->sin_port = htons((uint16_t)env->rdmacm_port);
    if (inet_pton(AF_INET, bind, &a) == 1 && a.s_addr != htonl(INADDR_ANY) &&
        (ntohl(a.s_addr) >> 24) != 127) {
        sin->sin_addr = a;
        return SX_OK;
    }
    if (memcmp(st->qps[0].gid, mapped, sizeof(mapped)) == 0) {
        memcpy(&sin->sin_addr, st->qps[0].gid + 12, 4);
        return SX_OK;
    }
    snprintf(why, cap,
             "no IPv4 address to listen on: SX_BIND_ADDR is \"%s\" and shard 0's GID is not an "
             "IPv4 address; set SX_BIND_ADDR to the address of the RDMA device's network "
             "interface (IPoIB, or the RoCE netdev)",
             bind);
    return SX_ERR_UNSUPPORTED;
}

/* Opens the event channel, the listener and the thread. */
static int rdmacm_open(const sx_cpc_env_t *env, rdmacm_state_t *st, char *why, size_t cap)
{
    struct sockaddr_in sin;
    char want[RDMACM_ADDR_STR];

    int rc = rdmacm_read_qps(env, st, why, cap);
    if (rc != SX_OK)
        return rc;
    rc = rdmacm_listen_addr(env, st, &sin, why, cap);
    if (rc != SX_OK)
        return rc;
    st->ch = rdma_create_event_channel();
    if (st->ch == NULL) {
        snprintf(why, cap,
                 "rdma_create_event_channel: %s (no RDMA device here, or the rdma_ucm kernel "
                 "module is not loaded)",
                 strerror(errno));
        return SX_ERR_UNSUPPORTED;
    }
    /* The thread drains every event on each wake-up and must not block
     * when there is none left. */
    int fl = fcntl(st->ch->fd, F_GETFL);
    if (fl < 0 || fcntl(st->ch->fd, F_SETFL, fl | O_NONBLOCK) != 0) {
        snprintf(why, cap, "fcntl(O_NONBLOCK) on the event channel: %s", strerror(errno));
        return SX_ERR_UNSUPPORTED;
    }
    if (rdma_create_id(st->ch, &st->listen, NULL, RDMA_PS_UDP) != 0) {
        st->listen = NULL;
        snprintf(why, cap, "rdma_create_id: %s", strerror(errno));
        return SX_ERR_UNSUPPORTED;
    }
    sx_rdmacm_sockaddr_str((struct sockaddr *)&sin, want, sizeof(want));
    if (rdma_bind_addr(st->listen, (struct sockaddr *)&sin) != 0) {
        snprintf(why, cap,
                 "cannot listen on %s: rdma_bind_addr: %s (is it the address of an RDMA "
                 "device's interface? SX_BIND_ADDR chooses the address, SX_RDMACM_PORT the port)",
                 want, strerror(errno));
        return SX_ERR_UNSUPPORTED;
    }
    if (rdma_listen(st->listen, RDMACM_BACKLOG) != 0) {
        snprintf(why, cap, "cannot listen on %s: rdma_listen: %s", want, strerror(errno));
        return SX_ERR_UNSUPPORTED;
    }
    /* The port, when SX_RDMACM_PORT left it to the kernel. */
    memcpy(&st->local, rdma_get_local_addr(st->listen), sizeof(struct sockaddr_in));
    /* Which shards sit behind the listener's port: paths to the others do
     * not end at their queue pairs. A kernel that reports no GID for the
     * bound identifier leaves shard 0's, whose GID the address came from
     * unless SX_BIND_ADDR chose it. */
    memcpy(st->local_gid,
           rdmacm_gid_or(st->listen->route.addr.addr.ibaddr.sgid.raw, st->qps[0].gid),
           sizeof(st->local_gid));
    for (unsigned s = 0; s < env->nshards; s++)
        st->qps[s].elsewhere = memcmp(st->qps[s].gid, st->local_gid, 16) != 0;
    sx_rdmacm_sockaddr_str((struct sockaddr *)&st->local, st->local_str, sizeof(st->local_str));
    if (sx_rdmacm_blob_write((struct sockaddr *)&st->local, st->blob, sizeof(st->blob),
                             &st->blob_len) != SX_OK) {
        snprintf(why, cap, "the listener's address %s cannot go into a card", st->local_str);
        return SX_ERR_UNSUPPORTED;
    }
    st->epfd = epoll_create1(EPOLL_CLOEXEC);
    st->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (st->epfd < 0 || st->evfd < 0) {
        snprintf(why, cap, "epoll_create1 or eventfd: %s", strerror(errno));
        return SX_ERR_UNSUPPORTED;
    }
    struct epoll_event ev = {.events = EPOLLIN};
    ev.data.fd = st->ch->fd;
    int a = epoll_ctl(st->epfd, EPOLL_CTL_ADD, st->ch->fd, &ev);
    ev.data.fd = st->evfd;
    int b = epoll_ctl(st->epfd, EPOLL_CTL_ADD, st->evfd, &ev);
    if (a != 0 || b != 0) {
        snprintf(why, cap, "epoll_ctl: %s", strerror(errno));
        return SX_ERR_UNSUPPORTED;
    }
    if (pthread_mutex_init(&st->lock, NULL) != 0) {
        snprintf(why, cap, "pthread_mutex_init failed");
        return SX_ERR_UNSUPPORTED;
    }
    st->lock_init = true;
    /* The thread takes no signals; they belong to the application. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&st->thread, NULL, rdmacm_thread, st);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        snprintf(why, cap, "pthread_create: %s", strerror(rc));
        return SX_ERR_UNSUPPORTED;
    }
    st->thread_started = true;
    return SX_OK;
}

static int rdmacm_init(sx_cpc_inst_t *inst)
{
    const sx_cpc_env_t *env = inst->env;
    /* Quiet unless asked for by name: most engines do not run verbs. */
    bool named = sx_cpc_requested(env->spec, sx_cpc_rdmacm.ep.name);
    char why[384];

    if (env->net_ops != &sx_tl_verbs_ops) {
        sx_log(named ? SX_LOG_WARN : SX_LOG_DEBUG, "cpc",
               "rdmacm: not offered: the engine runs the %s transport, and the connection "
               "manager resolves paths for the verbs transport only",
               env->net_ops != NULL ? env->net_ops->name : "(no)");
        return SX_ERR_UNSUPPORTED;
    }
    rdmacm_state_t *st = calloc(1, sizeof(*st));
    int rc = SX_ERR_UNSUPPORTED;
    if (st == NULL) {
        snprintf(why, sizeof(why), "out of memory");
    } else {
        st->env = env;
        st->nshards = env->nshards;
        st->epfd = st->evfd = -1;
        atomic_init(&st->next_id, 0);
        rc = rdmacm_open(env, st, why, sizeof(why));
    }
    if (rc != SX_OK) {
        /* rdmacm_open starts the thread last: it is not running. */
        rdmacm_state_free(st);
        sx_log(named ? SX_LOG_WARN : SX_LOG_INFO, "cpc",
               "rdmacm: not offered: %s; channels use the other connection methods", why);
        return SX_ERR_UNSUPPORTED;
    }
    inst->state = st;
    sx_info("cpc", "rdmacm: %s listens on %s (RDMA_PS_UDP, %s port %u) to resolve paths",
            env->engine_name, st->local_str,
            st->listen->verbs != NULL ? ibv_get_device_name(st->listen->verbs->device) : "?",
            st->listen->port_num);
    return SX_OK;
}

/* Stops the thread: after this nothing is handed to a shard any more. */
static void rdmacm_stop(sx_cpc_inst_t *inst)
{
    rdmacm_state_t *st = inst->state;

    if (st == NULL || !st->thread_started)
        return;
    pthread_mutex_lock(&st->lock);
    st->stop = true;
    pthread_mutex_unlock(&st->lock);
    uint64_t one = 1;
    if (write(st->evfd, &one, sizeof(one)) != (ssize_t)sizeof(one))
        sx_warn("cpc", "rdmacm: cannot wake the thread (eventfd: %s)", strerror(errno));
    pthread_join(st->thread, NULL);
    st->thread_started = false;
}

static void rdmacm_finalize(sx_cpc_inst_t *inst)
{
    rdmacm_stop(inst);
    rdmacm_state_free(inst->state);
    inst->state = NULL;
}

static int rdmacm_query(sx_cpc_inst_t *inst, sx_cpc_module_t *module)
{
    const rdmacm_state_t *st = inst->state;

    if (st == NULL)
        return SX_ERR_UNSUPPORTED;
    memcpy(module->blob, st->blob, st->blob_len);
    module->blob_len = st->blob_len;
    return SX_OK;
}

static int rdmacm_peer_init(sx_cpc_inst_t *inst, struct sx_peer *peer)
{
    struct sockaddr_storage ss;
    const char *why = NULL;
    (void)inst;

    if (sx_rdmacm_blob_parse(peer->conn_offer.blob, peer->conn_offer.blob_len, &ss, &why) !=
        SX_OK) {
        sx_error("cpc", "sx_peer_add: %s's card has a malformed rdmacm listener address: %s",
                 peer->name, why);
        return SX_ERR_INVALID_PARAM;
    }
    return SX_OK;
}

static void rdmacm_ep_init(const sx_conn_method_t *method, struct sx_chan *chan)
{
    (void)method;
    sx_conn_ep_init_idle_locked(chan);
    chan->resolve = SX_CHAN_RESOLVE_NONE;
    chan->resolve_id = 0;
}

/*
 * Work is queued: resolve the path, then run the exchange (rdmacm_apply_
 * locked starts it). The channel is CONNECTING meanwhile, so the flush
 * does not call again, and nothing is sent. Its nonce is drawn now, as
 * the exchange would, so an ACCEPT forged with nonce 0 finds no match.
 */
static void rdmacm_start_connect(const sx_conn_method_t *method, struct sx_chan *chan)
{
    (void)method;
    if (chan->conn != SX_CONN_IDLE || chan->failed)
        return;
    if (chan->resolve == SX_CHAN_RESOLVE_DONE) {
        sx_conn_start_locked(chan);
        return;
    }
    chan->conn = SX_CONN_CONNECTING;
    chan->conn_start_ns = sx_time_ns();
    chan->conn_tries = 0;
    while (chan->conn_nonce == 0)
        chan->conn_nonce = (uint32_t)(sx_time_ns() * 0x9e3779b97f4a7c15ull >> 32) ^ chan->snd_isn;
    if (chan->resolve != SX_CHAN_RESOLVE_PENDING)
        rdmacm_resolve_locked(chan);
}

static void rdmacm_ep_fini(const sx_conn_method_t *method, struct sx_chan *chan)
{
    (void)method;
    sx_conn_ep_fini_locked(chan);
    chan->resolve_id = 0; /* an answer still on its way finds no match */
}

/* The exchange's messages go over the datagram path, as the handshake's
 * do. A channel that answers before it has resolved anything (its peer
 * connected first) starts resolving its own direction now. */
static int rdmacm_send_ctrl(const sx_conn_method_t *method, struct sx_chan *chan,
                            const uint8_t *data, size_t len)
{
    (void)method;
    if (chan->resolve == SX_CHAN_RESOLVE_NONE && !chan->failed)
        rdmacm_resolve_locked(chan);
    return sx_chan_send_raw_locked(chan, data, len);
}

const sx_cpc_component_t sx_cpc_rdmacm = {
    .ep =
        {
            .name = "rdmacm",
            .id = SX_CPC_RDMACM,
            .probe = true,
            .ep_init_locked = rdmacm_ep_init,
            .start_connect_locked = rdmacm_start_connect,
            .ep_finalize_locked = rdmacm_ep_fini,
            .send_ctrl_locked = rdmacm_send_ctrl,
        },
    .priority = 90,
    .init = rdmacm_init,
    .query = rdmacm_query,
    .peer_init = rdmacm_peer_init,
    .stop = rdmacm_stop,
    .finalize = rdmacm_finalize,
};
