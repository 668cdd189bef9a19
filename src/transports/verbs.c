/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * verbs: datagrams over libibverbs UD queue pairs (issue 7).
 *
 * Each interface opens its own device context, protection domain, two
 * completion queues and one unreliable-datagram queue pair on the first
 * ACTIVE port of its device (config->device, chosen by the engine's NIC
 * locality among those the devices slot listed, or the first usable one).
 * Receives complete on a queue with a completion channel, whose fd is the
 * interface's wait fd (wait_fds); sends on one without, so that a send never wakes a
 * sleeper. A shard's token holder is the only caller, so nothing here
 * locks; each interface owning its context keeps the device's own locks
 * uncontended too.
 *
 * The device-independent parts (the card address, the address-handle cache,
 * the sizing of the queues) are in verbs_addr.c, tested without hardware;
 * verbs.c, verbs_dev.c and verbs_io.c are the part that needs a device.
 * Without one, query says so and the engine never opens an interface.
 *
 * This file opens and closes an interface and holds its card address and
 * destinations; verbs_dev.c finds the devices (the query and devices
 * slots) and verbs_io.c is the data path; verbs_int.h is what they share.
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
 */
#include "transports/verbs_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <infiniband/verbs.h>

#include <shardx.h>

#include "common/log.h"
#include "common/time.h"
#include "transports/verbs_addr.h"

/* The Q_Key of every interface's queue pair ("SXQK"); bit 31 clear, since
 * a controlled Q_Key cannot be sent to by an unprivileged process. */
#define VERBS_QKEY          0x5358514bu
#define VERBS_AH_MAX        16384
#define VERBS_HOP_LIMIT     64 /* RoCE v2 routes its UDP/IP packets */
#define VERBS_DEST_FREE_END UINT32_MAX
#define VERBS_DRAIN_NS      (100ull * 1000000ull)

/* ------------------------------------------------------------------ */
/* The interface                                                        */

static void verbs_close(sx_tl_iface_t *iface);

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
            sx_verbs_reap_tx(v);
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
    unsigned posted = sx_verbs_post_recvs(v, v->repost, v->nrx);
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
    int rc = sx_verbs_find(config, d, &n, why, sizeof(why));

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
        sx_verbs_names(d, n, false, found, sizeof(found));
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
             config->shard, v->dev_name, (unsigned)v->port, sx_verbs_link_name(v->link_layer),
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

const sx_tl_ops_t sx_tl_verbs_ops = {
    .name = "verbs",
    .exclusivity = SX_TL_EXCL_HW,
    /* Lists the RDMA devices (ibv_get_device_list), opens each one that
     * SX_NET_DEVICES allows to find an ACTIVE port; any thread; may block
     * briefly (the first call loads the providers of the devices found). */
    .query = sx_verbs_query,
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
    .devices = sx_verbs_devices,
    /* Drops the destination's reference on its address handle; token
     * holder. */
    .addr_remove = verbs_addr_remove,
    /* Inlines or copies each datagram (sync_send) and posts a batch as one
     * chain of work requests; token holder; never blocks. */
    .post_send = sx_verbs_post_send,
    /* Reposts the last poll's buffers, reaps send completions and reads
     * receive completions in batches; token holder; never blocks. */
    .poll = sx_verbs_poll,
    /* The receive queue's completion channel; any thread. */
    .wait_fds = sx_verbs_wait_fds,
    /* ibv_req_notify_cq and a last check; token holder; never blocks. */
    .arm = sx_verbs_arm,
};
