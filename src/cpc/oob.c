/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * oob: the connection exchange of shard/conn.h carried over the OOB (TCP),
 * as Open MPI's openib `oob` CPC carries its QP information. Reliable, so
 * no path probe; offered only when the engine has an OOB endpoint. Its
 * card blob is the endpoint's "host:port".
 *
 * Messages arrive on the OOB's progress thread and are delegated to the
 * shard they name, through the shard's inbox; that thread runs no
 * callback of the application's (sx_shard_set_engine_thread).
 */
#include <stdlib.h>
#include <string.h>

#include <shardx.h>

#include "common/log.h"
#include "cpc/cpc.h"
#include "shard/chan.h"
#include "shard/conn.h"
#include "shard/peer.h"
#include "shard/shard.h"
#include "shard/wire.h"

typedef struct oob_ctrl_req {
    sx_inbox_req_t req;
    const sx_cpc_env_t *env;
    size_t len;
    uint8_t data[];
} oob_ctrl_req_t;

static void oob_ctrl_run(void *owner, sx_inbox_req_t *req)
{
    oob_ctrl_req_t *r = (oob_ctrl_req_t *)req;

    if (!atomic_load(r->env->closing))
        sx_shard_recv_ctrl_locked(owner, r->data, r->len);
    free(r);
}

/* OOB thread: check the routing fields, hand the message to its shard. */
static void oob_ctrl_handler(void *arg, uint64_t peer, uint32_t tag, const void *data, size_t len)
{
    const sx_cpc_env_t *env = arg;
    sx_wire_hdr_t h;
    (void)tag;

    sx_drop_reason_t why = sx_wire_parse_packet(data, len, &h);
    if (why == SX_DROP_NONE && (h.type != SX_PKT_CTRL || h.dst_shard >= env->nshards))
        why = h.type != SX_PKT_CTRL ? SX_DROP_TYPE : SX_DROP_SHARD;
    if (why != SX_DROP_NONE) {
        sx_warn_ratelimited("cpc", "oob: message from OOB peer %016llx dropped: %s",
                            (unsigned long long)peer, sx_drop_reason_text(why));
        return;
    }
    oob_ctrl_req_t *r = malloc(sizeof(*r) + len);
    if (r == NULL) {
        sx_warn("cpc", "oob: out of memory; a connection message is lost (it is retried)");
        return;
    }
    r->req.run = oob_ctrl_run;
    r->env = env;
    r->len = len;
    memcpy(r->data, data, len);
    /* Finding the shard's token free, this thread runs the message itself
     * and may take an ACK a caller's pass held, which completes the
     * caller's sends: their callbacks wait for the caller (shard.h). */
    sx_shard_set_engine_thread();
    env->submit(env->submit_arg, h.dst_shard, &r->req);
}

static int oob_init(sx_cpc_inst_t *inst)
{
    const sx_cpc_env_t *env = inst->env;
    if (env->oob == NULL)
        return SX_ERR_UNSUPPORTED;
    return sx_oob_handler_set(env->oob, SX_OOB_TAG_CPC, oob_ctrl_handler, (void *)env);
}

static void oob_finalize(sx_cpc_inst_t *inst)
{
    if (inst->env->oob != NULL)
        (void)sx_oob_handler_set(inst->env->oob, SX_OOB_TAG_CPC, NULL, NULL);
}

static int oob_query(sx_cpc_inst_t *inst, sx_cpc_module_t *module)
{
    char addr[SX_OOB_ADDR_MAX];
    int rc = sx_oob_address(inst->env->oob, addr, sizeof(addr));
    if (rc != SX_OK)
        return rc;
    size_t n = strlen(addr);
    if (n > SX_CONN_BLOB_MAX)
        return SX_ERR_UNSUPPORTED;
    memcpy(module->blob, addr, n);
    module->blob_len = (uint8_t)n;
    return SX_OK;
}

static int oob_peer_init(sx_cpc_inst_t *inst, struct sx_peer *peer)
{
    char addr[SX_CONN_BLOB_MAX + 1];
    const sx_conn_offer_t *o = &peer->conn_offer;

    for (unsigned i = 0; i < o->blob_len; i++) {
        if (o->blob[i] < 0x21 || o->blob[i] > 0x7e) {
            sx_error("cpc", "sx_peer_add: %s's card has a malformed OOB address", peer->name);
            return SX_ERR_INVALID_PARAM;
        }
    }
    memcpy(addr, o->blob, o->blob_len);
    addr[o->blob_len] = '\0';
    int rc = sx_oob_peer_set(inst->env->oob, peer->epoch, addr);
    if (rc != SX_OK)
        sx_error("cpc", "sx_peer_add: %s's OOB address \"%s\" is unusable: %s", peer->name, addr,
                 sx_strerror(rc));
    return rc;
}

static void oob_ep_init(const sx_conn_method_t *method, struct sx_chan *chan)
{
    (void)method;
    sx_conn_ep_init_idle_locked(chan);
}

static void oob_start_connect(const sx_conn_method_t *method, struct sx_chan *chan)
{
    (void)method;
    sx_conn_start_locked(chan);
}

static void oob_ep_fini(const sx_conn_method_t *method, struct sx_chan *chan)
{
    (void)method;
    sx_conn_ep_fini_locked(chan);
}

static int oob_send_ctrl(const sx_conn_method_t *method, struct sx_chan *chan, const uint8_t *data,
                         size_t len)
{
    struct iovec iov = {.iov_base = (void *)data, .iov_len = len};
    return sx_oob_send_nb(sx_cpc_inst_of(method)->env->oob, chan->peer->epoch, SX_OOB_TAG_CPC, &iov,
                          1, NULL, NULL);
}

const sx_cpc_component_t sx_cpc_oob = {
    .ep =
        {
            .name = "oob",
            .id = SX_CPC_OOB,
            .probe = false,
            .ep_init_locked = oob_ep_init,
            .start_connect_locked = oob_start_connect,
            .ep_finalize_locked = oob_ep_fini,
            .send_ctrl_locked = oob_send_ctrl,
        },
    .priority = 30,
    .init = oob_init,
    .query = oob_query,
    .peer_init = oob_peer_init,
    .finalize = oob_finalize,
};
