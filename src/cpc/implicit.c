/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * implicit: nothing is exchanged. The card holds every address and both
 * ends start their sequence numbers at SX_SEQ_START, so the first data
 * packet sets the channel up; the cheapest first message, and no
 * diagnosis when the path is broken (the peer timeout reports it).
 */
#include <shardx.h>

#include "cpc/cpc.h"
#include "shard/conn.h"

static int implicit_query(sx_cpc_inst_t *inst, sx_cpc_module_t *module)
{
    (void)inst;
    module->blob_len = 0;
    return SX_OK;
}

static void implicit_ep_init(const sx_conn_method_t *method, struct sx_chan *chan)
{
    (void)method;
    sx_conn_ep_init_up_locked(chan);
}

static void implicit_start_connect(const sx_conn_method_t *method, struct sx_chan *chan)
{
    (void)method;
    (void)chan; /* always up */
}

const sx_cpc_component_t sx_cpc_implicit = {
    .ep =
        {
            .name = "implicit",
            .id = SX_CPC_IMPLICIT,
            .ep_init_locked = implicit_ep_init,
            .start_connect_locked = implicit_start_connect,
        },
    .priority = 50,
    .query = implicit_query,
};
