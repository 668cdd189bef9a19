/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * handshake: the connection exchange of shard/conn.h carried as
 * SX_PKT_CTRL datagrams over the channel's own transport, with the path
 * probe. The default: it costs one round trip per channel and in return
 * negotiates windows and datagram sizes, diagnoses dead addresses and
 * small-MTU paths, and notices restarted peers.
 */
#include <shardx.h>

#include "cpc/cpc.h"
#include "shard/chan.h"
#include "shard/conn.h"

static int handshake_query(sx_cpc_inst_t *inst, sx_cpc_module_t *module)
{
    (void)inst;
    module->blob_len = 0;
    return SX_OK;
}

static void handshake_ep_init(const sx_conn_method_t *method, struct sx_chan *chan)
{
    (void)method;
    sx_conn_ep_init_idle_locked(chan);
}

static void handshake_start_connect(const sx_conn_method_t *method, struct sx_chan *chan)
{
    (void)method;
    sx_conn_start_locked(chan);
}

static void handshake_ep_fini(const sx_conn_method_t *method, struct sx_chan *chan)
{
    (void)method;
    sx_conn_ep_fini_locked(chan);
}

static int handshake_send_ctrl(const sx_conn_method_t *method, struct sx_chan *chan,
                               const uint8_t *data, size_t len)
{
    (void)method;
    return sx_chan_send_raw_locked(chan, data, len);
}

const sx_cpc_component_t sx_cpc_handshake = {
    .ep =
        {
            .name = "handshake",
            .id = SX_CPC_HANDSHAKE,
            .probe = true,
            .ep_init_locked = handshake_ep_init,
            .start_connect_locked = handshake_start_connect,
            .ep_finalize_locked = handshake_ep_fini,
            .send_ctrl_locked = handshake_send_ctrl,
        },
    .priority = 80,
    .query = handshake_query,
};
