/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The messages of a shared get (btl_shardx_split.c): what a getter sends
 * the data's owner. Its own header so that the test that forges them
 * (tests/sxt_forge.c) sends exactly what the component parses.
 *
 * SHARDX_TAG_SPLIT_ASK and _DONE are this BTL's own tags, in the range
 * Open MPI keeps for BTLs (MCA_BTL_TAG_BTL..MCA_BTL_TAG_PML - 1, from
 * opal/mca/btl/btl.h, which the includer brings; vader has +3).
 */
#ifndef MCA_BTL_SHARDX_SPLIT_H
#define MCA_BTL_SHARDX_SPLIT_H

#include <stdint.h>

#define SHARDX_TAG_SPLIT_ASK  (MCA_BTL_TAG_BTL + 8)
#define SHARDX_TAG_SPLIT_DONE (MCA_BTL_TAG_BTL + 9)
#define SHARDX_SPLIT_VERSION  1u

/* SHARDX_TAG_SPLIT_ASK's payload, in the sender's byte order (both ranks
 * are on one host). The owner takes it only when it is exactly this long
 * and every field passes the checks of btl_shardx_split.c (help_run,
 * peer_board); otherwise it counts it (cma_help_refused) and the getter
 * copies alone. */
struct mca_btl_shardx_split_ask {
    uint32_t version;
    uint32_t pid; /* the getter's */
    int32_t fd;   /* the getter's board */
    uint32_t slot;
    uint64_t cookie;
    uint32_t gen;
    uint32_t nchunks;
    uint64_t chunk;
    uint64_t size;
    uint64_t dst; /* the getter's buffer, its address */
    uint64_t src; /* the data, the owner's address */
};

#endif
