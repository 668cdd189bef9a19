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
 * not up starts the module's connect; operations wait on the channel until
 * it is up, or complete with its error.
 *
 * Synchronization: components and modules are set up at engine creation
 * and read-only afterwards. The endpoint slots run with the channel's
 * shard token held (_locked). The OOB carrier's messages arrive on the OOB
 * thread, and rdmacm's answers on its own thread; both are delegated to
 * the shard through its inbox.
 */
#ifndef SX_CPC_CPC_H
#define SX_CPC_CPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sx_engine;
struct sx_chan;
struct sx_peer;
struct sx_shard;
struct sx_wire_hdr;

#define SX_CPC_MAX      4  /* components compiled in, at most; offers in a card, at most */
#define SX_CPC_BLOB_MAX 64 /* bytes of a module's card blob */

typedef enum sx_cpc_id {
    SX_CPC_IMPLICIT = 1,
    SX_CPC_HANDSHAKE = 2,
    SX_CPC_OOB = 3,
    SX_CPC_RDMACM = 4,
} sx_cpc_id_t;

typedef struct sx_cpc_module sx_cpc_module_t;

/** A component: a way of connecting. A const table each. */
typedef struct sx_cpc_component {
    const char *name;
    uint8_t id;       /* sx_cpc_id_t; in cards */
    uint8_t priority; /* 0-100 */
    /** Whether it can run in @p engine at all: SX_ERR_UNSUPPORTED drops it
     *  quietly, other errors fail engine creation. May be NULL (always). */
    int (*init)(struct sx_engine *engine);
    /** Fills @p module (already holding the component and shard) for one
     *  shard's network interface, including its card blob; or
     *  SX_ERR_UNSUPPORTED. Never NULL. */
    int (*query)(struct sx_engine *engine, sx_cpc_module_t *module);
    /** A peer chose this component: take what its offer says (oob: where
     *  its OOB endpoint listens). May be NULL. Any thread, under the
     *  engine's peer-add path. */
    int (*peer_init)(struct sx_engine *engine, struct sx_peer *peer);
    /** Stops what the component runs on threads of its own, so that
     *  nothing is handed to a shard any more: first at engine destruction,
     *  before the channels and shards go (rdmacm's thread). May be NULL;
     *  may be called more than once. */
    void (*stop)(struct sx_engine *engine);
    /** Undoes init (after stop). May be NULL. */
    void (*finalize)(struct sx_engine *engine);

    /* Endpoint slots, called by the channel's shard token holder. */

    /** A channel chose this module: sets its initial connection state. */
    void (*ep_init_locked)(sx_cpc_module_t *module, struct sx_chan *chan);
    /** Work is queued on a channel that is not up: start connecting
     *  (sends, arms the retry timer). Never NULL. */
    void (*start_connect_locked)(sx_cpc_module_t *module, struct sx_chan *chan);
    /** The channel goes away: cancel timers. May be NULL. */
    void (*ep_finalize_locked)(sx_cpc_module_t *module, struct sx_chan *chan);
    /** Carries one control message (a whole packet, wire.h) to the
     *  channel's peer; never blocks; a lost message is retried by the
     *  exchange. NULL for components without one (implicit). */
    int (*send_ctrl_locked)(sx_cpc_module_t *module, struct sx_chan *chan, const uint8_t *data,
                            size_t len);
    /** Whether the exchange probes the path with an MTU-sized datagram
     *  (only a component that carries its messages over that path can). */
    bool probe;
} sx_cpc_component_t;

/** A component's instance on one shard. */
struct sx_cpc_module {
    const sx_cpc_component_t *component;
    struct sx_engine *engine;
    unsigned shard;
    uint8_t priority;
    uint8_t blob_len;
    uint8_t blob[SX_CPC_BLOB_MAX];
};

/** A peer's offer of one component, from its card. */
typedef struct sx_cpc_offer {
    uint8_t id;
    uint8_t priority;
    uint8_t blob_len;
    uint8_t blob[SX_CPC_BLOB_MAX];
} sx_cpc_offer_t;

extern const sx_cpc_component_t sx_cpc_implicit;
extern const sx_cpc_component_t sx_cpc_handshake;
extern const sx_cpc_component_t sx_cpc_oob;
/* Defined only when librdmacm and libibverbs were found at build time
 * (SX_HAVE_RDMACM && SX_HAVE_VERBS). */
extern const sx_cpc_component_t sx_cpc_rdmacm;

/**
 * Applies SX_CPC, runs init and query of every component that is left,
 * and keeps the modules in the engine. SX_ERR_INVALID_PARAM, with a log
 * line, for an unknown name or a list that leaves nothing.
 */
int sx_cpc_engine_init(struct sx_engine *engine);
/** Runs every component's stop slot; first thing at engine destruction. */
void sx_cpc_engine_stop(struct sx_engine *engine);
void sx_cpc_engine_fini(struct sx_engine *engine);

/** Whether SX_CPC asks for component @p name by name (an include list that
 *  names it). */
bool sx_cpc_requested(const char *spec, const char *name);

/** Whether SX_CPC asks for the oob component by name. */
bool sx_cpc_oob_requested(const char *spec);

/** Appends the engine's offers (shard 0's modules) to a card. Returns the
 *  bytes written, or 0 if @p cap is too small. */
size_t sx_cpc_card_write(struct sx_engine *engine, uint8_t *out, size_t cap);

/** Parses the offers section of a card at @p in into @p offers (room for
 *  SX_CPC_MAX; a card may carry more, and components unknown here, which
 *  are skipped as cpc_base.c says); returns bytes consumed or 0 for a
 *  malformed section. */
size_t sx_cpc_card_parse(const uint8_t *in, size_t len, sx_cpc_offer_t *offers, unsigned *count_p);

/**
 * Chooses the component for @p peer from its offers and records it (and
 * the blob of the peer's offer) on the peer. SX_ERR_UNSUPPORTED, with a
 * log line listing both sides' offers, when there is none in common.
 */
int sx_cpc_select(struct sx_engine *engine, struct sx_peer *peer, const sx_cpc_offer_t *offers,
                  unsigned count);

/** Name of component @p id, or "unknown". */
const char *sx_cpc_name(uint8_t id);

#endif /* SX_CPC_CPC_H */
