/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The fake libibverbs of fake_verbs.h: the ibv_* functions verbs.c calls,
 * defined in the test program so that they take the place of libibverbs'
 * own, over an in-memory model of devices, ports and UD queue pairs.
 */
#include "fake_verbs.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The header turns these names into inline wrappers; this file defines
 * the functions behind them. */
#undef ibv_query_port
#undef ibv_reg_mr

#define FAKE_GRH      40
#define FAKE_ASYNC_Q  64
#define FAKE_EVENTS_Q 256

fake_world_t fake;
static pthread_mutex_t fake_lock = PTHREAD_MUTEX_INITIALIZER;

typedef struct fake_ctx {
    struct ibv_context c; /* first: the transport holds &c */
    int dev;
    int async_w;
    enum ibv_event_type async_q[FAKE_ASYNC_Q];
    unsigned async_head, async_n;
    unsigned live; /* resources created on it and not destroyed */
    struct fake_ctx *next;
} fake_ctx_t;

typedef struct fake_qp fake_qp_t;

typedef struct fake_cq {
    struct ibv_cq cq;
    int cap, head, n;
    struct ibv_wc *wc;
    fake_qp_t **owner; /* the queue pair of each entry */
    bool armed;
    int unacked; /* events read by ibv_get_cq_event and not acknowledged */
} fake_cq_t;

typedef struct fake_channel {
    struct ibv_comp_channel ch;
    int wfd;
    fake_cq_t *q[FAKE_EVENTS_Q];
    unsigned head, n;
} fake_channel_t;

typedef struct fake_recv {
    uint64_t wr_id;
    uint8_t *addr;
    uint32_t len;
} fake_recv_t;

struct fake_qp {
    struct ibv_qp qp;
    struct ibv_qp_cap cap;
    uint8_t port;
    uint32_t qkey;
    fake_recv_t *recv;
    int rhead, nrecv;
    int sq_out; /* sends whose completion is not polled yet */
    fake_qp_t *next;
};

typedef struct fake_mr {
    struct ibv_mr mr;
    int access;
    struct fake_mr *next;
} fake_mr_t;

typedef struct fake_ah {
    struct ibv_ah ah;
    struct ibv_ah_attr attr;
} fake_ah_t;

typedef struct fake_done {
    fake_qp_t *qp;
    struct ibv_wc wc;
    struct fake_done *next;
} fake_done_t;

typedef struct fake_held {
    fake_qp_t *to;
    uint32_t src_qp;
    size_t len;
    struct fake_held *next;
    uint8_t data[];
} fake_held_t;

static struct ibv_device fake_devices[FAKE_DEVS];
static fake_ctx_t *ctx_list;
static fake_qp_t *qp_list;
static fake_mr_t *mr_list;
static fake_held_t *held_list;
static fake_done_t *done_list, **done_tail = &done_list;
static uint32_t next_qpn = 0x48, next_key = 0x100;

static void violate(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void violate(const char *fmt, ...)
{
    va_list ap;

    if (fake.violation[0] != '\0')
        return;
    va_start(ap, fmt);
    vsnprintf(fake.violation, sizeof(fake.violation), fmt, ap);
    va_end(ap);
}

static fake_ctx_t *ctx_of(struct ibv_context *c)
{
    return (fake_ctx_t *)c;
}

static fake_dev_t *dev_of(struct ibv_context *c)
{
    return &fake.dev[ctx_of(c)->dev];
}

static fake_port_t *port_of(struct ibv_context *c, unsigned port)
{
    fake_dev_t *d = dev_of(c);
    return port >= 1 && (int)port <= d->nports ? &d->port[port - 1] : NULL;
}

static size_t mtu_bytes(enum ibv_mtu m)
{
    return (size_t)128 << m;
}

/* ------------------------------------------------------------------ */
/* Configuration                                                        */

static void set_gid(fake_gid_t *g, int type, const uint8_t raw[16])
{
    g->valid = true;
    g->type = type;
    memcpy(g->raw, raw, 16);
}

void fake_reset(void)
{
    pthread_mutex_lock(&fake_lock);
    if (ctx_list != NULL || qp_list != NULL || mr_list != NULL)
        fprintf(stderr, "fake_reset: resources still live\n");
    for (fake_held_t *h = held_list, *n; h != NULL; h = n) {
        n = h->next;
        free(h);
    }
    held_list = NULL;
    for (fake_done_t *d = done_list, *n; d != NULL; d = n) {
        n = d->next;
        free(d);
    }
    done_list = NULL;
    done_tail = &done_list;
    memset(&fake, 0, sizeof(fake));
    fake.ndevs = 1;
    fake_dev_t *d = &fake.dev[0];
    snprintf(d->name, sizeof(d->name), "mlx5_0");
    d->nports = 1;
    d->max_qp_wr = 32768;
    d->max_cqe = 4194303;
    d->max_sge = 30;
    d->max_inline = 512;
    fake_port_t *p = &d->port[0];
    p->state = IBV_PORT_ACTIVE;
    p->link_layer = IBV_LINK_LAYER_INFINIBAND;
    p->lid = 0x11;
    p->mtu = IBV_MTU_4096;
    p->gid_len = 4;
    static const uint8_t ll[16] = {0xfe, 0x80, 0,    0,    0, 0,    0,    0,
                                   0x50, 0x6b, 0x4b, 0x03, 0, 0x11, 0x22, 0x33};
    set_gid(&p->gid[0], IBV_GID_TYPE_IB, ll);
    pthread_mutex_unlock(&fake_lock);
}

int fake_add_roce(const char *name, uint8_t host)
{
    pthread_mutex_lock(&fake_lock);
    int i = fake.ndevs++;
    fake_dev_t *d = &fake.dev[i];
    memset(d, 0, sizeof(*d));
    snprintf(d->name, sizeof(d->name), "%s", name);
    d->nports = 1;
    d->max_qp_wr = 16384;
    d->max_cqe = 65536;
    d->max_sge = 3;
    d->max_inline = 220;
    fake_port_t *p = &d->port[0];
    p->state = IBV_PORT_ACTIVE;
    p->link_layer = IBV_LINK_LAYER_ETHERNET;
    p->lid = 0;
    p->mtu = IBV_MTU_1024;
    p->gid_len = 6;
    uint8_t ll[16] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x42, 0xac, 0xff, 0xfe, 0x11, 0, host};
    uint8_t v4[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, host};
    /* The order a Linux GID table has: link-local v1, v2, then the IPv4
     * address v1, v2, with an empty slot between. */
    set_gid(&p->gid[0], IBV_GID_TYPE_ROCE_V1, ll);
    set_gid(&p->gid[1], IBV_GID_TYPE_ROCE_V2, ll);
    set_gid(&p->gid[3], IBV_GID_TYPE_ROCE_V1, v4);
    set_gid(&p->gid[4], IBV_GID_TYPE_ROCE_V2, v4);
    pthread_mutex_unlock(&fake_lock);
    return i;
}

/* ------------------------------------------------------------------ */
/* Devices and contexts                                                 */

struct ibv_device **ibv_get_device_list(int *num_devices)
{
    pthread_mutex_lock(&fake_lock);
    if (fake.no_kernel) {
        pthread_mutex_unlock(&fake_lock);
        if (num_devices != NULL)
            *num_devices = 0;
        errno = ENOSYS;
        return NULL;
    }
    struct ibv_device **list = calloc((size_t)fake.ndevs + 1, sizeof(*list));
    for (int i = 0; list != NULL && i < fake.ndevs; i++) {
        snprintf(fake_devices[i].name, sizeof(fake_devices[i].name), "%s", fake.dev[i].name);
        list[i] = &fake_devices[i];
    }
    if (num_devices != NULL)
        *num_devices = list != NULL ? fake.ndevs : 0;
    pthread_mutex_unlock(&fake_lock);
    return list;
}

void ibv_free_device_list(struct ibv_device **list)
{
    free(list);
}

const char *ibv_get_device_name(struct ibv_device *device)
{
    return device->name;
}

static int fake_poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc);
static int fake_req_notify_cq(struct ibv_cq *cq, int solicited_only);
static int fake_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
static int fake_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);

struct ibv_context *ibv_open_device(struct ibv_device *device)
{
    int fds[2];
    long i = device - fake_devices;

    if (i < 0 || i >= FAKE_DEVS || pipe(fds) != 0) {
        errno = ENODEV;
        return NULL;
    }
    fake_ctx_t *x = calloc(1, sizeof(*x));
    if (x == NULL) {
        close(fds[0]);
        close(fds[1]);
        errno = ENOMEM;
        return NULL;
    }
    x->dev = (int)i;
    x->async_w = fds[1];
    x->c.device = device;
    x->c.cmd_fd = -1;
    x->c.async_fd = fds[0];
    x->c.num_comp_vectors = 1;
    x->c.abi_compat = NULL; /* the compatible path: ibv_query_port is ours */
    x->c.ops.poll_cq = fake_poll_cq;
    x->c.ops.req_notify_cq = fake_req_notify_cq;
    x->c.ops.post_send = fake_post_send;
    x->c.ops.post_recv = fake_post_recv;
    pthread_mutex_lock(&fake_lock);
    x->next = ctx_list;
    ctx_list = x;
    fake.live_contexts++;
    pthread_mutex_unlock(&fake_lock);
    return &x->c;
}

int ibv_close_device(struct ibv_context *context)
{
    fake_ctx_t *x = ctx_of(context);

    pthread_mutex_lock(&fake_lock);
    if (x->live != 0)
        violate("ibv_close_device with %u resources still live", x->live);
    for (fake_ctx_t **p = &ctx_list; *p != NULL; p = &(*p)->next) {
        if (*p == x) {
            *p = x->next;
            break;
        }
    }
    fake.live_contexts--;
    pthread_mutex_unlock(&fake_lock);
    close(x->c.async_fd);
    close(x->async_w);
    free(x);
    return 0;
}

int ibv_query_device(struct ibv_context *context, struct ibv_device_attr *attr)
{
    fake_dev_t *d = dev_of(context);

    memset(attr, 0, sizeof(*attr));
    attr->max_qp = 1 << 16;
    attr->max_qp_wr = d->max_qp_wr;
    attr->max_sge = d->max_sge;
    attr->max_cq = 1 << 16;
    attr->max_cqe = d->max_cqe;
    attr->max_ah = 1 << 20;
    attr->phys_port_cnt = (uint8_t)d->nports;
    return 0;
}

int ibv_query_port(struct ibv_context *context, uint8_t port_num,
                   struct _compat_ibv_port_attr *port_attr)
{
    /* The inline wrapper passes a whole struct ibv_port_attr. */
    struct ibv_port_attr *a = (struct ibv_port_attr *)(void *)port_attr;
    fake_port_t *p = port_of(context, port_num);

    if (p == NULL) {
        errno = EINVAL;
        return EINVAL;
    }
    memset(a, 0, sizeof(*a));
    a->state = p->state;
    a->max_mtu = IBV_MTU_4096;
    a->active_mtu = p->mtu;
    a->lid = p->lid;
    a->link_layer = p->link_layer;
    a->gid_tbl_len = p->gid_len;
    a->pkey_tbl_len = 1;
    return 0;
}

int _ibv_query_gid_ex(struct ibv_context *context, uint32_t port_num, uint32_t gid_index,
                      struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size)
{
    fake_port_t *p = port_of(context, port_num);

    (void)flags;
    if (fake.gid_ex_unsupported)
        return EOPNOTSUPP;
    if (p == NULL || entry_size < sizeof(*entry))
        return EINVAL;
    if ((int)gid_index >= p->gid_len || !p->gid[gid_index].valid)
        return ENODATA;
    memset(entry, 0, sizeof(*entry));
    memcpy(entry->gid.raw, p->gid[gid_index].raw, 16);
    entry->gid_index = gid_index;
    entry->port_num = port_num;
    entry->gid_type = (uint32_t)p->gid[gid_index].type;
    return 0;
}

int ibv_query_gid(struct ibv_context *context, uint8_t port_num, int index, union ibv_gid *gid)
{
    fake_port_t *p = port_of(context, port_num);

    if (p == NULL || index < 0 || index >= p->gid_len)
        return -1;
    /* The sysfs path reads zeros for an empty entry. */
    memset(gid->raw, 0, sizeof(gid->raw));
    if (p->gid[index].valid)
        memcpy(gid->raw, p->gid[index].raw, 16);
    return 0;
}

/* ------------------------------------------------------------------ */
/* Protection domain, memory, channels, completion queues               */

struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
    struct ibv_pd *pd = calloc(1, sizeof(*pd));

    if (pd == NULL)
        return NULL;
    pd->context = context;
    pthread_mutex_lock(&fake_lock);
    fake.live_pds++;
    ctx_of(context)->live++;
    pthread_mutex_unlock(&fake_lock);
    return pd;
}

int ibv_dealloc_pd(struct ibv_pd *pd)
{
    pthread_mutex_lock(&fake_lock);
    fake.live_pds--;
    ctx_of(pd->context)->live--;
    pthread_mutex_unlock(&fake_lock);
    free(pd);
    return 0;
}

struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
    fake_mr_t *m = calloc(1, sizeof(*m));

    if (m == NULL)
        return NULL;
    m->mr.context = pd->context;
    m->mr.pd = pd;
    m->mr.addr = addr;
    m->mr.length = length;
    m->access = access;
    pthread_mutex_lock(&fake_lock);
    m->mr.lkey = m->mr.rkey = next_key++;
    m->next = mr_list;
    mr_list = m;
    fake.live_mrs++;
    ctx_of(pd->context)->live++;
    pthread_mutex_unlock(&fake_lock);
    return &m->mr;
}

int ibv_dereg_mr(struct ibv_mr *mr)
{
    fake_mr_t *m = (fake_mr_t *)mr;

    pthread_mutex_lock(&fake_lock);
    for (fake_mr_t **p = &mr_list; *p != NULL; p = &(*p)->next) {
        if (*p == m) {
            *p = m->next;
            break;
        }
    }
    fake.live_mrs--;
    ctx_of(mr->context)->live--;
    pthread_mutex_unlock(&fake_lock);
    free(m);
    return 0;
}

/* Whether [addr, addr + len) lies in a registration with key @p lkey. */
static bool in_mr(const void *addr, size_t len, uint32_t lkey, bool write)
{
    for (fake_mr_t *m = mr_list; m != NULL; m = m->next) {
        const uint8_t *lo = m->mr.addr, *p = addr;
        if (m->mr.lkey == lkey && p >= lo && len <= m->mr.length &&
            (size_t)(p - lo) <= m->mr.length - len)
            return !write || (m->access & IBV_ACCESS_LOCAL_WRITE);
    }
    return false;
}

struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context)
{
    int fds[2];
    fake_channel_t *c = calloc(1, sizeof(*c));

    if (c == NULL || pipe(fds) != 0) {
        free(c);
        return NULL;
    }
    c->ch.context = context;
    c->ch.fd = fds[0];
    c->wfd = fds[1];
    pthread_mutex_lock(&fake_lock);
    fake.live_channels++;
    ctx_of(context)->live++;
    pthread_mutex_unlock(&fake_lock);
    return &c->ch;
}

int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
    fake_channel_t *c = (fake_channel_t *)channel;

    pthread_mutex_lock(&fake_lock);
    fake.live_channels--;
    ctx_of(channel->context)->live--;
    pthread_mutex_unlock(&fake_lock);
    close(c->ch.fd);
    close(c->wfd);
    free(c);
    return 0;
}

struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
                             struct ibv_comp_channel *channel, int comp_vector)
{
    (void)comp_vector;
    if (cqe < 1 || cqe > dev_of(context)->max_cqe) {
        errno = EINVAL;
        return NULL;
    }
    fake_cq_t *q = calloc(1, sizeof(*q));
    if (q == NULL)
        return NULL;
    /* Exactly as deep as asked: a real device may round up, and the
     * transport must not count on it. */
    q->cap = cqe;
    q->wc = calloc((size_t)cqe, sizeof(*q->wc));
    q->owner = calloc((size_t)cqe, sizeof(*q->owner));
    q->cq.context = context;
    q->cq.channel = channel;
    q->cq.cq_context = cq_context;
    q->cq.cqe = cqe;
    pthread_mutex_lock(&fake_lock);
    fake.live_cqs++;
    ctx_of(context)->live++;
    pthread_mutex_unlock(&fake_lock);
    return &q->cq;
}

int ibv_destroy_cq(struct ibv_cq *cq)
{
    fake_cq_t *q = (fake_cq_t *)cq;

    pthread_mutex_lock(&fake_lock);
    /* The real one waits forever for the acknowledgements. */
    if (q->unacked != 0)
        violate("ibv_destroy_cq with %d completion events unacknowledged", q->unacked);
    fake.live_cqs--;
    ctx_of(cq->context)->live--;
    pthread_mutex_unlock(&fake_lock);
    free(q->wc);
    free(q->owner);
    free(q);
    return 0;
}

/* Queues a completion; raises the channel's event when armed. Lock held. */
static void push_wc(fake_cq_t *q, const struct ibv_wc *wc, fake_qp_t *owner)
{
    if (q->n == q->cap) {
        violate("completion queue overrun (depth %d)", q->cap);
        return;
    }
    int at = (q->head + q->n++) % q->cap;
    q->wc[at] = *wc;
    q->owner[at] = owner;
    if (q->armed && q->cq.channel != NULL) {
        fake_channel_t *c = (fake_channel_t *)q->cq.channel;
        q->armed = false;
        if (c->n < FAKE_EVENTS_Q) {
            c->q[(c->head + c->n++) % FAKE_EVENTS_Q] = q;
            if (write(c->wfd, "e", 1) != 1)
                violate("the channel's pipe is full");
        }
    }
}

static int fake_poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc)
{
    fake_cq_t *q = (fake_cq_t *)cq;
    int k = 0;

    pthread_mutex_lock(&fake_lock);
    while (k < num_entries && q->n > 0) {
        wc[k] = q->wc[q->head];
        fake_qp_t *owner = q->owner[q->head];
        if (owner != NULL && wc[k].opcode == IBV_WC_SEND)
            owner->sq_out--;
        q->head = (q->head + 1) % q->cap;
        q->n--;
        k++;
    }
    pthread_mutex_unlock(&fake_lock);
    return k;
}

static void deliver(fake_qp_t *to, const uint8_t *data, size_t len, uint32_t src_qp);

static int fake_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
    fake_cq_t *q = (fake_cq_t *)cq;

    (void)solicited_only;
    pthread_mutex_lock(&fake_lock);
    /* What was held arrives just before the request takes effect: the
     * race a last poll after the request exists for. */
    for (fake_held_t **p = &held_list; *p != NULL;) {
        fake_held_t *h = *p;
        if (h->to->qp.recv_cq != cq) {
            p = &h->next;
            continue;
        }
        *p = h->next;
        deliver(h->to, h->data, h->len, h->src_qp);
        free(h);
    }
    q->armed = true;
    pthread_mutex_unlock(&fake_lock);
    return 0;
}

int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context)
{
    fake_channel_t *c = (fake_channel_t *)channel;
    char b;

    if (read(c->ch.fd, &b, 1) != 1)
        return -1; /* errno: EAGAIN when the fd is nonblocking and empty */
    pthread_mutex_lock(&fake_lock);
    if (c->n == 0) {
        violate("a channel event with no queue behind it");
        pthread_mutex_unlock(&fake_lock);
        return -1;
    }
    fake_cq_t *q = c->q[c->head];
    c->head = (c->head + 1) % FAKE_EVENTS_Q;
    c->n--;
    q->unacked++;
    *cq = &q->cq;
    *cq_context = q->cq.cq_context;
    pthread_mutex_unlock(&fake_lock);
    return 0;
}

void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
    fake_cq_t *q = (fake_cq_t *)cq;

    pthread_mutex_lock(&fake_lock);
    q->unacked -= (int)nevents;
    if (q->unacked < 0)
        violate("more completion events acknowledged than read");
    pthread_mutex_unlock(&fake_lock);
}

/* ------------------------------------------------------------------ */
/* Queue pairs                                                          */

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *init)
{
    fake_dev_t *d = dev_of(pd->context);
    struct ibv_qp_cap *cap = &init->cap;

    if (init->qp_type != IBV_QPT_UD || init->send_cq == NULL || init->recv_cq == NULL ||
        cap->max_send_wr < 1 || cap->max_send_wr > (uint32_t)d->max_qp_wr || cap->max_recv_wr < 1 ||
        cap->max_recv_wr > (uint32_t)d->max_qp_wr || cap->max_send_sge > (uint32_t)d->max_sge ||
        cap->max_recv_sge > (uint32_t)d->max_sge || cap->max_inline_data > d->max_inline) {
        errno = EINVAL;
        return NULL;
    }
    fake_qp_t *q = calloc(1, sizeof(*q));
    if (q == NULL || (q->recv = calloc(cap->max_recv_wr, sizeof(*q->recv))) == NULL) {
        free(q);
        errno = ENOMEM;
        return NULL;
    }
    q->cap = *cap;
    q->qp.context = pd->context;
    q->qp.pd = pd;
    q->qp.send_cq = init->send_cq;
    q->qp.recv_cq = init->recv_cq;
    q->qp.qp_type = IBV_QPT_UD;
    q->qp.state = IBV_QPS_RESET;
    pthread_mutex_lock(&fake_lock);
    q->qp.qp_num = next_qpn++;
    q->next = qp_list;
    qp_list = q;
    fake.live_qps++;
    ctx_of(pd->context)->live++;
    pthread_mutex_unlock(&fake_lock);
    return &q->qp;
}

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask)
{
    fake_qp_t *q = (fake_qp_t *)qp;
    int rc = 0;

    pthread_mutex_lock(&fake_lock);
    const int init_mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;
    if (!(attr_mask & IBV_QP_STATE)) {
        rc = EINVAL;
    } else if (attr->qp_state == IBV_QPS_INIT && qp->state == IBV_QPS_RESET) {
        if ((attr_mask & init_mask) != init_mask || port_of(qp->context, attr->port_num) == NULL)
            rc = EINVAL;
        q->port = attr->port_num;
        q->qkey = attr->qkey;
    } else if (attr->qp_state == IBV_QPS_RTR && qp->state == IBV_QPS_INIT) {
        rc = 0;
    } else if (attr->qp_state == IBV_QPS_RTS && qp->state == IBV_QPS_RTR) {
        if (!(attr_mask & IBV_QP_SQ_PSN))
            rc = EINVAL;
    } else {
        rc = EINVAL;
    }
    if (rc == 0)
        qp->state = attr->qp_state;
    else
        violate("ibv_modify_qp from state %d to %d with mask 0x%x", qp->state, attr->qp_state,
                attr_mask);
    pthread_mutex_unlock(&fake_lock);
    return rc;
}

int ibv_destroy_qp(struct ibv_qp *qp)
{
    fake_qp_t *q = (fake_qp_t *)qp;

    pthread_mutex_lock(&fake_lock);
    for (fake_qp_t **p = &qp_list; *p != NULL; p = &(*p)->next) {
        if (*p == q) {
            *p = q->next;
            break;
        }
    }
    for (fake_held_t **p = &held_list; *p != NULL;) {
        fake_held_t *h = *p;
        if (h->to == q) {
            *p = h->next;
            free(h);
        } else {
            p = &h->next;
        }
    }
    for (fake_done_t **p = &done_list; *p != NULL;) {
        fake_done_t *d = *p;
        if (d->qp == q) {
            *p = d->next;
            free(d);
        } else {
            p = &d->next;
        }
    }
    done_tail = &done_list;
    while (*done_tail != NULL)
        done_tail = &(*done_tail)->next;
    fake.live_qps--;
    ctx_of(qp->context)->live--;
    pthread_mutex_unlock(&fake_lock);
    free(q->recv);
    free(q);
    return 0;
}

static int fake_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    fake_qp_t *q = (fake_qp_t *)qp;

    pthread_mutex_lock(&fake_lock);
    fake.post_recv_calls++;
    if (qp->state == IBV_QPS_RESET) {
        violate("ibv_post_recv on a queue pair in RESET");
        *bad = wr;
        pthread_mutex_unlock(&fake_lock);
        return EINVAL;
    }
    for (; wr != NULL; wr = wr->next) {
        if (q->nrecv == (int)q->cap.max_recv_wr) {
            violate("receive queue over its depth %u", q->cap.max_recv_wr);
            *bad = wr;
            pthread_mutex_unlock(&fake_lock);
            return ENOMEM;
        }
        if (wr->num_sge != 1 || !in_mr((void *)(uintptr_t)wr->sg_list[0].addr,
                                       wr->sg_list[0].length, wr->sg_list[0].lkey, true)) {
            violate("a receive outside a writable registration");
            *bad = wr;
            pthread_mutex_unlock(&fake_lock);
            return EINVAL;
        }
        fake_recv_t *r = &q->recv[(q->rhead + q->nrecv++) % (int)q->cap.max_recv_wr];
        r->wr_id = wr->wr_id;
        r->addr = (uint8_t *)(uintptr_t)wr->sg_list[0].addr;
        r->len = wr->sg_list[0].length;
        fake.recvs_posted++;
    }
    pthread_mutex_unlock(&fake_lock);
    return 0;
}

/* Hands a datagram to @p to's first posted receive. Lock held. */
static void deliver(fake_qp_t *to, const uint8_t *data, size_t len, uint32_t src_qp)
{
    if (to->qp.state != IBV_QPS_RTR && to->qp.state != IBV_QPS_RTS) {
        fake.dropped_no_recv++;
        return;
    }
    if (to->nrecv == 0) {
        fake.dropped_no_recv++; /* UD: no receive posted, the packet is gone */
        return;
    }
    fake_recv_t r = to->recv[to->rhead];
    to->rhead = (to->rhead + 1) % (int)to->cap.max_recv_wr;
    to->nrecv--;
    struct ibv_wc wc = {.wr_id = r.wr_id,
                        .opcode = IBV_WC_RECV,
                        .qp_num = to->qp.qp_num,
                        .src_qp = src_qp,
                        .wc_flags = IBV_WC_GRH};
    if (fake.next_recv_status != IBV_WC_SUCCESS) {
        wc.status = (enum ibv_wc_status)fake.next_recv_status;
        fake.next_recv_status = IBV_WC_SUCCESS;
    } else if (r.len < FAKE_GRH + len) {
        wc.status = IBV_WC_LOC_LEN_ERR;
    } else {
        memset(r.addr, 0xab, FAKE_GRH); /* a GRH, as far as anyone reads it */
        if (len > 0)
            memcpy(r.addr + FAKE_GRH, data, len);
        wc.byte_len = (uint32_t)(FAKE_GRH + len);
    }
    push_wc((fake_cq_t *)to->qp.recv_cq, &wc, to);
}

/* The queue pair an address handle and QPN reach, or NULL. Lock held. */
static fake_qp_t *route(const fake_qp_t *from, const fake_ah_t *ah, uint32_t qpn)
{
    fake_port_t *src = port_of(from->qp.context, from->port);

    if (ah->attr.port_num != from->port) {
        violate("an address handle of port %u used on port %u", ah->attr.port_num, from->port);
        return NULL;
    }
    if (ah->attr.is_global &&
        (ah->attr.grh.sgid_index >= src->gid_len || !src->gid[ah->attr.grh.sgid_index].valid)) {
        violate("an address handle with an invalid source GID index %u", ah->attr.grh.sgid_index);
        return NULL;
    }
    if (src->link_layer == IBV_LINK_LAYER_ETHERNET && !ah->attr.is_global) {
        violate("a RoCE address handle without a GRH");
        return NULL;
    }
    for (fake_qp_t *q = qp_list; q != NULL; q = q->next) {
        if (q->qp.qp_num != qpn)
            continue;
        fake_port_t *dst = port_of(q->qp.context, q->port);
        if (dst == NULL || dst->link_layer != src->link_layer)
            return NULL;
        if (!ah->attr.is_global)
            return dst->lid == ah->attr.dlid ? q : NULL;
        for (int g = 0; g < dst->gid_len; g++) {
            if (dst->gid[g].valid && memcmp(dst->gid[g].raw, ah->attr.grh.dgid.raw, 16) == 0)
                return q;
        }
        return NULL;
    }
    return NULL;
}

static int fake_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    fake_qp_t *q = (fake_qp_t *)qp;
    uint8_t buf[4096];
    int rc = 0;

    pthread_mutex_lock(&fake_lock);
    fake.post_send_calls++;
    size_t mtu = mtu_bytes(port_of(qp->context, q->port)->mtu);
    for (; wr != NULL; wr = wr->next) {
        size_t len = 0;
        rc = EINVAL;
        if (qp->state == IBV_QPS_ERR) {
            /* Taken, and flushed: how a queue pair in error answers. */
            struct ibv_wc wc = {.wr_id = wr->wr_id,
                                .status = IBV_WC_WR_FLUSH_ERR,
                                .opcode = IBV_WC_SEND,
                                .qp_num = qp->qp_num};
            q->sq_out++;
            push_wc((fake_cq_t *)qp->send_cq, &wc, q);
            rc = 0;
            continue;
        }
        if (qp->state != IBV_QPS_RTS) {
            violate("ibv_post_send on a queue pair in state %d", qp->state);
            break;
        }
        if (q->sq_out >= (int)q->cap.max_send_wr) {
            violate("send queue over its depth %u", q->cap.max_send_wr);
            rc = ENOMEM;
            break;
        }
        if (wr->opcode != IBV_WR_SEND || wr->num_sge < 0 ||
            wr->num_sge > (int)q->cap.max_send_sge || wr->wr.ud.ah == NULL) {
            violate("a send work request the queue pair cannot take");
            break;
        }
        bool inl = (wr->send_flags & IBV_SEND_INLINE) != 0, ok = true;
        for (int i = 0; i < wr->num_sge && ok; i++) {
            const struct ibv_sge *s = &wr->sg_list[i];
            if (s->length > sizeof(buf) - len ||
                (!inl && !in_mr((void *)(uintptr_t)s->addr, s->length, s->lkey, false))) {
                violate("a send outside a registration, or over 4096 bytes");
                ok = false;
                break;
            }
            memcpy(buf + len, (void *)(uintptr_t)s->addr, s->length);
            len += s->length;
        }
        if (!ok)
            break;
        if (inl && len > q->cap.max_inline_data) {
            violate("an inline send of %zu bytes over the limit %u", len, q->cap.max_inline_data);
            break;
        }
        if (len > mtu) {
            violate("a send of %zu bytes over the MTU %zu", len, mtu);
            break;
        }
        rc = 0;
        fake_qp_t *to = route(q, (const fake_ah_t *)wr->wr.ud.ah, wr->wr.ud.remote_qpn);
        if (to == NULL || to->qkey != wr->wr.ud.remote_qkey) {
            fake.dropped_route++;
        } else if (fake.hold) {
            fake_held_t *h = malloc(sizeof(*h) + len);
            if (h != NULL) {
                h->to = to;
                h->src_qp = qp->qp_num;
                h->len = len;
                memcpy(h->data, buf, len);
                h->next = NULL;
                fake_held_t **tail = &held_list;
                while (*tail != NULL)
                    tail = &(*tail)->next;
                *tail = h;
            }
        } else {
            deliver(to, buf, len, qp->qp_num);
        }
        if (wr->send_flags & IBV_SEND_SIGNALED) {
            struct ibv_wc wc = {.wr_id = wr->wr_id,
                                .status = (enum ibv_wc_status)fake.next_send_status,
                                .opcode = IBV_WC_SEND,
                                .qp_num = qp->qp_num};
            fake.next_send_status = IBV_WC_SUCCESS;
            q->sq_out++;
            fake_done_t *d = fake.defer_sends ? malloc(sizeof(*d)) : NULL;
            if (d != NULL) {
                *d = (fake_done_t){.qp = q, .wc = wc};
                *done_tail = d;
                done_tail = &d->next;
            } else {
                push_wc((fake_cq_t *)qp->send_cq, &wc, q);
            }
        }
        fake.sends++;
    }
    if (rc != 0)
        *bad = wr;
    pthread_mutex_unlock(&fake_lock);
    return rc;
}

void fake_complete_sends(void)
{
    pthread_mutex_lock(&fake_lock);
    while (done_list != NULL) {
        fake_done_t *d = done_list;
        done_list = d->next;
        push_wc((fake_cq_t *)d->qp->qp.send_cq, &d->wc, d->qp);
        free(d);
    }
    done_tail = &done_list;
    pthread_mutex_unlock(&fake_lock);
}

void fake_release_held(void)
{
    pthread_mutex_lock(&fake_lock);
    while (held_list != NULL) {
        fake_held_t *h = held_list;
        held_list = h->next;
        deliver(h->to, h->data, h->len, h->src_qp);
        free(h);
    }
    pthread_mutex_unlock(&fake_lock);
}

const char *fake_verdict(char *buf, size_t cap)
{
    pthread_mutex_lock(&fake_lock);
    if (fake.violation[0] != '\0')
        snprintf(buf, cap, "verbs contract breached: %s", fake.violation);
    else if (fake.live_contexts + fake.live_pds + fake.live_cqs + fake.live_qps + fake.live_mrs +
                 fake.live_ahs + fake.live_channels !=
             0)
        snprintf(buf, cap,
                 "left allocated: %u contexts, %u pds, %u cqs, %u qps, %u mrs, %u ahs, "
                 "%u channels",
                 fake.live_contexts, fake.live_pds, fake.live_cqs, fake.live_qps, fake.live_mrs,
                 fake.live_ahs, fake.live_channels);
    else if (cap > 0)
        buf[0] = '\0';
    pthread_mutex_unlock(&fake_lock);
    return buf;
}

void fake_qp_error_all(void)
{
    pthread_mutex_lock(&fake_lock);
    for (fake_qp_t *q = qp_list; q != NULL; q = q->next) {
        q->qp.state = IBV_QPS_ERR;
        while (q->nrecv > 0) {
            fake_recv_t r = q->recv[q->rhead];
            q->rhead = (q->rhead + 1) % (int)q->cap.max_recv_wr;
            q->nrecv--;
            struct ibv_wc wc = {.wr_id = r.wr_id,
                                .status = IBV_WC_WR_FLUSH_ERR,
                                .opcode = IBV_WC_RECV,
                                .qp_num = q->qp.qp_num};
            push_wc((fake_cq_t *)q->qp.recv_cq, &wc, q);
        }
    }
    pthread_mutex_unlock(&fake_lock);
}

/* ------------------------------------------------------------------ */
/* Address handles and asynchronous events                              */

struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
    if (fake.fail_ah) {
        errno = EHOSTUNREACH;
        return NULL;
    }
    if (port_of(pd->context, attr->port_num) == NULL) {
        errno = EINVAL;
        return NULL;
    }
    fake_ah_t *a = calloc(1, sizeof(*a));
    if (a == NULL)
        return NULL;
    a->ah.context = pd->context;
    a->ah.pd = pd;
    a->attr = *attr;
    pthread_mutex_lock(&fake_lock);
    fake.live_ahs++;
    fake.ahs_created++;
    fake.last_ah = *attr;
    ctx_of(pd->context)->live++;
    pthread_mutex_unlock(&fake_lock);
    return &a->ah;
}

int ibv_destroy_ah(struct ibv_ah *ah)
{
    pthread_mutex_lock(&fake_lock);
    fake.live_ahs--;
    ctx_of(ah->context)->live--;
    pthread_mutex_unlock(&fake_lock);
    free(ah);
    return 0;
}

void fake_async_all(enum ibv_event_type type)
{
    pthread_mutex_lock(&fake_lock);
    for (fake_ctx_t *x = ctx_list; x != NULL; x = x->next) {
        if (x->async_n == FAKE_ASYNC_Q)
            continue;
        x->async_q[(x->async_head + x->async_n++) % FAKE_ASYNC_Q] = type;
        if (write(x->async_w, "a", 1) != 1)
            violate("the async pipe is full");
    }
    pthread_mutex_unlock(&fake_lock);
}

int ibv_get_async_event(struct ibv_context *context, struct ibv_async_event *event)
{
    fake_ctx_t *x = ctx_of(context);
    char b;

    if (read(context->async_fd, &b, 1) != 1)
        return -1;
    pthread_mutex_lock(&fake_lock);
    memset(event, 0, sizeof(*event));
    event->event_type = x->async_q[x->async_head];
    x->async_head = (x->async_head + 1) % FAKE_ASYNC_Q;
    x->async_n--;
    event->element.port_num = 1;
    pthread_mutex_unlock(&fake_lock);
    return 0;
}

void ibv_ack_async_event(struct ibv_async_event *event)
{
    (void)event;
}

/* ------------------------------------------------------------------ */
/* Strings                                                              */

const char *ibv_wc_status_str(enum ibv_wc_status status)
{
    switch (status) {
    case IBV_WC_SUCCESS:
        return "success";
    case IBV_WC_LOC_LEN_ERR:
        return "local length error";
    case IBV_WC_WR_FLUSH_ERR:
        return "Work Request Flushed Error";
    default:
        return "some error";
    }
}

const char *ibv_port_state_str(enum ibv_port_state port_state)
{
    switch (port_state) {
    case IBV_PORT_DOWN:
        return "PORT_DOWN";
    case IBV_PORT_INIT:
        return "PORT_INIT";
    case IBV_PORT_ACTIVE:
        return "PORT_ACTIVE";
    default:
        return "PORT_OTHER";
    }
}

const char *ibv_event_type_str(enum ibv_event_type event)
{
    switch (event) {
    case IBV_EVENT_QP_FATAL:
        return "local work queue catastrophic error";
    case IBV_EVENT_PORT_ERR:
        return "port error";
    case IBV_EVENT_PORT_ACTIVE:
        return "port active";
    default:
        return "some event";
    }
}
