/* SPDX-License-Identifier: BSD-3-Clause */
/* A fake librdmacm over fake_verbs.c's devices; see fake_rdmacm.h. */
#include "fake_rdmacm.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake_verbs.h"

#define SIDR_REQ_PRIV 180 /* what a SIDR REQ leaves for private data after the CMA header */
#define SIDR_REP_PRIV 136

fake_cm_world_t fake_cm;

typedef struct fake_ev fake_ev_t;

typedef struct fake_ch {
    struct rdma_event_channel ch; /* first: what the caller holds */
    int wfd;
    fake_ev_t *head, *tail;
    struct fake_ch *next;
} fake_ch_t;

typedef struct fake_id {
    struct rdma_cm_id id; /* first */
    struct fake_id *next;
    fake_ch_t *chan; /* NULL: a ghost requester (fake_cm_inject_request) */
    bool dead, bound, listening;
    bool known; /* the caller has seen it: it created it, or got its CONNECT_REQUEST */
    int dev;
    uint8_t port;
    uint32_t ip; /* network order */
    uint16_t sport;
    unsigned unacked;
    struct fake_id *client; /* server side: who asked; NULL once it is gone */
    int stage;              /* 0 new, 2 address resolved, 4 route resolved, 5 connecting */
} fake_id_t;

struct fake_ev {
    struct rdma_cm_event ev; /* first: what rdma_get_cm_event hands out */
    fake_ev_t *next;
    fake_id_t *id;
    uint8_t priv[256];
};

static pthread_mutex_t cm_lock = PTHREAD_MUTEX_INITIALIZER;
static fake_id_t *ids;      /* every identifier, dead ones too, until reset */
static fake_ch_t *channels; /* live ones */
static fake_ev_t *held_head, *held_tail;

static void violate(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void violate(const char *fmt, ...)
{
    va_list ap;
    if (fake_cm.violation[0] != '\0')
        return;
    va_start(ap, fmt);
    vsnprintf(fake_cm.violation, sizeof(fake_cm.violation), fmt, ap);
    va_end(ap);
}

static void add_ip(uint32_t ip, int dev, uint8_t port)
{
    for (int i = 0; i < fake_cm.nips; i++) {
        if (fake_cm.ips[i].ip == ip)
            return;
    }
    if (fake_cm.nips < FAKE_CM_IPS) {
        fake_cm.ips[fake_cm.nips].ip = ip;
        fake_cm.ips[fake_cm.nips].dev = dev;
        fake_cm.ips[fake_cm.nips].port = port;
        fake_cm.nips++;
    }
}

void fake_cm_reset(void)
{
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

    pthread_mutex_lock(&cm_lock);
    if (channels != NULL)
        fprintf(stderr, "fake_cm_reset: event channels still live\n");
    for (fake_id_t *f = ids, *n; f != NULL; f = n) {
        n = f->next;
        free(f);
    }
    ids = NULL;
    for (fake_ev_t *e = held_head, *n; e != NULL; e = n) {
        n = e->next;
        free(e);
    }
    held_head = held_tail = NULL;
    memset(&fake_cm, 0, sizeof(fake_cm));
    fake_cm.next_port = 40000;
    for (int d = 0; d < fake.ndevs; d++) {
        for (int p = 0; p < fake.dev[d].nports; p++) {
            const fake_port_t *port = &fake.dev[d].port[p];
            for (int g = 0; g < port->gid_len; g++) {
                if (port->gid[g].valid && memcmp(port->gid[g].raw, mapped, 12) == 0) {
                    uint32_t ip;
                    memcpy(&ip, port->gid[g].raw + 12, 4);
                    add_ip(ip, d, (uint8_t)(p + 1));
                }
            }
        }
    }
    pthread_mutex_unlock(&cm_lock);
}

void fake_cm_add_ip(const char *ip, int dev, uint8_t port)
{
    struct in_addr a;
    if (inet_pton(AF_INET, ip, &a) != 1)
        abort();
    pthread_mutex_lock(&cm_lock);
    add_ip(a.s_addr, dev, port);
    pthread_mutex_unlock(&cm_lock);
}

void fake_cm_snapshot(fake_cm_world_t *out)
{
    pthread_mutex_lock(&cm_lock);
    *out = fake_cm;
    pthread_mutex_unlock(&cm_lock);
}

void fake_cm_set(void (*fn)(fake_cm_world_t *w, void *arg), void *arg)
{
    pthread_mutex_lock(&cm_lock);
    fn(&fake_cm, arg);
    pthread_mutex_unlock(&cm_lock);
}

/* Whether fake_cm.fail applies to a client bound to @p f's address. */
static bool fails(const struct fake_id *f);

/* Whether this call fails at once (fake_cm.fail_call); sets errno. */
static bool call_fails(int which)
{
    if (fake_cm.fail_call != which)
        return false;
    fake_cm.fail_call = 0;
    errno = fake_cm.fail_errno;
    return true;
}

static int find_ip(uint32_t ip)
{
    for (int i = 0; i < fake_cm.nips; i++) {
        if (fake_cm.ips[i].ip == ip)
            return i;
    }
    return -1;
}

static const fake_port_t *port_of(int dev, uint8_t port)
{
    return &fake.dev[dev].port[port - 1];
}

/* The GID a path from or to @p ip on that port uses: on RoCE the address
 * as a GID, on InfiniBand the port GID. */
static void port_gid(int dev, uint8_t port, uint32_t ip, uint8_t *gid)
{
    const fake_port_t *p = port_of(dev, port);
    if (p->link_layer == IBV_LINK_LAYER_ETHERNET) {
        static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        memcpy(gid, mapped, 12);
        memcpy(gid + 12, &ip, 4);
        return;
    }
    memcpy(gid, p->gid[0].raw, 16);
}

static bool fails(const fake_id_t *f)
{
    return fake_cm.fail != 0 && (fake_cm.fail_from == 0 || fake_cm.fail_from == f->ip);
}

/* ------------------------------------------------------------ events */

static fake_ev_t *new_ev(fake_id_t *f, enum rdma_cm_event_type type, int status)
{
    fake_ev_t *e = calloc(1, sizeof(*e));
    if (e == NULL)
        abort();
    e->id = f;
    e->ev.id = &f->id;
    e->ev.event = type;
    e->ev.status = status;
    return e;
}

static void to_channel(fake_ev_t *e)
{
    fake_ch_t *c = e->id->chan;
    e->next = NULL;
    if (c->tail != NULL)
        c->tail->next = e;
    else
        c->head = e;
    c->tail = e;
    char b = 1;
    if (write(c->wfd, &b, 1) != 1)
        violate("the fake's pipe is full");
}

static void post(fake_ev_t *e)
{
    if (fake_cm.hold) {
        fake_cm.held++;
        e->next = NULL;
        if (held_tail != NULL)
            held_tail->next = e;
        else
            held_head = e;
        held_tail = e;
        return;
    }
    to_channel(e);
}

static void post_simple(fake_id_t *f, enum rdma_cm_event_type type, int status)
{
    post(new_ev(f, type, status));
}

void fake_cm_release(void)
{
    pthread_mutex_lock(&cm_lock);
    fake_cm.hold = false;
    fake_ev_t *e = held_head;
    held_head = held_tail = NULL;
    while (e != NULL) {
        fake_ev_t *n = e->next;
        if (e->id->dead)
            free(e);
        else
            to_channel(e);
        e = n;
    }
    pthread_mutex_unlock(&cm_lock);
}

int rdma_get_cm_event(struct rdma_event_channel *channel, struct rdma_cm_event **event)
{
    fake_ch_t *c = (fake_ch_t *)channel;
    char b;

    pthread_mutex_lock(&cm_lock);
    int fl = fcntl(channel->fd, F_GETFL);
    if (fl < 0 || !(fl & O_NONBLOCK))
        violate("rdma_get_cm_event on a blocking event channel (it would wait for an event)");
    if (read(channel->fd, &b, 1) < 0 && errno != EAGAIN)
        violate("reading the event channel: %s", strerror(errno));
    fake_ev_t *e = c->head;
    if (e == NULL) {
        pthread_mutex_unlock(&cm_lock);
        errno = EAGAIN;
        return -1;
    }
    c->head = e->next;
    if (c->head == NULL)
        c->tail = NULL;
    e->id->unacked++;
    e->id->known = true;
    *event = &e->ev;
    pthread_mutex_unlock(&cm_lock);
    return 0;
}

int rdma_ack_cm_event(struct rdma_cm_event *event)
{
    fake_ev_t *e = (fake_ev_t *)event;

    pthread_mutex_lock(&cm_lock);
    if (e->id->unacked == 0)
        violate("an event acknowledged twice");
    else
        e->id->unacked--;
    pthread_mutex_unlock(&cm_lock);
    free(e);
    return 0;
}

/* ------------------------------------------------------------ channels, ids */

struct rdma_event_channel *rdma_create_event_channel(void)
{
    int fds[2];

    pthread_mutex_lock(&cm_lock);
    if (fake_cm.no_device) {
        pthread_mutex_unlock(&cm_lock);
        errno = ENODEV;
        return NULL;
    }
    fake_ch_t *c = calloc(1, sizeof(*c));
    if (c == NULL || pipe2(fds, O_CLOEXEC) != 0)
        abort();
    c->ch.fd = fds[0];
    c->wfd = fds[1];
    c->next = channels;
    channels = c;
    fake_cm.channels_live++;
    pthread_mutex_unlock(&cm_lock);
    return &c->ch;
}

void rdma_destroy_event_channel(struct rdma_event_channel *channel)
{
    fake_ch_t *c = (fake_ch_t *)channel;

    pthread_mutex_lock(&cm_lock);
    /* Closing the channel's fd makes the kernel clean up what the caller
     * never saw (requests whose CONNECT_REQUEST was not retrieved);
     * identifiers the caller holds would be leaked. */
    for (fake_id_t *f = ids; f != NULL; f = f->next) {
        if (f->dead || f->chan != c)
            continue;
        if (f->known)
            violate("an event channel destroyed with identifiers on it");
        f->dead = true;
        fake_cm.ids_live--;
    }
    for (fake_ch_t **pp = &channels; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    }
    for (fake_ev_t *e = c->head, *n; e != NULL; e = n) {
        n = e->next;
        free(e);
    }
    close(c->ch.fd);
    close(c->wfd);
    fake_cm.channels_live--;
    pthread_mutex_unlock(&cm_lock);
    free(c);
}

static fake_id_t *new_id(fake_ch_t *c, void *context, enum rdma_port_space ps)
{
    fake_id_t *f = calloc(1, sizeof(*f));
    if (f == NULL)
        abort();
    f->id.channel = c != NULL ? &c->ch : NULL;
    f->id.context = context;
    f->id.ps = ps;
    f->id.qp_type = IBV_QPT_UD;
    f->chan = c;
    f->next = ids;
    ids = f;
    if (c != NULL) {
        fake_cm.ids_created++;
        fake_cm.ids_live++;
    }
    return f;
}

int rdma_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id, void *context,
                   enum rdma_port_space ps)
{
    pthread_mutex_lock(&cm_lock);
    if (call_fails(1)) {
        pthread_mutex_unlock(&cm_lock);
        return -1;
    }
    if (channel == NULL || ps != RDMA_PS_UDP)
        violate("rdma_create_id without a channel or not RDMA_PS_UDP");
    fake_id_t *f = new_id((fake_ch_t *)channel, context, ps);
    f->known = true;
    *id = &f->id;
    pthread_mutex_unlock(&cm_lock);
    return 0;
}

int rdma_destroy_id(struct rdma_cm_id *id)
{
    fake_id_t *f = (fake_id_t *)id;

    pthread_mutex_lock(&cm_lock);
    if (f->dead)
        violate("an identifier destroyed twice");
    if (f->unacked != 0)
        violate("rdma_destroy_id with %u event(s) not acknowledged (librdmacm would wait "
                "forever)",
                f->unacked);
    /* Its events not yet reported go with it, as the kernel drops them. */
    if (f->chan != NULL) {
        fake_ev_t **pp = &f->chan->head;
        f->chan->tail = NULL;
        while (*pp != NULL) {
            if ((*pp)->id == f) {
                fake_ev_t *e = *pp;
                *pp = e->next;
                free(e);
            } else {
                f->chan->tail = *pp;
                pp = &(*pp)->next;
            }
        }
    }
    for (fake_id_t *g = ids; g != NULL; g = g->next) {
        if (g->client == f)
            g->client = NULL;
    }
    f->dead = true;
    f->listening = false;
    fake_cm.ids_live--;
    fake_cm.ids_destroyed++;
    pthread_mutex_unlock(&cm_lock);
    return 0;
}

/* Binds @p f to @p sin (port 0: an ephemeral one); an errno or 0. */
static int bind_locked(fake_id_t *f, const struct sockaddr_in *sin)
{
    int i = find_ip(sin->sin_addr.s_addr);
    if (i < 0)
        return ENODEV;
    uint16_t port = ntohs(sin->sin_port);
    if (port == 0)
        port = fake_cm.next_port++;
    for (fake_id_t *g = ids; g != NULL; g = g->next) {
        if (!g->dead && g->bound && g->ip == sin->sin_addr.s_addr && g->sport == port)
            return EADDRINUSE;
    }
    f->bound = true;
    f->ip = sin->sin_addr.s_addr;
    f->sport = port;
    f->dev = fake_cm.ips[i].dev;
    f->port = fake_cm.ips[i].port;
    f->id.port_num = f->port;
    struct sockaddr_in src = {.sin_family = AF_INET, .sin_port = htons(port)};
    src.sin_addr.s_addr = f->ip;
    memcpy(&f->id.route.addr.src_storage, &src, sizeof(src));
    port_gid(f->dev, f->port, f->ip, f->id.route.addr.addr.ibaddr.sgid.raw);
    return 0;
}

int rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr)
{
    fake_id_t *f = (fake_id_t *)id;
    struct sockaddr_in sin;

    if (addr->sa_family != AF_INET) {
        errno = EAFNOSUPPORT;
        return -1;
    }
    memcpy(&sin, addr, sizeof(sin));
    pthread_mutex_lock(&cm_lock);
    int err = f->bound ? EINVAL : bind_locked(f, &sin);
    pthread_mutex_unlock(&cm_lock);
    if (err != 0) {
        errno = err;
        return -1;
    }
    return 0;
}

int rdma_listen(struct rdma_cm_id *id, int backlog)
{
    fake_id_t *f = (fake_id_t *)id;
    (void)backlog;
    pthread_mutex_lock(&cm_lock);
    if (!f->bound)
        violate("rdma_listen before rdma_bind_addr");
    f->listening = true;
    pthread_mutex_unlock(&cm_lock);
    return 0;
}

/* ------------------------------------------------------------ the client */

int rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src_addr, struct sockaddr *dst_addr,
                      int timeout_ms)
{
    fake_id_t *f = (fake_id_t *)id;
    struct sockaddr_in dst;

    pthread_mutex_lock(&cm_lock);
    if (f->stage != 0 || timeout_ms <= 0)
        violate("rdma_resolve_addr out of order or with timeout %d", timeout_ms);
    if (call_fails(2)) {
        pthread_mutex_unlock(&cm_lock);
        return -1;
    }
    if (dst_addr->sa_family != AF_INET) {
        pthread_mutex_unlock(&cm_lock);
        errno = EAFNOSUPPORT;
        return -1;
    }
    memcpy(&dst, dst_addr, sizeof(dst));
    struct sockaddr_in src = {.sin_family = AF_INET};
    if (src_addr != NULL)
        memcpy(&src, src_addr, sizeof(src));
    else if (fake_cm.nips > 0)
        src.sin_addr.s_addr = fake_cm.ips[0].ip;
    int err = bind_locked(f, &src);
    if (err != 0) {
        pthread_mutex_unlock(&cm_lock);
        errno = err;
        return -1;
    }
    memcpy(&f->id.route.addr.dst_storage, &dst, sizeof(dst));
    fake_cm.resolves++;
    f->stage = 2;
    if (fails(f) && fake_cm.fail == RDMA_CM_EVENT_ADDR_ERROR)
        post_simple(f, RDMA_CM_EVENT_ADDR_ERROR, fake_cm.fail_status);
    else if (find_ip(dst.sin_addr.s_addr) < 0)
        post_simple(f, RDMA_CM_EVENT_ADDR_ERROR, -EHOSTUNREACH);
    else
        post_simple(f, RDMA_CM_EVENT_ADDR_RESOLVED, 0);
    pthread_mutex_unlock(&cm_lock);
    return 0;
}

int rdma_resolve_route(struct rdma_cm_id *id, int timeout_ms)
{
    fake_id_t *f = (fake_id_t *)id;

    pthread_mutex_lock(&cm_lock);
    if (f->stage != 2 || timeout_ms <= 0)
        violate("rdma_resolve_route out of order or with timeout %d", timeout_ms);
    if (call_fails(3)) {
        pthread_mutex_unlock(&cm_lock);
        return -1;
    }
    f->stage = 4;
    if (fails(f) && fake_cm.fail == RDMA_CM_EVENT_ROUTE_ERROR)
        post_simple(f, RDMA_CM_EVENT_ROUTE_ERROR, fake_cm.fail_status);
    else
        post_simple(f, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
    pthread_mutex_unlock(&cm_lock);
    return 0;
}

static fake_id_t *listener_at(uint32_t ip, uint16_t port)
{
    for (fake_id_t *g = ids; g != NULL; g = g->next) {
        if (!g->dead && g->listening && g->ip == ip && g->sport == port)
            return g;
    }
    return NULL;
}

/* A SIDR REQ reaches @p l from @p client: CONNECT_REQUEST on a new
 * identifier on the listener's channel. */
static void request_locked(fake_id_t *l, fake_id_t *client, const struct sockaddr_in *from,
                           const void *priv, size_t len, size_t pad)
{
    fake_id_t *s = new_id(l->chan, l->id.context, l->id.ps);
    s->client = client;
    s->bound = true;
    s->ip = l->ip;
    s->sport = l->sport;
    s->dev = l->dev;
    s->port = l->port;
    s->id.port_num = l->port;
    memcpy(&s->id.route.addr.src_storage, &l->id.route.addr.src_storage,
           sizeof(struct sockaddr_in));
    memcpy(&s->id.route.addr.dst_storage, from, sizeof(*from));
    fake_ev_t *e = new_ev(s, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
    e->ev.listen_id = &l->id;
    memcpy(e->priv, priv, len);
    if (fake_cm.req_tamper == 1 && len >= 1)
        e->priv[0] ^= 1;
    e->ev.param.ud.private_data = e->priv;
    e->ev.param.ud.private_data_len = (uint8_t)(len > pad ? len : pad);
    fake_cm.requests++;
    post(e);
}

int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *param)
{
    fake_id_t *f = (fake_id_t *)id;
    struct sockaddr_in dst, src;

    pthread_mutex_lock(&cm_lock);
    if (f->stage != 4 || param == NULL || param->private_data_len > SIDR_REQ_PRIV)
        violate("rdma_connect out of order, without parameters or with %u bytes of private "
                "data",
                param != NULL ? param->private_data_len : 0);
    if (call_fails(4)) {
        pthread_mutex_unlock(&cm_lock);
        return -1;
    }
    f->stage = 5;
    fake_cm.connects++;
    memcpy(&dst, &f->id.route.addr.dst_storage, sizeof(dst));
    memcpy(&src, &f->id.route.addr.src_storage, sizeof(src));
    fake_id_t *l = listener_at(dst.sin_addr.s_addr, ntohs(dst.sin_port));
    if (fake_cm.silent) {
        /* nobody answers */
    } else if (fails(f) && fake_cm.fail != RDMA_CM_EVENT_ADDR_ERROR &&
               fake_cm.fail != RDMA_CM_EVENT_ROUTE_ERROR) {
        post_simple(f, (enum rdma_cm_event_type)fake_cm.fail, fake_cm.fail_status);
    } else if (l == NULL) {
        post_simple(f, RDMA_CM_EVENT_UNREACHABLE, 2); /* IB_SIDR_UNSUPPORTED: no such service */
    } else if (param != NULL) {
        request_locked(l, f, &src, param->private_data, param->private_data_len, SIDR_REQ_PRIV);
    }
    pthread_mutex_unlock(&cm_lock);
    return 0;
}

/* ------------------------------------------------------------ the server */

int rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *param)
{
    fake_id_t *s = (fake_id_t *)id;

    pthread_mutex_lock(&cm_lock);
    if (param == NULL || param->private_data_len > SIDR_REP_PRIV || s->listening)
        violate("rdma_accept without parameters, with too much private data, or on a listener");
    fake_cm.accepts++;
    fake_id_t *c = s->client;
    if (c == NULL || param == NULL) {
        pthread_mutex_unlock(&cm_lock);
        return 0;
    }
    uint8_t priv[SIDR_REP_PRIV] = {0};
    memcpy(priv, param->private_data, param->private_data_len);
    if (fake_cm.rep_tamper == 1)
        priv[0] ^= 1;
    if (fake_cm.rep_tamper == 2)
        priv[6] = 7;
    if (fake_cm.rep_tamper == 4)
        priv[15] |= 0x80;
    uint32_t qpn = param->qp_num + (fake_cm.rep_tamper == 3 ? 1 : 0);
    if (c->chan == NULL) {
        fake_cm.ghost_answers++;
        fake_cm.ghost_event = RDMA_CM_EVENT_ESTABLISHED;
        memcpy(fake_cm.ghost_priv, priv, sizeof(priv));
        fake_cm.ghost_qpn = qpn;
        pthread_mutex_unlock(&cm_lock);
        return 0;
    }
    fake_ev_t *e = new_ev(c, RDMA_CM_EVENT_ESTABLISHED, 0);
    memcpy(e->priv, priv, sizeof(priv));
    struct rdma_ud_param *ud = &e->ev.param.ud;
    ud->private_data = e->priv;
    ud->private_data_len = SIDR_REP_PRIV;
    ud->qp_num = qpn;
    ud->qkey = RDMA_UDP_QKEY;
    const fake_port_t *p = port_of(s->dev, s->port);
    if (p->link_layer == IBV_LINK_LAYER_ETHERNET || fake_cm.ib_global) {
        ud->ah_attr.is_global = 1;
        port_gid(s->dev, s->port, s->ip, ud->ah_attr.grh.dgid.raw);
        ud->ah_attr.grh.hop_limit = 64;
    }
    if (p->link_layer != IBV_LINK_LAYER_ETHERNET)
        ud->ah_attr.dlid = p->lid;
    ud->ah_attr.sl = fake_cm.sl;
    ud->ah_attr.port_num = c->port;
    fake_cm.established++;
    post(e);
    pthread_mutex_unlock(&cm_lock);
    return 0;
}

int rdma_reject(struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len)
{
    fake_id_t *s = (fake_id_t *)id;
    (void)private_data;
    (void)private_data_len;

    pthread_mutex_lock(&cm_lock);
    fake_cm.rejects++;
    fake_id_t *c = s->client;
    if (c != NULL && c->chan == NULL) {
        fake_cm.ghost_answers++;
        fake_cm.ghost_event = RDMA_CM_EVENT_REJECTED;
    } else if (c != NULL) {
        post_simple(c, RDMA_CM_EVENT_REJECTED, 28); /* IB_CM_REJ_CONSUMER_DEFINED */
    }
    pthread_mutex_unlock(&cm_lock);
    return 0;
}

int fake_cm_inject_request(const char *ip, uint16_t port, const void *priv, size_t len)
{
    struct in_addr a;
    if (inet_pton(AF_INET, ip, &a) != 1 || len > SIDR_REQ_PRIV)
        abort();
    pthread_mutex_lock(&cm_lock);
    fake_id_t *l = listener_at(a.s_addr, port);
    if (l == NULL) {
        pthread_mutex_unlock(&cm_lock);
        return -1;
    }
    fake_id_t *ghost = new_id(NULL, NULL, RDMA_PS_UDP);
    struct sockaddr_in from = {.sin_family = AF_INET, .sin_port = htons(4242)};
    inet_pton(AF_INET, "10.99.99.99", &from.sin_addr);
    request_locked(l, ghost, &from, priv, len, 0);
    pthread_mutex_unlock(&cm_lock);
    return 0;
}
