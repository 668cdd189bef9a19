/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Connection pseudo-components (CPCs), in the shape of Open MPI's openib
 * CPCs (../shared/seeds/openib_cpc_connect.h.txt): a component is a way of
 * setting up channels; an engine asks each compiled-in component whether
 * it can run (init) and for a module per shard interface (query); each
 * module has a priority (0-100) and a blob for the business card. A peer's
 * channels use the component with the highest priority that both cards
 * offer; the priority of a pair is the higher of the two sides', ties go
 * to the higher component id, so both ends choose the same one.
 *
 *   implicit   (priority 50) nothing to exchange: the card says everything
 *              and the first data packet sets the channel up. Both ends
 *              must use the same SX_SEQ_START.
 *   handshake  (priority 80) CONNECT / ACCEPT / ACK over the datagram
 *              transport, with retries: exchanges initial sequence numbers,
 *              windows and datagram sizes, then probes the path with an
 *              MTU-sized datagram, so a dead address or a path that drops
 *              large datagrams is reported with a diagnosis instead of
 *              retransmitted forever. Stale incarnations are told so
 *              (RESET) and fail fast.
 *   oob        (priority 30) the same exchange over the OOB (TCP); offered
 *              only when the engine has an OOB endpoint (started by sx_run,
 *              or SX_CPC names oob).
 *   rdmacm     (priority 90) for the verbs transport: librdmacm resolves
 *              the path to the peer's queue pair (SIDR over RDMA_PS_UDP;
 *              across IB subnets and on RoCE the card's static GID and LID
 *              are not a path), then the handshake's exchange runs over
 *              it. Offered only when the engine runs verbs and librdmacm
 *              works here (rdmacm.c, rdmacm.h).
 *
 * SX_CPC=a,b keeps only the named components; SX_CPC=^a,b drops them.
 * Unknown names are an error; a name this build lacks (rdmacm without
 * librdmacm) is known, and dropped with a warning when named. The self peer (this engine) always
 * uses implicit over the self transport: there is no path to probe.
 *
 * Channels connect lazily: the first operation queued on a channel that is
 * not up starts its method's connect; operations wait on the channel until
 * it is up, or complete with its error. The exchange itself (CONNECT,
 * ACCEPT, ACK, PROBE, RESET) is channel protocol: shard/conn.h. A
 * component is that header's method (sx_conn_ops_t: the slots a channel
 * calls) plus what the engine calls: init, query, peer_init, stop,
 * finalize. Components never see the engine: it gives them a narrow
 * context (sx_cpc_env_t) with what they need and nothing else.
 *
 * Synchronization: components and modules are set up at engine creation
 * and read-only afterwards. The endpoint slots (shard/conn.h) run with the
 * channel's shard token held (_locked). The OOB carrier's messages arrive
 * on the OOB thread, and rdmacm's answers on its own thread; both are
 * handed to the shard through env->submit (its inbox).
 */
#ifndef SX_CPC_CPC_H
#define SX_CPC_CPC_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bootstrap/oob.h"
#include "shard/conn.h"
#include "shard/inbox.h"
#include "shard/shard.h"
#include "transports/transport.h"

struct sx_peer;

#define SX_CPC_MAX 4 /* components compiled in, at most; offers in a card, at most */

typedef enum sx_cpc_id {
    SX_CPC_IMPLICIT = 1,
    SX_CPC_HANDSHAKE = 2,
    SX_CPC_OOB = 3,
    SX_CPC_RDMACM = 4,
} sx_cpc_id_t;

/*
 * What the engine gives its connection methods: a narrow context, never
 * the engine itself (DESIGN.md section 2, as nng keeps its transports from
 * calling back into the socket). Filled before sx_cpc_init, read-only
 * afterwards.
 */
typedef struct sx_cpc_env {
    const char *engine_name;    /* for log lines */
    const char *spec;           /* SX_CPC */
    const char *bind_addr;      /* SX_BIND_ADDR; may be NULL */
    unsigned rdmacm_port;       /* SX_RDMACM_PORT */
    unsigned nshards;           /* the engine's shards */
    sx_shard_t *const *shards;  /* [nshards]: their interfaces, read at init */
    const sx_tl_ops_t *net_ops; /* the network transport the shards run */
    sx_oob_t *oob;              /* the OOB endpoint; NULL without one, or once closed */
    const atomic_bool *closing; /* the engine's destruction has begun */
    /** Runs @p req on shard @p shard: token-or-delegate (sx_shard_submit_mpsc),
     *  under the global lock in SX_THREAD_MODE=global. Any thread; never
     *  waits. */
    void (*submit)(void *submit_arg, unsigned shard, sx_inbox_req_t *req);
    void *submit_arg;
} sx_cpc_env_t;

typedef struct sx_cpc_module sx_cpc_module_t;
typedef struct sx_cpc_inst sx_cpc_inst_t;

/** A component: a way of connecting. A const table each. */
typedef struct sx_cpc_component {
    /** Name, id, probe and the endpoint slots a channel calls
     *  (shard/conn.h); name and id also identify the component. */
    sx_conn_ops_t ep;
    uint8_t priority; /* 0-100 */
    /** Whether it can run at all: SX_ERR_UNSUPPORTED drops it quietly,
     *  other errors fail engine creation. May set inst->state. May be
     *  NULL (always). */
    int (*init)(sx_cpc_inst_t *inst);
    /** Fills @p module (already holding the component and shard) for one
     *  shard's network interface, including its card blob; or
     *  SX_ERR_UNSUPPORTED. Never NULL. */
    int (*query)(sx_cpc_inst_t *inst, sx_cpc_module_t *module);
    /** A peer chose this component: take what its offer (peer->conn_offer)
     *  says (oob: where its OOB endpoint listens). May be NULL. Any
     *  thread, under the engine's peer-add path. */
    int (*peer_init)(sx_cpc_inst_t *inst, struct sx_peer *peer);
    /** Stops what the component runs on threads of its own, so that
     *  nothing is handed to a shard any more: first at engine destruction,
     *  before the channels and shards go (rdmacm's thread). May be NULL;
     *  may be called more than once. */
    void (*stop)(sx_cpc_inst_t *inst);
    /** Undoes init (after stop). May be NULL. */
    void (*finalize)(sx_cpc_inst_t *inst);
} sx_cpc_component_t;

/** A component's module on one shard: its priority and card blob. */
struct sx_cpc_module {
    const sx_cpc_component_t *component;
    unsigned shard;
    uint8_t priority;
    uint8_t blob_len;
    uint8_t blob[SX_CONN_BLOB_MAX];
};

/** A component as one engine runs it. */
struct sx_cpc_inst {
    sx_conn_method_t method; /* what channels call: ops = &comp->ep, ctx = this */
    const sx_cpc_component_t *comp;
    const sx_cpc_env_t *env;
    void *state;           /* the component's own (rdmacm: its thread and queues) */
    sx_cpc_module_t *mods; /* [env->nshards] */
};

/** The instance behind a channel's method (an endpoint slot's argument). */
static inline sx_cpc_inst_t *sx_cpc_inst_of(const sx_conn_method_t *method)
{
    return (sx_cpc_inst_t *)method->ctx;
}

/** An engine's connection methods: those that run, in the order tried. */
typedef struct sx_cpc {
    sx_cpc_env_t env;
    unsigned n;
    sx_cpc_inst_t inst[SX_CPC_MAX];
    sx_cpc_inst_t self; /* implicit, for the self peer: there is no path to probe */
} sx_cpc_t;

extern const sx_cpc_component_t sx_cpc_implicit;
extern const sx_cpc_component_t sx_cpc_handshake;
extern const sx_cpc_component_t sx_cpc_oob;
/* Defined only when librdmacm and libibverbs were found at build time
 * (SX_HAVE_RDMACM && SX_HAVE_VERBS). */
extern const sx_cpc_component_t sx_cpc_rdmacm;

/**
 * Applies cpc->env.spec (SX_CPC), runs init and query of every component
 * that is left, and keeps the instances. SX_ERR_INVALID_PARAM, with a log
 * line, for an unknown name or a list that leaves nothing.
 */
int sx_cpc_init(sx_cpc_t *cpc);
/** Runs every component's stop slot; first thing at engine destruction. */
void sx_cpc_stop(sx_cpc_t *cpc);
void sx_cpc_fini(sx_cpc_t *cpc);

/** Whether SX_CPC asks for component @p name by name (an include list that
 *  names it). */
bool sx_cpc_requested(const char *spec, const char *name);

/** Whether SX_CPC asks for the oob component by name. */
bool sx_cpc_oob_requested(const char *spec);

/** Whether @p id names a component this build knows of, built or not. */
bool sx_cpc_known(uint8_t id);

/**
 * Chooses the component for @p peer from its offers and records it (and
 * the blob of the peer's offer) on the peer. SX_ERR_UNSUPPORTED, with a
 * log line listing both sides' offers, when there is none in common.
 */
int sx_cpc_select(sx_cpc_t *cpc, struct sx_peer *peer, const sx_conn_offer_t *offers,
                  unsigned count);

/** Name of component @p id, or "unknown". */
const char *sx_cpc_name(uint8_t id);

#endif /* SX_CPC_CPC_H */
