/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ofi_io: the data path of an ofi interface: sends, receives and the wait
 * fd. ofi.c opens the interface, sizing its send slots and receive buffers
 * (OFI_TX_MAX, OFI_RX_*), and ofi_int.h is what the files share. The
 * shard's token holder is the only caller of everything here, which never
 * blocks.
 *
 * Sends (caps.sync_send): the layer above reuses its buffers as soon as
 * post_send returns (handshake control messages, the shared ACK slots), so
 * every datagram is either injected (FI_INJECT, up to the provider's
 * inject_size: the provider copies it before fi_sendmsg returns) or copied
 * into a bounce buffer owned by the interface. Each send takes a slot of
 * tx_attr->size (at most OFI_TX_MAX) and gives it back when its completion
 * is read from the send queue, so the provider's queue never overflows;
 * with no slot free, post_send answers SX_ERR_AGAIN. Within a batch every
 * datagram but the last carries FI_MORE when the next one is known to go
 * out (valid, and a slot for it), a hint that lets a NIC provider ring its
 * doorbell once; providers without a use for it ignore it, and one that
 * refuses it (FI_EBADFLAGS) gets no more of it, for sends or receives.
 * Should a send after a FI_MORE one be refused (the provider's queue
 * full), the provider flushes at its next progress call.
 *
 * Receives: OFI_RX_BYTES of buffers (OFI_RX_MIN to OFI_RX_MAX of them, at
 * most rx_attr->size), each one byte longer than the mtu, are posted at
 * open. poll reads completions in batches (fi_cq_read); the buffers it
 * hands up are posted again at the start of the next poll, which is what
 * keeps their data valid until then. A datagram that fills the extra byte
 * was longer than the mtu and is dropped (stats.rx_truncated), as is one
 * the provider reports as truncated (FI_ETRUNC): the udp provider cuts long
 * datagrams silently, so the spare byte is what tells.
 *
 * Blocking: the wait fd (wait_fds) is the receive queue's wait object; arm calls
 * fi_trywait, which resets the provider's signal and says whether
 * completions are pending. poll also re-arms when it finds nothing, so
 * that the fd does not stay readable for callers that only use the fd
 * (sx_engine_fd).
 */
#include "transports/ofi_int.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include <shardx.h>

#include "common/log.h"

#define OFI_CQ_BATCH     32 /* completions per fi_cq_read */
#define OFI_SEND_RETRIES 16

/* Posts receive slot @p i; FI_MORE when another follows at once. */
int sx_ofi_post_recv(ofi_iface_t *o, unsigned i, bool more)
{
    ofi_rx_slot_t *r = &o->rx[i];
    struct iovec v = {.iov_base = r->buf, .iov_len = o->rx_len};
    struct fi_msg m = {
        .msg_iov = &v, .desc = NULL, .iov_count = 1, .addr = FI_ADDR_UNSPEC, .context = &r->ctx};

    ssize_t rc = fi_recvmsg(o->ep, &m, more && o->use_more ? FI_MORE : 0);
    if (rc == -FI_EBADFLAGS && more && o->use_more) {
        /* A provider that refuses the hint: post without it from now on. */
        o->use_more = false;
        rc = fi_recvmsg(o->ep, &m, 0);
    }
    return rc == 0 ? SX_OK : (int)rc;
}

/* Posts what poll handed up last time; what the provider refuses waits. */
static void ofi_repost(ofi_iface_t *o)
{
    unsigned done = 0;

    while (done < o->nrepost) {
        int rc = sx_ofi_post_recv(o, o->repost[done], done + 1 < o->nrepost);
        if (rc != SX_OK) {
            if (rc != -FI_EAGAIN)
                sx_debug("ofi", "posting a receive: %s", ofi_err(rc));
            break;
        }
        done++;
    }
    memmove(o->repost, o->repost + done, (o->nrepost - done) * sizeof(*o->repost));
    o->nrepost -= done;
}

static void ofi_tx_done(ofi_iface_t *o, void *ctx)
{
    ofi_tx_slot_t *s = ctx;
    if (s < o->tx || s >= o->tx + o->ntx || o->tx_nfree >= o->ntx)
        return; /* not one of ours: nothing to give back */
    o->tx_free[o->tx_nfree++] = (unsigned)(s - o->tx);
}

/* Reads send completions, giving their slots back. */
static void ofi_reap_tx(ofi_iface_t *o)
{
    struct fi_cq_msg_entry e[OFI_CQ_BATCH];

    while (o->tx_nfree < o->ntx) {
        size_t busy = o->ntx - o->tx_nfree;
        ssize_t n = fi_cq_read(o->txcq, e, busy < OFI_CQ_BATCH ? busy : OFI_CQ_BATCH);
        if (n == -FI_EAGAIN)
            break;
        if (n == -FI_EAVAIL) {
            struct fi_cq_err_entry err;
            memset(&err, 0, sizeof(err));
            if (fi_cq_readerr(o->txcq, &err, 0) != 1)
                break;
            /* A datagram lost at the source: the layer above retransmits. */
            o->tx_errors++;
            sx_debug("ofi", "send failed: %s", ofi_err(err.err));
            ofi_tx_done(o, err.op_context);
            continue;
        }
        if (n < 0) {
            sx_warn("ofi", "reading send completions: %s", ofi_err(n));
            break;
        }
        for (ssize_t i = 0; i < n; i++)
            ofi_tx_done(o, e[i].op_context);
    }
}

static void ofi_arm_now(ofi_iface_t *o)
{
    struct fid *f = &o->rxcq->fid;
    int rc = fi_trywait(o->fabric, &f, 1);

    /* A provider without trywait (-FI_ENOSYS) has nothing to reset. */
    o->armed = (rc == FI_SUCCESS || rc == -FI_ENOSYS);
}

/* Checks one tx; SX_OK with *len_p set, or why it is refused. */
static int ofi_check_tx(const ofi_iface_t *o, const sx_tl_tx_t *tx, size_t *len_p)
{
    size_t len = 0;

    if (tx->dest >= o->ndests || !o->dests[tx->dest].live || tx->iovcnt > SX_TL_IOV_MAX)
        return SX_ERR_INVALID_PARAM;
    for (unsigned i = 0; i < tx->iovcnt; i++) {
        if (tx->iov[i].iov_len > o->base.caps.mtu - len)
            return SX_ERR_INVALID_PARAM;
        len += tx->iov[i].iov_len;
    }
    *len_p = len;
    return SX_OK;
}

static void ofi_gather(const sx_tl_tx_t *tx, uint8_t *to)
{
    size_t off = 0;
    for (unsigned i = 0; i < tx->iovcnt; i++) {
        if (tx->iov[i].iov_len > 0)
            memcpy(to + off, tx->iov[i].iov_base, tx->iov[i].iov_len);
        off += tx->iov[i].iov_len;
    }
}

/* What a refused send means for the datagram it refused. */
static int ofi_send_status(ofi_iface_t *o, ssize_t rc)
{
    switch ((int)-rc) {
    case FI_EAGAIN:
    case FI_ENOBUFS:
    case FI_ENOMEM:
        return SX_ERR_AGAIN;
    case FI_EMSGSIZE:
    case FI_EINVAL:
        return SX_ERR_INVALID_PARAM;
    case FI_ENETUNREACH:
    case FI_EHOSTUNREACH:
    case FI_ENETDOWN:
    case FI_EADDRNOTAVAIL:
    case EHOSTDOWN:
    case EACCES:
    case EPERM:
        return SX_ERR_PEER_UNREACHABLE;
    default:
        sx_warn("ofi", "fi_sendmsg (provider %s): %s", o->variant, ofi_err(rc));
        return SX_ERR_IO;
    }
}

/* Sends one checked datagram of @p len bytes in a free slot. */
static int ofi_send_one(ofi_iface_t *o, const sx_tl_tx_t *tx, size_t len, bool more)
{
    unsigned idx = o->tx_free[--o->tx_nfree];
    ofi_tx_slot_t *s = &o->tx[idx];
    struct iovec one;
    struct fi_msg m = {.msg_iov = tx->iov,
                       .desc = NULL,
                       .iov_count = tx->iovcnt,
                       .addr = o->dests[tx->dest].fi_addr,
                       .context = &s->ctx};
    uint64_t flags = FI_COMPLETION | (more ? FI_MORE : 0);

    if (len <= o->inject_size) {
        /* The provider copies it before fi_sendmsg returns. */
        flags |= FI_INJECT;
        if (tx->iovcnt > o->iov_limit) {
            ofi_gather(tx, o->scratch);
            one = (struct iovec){.iov_base = o->scratch, .iov_len = len};
            m.msg_iov = &one;
            m.iov_count = 1;
        }
    } else {
        /* Ours until its completion is read. */
        ofi_gather(tx, s->bounce);
        one = (struct iovec){.iov_base = s->bounce, .iov_len = len};
        m.msg_iov = &one;
        m.iov_count = 1;
    }
    for (unsigned attempt = 0;; attempt++) {
        ssize_t rc = fi_sendmsg(o->ep, &m, flags);
        if (rc == 0)
            return SX_OK;
        if (rc == -FI_ECONNREFUSED && attempt < OFI_SEND_RETRIES) {
            /* A report about some earlier datagram, as over udp. */
            o->base.stats.tx_refused++;
            continue;
        }
        if (rc == -FI_EBADFLAGS && (flags & FI_MORE)) {
            /* A provider that refuses the hint: send without it from now on. */
            o->use_more = false;
            flags &= ~(uint64_t)FI_MORE;
            continue;
        }
        if (rc == -FI_EAGAIN && attempt == 0) {
            /* The provider's queue may only be waiting for completions to
             * be read: read them and try once more. */
            ofi_reap_tx(o);
            continue;
        }
        o->tx_free[o->tx_nfree++] = idx;
        return rc == -FI_ECONNREFUSED ? SX_ERR_AGAIN : ofi_send_status(o, rc);
    }
}

int sx_ofi_post_send(sx_tl_iface_t *iface, const sx_tl_tx_t *tx, unsigned count, unsigned *posted_p)
{
    ofi_iface_t *o = (ofi_iface_t *)iface;
    unsigned done = 0;
    int status = SX_OK;
    size_t len = 0, next_len = 0;
    int next = count > 0 ? ofi_check_tx(o, &tx[0], &next_len) : SX_OK;

    if (o->tx_nfree < count)
        ofi_reap_tx(o);
    while (done < count) {
        status = next;
        len = next_len;
        if (status != SX_OK)
            break;
        if (o->tx_nfree == 0) {
            ofi_reap_tx(o);
            if (o->tx_nfree == 0) {
                status = SX_ERR_AGAIN;
                break;
            }
        }
        /* FI_MORE only when the next one is sure to follow. */
        next = done + 1 < count ? ofi_check_tx(o, &tx[done + 1], &next_len) : SX_ERR_NOT_FOUND;
        bool more = o->use_more && next == SX_OK && o->tx_nfree > 1;
        status = ofi_send_one(o, &tx[done], len, more);
        if (status != SX_OK)
            break;
        done++;
        if (next == SX_ERR_NOT_FOUND)
            next = SX_OK;
    }
    o->base.stats.tx_datagrams += done;
    if (status == SX_ERR_AGAIN)
        o->base.stats.tx_again++;
    if (posted_p != NULL)
        *posted_p = done;
    return status;
}

/* Reads one error completion from the receive queue. */
static void ofi_rx_error(ofi_iface_t *o)
{
    struct fi_cq_err_entry err;

    memset(&err, 0, sizeof(err));
    if (fi_cq_readerr(o->rxcq, &err, 0) != 1)
        return;
    ofi_rx_slot_t *r = err.op_context;
    if (r >= o->rx && r < o->rx + o->nrx && o->nrepost < o->nrx)
        o->repost[o->nrepost++] = (unsigned)(r - o->rx);
    if (err.err == FI_ETRUNC) {
        o->base.stats.rx_truncated++;
    } else if (err.err != FI_ECANCELED) {
        o->rx_errors++;
        sx_debug("ofi", "receive failed: %s", ofi_err(err.err));
    }
}

int sx_ofi_poll(sx_tl_iface_t *iface, sx_tl_event_t *events, unsigned max)
{
    ofi_iface_t *o = (ofi_iface_t *)iface;
    struct fi_cq_msg_entry e[OFI_CQ_BATCH];
    unsigned n = 0;
    bool any = false;

    /* The buffers handed up last time are the caller's no longer. */
    if (o->nrepost > 0)
        ofi_repost(o);
    if (o->tx_nfree < o->ntx)
        ofi_reap_tx(o);
    /* Keep half the buffers posted whatever the caller asks for. */
    unsigned cap = o->nrx > 1 ? o->nrx / 2 : 1;
    if (max > cap)
        max = cap;
    while (n < max) {
        size_t want = max - n < OFI_CQ_BATCH ? max - n : OFI_CQ_BATCH;
        ssize_t got = fi_cq_read(o->rxcq, e, want);
        if (got == -FI_EAGAIN)
            break;
        any = true;
        if (got == -FI_EAVAIL) {
            ofi_rx_error(o);
            continue;
        }
        if (got < 0) {
            sx_error("ofi", "reading receive completions (provider %s): %s", o->variant,
                     ofi_err(got));
            return SX_ERR_IO;
        }
        for (ssize_t i = 0; i < got; i++) {
            ofi_rx_slot_t *r = e[i].op_context;
            if (r < o->rx || r >= o->rx + o->nrx)
                continue; /* not one of ours */
            o->repost[o->nrepost++] = (unsigned)(r - o->rx);
            if (e[i].len > o->base.caps.mtu) {
                /* It filled the spare byte: longer than the mtu, cut. */
                o->base.stats.rx_truncated++;
                continue;
            }
            events[n++] = (sx_tl_event_t){
                .type = SX_TL_EV_RECV, .status = SX_OK, .data = r->buf, .len = e[i].len};
        }
    }
    if (any)
        o->armed = false;
    else if (!o->armed && o->wait_fd >= 0)
        ofi_arm_now(o);
    o->base.stats.rx_datagrams += n;
    return (int)n;
}

unsigned sx_ofi_wait_fds(sx_tl_iface_t *iface, int fds[SX_TL_WAIT_FDS])
{
    int fd = ((ofi_iface_t *)iface)->wait_fd;
    if (fd < 0)
        return 0;
    fds[0] = fd;
    return 1;
}

int sx_ofi_arm(sx_tl_iface_t *iface)
{
    ofi_iface_t *o = (ofi_iface_t *)iface;

    if (o->wait_fd < 0 || o->armed)
        return SX_OK;
    ofi_arm_now(o);
    return o->armed ? SX_OK : SX_ERR_AGAIN;
}
