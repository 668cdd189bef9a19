/*
 * verbs: datagrams over libibverbs UD queue pairs (issue 7).
 *
 * Each interface opens its own device context, protection domain, two
 * completion queues and one unreliable-datagram queue pair on the first
 * ACTIVE port of its device (config->device, chosen by the engine's NIC
 * locality among those the devices slot listed, or the first usable one).
 * Receives complete on a queue with a completion channel, whose fd is the
 * interface's wait_fd; sends on one without, so that a send never wakes a
 * sleeper. A shard's token holder is the only caller, so nothing here
 * locks; each interface owning its context keeps the device's own locks
 * uncontended too.
 *
 * The device-independent parts (the card address, the address-handle cache,
 * the sizing of the queues) are in verbs_addr.c, tested without hardware;
 * this file is the part that needs a device. Without one, query says so
 * and the engine never opens an interface.
 *
 * Addresses: the card carries LID, QPN, Q_Key, GID, port and SL
 * (verbs_addr.c has the layout). On Ethernet (RoCE) every datagram needs a
 * GRH, so the address carries the global flag and the port's GID: the
 * first RoCE v2 GID of the port, IPv4-mapped preferred (routable, and what
 * rdma_cm picks for an IPv4 address), else the first valid one. On
 * InfiniBand the LID routes, and a port without one (no subnet manager) is
 * refused at open. addr_insert turns a card into an address handle through
 * the AH cache, shared by all destinations on one remote port, and keeps
 * the peer's QPN and Q_Key in a destination table with a free list.
 *
 * Sends (caps.sync_send): the layer above reuses its buffers when
 * post_send returns, so a datagram up to the queue pair's inline limit is
 * sent IBV_SEND_INLINE (the driver copies it into the work request) and
 * any other is copied into a registered bounce buffer. Each send takes a
 * slot (one send work request and its bounce buffer), given back when its
 * completion is read, so the send queue never overflows; with no slot
 * free, post_send answers SX_ERR_AGAIN. A batch goes to the device as one
 * chain of work requests, one ibv_post_send and one doorbell. Every send is
 * signaled: selective signaling would save completions, but a slot whose
 * completion never comes would be lost to an error in between.
 *
 * Receives: the sizing (verbs_addr.c) turns config->rcvbuf (SX_RCVBUF,
 * the same knob as udp's socket buffer: a UD queue drops what finds no
 * receive posted, as a full socket does) into rq_depth buffers of
 * 40 + mtu bytes: the device writes the GRH, or 40 undefined bytes, in
 * front of every datagram. They are posted in chains of rx_batch. poll
 * hands up pointers past the GRH and reposts those buffers at the start of
 * the next poll, which keeps their data valid until then (transport.h).
 *
 * Blocking: arm drains the channel's events (acknowledging them, which
 * ibv_destroy_cq waits for), asks for the next one (ibv_req_notify_cq),
 * and polls once more, since a completion that arrived before the request
 * raises no event; what that poll finds is kept for the next poll, and arm
 * answers SX_ERR_AGAIN. poll re-arms the same way when it finds nothing,
 * so that the fd does not stay readable for callers that only use the fd
 * (sx_engine_fd).
 *
 * Errors: a receive or send that completes with an error is counted, and
 * its buffer or slot returns (the layer above retransmits). A flushed
 * completion (the queue pair went to the error state), a failing
 * ibv_poll_cq or a fatal asynchronous event (read every VERBS_ASYNC_EVERY
 * polls) kills the interface: poll reports SX_ERR_IO once, with a log line
 * naming the cause, and post_send refuses from then on, so the peers time
 * out above instead of the error being logged at the poll rate.
 *
 * Linking: libibverbs is linked, not opened with dlopen as ofi.c opens
 * libfabric. libfabric's constructors load every provider and its
 * dependencies at process start; rdma-core's libibverbs loads its
 * providers (libmlx5-rdmav34.so, ...) only inside ibv_get_device_list, and
 * only when sysfs lists a device that no loaded provider claims. Linked,
 * it costs a process that never selects verbs the mapping of libibverbs
 * and libnl (measured: 0.4 ms per process start), and a query on a
 * machine without RDMA devices one scan of /sys (0.2 ms).
 */
#include "transports/transport.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <infiniband/verbs.h>

#include <shardx.h>

#include "common/log.h"
#include "common/namelist.h"
#include "common/time.h"
#include "transports/verbs_addr.h"

/* The Q_Key of every interface's queue pair ("SXQK"); bit 31 clear, since
 * a controlled Q_Key cannot be sent to by an unprivileged process. */
#define VERBS_QKEY          0x5358514bu
#define VERBS_CQ_BATCH      32 /* completions per ibv_poll_cq */
#define VERBS_TX_BATCH      32 /* send work requests per ibv_post_send chain */
#define VERBS_AH_MAX        16384
#define VERBS_HOP_LIMIT     64 /* RoCE v2 routes its UDP/IP packets */
#define VERBS_ASYNC_EVERY   1024
#define VERBS_DEVS_MAX      32
#define VERBS_DEST_FREE_END UINT32_MAX
#define VERBS_DRAIN_NS      (100ull * 1000000ull)

/* ------------------------------------------------------------------ */
/* Devices                                                              */

typedef struct verbs_dev_info {
    char name[SX_TL_DEVICE_MAX];
    bool listed;        /* SX_NET_DEVICES allows it */
    uint8_t port;       /* its first ACTIVE port; 0: none */
    uint8_t link_layer; /* IBV_LINK_LAYER_* of that port */
    size_t mtu;         /* that port's active MTU in bytes */
    char why[80];       /* when port == 0: the ports' states, or why it could not open */
} verbs_dev_info_t;

static atomic_flag verbs_absent_logged = ATOMIC_FLAG_INIT;

/* Whether SX_NET_DEVICES (empty: any) lets us use device @p name. The
 * list is read as udp and the engine read it (common/namelist.h); the
 * engine refused a malformed one before any transport saw it, so a parse
 * failure here can only keep every device out. */
static bool verbs_name_listed(const char *filter, const char *name)
{
    char names[SX_NAMELIST_MAX][SX_NAMELIST_NAME_MAX];
    unsigned n = 0;
    char why[64];

    if (filter == NULL || filter[0] == '\0')
        return true;
    if (sx_namelist_parse(filter, names, SX_NAMELIST_MAX, &n, why, sizeof(why)) != SX_OK)
        return false;
    return sx_namelist_find((const char(*)[SX_NAMELIST_NAME_MAX])names, n, name) >= 0;
}

static const char *verbs_link_name(uint8_t link_layer)
{
    return link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet (RoCE)" : "InfiniBand";
}

/* Fills @p d with the first ACTIVE port of @p ctx, or with why there is none. */
static void verbs_probe_ports(struct ibv_context *ctx, verbs_dev_info_t *d)
{
    struct ibv_device_attr attr;
    size_t off = 0;

    if (ibv_query_device(ctx, &attr) != 0) {
        snprintf(d->why, sizeof(d->why), "ibv_query_device: %s", strerror(errno));
        return;
    }
    for (unsigned p = 1; p <= attr.phys_port_cnt && p <= UINT8_MAX; p++) {
        struct ibv_port_attr pa;
        if (ibv_query_port(ctx, (uint8_t)p, &pa) != 0) {
            off += (size_t)snprintf(d->why + off, off < sizeof(d->why) ? sizeof(d->why) - off : 0,
                                    "%sport %u: %s", off ? ", " : "", p, strerror(errno));
            continue;
        }
        if (pa.state == IBV_PORT_ACTIVE) {
            d->port = (uint8_t)p;
            d->link_layer = pa.link_layer;
            d->mtu = sx_verbs_mtu_bytes(pa.active_mtu);
            return;
        }
        off += (size_t)snprintf(d->why + off, off < sizeof(d->why) ? sizeof(d->why) - off : 0,
                                "%sport %u %s", off ? ", " : "", p, ibv_port_state_str(pa.state));
    }
    if (off == 0)
        snprintf(d->why, sizeof(d->why), "no port");
}

/*
 * Lists up to @p max devices with what their ports say; sets *n_p. SX_OK,
 * or SX_ERR_NO_DEVICE with @p why saying that ibv_get_device_list listed
 * none (the kernel without RDMA support answers ENOSYS).
 */
static int verbs_scan(const char *filter, verbs_dev_info_t *out, unsigned max, unsigned *n_p,
                      char *why, size_t cap)
{
    int n = 0;

    *n_p = 0;
    errno = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (list == NULL || n <= 0) {
        int err = errno;
        if (list == NULL && err != 0)
            snprintf(why, cap, "no RDMA device found (ibv_get_device_list listed none: %s%s)",
                     strerror(err),
                     err == ENOSYS ? "; the kernel has no RDMA support (ib_uverbs)" : "");
        else
            snprintf(why, cap, "no RDMA device found (ibv_get_device_list listed none)");
        if (list != NULL)
            ibv_free_device_list(list);
        return SX_ERR_NO_DEVICE;
    }
    unsigned k = 0;
    for (int i = 0; i < n && k < max; i++) {
        verbs_dev_info_t *d = &out[k++];
        memset(d, 0, sizeof(*d));
        snprintf(d->name, sizeof(d->name), "%s", ibv_get_device_name(list[i]));
        d->listed = verbs_name_listed(filter, d->name);
        if (!d->listed)
            continue; /* not opened: SX_NET_DEVICES keeps us off it */
        struct ibv_context *ctx = ibv_open_device(list[i]);
        if (ctx == NULL) {
            snprintf(d->why, sizeof(d->why), "cannot open it: %s", strerror(errno));
            continue;
        }
        verbs_probe_ports(ctx, d);
        if (ibv_close_device(ctx) != 0)
            sx_debug("verbs", "closing %s after its query: %s", d->name, strerror(errno));
    }
    ibv_free_device_list(list);
    *n_p = k;
    return SX_OK;
}

/* Writes the names of the devices in @p d (all, or those SX_NET_DEVICES
 * lists) to @p buf. */
static void verbs_names(const verbs_dev_info_t *d, unsigned n, bool listed_only, char *buf,
                        size_t cap)
{
    size_t off = 0;

    buf[0] = '\0';
    for (unsigned i = 0; i < n && off < cap; i++) {
        if (!listed_only || d[i].listed)
            off += (size_t)snprintf(buf + off, cap - off, "%s%s", off ? ", " : "", d[i].name);
    }
}

/*
 * Scans and judges: SX_OK with the devices in @p d (*n_p of them), or
 * SX_ERR_NO_DEVICE with the reason in @p why: none at all, none that
 * SX_NET_DEVICES allows, or none of those with an ACTIVE port.
 */
static int verbs_find(const sx_tl_config_t *config, verbs_dev_info_t *d, unsigned *n_p, char *why,
                      size_t cap)
{
    const char *filter = config != NULL ? config->net_devices : NULL;
    unsigned n = 0, listed = 0, usable = 0;
    int rc = verbs_scan(filter, d, VERBS_DEVS_MAX, &n, why, cap);

    *n_p = n;
    if (rc != SX_OK)
        return rc;
    for (unsigned i = 0; i < n; i++) {
        listed += d[i].listed;
        usable += d[i].listed && d[i].port != 0;
    }
    if (listed == 0) {
        char found[128];
        verbs_names(d, n, false, found, sizeof(found));
        snprintf(why, cap, "SX_NET_DEVICES='%s' names none of the RDMA devices found: %s", filter,
                 found);
        return SX_ERR_NO_DEVICE;
    }
    if (usable == 0) {
        size_t off = (size_t)snprintf(why, cap, "no RDMA device has an ACTIVE port:");
        for (unsigned i = 0; i < n && off < cap; i++) {
            if (d[i].listed)
                off += (size_t)snprintf(why + off, cap - off, " %s (%s)", d[i].name, d[i].why);
        }
        return SX_ERR_NO_DEVICE;
    }
    return SX_OK;
}

static int verbs_query(const sx_tl_config_t *config, int named, sx_tl_query_t *q)
{
    verbs_dev_info_t d[VERBS_DEVS_MAX];
    unsigned n = 0;

    (void)named; /* discovery is cheap: one scan of sysfs when there is no device */
    q->exclusivity = SX_TL_EXCL_HW;
    int rc = verbs_find(config, d, &n, q->detail, sizeof(q->detail));
    if (rc != SX_OK) {
        /* Once per process: the engine's debug line repeats it per query. */
        if (!atomic_flag_test_and_set(&verbs_absent_logged))
            sx_info("verbs", "the verbs transport is not used: %s", q->detail);
        return rc;
    }
    size_t off = 0;
    for (unsigned i = 0; i < n && off < sizeof(q->detail); i++) {
        if (!d[i].listed || d[i].port == 0)
            continue;
        off += (size_t)snprintf(q->detail + off, sizeof(q->detail) - off, "%s%s port %u %s mtu %zu",
                                off ? ", " : "", d[i].name, (unsigned)d[i].port,
                                verbs_link_name(d[i].link_layer), d[i].mtu);
    }
    return SX_OK;
}

static int verbs_devices(const sx_tl_config_t *config, char (*names)[SX_TL_DEVICE_MAX],
                         unsigned max)
{
    verbs_dev_info_t d[VERBS_DEVS_MAX];
    char why[SX_TL_DETAIL_MAX];
    unsigned n = 0, k = 0;

    if (names == NULL)
        return 0;
    if (verbs_find(config, d, &n, why, sizeof(why)) != SX_OK) {
        /* Said by the query already, or, should a device vanish between
         * query and this call, by the open that follows. */
        sx_debug("verbs", "no device to list: %s", why);
        return 0;
    }
    for (unsigned i = 0; i < n && k < max; i++) {
        if (!d[i].listed || d[i].port == 0)
            continue;
        /* Both are SX_TL_DEVICE_MAX bytes, NUL terminated. */
        size_t len = strnlen(d[i].name, SX_TL_DEVICE_MAX - 1);
        memcpy(names[k], d[i].name, len);
        names[k++][len] = '\0';
    }
    return (int)k;
}

/* ------------------------------------------------------------------ */
/* The interface                                                        */

typedef struct verbs_dest {
    struct ibv_ah *ah;
    uint32_t ah_ref; /* the AH cache's reference */
    uint32_t qpn, qkey;
    uint32_t next_free; /* link in the free list while !live */
    bool live;
} verbs_dest_t;

typedef struct verbs_iface {
    sx_tl_iface_t base;
    char dev_name[SX_TL_DEVICE_MAX];
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_comp_channel *channel;
    struct ibv_cq *scq, *rcq;
    struct ibv_qp *qp;
    struct ibv_mr *rx_mr, *tx_mr;
    uint8_t port;
    uint8_t link_layer;
    int gid_index;
    int fatal;       /* SX_OK, or the status the interface died with */
    bool fatal_told; /* poll has reported it */
    bool armed;      /* notification requested and nothing completed since */
    bool closing;    /* the queue pair is gone: AHs need no draining */
    sx_verbs_sizing_t size;

    uint8_t addr[SX_VERBS_ADDR_LEN]; /* the card address */

    /* Destinations; slots are reused through a free list. */
    sx_verbs_ah_cache_t *ahs;
    verbs_dest_t *dests;
    uint32_t ndests, cap, free_head;

    /* Sends: slot i is send work request i and bounce buffer i. */
    uint8_t *tx_mem;
    unsigned ntx;
    unsigned *tx_free; /* stack of free slot indices */
    unsigned tx_nfree;
    bool *tx_busy;

    /* Receives: buffer i is receive work request i. */
    uint8_t *rx_mem;
    unsigned nrx;
    bool *rx_posted;
    unsigned *repost; /* buffers to post again at the next poll */
    unsigned nrepost;

    /* Completions an arm's last check found, handed up by the next poll. */
    struct ibv_wc stash[VERBS_CQ_BATCH];
    unsigned nstash, stash_pos;

    unsigned async_tick;
    uint64_t tx_errors, rx_errors;
} verbs_iface_t;

static void verbs_close(sx_tl_iface_t *iface);

/* Marks the interface dead; the first cause is the one kept and logged. */
static int verbs_die(verbs_iface_t *v, const char *what)
{
    if (v->fatal == SX_OK) {
        sx_error("verbs", "%s port %u: %s; the interface stops (peers over it will time out)",
                 v->dev_name, (unsigned)v->port, what);
        v->fatal = SX_ERR_IO;
    }
    return v->fatal;
}

/* Posts receive buffers @p idx[0..n) in chains of rx_batch; returns how
 * many the device took. */
static unsigned verbs_post_recvs(verbs_iface_t *v, const unsigned *idx, unsigned n)
{
    struct ibv_recv_wr wr[SX_VERBS_RX_BATCH];
    struct ibv_sge sge[SX_VERBS_RX_BATCH];
    unsigned done = 0;

    while (done < n) {
        unsigned k = n - done < v->size.rx_batch ? n - done : v->size.rx_batch;
        for (unsigned j = 0; j < k; j++) {
            unsigned i = idx[done + j];
            sge[j] =
                (struct ibv_sge){.addr = (uintptr_t)(v->rx_mem + (size_t)i * v->size.rx_buf_len),
                                 .length = (uint32_t)v->size.rx_buf_len,
                                 .lkey = v->rx_mr->lkey};
            wr[j] = (struct ibv_recv_wr){.wr_id = i,
                                         .next = j + 1 < k ? &wr[j + 1] : NULL,
                                         .sg_list = &sge[j],
                                         .num_sge = 1};
        }
        struct ibv_recv_wr *bad = NULL;
        int rc = ibv_post_recv(v->qp, wr, &bad);
        unsigned ok = k;
        if (rc != 0) {
            ok = bad != NULL && bad >= wr && bad < wr + k ? (unsigned)(bad - wr) : 0;
            sx_debug("verbs", "%s: ibv_post_recv took %u of %u: %s", v->dev_name, ok, k,
                     strerror(rc));
        }
        for (unsigned j = 0; j < ok; j++)
            v->rx_posted[idx[done + j]] = true;
        done += ok;
        if (ok < k)
            break;
    }
    return done;
}

/* Posts what poll handed up last time; what the device refuses waits. */
static void verbs_repost(verbs_iface_t *v)
{
    unsigned done = verbs_post_recvs(v, v->repost, v->nrepost);

    memmove(v->repost, v->repost + done, (v->nrepost - done) * sizeof(*v->repost));
    v->nrepost -= done;
}

/* Reads send completions, giving their slots back. */
static void verbs_reap_tx(verbs_iface_t *v)
{
    struct ibv_wc wc[VERBS_CQ_BATCH];

    while (v->tx_nfree < v->ntx && v->fatal == SX_OK) {
        unsigned busy = v->ntx - v->tx_nfree;
        int got = ibv_poll_cq(v->scq, busy < VERBS_CQ_BATCH ? (int)busy : VERBS_CQ_BATCH, wc);
        if (got < 0) {
            (void)verbs_die(v, "ibv_poll_cq on the send queue failed");
            return;
        }
        if (got == 0)
            return;
        for (int i = 0; i < got; i++) {
            uint64_t s = wc[i].wr_id;
            /* The id comes back from the device: checked, never trusted. */
            if (s >= v->ntx || !v->tx_busy[s]) {
                sx_debug("verbs", "%s: a send completion for no slot of ours (%llu)", v->dev_name,
                         (unsigned long long)s);
                continue;
            }
            v->tx_busy[s] = false;
            v->tx_free[v->tx_nfree++] = (unsigned)s;
            if (wc[i].status == IBV_WC_SUCCESS)
                continue;
            v->tx_errors++;
            if (wc[i].status == IBV_WC_WR_FLUSH_ERR) {
                (void)verbs_die(v, "sends are flushed: the queue pair is in the error state");
                return;
            }
            /* A datagram lost at the source: the layer above retransmits. */
            sx_warn_ratelimited("verbs", "%s: a send failed: %s (%llu send errors so far)",
                                v->dev_name, ibv_wc_status_str(wc[i].status),
                                (unsigned long long)v->tx_errors);
        }
    }
}

/* One receive completion: an event in @p ev when it carries a datagram. */
static void verbs_rx_wc(verbs_iface_t *v, const struct ibv_wc *wc, sx_tl_event_t *ev, unsigned *n)
{
    uint64_t i = wc->wr_id;

    if (i >= v->nrx || !v->rx_posted[i]) {
        v->rx_errors++;
        sx_debug("verbs", "%s: a receive completion for no buffer of ours (%llu)", v->dev_name,
                 (unsigned long long)i);
        return;
    }
    v->rx_posted[i] = false;
    v->repost[v->nrepost++] = (unsigned)i;
    if (wc->status != IBV_WC_SUCCESS) {
        if (wc->status == IBV_WC_WR_FLUSH_ERR) {
            (void)verbs_die(v, "receives are flushed: the queue pair is in the error state");
        } else if (wc->status == IBV_WC_LOC_LEN_ERR) {
            v->base.stats.rx_truncated++;
        } else {
            v->rx_errors++;
            sx_warn_ratelimited("verbs", "%s: a receive failed: %s (%llu receive errors so far)",
                                v->dev_name, ibv_wc_status_str(wc->status),
                                (unsigned long long)v->rx_errors);
        }
        return;
    }
    /* byte_len counts the GRH room; anything shorter is not a datagram. */
    if (wc->byte_len < SX_VERBS_GRH_LEN) {
        v->rx_errors++;
        return;
    }
    size_t len = wc->byte_len - SX_VERBS_GRH_LEN;
    if (len > v->size.mtu) {
        v->base.stats.rx_truncated++;
        return;
    }
    ev[(*n)++] = (sx_tl_event_t){.type = SX_TL_EV_RECV,
                                 .status = SX_OK,
                                 .data = v->rx_mem + i * v->size.rx_buf_len + SX_VERBS_GRH_LEN,
                                 .len = len};
    v->base.stats.rx_datagrams++;
}

/*
 * Asks for the next completion event and checks that none slipped in
 * before the request: v->armed when the fd will announce the next one.
 * Events already on the channel are read and acknowledged first (the fd
 * is nonblocking).
 */
static void verbs_arm_now(verbs_iface_t *v)
{
    struct ibv_cq *cq = NULL;
    void *cq_ctx = NULL;
    unsigned events = 0;

    v->armed = false;
    while (ibv_get_cq_event(v->channel, &cq, &cq_ctx) == 0)
        events++;
    if (events > 0)
        ibv_ack_cq_events(v->rcq, events);
    if (v->stash_pos < v->nstash)
        return;
    int rc = ibv_req_notify_cq(v->rcq, 0);
    if (rc != 0) {
        sx_warn_ratelimited("verbs", "%s: ibv_req_notify_cq: %s", v->dev_name, strerror(rc));
        return;
    }
    int got = ibv_poll_cq(v->rcq, VERBS_CQ_BATCH, v->stash);
    if (got < 0) {
        (void)verbs_die(v, "ibv_poll_cq on the receive queue failed");
        return;
    }
    v->nstash = (unsigned)got;
    v->stash_pos = 0;
    v->armed = (got == 0);
}

/* Reads the device's asynchronous events; the fatal ones kill the
 * interface. The async fd is nonblocking. */
static void verbs_check_async(verbs_iface_t *v)
{
    struct ibv_async_event ev;

    while (ibv_get_async_event(v->ctx, &ev) == 0) {
        enum ibv_event_type t = ev.event_type;
        int port = ev.element.port_num;
        ibv_ack_async_event(&ev);
        switch (t) {
        case IBV_EVENT_CQ_ERR:
        case IBV_EVENT_QP_FATAL:
        case IBV_EVENT_QP_REQ_ERR:
        case IBV_EVENT_QP_ACCESS_ERR:
        case IBV_EVENT_DEVICE_FATAL: {
            char what[96];
            snprintf(what, sizeof(what), "asynchronous event: %s", ibv_event_type_str(t));
            (void)verbs_die(v, what);
            break;
        }
        case IBV_EVENT_PORT_ERR:
            if (port == v->port)
                sx_warn("verbs", "%s port %d went down; datagrams are lost until it is back",
                        v->dev_name, port);
            break;
        case IBV_EVENT_PORT_ACTIVE:
            if (port == v->port)
                sx_info("verbs", "%s port %d is active again", v->dev_name, port);
            break;
        default:
            sx_debug("verbs", "%s: asynchronous event %s", v->dev_name, ibv_event_type_str(t));
            break;
        }
    }
}

static int verbs_set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl >= 0 && fcntl(fd, F_SETFL, fl | O_NONBLOCK) == 0 ? SX_OK : SX_ERR_IO;
}

static int verbs_fail(verbs_iface_t *v, const char *what, int err)
{
    sx_error("verbs", "%s port %u: %s: %s", v->dev_name, (unsigned)v->port, what, strerror(err));
    return err == ENOMEM ? SX_ERR_NO_MEMORY : SX_ERR_NO_DEVICE;
}

/*
 * Chooses the GID the card carries: on Ethernet the first RoCE v2 GID,
 * IPv4-mapped preferred, else the first valid one; on InfiniBand the first
 * valid one. -1 when the port has none.
 */
static int verbs_pick_gid(verbs_iface_t *v, int tbl_len, union ibv_gid *gid_p)
{
    static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    static const uint8_t zero[16] = {0};
    bool eth = v->link_layer == IBV_LINK_LAYER_ETHERNET;
    int first = -1, v2 = -1, v2v4 = -1;
    union ibv_gid g_first, g_v2, g_v2v4;

    for (int i = 0; i < tbl_len && v2v4 < 0; i++) {
        struct ibv_gid_entry e;
        union ibv_gid g;
        int type = -1;
        int rc = ibv_query_gid_ex(v->ctx, v->port, (uint32_t)i, &e, 0);
        if (rc == 0) {
            g = e.gid;
            type = (int)e.gid_type;
        } else if (rc == EOPNOTSUPP || rc == ENOSYS) {
            /* A kernel without the GID table ioctl: no types known. */
            if (ibv_query_gid(v->ctx, v->port, i, &g) != 0)
                continue;
        } else {
            continue; /* ENODATA: an empty entry */
        }
        if (memcmp(g.raw, zero, sizeof(zero)) == 0)
            continue;
        if (first < 0) {
            first = i;
            g_first = g;
            if (!eth)
                break;
        }
        if (type == IBV_GID_TYPE_ROCE_V2 && v2 < 0) {
            v2 = i;
            g_v2 = g;
        }
        if (type == IBV_GID_TYPE_ROCE_V2 && memcmp(g.raw, v4mapped, sizeof(v4mapped)) == 0) {
            v2v4 = i;
            g_v2v4 = g;
        }
    }
    if (v2v4 >= 0) {
        *gid_p = g_v2v4;
        return v2v4;
    }
    if (v2 >= 0) {
        *gid_p = g_v2;
        return v2;
    }
    if (first >= 0)
        *gid_p = g_first;
    return first;
}

static int verbs_ah_create(void *arg, const sx_verbs_ah_key_t *key, void **handle_p)
{
    verbs_iface_t *v = arg;
    struct ibv_ah_attr at;

    memset(&at, 0, sizeof(at));
    at.dlid = key->lid;
    at.sl = key->sl;
    at.port_num = key->port;
    if (key->flags & SX_VERBS_ADDR_GLOBAL) {
        at.is_global = 1;
        memcpy(at.grh.dgid.raw, key->gid, sizeof(at.grh.dgid.raw));
        at.grh.sgid_index = (uint8_t)v->gid_index;
        at.grh.hop_limit = VERBS_HOP_LIMIT;
    }
    /* On RoCE this resolves the GID's MAC address, which may wait briefly
     * on the kernel's neighbour table. */
    struct ibv_ah *ah = ibv_create_ah(v->pd, &at);
    if (ah == NULL) {
        int err = errno;
        char gid[INET6_ADDRSTRLEN] = "-";
        if (at.is_global)
            (void)inet_ntop(AF_INET6, key->gid, gid, sizeof(gid));
        sx_warn("verbs", "%s port %u: ibv_create_ah for lid 0x%x gid %s sl %u: %s", v->dev_name,
                (unsigned)v->port, (unsigned)key->lid, gid, (unsigned)key->sl, strerror(err));
        return err == ENOMEM ? SX_ERR_NO_MEMORY : SX_ERR_PEER_UNREACHABLE;
    }
    *handle_p = ah;
    return SX_OK;
}

static void verbs_ah_destroy(void *arg, void *handle)
{
    verbs_iface_t *v = arg;

    /* An evicted handle may still be named by a send in the queue (its
     * destination was removed just before): wait for the queue to drain,
     * which takes microseconds. At close the queue pair is gone first. */
    if (!v->closing) {
        uint64_t deadline = sx_time_ns() + VERBS_DRAIN_NS;
        while (v->tx_nfree < v->ntx && v->fatal == SX_OK && sx_time_ns() < deadline)
            verbs_reap_tx(v);
    }
    int rc = ibv_destroy_ah(handle);
    if (rc != 0)
        sx_debug("verbs", "%s: ibv_destroy_ah: %s", v->dev_name, strerror(rc));
}

/* The queue pair through INIT, with every receive posted, to RTS. */
static int verbs_qp_up(verbs_iface_t *v)
{
    struct ibv_qp_attr a;
    int rc;

    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = v->port;
    a.qkey = VERBS_QKEY;
    rc = ibv_modify_qp(v->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
    if (rc != 0)
        return verbs_fail(v, "ibv_modify_qp to INIT", rc);
    /* Before RTR, so that nothing that arrives finds the queue empty. */
    for (unsigned i = 0; i < v->nrx; i++)
        v->repost[i] = i;
    unsigned posted = verbs_post_recvs(v, v->repost, v->nrx);
    if (posted < v->nrx) {
        sx_error("verbs", "%s port %u: the receive queue took %u of %u buffers", v->dev_name,
                 (unsigned)v->port, posted, v->nrx);
        return SX_ERR_NO_DEVICE;
    }
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR;
    if ((rc = ibv_modify_qp(v->qp, &a, IBV_QP_STATE)) != 0)
        return verbs_fail(v, "ibv_modify_qp to RTR", rc);
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = 0;
    if ((rc = ibv_modify_qp(v->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN)) != 0)
        return verbs_fail(v, "ibv_modify_qp to RTS", rc);
    return SX_OK;
}

/* Queues, buffers and the queue pair, sized from the device. */
static int verbs_open_queues(verbs_iface_t *v, const sx_tl_config_t *config,
                             const struct ibv_device_attr *da, const struct ibv_port_attr *pa)
{
    char why[SX_TL_DETAIL_MAX];
    sx_verbs_dev_limits_t lim = {.max_qp_wr = (uint32_t)da->max_qp_wr,
                                 .max_cqe = (uint32_t)da->max_cqe,
                                 .max_sge = (uint32_t)da->max_sge,
                                 .max_inline_data = 0, /* ibv_query_device does not say */
                                 .active_mtu = pa->active_mtu};
    sx_verbs_sizing_req_t req = {.rx_bytes = config->rcvbuf, .tx_bytes = config->sndbuf};
    int rc = sx_verbs_size_queues(&lim, &req, &v->size, why, sizeof(why));

    if (rc != SX_OK) {
        sx_error("verbs", "%s port %u: %s", v->dev_name, (unsigned)v->port, why);
        return rc;
    }
    v->ntx = v->size.sq_depth;
    v->nrx = v->size.rq_depth;

    if ((v->channel = ibv_create_comp_channel(v->ctx)) == NULL)
        return verbs_fail(v, "ibv_create_comp_channel", errno);
    if (verbs_set_nonblock(v->channel->fd) != SX_OK ||
        verbs_set_nonblock(v->ctx->async_fd) != SX_OK)
        return verbs_fail(v, "making the event fds nonblocking", errno);
    v->rcq = ibv_create_cq(v->ctx, (int)v->size.recv_cqe, NULL, v->channel, 0);
    if (v->rcq == NULL)
        return verbs_fail(v, "ibv_create_cq (receives)", errno);
    v->scq = ibv_create_cq(v->ctx, (int)v->size.send_cqe, NULL, NULL, 0);
    if (v->scq == NULL)
        return verbs_fail(v, "ibv_create_cq (sends)", errno);

    size_t rx_bytes = (size_t)v->nrx * v->size.rx_buf_len, tx_bytes = (size_t)v->ntx * v->size.mtu;
    void *rx = NULL, *tx = NULL;
    if (posix_memalign(&rx, 4096, rx_bytes) != 0 || posix_memalign(&tx, 4096, tx_bytes) != 0) {
        free(rx);
        return SX_ERR_NO_MEMORY;
    }
    v->rx_mem = rx;
    v->tx_mem = tx;
    v->tx_free = calloc(v->ntx, sizeof(*v->tx_free));
    v->tx_busy = calloc(v->ntx, sizeof(*v->tx_busy));
    v->rx_posted = calloc(v->nrx, sizeof(*v->rx_posted));
    v->repost = calloc(v->nrx, sizeof(*v->repost));
    if (v->tx_free == NULL || v->tx_busy == NULL || v->rx_posted == NULL || v->repost == NULL)
        return SX_ERR_NO_MEMORY;
    for (unsigned i = 0; i < v->ntx; i++)
        v->tx_free[i] = v->ntx - 1 - i;
    v->tx_nfree = v->ntx;
    if ((v->rx_mr = ibv_reg_mr(v->pd, v->rx_mem, rx_bytes, IBV_ACCESS_LOCAL_WRITE)) == NULL)
        return verbs_fail(v, "ibv_reg_mr (receive buffers)", errno);
    if ((v->tx_mr = ibv_reg_mr(v->pd, v->tx_mem, tx_bytes, 0)) == NULL)
        return verbs_fail(v, "ibv_reg_mr (send buffers)", errno);

    struct ibv_qp_init_attr qa;
    memset(&qa, 0, sizeof(qa));
    qa.send_cq = v->scq;
    qa.recv_cq = v->rcq;
    qa.qp_type = IBV_QPT_UD;
    qa.cap = (struct ibv_qp_cap){.max_send_wr = v->ntx,
                                 .max_recv_wr = v->nrx,
                                 .max_send_sge = v->size.send_sge,
                                 .max_recv_sge = 1,
                                 .max_inline_data = v->size.max_inline};
    /* ibv_query_device does not say how much inline data a queue pair
     * may carry, and some drivers refuse a queue pair that asks for more
     * than they have instead of granting less: halve until one is taken,
     * down to none. */
    for (;;) {
        v->qp = ibv_create_qp(v->pd, &qa);
        if (v->qp != NULL || qa.cap.max_inline_data == 0)
            break;
        sx_debug("verbs", "%s: a queue pair with %u inline bytes: %s", v->dev_name,
                 qa.cap.max_inline_data, strerror(errno));
        qa.cap.max_inline_data = qa.cap.max_inline_data > 32 ? qa.cap.max_inline_data / 2 : 0;
    }
    if (v->qp == NULL)
        return verbs_fail(v, "ibv_create_qp (UD)", errno);
    /* The driver writes back what it granted. */
    v->size.max_inline =
        qa.cap.max_inline_data < v->size.mtu ? qa.cap.max_inline_data : (unsigned)v->size.mtu;
    if (qa.cap.max_send_sge < v->size.send_sge)
        v->size.send_sge = qa.cap.max_send_sge;
    return verbs_qp_up(v);
}

/* Opens the device called @p name (or the first usable one) and finds its
 * first ACTIVE port. */
static int verbs_open_device(verbs_iface_t *v, const sx_tl_config_t *config)
{
    verbs_dev_info_t d[VERBS_DEVS_MAX];
    char why[SX_TL_DETAIL_MAX];
    unsigned n = 0;
    const char *want = config->device != NULL && config->device[0] != '\0' ? config->device : NULL;
    int rc = verbs_find(config, d, &n, why, sizeof(why));

    if (rc != SX_OK) {
        sx_error("verbs", "shard %u: %s", config->shard, why);
        return rc;
    }
    const verbs_dev_info_t *pick = NULL;
    for (unsigned i = 0; i < n && pick == NULL; i++) {
        if (want != NULL ? strcmp(d[i].name, want) == 0 : d[i].listed && d[i].port != 0)
            pick = &d[i];
    }
    if (pick == NULL || !pick->listed || pick->port == 0) {
        char found[128];
        verbs_names(d, n, false, found, sizeof(found));
        sx_error("verbs", "shard %u: device %s: %s (RDMA devices here: %s)", config->shard,
                 want != NULL ? want : "(the first usable)",
                 pick == NULL    ? "no such RDMA device"
                 : !pick->listed ? "not among SX_NET_DEVICES"
                                 : pick->why,
                 found);
        return SX_ERR_NO_DEVICE;
    }
    snprintf(v->dev_name, sizeof(v->dev_name), "%s", pick->name);

    int nd = 0, err = ENODEV; /* gone since the scan, unless open says otherwise */
    struct ibv_device **list = ibv_get_device_list(&nd);
    for (int i = 0; list != NULL && i < nd && v->ctx == NULL; i++) {
        if (strcmp(ibv_get_device_name(list[i]), v->dev_name) == 0 &&
            (v->ctx = ibv_open_device(list[i])) == NULL)
            err = errno;
    }
    /* An open context outlives the list. */
    if (list != NULL)
        ibv_free_device_list(list);
    if (v->ctx == NULL)
        return verbs_fail(v, "ibv_open_device", err);
    return SX_OK;
}

static int verbs_open(const sx_tl_config_t *config, sx_tl_iface_t **iface_p)
{
    struct ibv_device_attr da;
    struct ibv_port_attr pa;
    int rc;

    memset(&pa, 0, sizeof(pa));
    if (config == NULL || iface_p == NULL)
        return SX_ERR_INVALID_PARAM;
    verbs_iface_t *v = calloc(1, sizeof(*v));
    if (v == NULL)
        return SX_ERR_NO_MEMORY;
    v->base.ops = &sx_tl_verbs_ops;
    v->free_head = VERBS_DEST_FREE_END;
    v->gid_index = -1;
    if ((rc = verbs_open_device(v, config)) != SX_OK)
        goto fail;
    if (ibv_query_device(v->ctx, &da) != 0) {
        rc = verbs_fail(v, "ibv_query_device", errno);
        goto fail;
    }
    /* The port may have gone down since the query: look again. */
    for (unsigned p = 1; p <= da.phys_port_cnt && p <= UINT8_MAX && v->port == 0; p++) {
        if (ibv_query_port(v->ctx, (uint8_t)p, &pa) == 0 && pa.state == IBV_PORT_ACTIVE)
            v->port = (uint8_t)p;
    }
    if (v->port == 0) {
        sx_error("verbs", "%s: no port is ACTIVE any more", v->dev_name);
        rc = SX_ERR_NO_DEVICE;
        goto fail;
    }
    v->link_layer = pa.link_layer;

    /* The card address: which GID, and whether a GRH is needed. */
    sx_verbs_addr_t me = {.lid = pa.lid, .qkey = VERBS_QKEY, .port = v->port, .sl = 0};
    union ibv_gid gid;
    v->gid_index = verbs_pick_gid(v, pa.gid_tbl_len, &gid);
    if (v->gid_index >= 0)
        memcpy(me.gid, gid.raw, sizeof(me.gid));
    if (v->link_layer == IBV_LINK_LAYER_ETHERNET) {
        if (v->gid_index < 0) {
            sx_error("verbs",
                     "%s port %u (RoCE) has no valid GID: its network interface has no IP "
                     "address?",
                     v->dev_name, (unsigned)v->port);
            rc = SX_ERR_NO_DEVICE;
            goto fail;
        }
        me.flags = SX_VERBS_ADDR_GLOBAL;
    } else if (pa.lid == 0) {
        sx_error("verbs",
                 "%s port %u (InfiniBand) has LID 0: no subnet manager has configured it "
                 "(is opensm running?)",
                 v->dev_name, (unsigned)v->port);
        rc = SX_ERR_NO_DEVICE;
        goto fail;
    }

    if ((v->pd = ibv_alloc_pd(v->ctx)) == NULL) {
        rc = verbs_fail(v, "ibv_alloc_pd", errno);
        goto fail;
    }
    if ((rc = verbs_open_queues(v, config, &da, &pa)) != SX_OK)
        goto fail;
    sx_verbs_ah_ops_t ah_ops = {.create = verbs_ah_create, .destroy = verbs_ah_destroy, .arg = v};
    if ((rc = sx_verbs_ah_cache_create(VERBS_AH_MAX, &ah_ops, &v->ahs)) != SX_OK)
        goto fail;
    me.qpn = v->qp->qp_num;
    size_t alen = 0;
    if ((rc = sx_verbs_addr_encode(&me, v->addr, sizeof(v->addr), &alen)) != SX_OK) {
        sx_error("verbs", "%s port %u: cannot encode our address (qpn 0x%x lid 0x%x)", v->dev_name,
                 (unsigned)v->port, (unsigned)me.qpn, (unsigned)me.lid);
        goto fail;
    }

    v->base.caps = (sx_tl_caps_t){
        .mtu = v->size.mtu,
        .inline_limit = v->size.max_inline,
        .tx_credits = v->ntx,
        .sync_send = 1,
        .rx_buffer = (size_t)v->nrx * v->size.mtu,
    };
    char text[128];
    sx_verbs_addr_str(v->addr, sizeof(v->addr), text, sizeof(text));
    sx_debug("verbs",
             "shard %u: %s port %u %s, mtu %zu, inline %u, %u send slots, %u receive buffers "
             "(batches of %u), wait fd %d, %s",
             config->shard, v->dev_name, (unsigned)v->port, verbs_link_name(v->link_layer),
             v->size.mtu, v->size.max_inline, v->ntx, v->nrx, v->size.rx_batch, v->channel->fd,
             text);
    *iface_p = &v->base;
    return SX_OK;
fail:
    verbs_close(&v->base);
    return rc;
}

static void verbs_close(sx_tl_iface_t *iface)
{
    verbs_iface_t *v = (verbs_iface_t *)iface;
    int rc;

    if (v == NULL)
        return;
    if (v->tx_errors != 0 || v->rx_errors != 0)
        sx_debug("verbs", "%s: closing after %llu send and %llu receive errors", v->dev_name,
                 (unsigned long long)v->tx_errors, (unsigned long long)v->rx_errors);
    /* The queue pair first: nothing may name an address handle or a
     * buffer after it is gone. */
    v->closing = true;
    if (v->qp != NULL && (rc = ibv_destroy_qp(v->qp)) != 0)
        sx_debug("verbs", "%s: ibv_destroy_qp: %s", v->dev_name, strerror(rc));
    sx_verbs_ah_cache_destroy(v->ahs);
    if (v->rcq != NULL) {
        /* ibv_destroy_cq waits for every event of the queue to be
         * acknowledged; read and acknowledge what the channel holds. */
        struct ibv_cq *cq = NULL;
        void *cq_ctx = NULL;
        unsigned events = 0;
        while (v->channel != NULL && ibv_get_cq_event(v->channel, &cq, &cq_ctx) == 0)
            events++;
        if (events > 0)
            ibv_ack_cq_events(v->rcq, events);
        if ((rc = ibv_destroy_cq(v->rcq)) != 0)
            sx_debug("verbs", "%s: ibv_destroy_cq: %s", v->dev_name, strerror(rc));
    }
    if (v->scq != NULL && (rc = ibv_destroy_cq(v->scq)) != 0)
        sx_debug("verbs", "%s: ibv_destroy_cq: %s", v->dev_name, strerror(rc));
    if (v->channel != NULL && (rc = ibv_destroy_comp_channel(v->channel)) != 0)
        sx_debug("verbs", "%s: ibv_destroy_comp_channel: %s", v->dev_name, strerror(rc));
    if (v->rx_mr != NULL && (rc = ibv_dereg_mr(v->rx_mr)) != 0)
        sx_debug("verbs", "%s: ibv_dereg_mr: %s", v->dev_name, strerror(rc));
    if (v->tx_mr != NULL && (rc = ibv_dereg_mr(v->tx_mr)) != 0)
        sx_debug("verbs", "%s: ibv_dereg_mr: %s", v->dev_name, strerror(rc));
    if (v->pd != NULL && (rc = ibv_dealloc_pd(v->pd)) != 0)
        sx_debug("verbs", "%s: ibv_dealloc_pd: %s", v->dev_name, strerror(rc));
    if (v->ctx != NULL && ibv_close_device(v->ctx) != 0)
        sx_debug("verbs", "%s: ibv_close_device: %s", v->dev_name, strerror(errno));
    free(v->rx_mem);
    free(v->tx_mem);
    free(v->tx_free);
    free(v->tx_busy);
    free(v->rx_posted);
    free(v->repost);
    free(v->dests);
    free(v);
}

static int verbs_local_addr(sx_tl_iface_t *iface, void *buf, size_t *len_p)
{
    verbs_iface_t *v = (verbs_iface_t *)iface;

    if (buf == NULL || len_p == NULL)
        return SX_ERR_INVALID_PARAM;
    if (*len_p < sizeof(v->addr))
        return SX_ERR_TRUNCATED;
    memcpy(buf, v->addr, sizeof(v->addr));
    *len_p = sizeof(v->addr);
    return SX_OK;
}

/* Decodes and judges a peer's address: SX_OK with *a, SX_ERR_INVALID_PARAM
 * for malformed bytes, SX_ERR_PEER_UNREACHABLE for another link layer. */
static int verbs_decode_peer(const verbs_iface_t *v, const void *addr, size_t len,
                             sx_verbs_addr_t *a)
{
    if (sx_verbs_addr_decode(addr, len, a) != SX_OK)
        return SX_ERR_INVALID_PARAM;
    /* RoCE ports have no LID and need a GRH; InfiniBand ports have a LID.
     * An address of the other kind is well formed but out of reach. */
    bool roce_addr = a->lid == 0 && (a->flags & SX_VERBS_ADDR_GLOBAL);
    if (roce_addr != (v->link_layer == IBV_LINK_LAYER_ETHERNET))
        return SX_ERR_PEER_UNREACHABLE;
    /* A GRH names our GID as its source: a port without one sends none. */
    if ((a->flags & SX_VERBS_ADDR_GLOBAL) && v->gid_index < 0)
        return SX_ERR_PEER_UNREACHABLE;
    /* A controlled Q_Key (bit 31) in a send means "the QP's own"; a peer
     * cannot ask for it. */
    return (a->qkey & 0x80000000u) ? SX_ERR_PEER_UNREACHABLE : SX_OK;
}

static int verbs_addr_check(sx_tl_iface_t *iface, const void *addr, size_t len)
{
    sx_verbs_addr_t a;

    return verbs_decode_peer((verbs_iface_t *)iface, addr, len, &a);
}

static void verbs_addr_str(sx_tl_iface_t *iface, const void *addr, size_t len, char *buf,
                           size_t cap)
{
    (void)iface;
    sx_verbs_addr_str(addr, len, buf, cap);
}

static int verbs_addr_insert(sx_tl_iface_t *iface, const void *addr, size_t len,
                             sx_tl_dest_t *dest_p)
{
    verbs_iface_t *v = (verbs_iface_t *)iface;
    sx_verbs_addr_t a;
    char text[128];

    if (dest_p == NULL)
        return SX_ERR_INVALID_PARAM;
    int rc = verbs_decode_peer(v, addr, len, &a);
    if (rc != SX_OK) {
        sx_verbs_addr_str(addr, len, text, sizeof(text));
        sx_debug("verbs", "%s: refusing the address %s: %s", v->dev_name, text,
                 rc == SX_ERR_INVALID_PARAM ? "malformed" : "another link layer or Q_Key");
        return rc;
    }

    /* The handle depends on the path only; without a GRH the GID is not
     * part of it, so addresses that differ only there share one. */
    sx_verbs_ah_key_t key = {.lid = a.lid, .sl = a.sl, .port = v->port, .flags = a.flags};
    if (a.flags & SX_VERBS_ADDR_GLOBAL)
        memcpy(key.gid, a.gid, sizeof(key.gid));
    uint32_t ref = 0;
    void *ah = NULL;
    rc = sx_verbs_ah_acquire(v->ahs, &key, &ref, &ah);
    if (rc != SX_OK) {
        sx_verbs_addr_str(addr, len, text, sizeof(text));
        sx_warn("verbs", "%s: no address handle for %s: %s", v->dev_name, text,
                rc == SX_ERR_FULL ? "all of them are in use" : sx_strerror(rc));
        return rc;
    }

    uint32_t slot;
    if (v->free_head != VERBS_DEST_FREE_END) {
        slot = v->free_head;
        v->free_head = v->dests[slot].next_free;
    } else {
        if (v->ndests == v->cap) {
            uint32_t cap = v->cap != 0 ? v->cap * 2 : 16;
            verbs_dest_t *d =
                cap > v->cap && cap < SX_TL_DEST_NONE ? realloc(v->dests, cap * sizeof(*d)) : NULL;
            if (d == NULL) {
                sx_verbs_ah_release(v->ahs, ref);
                sx_warn("verbs", "%s: no room for destination %u", v->dev_name, v->cap);
                return cap > v->cap ? SX_ERR_NO_MEMORY : SX_ERR_FULL;
            }
            v->dests = d;
            v->cap = cap;
        }
        slot = v->ndests++;
    }
    v->dests[slot] = (verbs_dest_t){.ah = ah,
                                    .ah_ref = ref,
                                    .qpn = a.qpn,
                                    .qkey = a.qkey,
                                    .next_free = VERBS_DEST_FREE_END,
                                    .live = true};
    *dest_p = slot;
    return SX_OK;
}

static void verbs_addr_remove(sx_tl_iface_t *iface, sx_tl_dest_t dest)
{
    verbs_iface_t *v = (verbs_iface_t *)iface;

    if (dest >= v->ndests || !v->dests[dest].live)
        return;
    /* The handle stays cached while unreferenced; sends to it still in the
     * queue complete normally (verbs_ah_destroy drains before eviction). */
    sx_verbs_ah_release(v->ahs, v->dests[dest].ah_ref);
    v->dests[dest].live = false;
    v->dests[dest].ah = NULL;
    v->dests[dest].next_free = v->free_head;
    v->free_head = dest;
}

/* Checks one tx; SX_OK with *len_p set, or why it is refused. */
static int verbs_check_tx(const verbs_iface_t *v, const sx_tl_tx_t *tx, size_t *len_p)
{
    size_t len = 0;

    if (tx->dest >= v->ndests || !v->dests[tx->dest].live || tx->iovcnt > SX_TL_IOV_MAX)
        return SX_ERR_INVALID_PARAM;
    for (unsigned i = 0; i < tx->iovcnt; i++) {
        if (tx->iov[i].iov_len > v->size.mtu - len)
            return SX_ERR_INVALID_PARAM;
        len += tx->iov[i].iov_len;
    }
    *len_p = len;
    return SX_OK;
}

/* Builds the work request of one checked datagram in a free slot. */
static void verbs_build_wr(verbs_iface_t *v, const sx_tl_tx_t *tx, size_t len,
                           struct ibv_send_wr *wr, struct ibv_sge *sge)
{
    unsigned s = v->tx_free[--v->tx_nfree];
    const verbs_dest_t *d = &v->dests[tx->dest];
    unsigned nsge = 0, nonempty = 0;
    unsigned flags = IBV_SEND_SIGNALED;

    v->tx_busy[s] = true;
    for (unsigned i = 0; i < tx->iovcnt; i++)
        nonempty += tx->iov[i].iov_len > 0;
    if (len <= v->size.max_inline && nonempty <= v->size.send_sge) {
        /* The driver copies inline data into the work request, before
         * ibv_post_send returns: the caller's iovecs serve as they are. */
        flags |= IBV_SEND_INLINE;
        for (unsigned i = 0; i < tx->iovcnt; i++) {
            if (tx->iov[i].iov_len > 0)
                sge[nsge++] = (struct ibv_sge){.addr = (uintptr_t)tx->iov[i].iov_base,
                                               .length = (uint32_t)tx->iov[i].iov_len};
        }
    } else {
        /* Ours until the completion gives the slot back. */
        uint8_t *to = v->tx_mem + (size_t)s * v->size.mtu;
        size_t off = 0;
        for (unsigned i = 0; i < tx->iovcnt; i++) {
            if (tx->iov[i].iov_len > 0)
                memcpy(to + off, tx->iov[i].iov_base, tx->iov[i].iov_len);
            off += tx->iov[i].iov_len;
        }
        if (len <= v->size.max_inline)
            flags |= IBV_SEND_INLINE;
        if (len > 0)
            sge[nsge++] = (struct ibv_sge){
                .addr = (uintptr_t)to, .length = (uint32_t)len, .lkey = v->tx_mr->lkey};
    }
    memset(wr, 0, sizeof(*wr));
    wr->wr_id = s;
    wr->sg_list = sge;
    wr->num_sge = (int)nsge;
    wr->opcode = IBV_WR_SEND;
    wr->send_flags = flags;
    wr->wr.ud.ah = d->ah;
    wr->wr.ud.remote_qpn = d->qpn;
    wr->wr.ud.remote_qkey = d->qkey;
}

/* What a refused ibv_post_send means for the datagram it refused. */
static int verbs_send_status(verbs_iface_t *v, int err)
{
    if (err == ENOMEM)
        return SX_ERR_AGAIN; /* the send queue is full: slots should have prevented it */
    sx_warn_ratelimited("verbs", "%s: ibv_post_send: %s", v->dev_name, strerror(err));
    return err == EINVAL ? SX_ERR_INVALID_PARAM : SX_ERR_IO;
}

static int verbs_post_send(sx_tl_iface_t *iface, const sx_tl_tx_t *tx, unsigned count,
                           unsigned *posted_p)
{
    verbs_iface_t *v = (verbs_iface_t *)iface;
    struct ibv_send_wr wr[VERBS_TX_BATCH];
    struct ibv_sge sge[VERBS_TX_BATCH][SX_TL_IOV_MAX];
    unsigned done = 0;
    int status = v->fatal;

    if (status == SX_OK && v->tx_nfree < count)
        verbs_reap_tx(v);
    while (status == SX_OK && done < count) {
        unsigned k = 0;
        /* One chain: every datagram up to the batch, the first refused
         * one, or the last free slot. */
        while (k < VERBS_TX_BATCH && done + k < count) {
            size_t len = 0;
            status = verbs_check_tx(v, &tx[done + k], &len);
            if (status != SX_OK)
                break;
            if (v->tx_nfree == 0) {
                verbs_reap_tx(v);
                if (v->tx_nfree == 0) {
                    status = v->fatal != SX_OK ? v->fatal : SX_ERR_AGAIN;
                    break;
                }
            }
            verbs_build_wr(v, &tx[done + k], len, &wr[k], sge[k]);
            if (k > 0)
                wr[k - 1].next = &wr[k];
            k++;
        }
        if (k == 0)
            break;
        struct ibv_send_wr *bad = NULL;
        int rc = ibv_post_send(v->qp, wr, &bad);
        if (rc != 0) {
            unsigned ok = bad != NULL && bad >= wr && bad < wr + k ? (unsigned)(bad - wr) : 0;
            for (unsigned j = ok; j < k; j++) {
                v->tx_busy[wr[j].wr_id] = false;
                v->tx_free[v->tx_nfree++] = (unsigned)wr[j].wr_id;
            }
            done += ok;
            status = verbs_send_status(v, rc);
            break;
        }
        done += k;
    }
    v->base.stats.tx_datagrams += done;
    if (status == SX_ERR_AGAIN)
        v->base.stats.tx_again++;
    if (posted_p != NULL)
        *posted_p = done;
    return status;
}

static int verbs_poll(sx_tl_iface_t *iface, sx_tl_event_t *events, unsigned max)
{
    verbs_iface_t *v = (verbs_iface_t *)iface;
    struct ibv_wc wc[VERBS_CQ_BATCH];
    unsigned n = 0;
    bool any = false;

    /* Reported once (the shard logs every report); the peers time out
     * above. */
    if (v->fatal != SX_OK && v->fatal_told)
        return 0;
    /* The buffers handed up last time are the caller's no longer. */
    if (v->nrepost > 0)
        verbs_repost(v);
    if (v->tx_nfree < v->ntx)
        verbs_reap_tx(v);
    /* Keep half the buffers posted whatever the caller asks for. */
    unsigned cap = v->nrx > 1 ? v->nrx / 2 : 1;
    if (max > cap)
        max = cap;
    while (n < max && v->stash_pos < v->nstash && v->fatal == SX_OK) {
        any = true;
        verbs_rx_wc(v, &v->stash[v->stash_pos++], events, &n);
    }
    while (n < max && v->fatal == SX_OK) {
        unsigned want = max - n < VERBS_CQ_BATCH ? max - n : VERBS_CQ_BATCH;
        int got = ibv_poll_cq(v->rcq, (int)want, wc);
        if (got < 0) {
            (void)verbs_die(v, "ibv_poll_cq on the receive queue failed");
            break;
        }
        if (got == 0)
            break;
        any = true;
        for (int i = 0; i < got; i++)
            verbs_rx_wc(v, &wc[i], events, &n);
    }
    if (any) {
        v->armed = false;
    } else if (!v->armed && v->fatal == SX_OK) {
        /* What the re-arm's check finds is handed up now: a caller that
         * sleeps when poll returns nothing must not sleep on it. */
        verbs_arm_now(v);
        while (n < max && v->stash_pos < v->nstash && v->fatal == SX_OK)
            verbs_rx_wc(v, &v->stash[v->stash_pos++], events, &n);
    }
    if (++v->async_tick % VERBS_ASYNC_EVERY == 0)
        verbs_check_async(v);
    if (v->fatal != SX_OK) {
        v->fatal_told = true;
        return v->fatal;
    }
    return (int)n;
}

static int verbs_wait_fd(sx_tl_iface_t *iface)
{
    verbs_iface_t *v = (verbs_iface_t *)iface;
    return v->channel != NULL ? v->channel->fd : -1;
}

static int verbs_arm(sx_tl_iface_t *iface)
{
    verbs_iface_t *v = (verbs_iface_t *)iface;

    /* A dead interface has nothing more to announce. */
    if (v->fatal != SX_OK)
        return SX_OK;
    if (v->stash_pos < v->nstash)
        return SX_ERR_AGAIN;
    if (!v->armed)
        verbs_arm_now(v);
    return v->armed ? SX_OK : SX_ERR_AGAIN;
}

const sx_tl_ops_t sx_tl_verbs_ops = {
    .name = "verbs",
    .exclusivity = SX_TL_EXCL_HW,
    /* Lists the RDMA devices (ibv_get_device_list), opens each one that
     * SX_NET_DEVICES allows to find an ACTIVE port; any thread; may block
     * briefly (the first call loads the providers of the devices found). */
    .query = verbs_query,
    /* Opens context, protection domain, channel, queues and the UD queue
     * pair, registers and posts the buffers; may block briefly. */
    .open = verbs_open,
    /* Destroys the queue pair, the address handles and the rest; token
     * holder. */
    .close = verbs_close,
    /* The encoded address (verbs_addr.c); any thread. */
    .local_addr = verbs_local_addr,
    /* Decodes, takes an address handle from the cache (ibv_create_ah on a
     * miss, which on RoCE may wait briefly on neighbour resolution); token
     * holder. */
    .addr_insert = verbs_addr_insert,
    /* sx_verbs_addr_str; any thread. */
    .addr_str = verbs_addr_str,
    /* Decodes and compares the link layer; any thread; logs nothing. */
    .addr_check = verbs_addr_check,
    /* One variant: InfiniBand and RoCE addresses tell themselves apart
     * (addr_check). */
    .variant = NULL,
    /* The devices with an ACTIVE port that SX_NET_DEVICES allows; any
     * thread; may block briefly, as query. */
    .devices = verbs_devices,
    /* Drops the destination's reference on its address handle; token
     * holder. */
    .addr_remove = verbs_addr_remove,
    /* Inlines or copies each datagram (sync_send) and posts a batch as one
     * chain of work requests; token holder; never blocks. */
    .post_send = verbs_post_send,
    /* Reposts the last poll's buffers, reaps send completions and reads
     * receive completions in batches; token holder; never blocks. */
    .poll = verbs_poll,
    /* The receive queue's completion channel; any thread. */
    .wait_fd = verbs_wait_fd,
    /* ibv_req_notify_cq and a last check; token holder; never blocks. */
    .arm = verbs_arm,
};
