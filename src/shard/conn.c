/* SPDX-License-Identifier: BSD-3-Clause */
/* The CONNECT / ACCEPT / ACK / PROBE / RESET exchange; see conn.h. */
#include <endian.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/le.h"
#include "common/log.h"
#include "locks/rcu_table.h"
#include "common/time.h"
#include "shard/chan.h"
#include "shard/chan_int.h"
#include "shard/conn.h"
#include "shard/peer.h"
#include "common/crc32c.h"

/* Retries back off from the initial RTO up to this. */
#define SX_CONN_RETRY_MAX_NS 1000000000ull
/* Unanswered CONNECTs to one of the peer's addresses before the next is
 * tried (sx_tl_ops_t.addr_next). */
#define SX_CONN_TRIES_PER_ADDR 3
/* Unanswered probes of one size before a smaller one is tried: RFC 8899
 * section 5.1.2's MAX_PROBES, over conn_rung_min_ns at least. */
#define SX_CONN_PROBES_PER_SIZE 3

/* Datagram sizes to step down through when probes go unanswered: the
 * payloads of 9000-byte (jumbo), 1500-byte (Ethernet) and 1280-byte
 * (the IPv6 minimum, RFC 8200) IPv4 paths, then 576 bytes, the datagram
 * every IPv4 host must accept (RFC 791). Each is what the path carries
 * less 28 bytes of IPv4 and UDP headers. */
static const size_t conn_rungs[] = {8972, 1472, 1252, 548};

size_t sx_conn_size_below(size_t size)
{
    for (size_t i = 0; i < sizeof(conn_rungs) / sizeof(conn_rungs[0]); i++)
        if (conn_rungs[i] < size)
            return conn_rungs[i];
    return 0;
}

void sx_ctrl_write(uint8_t *out, const sx_ctrl_t *c)
{
    memset(out, 0, SX_CTRL_LEN);
    out[0] = c->op;
    out[1] = c->cpc;
    sx_put32(out + 4, c->mtu);
    sx_put32(out + 8, c->window);
    sx_put32(out + 12, c->isn);
    sx_put32(out + 16, c->nonce);
    sx_put32(out + 20, c->probe_len);
    sx_put64(out + 24, c->epoch);
}

bool sx_ctrl_parse(const uint8_t *in, size_t len, sx_ctrl_t *c)
{
    if (len < SX_CTRL_LEN)
        return false;
    c->op = in[0];
    c->cpc = in[1];
    if (c->op < SX_CTRL_CONNECT || c->op > SX_CTRL_RESET || in[2] != 0 || in[3] != 0 ||
        sx_get64(in + 32) != 0)
        return false;
    c->mtu = sx_get32(in + 4);
    c->window = sx_get32(in + 8);
    c->isn = sx_get32(in + 12);
    c->nonce = sx_get32(in + 16);
    c->probe_len = sx_get32(in + 20);
    c->epoch = sx_get64(in + 24);
    /* Only PROBE carries anything after the body. */
    return c->op == SX_CTRL_PROBE || len == SX_CTRL_LEN;
}

static sx_tl_iface_t *conn_iface(const sx_chan_t *c)
{
    return c->shard->ifaces[c->tl];
}

static void conn_drop(sx_chan_t *c, const char *why)
{
    sx_stat_add(&c->shard->stats.drops[SX_DROP_CTRL], 1);
    sx_debug("cpc", "shard %u: control message from %s dropped: %s", c->shard->index, c->peer->name,
             why);
}

/* Where the peer's shard is, for diagnoses: the address in use, else
 * the card's. */
static void conn_peer_addr(const sx_chan_t *c, char *buf, size_t cap)
{
    sx_tl_iface_t *iface = conn_iface(c);
    const sx_peer_addr_t *a = &c->peer->addr[c->lane];

    if (iface->ops->dest_str != NULL) {
        iface->ops->dest_str(iface, c->dest, buf, cap);
        return;
    }
    if (iface->ops->addr_str != NULL) {
        iface->ops->addr_str(iface, a->bytes, a->len, buf, cap);
        return;
    }
    size_t off = 0;
    for (unsigned i = 0; i < a->len && off + 3 <= cap; i++)
        off += (size_t)snprintf(buf + off, cap - off, "%02x", a->bytes[i]);
}

/* Builds a control message for @p c, padded to @p total_len for a probe,
 * and sends it through the channel's method, or straight over the
 * datagram path when @p raw (a RESET: that is where the stale packet came
 * from, whatever the channel's method). */
static void conn_send(sx_chan_t *c, sx_ctrl_t *ctrl, size_t total_len, bool raw)
{
    const sx_shard_env_t *env = c->shard->env;
    uint8_t small[SX_WIRE_HDR_LEN + SX_CTRL_LEN + SX_WIRE_TAG_LEN];
    uint8_t *buf = small;
    size_t tag = c->tag_len; /* SX_AUTH: within total_len, after the payload */

    if (total_len < SX_WIRE_HDR_LEN + SX_CTRL_LEN + tag)
        total_len = SX_WIRE_HDR_LEN + SX_CTRL_LEN + tag;
    if (total_len > sizeof(small)) {
        buf = calloc(1, total_len);
        if (buf == NULL)
            return; /* the retry timer tries again */
    } else {
        memset(small, 0, sizeof(small));
    }
    ctrl->cpc = c->conn_method->ops->id;
    ctrl->mtu = (uint32_t)c->pmtu_ceiling;
    ctrl->window = env->conf.window;
    ctrl->isn = c->snd_isn;
    sx_ctrl_write(buf + SX_WIRE_HDR_LEN, ctrl);
    uint16_t payload = (uint16_t)(total_len - SX_WIRE_HDR_LEN - tag);
    sx_wire_hdr_t h = {
        .type = SX_PKT_CTRL,
        .flags = tag ? SX_PKTF_AUTH : 0,
        .src_shard = (uint16_t)c->shard->index,
        .dst_shard = (uint16_t)c->lane,
        .src_epoch = env->epoch,
        .dst_epoch = c->peer->epoch,
        .payload_len = payload,
    };
    uint32_t crc = env->conf.checksum ? sx_crc32c(0, buf + SX_WIRE_HDR_LEN, payload) : 0;
    sx_wire_write_hdr(buf, &h, env->conf.checksum ? &crc : NULL);
    if (tag)
        sx_auth_seal(&env->auth, buf, total_len - tag, NULL, 0, buf + total_len - tag);
    int rc = raw ? sx_chan_send_raw_locked(c, buf, total_len)
                 : c->conn_method->ops->send_ctrl_locked(c->conn_method, c, buf, total_len);
    if (rc != SX_OK)
        sx_debug("cpc", "shard %u: control message to %s not sent: %s", c->shard->index,
                 c->peer->name, sx_strerror(rc));
    sx_stat_add(&c->shard->stats.ctrl_sent, 1);
    if (buf != small)
        free(buf);
}

static void conn_send_op(sx_chan_t *c, uint8_t op, uint32_t nonce, uint32_t probe_len)
{
    sx_ctrl_t ctrl = {.op = op, .nonce = nonce, .probe_len = probe_len};
    conn_send(c, &ctrl, op == SX_CTRL_PROBE ? probe_len : 0, false);
}

static void conn_timer_fire(sx_timer_t *timer, void *arg);

static void conn_up(sx_chan_t *c)
{
    if (c->conn == SX_CONN_UP)
        return;
    c->conn = SX_CONN_UP;
    sx_wheel_cancel(c->shard->wheel, &c->conn_timer);
    sx_debug("cpc", "shard %u: channel to %s shard %u is up (%s, window %u, datagrams %zu)",
             c->shard->index, c->peer->name, c->lane, c->conn_method->ops->name, c->snd_window,
             c->dgram_max);
    sx_chan_kick_locked(c);
}

void sx_conn_ep_init_up_locked(sx_chan_t *c)
{
    sx_timer_init(&c->conn_timer, conn_timer_fire, c);
    c->conn = SX_CONN_UP;
    c->rcv_synced = c->rcv_confirmed = true;
    c->rcv_isn = c->rcv_nxt;
}

void sx_conn_ep_init_idle_locked(sx_chan_t *c)
{
    sx_timer_init(&c->conn_timer, conn_timer_fire, c);
    c->conn = SX_CONN_IDLE;
    c->rcv_synced = c->rcv_confirmed = false;
}

void sx_conn_ep_fini_locked(sx_chan_t *c)
{
    sx_wheel_cancel(c->shard->wheel, &c->conn_timer);
}

/*
 * Sends what the state calls for: CONNECT until the peer answered, then
 * the probe (when the method probes) together with a CONNECT, whose
 * ACCEPT shows the peer still answers small datagrams: only then does a
 * probe that never comes back mean a small MTU rather than a dead peer.
 */
static void conn_transmit(sx_chan_t *c)
{
    c->conn_tries++;
    if (c->conn_small_ok) {
        if (c->conn_rung_tries++ == 0)
            c->conn_rung_ns = sx_time_ns();
        if (c->conn_probe_start_ns == 0)
            c->conn_probe_start_ns = sx_time_ns();
        conn_send_op(c, SX_CTRL_PROBE, c->conn_nonce, (uint32_t)c->dgram_max);
    }
    conn_send_op(c, SX_CTRL_CONNECT, c->conn_nonce, 0);
}

/*
 * No answer yet to SX_CONN_TRIES_PER_ADDR CONNECTs (or the peer's CONNECT
 * came that often: our ACCEPTs are lost): the next of the peer's
 * addresses, if its card offered more than one (the tcp BTL and usnic try
 * each pair the same way). The log line names both ends and @p cause.
 */
static void conn_next_addr(sx_chan_t *c, const char *cause)
{
    sx_tl_iface_t *iface = conn_iface(c);
    char why[160] = "";

    if (iface->ops->addr_next == NULL)
        return;
    int rc = iface->ops->addr_next(iface, c->dest, why, sizeof(why));
    if (rc != SX_OK && rc != SX_ERR_NOT_FOUND)
        return;
    if (rc == SX_ERR_NOT_FOUND && strstr(why, "->") == NULL)
        return; /* one address only */
    sx_warn("cpc", "shard %u: %s shard %u: %s; trying its next address: %s%s", c->shard->index,
            c->peer->name, c->lane, cause, why,
            rc == SX_ERR_NOT_FOUND ? " (all tried: starting over)" : "");
    size_t mtu = iface->ops->dest_mtu != NULL ? iface->ops->dest_mtu(iface, c->dest) : 0;
    if (mtu != 0 && mtu <= iface->caps.mtu)
        c->pmtu_ceiling = c->dgram_max = mtu;
}

/*
 * The peer answers small datagrams but not SX_CONN_PROBES_PER_SIZE probes
 * of dgram_max bytes: a link on the path has a smaller MTU than the
 * route says (a switch port without jumbo frames). Steps down to the next
 * size below (RFC 8899 section 5.3, the search when a probe is lost) and
 * probes that; false at the smallest, where the connect timeout then
 * reports SX_ERR_PATH_MTU. The next CONNECT carries the new size, so the
 * peer's datagrams shrink too.
 */
static bool conn_step_down(sx_chan_t *c)
{
    size_t next = sx_conn_size_below(c->dgram_max);
    if (next == 0)
        return false;
    char addr[96];
    conn_peer_addr(c, addr, sizeof(addr));
    sx_warn("cpc",
            "shard %u: %s shard %u at %s answers small datagrams but none of %u probes of "
            "%zu bytes: a link on the path has a smaller MTU; trying %zu-byte datagrams",
            c->shard->index, c->peer->name, c->lane, addr, c->conn_rung_tries, c->dgram_max, next);
    sx_stat_add(&c->shard->stats.pmtu_steps, 1);
    c->pmtu_ceiling = c->dgram_max = next;
    c->conn_rung_tries = 0;
    c->conn_retry_ns = c->shard->env->conf.rto_init_ns;
    return true;
}

/* How long probes of one size go unanswered before the next is tried
 * (SX_PMTU_PERSIST_NS, conn.h): time for a receiver's overflowing socket
 * to drain, within what lets every size have its turn before the
 * connect timeout. */
static uint64_t conn_rung_min_ns(const sx_chan_conf_t *p)
{
    uint64_t share = p->connect_timeout_ns / 16;
    return share < SX_PMTU_PERSIST_NS ? share : SX_PMTU_PERSIST_NS;
}

static void conn_fail(sx_chan_t *c)
{
    char addr[96], why[320];
    uint64_t ms = (sx_time_ns() - c->conn_start_ns) / 1000000;

    conn_peer_addr(c, addr, sizeof(addr));
    if (!c->conn_small_ok) {
        snprintf(why, sizeof(why),
                 "no answer from %s shard %u at %s to %u connection requests in %llu ms: "
                 "wrong address or port, a firewall, or the peer is not running",
                 c->peer->name, c->lane, addr, c->conn_tries, (unsigned long long)ms);
        sx_chan_fail_why_locked(c, SX_ERR_PEER_UNREACHABLE, why);
    } else if (c->conn_small_answer_ns <= c->conn_probe_start_ns) {
        snprintf(why, sizeof(why),
                 "%s shard %u at %s stopped answering: no answer to %u connection "
                 "requests and probes in %llu ms (the peer died or the path went down)",
                 c->peer->name, c->lane, addr, c->conn_tries, (unsigned long long)ms);
        sx_chan_fail_why_locked(c, SX_ERR_PEER_UNREACHABLE, why);
    } else {
        snprintf(why, sizeof(why),
                 "%s shard %u at %s answers small datagrams but none of %u probes of "
                 "%zu bytes in %llu ms: a link on the path has a smaller MTU",
                 c->peer->name, c->lane, addr, c->conn_tries, c->dgram_max, (unsigned long long)ms);
        sx_chan_fail_why_locked(c, SX_ERR_PATH_MTU, why);
    }
}

static void conn_timer_fire(sx_timer_t *timer, void *arg)
{
    sx_chan_t *c = arg;
    const sx_chan_conf_t *p = &c->shard->env->conf;
    uint64_t now = sx_time_ns();
    uint64_t late = now - sx_timer_deadline(timer);

    if (c->failed || c->conn == SX_CONN_UP)
        return;
    int other = atomic_load(&c->peer->failed);
    if (other != 0) {
        sx_chan_fail_locked(c, other);
        return;
    }
    /* A retry that fires this late says this process did not run (stopped,
     * descheduled): the time it missed is not the peer's (the same rule as
     * the peer timeout's, chan_retransmit.c), so SX_CONNECT_TIMEOUT_MS
     * measures only time in which our requests went out unanswered. */
    if (sx_u64_before(sx_timer_deadline(timer), now) && late > p->connect_timeout_ns / 4) {
        sx_stat_add(&c->shard->stats.own_stalls, 1);
        c->conn_start_ns += late;
    }
    if (now - c->conn_start_ns >= p->connect_timeout_ns) {
        conn_fail(c);
        return;
    }
    if (!c->conn_small_ok && c->conn_tries % SX_CONN_TRIES_PER_ADDR == 0)
        conn_next_addr(c, "no answer to our connection requests");
    else if (c->conn_small_ok && !c->conn_probe_ok &&
             c->conn_rung_tries >= SX_CONN_PROBES_PER_SIZE &&
             now - c->conn_rung_ns >= conn_rung_min_ns(p))
        (void)conn_step_down(c);
    conn_transmit(c);
    c->conn_retry_ns *= 2;
    if (c->conn_retry_ns > SX_CONN_RETRY_MAX_NS)
        c->conn_retry_ns = SX_CONN_RETRY_MAX_NS;
    uint64_t at = now + c->conn_retry_ns;
    if (at > c->conn_start_ns + p->connect_timeout_ns)
        at = c->conn_start_ns + p->connect_timeout_ns;
    sx_wheel_add(c->shard->wheel, &c->conn_timer, at);
}

void sx_conn_start_locked(sx_chan_t *c)
{
    const sx_chan_conf_t *p = &c->shard->env->conf;

    if (c->conn != SX_CONN_IDLE || c->failed)
        return;
    c->conn = SX_CONN_CONNECTING;
    c->conn_start_ns = sx_time_ns();
    c->conn_retry_ns = p->rto_init_ns;
    c->conn_tries = 0;
    c->conn_rung_tries = 0;
    if (c->conn_nonce == 0)
        c->conn_nonce = sx_chan_random32();
    conn_transmit(c);
    sx_wheel_add(c->shard->wheel, &c->conn_timer, c->conn_start_ns + c->conn_retry_ns);
}

/* Takes the peer's parameters from CONNECT, ACCEPT or a proving ACK. An
 * initial sequence number that the peer has not proven yet (conn.h,
 * Set-up forgeries) gives way to the next one offered; a proven one
 * stays for the incarnation. */
static bool conn_learn(sx_chan_t *c, const sx_ctrl_t *m)
{
    const sx_chan_conf_t *p = &c->shard->env->conf;

    if (m->window < 16 || m->window > 65536 || (m->window & (m->window - 1)) != 0) {
        conn_drop(c, "window is not a power of two from 16 to 65536");
        return false;
    }
    if (m->mtu < SX_WIRE_HDR_LEN + 256 || m->mtu > 65535) {
        conn_drop(c, "datagram size out of range");
        return false;
    }
    if (c->rcv_synced && m->isn != c->rcv_isn) {
        if (c->rcv_confirmed) {
            conn_drop(c, "initial sequence number changed within one incarnation");
            return false;
        }
        c->rcv_synced = false; /* nothing was delivered from it */
    }
    /* On an established channel a repeat from the incarnation that
     * taught us (our ACCEPT was lost) changes nothing: the path MTU may
     * have been stepped down since, and a CONNECT forged with the right
     * isn must not shrink the window (RFC 5961 keeps an established TCP
     * connection's state from an in-window SYN the same way). While it
     * connects, a repeat may come over the next address pair, with that
     * path's datagram size: that one is learned. */
    if (c->rcv_synced && c->conn == SX_CONN_UP)
        return true;
    if (!c->rcv_synced) {
        c->rcv_nxt = c->rcv_dlv = c->rcv_isn = m->isn;
        c->rcv_synced = true;
    }
    c->snd_window = m->window < p->window ? m->window : p->window;
    size_t mine = c->pmtu_ceiling;
    c->dgram_max = m->mtu < mine ? m->mtu : mine;
    return true;
}

void sx_conn_recv_ctrl_locked(sx_chan_t *c, const sx_wire_hdr_t *h, const uint8_t *data, size_t len)
{
    sx_ctrl_t m;

    if (c->failed) {
        sx_stat_add(&c->shard->stats.drops[SX_DROP_CHANNEL_FAILED], 1);
        return;
    }
    if (c->conn_method->ops->send_ctrl_locked == NULL) {
        conn_drop(c, "the channel connects implicitly: no exchange to take part in");
        return;
    }
    if (!sx_ctrl_parse(data + SX_WIRE_HDR_LEN, len - SX_WIRE_HDR_LEN, &m)) {
        conn_drop(c, "malformed body");
        return;
    }
    if (m.cpc != c->conn_method->ops->id && m.op != SX_CTRL_PROBE && m.op != SX_CTRL_PROBE_ACK) {
        conn_drop(c, "the peer connects with another method than ours");
        return;
    }
    /* ctrl_received counts what passed every check (a drop counts as one). */
    switch (m.op) {
    case SX_CTRL_CONNECT:
        if (!conn_learn(c, &m))
            return;
        sx_stat_add(&c->shard->stats.ctrl_received, 1);
        /* The same CONNECT again and again: our ACCEPTs do not arrive, so
         * the address we answer to does not reach the peer (its CONNECTs
         * came by another path). Move to its next address as a connector
         * does, or only the side that connects would ever find a path. */
        if (m.nonce != c->peer_conn_nonce) {
            c->peer_conn_nonce = m.nonce;
            c->peer_conn_repeats = 0;
        } else if (c->conn != SX_CONN_UP && ++c->peer_conn_repeats % SX_CONN_TRIES_PER_ADDR == 0) {
            conn_next_addr(c, "repeated connection requests (our answers do not arrive)");
        }
        conn_send_op(c, SX_CTRL_ACCEPT, m.nonce, 0);
        break;
    case SX_CTRL_ACCEPT:
        if (c->conn != SX_CONN_CONNECTING || m.nonce != c->conn_nonce) {
            sx_stat_add(&c->shard->stats.ctrl_received, 1);
            /* A late answer to an earlier attempt, or for a channel that is
             * up already: acknowledge it again, nothing else. */
            if (c->conn == SX_CONN_UP)
                conn_send_op(c, SX_CTRL_ACK, c->rcv_isn, 0);
            return;
        }
        if (!conn_learn(c, &m))
            return;
        /* It echoed our CONNECT's nonce, which went to the peer's
         * address only: its isn is the peer's. */
        c->rcv_confirmed = true;
        sx_stat_add(&c->shard->stats.ctrl_received, 1);
        c->conn_small_answer_ns = sx_time_ns();
        conn_send_op(c, SX_CTRL_ACK, c->rcv_isn, 0);
        if (!c->conn_small_ok) {
            c->conn_small_ok = true;
            if (c->conn_method->ops->probe) {
                c->conn_tries = 0;
                conn_transmit(c);
            }
        }
        if (!c->conn_method->ops->probe || c->conn_probe_ok)
            conn_up(c);
        break;
    case SX_CTRL_ACK:
        /* The connector echoes our isn, which only our ACCEPT carried,
         * to the peer's address: proof that the isn in this ACK is the
         * peer's, whatever CONNECTs came before it (TCP's third segment
         * acknowledges the server's ISN the same way, RFC 9293 section
         * 3.5). */
        if (m.nonce != c->snd_isn) {
            conn_drop(c, "ACK does not echo our initial sequence number");
            return;
        }
        if (!c->rcv_synced) {
            /* No CONNECT came: nothing of ours to answer. */
            sx_stat_add(&c->shard->stats.ctrl_received, 1);
            return;
        }
        if (!c->rcv_confirmed) {
            if (!conn_learn(c, &m))
                return;
            c->rcv_confirmed = true;
        }
        sx_stat_add(&c->shard->stats.ctrl_received, 1);
        conn_up(c);
        break;
    case SX_CTRL_PROBE:
        if (m.probe_len != h->payload_len + (uint32_t)SX_WIRE_HDR_LEN +
                               ((h->flags & SX_PKTF_AUTH) ? SX_WIRE_TAG_LEN : 0u)) {
            conn_drop(c, "probe length disagrees with the datagram");
            return;
        }
        sx_stat_add(&c->shard->stats.ctrl_received, 1);
        conn_send_op(c, SX_CTRL_PROBE_ACK, m.nonce, m.probe_len);
        break;
    case SX_CTRL_PROBE_ACK:
        sx_stat_add(&c->shard->stats.ctrl_received, 1);
        if (c->conn != SX_CONN_CONNECTING || m.nonce != c->conn_nonce ||
            m.probe_len != c->dgram_max)
            return; /* an answer to an earlier probe */
        c->conn_probe_ok = true;
        if (c->conn_small_ok)
            conn_up(c);
        break;
    default:
        conn_drop(c, "unexpected operation");
        break;
    }
}

bool sx_conn_data_ok_locked(sx_chan_t *c, const sx_wire_hdr_t *h)
{
    if (!c->rcv_synced)
        return false;
    if (!c->rcv_confirmed) {
        /* The connector's ACK is lost or late. Its data proves what the
         * ACK would have: it acknowledges our isn (we sent nothing yet:
         * we are not up), and its sequence number is where the CONNECT
         * we hold said the peer's start (a CONNECT forged after the
         * peer's replaced it). Otherwise ask again: our ACCEPT draws an
         * ACK from a connector that is up. */
        uint32_t ahead = h->seq - c->rcv_nxt;
        if (h->type != SX_PKT_DATA || !(h->flags & SX_PKTF_ACK) || h->ack != c->snd_isn ||
            ahead >= sx_chan_window(c)) {
            uint64_t now = sx_time_ns();
            if (h->ack == c->snd_isn &&
                (c->conn_nudge_ns == 0 ||
                 now - c->conn_nudge_ns >= c->shard->env->conf.rto_min_ns)) {
                c->conn_nudge_ns = now;
                conn_send_op(c, SX_CTRL_ACCEPT, c->peer_conn_nonce, 0);
            }
            return false;
        }
        c->rcv_confirmed = true;
    }
    /* The peer sends data only after an ACCEPT from us, which carried our
     * initial sequence number: we may send too. The acceptor does not probe
     * its own direction first: that held its sends back behind data already
     * flowing to it (connect.h says what is left undiagnosed). */
    conn_up(c);
    return true;
}

void sx_conn_stale_locked(sx_chan_t *c, const sx_wire_hdr_t *h)
{
    const sx_chan_conf_t *p = &c->shard->env->conf;
    uint64_t now = sx_time_ns();
    /* A challenge (a probe whose sequence field holds a nonce) is always
     * answered: the peer waits on it to believe the RESET. It goes to the
     * channel's address, not the packet's source, so it reflects nothing
     * at a third host. */
    bool challenge = h->type == SX_PKT_ACK && (h->flags & SX_PKTF_PROBE) && h->seq != 0;

    if (c->peer->is_self || h->dst_epoch == 0)
        return;
    if (!challenge && c->last_reset_ns != 0 && now - c->last_reset_ns < p->rto_min_ns)
        return;
    c->last_reset_ns = now;
    sx_ctrl_t ctrl = {.op = SX_CTRL_RESET, .epoch = h->dst_epoch, .nonce = h->seq};
    conn_send(c, &ctrl, 0, true);
}

/* Fails every channel of @p shard to @p peer: it restarted. */
static void conn_peer_restarted(sx_shard_t *shard, struct sx_peer *peer, const sx_wire_hdr_t *h)
{
    char why[160];
    snprintf(why, sizeof(why), "%s restarted: its shard %u now runs epoch %016llx", peer->name,
             (unsigned)h->src_shard, (unsigned long long)h->src_epoch);
    for (unsigned lane = 0; lane < peer->nshards; lane++) {
        sx_chan_t *c = peer->chans[(size_t)shard->index * peer->nshards + lane];
        if (c != NULL && !c->failed)
            sx_chan_fail_why_locked(c, SX_ERR_PEER_RESTARTED, why);
    }
    /* The first failure set peer->failed: the other shards' channels
     * fail as they next run. */
}

void sx_conn_recv_reset_locked(sx_shard_t *shard, const sx_wire_hdr_t *h, const uint8_t *data,
                               size_t len, const void *src, size_t src_len)
{
    const sx_shard_env_t *env = shard->env;
    sx_ctrl_t m;

    if (!sx_ctrl_parse(data + SX_WIRE_HDR_LEN, len - SX_WIRE_HDR_LEN, &m) ||
        m.op != SX_CTRL_RESET || m.epoch == h->src_epoch) {
        sx_stat_add(&shard->stats.drops[SX_DROP_CTRL], 1);
        return;
    }
    /*
     * The sender says it is a new incarnation (h->src_epoch) of the peer
     * we know as m.epoch, whose shard h->src_shard our channel's stale
     * packet reached. Every field of that is in clear on the wire, so a
     * RESET proves nothing by itself (RFC 5961 section 3 has TCP answer
     * an RST it cannot trust with a challenge ACK): we answer it with a
     * probe to the old incarnation carrying a nonce from the CSPRNG. A
     * restarted peer does not know that epoch, takes the probe as stale
     * and RESETs again, echoing the nonce: proven, the channels fail at
     * once. An old incarnation that is alive answers the probe with an
     * ACK and nothing fails; a forger off the path never sees the nonce.
     * A peer that died without a successor is left to the peer timeout.
     */
    sx_rcu_read_lock();
    struct sx_peer *peer = sx_peer_lookup_rcu(env->peers, m.epoch);
    sx_chan_t *c = NULL;
    if (peer != NULL && !peer->is_self && h->src_shard < peer->nshards)
        c = peer->chans[(size_t)shard->index * peer->nshards + h->src_shard];
    if (c == NULL || c->failed) {
        /* No channel of ours to that shard sent it anything. */
        sx_rcu_read_unlock(&env->peers->rcu);
        sx_stat_add(&shard->stats.drops[SX_DROP_CTRL], 1);
        return;
    }
    /* A restarted peer runs on the host of the card we hold (its new
     * card names the same host), so its RESET comes from there too. */
    if (!sx_shard_src_ok_locked(shard, c, src, src_len)) {
        sx_rcu_read_unlock(&env->peers->rcu);
        return;
    }
    if (c->reset_nonce != 0 && m.nonce == c->reset_nonce) {
        sx_stat_add(&shard->stats.ctrl_received, 1);
        sx_stat_add(&shard->stats.resets_proven, 1);
        conn_peer_restarted(shard, peer, h);
    } else {
        /* One challenge per RTO floor: a flood of RESETs costs the old
         * peer no more probes than a lossy path would. */
        uint64_t now = sx_time_ns();
        sx_stat_add(&shard->stats.reset_challenges, 1);
        if (c->reset_challenge_ns == 0 || now - c->reset_challenge_ns >= env->conf.rto_min_ns) {
            c->reset_nonce = sx_chan_random32();
            c->reset_challenge_ns = now;
            sx_chan_send_challenge_locked(c, c->reset_nonce);
            sx_chan_kick_locked(c);
        }
    }
    sx_rcu_read_unlock(&env->peers->rcu);
}
