/*
 * handshake: the connection exchange of connect.h carried as SX_PKT_CTRL
 * datagrams over the channel's own transport, with the path probe. The
 * default: it costs one round trip per channel and in return negotiates
 * windows and datagram sizes, diagnoses dead addresses and small-MTU
 * paths, and notices restarted peers.
 */
#include <shardx.h>

#include "cpc/connect.h"
#include "shard/chan.h"

static int handshake_query(struct sx_engine *engine, sx_cpc_module_t *module)
{
    (void)engine;
    module->blob_len = 0;
    return SX_OK;
}

static void handshake_ep_init(sx_cpc_module_t *module, struct sx_chan *chan)
{
    (void)module;
    sx_conn_ep_init_idle_locked(chan);
}

static void handshake_start_connect(sx_cpc_module_t *module, struct sx_chan *chan)
{
    (void)module;
    sx_conn_start_locked(chan);
}

static void handshake_ep_fini(sx_cpc_module_t *module, struct sx_chan *chan)
{
    (void)module;
    sx_conn_ep_fini_locked(chan);
}

static int handshake_send_ctrl(sx_cpc_module_t *module, struct sx_chan *chan, const uint8_t *data,
                               size_t len)
{
    (void)module;
    return sx_chan_send_raw_locked(chan, data, len);
}

const sx_cpc_component_t sx_cpc_handshake = {
    .name = "handshake",
    .id = SX_CPC_HANDSHAKE,
    .priority = 80,
    .query = handshake_query,
    .ep_init_locked = handshake_ep_init,
    .start_connect_locked = handshake_start_connect,
    .ep_finalize_locked = handshake_ep_fini,
    .send_ctrl_locked = handshake_send_ctrl,
    .probe = true,
};
