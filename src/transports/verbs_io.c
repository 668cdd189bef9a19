/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * verbs_io: the data path of a verbs interface: sends, receives, their
 * completions, the wait fd and arm, and the errors that stop an interface.
 * verbs.c opens the interface, with its queues and buffers; verbs_int.h is
 * what the files share. The shard's token holder is the only caller of
 * everything here, which never blocks.
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
 */
#include "transports/verbs_int.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <infiniband/verbs.h>

#include <shardx.h>

#include "common/log.h"
#include "transports/verbs_addr.h"

#define VERBS_TX_BATCH    32 /* send work requests per ibv_post_send chain */
#define VERBS_ASYNC_EVERY 1024

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
unsigned sx_verbs_post_recvs(verbs_iface_t *v, const unsigned *idx, unsigned n)
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
    unsigned done = sx_verbs_post_recvs(v, v->repost, v->nrepost);

    memmove(v->repost, v->repost + done, (v->nrepost - done) * sizeof(*v->repost));
    v->nrepost -= done;
}

/* Reads send completions, giving their slots back. */
void sx_verbs_reap_tx(verbs_iface_t *v)
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

int sx_verbs_post_send(sx_tl_iface_t *iface, const sx_tl_tx_t *tx, unsigned count,
                       unsigned *posted_p)
{
    verbs_iface_t *v = (verbs_iface_t *)iface;
    struct ibv_send_wr wr[VERBS_TX_BATCH];
    struct ibv_sge sge[VERBS_TX_BATCH][SX_TL_IOV_MAX];
    unsigned done = 0;
    int status = v->fatal;

    if (status == SX_OK && v->tx_nfree < count)
        sx_verbs_reap_tx(v);
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
                sx_verbs_reap_tx(v);
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

int sx_verbs_poll(sx_tl_iface_t *iface, sx_tl_event_t *events, unsigned max)
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
        sx_verbs_reap_tx(v);
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

unsigned sx_verbs_wait_fds(sx_tl_iface_t *iface, int fds[SX_TL_WAIT_FDS])
{
    verbs_iface_t *v = (verbs_iface_t *)iface;
    if (v->channel == NULL)
        return 0;
    fds[0] = v->channel->fd;
    return 1;
}

int sx_verbs_arm(sx_tl_iface_t *iface)
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
