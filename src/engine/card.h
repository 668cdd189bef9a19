/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The business card: what an engine tells its peers about itself, built
 * once at creation and handed out by sx_engine_address(); encoded, parsed
 * and checked here and nowhere else.
 *
 * The format, little-endian:
 *   0  u32 magic "SXC1"     4  u16 version (3)     6  u16 shard count
 *   8  u64 epoch            then per shard: u8 length, that many address bytes
 *   then the connection methods offered (u8 count, then per method
 *   u8 id, u8 priority, u8 blob length, blob)
 *   then the network transport the addresses belong to: u8 length, its
 *   name ("udp", "ofi"); u8 length, its variant ("" for udp, the provider
 *   for ofi)
 *   then authentication (SX_AUTH; shard/auth.h): u8 mode, 0 none; 1 a key
 *   given to the engine, then its u8[8] id; 2 the job's key, drawn by this
 *   engine (sx_engine_join takes rank 0's), then the u8[16] key
 * A card says how to reach each shard over the network transport and how
 * to set channels up; the epoch names this incarnation of the engine.
 * Version 3 added the transport, version 4 authentication; the addresses
 * stay where version 2 had them.
 *
 * Every byte of a card comes from outside: sx_card_parse checks lengths,
 * counts and names before it keeps anything, and refuses a card with a
 * reason in the log.
 *
 * Synchronization: sx_card_build at engine creation only; the rest from
 * any thread (sx_peer_add's path), reading only what creation wrote.
 */
#ifndef SX_ENGINE_CARD_H
#define SX_ENGINE_CARD_H

#include <stddef.h>
#include <stdint.h>

#include "cpc/cpc.h"
#include "shard/auth.h"
#include "shard/conn.h"

struct sx_engine;
struct sx_peer;

#define SX_CARD_NAME 32 /* room for a transport name or variant, with the NUL */

/* SX_AUTH as a card says it (the authentication section). */
enum { SX_CARD_AUTH_NONE = 0, SX_CARD_AUTH_KEY = 1, SX_CARD_AUTH_JOB = 2 };

/* The sections of a card after the offers, as parsed: the transport and
 * authentication. */
typedef struct sx_card_tl {
    char name[SX_CARD_NAME];
    char variant[SX_CARD_NAME];
    uint8_t auth;                      /* SX_CARD_AUTH_* */
    uint8_t auth_id[SX_AUTH_ID_LEN];   /* KEY */
    uint8_t auth_key[SX_AUTH_KEY_LEN]; /* JOB */
} sx_card_tl_t;

/** The most bytes a card of @p nshards shards can take: each address at
 *  its largest (SX_TL_ADDR_MAX), SX_CPC_MAX offers with the largest
 *  blobs, and the two names. */
size_t sx_card_cap(unsigned nshards);

/** Builds the engine's card into a buffer of sx_card_cap(nshards) bytes
 *  (engine->card); at creation, after the shards and the connection
 *  methods. SX_ERR_NO_MEMORY, with a log line, when it cannot. */
int sx_card_build(struct sx_engine *engine);

/**
 * Parses a peer's card of @p len bytes into a new, unpublished peer
 * (addresses and epoch set), its connection offers (room for SX_CPC_MAX)
 * and its transport section. SX_ERR_INVALID_PARAM, with a log line that
 * names the fault, for anything malformed; SX_ERR_NO_MEMORY.
 */
int sx_card_parse(struct sx_engine *engine, const uint8_t *card, size_t len,
                  struct sx_peer **peer_p, sx_conn_offer_t *offers, unsigned *noffers_p,
                  sx_card_tl_t *tl);

/**
 * Whether this engine's network transport reaches the peer of a parsed
 * card: the same transport and variant, and every address of a kind it
 * can use (BTL add_procs' reachability). SX_ERR_PEER_UNREACHABLE or
 * SX_ERR_INVALID_PARAM with a log line naming both sides.
 */
int sx_card_reachable(struct sx_engine *engine, const struct sx_peer *peer, const sx_card_tl_t *tl);

/**
 * Whether the peer of a parsed card and this engine agree on SX_AUTH:
 * both off, the same key (by id), or both taking the job's. SX_ERR_AUTH
 * with a log line that says which way they differ.
 */
int sx_card_auth_check(struct sx_engine *engine, const struct sx_peer *peer,
                       const sx_card_tl_t *tl);

/** Appends the offers section (u8 count, then per offer u8 id, u8
 *  priority, u8 blob length, blob) for @p cpc's components. Returns the
 *  bytes written, or 0 if @p cap is too small. */
size_t sx_card_offers_write(const sx_cpc_t *cpc, uint8_t *out, size_t cap);

/** Parses an offers section at @p in into @p offers (room for SX_CPC_MAX;
 *  a card may carry more, and components unknown here, as card.c says);
 *  returns bytes consumed or 0 for a malformed section. */
size_t sx_card_offers_parse(const uint8_t *in, size_t len, sx_conn_offer_t *offers,
                            unsigned *count_p);

#endif /* SX_ENGINE_CARD_H */
